package kernels

import (
	"bufio"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// mmaRow is one line of testdata/mma_h200_crafted.txt: a crafted k-step and the H200's two answers.
type mmaRow struct {
	name    string
	a, b    [16]uint16
	c       uint32
	mma, wg uint32
}

func readMMARows(t *testing.T) []mmaRow {
	t.Helper()
	f, err := os.Open("testdata/mma_h200_crafted.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hex32 := func(s string) uint32 {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 16, 32)
		if err != nil {
			t.Fatalf("mma_h200_crafted.txt: %q: %v", s, err)
		}
		return uint32(v)
	}
	var rows []mmaRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Split(line, " | ")
		if len(fs) != 5 {
			t.Fatalf("mma_h200_crafted.txt: %q: want 5 fields", line)
		}
		r := mmaRow{name: fs[0], c: hex32(fs[2]), mma: hex32(fs[3]), wg: hex32(fs[4])}
		for _, p := range strings.Fields(fs[1]) {
			var j int
			var a, b uint16
			if _, err := fmt.Sscanf(p, "%d:%04X*%04X", &j, &a, &b); err != nil || j < 0 || j > 15 {
				t.Fatalf("mma_h200_crafted.txt: %q: bad product %q", line, p)
			}
			r.a[j], r.b[j] = a, b
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 200 {
		t.Fatalf("mma_h200_crafted.txt: %d rows", len(rows))
	}
	return rows
}

// TestMMACrafted: the emulation gives the H200's bits on every crafted k-step (alignment depth, rounding,
// signed zeros, NaN/Inf, overflow, subnormals), for mma.sync and wgmma alike.
func TestMMACrafted(t *testing.T) {
	for _, r := range readMMARows(t) {
		got := math.Float32bits(MMABF16Dot16(&r.a, &r.b, math.Float32frombits(r.c)))
		if got != r.mma || got != r.wg {
			t.Errorf("%s: emulation %08X, mma.sync %08X, wgmma %08X", r.name, got, r.mma, r.wg)
		}
	}
}

// TestMMARejectedModels: every alternative the fit rejected gets at least one crafted k-step wrong, so the
// table pins each of HopperMMA's choices.
func TestMMARejectedModels(t *testing.T) {
	rows := readMMARows(t)
	alts := map[string]MMASum{}
	for _, g := range []int{4, 8} {
		s := HopperMMA
		s.Group = g
		alts[fmt.Sprintf("group %d", g)] = s
	}
	for _, f := range []int{24, 26} {
		s := HopperMMA
		s.Frac = f
		alts[fmt.Sprintf("frac %d", f)] = s
	}
	s := HopperMMA
	s.Nominal = false
	alts["leading-bit exponents"] = s
	s = HopperMMA
	s.TruncFloor = true
	alts["truncation toward -inf"] = s
	for _, r := range []MMARound{RoundNearest, RoundDown} {
		s := HopperMMA
		s.Round = r
		alts[fmt.Sprintf("rounding %d", r)] = s
	}
	for name, s := range alts {
		wrong := 0
		for _, r := range rows {
			if math.Float32bits(s.Dot16(&r.a, &r.b, math.Float32frombits(r.c))) != r.mma {
				wrong++
			}
		}
		if wrong == 0 {
			t.Errorf("%s: matches every crafted k-step: the table does not tell it from HopperMMA", name)
		}
	}
}

// randBF16Bits is a random finite bf16 with biased exponent in [lo, hi].
func randBF16Bits(r *rand.Rand, lo, hi int) uint16 {
	e := lo + r.IntN(hi-lo+1)
	return uint16(r.IntN(2))<<15 | uint16(e)<<7 | uint16(r.IntN(128))
}

// TestMMAOrderFree: one fused addition, so any permutation of the 16 products gives the same bits.
func TestMMAOrderFree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var a, b [16]uint16
		for j := range a {
			a[j], b[j] = randBF16Bits(r, 100, 150), randBF16Bits(r, 110, 140)
		}
		c := math.Float32frombits(uint32(r.IntN(2))<<31 | uint32(100+r.IntN(60))<<23 | uint32(r.IntN(1<<23)))
		want := MMABF16Dot16(&a, &b, c)
		p := r.Perm(16)
		var pa, pb [16]uint16
		for j, k := range p {
			pa[j], pb[j] = a[k], b[k]
		}
		if got := MMABF16Dot16(&pa, &pb, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d: permuted %08X, original %08X", i, math.Float32bits(got), math.Float32bits(want))
		}
	}
}

