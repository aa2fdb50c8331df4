package kernels

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"bitalign/internal/golden"
)

// mathfVectorsFile pins FMA32, Exp, Log and Gumbel's transform (docs/arithmetic.md §2.1, §2.2, §10) over about
// 25 million inputs: the Python library's numpy port (capture/python/bitalign/mathf.py), which the top-p walk and
// the CPU reference of the sampling rule use, makes the same inputs from integer arithmetic alone and must match
// every hash (capture/python/tests/test_mathf.py). go test ./kernels -run MathfVectors -update rewrites it.
const mathfVectorsFile = "testdata/mathf_vectors.tsv"

// lowbias32 is a 32-bit integer hash (Chris Wellons' lowbias32); the Python side computes the same.
func lowbias32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7FEB352D
	x ^= x >> 15
	x *= 0x846CA68B
	x ^= x >> 16
	return x
}

// hashWord is word i of hash stream seed.
func hashWord(seed, i uint32) uint32 { return lowbias32(i ^ seed*0x9E3779B9) }

// ctlFloat is a float32 with h's sign and mantissa and a biased exponent in [lo, lo+span).
func ctlFloat(h uint32, lo, span uint32) float32 {
	return math.Float32frombits(h&0x807FFFFF | (lo+(h>>23&0xFF)%span)<<23)
}

// mathInputs are the named input sets (the parameter text the Python test parses):
//   - bits=LO:HI:STRIDE   the bit patterns LO, LO+STRIDE, … up to HI (hex)
//   - hash=SEED:N         N bit patterns hashWord(SEED, i): every class of float32 (NaN, ±Inf, subnormals)
//   - odd24               every uniform of §10, (2k+1)·2^-24 for k < 2^23
func mathInputs(spec string) []float32 {
	var lo, hi, stride, seed, n uint32
	switch {
	case spec == "odd24":
		x := make([]float32, 1<<23)
		for k := range x {
			x[k] = float32(2*k+1) * 0x1p-24
		}
		return x
	case scan(spec, "bits=%x:%x:%x", &lo, &hi, &stride):
		var x []float32
		for u := uint64(lo); u <= uint64(hi); u += uint64(stride) {
			x = append(x, math.Float32frombits(uint32(u)))
		}
		return x
	case scan(spec, "hash=%d:%d", &seed, &n):
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(hashWord(seed, uint32(i)))
		}
		return x
	}
	panic("mathInputs: " + spec)
}

func scan(s, format string, args ...any) bool {
	k, err := fmt.Sscanf(s, format, args...)
	return err == nil && k == len(args)
}

// fmaTriples are N fused multiply-adds of a family, from hash stream seed (words 3i, 3i+1, 3i+2):
//   - rand:   a, b with exponents 2^-40…2^40, c 2^-80…2^80
//   - half:   a, b with 13-bit significands (their product has at most 26 bits: a quarter of them lie exactly
//     halfway between two float32) and c a tiny 8-bit value 2^-73…2^-17 of the product, either sign: the
//     round-to-odd correction
//   - tiny:   products 2^-150…2^-100 and c subnormal or among the smallest normals: results below 2^-126
//   - subhalf: a·b = ±2^-150·(1 − i²·2^-46), just off half a subnormal ulp, and c subnormal: the float64 sum
//     lands exactly halfway on the subnormal grid, and only rounding to odd gets the last bit right
//   - cancel: c = −RN(a·b) moved by up to 128 ulps: exact cancellation
func fmaTriples(family string, seed, n uint32) (a, b, c []float32) {
	a, b, c = make([]float32, n), make([]float32, n), make([]float32, n)
	for i := uint32(0); i < n; i++ {
		h0, h1, h2 := hashWord(seed, 3*i), hashWord(seed, 3*i+1), hashWord(seed, 3*i+2)
		switch family {
		case "rand":
			a[i], b[i], c[i] = ctlFloat(h0, 87, 81), ctlFloat(h1, 87, 81), ctlFloat(h2, 47, 161)
		case "half":
			ea, eb := int(h0>>12&63)-44, int(h1>>12&63)-44
			a[i] = float32(math.Copysign(math.Ldexp(float64(4096+h0&0xFFF), ea), float64(int32(h0))))
			b[i] = float32(math.Ldexp(float64(4096+h1&0xFFF), eb))
			c[i] = float32(math.Copysign(math.Ldexp(float64(1+h2&0x7F), ea+eb-int(h2>>7%48)), float64(int32(h2))))
		case "tiny":
			a[i], b[i] = ctlFloat(h0, 52, 26), ctlFloat(h1, 52, 26)
			c[i] = math.Float32frombits(h2 & 0x80FFFFFF)
		case "subhalf":
			k, ea := float64(1+h0&0xFF), int(h0>>8%51)-100
			a[i] = float32(math.Copysign(math.Ldexp(1+k*0x1p-23, ea), float64(int32(h0))))
			b[i] = float32(math.Ldexp(1-k*0x1p-23, -150-ea))
			c[i] = math.Float32frombits(h2 & 0x807FFFFF)
		case "cancel":
			a[i], b[i] = ctlFloat(h0, 107, 41), ctlFloat(h1, 107, 41)
			c[i] = math.Float32frombits(math.Float32bits(-float32(a[i]*b[i])) + h2&0xFF - 128)
		default:
			panic("fmaTriples: " + family)
		}
	}
	return a, b, c
}

