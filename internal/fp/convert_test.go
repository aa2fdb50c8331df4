package fp

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// narrowFormat is one narrow float for the conversion tests: its conversions and an independent description.
type narrowFormat struct {
	dt        DType
	e, m      int
	noInf     bool
	bits      int // 8 or 16
	widen     func(uint32) float32
	narrow    func(float32) uint32
	maxFinite float64
}

var narrowFormats = []narrowFormat{
	{BF16, 8, 7, false, 16, func(b uint32) float32 { return BF16ToF32(uint16(b)) },
		func(x float32) uint32 { return uint32(F32ToBF16(x)) }, 0x1.FEp127},
	{F16, 5, 10, false, 16, func(b uint32) float32 { return F16ToF32(uint16(b)) },
		func(x float32) uint32 { return uint32(F32ToF16(x)) }, 65504},
	{F8E4M3, 4, 3, true, 8, func(b uint32) float32 { return E4M3ToF32(uint8(b)) },
		func(x float32) uint32 { return uint32(F32ToE4M3(x)) }, 448},
	{F8E5M2, 5, 2, false, 8, func(b uint32) float32 { return E5M2ToF32(uint8(b)) },
		func(x float32) uint32 { return uint32(F32ToE5M2(x)) }, 57344},
}

// refValue decodes a narrow pattern with float64 arithmetic from the textbook definition (NaN for NaN).
func (n narrowFormat) refValue(b uint32) float64 {
	sign := 1.0
	if b>>(n.e+n.m)&1 == 1 {
		sign = -1
	}
	ex := int(b>>n.m) & (1<<n.e - 1)
	man := int(b) & (1<<n.m - 1)
	bias := 1<<(n.e-1) - 1
	switch {
	case ex == 1<<n.e-1 && n.noInf && man == 1<<n.m-1:
		return math.NaN()
	case ex == 1<<n.e-1 && !n.noInf && man != 0:
		return math.NaN()
	case ex == 1<<n.e-1 && !n.noInf:
		return sign * math.Inf(1)
	case ex == 0:
		return sign * math.Ldexp(float64(man), 1-bias-n.m)
	}
	return sign * math.Ldexp(float64(1<<n.m+man), ex-bias-n.m)
}

func (n narrowFormat) sign() uint32 { return 1 << (n.bits - 1) }

func (n narrowFormat) isNaN(b uint32) bool { return math.IsNaN(n.refValue(b)) }

// Every pattern widens to exactly its value (NaNs: NaN with the sign and the mantissa bits kept) and narrows
// back to itself; a NaN narrows back quiet.
func TestWidenNarrowExhaustive(t *testing.T) {
	for _, n := range narrowFormats {
		for b := uint32(0); b < 1<<n.bits; b++ {
			x := n.widen(b)
			want := n.refValue(b)
			u := math.Float32bits(x)
			if math.IsNaN(want) {
				if x == x || u>>31 != b>>(n.bits-1) || u>>(23-n.m)&(1<<n.m-1) != b&(1<<n.m-1) {
					t.Fatalf("%s %#x widens to %#08x, want NaN of the same sign and mantissa", n.dt, b, u)
				}
				quiet := b | 1<<(n.m-1)
				if got := n.narrow(x); got != quiet {
					t.Fatalf("%s NaN %#x: narrows back to %#x, want %#x", n.dt, b, got, quiet)
				}
				continue
			}
			if float64(x) != want || (want == 0 && u>>31 != b>>(n.bits-1)) {
				t.Fatalf("%s %#x widens to %v (%#08x), want %v", n.dt, b, x, u, want)
			}
			if got := n.narrow(x); got != b {
				t.Fatalf("%s %#x → %v → %#x", n.dt, b, x, got)
			}
		}
	}
}

// refNarrow rounds x to the nearest value of n by searching the sorted list of its finite values, ties to the
// even pattern, beyond the largest finite value to ±Inf (f8e4m3fn: NaN).
type refNarrow struct {
	n     narrowFormat
	vals  []float64 // non-negative finite values in pattern order, then the first value beyond (overflow)
	codes []uint32
}

