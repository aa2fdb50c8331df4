package fp

import "fmt"

// DType is the element type of a tensor. Its String form ("bf16", "f32", ...) is what the `dtype` column of
// a capture holds (docs/capture-format.md); capture.DType and kernels.DType are this type.
type DType uint8

// The dtypes. The zero value is invalid so that a forgotten field is caught on write.
const (
	InvalidDType DType = iota
	BF16               // bfloat16: 1 sign, 8 exponent, 7 mantissa bits
	F16                // IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits
	F32                // IEEE 754 binary32: 1 sign, 8 exponent, 23 mantissa bits
	F64                // IEEE 754 binary64: 1 sign, 11 exponent, 52 mantissa bits
	I32                // two's complement int32
	I64                // two's complement int64
	U8                 // uint8
	Bool               // one byte per element, 0 or 1
	F8E4M3             // float8 e4m3fn (OCP FP8): 1 sign, 4 exponent, 3 mantissa bits, no infinities
	F8E5M2             // float8 e5m2 (OCP FP8): 1 sign, 5 exponent, 2 mantissa bits
	numDTypes
)

var dtypeNames = [numDTypes]string{
	InvalidDType: "invalid",
	BF16:         "bf16",
	F16:          "f16",
	F32:          "f32",
	F64:          "f64",
	I32:          "i32",
	I64:          "i64",
	U8:           "u8",
	Bool:         "bool",
	F8E4M3:       "f8e4m3",
	F8E5M2:       "f8e5m2",
}

// DTypes lists every valid dtype in a fixed order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := BF16; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// String returns the dtype's name: "bf16", "f16", "f32", "f64", "i32", "i64", "u8", "bool", "f8e4m3",
// "f8e5m2" ("invalid" for the zero value).
func (d DType) String() string {
	if d < numDTypes {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element; 0 for an invalid dtype.
func (d DType) Size() int {
	if d.Valid() {
		return formats[d].Size
	}
	return 0
}

// Valid reports whether d is one of the defined dtypes.
func (d DType) Valid() bool { return d > InvalidDType && d < numDTypes }

// IsFloat reports whether d is a floating-point type (bf16, f16, f32, f64, f8e4m3, f8e5m2).
func (d DType) IsFloat() bool { return d.Valid() && formats[d].Kind == KindFloat }

// ParseDType parses a dtype name as String writes it.
func ParseDType(s string) (DType, error) {
	for d := BF16; d < numDTypes; d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	if len(s) > 40 { // hostile input must not make errors huge
		s = s[:40] + "..."
	}
	return InvalidDType, fmt.Errorf("fp: unknown dtype %q", s)
}

// MarshalText implements encoding.TextMarshaler (dtypes appear by name in JSON).
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("fp: invalid dtype %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