// hashBits is the sha256 of v's little-endian float32 bit patterns (hashF32 of a slice made on the fly).
func hashBits(n int, f func(i int) float32) string {
	h := sha256.New()
	var w [4]byte
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(w[:], math.Float32bits(f(i)))
		h.Write(w[:])
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func mathfVectors() []byte {
	var b bytes.Buffer
	b.WriteString("# fn\tinputs\tcount\tsha256 of the outputs' little-endian float32 bits (go test ./kernels -run MathfVectors -update)\n")
	one := func(fn, spec string, f func(float32) float32) {
		x := mathInputs(spec)
		fmt.Fprintf(&b, "%s\t%s\t%d\t%s\n", fn, spec, len(x), hashBits(len(x), func(i int) float32 { return f(x[i]) }))
	}
	gumbel := func(u float32) float32 { return -Log(-Log(u)) } // Gumbel's transform of one uniform
	for _, spec := range []string{
		"bits=80000000:c2d00000:107", // [−104, −0]: every argument the top-p walk's Exp(z ⊖ mx) can get
		"bits=c2aeac50:c2d00000:1",   // every argument with a subnormal result (−87.34…−104)
		"bits=00000000:42b17217:3f1", // [0, HI_X]
		"bits=42b07217:42b27217:1",   // every bit pattern around the overflow threshold HI_X
		"hash=1:1048576",
	} {
		one("exp", spec, Exp)
	}
	for _, spec := range []string{
		"bits=00000001:7f800000:1ff", // (0, +Inf], subnormals included
		"hash=2:1048576",
	} {
		one("log", spec, Log)
	}
	one("gumbel", "odd24", gumbel) // every Gumbel noise there is (both Logs of every uniform)
	for _, fam := range []string{"rand", "half", "tiny", "subhalf", "cancel"} {
		a, bb, c := fmaTriples(fam, 3, 1<<20)
		fmt.Fprintf(&b, "fma\tfma=%s:3:%d\t%d\t%s\n", fam, len(a), len(a), hashBits(len(a), func(i int) float32 { return FMA32(a[i], bb[i], c[i]) }))
	}
	return b.Bytes()
}

func TestMathfVectors(t *testing.T) {
	if testing.Short() {
		t.Skip("25 million evaluations (-short)")
	}
	golden.Check(t, mathfVectorsFile, mathfVectors(), "go test ./kernels -run MathfVectors -update")
}

// TestFMATriplesReachTheSlowPath: the families reach what they are for (the halfway and the tiny cases that
// FMA32 rounds to odd), so the pinned hashes test the port's slow path, not only the float64 sum.
func TestFMATriplesReachTheSlowPath(t *testing.T) {
	for _, fam := range []string{"half", "tiny", "subhalf"} {
		a, b, c := fmaTriples(fam, 3, 1<<16)
		slow, fixed := 0, 0
		for i := range a {
			if _, ok := fma32Try(a[i], b[i], c[i]); !ok {
				slow++
				if float32(float64(a[i])*float64(b[i])+float64(c[i])) != FMA32(a[i], b[i], c[i]) {
					fixed++
				}
			}
		}
		t.Logf("%s: %d of %d on the slow path, %d of them differ from the plain float64 sum's rounding", fam, slow, len(a), fixed)
		if slow < len(a)/100 || fixed == 0 && fam != "tiny" { // tiny's float64 sums are exact: nothing to correct
			t.Errorf("%s: %d of %d triples on the slow path, %d corrected: the family does not test it", fam, slow, len(a), fixed)
		}
	}
}
