package kernels

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"bitalign/internal/golden"
)

// samplingVectorsFile pins the sampling noise of docs/arithmetic.md §10 for a table of (seed, seq, pos, index):
// the Go reference writes it (go test ./kernels -run SamplingVectors -update) and the Python library's tests
// (capture/python/tests/test_sampling.py) check their Philox key derivation against the same file, so the two
// cannot drift apart.
const samplingVectorsFile = "testdata/sampling_vectors.tsv"

// samplingVectorKeys are the table's (seed, seq, pos, index): ordinary values, the 32-bit halves' edges of the
// seed and the sequence id (both halves enter the key and the counter), large positions, and indexes on every
// word of a Philox block and past 2^16.
func samplingVectorKeys() [][4]uint64 {
	seeds := []uint64{0, 1, 42, 0xFFFFFFFF, 0x100000000, 0xDEADBEEFCAFEF00D, math.MaxUint64}
	seqs := []int64{0, 1, 7, 1 << 31, 1<<32 + 5, -1}
	poss := []int64{0, 1, 255, 4095, 1 << 20}
	idxs := []int{0, 1, 2, 3, 4, 151935, 1 << 17}
	var keys [][4]uint64
	n := 0
	for _, s := range seeds {
		for _, q := range seqs {
			for _, p := range poss {
				// every index for the first combination of each seed, then a rotating pair (the table stays small)
				for j, i := range idxs {
					if q == seqs[0] && p == poss[0] || j == n%len(idxs) || j == (n+3)%len(idxs) {
						keys = append(keys, [4]uint64{s, uint64(q), uint64(p), uint64(i)})
					}
				}
				n++
			}
		}
	}
	return keys
}

func TestSamplingVectors(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# seed\tseq\tpos\tindex\tuniform_bits\tgumbel_bits (float32 bit patterns, hex; docs/arithmetic.md §10)\n")
	for _, k := range samplingVectorKeys() {
		seed, seq, pos, i := k[0], int64(k[1]), int64(k[2]), int(k[3])
		u := Uniform(seed, seq, pos, i)
		g := Gumbel(seed, seq, pos, i)
		fmt.Fprintf(&b, "%d\t%d\t%d\t%d\t%08x\t%08x\n", seed, seq, pos, i, math.Float32bits(u), math.Float32bits(g))
	}
	golden.Check(t, samplingVectorsFile, b.Bytes(), "go test ./kernels -run SamplingVectors -update")
}

// topkpVectorsFile pins Sample's whole rule (docs/arithmetic.md §10: temperature, the order (z desc, index asc),
// top-k, top-p's walk with Exp, then Gumbel-max over the kept set) on generated logits rows: the tokens drawn
// for rows r = 0…T−1 at (seq 1000+r, pos 5r). The Python library reproduces every token twice: its numpy
// reference of the rule (capture/python/tests/test_sampling.py) and bitalign.ops.sample's kept-set step on CPU
// tensors followed by the kernel's rule (test_torch_sample.py); test_ops_gpu.py checks ops.sample on a GPU
// (go test ./kernels -run TopKPVectors -update rewrites it).
const topkpVectorsFile = "testdata/topkp_vectors.tsv"

