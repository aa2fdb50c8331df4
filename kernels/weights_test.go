package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"bitalign/internal/fp"
)

// weightsOf returns w (values representable in dt) stored in dt, plus a few special values planted: NaN, ±Inf,
// a subnormal, and magnitudes outside the exact-product range (so the FMA32 path runs too).
func weightsOf(t *testing.T, dt DType, w []float32) Weights {
	t.Helper()
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p-70, -0x1p62, float32(math.Copysign(0, -1))}
	if dt == F16 {
		specials = []float32{float32(math.NaN()), float32(math.Inf(1)), 0x1p-24, -0x1p-20, 60000, float32(math.Copysign(0, -1))}
	}
	if len(w) > 200 {
		for i, v := range specials {
			w[(i*97+13)%len(w)] = v
		}
	}
	for i := range w {
		w[i] = dt.Round(w[i])
	}
	wt := RoundWeights(dt, w)
	if wt.DType() != dt || wt.Len() != len(w) {
		t.Fatalf("RoundWeights(%v): dtype %v, %d elements", dt, wt.DType(), wt.Len())
	}
	assertSame(t, "widened weights", wt.Float32(), w)
	return wt
}

// TestMatmulWeightsBitwise: a matmul reading bf16 or f16 weights gives the bits of the same matmul on the
// widened float32 weights, at every shape (panel and scalar paths, remainder columns), both profiles, with the
// AVX2 panels (f16 as bits widened by VCVTPH2PS, and with F16C off, widened while packed) and without; a one-bit
// change in one weight changes the result (the comparison can fail).
func TestMatmulWeightsBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	t.Logf("AVX2+FMA panels: %v, F16C: %v", haveFMAPanels, haveF16C)
	for _, mode := range []struct{ panels, f16c bool }{{true, true}, {true, false}, {false, false}} {
		withPanels(mode.panels, func() {
			withF16C(mode.f16c, func() {
				for _, dt := range []DType{BF16, F16, F32} {
					for _, sh := range [][3]int{{1, 64, 16}, {3, 100, 35}, {5, 33, 70}, {17, 256, 130}, {2, 8, 3}, {1, 0, 20}, {9, 512, 64}} {
						M, K, N := sh[0], sh[1], sh[2]
						x := randBF16(r, M*K, 1)
						w := weightsOf(t, dt, randBF16(r, N*K, 0.1))
						wf := w.Float32()
						bias := randBF16(r, N, 0.1)
						for _, p := range []Profile{Canonical, Standard} {
							what := fmt.Sprintf("panels=%+v %v weights, %v, M=%d K=%d N=%d", mode, dt, p, M, K, N)
							got, want := make([]float32, M*N), make([]float32, M*N)
							MatmulForwardW(p, BF16, got, x, w, bias, M, K, N)
							MatmulForward(p, BF16, want, x, wf, bias, M, K, N)
							assertSame(t, what, got, want)
							if K%2 == 0 && K > 0 {
								kl := K / 2
								xl := make([]float32, M*kl)
								for m := 0; m < M; m++ {
									copy(xl[m*kl:(m+1)*kl], x[m*K:m*K+kl])
								}
								wl := w.Cols(N, K, 0, kl)
								if err := MatmulPartialW(p, got, xl, wl, M, kl, N, 0, 2); err != nil {
									t.Fatal(err)
								}
								if err := MatmulPartial(p, want, xl, wl.Float32(), M, kl, N, 0, 2); err != nil {
									t.Fatal(err)
								}
								assertSame(t, what+" partial", got, want)
							}
						}
					}
				}
			})
		})
	}
	// the control: one weight one bit off (bf16 bits) changes the output
	const M, K, N = 4, 64, 32
	x := randBF16(r, M*K, 1)
	wv := randBF16(r, N*K, 0.1)
	w := RoundWeights(BF16, wv)
	wv[5*K+3] = fp.BF16ToF32(fp.F32ToBF16(wv[5*K+3]) ^ 1)
	got, want := make([]float32, M*N), make([]float32, M*N)
	MatmulForwardW(Canonical, F32, got, x, w, nil, M, K, N)
	MatmulForward(Canonical, F32, want, x, wv, nil, M, K, N)
	assertDiffers(t, "one weight bit flipped", got, want)
}

func TestEmbeddingWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const V, C = 50, 24
	for _, dt := range []DType{BF16, F16} {
		tab := weightsOf(t, dt, randBF16(r, V*C, 1))
		ids := []int32{3, 49, 0, 3}
		got, want := make([]float32, len(ids)*C), make([]float32, len(ids)*C)
		if err := EmbeddingForwardW(BF16, got, tab, ids, len(ids), V, C); err != nil {
			t.Fatal(err)
		}
		if err := EmbeddingForward(BF16, want, tab.Float32(), ids, len(ids), V, C); err != nil {
			t.Fatal(err)
		}
		assertSame(t, dt.String()+" embedding", got, want)
		if err := EmbeddingForwardW(BF16, got, tab, []int32{V}, 1, V, C); err == nil {
			t.Fatal("token outside the vocabulary accepted")
		}
	}
}

