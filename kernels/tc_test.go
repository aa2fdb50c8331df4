package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// tcCase is one random k-step: 16 bf16 pairs and c.
func tcCase(r *rand.Rand, regime int) (a, b [16]uint16, c float32) {
	cbits := func(lo, hi int) float32 {
		return math.Float32frombits(uint32(r.IntN(2))<<31 | uint32(lo+r.IntN(hi-lo+1))<<23 | uint32(r.IntN(1<<23)))
	}
	for j := range a {
		switch regime {
		case 0: // narrow exponents
			a[j], b[j] = randBF16Bits(r, 124, 131), randBF16Bits(r, 124, 131)
		case 1: // wide spread: alignment drops whole products
			a[j], b[j] = randBF16Bits(r, 90, 160), randBF16Bits(r, 110, 140)
		case 2: // subnormal inputs and products
			a[j], b[j] = uint16(r.IntN(2))<<15|uint16(r.IntN(128)), randBF16Bits(r, 1, 200)
			if r.IntN(2) == 0 {
				a[j] = randBF16Bits(r, 1, 60)
			}
		case 3: // cancellation: pairs that nearly cancel, c = −a0·b0 or nearly
			if j%2 == 0 {
				a[j], b[j] = randBF16Bits(r, 120, 134), randBF16Bits(r, 120, 134)
			} else {
				a[j], b[j] = a[j-1]^uint16(r.IntN(4)), b[j-1]^0x8000
			}
		case 4: // overflow range
			a[j], b[j] = randBF16Bits(r, 190, 254), randBF16Bits(r, 190, 254)
		case 5: // zeros (both signs) sprinkled
			a[j], b[j] = randBF16Bits(r, 120, 134), randBF16Bits(r, 120, 134)
			if r.IntN(3) == 0 {
				a[j] = uint16(r.IntN(2)) << 15
			}
		default: // raw finite bit patterns
			for {
				a[j], b[j] = uint16(r.Uint32()), uint16(r.Uint32())
				if a[j]&0x7F80 != 0x7F80 && b[j]&0x7F80 != 0x7F80 {
					break
				}
			}
		}
	}
	switch r.IntN(6) {
	case 0:
		c = 0
	case 1:
		c = math.Float32frombits(0x80000000) // −0
	case 2:
		c = math.Float32frombits(uint32(r.IntN(2))<<31 | uint32(r.IntN(1<<23))) // subnormal
	case 3:
		if regime == 3 {
			c = -FromBF16Bits(a[0]) * FromBF16Bits(b[0]) // exact
			break
		}
		fallthrough
	default:
		lo, hi := 100, 160
		if regime == 4 {
			lo, hi = 230, 254
		}
		if regime == 6 {
			lo, hi = 1, 254
		}
		c = cbits(lo, hi)
	}
	return a, b, c
}

// TestTCStepMatchesDot16: the decoded fast step gives MMABF16Dot16's bits on random and adversarial finite
// k-steps (alignment, cancellation, subnormals, overflow, signed zeros, raw bits) and on an Inf or NaN c.
func TestTCStepMatchesDot16(t *testing.T) {
	for _, avx := range []bool{false, true} {
		if avx && !haveTCAVX2 {
			t.Log("no AVX2 here: the scalar step only")
			continue
		}
		t.Run(fmt.Sprintf("avx2=%v", avx), func(t *testing.T) {
			defer func(v bool) { haveTCAVX2 = v }(haveTCAVX2)
			haveTCAVX2 = avx
			testTCStep(t)
		})
	}
}