// topkpLogits is row r (of V) of a logits spec (the Python tests parse the same text):
//   - stream=S:SHIFT[:nan=P][:ninf=Q][:pinf=R]  vectorValue(S, r·V+i, SHIFT), element r·V+i replaced by NaN
//     when it is ≡ 0 mod P, else by −Inf when ≡ 0 mod Q, else by +Inf when ≡ 0 mod R (0: never); the values
//     repeat (about 2,300 distinct ones), so the largest logits tie and the order's index rule decides
//   - hex=B0,B1,…  one literal row of float32 bit patterns, the same for every r
func topkpLogits(spec string, r, V int) []float32 {
	x := make([]float32, V)
	if lit, ok := strings.CutPrefix(spec, "hex="); ok {
		for i, h := range strings.Split(lit, ",") {
			u, err := strconv.ParseUint(h, 16, 32)
			if err != nil {
				panic(err)
			}
			x[i] = math.Float32frombits(uint32(u))
		}
		return x
	}
	f := strings.Split(strings.TrimPrefix(spec, "stream="), ":")
	s, _ := strconv.Atoi(f[0])
	shift, _ := strconv.Atoi(f[1])
	mod := map[string]int{}
	for _, kv := range f[2:] {
		k, v, _ := strings.Cut(kv, "=")
		mod[k], _ = strconv.Atoi(v)
	}
	hit := func(k string, g int) bool { return mod[k] > 0 && g%mod[k] == 0 }
	for i := range x {
		g := r*V + i
		switch {
		case hit("nan", g):
			x[i] = float32(math.NaN())
		case hit("ninf", g):
			x[i] = float32(math.Inf(-1))
		case hit("pinf", g):
			x[i] = float32(math.Inf(1))
		default:
			x[i] = vectorValue(uint32(s), g, shift)
		}
	}
	return x
}

type topkpCase struct {
	spec string
	V, T int
	temp float32
	topK int
	topP float32
	seed uint64
}

func topkpCases() []topkpCase {
	var cs []topkpCase
	const V = 151936 // Qwen2's vocabulary
	type kp struct {
		k int
		p float32
	}
	large := []kp{{0, 1}, {1, 1}, {50, 1}, {V - 1, 1}, {0, 0.1}, {0, 0.9}, {0, 0.999}, {50, 0.9}, {V - 1, 0.999}}
	for _, spec := range []string{"stream=21:4", "stream=22:0"} { // narrow (|x| ≤ 8) and wide (|x| ≤ 127) rows
		for _, temp := range []float32{0.7, 1} {
			for _, s := range large {
				cs = append(cs, topkpCase{spec, V, 2, temp, s.k, s.p, 42})
			}
		}
	}
	for _, s := range []kp{{0, 0.9}, {50, 1}, {V - 1, 0.999}} {
		cs = append(cs, topkpCase{"stream=23:2:nan=97:ninf=89:pinf=0", V, 2, 1, s.k, s.p, 0xDEADBEEFCAFEF00D})
		cs = append(cs, topkpCase{"stream=24:3:nan=0:ninf=5:pinf=75967", V, 2, 0.8, s.k, s.p, 7}) // one +Inf per row
	}
	cs = append(cs, topkpCase{"stream=21:4", V, 2, 0, 50, 0.9, 42}) // greedy: top-k and top-p do not apply
	// tight top-p: thresholds that equal a running sum exactly (tightTopP), where one ulp of Exp or of the sum's
	// order changes how many tokens stay
	for _, spec := range []string{"stream=25:3", "stream=26:5", "stream=27:1:nan=101:ninf=37"} {
		for _, temp := range []float32{1, 0.6} {
			for _, k := range []int{0, 3000} {
				for _, frac := range []float64{0.5, 0.9, 0.99} {
					x := topkpLogits(spec, 0, 4096)
					if p, ok := tightTopP(x, temp, k, frac); ok {
						cs = append(cs, topkpCase{spec, 4096, 1, temp, k, p, 5})
					}
				}
			}
		}
	}
	x := topkpLogits("stream=21:4", 0, V)
	if p, ok := tightTopP(x, 1, 0, 0.9); ok {
		cs = append(cs, topkpCase{"stream=21:4", V, 1, 1, 0, p, 42})
	}
	// Exp-sensitive rows (0, d, −1.5) with a tight top-p after the second token, where d is one of the 0.45 % of
	// arguments whose Exp is not the correctly rounded e^d and 1 ⊕ Exp(d) is not 1 ⊕ RN(e^d): a walk with another
	// exponential keeps another number of tokens
	exp64 := func(x float32) float32 { return float32(math.Exp(float64(x))) }
	for i, n := uint32(0), 0; n < 4 && i < 1<<20; i++ {
		d := -float32(hashWord(11, i)>>9) * 0x1p-23 * 0.75
		if float32(1+Exp(d)) == float32(1+exp64(d)) {
			continue
		}
		x := []float32{0, d, -1.5}
		keep := []int32{0, 1, 2}
		c := topPSums(x, keep, Exp, sequentialSum)
		for u := math.Float32bits(float32(float64(c[1]) / float64(c[2]))); u > 0x3F000000; u-- {
			p := math.Float32frombits(u)
			if float32(p*c[2]) == c[1] {
				if cutAt(topPSums(x, keep, exp64, sequentialSum), p) != cutAt(c, p) {
					spec := fmt.Sprintf("hex=00000000,%08x,bfc00000", math.Float32bits(d))
					cs = append(cs, topkpCase{spec, 3, 1, 1, 0, p, 3})
					n++
				}
				break
			}
			if float32(p*c[2]) < c[1] {
				break
			}
		}
	}
	nan, inf, ninf := "7fc00000", "7f800000", "ff800000"
	small := []string{
		nan + "," + nan + "," + nan, // nothing to draw: -1
		ninf + "," + ninf + "," + ninf,
		nan + "," + ninf + "," + ninf + ",40000000," + nan,
		inf + ",3f800000," + inf + "," + nan,
		"00000000,80000000,00000000,80000000", // signed zeros tie
		"3f800000,3f800000,3f800000,3f800000,3f800000,3f800000,3f800000,3f800000",
		"40400000," + nan + "," + ninf + ",40400000,40200000,f149f2ca,7149f2ca,3f000000", // 3 NaN −Inf 3 2.5 −1e30 1e30 0.5
		"40a00000",
		ninf + "," + nan + ",3e800000",
		"3f800001,3f800000,3f7fffff,0015c7a9,8015c7a9", // 1+ulp, 1, 1−ulp, ±2e-39: ties once divided by a tiny T
	}
	for _, spec := range small {
		V := strings.Count(spec, ",") + 1
		for _, temp := range []float32{0, 0.5, 1, 1e-40} { // 1e-40 is subnormal: z overflows to ±Inf
			for _, k := range []int{0, 1, 2, V - 1} {
				for _, p := range []float32{1, 0.1, 0.5, 0.999} {
					cs = append(cs, topkpCase{"hex=" + spec, V, 4, temp, k, p, 9})
				}
			}
		}
	}
	return cs
}

