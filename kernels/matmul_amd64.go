package kernels

import "golang.org/x/sys/cpu"

// haveFMAPanels: the AVX2+FMA panel kernels of matmul_amd64.s can run here.
var haveFMAPanels = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// haveF16C: VCVTPH2PS is there, so the panels may hold f16 weights as bits (fmaPanel*F16); without it an f16
// weight is widened while its panel is packed.
var haveF16C = cpu.X86.HasF16C

//go:noescape
func fmaPanel4x16(x *float32, ldx int, panel *float32, klen int, acc *float32)

//go:noescape
func fmaPanel1x16(x *float32, panel *float32, klen int, acc *float32)

//go:noescape
func fmaPanel4x16BF16(x *float32, ldx int, panel *uint16, klen int, acc *float32)

//go:noescape
func fmaPanel1x16BF16(x *float32, panel *uint16, klen int, acc *float32)

//go:noescape
func fmaPanel4x16F16(x *float32, ldx int, panel *uint16, klen int, acc *float32)

//go:noescape
func fmaPanel1x16F16(x *float32, panel *uint16, klen int, acc *float32)
