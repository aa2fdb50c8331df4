package capture

import (
	"fmt"

	"bitalign/internal/fp"
)

// DType is the element type of a captured tensor (bitalign/internal/fp defines it, with every dtype's bit
// layout, ULP and conversion rules). Its String form ("bf16", "f32", ...) is what the `dtype` column of a
// capture holds; see docs/capture-format.md.
type DType = fp.DType

// The dtypes a capture can hold. The zero value is invalid so that a forgotten field is caught on write.
const (
	InvalidDType = fp.InvalidDType
	BF16         = fp.BF16   // bfloat16: 1 sign, 8 exponent, 7 mantissa bits
	F16          = fp.F16    // IEEE 754 binary16
	F32          = fp.F32    // IEEE 754 binary32
	F64          = fp.F64    // IEEE 754 binary64
	I32          = fp.I32    // two's complement int32
	I64          = fp.I64    // two's complement int64
	U8           = fp.U8     // uint8
	Bool         = fp.Bool   // one byte per element, 0 or 1
	F8E4M3       = fp.F8E4M3 // float8 e4m3fn (OCP FP8, no infinities)
	F8E5M2       = fp.F8E5M2 // float8 e5m2 (OCP FP8)
)

// dtypeNames spells every dtype, the invalid one first, as String does (the fast index matches names without
// allocating); numDTypes bounds the valid ones.
var (
	dtypeNames = func() []string {
		n := []string{InvalidDType.String()}
		for _, d := range fp.DTypes() {
			n = append(n, d.String())
		}
		return n
	}()
	numDTypes = DType(len(dtypeNames))
)

// DTypes lists every valid dtype in a fixed order.
func DTypes() []DType { return fp.DTypes() }

// ParseDType parses a dtype name as String writes it.
func ParseDType(s string) (DType, error) {
	d, err := fp.ParseDType(s)
	if err != nil {
		return InvalidDType, fmt.Errorf("unknown dtype %q", truncate(s, 40))
	}
	return d, nil
}

// truncate shortens s for an error message so that hostile input cannot make errors huge.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
