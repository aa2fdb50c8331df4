#include "textflag.h"

// expAVX2 is math's exp_amd64.s (its avxfma path) four lanes at a time: see exp_amd64.go. Each constant is
// stored four times so that it can be a 256-bit memory operand.
#define C4X(off, v) DATA expc<>+(off+0)(SB)/8, v; DATA expc<>+(off+8)(SB)/8, v; DATA expc<>+(off+16)(SB)/8, v; DATA expc<>+(off+24)(SB)/8, v

C4X(0, $1.4426950408889634073599246810018920)              // LOG2E
C4X(32, $6755399441055744.0)                               // 1.5·2^52: rounds to an integer, ties to even
C4X(64, $0.69314718055966295651160180568695068359375)      // LN2U
C4X(96, $0.28235290563031577122588448175013436025525412068e-12) // LN2L
C4X(128, $0.0625)
C4X(160, $2.4801587301587301587e-5)
C4X(192, $1.9841269841269841270e-4)
C4X(224, $1.3888888888888888889e-3)
C4X(256, $8.3333333333333333333e-3)
C4X(288, $4.1666666666666666667e-2)
C4X(320, $1.6666666666666666667e-1)
C4X(352, $0.5)
C4X(384, $1.0)
C4X(416, $2.0)
C4X(448, $1023)                                            // the exponent's bias, as a 64-bit integer
C4X(480, $700.0)                                           // expLimit
C4X(512, $0x7fffffffffffffff)                              // all but the sign bit
GLOBL expc<>(SB), RODATA|NOPTR, $544

// func expAVX2(dst, src []float64) (outside bool)
// dst[i] = exp(src[i]) for i < len(dst) &^ 3 where src[i] is in [−expLimit, expLimit]; outside reports an
// argument that is not (NaN included), whose dst is garbage for the caller to fix.
TEXT ·expAVX2(SB), NOSPLIT, $0-49
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	VXORPD Y6, Y6, Y6                   // OR of the lanes outside [−expLimit, expLimit]
	SHRQ $2, CX
	JZ   done

loop:
	VMOVUPD (SI), Y0                    // x
	VANDPD  expc<>+512(SB), Y0, Y4      // |x|
	VCMPPD  $6, expc<>+480(SB), Y4, Y4  // !(|x| <= expLimit): NLE_UQ, true for NaN
	VORPD   Y4, Y6, Y6
	VMULPD  expc<>+0(SB), Y0, Y1        // x·log2e
	VADDPD  expc<>+32(SB), Y1, Y1       // t: k in its low mantissa bits
	VSUBPD  expc<>+32(SB), Y1, Y2       // k = round(x·log2e), as CVTSD2SL/CVTSL2SD
	VPADDQ  expc<>+448(SB), Y1, Y3
	VPSLLQ  $52, Y3, Y3                 // 2^k: (k + 1023) << 52 (the rest of t's bits shift out)
	VFNMADD231PD expc<>+64(SB), Y2, Y0  // x − k·LN2U
	VFNMADD231PD expc<>+96(SB), Y2, Y0  // − k·LN2L
	VMULPD  expc<>+128(SB), Y0, Y0      // reduce: r/16
	VMOVUPD expc<>+160(SB), Y1          // Taylor series
	VFMADD213PD expc<>+192(SB), Y0, Y1
	VFMADD213PD expc<>+224(SB), Y0, Y1
	VFMADD213PD expc<>+256(SB), Y0, Y1
	VFMADD213PD expc<>+288(SB), Y0, Y1
	VFMADD213PD expc<>+320(SB), Y0, Y1
	VFMADD213PD expc<>+352(SB), Y0, Y1
	VFMADD213PD expc<>+384(SB), Y0, Y1
	VMULPD  Y1, Y0, Y0
	VADDPD  expc<>+416(SB), Y0, Y1      // four squarings
	VMULPD  Y1, Y0, Y0
	VADDPD  expc<>+416(SB), Y0, Y1
	VMULPD  Y1, Y0, Y0
	VADDPD  expc<>+416(SB), Y0, Y1
	VMULPD  Y1, Y0, Y0
	VADDPD  expc<>+416(SB), Y0, Y1
	VFMADD213PD expc<>+384(SB), Y1, Y0
	VMULPD  Y3, Y0, Y0                  // · 2^k
	VMOVUPD Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VPTEST  Y6, Y6
	SETNE   outside+48(FP)
	VZEROUPPER
	RET
