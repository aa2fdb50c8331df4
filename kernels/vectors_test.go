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

func TestTopKPVectors(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# logits\tV\tT\ttemperature\ttop_k\ttop_p\tseed\ttokens of rows r (seq 1000+r, pos 5r) (temperature and top_p: float32 bits, hex; go test ./kernels -run TopKPVectors -update)\n")
	for _, c := range topkpCases() {
		tok := make([]string, c.T)
		for r := range tok {
			x := topkpLogits(c.spec, r, c.V)
			tok[r] = strconv.Itoa(int(Sample(x, SampleParams{Temperature: c.temp, TopK: c.topK, TopP: c.topP, Seed: c.seed}, int64(1000+r), int64(5*r))))
		}
		fmt.Fprintf(&b, "%s\t%d\t%d\t%08x\t%d\t%08x\t%d\t%s\n", c.spec, c.V, c.T, math.Float32bits(c.temp), c.topK,
			math.Float32bits(c.topP), c.seed, strings.Join(tok, ","))
	}
	golden.Check(t, topkpVectorsFile, b.Bytes(), "go test ./kernels -run TopKPVectors -update")
}
