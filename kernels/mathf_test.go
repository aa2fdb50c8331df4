package kernels

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fmaRef is a·b + c rounded once to float32, computed exactly with math/big.
func fmaRef(a, b, c float32) float32 {
	if math.IsInf(float64(a), 0) || math.IsInf(float64(b), 0) || math.IsInf(float64(c), 0) || a != a || b != b || c != c {
		return float32(float64(a)*float64(b) + float64(c))
	}
	x := new(big.Float).SetPrec(1000).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetFloat64(float64(c)))
	if x.Sign() == 0 {
		return float32(float64(a)*float64(b) + float64(c)) // sign of an exact zero: IEEE rules, exact in float64
	}
	f, _ := x.Float32() // nearest, ties to even, subnormals and overflow handled
	return f
}

func randF32(r *rand.Rand) float32 {
	for {
		f := math.Float32frombits(r.Uint32())
		if f == f && !math.IsInf(float64(f), 0) {
			return f
		}
	}
}

func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := [][3]float32{
		{1 + 0x1p-12, 1 + 0x1p-12, 0x1p-100}, // a·b a float32 midpoint: float32(math.FMA) rounds twice here
		{1 + 0x1p-12, 1 + 0x1p-12, -0x1p-100},
		{0x1p-75, 0x1p-75, 0x1p-149}, // subnormal result, tie
		{0x1p-75, 0x1p-75, -0x1p-149},
		{3, 5, -15}, {0, -1, 0}, {-0.0, 1, -0.0}, {math.MaxFloat32, 2, -math.MaxFloat32},
	}
	for i := 0; i < 200000; i++ {
		a, b := randF32(r), randF32(r)
		var c float32
		switch i % 4 {
		case 0:
			c = randF32(r)
		case 1: // c near a·b so that cancellation and halfway cases occur
			c = -float32(float64(a) * float64(b))
		case 2:
			a = math.Float32frombits(r.Uint32()&0x807FFFFF | 0x3F000000)
			b = math.Float32frombits(r.Uint32()&0x807FFFFF | 0x3F000000)
			c = math.Float32frombits(r.Uint32()&0x807FFFFF | uint32(60+r.IntN(100))<<23)
		case 3: // tiny
			a = math.Float32frombits(r.Uint32()&0x807FFFFF | uint32(r.IntN(60))<<23)
			b = math.Float32frombits(r.Uint32()&0x807FFFFF | uint32(r.IntN(60))<<23)
			c = math.Float32frombits(r.Uint32() & 0x80FFFFFF)
		}
		cases = append(cases, [3]float32{a, b, c})
	}
	doubleRounded := 0
	for _, k := range cases {
		got, want := FMA32(k[0], k[1], k[2]), fmaRef(k[0], k[1], k[2])
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("FMA32(%g, %g, %g) = %g (%#x), want %g (%#x)", k[0], k[1], k[2], got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if float32(math.FMA(float64(k[0]), float64(k[1]), float64(k[2]))) != want {
			doubleRounded++
		}
	}
	if doubleRounded == 0 {
		t.Errorf("no case where float32(math.FMA) differs from a true float32 FMA: the cases do not exercise FMA32's correction")
	}
	t.Logf("%d cases; float32(math.FMA(float64...)) was wrong in %d of them", len(cases), doubleRounded)
}

// ulpOf64 is the ULP distance between a float32 result and the float64 reference rounded to float32, plus
// the fraction beyond it (|got - ref| in units of ulp(ref)).
func ulpErr(got float32, ref float64) float64 {
	r32 := float32(ref)
	if got == r32 {
		return math.Abs(float64(got)-ref) / ulp32(r32)
	}
	return math.Abs(float64(got)-ref) / ulp32(r32)
}

func ulp32(x float32) float64 {
	a := math.Abs(float64(x))
	if a < 0x1p-126 {
		return 0x1p-149
	}
	_, e := math.Frexp(a)
	return math.Ldexp(1, e-24)
}

// sweep visits float32 values in [lo, hi] with the given bit stride (positive and negative ranges by sign).
func sweep(lo, hi float32, stride uint32, f func(x float32)) {
	if lo < 0 && hi > 0 {
		sweep(lo, -0x1p-149, stride, f)
		sweep(0x1p-149, hi, stride, f)
		return
	}
	a, b := math.Float32bits(lo), math.Float32bits(hi)
	if lo < 0 {
		a, b = b, a
	}
	for u := a; u <= b && u >= a; u += stride {
		f(math.Float32frombits(u))
	}
	f(hi)
}