func newRefNarrow(n narrowFormat) *refNarrow {
	r := &refNarrow{n: n}
	for b := uint32(0); b < n.sign(); b++ {
		if v := n.refValue(b); !math.IsNaN(v) && !math.IsInf(v, 0) {
			r.vals, r.codes = append(r.vals, v), append(r.codes, b)
		}
	}
	last := r.codes[len(r.codes)-1]
	// the next step above the largest finite value: one more mantissa step (2^(emax+1) for IEEE formats)
	r.vals = append(r.vals, 2*r.vals[len(r.vals)-1]-r.vals[len(r.vals)-2])
	r.codes = append(r.codes, last+1)
	return r
}

func (r *refNarrow) round(x float32) uint32 {
	n := r.n
	var sign uint32
	if math.Signbit(float64(x)) {
		sign = n.sign()
	}
	over := sign | (1<<n.e-1)<<n.m // ±Inf
	if n.noInf {
		over = sign | (n.sign() - 1) // the NaN S.1111.111
	}
	a := math.Abs(float64(x))
	if math.IsInf(a, 0) {
		return over
	}
	i := sort.SearchFloat64s(r.vals, a) // first vals[i] >= a
	var code uint32
	switch {
	case i < len(r.vals) && r.vals[i] == a:
		code = r.codes[i]
	case i == len(r.vals):
		return over
	default:
		lo, hi := i-1, i
		dl, dh := a-r.vals[lo], r.vals[hi]-a
		code = r.codes[lo]
		if dh < dl || (dh == dl && r.codes[hi]&1 == 0) {
			code = r.codes[hi]
		}
	}
	if code == r.codes[len(r.codes)-1] {
		return over
	}
	return sign | code
}

// Narrowing agrees with round-to-nearest-even found by search: at every midpoint between neighbours (ties),
// one float32 step either side of it, and at random float32 patterns (subnormals, overflow and Inf included).
func TestNarrowRoundsToNearestEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range narrowFormats {
		r := newRefNarrow(n)
		check := func(x float32) {
			if got, want := n.narrow(x), r.round(x); got != want {
				t.Fatalf("%s: narrowing %v (%#08x) gives %#x, want %#x", n.dt, x, math.Float32bits(x), got, want)
			}
		}
		for i := 0; i+1 < len(r.vals); i++ {
			mid := float32((r.vals[i] + r.vals[i+1]) / 2) // exact: one more mantissa bit than the format
			if float64(mid) != (r.vals[i]+r.vals[i+1])/2 {
				t.Fatalf("%s: midpoint %v not exact in float32", n.dt, mid)
			}
			for _, x := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1)))} {
				check(x)
				check(-x)
			}
		}
		for i := 0; i < 300000; i++ {
			x := math.Float32frombits(rng.Uint32())
			if x == x {
				check(x)
			}
		}
		for _, x := range []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
			math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32} {
			check(x)
		}
	}
}