func testTCStep(t *testing.T) {
	r := rand.New(rand.NewPCG(140, 141))
	n := 300000
	if testing.Short() {
		n = 50000
	}
	var ae, am, be, bm [16]int16
	for i := 0; i < n; i++ {
		a, b, c := tcCase(r, i%7)
		if i%997 == 0 {
			c = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}[i%3]
		}
		for j := range a {
			ae[j], am[j], _ = decodeBF16(a[j])
			be[j], bm[j], _ = decodeBF16(b[j])
		}
		want := MMABF16Dot16(&a, &b, c)
		got := tcStep(ae[:], am[:], be[:], bm[:], c)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d (regime %d): a %04X b %04X c %08X: tcStep %08X, MMABF16Dot16 %08X", i, i%7, a, b,
				math.Float32bits(c), math.Float32bits(got), math.Float32bits(want))
		}
	}
}

// tcRef is docs/arithmetic.md tc.2 written as plainly as possible, one output at a time, through
// MMABF16Dot16: the chains of TCBounds(l, K) (zero-padded steps), the tree or the one chain, bias, round_dt.
func tcRef(l TCLayout, dt DType, x, w, bias []float32, M, K, N int) []float32 {
	b, tree := TCBounds(l, K)
	out := make([]float32, M*N)
	for m := 0; m < M; m++ {
		for n := 0; n < N; n++ {
			var acc [Segments]float32
			for s := 0; s+1 < len(b); s++ {
				for k0 := b[s]; k0 < b[s+1]; k0 += 16 {
					var xa, wb [16]uint16
					for j := 0; j < 16 && k0+j < b[s+1]; j++ {
						xa[j], wb[j] = ToBF16Bits(x[m*K+k0+j]), ToBF16Bits(w[n*K+k0+j])
					}
					acc[s] = MMABF16Dot16(&xa, &wb, acc[s])
				}
			}
			y := acc[0]
			if tree {
				y = float32(float32(float32(acc[0]+acc[1])+float32(acc[2]+acc[3])) + float32(float32(acc[4]+acc[5])+float32(acc[6]+acc[7])))
			}
			if bias != nil {
				y = float32(y + bias[n])
			}
			out[m*N+n] = dt.Round(y)
		}
	}
	return out
}

// plantSpecials puts NaN, ±Inf and ±0 into a few elements of v (bf16 values all).
func plantSpecials(r *rand.Rand, v []float32, n int) {
	sp := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}
	for i := 0; i < n; i++ {
		v[r.IntN(len(v))] = sp[r.IntN(len(sp))]
	}
}

var tcShapes = [][3]int{{1, 1, 1}, {1, 16, 3}, {3, 17, 5}, {2, 100, 9}, {5, 128, 17}, {4, 130, 7}, {7, 1000, 13},
	{1, 1027, 11}, {9, 64, 33}, {2, 7, 2}}

// TestMatmulTCMatchesSpec: MatmulTC, both layouts, gives tcRef's bits over odd shapes (K not a multiple of 16
// or of 128: segments starting inside a 16-wide step, zero-padded tails), with and without bias, bf16 and f32
// outputs, and with NaN, ±Inf and ±0 planted in x or w (those rows' chains take the generic step).
func TestMatmulTCMatchesSpec(t *testing.T) {
	r := rand.New(rand.NewPCG(142, 143))
	for _, sh := range tcShapes {
		M, K, N := sh[0], sh[1], sh[2]
		for _, l := range []TCLayout{ColumnParallel, RowParallel} {
			for v := 0; v < 4; v++ {
				x, w, bias := randBF16(r, M*K, 1), randBF16(r, N*K, 0.05), randBF16(r, N, 0.1)
				dt := BF16
				switch v {
				case 1:
					bias, dt = nil, F32
				case 2:
					plantSpecials(r, x, 1+M*K/50)
				case 3:
					plantSpecials(r, w, 1+N*K/50)
				}
				got := make([]float32, M*N)
				if err := MatmulTC(l, dt, got, x, w, bias, M, K, N); err != nil {
					t.Fatal(err)
				}
				assertSame(t, fmt.Sprintf("%v M=%d K=%d N=%d variant %d", l, M, K, N, v), got, tcRef(l, dt, x, w, bias, M, K, N))
			}
		}
	}
}