func TestWeightsViews(t *testing.T) {
	w := RoundWeights(BF16, []float32{1, 2, 3, 4, 5, 6}) // (2, 3)
	if got := w.Rows(3, 1, 1).Float32(); fmt.Sprint(got) != "[4 5 6]" {
		t.Fatalf("Rows: %v", got)
	}
	if got := w.Cols(2, 3, 1, 2).Float32(); fmt.Sprint(got) != "[2 3 5 6]" {
		t.Fatalf("Cols: %v", got)
	}
	if got := RoundWeights(F16, []float32{1, 2, 3, 4, 5, 6}).Cols(2, 3, 2, 1).Float32(); fmt.Sprint(got) != "[3 6]" {
		t.Fatalf("Cols f16: %v", got)
	}
	if !w.Identical(RoundWeights(BF16, []float32{1, 2, 3, 4, 5, 6})) || w.Identical(RoundWeights(F16, []float32{1, 2, 3, 4, 5, 6})) {
		t.Fatal("Identical")
	}
	var z Weights
	if !z.IsZero() || z.Rows(3, 0, 0).Len() != 0 || z.Cols(1, 1, 0, 1).Float32() != nil || z.Raw() != nil {
		t.Fatal("zero Weights")
	}
	if w.Bytes() != 12 || len(w.Raw()) != 12 || RoundWeights(F32, []float32{1}).Bytes() != 4 {
		t.Fatal("Bytes")
	}
	// the op-boundary rounding: NaN canonical, ties to even
	n := RoundWeights(BF16, []float32{math.Float32frombits(0x7F800001), 1 + 0x1p-8})
	if b := n.Raw(); b[0] != 0xC0 || b[1] != 0x7F || n.At(1) != 1 {
		t.Fatalf("RoundWeights: % x", b)
	}
}

// TestWeightsView: a view of aligned little-endian bytes holds the same values, a misaligned buffer has none;
// CanonicalNaNs finds any other NaN than the canonical one at every position (before, inside and after the
// 8-byte words).
func TestWeightsView(t *testing.T) {
	for _, dt := range []DType{BF16, F16, F32} {
		size := dt.Size()
		vals := []float32{1, -2, float32(math.Inf(1)), float32(math.NaN()), 0.5, float32(math.Inf(-1)), 3, 0, 7, -1, 2, 4}
		vals = append(append(append(vals, vals...), vals...), vals...) // long enough for the four-word loop
		canon := RoundWeights(dt, vals)                                // NaN canonical
		raw := canon.Raw()
		buf := make([]byte, len(raw)+8)
		for off := 0; off < 8; off++ {
			b := buf[off : off+len(raw)]
			copy(b, raw)
			w, ok := WeightsView(dt, b, nil)
			if off%size != 0 {
				if ok {
					t.Fatalf("%v at offset %d: misaligned view accepted", dt, off)
				}
				continue
			}
			if !ok || !w.Identical(canon) || !CanonicalNaNs(dt, b) {
				t.Fatalf("%v at offset %d: view refused (%v) or different", dt, off, ok)
			}
			for i := range vals {
				c := append([]byte(nil), b...)
				// a quiet NaN with a payload bit set: not the canonical NaN
				nan := uint64(0x7FC1)
				switch dt {
				case F16:
					nan = 0x7E01
				case F32:
					nan = 0x7FC00001
				}
				for j := 0; j < size; j++ {
					b[i*size+j] = byte(nan >> (8 * j))
				}
				if CanonicalNaNs(dt, b) {
					t.Fatalf("%v at offset %d: NaN %#x at element %d accepted", dt, off, nan, i)
				}
				copy(b, c)
			}
		}
	}
}

// TestRMSNormWeights: RMSNorm with its weight stored as bf16 or f16 gives the bits of RMSNorm on the widened
// float32 weight, and a weight one bit off changes the output (the comparison can fail).
func TestRMSNormWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	const rows, C = 5, 300
	for _, dt := range []DType{BF16, F16, F32} {
		w := weightsOf(t, dt, randBF16(r, C, 1))
		x := randBF16(r, rows*C, 1)
		for _, p := range []Profile{Canonical, Standard} {
			got, want := make([]float32, rows*C), make([]float32, rows*C)
			RMSNormForwardW(p, BF16, got, x, w, rows, C, 1e-6)
			RMSNormForward(p, BF16, want, x, w.Float32(), rows, C, 1e-6)
			assertSame(t, fmt.Sprintf("%v rmsnorm weight, %v", dt, p), got, want)
		}
	}
	w := RoundWeights(F16, randBF16(r, C, 1))
	wv := w.Float32()
	wv[7] = fp.F16ToF32(fp.F32ToF16(wv[7]) ^ 1)
	x := randBF16(r, rows*C, 1)
	got, want := make([]float32, rows*C), make([]float32, rows*C)
	RMSNormForwardW(Canonical, F32, got, x, w, rows, C, 1e-6)
	RMSNormForward(Canonical, F32, want, x, wv, rows, C, 1e-6)
	assertDiffers(t, "one f16 weight bit flipped", got, want)
}