func TestNarrowSpecials(t *testing.T) {
	nan := func(u uint32) float32 { return math.Float32frombits(u) }
	cases := []struct {
		name      string
		got, want uint32
	}{
		{"bf16 NaN keeps sign and payload top bits, quiet", uint32(F32ToBF16(nan(0xFF812345))), 0xFFC1},
		{"bf16 max rounds to Inf", uint32(F32ToBF16(math.MaxFloat32)), 0x7F80},
		{"bf16 tie to even down", uint32(F32ToBF16(nan(0x3F808000))), 0x3F80},
		{"bf16 tie to even up", uint32(F32ToBF16(nan(0x3F818000))), 0x3F82},
		{"f16 65519 is finite", uint32(F32ToF16(65519)), 0x7BFF},
		{"f16 65520 is Inf", uint32(F32ToF16(65520)), 0x7C00},
		{"f16 -NaN payload", uint32(F32ToF16(nan(0xFF800001 | 0x3FF<<13))), 0xFFFF},
		{"f16 signalling NaN made quiet", uint32(F32ToF16(nan(0x7F802000))), 0x7E01},
		{"f16 2^-25 ties to 0", uint32(F32ToF16(0x1p-25)), 0x0000},
		{"f16 above 2^-25 to min subnormal", uint32(F32ToF16(math.Nextafter32(0x1p-25, 1))), 0x0001},
		{"f16 largest subnormal rounds to min normal", uint32(F32ToF16(0x1p-14 - 0x1p-26)), 0x0400},
		{"e4m3 448", uint32(F32ToE4M3(448)), 0x7E},
		{"e4m3 464 ties to 448", uint32(F32ToE4M3(464)), 0x7E},
		{"e4m3 above 464 is NaN", uint32(F32ToE4M3(math.Nextafter32(464, 500))), 0x7F},
		{"e4m3 -Inf is -NaN", uint32(F32ToE4M3(float32(math.Inf(-1)))), 0xFF},
		{"e4m3 NaN", uint32(F32ToE4M3(nan(0x7FC00000))), 0x7F},
		{"e4m3 min subnormal", uint32(F32ToE4M3(0x1p-9)), 0x01},
		{"e5m2 57344", uint32(F32ToE5M2(57344)), 0x7B},
		{"e5m2 61440 ties to Inf", uint32(F32ToE5M2(61440)), 0x7C},
		{"e5m2 NaN quiet", uint32(F32ToE5M2(nan(0x7FC00000))), 0x7E},
		{"e5m2 -0", uint32(F32ToE5M2(float32(math.Copysign(0, -1)))), 0x80},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// Round is narrowing then widening, every NaN canonical; F32 and the integer dtypes only canonicalise NaN.
func TestRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		x := math.Float32frombits(rng.Uint32())
		for _, c := range []struct {
			dt   DType
			want float32
		}{
			{BF16, BF16ToF32(F32ToBF16(x))},
			{F16, F16ToF32(F32ToF16(x))},
			{F8E4M3, E4M3ToF32(F32ToE4M3(x))},
			{F8E5M2, E5M2ToF32(F32ToE5M2(x))},
			{F32, x},
			{F64, x},
		} {
			got := c.dt.Round(x)
			if c.want != c.want { // NaN in, or an f8e4m3fn overflow
				if math.Float32bits(got) != CanonicalNaN {
					t.Fatalf("%s.Round(%#08x) = %#08x, want the canonical NaN", c.dt, math.Float32bits(x), math.Float32bits(got))
				}
				continue
			}
			if math.Float32bits(got) != math.Float32bits(c.want) {
				t.Fatalf("%s.Round(%#08x) = %#08x, want %#08x", c.dt, math.Float32bits(x), math.Float32bits(got), math.Float32bits(c.want))
			}
		}
	}
	xs := []float32{1.00390625, float32(math.NaN()), -3}
	BF16.RoundSlice(xs)
	if xs[0] != 1 || math.Float32bits(xs[1]) != CanonicalNaN || xs[2] != -3 {
		t.Fatalf("RoundSlice: %v", xs)
	}
}

// TestBF16Exact: every bf16 bit pattern widened is accepted back as itself; a float32 with any of its low 16
// bits set is refused.
func TestBF16Exact(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		got, ok := BF16Exact(BF16ToF32(uint16(b)))
		if !ok || got != uint16(b) {
			t.Fatalf("bf16 %#04x: BF16Exact gives %#04x, %v", b, got, ok)
		}
	}
	for _, u := range []uint32{0x3F800001, 0x3F808000, 0x00000001, 0x7FC00001, 0x80008000} {
		if _, ok := BF16Exact(math.Float32frombits(u)); ok {
			t.Errorf("float32 %#08x accepted as a bf16 value", u)
		}
	}
}