// TestMatmulTCSpecials: planted NaN, Inf and ±0 give what tc.1 says: a NaN (or Inf·0) poisons exactly the
// outputs whose chains read it, an Inf gives that Inf, and zeros give +0, never −0.
func TestMatmulTCSpecials(t *testing.T) {
	const M, K, N = 3, 40, 4
	for _, l := range []TCLayout{ColumnParallel, RowParallel} {
		x, w := make([]float32, M*K), make([]float32, N*K)
		for i := range x {
			x[i] = 1
		}
		for i := range w {
			w[i] = 0.5
		}
		x[0*K+5] = float32(math.NaN())       // row 0: NaN everywhere
		x[1*K+7] = float32(math.Inf(1))      // row 1: +Inf times 0.5, except column 2 (Inf·0)
		w[2*K+7] = 0                         //
		neg := float32(math.Copysign(0, -1)) // row 2 against column 3: all −0 products
		for k := 0; k < K; k++ {
			x[2*K+k] = neg
		}
		out := make([]float32, M*N)
		if err := MatmulTC(l, F32, out, x, w, nil, M, K, N); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < N; n++ {
			if math.Float32bits(out[n]) != CanonicalNaN {
				t.Errorf("%v: row 0 (a NaN input), column %d: %08X, want the canonical NaN", l, n, math.Float32bits(out[n]))
			}
			want := float32(math.Inf(1))
			if n == 2 {
				want = math.Float32frombits(CanonicalNaN) // Inf·0
			}
			if math.Float32bits(out[N+n]) != math.Float32bits(want) {
				t.Errorf("%v: row 1, column %d: %08X, want %08X", l, n, math.Float32bits(out[N+n]), math.Float32bits(want))
			}
			if math.Float32bits(out[2*N+n]) != 0 {
				t.Errorf("%v: row 2 (−0 inputs), column %d: %08X, want +0", l, n, math.Float32bits(out[2*N+n]))
			}
		}
	}
}

// TestMatmulTCPartialNaNBits: an unrounded tc result's NaN is MMANaN, the bits the H200 leaves (tc.4): a NaN
// chain (the MMA's own NaN) and +Inf ⊕ −Inf between two segments' partials in the tree (the GPU's FADD gives
// 0x7FFFFFFF; Go's float32 add on amd64 gives 0xFFC00000, the first GPU run's only mismatch); after round_dt the
// same outputs are the canonical NaN.
func TestMatmulTCPartialNaNBits(t *testing.T) {
	const M, N, tp = 3, 2, 2
	const kl = 4 * 32 // 4 local segments of 32 (2 k-steps each)
	x, w := make([]float32, M*kl), make([]float32, N*kl)
	for i := range x {
		x[i] = 1
	}
	for i := range w {
		w[i] = 0.25
	}
	inf := float32(math.Inf(1))
	w[0*kl+3], w[0*kl+32+9] = inf, -inf // column 0: segment 0's chain is +Inf, segment 1's −Inf
	x[1*kl+70] = float32(math.NaN())    // row 1: a NaN in segment 2 (every column's chain)
	w[1*kl+100] = inf                   // column 1: +Inf in segment 3 only (no NaN for row 0, 2)
	out := make([]float32, M*N)
	if err := MatmulTCPartial(out, x, w, M, kl, N, tp); err != nil {
		t.Fatal(err)
	}
	want := []uint32{MMANaN, 0x7F800000, MMANaN, MMANaN, MMANaN, 0x7F800000}
	for i, u := range want {
		if got := math.Float32bits(out[i]); got != u {
			t.Errorf("MatmulTCPartial tp=%d: out[%d, %d] = %#08x, want %#08x", tp, i/N, i%N, got, u)
		}
	}
	// the control: the tree's plain float32 addition of the two infinite partials is a NaN of other bits where
	// the CPU's default NaN is not the GPU's (amd64: 0xFFC00000), which is what TCNaN maps
	pos, neg := float32(math.Inf(1)), float32(math.Inf(-1))
	if u := math.Float32bits(TreeSum([]float32{pos, neg, 1, 1})); u == MMANaN {
		t.Logf("this machine's float32 Inf − Inf is already %#08x: the mapping is not exercised by the control", u)
	} else if runtime.GOARCH == "amd64" && u != 0xFFC00000 {
		t.Errorf("amd64 Inf − Inf gave %#08x, want the x86 default NaN 0xFFC00000", u)
	}
	// the full row-parallel matmul rounds: every NaN output is the canonical one, in every dtype
	for _, dt := range []DType{F32, BF16} {
		full := make([]float32, M*N)
		if err := MatmulTC(RowParallel, dt, full, x, w, nil, M, kl, N); err != nil {
			t.Fatal(err)
		}
		for i := range full {
			if math.IsNaN(float64(full[i])) && math.Float32bits(full[i]) != CanonicalNaN {
				t.Errorf("MatmulTC row-parallel %v: out[%d] = %#08x, want the canonical NaN", dt, i, math.Float32bits(full[i]))
			}
		}
	}
}

