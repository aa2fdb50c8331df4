package kernels

import "runtime"

// RMSNormForward is HF's LlamaRMSNorm (docs/arithmetic.md §5).
// x is (rows, C), w is (C), out is (rows, C); out may alias x.
// Canonical: the sum of squares is the 8-segment tree over C, the same for any number of rows.
// Standard: the accumulation blocking depends on the number of rows (§13).
func RMSNormForward(p Profile, dt DType, out, x, w []float32, rows, C int, eps float32) {
	checkLen("RMSNormForward", "x", x, rows*C)
	checkLen("RMSNormForward", "w", w, C)
	checkLen("RMSNormForward", "out", out, rows*C)
	bounds := SegBounds(C, Segments)
	var part [Segments]float32
	for r := 0; r < rows; r++ {
		xr := x[r*C : (r+1)*C]
		var ss float32
		switch {
		case p == Standard && rows < 16:
			// small batch: 4 interleaved accumulators
			var a [4]float32
			for k, v := range xr {
				a[k%4] = FMA32(v, v, a[k%4])
			}
			ss = float32(float32(a[0]+a[1]) + float32(a[2]+a[3]))
		case p == Standard:
			for _, v := range xr {
				ss = FMA32(v, v, ss)
			}
		default:
			// fixed 8-segment tree over C: the order never depends on rows
			for s := 0; s < Segments; s++ {
				acc := float32(0)
				for _, v := range xr[bounds[s]:bounds[s+1]] {
					acc = FMA32(v, v, acc)
				}
				part[s] = acc
			}
			ss = TreeSum(part[:])
		}
		mean := ss / float32(C)
		rs := Rsqrt(float32(mean + eps))
		or := out[r*C : (r+1)*C]
		for k, v := range xr {
			h := dt.Round(float32(v * rs))
			or[k] = dt.Round(float32(w[k] * h))
		}
	}
}

// RMSNormForwardW is RMSNormForward with the weight w (C) in its stored dtype (WeightDTypes), widened exactly
// first (C values), so the bits are RMSNormForward's on the widened weight.
func RMSNormForwardW(p Profile, dt DType, out, x []float32, w Weights, rows, C int, eps float32) {
	checkWeights("RMSNormForward", "w", w, C)
	RMSNormForward(p, dt, out, x, w.Slice(0, C).Float32(), rows, C, eps)
	runtime.KeepAlive(w)
}
