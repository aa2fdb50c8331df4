package kernels

import (
	"math"
	"math/bits"
)

// MMANaN is the bits of every NaN a tensor-core MMA returns (measured on the H200, whatever the NaN's source).
// It is also the NaN of every float32 add on the GPU (FADD never passes a payload on), so it is the one NaN of
// a tc value that leaves a kernel unrounded (docs/arithmetic.md tc.4; TCNaN).
const MMANaN = 0x7FFFFFFF

// TCNaN is what an unrounded tc float32 result holds (MatmulTCPartial's subtree; docs/arithmetic.md tc.4): a
// NaN becomes MMANaN, whatever made it (a NaN chain, or +Inf ⊕ −Inf in the tree, whose NaN on x86 is
// 0xFFC00000 and on the GPU 0x7FFFFFFF); every other value is unchanged. A NaN anywhere in the tree makes the
// tree's result NaN, so mapping the result is mapping every addition.
func TCNaN(y float32) float32 {
	if y != y {
		return math.Float32frombits(MMANaN)
	}
	return y
}

// MMASum is a model of how a tensor-core MMA sums one bf16 k-step d = c + Σ_{j<16} a_j·b_j into a float32
// (docs/arithmetic.md, "The `tc` profile"). Every product a_j·b_j is exact. A step takes Group products and
// the running float32 (c in the first step); each nonzero term is aligned to the step's largest alignment
// exponent E and truncated to a multiple of 2^(E−Frac); the truncated terms are added exactly, and the sum is
// rounded to float32 once, by Round. HopperMMA is the H200's (the only one the engine uses); the other fields'
// values are the alternatives the measurement rejected (kernels/cuda/experiments/mmacheck fit).
//
// Fixed in every model, as measured: bf16 and float32 subnormals are honoured as inputs and returned as
// outputs; a NaN input, Inf·0 or +Inf + −Inf gives MMANaN; otherwise an Inf term gives that Inf (before any
// finite term is looked at); a finite sum of magnitude ≥ 2^128 gives ±Inf; a zero result is +0, whatever the
// signs of the terms: an exact cancellation, all-zero terms, a negative sum rounded to zero.
type MMASum struct {
	Group      int      // products per step: 16 = one fused 17-term addition of c and all 16 products
	Frac       int      // bits kept below the alignment exponent E
	Nominal    bool     // alignment exponents are ea+eb−254 (product), ec−127 (c); false: the leading bit's
	TruncFloor bool     // aligned terms are truncated toward −∞ (two's complement), not toward zero
	Round      MMARound // the step's rounding to float32
}

// MMARound is a rounding of a step's exact sum to float32.
type MMARound uint8

const (
	RoundZero    MMARound = iota // toward zero
	RoundNearest                 // to nearest, ties to even
	RoundDown                    // toward −∞
)

// HopperMMA is how the H200 sums a k-step, for mma.sync.m16n8k16.f32.bf16.bf16.f32 and
// wgmma.mma_async.m64nNk16.f32.bf16.bf16 alike: one fused addition of c and all 16 exact products, each
// aligned to the largest nominal exponent E = max(ea+eb−254, ec−127) and truncated toward zero to a multiple
// of 2^(E−25), the sum rounded toward zero to float32. It matched the GPU bit for bit on every dot product
// checked (docs/arithmetic.md, "The `tc` profile").
var HopperMMA = MMASum{Group: 16, Frac: 25, Nominal: true, TruncFloor: false, Round: RoundZero}

// MMABF16Dot16 is c + Σ a[j]·b[j] as the H200's tensor core computes one k-step (bf16 bits in, float32 out).
// a is (16) bf16 bits, b is (16) bf16 bits, c is the accumulator.
func MMABF16Dot16(a, b *[16]uint16, c float32) float32 { return HopperMMA.Dot16(a, b, c) }

// term is one exact addend (−1)^neg · m · 2^e with alignment exponent x.
type term struct {
	neg  bool
	m    uint64
	e, x int
}

// Dot16 sums one k-step of 16 products and c by s.
func (s MMASum) Dot16(a, b *[16]uint16, c float32) float32 {
	if r, special := mmaSpecial(a, b, c); special {
		return r
	}
	g := s.Group
	if g <= 0 || g > 16 {
		g = 16
	}
	acc := c
	for j0 := 0; j0 < 16; j0 += g {
		var ts [17]term
		n := 0
		if t, ok := s.f32Term(acc); ok {
			ts[n] = t
			n++
		}
		for j := j0; j < j0+g; j++ {
			if t, ok := s.prodTerm(a[j], b[j]); ok {
				ts[n] = t
				n++
			}
		}
		acc = s.sum(ts[:n])
	}
	return acc
}