// tightTopP is a top-p for row x whose threshold TopP ⊗ Ssum equals, bit for bit, the running sum c_j at the
// first j with c_j ≥ frac·Ssum (in the order, after top-k): c_j ≥ thr holds with no room to spare, so a walk
// whose c_j or Ssum is one ulp off (another Exp, another order of the sum) keeps another number of tokens.
func tightTopP(x []float32, temp float32, topK int, frac float64) (float32, bool) {
	z, keep := sampleKeep(x, SampleParams{Temperature: temp})
	sortOrder(z, keep)
	if topK > 0 && topK < len(keep) {
		keep = keep[:topK]
	}
	c := topPSums(z, keep, Exp, sequentialSum)
	S := c[len(c)-1]
	j := 0
	for float64(c[j]) < frac*float64(S) {
		j++
	}
	p0 := math.Float32bits(float32(float64(c[j]) / float64(S)))
	for d := uint32(0); d < 64; d++ {
		for _, u := range []uint32{p0 - d, p0 + d} {
			if p := math.Float32frombits(u); p > 0 && p < 1 && float32(p*S) == c[j] {
				return p, true
			}
		}
	}
	return 0, false
}

// topPSums are the running sums c_j of e_j = exp(z_j ⊖ mx) over keep (in order), with the given exponential
// and the given way of summing (for Ssum, the last): kernels.Sample's walk with exp = Exp and sequentialSum.
func topPSums(z []float32, keep []int32, exp func(float32) float32, sum func([]float32) float32) []float32 {
	e := make([]float32, len(keep))
	c := make([]float32, len(keep))
	for j, i := range keep {
		e[j] = exp(float32(z[i] - z[keep[0]]))
		c[j] = e[j]
		if j > 0 {
			c[j] = float32(c[j-1] + e[j])
		}
	}
	c[len(c)-1] = sum(e)
	return c
}