// TestMatmulTCRefusesNonBF16: an operand that is not a bf16 value is an error naming it.
func TestMatmulTCRefusesNonBF16(t *testing.T) {
	x, w := []float32{1, 2, 0.1, 4}, []float32{1, 1, 1, 1}
	err := MatmulTC(ColumnParallel, BF16, make([]float32, 1), x, w, nil, 1, 4, 1)
	if err == nil || !strings.Contains(err.Error(), "x[0, 2]") || !strings.Contains(err.Error(), "not a bf16 value") {
		t.Fatalf("x with 0.1: %v", err)
	}
	if err := MatmulTCPartial(make([]float32, 1), w, w, 1, 4, 1, 3); err == nil {
		t.Fatal("tp = 3 accepted")
	}
}

// tcBound is the float64 reference's bound for a tc chain of n k-steps plus a tree of depth levels and a bias,
// relative to scale = Σ|x·w| + |bias|. Per step (tc.1, normal values): each of at most 17 terms loses less than
// 2^(E−25), and 2^E is at most the largest term's magnitude, so truncation costs < 17·2^−25 of the step's
// Σ|terms|; rounding toward zero costs < 2^−23 of the result. |acc| stays below Σ|x·w| of the steps so far,
// so n steps lose < n·21·2^−25 of scale; each RN addition of the tree and the bias < 2^−24.
func tcBound(n, levels int) float64 {
	return (float64(n)*21*0x1p-25 + float64(levels+1)*0x1p-24) * 1.01
}

// TestMatmulTCAccuracy: MatmulTC within tcBound of the float64 reference, and biased toward zero as RZ makes
// it (on positive dot products the tc result never exceeds the exact value by more than the tree's RN).
func TestMatmulTCAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(144, 145))
	for _, sh := range [][3]int{{1, 1, 1}, {3, 17, 9}, {5, 100, 17}, {1, 1027, 13}, {33, 257, 31}, {8, 4096, 8}} {
		M, K, N := sh[0], sh[1], sh[2]
		x, w, bias := randBF16(r, M*K, 1), randBF16(r, N*K, 0.05), randBF16(r, N, 0.1)
		ref, scale := matmulRef(x, w, bias, M, K, N)
		for _, l := range []TCLayout{ColumnParallel, RowParallel} {
			out := make([]float32, M*N)
			if err := MatmulTC(l, F32, out, x, w, bias, M, K, N); err != nil {
				t.Fatal(err)
			}
			steps, levels := (K+15)/16, 0
			if l == RowParallel {
				steps, levels = (K/8+1+15)/16+1, 3
			}
			checkClose(t, fmt.Sprintf("%v M=%d K=%d N=%d", l, M, K, N), out, ref, scale, tcBound(steps, levels))
		}
	}
	// all-positive products: every step truncates and rounds toward zero, so one chain never overshoots
	M, K, N := 4, 2048, 6
	x, w := make([]float32, M*K), make([]float32, N*K)
	for i := range x {
		x[i] = RoundBF16(float32(0.5 + r.Float64()))
	}
	for i := range w {
		w[i] = RoundBF16(float32(0.5 + r.Float64()))
	}
	ref, _ := matmulRef(x, w, nil, M, K, N)
	out := make([]float32, M*N)
	if err := MatmulTC(ColumnParallel, F32, out, x, w, nil, M, K, N); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if float64(out[i]) > ref[i] {
			t.Fatalf("positive dot product %d: tc %v above the exact %v (RZ and truncation only go down)", i, out[i], ref[i])
		}
	}
}