// mmaSpecial is the step's result when an input is NaN or Inf: any NaN, Inf·0 or +Inf + −Inf gives MMANaN;
// else an Inf term gives that Inf.
func mmaSpecial(a, b *[16]uint16, c float32) (float32, bool) {
	nan, pinf, ninf := false, false, false
	cu := math.Float32bits(c)
	switch {
	case cu&0x7FFFFFFF > 0x7F800000:
		nan = true
	case cu == 0x7F800000:
		pinf = true
	case cu == 0xFF800000:
		ninf = true
	}
	for j := 0; j < 16; j++ {
		xa, xb := a[j]&0x7FFF, b[j]&0x7FFF
		switch {
		case xa > 0x7F80 || xb > 0x7F80:
			nan = true
		case xa == 0x7F80 || xb == 0x7F80:
			if xa == 0 || xb == 0 {
				nan = true
			} else if (a[j]^b[j])&0x8000 != 0 {
				ninf = true
			} else {
				pinf = true
			}
		}
	}
	switch {
	case nan || (pinf && ninf):
		return math.Float32frombits(MMANaN), true
	case pinf:
		return float32(math.Inf(1)), true
	case ninf:
		return float32(math.Inf(-1)), true
	}
	return 0, false
}

// f32Term is c as a term; ok is false for ±0.
func (s MMASum) f32Term(c float32) (term, bool) {
	u := math.Float32bits(c)
	e := int(u >> 23 & 0xFF)
	m := uint64(u & 0x7FFFFF)
	if e == 0 {
		if m == 0 {
			return term{}, false
		}
		e = 1 // subnormal: 0.m · 2^−126
	} else {
		m |= 1 << 23
	}
	t := term{neg: u>>31 == 1, m: m, e: e - 150, x: e - 127}
	if !s.Nominal {
		t.x = t.e + bits.Len64(m) - 1
	}
	return t, true
}

// prodTerm is a·b as an exact term; ok is false for a zero product.
func (s MMASum) prodTerm(a, b uint16) (term, bool) {
	ea, eb := int(a>>7&0xFF), int(b>>7&0xFF)
	ma, mb := uint64(a&0x7F), uint64(b&0x7F)
	if ea == 0 {
		ea = 1 // subnormal: 0.m · 2^−126
	} else {
		ma |= 0x80
	}
	if eb == 0 {
		eb = 1
	} else {
		mb |= 0x80
	}
	if ma == 0 || mb == 0 {
		return term{}, false
	}
	t := term{neg: (a^b)&0x8000 != 0, m: ma * mb, e: ea + eb - 254 - 14, x: ea + eb - 254}
	if !s.Nominal {
		t.x = t.e + bits.Len64(t.m) - 1
	}
	return t, true
}

// sum aligns and truncates the terms, adds them exactly and rounds the sum once to float32.
func (s MMASum) sum(ts []term) float32 {
	if len(ts) == 0 {
		return 0
	}
	emax := ts[0].x
	for _, t := range ts[1:] {
		emax = max(emax, t.x)
	}
	q := emax - s.Frac // every truncated term is an integer multiple of 2^q
	var sum int64      // |term| < 2^(Frac+2) after alignment, 17 terms: fits for Frac ≤ 45
	for _, t := range ts {
		sh := t.e - q
		var v uint64
		exact := true
		switch {
		case sh >= 0:
			v = t.m << uint(sh)
		case sh > -64:
			v = t.m >> uint(-sh)
			exact = v<<uint(-sh) == t.m
		default:
			exact = false
		}
		if t.neg {
			if s.TruncFloor && !exact {
				v++
			}
			sum -= int64(v)
		} else {
			sum += int64(v)
		}
	}
	return s.Round.toFloat32(sum, q)
}

// toFloat32 rounds sum·2^q to float32 with integer arithmetic: a magnitude at or past 2^128 is ±Inf, a
// result below 2^−126 is a subnormal (kept to 2^−149), a zero result is +0 (measured: also for a negative
// sum rounded to zero).
func (r MMARound) toFloat32(sum int64, q int) float32 {
	neg := sum < 0
	mag := uint64(sum)
	if neg {
		mag = -mag
	}
	if mag == 0 {
		return 0
	}
	n := bits.Len64(mag)
	if q+n-1 >= 128 {
		return float32(math.Copysign(math.Inf(1), float64(sum)))
	}
	sh := n - 24 // keep 24 significant bits
	if q+n-1 < -126 {
		sh = -149 - q // keep bits down to 2^−149
	}
	var kept, rem, half uint64
	switch {
	case sh <= 0:
		kept = mag << uint(-sh)
	case sh < 64:
		kept, rem, half = mag>>uint(sh), mag&(1<<uint(sh)-1), 1<<uint(sh-1)
	default:
		rem, half = mag, 1<<63
		if sh > 64 {
			half = 0 // any remainder is below half (never: mag < 2^53); kept stays 0
		}
	}
	switch r {
	case RoundNearest:
		if rem > half || (rem == half && rem != 0 && kept&1 == 1) {
			kept++
		}
	case RoundDown:
		if neg && rem != 0 {
			kept++
		}
	}
	if kept == 0 {
		return 0
	}
	e := q + sh // kept·2^e
	if kept >= 1<<24 {
		kept >>= 1
		e++
	}
	var u uint32
	if kept < 1<<23 {
		u = uint32(kept) // subnormal (e = −149)
	} else {
		be := e + 23 + 127
		if be >= 255 {
			return float32(math.Copysign(math.Inf(1), float64(sum)))
		}
		u = uint32(be)<<23 | uint32(kept)&0x7FFFFF
	}
	if neg {
		u |= 1 << 31
	}
	return math.Float32frombits(u)
}
