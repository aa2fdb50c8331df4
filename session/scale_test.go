package session

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"bitalign/capture"
)

// fastSquaresBranchy is fastSquares as it was at f9cbd1b, before bf16's differing words went lane by lane
// without a branch on x == y: what the new one must give bit for bit.
func fastSquaresBranchy(f *format, a, b []byte, i int) (int, fastSums) {
	var s fastSums
	var q0, q1, q2, q3, q4 float64
	b = b[:len(a)]
	n := len(a) / f.size
	for i < n {
		if f.dt == capture.BF16 {
			M, L, H := f.swM, f.swL, f.swH
			a8, b8 := a[2*i:], b[2*i:len(a)]
			for len(a8) >= 8 && len(b8) >= 8 {
				wa, wb := binary.LittleEndian.Uint64(a8), binary.LittleEndian.Uint64(b8)
				if wa != wb || ((wa&M)+L)&H != 0 {
					break
				}
				v0 := float64(math.Float32frombits(uint32(wa) << 16))
				v1 := float64(math.Float32frombits(uint32(wa>>16) << 16))
				v2 := float64(math.Float32frombits(uint32(wa>>32) << 16))
				v3 := float64(math.Float32frombits(uint32(wa>>48) << 16))
				q0 += float64(v0 * v0)
				q1 += float64(v1 * v1)
				q2 += float64(v2 * v2)
				q3 += float64(v3 * v3)
				a8, b8 = a8[8:], b8[8:]
			}
			i = n - len(a8)/2
			if i == n {
				break
			}
		}
		var x, y uint32
		if f.dt == capture.BF16 {
			x, y = uint32(binary.LittleEndian.Uint16(a[2*i:]))<<16, uint32(binary.LittleEndian.Uint16(b[2*i:]))<<16
		} else {
			x, y = binary.LittleEndian.Uint32(a[4*i:]), binary.LittleEndian.Uint32(b[4*i:])
		}
		va, okA := normal32(x)
		if x == y && okA {
			q4 += float64(va * va)
			i++
			continue
		}
		vb, okB := normal32(y)
		if !okA || !okB {
			break
		}
		s.a += float64(va * va)
		s.b += float64(vb * vb)
		s.maxAbs = max(s.maxAbs, math.Abs(va-vb))
		i++
	}
	s.eq = (q0 + q1) + (q2 + q3) + q4
	return i, s
}

// TestFastSquaresMatchesBranchy: fastSquares stops where the branchy version stops and gives its sums bit for
// bit, on bf16 and f32 rows with every share of differing elements, equal stretches, specials and subnormals,
// from every start.
func TestFastSquaresMatchesBranchy(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 2))
	for _, dt := range []capture.DType{capture.BF16, capture.F32} {
		f := formats[dt]
		for _, rate := range []float64{0, 0.01, 0.3, 0.5, 0.9, 1} {
			for trial := 0; trial < 20; trial++ {
				n := 1 + r.IntN(3000)
				a, b := plant(r, f, n, rate)
				if trial%3 == 0 { // subnormals and zeros
					for k := 0; k < 20; k++ {
						putElem(f, a, r.IntN(n), uint64(r.IntN(4)))
						putElem(f, b, r.IntN(n), f.sign|uint64(r.IntN(4)))
					}
				}
				if trial%3 == 1 { // NaN of both signs, ±Inf, ±0 and subnormals of both signs, on either side
					inf := uint64(1<<f.expBits-1) << f.mantBits
					edge := []uint64{inf | 1, f.sign | inf | 1, inf, f.sign | inf, 0, f.sign, 1, f.sign | 1,
						1<<f.mantBits - 1, f.sign | (1<<f.mantBits - 1)}
					for k := 0; k < 1+n/200; k++ {
						v := edge[r.IntN(len(edge))]
						if v&inf == inf && rate == 0 {
							continue // rate 0: finite rows only
						}
						c := [][]byte{a, b}[r.IntN(2)]
						putElem(f, c, r.IntN(n), v)
					}
				}
				for start := 0; start < n; {
					gi, gs := fastSquares(f, a, b, start)
					wi, ws := fastSquaresBranchy(f, a, b, start)
					if gi != wi || math.Float64bits(gs.eq) != math.Float64bits(ws.eq) ||
						math.Float64bits(gs.a) != math.Float64bits(ws.a) || math.Float64bits(gs.b) != math.Float64bits(ws.b) ||
						math.Float64bits(gs.maxAbs) != math.Float64bits(ws.maxAbs) {
						t.Fatalf("%s rate %g n %d from %d: stop %d %+v, branchy %d %+v", dt, rate, n, start, gi, gs, wi, ws)
					}
					start = gi + 1 // past the special it stopped at, as rowScale goes on
				}
			}
		}
	}
}

// BenchmarkFastSquares: the RMS pass over a bf16 and an f32 row of 8960 with about half the elements 1 ULP
// off (the size pair's "all" variant), fastSquares against the branchy version it replaced.
func BenchmarkFastSquares(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 5))
	for _, dt := range []capture.DType{capture.BF16, capture.F32} {
		f := formats[dt]
		const n = 8960
		x, _ := plant(r, f, n, 0)
		y := append([]byte(nil), x...)
		for i := 0; i < n; i++ {
			if r.IntN(2) == 0 {
				putElem(f, y, i, f.load(x, i)^1)
			}
		}
		for _, c := range []struct {
			name string
			fn   func(*format, []byte, []byte, int) (int, fastSums)
		}{{"branchy", fastSquaresBranchy}, {"new", fastSquares}} {
			b.Run(dt.String()+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(2 * len(x)))
				c0 := cpuTime()
				for i := 0; i < b.N; i++ {
					for k := 0; k < n; {
						k, _ = c.fn(f, x, y, k)
						k++
					}
				}
				b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N*n), "cpu-ns/elem")
			})
		}
	}
}