// tcSplitByM is the control: a tc matmul that splits a column-parallel K by M as vendor libraries do
// (StandardSplits(M) contiguous chunks, partials left to right). Same k-step, other chains.
func tcSplitByM(out, x, w []float32, M, K, N int) error {
	return matmulTC("tcSplitByM", out, x, WeightsF32(w), M, K, N, ChunkBounds(K, StandardSplits(M)), false, epilogue{dt: F32})
}

// TestMatmulTCBatchInvariance: a row's bits do not depend on M or its slot in the batch, for both layouts;
// the control that splits K by M fails the same check.
func TestMatmulTCBatchInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(146, 147))
	for _, kn := range [][2]int{{1000, 37}, {129, 64}, {64, 5}, {33, 3}} {
		K, N := kn[0], kn[1]
		const maxM = 40
		w := randBF16(r, N*K, 0.05)
		rows := randBF16(r, maxM*K, 1)
		for _, l := range []TCLayout{ColumnParallel, RowParallel} {
			single := make([]float32, maxM*N)
			for m := 0; m < maxM; m++ {
				if err := MatmulTC(l, F32, single[m*N:(m+1)*N], rows[m*K:(m+1)*K], w, nil, 1, K, N); err != nil {
					t.Fatal(err)
				}
			}
			for _, M := range []int{1, 2, 3, 7, 8, 17, 40} {
				x := make([]float32, M*K)
				for j := 0; j < M; j++ {
					src := (j + M/2) % maxM
					copy(x[j*K:(j+1)*K], rows[src*K:(src+1)*K])
				}
				out := make([]float32, M*N)
				if err := MatmulTC(l, F32, out, x, w, nil, M, K, N); err != nil {
					t.Fatal(err)
				}
				for j := 0; j < M; j++ {
					src := (j + M/2) % maxM
					assertSame(t, fmt.Sprintf("%v K=%d N=%d M=%d slot %d", l, K, N, M, j), out[j*N:(j+1)*N], single[src*N:(src+1)*N])
				}
			}
		}
		if K < 64 {
			continue
		}
		one, all := make([]float32, N), make([]float32, maxM*N)
		if err := tcSplitByM(one, rows[:K], w, 1, K, N); err != nil {
			t.Fatal(err)
		}
		if err := tcSplitByM(all, rows, w, maxM, K, N); err != nil {
			t.Fatal(err)
		}
		assertDiffers(t, fmt.Sprintf("tc split-K-by-M control K=%d N=%d row 0, M=1 vs M=%d", K, N, maxM), all[:N], one)
	}
}

// attentionTCRef is tc.3 written plainly through MMABF16Dot16 (one query row at a time), with chunks of 256 keys;
// attentionTCRefChunk with another chunk (a control: 1<<30 is one unchunked chain).
func attentionTCRef(dt DType, q, kc, vc []float32, qPos []int32, T, nh, nkv, hd int, scale float32) []float32 {
	return attentionTCRefChunk(dt, q, kc, vc, qPos, T, nh, nkv, hd, scale, 256)
}

