package main

import (
	"fmt"
	"math"
)

// craftedCase is one hand-made k-step: it tells one hypothesis about the summation from another.
type craftedCase struct {
	Name string
	A, B [16]uint16
	C    uint32
}

// bf is the bf16 bits of x, which must be a bf16 value.
func bf(x float64) uint16 {
	f := float32(x)
	u := math.Float32bits(f)
	if float64(f) != x || u&0xFFFF != 0 {
		panic(fmt.Sprintf("mmacheck: %g is not a bf16 value", x))
	}
	return uint16(u >> 16)
}

func f32(x float64) uint32 {
	if float64(float32(x)) != x {
		panic(fmt.Sprintf("mmacheck: %g is not a float32 value", x))
	}
	return math.Float32bits(float32(x))
}

// prods makes a case whose products are p[j]·1 (b all ones where p[j] is set).
func prods(name string, c uint32, p map[int]float64) craftedCase {
	k := craftedCase{Name: name, C: c}
	for j, v := range p {
		k.A[j], k.B[j] = bf(v), bf(1)
	}
	return k
}

func craftedCases() []craftedCase {
	var cs []craftedCase
	p2 := func(k int) float64 { return math.Ldexp(1, k) }
	for k := 18; k <= 36; k++ {
		cs = append(cs, prods(fmt.Sprintf("1+2^-%d", k), 0, map[int]float64{0: 1, 1: p2(-k)}))
		cs = append(cs, prods(fmt.Sprintf("2^-%d+1 (small first)", k), 0, map[int]float64{0: p2(-k), 15: 1}))
		m := map[int]float64{0: 1}
		for j := 1; j < 16; j++ {
			m[j] = p2(-k)
		}
		cs = append(cs, prods(fmt.Sprintf("1+15·2^-%d", k), 0, m))
		cs = append(cs, prods(fmt.Sprintf("c=1, +2^-%d", k), f32(1), map[int]float64{3: p2(-k)}))
		m = map[int]float64{}
		for j := 0; j < 16; j++ {
			m[j] = p2(-k)
		}
		cs = append(cs, prods(fmt.Sprintf("c=1, +16·2^-%d", k), f32(1), m))
		cs = append(cs, prods(fmt.Sprintf("c=2^-%d, +1", k), f32(p2(-k)), map[int]float64{5: 1}))
		cs = append(cs, prods(fmt.Sprintf("1-1+2^-%d (0,1,2)", k), 0, map[int]float64{0: 1, 1: -1, 2: p2(-k)}))
		cs = append(cs, prods(fmt.Sprintf("1-1+2^-%d (0,8,15)", k), 0, map[int]float64{0: 1, 8: -1, 15: p2(-k)}))
		cs = append(cs, prods(fmt.Sprintf("c=1, -1+2^-%d", k), f32(1), map[int]float64{9: -1, 10: p2(-k)}))
		cs = append(cs, prods(fmt.Sprintf("1-(1-2^-8)+2^-%d", k), 0, map[int]float64{0: 1, 1: -(1 - p2(-8)), 2: p2(-k)}))
		cs = append(cs, prods(fmt.Sprintf("1-2^-%d", k), 0, map[int]float64{0: 1, 1: -p2(-k)}))
		cs = append(cs, prods(fmt.Sprintf("-1+2^-%d", k), 0, map[int]float64{0: -1, 1: p2(-k)}))
	}
	// one fused step, not two of 8: the first 8 products cancel, the 9th survives only if it is not aligned to them
	for _, k := range []int{24, 26, 30} {
		cs = append(cs, prods(fmt.Sprintf("1-1 (0,1) + 2^-%d (8)", k), 0, map[int]float64{0: 1, 1: -1, 8: p2(-k)}))
	}
	// nominal exponents: 1.5·1.5 = 2.25 is aligned at 2^0 (ea+eb), not at its leading bit 2^1
	for _, k := range []int{24, 25, 26} {
		c := craftedCase{Name: fmt.Sprintf("1.5·1.5 - 1.5·1.5 + 2^-%d", k)}
		c.A[0], c.B[0], c.A[1], c.B[1], c.A[2], c.B[2] = bf(1.5), bf(1.5), bf(-1.5), bf(1.5), bf(p2(-k)), bf(1)
		cs = append(cs, c)
	}
	// rounding of the normalised sum
	cs = append(cs,
		prods("1+2^-24+2^-25 (RN up, RZ down)", 0, map[int]float64{0: 1, 1: p2(-24), 2: p2(-25)}),
		prods("-(1+2^-24+2^-25)", 0, map[int]float64{0: -1, 1: -p2(-24), 2: -p2(-25)}),
		prods("1+2^-24 (tie)", 0, map[int]float64{0: 1, 1: p2(-24)}),
		prods("1+2^-23+2^-24 (tie, odd)", 0, map[int]float64{0: 1, 1: p2(-23), 2: p2(-24)}),
		prods("-(1+2^-23+2^-24)", 0, map[int]float64{0: -1, 1: -p2(-23), 2: -p2(-24)}),
		prods("c=1+2^-23, +2^-24", f32(1+p2(-23)), map[int]float64{0: p2(-24)}),
		prods("c=-1, +2^-25 (below -1)", f32(-1), map[int]float64{0: p2(-25)}),
		prods("c=1, -2^-25", f32(1), map[int]float64{0: -p2(-25)}),
		prods("c=1, -2^-24-2^-26", f32(1), map[int]float64{0: -p2(-24), 1: -p2(-26)}),
	)
	// signed zeros
	z := func(name string, c uint32, a, b uint16, n int) craftedCase {
		k := craftedCase{Name: name, C: c}
		for j := 0; j < n; j++ {
			k.A[j], k.B[j] = a, b
		}
		return k
	}
	cs = append(cs,
		z("+0 products, c=+0", 0, 0, 0, 16),
		z("+0 products, c=-0", 0x80000000, 0, 0, 16),
		z("-0 products (all 16), c=-0", 0x80000000, 0x8000, 0x3F80, 16),
		z("-0 products (all 16), c=+0", 0, 0x8000, 0x3F80, 16),
		z("-0 products (first 8, rest +0), c=-0", 0x80000000, 0x8000, 0x3F80, 8),
		prods("1-1, c=-0", 0x80000000, map[int]float64{0: 1, 1: -1}),
		prods("1-1, c=+0", 0, map[int]float64{0: 1, 1: -1}),
		prods("c=1, -1", f32(1), map[int]float64{4: -1}),
		prods("c=-1, +1", f32(-1), map[int]float64{4: 1}),
	)
	// NaN and Inf
	sp := func(name string, c uint32, a0, b0 uint16) craftedCase {
		k := craftedCase{Name: name, C: c}
		k.A[0], k.B[0] = a0, b0
		k.A[1], k.B[1] = bf(1), bf(1)
		return k
	}
	cs = append(cs,
		sp("a=qNaN 0x7FC0", 0, 0x7FC0, bf(1)),
		sp("a=-NaN 0xFFC1", 0, 0xFFC1, bf(1)),
		sp("a=sNaN 0x7F81", 0, 0x7F81, bf(1)),
		sp("c=qNaN 0x7FC00000", 0x7FC00000, 0, 0),
		sp("c=NaN 0x7FA00001", 0x7FA00001, 0, 0),
		sp("c=-NaN 0xFFC00001", 0xFFC00001, 0, 0),
		sp("Inf·0", 0, 0x7F80, 0),
		sp("Inf·(bf16 subnormal)", 0, 0x7F80, 0x0001),
		sp("Inf·1", 0, 0x7F80, bf(1)),
		sp("-Inf·1", 0, 0xFF80, bf(1)),
		sp("Inf·1, c=-Inf", 0xFF800000, 0x7F80, bf(1)),
		sp("c=+Inf", 0x7F800000, 0, 0),
		sp("c=-Inf", 0xFF800000, 0, 0),
	)
	k := sp("Inf - Inf (two products)", 0, 0x7F80, bf(1))
	k.A[1], k.B[1] = 0xFF80, bf(1)
	cs = append(cs, k)
	// overflow
	cs = append(cs,
		prods("2^127+2^127 (overflow)", 0, map[int]float64{0: p2(127), 1: p2(127)}),
		prods("c=max, +2^103 (half ulp)", f32(math.MaxFloat32), map[int]float64{0: p2(103)}),
		prods("c=max, +2^104 (one ulp)", f32(math.MaxFloat32), map[int]float64{0: p2(104)}),
		prods("c=max, +2^102", f32(math.MaxFloat32), map[int]float64{0: p2(102)}),
		prods("c=-max, -2^104", f32(-math.MaxFloat32), map[int]float64{0: -p2(104)}),
	)
	big := craftedCase{Name: "2^64·2^64 + 2^64·2^64 (products past float32)"}
	big.A[0], big.B[0], big.A[1], big.B[1] = bf(p2(64)), bf(p2(64)), bf(p2(64)), bf(p2(64))
	cs = append(cs, big)
	big = craftedCase{Name: "2^100·2^100 - 2^100·2^100 + 1 (huge products cancel)"}
	big.A[0], big.B[0], big.A[1], big.B[1], big.A[2], big.B[2] = bf(p2(100)), bf(p2(100)), bf(-p2(100)), bf(p2(100)), bf(1), bf(1)
	cs = append(cs, big)
	// subnormals
	mul := func(name string, c uint32, a0, b0 uint16) craftedCase {
		k := craftedCase{Name: name, C: c}
		k.A[0], k.B[0] = a0, b0
		return k
	}
	cs = append(cs,
		mul("bf16 subnormal 2^-133 · 2^10", 0, 0x0001, bf(p2(10))),
		mul("bf16 subnormal 0x007F · 2^60", 0, 0x007F, bf(p2(60))),
		mul("2^-126 · 2^-10 (float32 subnormal)", 0, bf(p2(-126)), bf(p2(-10))),
		mul("2^-126 · 2^-23 = 2^-149", 0, bf(p2(-126)), bf(p2(-23))),
		mul("2^-126 · 2^-24 = 2^-150", 0, bf(p2(-126)), bf(p2(-24))),
		mul("2^-126 · 1.5·2^-24 = 1.5·2^-150", 0, bf(p2(-126)), bf(1.5*p2(-24))),
		mul("2^-126 · 1.5·2^-23 = 1.5·2^-149", 0, bf(p2(-126)), bf(1.5*p2(-23))),
		mul("-2^-126 · 1.5·2^-23", 0, bf(-p2(-126)), bf(1.5*p2(-23))),
		mul("c=2^-149 alone", 1, 0, 0),
		mul("c=0x007FFFFF alone", 0x007FFFFF, 0, 0),
		mul("c=2^-149, +2^-126·2^-23", 1, bf(p2(-126)), bf(p2(-23))),
		mul("c=2^-149, +1", 1, bf(1), bf(1)),
		mul("c=0x00400001, +2^-126", 0x00400001, bf(p2(-126)), bf(1)),
		mul("c=2^-126, -2^-126·1.5·2^-24", f32(p2(-126)), bf(-p2(-126)), bf(1.5*p2(-24))),
		mul("bf16 subnormal · bf16 subnormal", 0, 0x0040, 0x0040),
		mul("bf16 subnormal 0x0001 · 2^126·1.5", 0, 0x0001, bf(1.5*p2(126))),
		mul("-2^-126 · 2^-24 = -2^-150", 0, bf(-p2(-126)), bf(p2(-24))),
		mul("-2^-126 · 1.5·2^-24", 0, bf(-p2(-126)), bf(1.5*p2(-24))),
		mul("c=-0, -2^-126·2^-24", 0x80000000, bf(-p2(-126)), bf(p2(-24))),
		mul("c=-2^-149, +2^-126·2^-24", 0x80000001, bf(p2(-126)), bf(p2(-24))),
		mul("c=-2^-149, +2^-126·2^-23", 0x80000001, bf(p2(-126)), bf(p2(-23))),
		mul("2^-126 · 1.75·2^-23 = 1.75·2^-149", 0, bf(p2(-126)), bf(1.75*p2(-23))),
	)
	return cs
}

// craftedBlocks packs the cases 8 to a block: case i of a block is A row i, B column i, C[i][i] (the
// other rows are zero, the other C entries +0).
func craftedBlocks(cs []craftedCase) []block {
	bs := make([]block, (len(cs)+7)/8)
	for i, k := range cs {
		b := &bs[i/8]
		b.A[i%8], b.B[i%8], b.C[i%8][i%8] = k.A, k.B, k.C
	}
	return bs
}
