package capture

import "fmt"

// DType is the element type of a captured tensor. Its String form ("bf16", "f32", ...) is what the `dtype`
// column of a capture holds; see docs/capture-format.md.
type DType uint8

// The dtypes a capture can hold. The zero value is invalid so that a forgotten field is caught on write.
const (
	InvalidDType DType = iota
	BF16               // bfloat16: 1 sign, 8 exponent, 7 mantissa bits
	F16                // IEEE 754 binary16
	F32                // IEEE 754 binary32
	F64                // IEEE 754 binary64
	I32                // two's complement int32
	I64                // two's complement int64
	U8                 // uint8
	Bool               // one byte per element, 0 or 1
	F8E4M3             // float8 e4m3fn (OCP FP8, no infinities)
	F8E5M2             // float8 e5m2 (OCP FP8)
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

var dtypeSizes = [numDTypes]int{0, 2, 2, 4, 8, 4, 8, 1, 1, 1, 1}

// DTypes lists every valid dtype in a fixed order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := BF16; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// String returns the dtype's name in captures: "bf16", "f16", "f32", "f64", "i32", "i64", "u8", "bool",
// "f8e4m3", "f8e5m2".
func (d DType) String() string {
	if d < numDTypes {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element; 0 for an invalid dtype.
func (d DType) Size() int {
	if d < numDTypes {
		return dtypeSizes[d]
	}
	return 0
}

// Valid reports whether d is one of the defined dtypes.
func (d DType) Valid() bool { return d > InvalidDType && d < numDTypes }

// IsFloat reports whether d is a floating-point type (bf16, f16, f32, f64, f8e4m3, f8e5m2).
func (d DType) IsFloat() bool {
	switch d {
	case BF16, F16, F32, F64, F8E4M3, F8E5M2:
		return true
	}
	return false
}

// ParseDType parses a dtype name as String writes it.
func ParseDType(s string) (DType, error) {
	for d := BF16; d < numDTypes; d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q", truncate(s, 40))
}

// MarshalText implements encoding.TextMarshaler (dtypes appear by name in JSON).
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("capture: invalid dtype %d", uint8(d))
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

// truncate shortens s for an error message so that hostile input cannot make errors huge.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
