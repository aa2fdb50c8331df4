package kernels

import (
	"bytes"
	"fmt"
	"math"
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
