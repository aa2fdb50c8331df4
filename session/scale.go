package session

import (
	"context"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"bitalign/capture"
)

// The scale-relative error |a−b| / RMS of the row (OpStat.MaxRMSRel, Divergence.RMSRel): a second pass
// over the rows of a divergent float op that hold a mismatch.

// rowScale returns the RMS of row r of piece p over both sides' finite values and the row's largest |a−b|
// over mismatched pairs where both values are finite. bf16 and f32 rows run fastSquares over their stretches
// of finite values and specialScale on the rest (NaN, ±Inf). Squares are rounded before they are summed
// (explicit float64(...)), so no compiler fuses them and every platform gives the same bits.
func (o *opWork) rowScale(p *piece, r int64) (rms, maxAbs float64) {
	f := o.f
	lo, hi := int(r*p.rowLen), int((r+1)*p.rowLen)
	if f.dt != capture.BF16 && f.dt != capture.F32 {
		return o.rowScaleSlow(p, lo, hi)
	}
	sz := f.size
	a, b := p.a[sz*lo:sz*hi], p.b[sz*lo:sz*hi]
	var eq, sa, sb float64 // eq: one side's squares over the equal pairs
	cnt := 2 * (hi - lo)
	for i := 0; i < hi-lo; i++ {
		var s fastSums
		i, s = fastSquares(f, a, b, i)
		eq, sa, sb, maxAbs = eq+s.eq, sa+s.a, sb+s.b, max(maxAbs, s.maxAbs)
		if i == hi-lo {
			break
		}
		qa, qb, d, n := o.specialScale(f.load(a, i), f.load(b, i))
		sa, sb, maxAbs, cnt = sa+qa, sb+qb, max(maxAbs, d), cnt-n
	}
	if cnt == 0 {
		return 0, maxAbs
	}
	return math.Sqrt((2*eq + (sa + sb)) / float64(cnt)), maxAbs // ≤ 32-bit floats: squares stay in float64's range
}

// fastSums is what fastSquares adds up: squares of equal pairs (one side), of each side of differing pairs,
// and the largest |a−b|.
type fastSums struct{ eq, a, b, maxAbs float64 }