// TestMMAAgainstBig: the integer implementation equals the model written with math/big (truncate every term
// to a multiple of 2^(E−25), add exactly, round toward zero to 24 bits) on normal-range results.
func TestMMAAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	bf := func(u uint16) *big.Float { return new(big.Float).SetFloat64(float64(FromBF16Bits(u))) }
	for i := 0; i < 20000; i++ {
		var a, b [16]uint16
		spread := 1 + r.IntN(40)
		for j := range a {
			a[j], b[j] = randBF16Bits(r, 127-spread, 127+spread), randBF16Bits(r, 120, 134)
		}
		c := math.Float32frombits(uint32(r.IntN(2))<<31 | uint32(110+r.IntN(40))<<23 | uint32(r.IntN(1<<23)))
		if r.IntN(4) == 0 {
			c = 0
		}
		emax := math.MinInt
		if c != 0 {
			emax = int(math.Float32bits(c)>>23&0xFF) - 127
		}
		for j := range a {
			emax = max(emax, int(a[j]>>7&0xFF)+int(b[j]>>7&0xFF)-254)
		}
		unit := new(big.Float).SetMantExp(big.NewFloat(1), emax-25)
		trunc := func(x *big.Float) *big.Float { // toward zero, to a multiple of unit
			q := new(big.Float).Quo(x, unit)
			n, _ := q.Int(nil)
			return new(big.Float).Mul(new(big.Float).SetInt(n), unit)
		}
		sum := new(big.Float).SetPrec(200)
		sum.Add(sum, trunc(new(big.Float).SetFloat64(float64(c))))
		for j := range a {
			p := new(big.Float).SetPrec(200).Mul(bf(a[j]), bf(b[j]))
			sum.Add(sum, trunc(p))
		}
		want, _ := new(big.Float).SetPrec(24).SetMode(big.ToZero).Set(sum).Float32()
		got := MMABF16Dot16(&a, &b, c)
		if want == 0 {
			want = 0 // +0 (measured), big gives the sign of the sum's zero
		}
		if math.Abs(float64(want)) < 0x1p-126 {
			continue // big.Float has no subnormals
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("case %d: a %04X b %04X c %08X: got %08X, math/big %08X", i, a, b, math.Float32bits(c),
				math.Float32bits(got), math.Float32bits(want))
		}
	}
}

// BenchmarkMMABF16Dot16: one emulated k-step (16 products) on narrow-range data, the CPU's cost of `tc`.
func BenchmarkMMABF16Dot16(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	var a, w [64][16]uint16
	for i := range a {
		for j := range a[i] {
			a[i][j], w[i][j] = randBF16Bits(r, 120, 134), randBF16Bits(r, 120, 134)
		}
	}
	var acc float32
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		acc = MMABF16Dot16(&a[i&63], &w[(i>>6)&63], acc)
	}
	_ = acc
}

// TestMMARoundings: the integer rounding of the models (toward zero, to nearest, down) equals float64's exact
// value rounded by float32 conversion, normal and subnormal results alike.
func TestMMARoundings(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 200000; i++ {
		sum := int64(r.Uint64() >> uint(11+r.IntN(50)))
		if r.IntN(2) == 0 {
			sum = -sum
		}
		q := -190 + r.IntN(300)
		x := math.Ldexp(float64(sum), q)
		if math.Abs(x) >= 0x1p128 {
			continue
		}
		rn := float32(x)
		rz := rn
		if math.Abs(float64(rz)) > math.Abs(x) {
			rz = math.Nextafter32(rz, 0)
		}
		rd := rn
		if float64(rd) > x {
			rd = math.Nextafter32(rd, float32(math.Inf(-1)))
		}
		for _, c := range []struct {
			m    MMARound
			want float32
		}{{RoundZero, rz}, {RoundNearest, rn}, {RoundDown, rd}} {
			if c.want == 0 {
				c.want = 0 // +0
			}
			if got := c.m.toFloat32(sum, q); math.Float32bits(got) != math.Float32bits(c.want) {
				t.Fatalf("%d·2^%d, rounding %d: got %08X, want %08X", sum, q, c.m, math.Float32bits(got), math.Float32bits(c.want))
			}
		}
	}
}