// accuracy sweeps f over float32 inputs in [lo, hi] against ref (float64) and reports the worst error in
// ulp of the result (0.5 = correctly rounded) and the worst integer ULP distance from the correctly rounded
// float32 result.
func accuracy(t *testing.T, name string, f func(float32) float32, ref func(float64) float64, lo, hi float32) {
	stride := uint32(61)
	if testing.Short() {
		stride = 2039
	}
	worst, at := 0.0, float32(0)
	maxULP, n, exact := uint64(0), 0, 0
	sweep(lo, hi, stride, func(x float32) {
		got, r := f(x), ref(float64(x))
		if e := ulpErr(got, r); e > worst {
			worst, at = e, x
		}
		u := ULP(got, float32(r))
		maxULP = max(maxULP, u)
		n++
		if u == 0 {
			exact++
		}
	})
	t.Logf("%s: %d inputs in [%g, %g], max error %.3f ulp at x = %g (%#x); max %d ulp from the correctly rounded result; %.2f%% correctly rounded",
		name, n, lo, hi, worst, at, math.Float32bits(at), maxULP, 100*float64(exact)/float64(n))
	if worst > 1.5 || maxULP > 1 {
		t.Errorf("%s: max error %.3f ulp (%d ulp from correctly rounded) at %g, want < 1.5 (1)", name, worst, maxULP, at)
	}
}

func TestExpAccuracy(t *testing.T) { accuracy(t, "Exp", Exp, math.Exp, -103.9, 88.72) }

func TestLogAccuracy(t *testing.T) { accuracy(t, "Log", Log, math.Log, 0x1p-149, math.MaxFloat32) }

func TestExpLogSpecial(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	bits := math.Float32bits
	cases := []struct {
		name      string
		got, want float32
	}{
		{"Exp(0)", Exp(0), 1},
		{"Exp(-0)", Exp(float32(math.Copysign(0, -1))), 1},
		{"Exp(+Inf)", Exp(inf), inf},
		{"Exp(-Inf)", Exp(-inf), 0},
		{"Exp(88.7228317) finite", Exp(math.Float32frombits(0x42B17217)), float32(math.Exp(float64(math.Float32frombits(0x42B17217))))},
		{"Exp(88.7228394) overflows", Exp(math.Float32frombits(0x42B17218)), inf},
		{"Exp(-104) underflows", Exp(-104.00001), 0},
		{"Exp(-103.2) subnormal", Exp(-103.2), float32(math.Exp(-103.2))},
		{"Exp(-87.5) subnormal boundary", Exp(-87.5), float32(math.Exp(-87.5))},
		{"Exp(denormal)", Exp(0x1p-149), 1},
		{"Log(1)", Log(1), 0},
		{"Log(+0)", Log(0), -inf},
		{"Log(-0)", Log(float32(math.Copysign(0, -1))), -inf},
		{"Log(+Inf)", Log(inf), inf},
		{"Log(min denormal)", Log(0x1p-149), float32(math.Log(0x1p-149))},
		{"Log(max float)", Log(math.MaxFloat32), float32(math.Log(math.MaxFloat32))},
		{"Log(2)", Log(2), float32(math.Ln2)},
	}
	for _, c := range cases {
		if bits(c.got) != bits(c.want) && ULP(c.got, c.want) > 1 {
			t.Errorf("%s = %g (%#x), want %g (%#x)", c.name, c.got, bits(c.got), c.want, bits(c.want))
		}
	}
	for _, c := range []float32{0, 1, 2, -inf, 1e-40} {
		if Exp(c) != Exp(c) {
			t.Errorf("Exp(%g) is NaN", c)
		}
	}
	if bits(Exp(1)) != bits(Exp(1)) || Exp(nan) == Exp(nan) || Log(nan) == Log(nan) {
		t.Errorf("NaN must propagate through Exp and Log")
	}
	if bits(Log(-1)) != CanonicalNaN || bits(Log(-inf)) != CanonicalNaN {
		t.Errorf("Log of a negative number = %#x, want canonical NaN", bits(Log(-1)))
	}
	if Exp(0) != 1 || bits(Exp(0)) != 0x3F800000 {
		t.Errorf("Exp(0) must be exactly 1 (attention multiplies by it)")
	}
}

func TestRsqrtSiLU(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		x := float32(r.ExpFloat64() * 10)
		if x == 0 {
			continue
		}
		if e := ulpErr(Rsqrt(x), 1/math.Sqrt(float64(x))); e > 1.5 {
			t.Fatalf("Rsqrt(%g) error %.2f ulp", x, e)
		}
		y := float32(r.NormFloat64() * 8)
		want := float64(y) / (1 + math.Exp(-float64(y)))
		if e := ulpErr(SiLU(y), want); e > 3 && math.Abs(want) > 1e-30 {
			t.Fatalf("SiLU(%g) = %g, want %g (%.2f ulp)", y, SiLU(y), want, e)
		}
	}
	if s := SiLU(-200); s != 0 || !math.Signbit(float64(s)) {
		t.Errorf("SiLU(-200) = %g, want -0", s)
	}
	if Rsqrt(4) != 0.5 {
		t.Errorf("Rsqrt(4) = %g", Rsqrt(4))
	}
}
