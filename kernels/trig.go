package kernels

import (
	"fmt"
	"math"
	"math/big"
)

// The RoPE tables' float64 functions (docs/arithmetic.md §6), defined here rather than taken from package math so
// that the Python library (capture/python/bitalign/rope.py) computes the same bits: the inverse frequencies are
// correctly rounded (an exact big-float evaluation, where math.Pow goes through the platform's Exp and Log, assembly
// on amd64), and cos/sin are Cephes' algorithm as Go's math.Cos and math.Sin write it, with every product and sum
// rounded explicitly so that no compiler may fuse them.

// RoPEInvFreq returns ω_j = θ^(−2j/hd) for j < hd/2, each the float64 nearest to the exact value.
func RoPEInvFreq(theta float64, hd int) ([]float64, error) {
	if !(theta > 0) || math.IsInf(theta, 0) {
		return nil, fmt.Errorf("kernels: RoPE base %v must be a positive finite number", theta)
	}
	if hd <= 0 || hd%2 != 0 {
		return nil, fmt.Errorf("kernels: RoPE head dim %d is not a positive even number", hd)
	}
	const prec = 256
	lnTheta := bigLn(new(big.Float).SetPrec(prec).SetFloat64(theta), prec)
	inv := make([]float64, hd/2)
	for j := range inv {
		if j == 0 {
			inv[j] = 1
			continue
		}
		e := new(big.Float).SetPrec(prec).SetInt64(int64(-2 * j))
		e.Quo(e, new(big.Float).SetPrec(prec).SetInt64(int64(hd)))
		e.Mul(e, lnTheta)
		inv[j], _ = bigExp(e, prec).Float64() // big.ToNearestEven
	}
	return inv, nil
}

// bigLn is ln x for x > 0 at prec bits: x = m·2^k (m in [0.5, 1)), ln x = k·ln 2 + 2·atanh((m−1)/(m+1)).
func bigLn(x *big.Float, prec uint) *big.Float {
	m := new(big.Float).SetPrec(prec)
	k := x.MantExp(m)
	r := atanh2(m, prec)
	ln2 := atanh2(new(big.Float).SetPrec(prec).SetInt64(2), prec) // 2·atanh(1/3)
	return r.Add(r, ln2.Mul(ln2, new(big.Float).SetPrec(prec).SetInt64(int64(k))))
}

// atanh2 is ln m = 2·atanh(z), z = (m−1)/(m+1), by its series Σ z^(2i+1)/(2i+1) (|z| ≤ 1/3 here).
func atanh2(m *big.Float, prec uint) *big.Float {
	one := new(big.Float).SetPrec(prec).SetInt64(1)
	z := new(big.Float).SetPrec(prec).Sub(m, one)
	z.Quo(z, new(big.Float).SetPrec(prec).Add(m, one))
	z2 := new(big.Float).SetPrec(prec).Mul(z, z)
	sum := new(big.Float).SetPrec(prec).Set(z)
	p := new(big.Float).SetPrec(prec).Set(z)
	eps := new(big.Float).SetPrec(prec).SetMantExp(one, -int(prec)-8)
	for i := int64(3); ; i += 2 {
		p.Mul(p, z2)
		t := new(big.Float).SetPrec(prec).Quo(p, new(big.Float).SetPrec(prec).SetInt64(i))
		sum.Add(sum, t)
		if t.Abs(t).Cmp(eps) < 0 {
			break
		}
	}
	return sum.Mul(sum, new(big.Float).SetPrec(prec).SetInt64(2))
}

// bigExp is e^y at prec bits: y = n·ln 2 + r (|r| ≤ ln 2 / 2), e^y = 2^n · Σ r^i/i!.
func bigExp(y *big.Float, prec uint) *big.Float {
	ln2 := atanh2(new(big.Float).SetPrec(prec).SetInt64(2), prec)
	q := new(big.Float).SetPrec(prec).Quo(y, ln2)
	nf, _ := q.Float64()
	n := int64(math.Round(nf))
	r := new(big.Float).SetPrec(prec).Mul(ln2, new(big.Float).SetPrec(prec).SetInt64(n))
	r.Sub(y, r)
	one := new(big.Float).SetPrec(prec).SetInt64(1)
	sum := new(big.Float).SetPrec(prec).Set(one)
	t := new(big.Float).SetPrec(prec).Set(one)
	eps := new(big.Float).SetPrec(prec).SetMantExp(one, -int(prec)-8)
	for i := int64(1); ; i++ {
		t.Mul(t, r)
		t.Quo(t, new(big.Float).SetPrec(prec).SetInt64(i))
		sum.Add(sum, t)
		if new(big.Float).Abs(t).Cmp(eps) < 0 {
			break
		}
	}
	return sum.SetMantExp(sum, int(n))
}

// trigMax is the largest argument Cos64 and Sin64 take (Go's reduceThreshold: Cody–Waite reduction holds below).
const trigMax = 1 << 29

// Cephes' coefficients, as Go's math/sin.go holds them.
var (
	trigSin = [...]float64{1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
		-1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1}
	trigCos = [...]float64{-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
		2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2}
)

const (
	trigPI4A     = 7.85398125648498535156e-1  // 0x3fe921fb40000000: π/4 in three parts
	trigPI4B     = 3.77489470793079817668e-8  // 0x3e64442d00000000
	trigPI4C     = 2.69515142907905952645e-15 // 0x3ce8469898cc5170
	trigFourByPi = 4 / math.Pi                // 0x3ff45f306dc9c883, rounded once from the exact constant
)

// sinCos64 is (sin x, cos x) for 0 ≤ x < trigMax, each as Go's math.Sin and math.Cos compute it without fusion.
func sinCos64(x float64) (s, c float64) {
	j := uint64(float64(x * trigFourByPi))
	y := float64(j)
	if j&1 == 1 {
		j++
		y++
	}
	j &= 7
	z := float64(float64(float64(x-float64(y*trigPI4A))-float64(y*trigPI4B)) - float64(y*trigPI4C))
	zz := float64(z * z)
	sp := float64(z + float64(float64(z*zz)*poly6(trigSin, zz)))
	cp := float64(float64(1.0-float64(0.5*zz)) + float64(float64(zz*zz)*poly6(trigCos, zz)))
	sign := j > 3
	if sign {
		j -= 4
	}
	s, c = sp, cp
	if j == 1 || j == 2 {
		s, c = cp, sp
	}
	if sign {
		s = -s
	}
	if (j > 1) != sign { // cos: negative in octants 2..5
		c = -c
	}
	return s, c
}

// poly6 is ((((c0·z + c1)·z + c2)·z + c3)·z + c4)·z + c5, each step rounded.
func poly6(c [6]float64, z float64) float64 {
	p := float64(c[0] * z)
	for _, k := range c[1:5] {
		p = float64(float64(p+k) * z)
	}
	return float64(p + c[5])
}