func attentionTCRefChunk(dt DType, q, kc, vc []float32, qPos []int32, T, nh, nkv, hd int, scale float32, chunk int) []float32 {
	out := make([]float32, T*nh*hd)
	bf := ToBF16Bits
	for t := 0; t < T; t++ {
		P := int(qPos[t])
		for h := 0; h < nh; h++ {
			g := h / (nh / nkv)
			qv := q[(t*nh+h)*hd:]
			kv := func(j, i int) float32 { return kc[j*nkv*hd+g*hd+i] }
			vv := func(j, i int) float32 { return vc[j*nkv*hd+g*hd+i] }
			var M, L float32
			A := make([]float32, hd)
			for c0 := 0; c0 <= P; c0 += chunk { // chunks of keys, each from scratch, folded in order
				m, l := float32(math.Inf(-1)), float32(0)
				acc := make([]float32, hd)
				for blk := c0; blk <= min(P, c0+chunk-1); blk += 64 {
					end := min(blk+64, P+1)
					s := make([]float32, end-blk)
					for j := blk; j < end; j++ {
						d := float32(0)
						for i0 := 0; i0 < hd; i0 += 16 {
							var a, b [16]uint16
							for i := 0; i < 16; i++ {
								a[i], b[i] = bf(qv[i0+i]), bf(kv(j, i0+i))
							}
							d = MMABF16Dot16(&a, &b, d)
						}
						s[j-blk] = float32(d * scale)
					}
					bm := s[0]
					for _, v := range s[1:] {
						if v > bm {
							bm = v
						}
					}
					mn := m
					if bm > m {
						mn = bm
					}
					alpha := Exp(float32(m - mn))
					l = float32(l * alpha)
					for i := range acc {
						acc[i] = float32(acc[i] * alpha)
					}
					var p [64]uint16
					for j := blk; j < end; j++ {
						e := Exp(float32(s[j-blk] - mn))
						l = float32(l + e)
						p[j-blk] = bf(RoundBF16(e))
					}
					for i := 0; i < hd; i++ {
						for j0 := blk; j0 < blk+64; j0 += 16 {
							var a, b [16]uint16
							for jj := 0; jj < 16 && j0+jj < end; jj++ {
								a[jj], b[jj] = p[j0+jj-blk], bf(vv(j0+jj, i))
							}
							acc[i] = MMABF16Dot16(&a, &b, acc[i])
						}
					}
					m = mn
				}
				if c0 == 0 {
					M, L = m, l
					copy(A, acc)
					continue
				}
				mn := M
				if m > M {
					mn = m
				}
				a, b := Exp(float32(M-mn)), Exp(float32(m-mn))
				L = float32(float32(L*a) + float32(l*b))
				for i := range A {
					A[i] = float32(float32(A[i]*a) + float32(acc[i]*b))
				}
				M = mn
			}
			for i := range A {
				out[(t*nh+h)*hd+i] = dt.Round(A[i] / L)
			}
		}
	}
	return out
}