func sequentialSum(e []float32) float32 {
	s := float32(0)
	for _, v := range e {
		s = float32(s + v)
	}
	return s
}

func pairwiseSum(e []float32) float32 {
	if len(e) <= 8 {
		return sequentialSum(e)
	}
	h := len(e) / 2
	return float32(pairwiseSum(e[:h]) + pairwiseSum(e[h:]))
}

// cutAt is how many tokens top-p keeps given the running sums c (the last is Ssum).
func cutAt(c []float32, topP float32) int {
	thr := float32(topP * c[len(c)-1])
	for j, v := range c {
		if v >= thr {
			return j + 1
		}
	}
	return len(c)
}

// TestTightTopPDiscriminates: the tight rows of topkp_vectors.tsv tell the engine's walk from one with another
// Exp (float64 exp rounded once) and from one whose Ssum is summed pairwise: a port that did either would keep
// another number of tokens on some row, and the table's kept counts would show it.
func TestTightTopPDiscriminates(t *testing.T) {
	exp64 := func(x float32) float32 { return float32(math.Exp(float64(x))) }
	variants := map[string]int{}
	rows := 0
	for _, c := range topkpCases() {
		if c.T != 1 || c.topP == 1 {
			continue
		}
		x := topkpLogits(c.spec, 0, c.V)
		z, keep := sampleKeep(x, SampleParams{Temperature: c.temp})
		sortOrder(z, keep)
		if c.topK > 0 && c.topK < len(keep) {
			keep = keep[:c.topK]
		}
		want := cutAt(topPSums(z, keep, Exp, sequentialSum), c.topP)
		if _, k := sampleKeep(x, SampleParams{Temperature: c.temp, TopK: c.topK, TopP: c.topP}); len(k) != want {
			t.Fatalf("%s: the walk here keeps %d, Sample %d", c.spec, want, len(k))
		}
		rows++
		if cutAt(topPSums(z, keep, exp64, sequentialSum), c.topP) != want {
			variants["float64 exp"]++
		}
		if cutAt(topPSums(z, keep, Exp, pairwiseSum), c.topP) != want {
			variants["pairwise sum"]++
		}
	}
	t.Logf("%d tight rows; rows whose kept count another walk changes: %v", rows, variants)
	for _, v := range []string{"float64 exp", "pairwise sum"} {
		if variants[v] == 0 {
			t.Errorf("no tight row tells the engine's walk from one with a %s", v)
		}
	}
}

func TestTopKPVectors(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# logits\tV\tT\ttemperature\ttop_k\ttop_p\tseed\ttokens of rows r (seq 1000+r, pos 5r)\tkept: how many tokens top-k and top-p keep (- greedy) (temperature and top_p: float32 bits, hex; go test ./kernels -run TopKPVectors -update)\n")
	for _, c := range topkpCases() {
		tok, kept := make([]string, c.T), make([]string, c.T)
		for r := range tok {
			x := topkpLogits(c.spec, r, c.V)
			sp := SampleParams{Temperature: c.temp, TopK: c.topK, TopP: c.topP, Seed: c.seed}
			tok[r] = strconv.Itoa(int(Sample(x, sp, int64(1000+r), int64(5*r))))
			kept[r] = "-"
			if c.temp > 0 {
				_, k := sampleKeep(x, sp)
				kept[r] = strconv.Itoa(len(k))
			}
		}
		fmt.Fprintf(&b, "%s\t%d\t%d\t%08x\t%d\t%08x\t%d\t%s\t%s\n", c.spec, c.V, c.T, math.Float32bits(c.temp), c.topK,
			math.Float32bits(c.topP), c.seed, strings.Join(tok, ","), strings.Join(kept, ","))
	}
	golden.Check(t, topkpVectorsFile, b.Bytes(), "go test ./kernels -run TopKPVectors -update")
}