// fastSquares sums over elements i, i+1, ... of bf16 or f32 rows a and b while both sides are finite, and
// returns where it stopped (len: the end). bf16 rows go four equal elements at a time while the eight-byte
// words match and format's SWAR test finds no NaN or Inf in them. A leaf, so its sums stay in registers.
func fastSquares(f *format, a, b []byte, i int) (int, fastSums) {
	var s fastSums
	var q0, q1, q2, q3, q4 float64 // equal elements: four-at-a-time by lane, and one at a time (independent chains)
	b = b[:len(a)]
	n := len(a) / f.size
	M, L, H := f.swM, f.swL, f.swH
	for i < n {
		if f.dt == capture.BF16 {
			a8, b8 := a[2*i:], b[2*i:len(a)]
			for len(a8) >= 8 && len(b8) >= 8 {
				wa, wb := binary.LittleEndian.Uint64(a8), binary.LittleEndian.Uint64(b8)
				if wa != wb || ((wa&M)+L)&H != 0 { // differ, or a NaN or Inf (format's SWAR test)
					break
				}
				// a bf16 is the top half of an f32 (format.value)
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
			if len(a8) >= 8 && len(b8) >= 8 {
				// The word at i differs. Every word from i to its highest differing lane h holds that lane,
				// so the word test fails at each: elements i..i+h go one at a time (as below), here straight
				// from the two words when neither holds a NaN or Inf (so none stops the pass), and without a
				// branch on x == y (half the elements of a replay against another stack differ, at random):
				// the square goes to q4 for an equal pair, to s.a and s.b for a differing one, and +0 to
				// the other sums, which leaves them as they are (every sum is +0 or positive).
				wa, wb := binary.LittleEndian.Uint64(a8), binary.LittleEndian.Uint64(b8)
				if d := wa ^ wb; d != 0 && (((wa&M)+L)|((wb&M)+L))&H == 0 {
					// all four lanes, those past h masked to +0 everywhere (they are the next pass's): a fixed
					// trip count instead of h+1, which is random here and mispredicted
					h := int64(63-bits.LeadingZeros64(d)) >> 4
					for k := int64(0); k < 4; k++ {
						sh := uint(16 * k)
						live := uint64((k - h - 1) >> 63) // all ones for lanes 0..h
						x, y := uint32(wa>>sh)<<16, uint32(wb>>sh)<<16
						// finite (the SWAR test): the conversion is exact, normal32's value without its branch
						va, vb := float64(math.Float32frombits(x)), float64(math.Float32frombits(y))
						eq := -((uint64(x^y) - 1) >> 63) // all ones when the lane's pair is equal
						qa, qb := math.Float64bits(float64(va*va))&live, math.Float64bits(float64(vb*vb))&live
						q4 += math.Float64frombits(qa & eq)
						s.a += math.Float64frombits(qa &^ eq)
						s.b += math.Float64frombits(qb &^ eq)
						if d := math.Float64frombits(math.Float64bits(math.Abs(va-vb)) & live); d > s.maxAbs {
							s.maxAbs = d
						}
					}
					i += int(h) + 1
					continue
				}
			}
		}
		var x, y uint32
		if f.dt == capture.BF16 {
			x, y = uint32(binary.LittleEndian.Uint16(a[2*i:]))<<16, uint32(binary.LittleEndian.Uint16(b[2*i:]))<<16
		} else {
			x, y = binary.LittleEndian.Uint32(a[4*i:]), binary.LittleEndian.Uint32(b[4*i:])
		}
		va, okA := normal32(x)
		vb, okB := normal32(y)
		if !okA || !okB { // a NaN or an Inf on a side: specialScale's
			break
		}
		// an equal pair's square to q4, a differing pair's to s.a and s.b, +0 to the other sums: no branch on
		// x == y (random in a replay against another stack)
		eq := -((uint64(x^y) - 1) >> 63)
		qa, qb := math.Float64bits(float64(va*va)), math.Float64bits(float64(vb*vb))
		q4 += math.Float64frombits(qa & eq)
		s.a += math.Float64frombits(qa &^ eq)
		s.b += math.Float64frombits(qb &^ eq)
		if d := math.Abs(va - vb); d > s.maxAbs { // a compare, not max: no NaN or −0 reaches here (0 when equal)
			s.maxAbs = d
		}
		i++
	}
	s.eq = (q0 + q1) + (q2 + q3) + q4
	return i, s
}

// normal32 is the value of the f32 bit pattern x when it is finite (ok): a normal one built as float64 bits,
// the exponent rebiased from 127 to 1023 and the mantissa moved to the top, a subnormal one as its mantissa ×
// 2^−149 (both exact: format.value's decoding without its conversions). A bf16 is the top half of an f32.
func normal32(x uint32) (float64, bool) {
	switch e := x & 0x7f800000; {
	case e-0x00800000 < 0x7f000000: // exponent 1..254
		return math.Float64frombits(uint64(x&0x80000000)<<32 | (uint64(x&0x7fffffff)<<29 + (1023-127)<<52)), true
	case e == 0:
		v := float64(x&0x7fffff) * 0x1p-149
		if x&0x80000000 != 0 {
			v = -v
		}
		return v, true
	}
	return 0, false
}

// specialScale is rowScale's share of a pair with a NaN or ±Inf on a side (or of any pair, for the other
// dtypes): the squares of its finite values, |a−b| when both are finite and differ, and how many of the two
// are not finite.
func (o *opWork) specialScale(x, y uint64) (qa, qb, abs float64, nonFinite int) {
	f := o.f
	fa, fb := !f.isNaN(x) && !f.isInf(x), !f.isNaN(y) && !f.isInf(y)
	va, vb := f.value(x), f.value(y)
	if fa {
		qa = float64(va * va)
	} else {
		nonFinite++
	}
	if fb {
		qb = float64(vb * vb)
	} else {
		nonFinite++
	}
	if x != y && fa && fb {
		abs = math.Abs(va - vb)
	}
	return qa, qb, abs, nonFinite
}

// rowScaleSlow is rowScale for every float dtype; f64's squares may leave float64's range, so they are scaled
// by the row's largest magnitude.
func (o *opWork) rowScaleSlow(p *piece, lo, hi int) (rms, maxAbs float64) {
	f := o.f
	var peak float64
	var cnt int
	for i := lo; i < hi; i++ {
		x, y := f.load(p.a, i), f.load(p.b, i)
		va, vb := f.value(x), f.value(y)
		fa, fb := !math.IsInf(va, 0) && !math.IsNaN(va), !math.IsInf(vb, 0) && !math.IsNaN(vb)
		if fa {
			peak, cnt = max(peak, math.Abs(va)), cnt+1
		}
		if fb {
			peak, cnt = max(peak, math.Abs(vb)), cnt+1
		}
		if x != y && fa && fb {
			maxAbs = max(maxAbs, math.Abs(va-vb))
		}
	}
	if cnt == 0 || peak == 0 {
		return 0, maxAbs
	}
	var ss float64
	for i := lo; i < hi; i++ {
		for _, v := range [2]float64{f.value(f.load(p.a, i)), f.value(f.load(p.b, i))} {
			if !math.IsInf(v, 0) && !math.IsNaN(v) {
				ss += float64((v / peak) * (v / peak))
			}
		}
	}
	return peak * math.Sqrt(ss/float64(cnt)), maxAbs
}

// scaleRel is |a−b| / RMS: 0 when |a−b| is 0.
func scaleRel(abs, rms float64) float64 {
	if abs == 0 || rms == 0 {
		return 0
	}
	return abs / rms
}

// maxRMSRel is the op's largest |a−b| / RMS of the row (OpStat.MaxRMSRel) over the rows holding a mismatch,
// on workers goroutines. Only a divergent float op pays this second pass, and only over its mismatched rows.
func (o *opWork) maxRMSRel(ctx context.Context, workers int) (float64, error) {
	type row struct {
		p *piece
		r int64
	}
	var rows []row
	for i := range o.pieces {
		p := &o.pieces[i]
		for r := int64(0); r < p.rows; r++ {
			if p.rowMism[r/64]&(1<<(r%64)) != 0 {
				rows = append(rows, row{p, r})
			}
		}
	}
	var next atomic.Int64
	var stop atomic.Bool
	best := make([]float64, workers)
	var wg sync.WaitGroup
	for wi := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				i := int(next.Add(1) - 1)
				if i >= len(rows) || stop.Load() {
					return
				}
				if n%64 == 0 && ctx.Err() != nil {
					stop.Store(true)
					return
				}
				rms, abs := o.rowScale(rows[i].p, rows[i].r)
				best[wi] = max(best[wi], scaleRel(abs, rms))
			}
		}()
	}
	wg.Wait()
	if stop.Load() {
		return 0, ctx.Err()
	}
	return slices.Max(best), nil
}

// hitRMSRel is one numeric mismatch's |a−b| / RMS of its row.
func (o *opWork) hitRMSRel(h hit) float64 {
	p := &o.pieces[h.piece]
	rms, _ := o.rowScale(p, h.elem/p.rowLen)
	va, vb := o.f.value(h.a), o.f.value(h.b)
	if math.IsInf(va, 0) || math.IsInf(vb, 0) {
		return 0
	}
	return scaleRel(math.Abs(va-vb), rms)
}