// TestAttentionTC: AttentionTC gives the plain tc.3 reference's bits (GQA, partial last blocks, several
// blocks), prefill equals one-row decode for every position bitwise, a NaN in a masked key's v (past the
// query's position) changes nothing while one inside poisons the row, and bad input is an error.
func TestAttentionTC(t *testing.T) {
	r := rand.New(rand.NewPCG(148, 149))
	for _, c := range []struct{ T, nh, nkv, hd int }{{5, 2, 1, 16}, {70, 4, 2, 32}, {130, 2, 2, 64}, {3, 8, 2, 128},
		{600, 2, 1, 16}} { // the last: three chunks of 256 keys, partial and whole, folded
		S := c.T
		q := randBF16(r, c.T*c.nh*c.hd, 1)
		kc := randBF16(r, S*c.nkv*c.hd, 1)
		vc := randBF16(r, S*c.nkv*c.hd, 1)
		pos := make([]int32, c.T)
		for i := range pos {
			pos[i] = int32(i)
		}
		scale := AttentionScale(c.hd)
		out := make([]float32, len(q))
		if err := AttentionTC(BF16, out, q, kc, vc, pos, c.T, S, c.nh, c.nkv, c.hd, scale); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("T=%d nh=%d nkv=%d hd=%d", c.T, c.nh, c.nkv, c.hd)
		assertSame(t, what+" vs the tc.3 reference", out, attentionTCRef(BF16, q, kc, vc, pos, c.T, c.nh, c.nkv, c.hd, scale))
		if c.T > AttentionTCChunk { // the fold is there: one unchunked chain gives other bits past the first chunk
			assertDiffers(t, what+": chunked vs one chain", out, attentionTCRefChunk(BF16, q, kc, vc, pos, c.T, c.nh, c.nkv, c.hd, scale, 1<<30))
		}
		row := c.nh * c.hd
		for tq := 0; tq < c.T; tq++ { // decode: one query row against the cache up to its position
			one := make([]float32, row)
			if err := AttentionTC(BF16, one, q[tq*row:(tq+1)*row], kc, vc, pos[tq:tq+1], 1, S, c.nh, c.nkv, c.hd, scale); err != nil {
				t.Fatal(err)
			}
			assertSame(t, fmt.Sprintf("%s: decode of row %d vs prefill", what, tq), one, out[tq*row:(tq+1)*row])
		}
		// a NaN in the v of the last key: masked for every query but the last
		vn := append([]float32(nil), vc...)
		vn[(S-1)*c.nkv*c.hd] = float32(math.NaN())
		outN := make([]float32, len(q))
		if err := AttentionTC(BF16, outN, q, kc, vn, pos, c.T, S, c.nh, c.nkv, c.hd, scale); err != nil {
			t.Fatal(err)
		}
		assertSame(t, what+": NaN in a masked key's v", outN[:(c.T-1)*row], out[:(c.T-1)*row])
		if math.Float32bits(outN[(c.T-1)*row]) != CanonicalNaN {
			t.Errorf("%s: NaN in an attended v gives %08X, want the canonical NaN", what, math.Float32bits(outN[(c.T-1)*row]))
		}
		assertSame(t, what+": NaN in v vs the reference", outN, attentionTCRef(BF16, q, kc, vn, pos, c.T, c.nh, c.nkv, c.hd, scale))
	}
	one := []float32{1}
	if err := AttentionTC(BF16, make([]float32, 8), make([]float32, 8), make([]float32, 8), make([]float32, 8), []int32{0}, 1, 1, 1, 1, 8, 1); err == nil {
		t.Error("head dim 8 accepted")
	}
	q := make([]float32, 16)
	q[3] = 0.1
	err := AttentionTC(BF16, make([]float32, 16), q, make([]float32, 16), make([]float32, 16), []int32{0}, 1, 1, 1, 1, 16, one[0])
	if err == nil || !strings.Contains(err.Error(), "not a bf16 value") {
		t.Errorf("q with 0.1: %v", err)
	}
}

