package kernels

import (
	"unsafe"

	"bitalign/internal/fp"
)

// panelWidth is the number of columns of one packed weight panel (two 8-lane vectors).
const panelWidth = 16

// panelMinRows is the smallest M for which the panels are used: even at M = 1 packing costs no more than the
// scalar path (both about 4 GFLOP/s per core, bound by reading the weights), and f32 weights run at full speed.
const panelMinRows = 1

// matmulPanels computes columns [n0, n1) (a multiple of panelWidth wide) of all M rows with the SIMD FMA
// kernels: each lane of a vector is one output column, and each output's chains run over the same segments,
// in ascending k, from +0, with one fused multiply-add per step: the same bits as the scalar path. The panel
// of 16 weight rows is packed k-major once and reused for every row of x.
// tree8 says combine is TreeSum over 8 segments (canonical MatmulForward), which then runs on whole rows of partials.
// A bf16 weight is packed as its bits (half the bytes to move) and widened exactly in the registers by the BF16
// kernels, an f16 weight likewise by the F16 kernels (VCVTPH2PS) where the CPU has F16C, else widened while it
// is packed.
func matmulPanels(out, x []float32, w Weights, M, K, N, n0, n1 int, bounds []int, combine func([]float32) float32, tree8 bool, post epilogue) {
	S := len(bounds) - 1
	bits := w.dt == BF16 || w.dt == F16 && haveF16C // packed as 16-bit bits, widened in the registers
	var packed []float32
	var packedBits []uint16
	if bits {
		packedBits = make([]uint16, K*panelWidth+panelWidth) // +16: a valid pointer when K = 0
	} else {
		packed = make([]float32, K*panelWidth+panelWidth)
	}
	part := make([]float32, S*4*panelWidth) // part[s*64 + r*16 + j]
	tmp := make([]float32, S)
	for n := n0; n+panelWidth <= n1; n += panelWidth {
		if bits {
			packBitsPanel(packedBits, w.bits, K, n)
		} else {
			packPanel(packed, w, K, n)
		}
		m := 0
		for ; m+4 <= M; m += 4 {
			for s := 0; s < S; s++ {
				lo, hi := bounds[s], bounds[s+1]
				xp := &x[0]
				if len(x) > m*K+lo {
					xp = &x[m*K+lo]
				}
				switch {
				case w.dt == BF16:
					fmaPanel4x16BF16(xp, K, &packedBits[lo*panelWidth], hi-lo, &part[s*4*panelWidth])
				case bits:
					fmaPanel4x16F16(xp, K, &packedBits[lo*panelWidth], hi-lo, &part[s*4*panelWidth])
				default:
					fmaPanel4x16(xp, K, &packed[lo*panelWidth], hi-lo, &part[s*4*panelWidth])
				}
			}
			if tree8 {
				// the canonical tree over the 8 segment rows of 4×16 partials, all 64 outputs at once
				const L = 4 * panelWidth
				TreeSumRows(part[:Segments*L], Segments, L)
				for i, y := range part[:L] {
					r, j := i/panelWidth, i%panelWidth
					out[(m+r)*N+n+j] = post.apply(n+j, y)
				}
				continue
			}
			for r := 0; r < 4; r++ {
				for j := 0; j < panelWidth; j++ {
					for s := 0; s < S; s++ {
						tmp[s] = part[s*4*panelWidth+r*panelWidth+j]
					}
					out[(m+r)*N+n+j] = post.apply(n+j, combine(tmp))
				}
			}
		}
		for ; m < M; m++ {
			for s := 0; s < S; s++ {
				lo, hi := bounds[s], bounds[s+1]
				xp := &x[0]
				if len(x) > m*K+lo {
					xp = &x[m*K+lo]
				}
				switch {
				case w.dt == BF16:
					fmaPanel1x16BF16(xp, &packedBits[lo*panelWidth], hi-lo, &part[s*panelWidth])
				case bits:
					fmaPanel1x16F16(xp, &packedBits[lo*panelWidth], hi-lo, &part[s*panelWidth])
				default:
					fmaPanel1x16(xp, &packed[lo*panelWidth], hi-lo, &part[s*panelWidth])
				}
			}
			for j := 0; j < panelWidth; j++ {
				for s := 0; s < S; s++ {
					tmp[s] = part[s*panelWidth+j]
				}
				out[m*N+n+j] = post.apply(n+j, combine(tmp))
			}
		}
	}
}

// packPanel packs weight rows [n, n+panelWidth) of the (?, K) matrix w (F32, or F16 without F16C) k-major into
// packed (packed[k*panelWidth + j] = w[n+j][k]), widening f16 values exactly.
func packPanel(packed []float32, w Weights, K, n int) {
	for j := 0; j < panelWidth; j++ {
		lo, hi := (n+j)*K, (n+j+1)*K
		if w.dt == F16 {
			for k, b := range w.bits[lo:hi] {
				packed[k*panelWidth+j] = fp.F16ToF32(b)
			}
			continue
		}
		for k, v := range w.f32[lo:hi] {
			packed[k*panelWidth+j] = v
		}
	}
}

// packBitsPanel is packPanel for bf16 or f16 bits, kept as bits (the kernels widen them): two columns per 32-bit
// store (little-endian: column j in the low half), from two weight rows read side by side.
func packBitsPanel(packed, bits []uint16, K, n int) {
	p32 := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(packed))), len(packed)/2)
	for j := 0; j < panelWidth; j += 2 {
		r0 := bits[(n+j)*K : (n+j+1)*K]
		r1 := bits[(n+j+1)*K : (n+j+2)*K][:len(r0)]
		d := p32[j/2:]
		for k, b := range r0 {
			d[k*(panelWidth/2)] = uint32(b) | uint32(r1[k])<<16
		}
	}
}
