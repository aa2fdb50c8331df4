//go:build !amd64

package kernels

// haveFMAPanels is false: the panel kernels exist only in matmul_amd64.s.
var haveFMAPanels = false

// haveF16C is false: see haveFMAPanels.
var haveF16C = false

func fmaPanel4x16(x *float32, ldx int, panel *float32, klen int, acc *float32) {
	panic("kernels: fmaPanel4x16 without AVX2")
}

func fmaPanel1x16(x *float32, panel *float32, klen int, acc *float32) {
	panic("kernels: fmaPanel1x16 without AVX2")
}

func fmaPanel4x16BF16(x *float32, ldx int, panel *uint16, klen int, acc *float32) {
	panic("kernels: fmaPanel4x16BF16 without AVX2")
}

func fmaPanel1x16BF16(x *float32, panel *uint16, klen int, acc *float32) {
	panic("kernels: fmaPanel1x16BF16 without AVX2")
}

func fmaPanel4x16F16(x *float32, ldx int, panel *uint16, klen int, acc *float32) {
	panic("kernels: fmaPanel4x16F16 without AVX2")
}

func fmaPanel1x16F16(x *float32, panel *uint16, klen int, acc *float32) {
	panic("kernels: fmaPanel1x16F16 without AVX2")
}
