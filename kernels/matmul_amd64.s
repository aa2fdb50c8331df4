#include "textflag.h"

// func fmaPanel4x16(x *float32, ldx int, panel *float32, klen int, acc *float32)
//
// Four rows of x (row stride ldx floats) times a packed 16-column weight panel (panel[k*16 + j]): for each
// of the 4×16 outputs, one FMA chain from +0 over k = 0..klen-1 in ascending order (VFMADD231PS is an IEEE
// fused multiply-add per lane, the same bits as FMA32). acc[r*16 + j] receives the chain of row r, column j.
TEXT ·fmaPanel4x16(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ ldx+8(FP), R8
	SHLQ $2, R8
	MOVQ panel+16(FP), DI
	MOVQ klen+24(FP), CX
	MOVQ acc+32(FP), DX
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	TESTQ CX, CX
	JEQ store4

loop4:
	VMOVUPS (DI), Y8
	VMOVUPS 32(DI), Y9
	VBROADCASTSS (SI)(AX*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VBROADCASTSS (R9)(AX*1), Y11
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VBROADCASTSS (R10)(AX*1), Y12
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VBROADCASTSS (R11)(AX*1), Y13
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ $4, AX
	ADDQ $64, DI
	DECQ CX
	JNZ loop4

store4:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VZEROUPPER
	RET

// func fmaPanel1x16(x *float32, panel *float32, klen int, acc *float32)
//
// fmaPanel4x16 for one row: acc[j] receives the chain of column j.
TEXT ·fmaPanel1x16(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ panel+8(FP), DI
	MOVQ klen+16(FP), CX
	MOVQ acc+24(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	TESTQ CX, CX
	JEQ store1

loop1:
	VBROADCASTSS (SI), Y10
	VFMADD231PS (DI), Y10, Y0
	VFMADD231PS 32(DI), Y10, Y1
	ADDQ $4, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop1

store1:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VZEROUPPER
	RET

// func fmaPanel4x16BF16(x *float32, ldx int, panel *uint16, klen int, acc *float32)
//
// fmaPanel4x16 on a panel of bf16 bits (panel[k*16 + j], 32 bytes per k): each weight is widened exactly
// (zero-extend to 32 bits, shift left 16: fp.BF16ToF32) in the register before the same FMAs.
TEXT ·fmaPanel4x16BF16(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ ldx+8(FP), R8
	SHLQ $2, R8
	MOVQ panel+16(FP), DI
	MOVQ klen+24(FP), CX
	MOVQ acc+32(FP), DX
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	TESTQ CX, CX
	JEQ store4b

loop4b:
	VPMOVZXWD (DI), Y8
	VPSLLD $16, Y8, Y8
	VPMOVZXWD 16(DI), Y9
	VPSLLD $16, Y9, Y9
	VBROADCASTSS (SI)(AX*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VBROADCASTSS (R9)(AX*1), Y11
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VBROADCASTSS (R10)(AX*1), Y12
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VBROADCASTSS (R11)(AX*1), Y13
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ $4, AX
	ADDQ $32, DI
	DECQ CX
	JNZ loop4b

store4b:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VZEROUPPER
	RET

// func fmaPanel1x16BF16(x *float32, panel *uint16, klen int, acc *float32)
//
// fmaPanel1x16 on a panel of bf16 bits (see fmaPanel4x16BF16).
TEXT ·fmaPanel1x16BF16(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ panel+8(FP), DI
	MOVQ klen+16(FP), CX
	MOVQ acc+24(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	TESTQ CX, CX
	JEQ store1b

loop1b:
	VPMOVZXWD (DI), Y8
	VPSLLD $16, Y8, Y8
	VPMOVZXWD 16(DI), Y9
	VPSLLD $16, Y9, Y9
	VBROADCASTSS (SI), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop1b

store1b:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VZEROUPPER
	RET

// func fmaPanel4x16F16(x *float32, ldx int, panel *uint16, klen int, acc *float32)
//
// fmaPanel4x16 on a panel of f16 bits (panel[k*16 + j], 32 bytes per k): each weight is widened exactly in the
// register (VCVTPH2PS, F16C: every half is a float32, subnormals included; fp.F16ToF32) before the same FMAs.
TEXT ·fmaPanel4x16F16(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ ldx+8(FP), R8
	SHLQ $2, R8
	MOVQ panel+16(FP), DI
	MOVQ klen+24(FP), CX
	MOVQ acc+32(FP), DX
	LEAQ (SI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	TESTQ CX, CX
	JEQ store4h

loop4h:
	VCVTPH2PS (DI), Y8
	VCVTPH2PS 16(DI), Y9
	VBROADCASTSS (SI)(AX*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	VBROADCASTSS (R9)(AX*1), Y11
	VFMADD231PS Y8, Y11, Y2
	VFMADD231PS Y9, Y11, Y3
	VBROADCASTSS (R10)(AX*1), Y12
	VFMADD231PS Y8, Y12, Y4
	VFMADD231PS Y9, Y12, Y5
	VBROADCASTSS (R11)(AX*1), Y13
	VFMADD231PS Y8, Y13, Y6
	VFMADD231PS Y9, Y13, Y7
	ADDQ $4, AX
	ADDQ $32, DI
	DECQ CX
	JNZ loop4h

store4h:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VZEROUPPER
	RET

// func fmaPanel1x16F16(x *float32, panel *uint16, klen int, acc *float32)
//
// fmaPanel1x16 on a panel of f16 bits (see fmaPanel4x16F16).
TEXT ·fmaPanel1x16F16(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ panel+8(FP), DI
	MOVQ klen+16(FP), CX
	MOVQ acc+24(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	TESTQ CX, CX
	JEQ store1h

loop1h:
	VCVTPH2PS (DI), Y8
	VCVTPH2PS 16(DI), Y9
	VBROADCASTSS (SI), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y1
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop1h

store1h:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VZEROUPPER
	RET