// TestAttentionTCAccuracy: against the float64 softmax·V, within a bound set by bf16 probabilities (2^−8
// relative each: half an ulp of an 8-bit significand) and the k-step's truncation, measured relative to Σ p|v| / l.
func TestAttentionTCAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(150, 151))
	T, nh, nkv, hd := 200, 2, 1, 64
	q, kc, vc := randBF16(r, T*nh*hd, 1), randBF16(r, T*nkv*hd, 1), randBF16(r, T*nkv*hd, 1)
	pos := make([]int32, T)
	for i := range pos {
		pos[i] = int32(i)
	}
	scale := AttentionScale(hd)
	out := make([]float32, len(q))
	if err := AttentionTC(F32, out, q, kc, vc, pos, T, T, nh, nkv, hd, scale); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for tq := 0; tq < T; tq++ {
		for h := 0; h < nh; h++ {
			s := make([]float64, tq+1)
			mx := math.Inf(-1)
			for j := range s {
				for i := 0; i < hd; i++ {
					s[j] += float64(q[(tq*nh+h)*hd+i]) * float64(kc[j*hd+i])
				}
				s[j] *= float64(scale)
				mx = math.Max(mx, s[j])
			}
			l := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				l += s[j]
			}
			for i := 0; i < hd; i++ {
				y, a := 0.0, 0.0
				for j := range s {
					y += s[j] * float64(vc[j*hd+i])
					a += s[j] * math.Abs(float64(vc[j*hd+i]))
				}
				e := math.Abs(float64(out[(tq*nh+h)*hd+i])-y/l) / (a / l)
				worst = math.Max(worst, e)
			}
		}
	}
	// bf16 p: 2^−8 relative each (l sums the float32 e, so only the numerator sees it); the scores' k-steps (hd/16 of them, |d| ≤ Σ|q·k|) shift p by
	// exp(error) ≈ 1 + 4·21·2^−25·Σ|q·k|·scale; the p·V chain of 4 steps per block, 64 blocks at most
	const tol = 0x1p-8 + 4*21*0x1p-25*40 + 16*21*0x1p-25 + 0x1p-20
	if worst > tol {
		t.Fatalf("worst error %.3g relative to Σp|v|/l, bound %.3g", worst, tol)
	}
	t.Logf("worst error %.3g of Σp|v|/l (bound %.3g)", worst, tol)
}

// BenchmarkMatmulTC reports the tc CPU matmul's speed (2·M·N·K per call) and ns per emulated k-step, both
// layouts, K = N = 1024, beside the generic emulation (BenchmarkMMABF16Dot16: one k-step through Dot16).
func BenchmarkMatmulTC(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const K, N = 1024, 1024
	w := randBF16(r, N*K, 0.05)
	for _, l := range []TCLayout{ColumnParallel, RowParallel} {
		for _, M := range []int{1, 16, 64} {
			x := randBF16(r, M*K, 1)
			out := make([]float32, M*N)
			b.Run(fmt.Sprintf("%v/M=%d/K=%d/N=%d", l, M, K, N), func(b *testing.B) {
				cpu0 := cpuSeconds()
				for b.Loop() {
					if err := MatmulTC(l, BF16, out, x, w, nil, M, K, N); err != nil {
						b.Fatal(err)
					}
				}
				flops := 2 * float64(M) * N * K * float64(b.N)
				steps := float64(M) * N * K / TCStepK * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric((cpuSeconds()-cpu0)*1e9/steps, "cpu-ns/k-step")
			})
		}
	}
}

// BenchmarkTCStep is one decoded k-step (tcStep), a dependent chain on narrow-range data, with the AVX2 product
// half (tc_amd64.s) where there is one and without.
func BenchmarkTCStep(b *testing.B) {
	for _, avx := range []bool{false, true} {
		if avx && !haveTCAVX2 {
			continue
		}
		b.Run(fmt.Sprintf("avx2=%v", avx), func(b *testing.B) {
			defer func(v bool) { haveTCAVX2 = v }(haveTCAVX2)
			haveTCAVX2 = avx
			benchTCStep(b)
		})
	}
}

func benchTCStep(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	var ae, am, be, bm [64][16]int16
	for i := range ae {
		for j := range ae[i] {
			ae[i][j], am[i][j], _ = decodeBF16(randBF16Bits(r, 120, 134))
			be[i][j], bm[i][j], _ = decodeBF16(randBF16Bits(r, 120, 134))
		}
	}
	var acc float32
	for i := 0; b.Loop(); i++ {
		acc = tcStep(ae[i&63][:], am[i&63][:], be[(i>>6)&63][:], bm[(i>>6)&63][:], acc)
	}
	_ = acc
}
