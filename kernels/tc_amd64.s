#include "textflag.h"

// func tcProducts16(ae, am, be, bm *int16, xc int32) (e int32, sum int64)
//
// The product half of one tc k-step (kernels.tcStep, docs/arithmetic.md tc.1) on 16 decoded bf16 pairs, AVX2:
// x_j = ae_j + be_j (nominal exponents), e = max(xc, max_j x_j), and sum = Σ_j sign(p_j)·((|p_j| << 11) >> (e − x_j))
// with p_j = am_j·bm_j (exact: |p_j| < 2^16). VPSRLVD gives 0 for counts of 32 or more, as the scalar code's
// clamp does (every aligned value is below 2^27); VPSIGND applies p_j's sign (0 for a zero product). The 16
// terms add exactly in int32 (each below 2^27 in magnitude).
TEXT ·tcProducts16(SB), NOSPLIT, $0-56
	MOVQ ae+0(FP), SI
	MOVQ am+8(FP), DI
	MOVQ be+16(FP), R8
	MOVQ bm+24(FP), R9
	MOVL xc+32(FP), AX

	VPMOVSXWD (SI), Y0   // ae lanes 0..7
	VPMOVSXWD 16(SI), Y1 // ae lanes 8..15
	VPMOVSXWD (R8), Y2
	VPMOVSXWD 16(R8), Y3
	VPADDD Y2, Y0, Y0    // x, lanes 0..7
	VPADDD Y3, Y1, Y1    // x, lanes 8..15

	VPMAXSD Y1, Y0, Y4   // E = max over the 16 lanes
	VEXTRACTI128 $1, Y4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $0x4E, X4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $0xB1, X4, X5
	VPMAXSD X5, X4, X4
	VMOVD X4, BX
	CMPL AX, BX
	CMOVLGT AX, BX       // BX = max(xc, E)
	MOVL BX, e+40(FP)
	VMOVD BX, X6
	VPBROADCASTD X6, Y6
	VPSUBD Y0, Y6, Y0    // d = E − x, lanes 0..7
	VPSUBD Y1, Y6, Y1    // lanes 8..15

	VPMOVSXWD (DI), Y2   // am
	VPMOVSXWD 16(DI), Y3
	VPMOVSXWD (R9), Y4   // bm
	VPMOVSXWD 16(R9), Y5
	VPMULLD Y4, Y2, Y2   // p = am·bm
	VPMULLD Y5, Y3, Y3
	VPABSD Y2, Y4
	VPABSD Y3, Y5
	VPSLLD $11, Y4, Y4
	VPSLLD $11, Y5, Y5
	VPSRLVD Y0, Y4, Y4   // |p| << 11 >> d: truncated toward zero
	VPSRLVD Y1, Y5, Y5
	VPSIGND Y2, Y4, Y4   // the sign of p
	VPSIGND Y3, Y5, Y5

	VPADDD Y5, Y4, Y4    // Σ
	VEXTRACTI128 $1, Y4, X5
	VPADDD X5, X4, X4
	VPSHUFD $0x4E, X4, X5
	VPADDD X5, X4, X4
	VPSHUFD $0xB1, X4, X5
	VPADDD X5, X4, X4
	VMOVD X4, CX
	MOVLQSX CX, CX
	MOVQ CX, sum+48(FP)
	VZEROUPPER
	RET
