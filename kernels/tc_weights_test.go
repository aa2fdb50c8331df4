package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMatmulTCWeights: the tc matmul on a weight in its stored dtype (a bf16 checkpoint's bits, an f16 weight
// holding bf16 values) gives the bits of the float32 weight, for both layouts and the partial, NaN/Inf rows
// included; an f16 weight holding a value bf16 cannot represent is an error naming the element.
func TestMatmulTCWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, kn := range [][3]int{{3, 200, 9}, {5, 64, 4}, {1, 24, 3}} {
		M, K, N := kn[0], kn[1], kn[2]
		x := randBF16(r, M*K, 1)
		w := randBF16(r, N*K, 0.05)
		for i := range w { // small enough for f16 too: |w| < 2^-3 keeps every bf16 value exact in f16 (normal range)
			if math.Abs(float64(w[i])) < 1.0/4096 {
				w[i] = 0
			}
		}
		w[K+3] = float32(math.Inf(1)) // a special row: HopperMMA.Dot16's path
		w[2*K-1] = float32(math.NaN())
		bias := randBF16(r, N, 0.1)
		bits := make([]uint16, len(w))
		halves := make([]uint16, len(w))
		for i, v := range w {
			bits[i] = ToBF16Bits(v)
			halves[i] = ToF16Bits(v)
			if !math.IsNaN(float64(v)) && FromF16Bits(halves[i]) != v {
				t.Fatalf("test setup: w[%d] = %g is not an f16 value", i, v)
			}
		}
		for name, wt := range map[string]Weights{"bf16": WeightsBits(BF16, bits, nil), "f16": WeightsBits(F16, halves, nil)} {
			for _, l := range []TCLayout{ColumnParallel, RowParallel} {
				want, got := make([]float32, M*N), make([]float32, M*N)
				if err := MatmulTC(l, BF16, want, x, w, bias, M, K, N); err != nil {
					t.Fatal(err)
				}
				if err := MatmulTCW(l, BF16, got, x, wt, bias, M, K, N); err != nil {
					t.Fatal(err)
				}
				assertSame(t, fmt.Sprintf("%s %v M=%d K=%d N=%d", name, l, M, K, N), got, want)
			}
			if K%8 == 0 {
				kl := K / 2 // rank 0 of tp 2: its columns of w
				wl := make([]float32, N*kl)
				wb := make([]uint16, N*kl)
				for n := 0; n < N; n++ {
					copy(wl[n*kl:(n+1)*kl], w[n*K:n*K+kl])
					copy(wb[n*kl:(n+1)*kl], bits[n*K:n*K+kl])
				}
				xl := make([]float32, M*kl)
				for m := 0; m < M; m++ {
					copy(xl[m*kl:(m+1)*kl], x[m*K:m*K+kl])
				}
				want, got := make([]float32, M*N), make([]float32, M*N)
				if err := MatmulTCPartial(want, xl, wl, M, kl, N, 2); err != nil {
					t.Fatal(err)
				}
				if err := MatmulTCPartialW(got, xl, WeightsBits(BF16, wb, nil), M, kl, N, 2); err != nil {
					t.Fatal(err)
				}
				assertSame(t, fmt.Sprintf("partial bf16 M=%d K=%d N=%d", M, K, N), got, want)
			}
		}
	}
	// 1 + 2^-10 is an f16 value, not a bf16 one
	halves := []uint16{ToF16Bits(1), ToF16Bits(1 + 1.0/1024), ToF16Bits(0.5), ToF16Bits(2)}
	err := MatmulTCW(ColumnParallel, BF16, make([]float32, 2), []float32{1, 1}, WeightsBits(F16, halves, nil), nil, 1, 2, 2)
	if err == nil || !strings.Contains(err.Error(), "w[0, 1]") || !strings.Contains(err.Error(), "not a bf16 value") {
		t.Fatalf("an f16 weight that is not bf16: got %v, want an error naming w[0, 1]", err)
	}
}
