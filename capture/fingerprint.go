package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Fingerprints (docs/capture-format.md, "Fingerprint tensors"): a 64-bit hash of the raw little-endian bytes of
// each token's row of a tensor, stored instead of (or beside) the tensor as a tensor of role FingerprintPrefix +
// the fingerprinted role, dtype i64, shape [rows]. The definition, for a row of L bytes:
//
//	w_i = the row's bytes as little-endian uint32 words, the last one zero-padded (i = 0 .. ceil(L/4)−1)
//	K_i = splitmix64(i) | 1  (the i-th output, from 0, of splitmix64 seeded with 0: mix64((i+1)·γ))
//	h   = Σ_i w_i · K_i  mod 2^64
//	fp  = mix64(h + L·γ  mod 2^64)
//
// with γ = 0x9E3779B97F4A7C15 and mix64 splitmix64's finaliser. A sum of products is order-free, so a GPU
// computes it with an integer multiply and a wrapping int64 sum; flipping bit b of w_i changes h by ±2^b·K_i,
// never 0 mod 2^64 since K_i is odd, and mix64 is a bijection: every single-bit flip changes the fingerprint.

// FingerprintPrefix starts the role of a fingerprint tensor: "fp.out" holds the fingerprints of role "out".
const FingerprintPrefix = "fp."

// FullAlways are the ops a fingerprint capture holds in full, never as fingerprints: one value per token, as
// small as a fingerprint, and what replay (tokens) and the logprob comparison (logprobs, sample) read. The
// Python recorder's list (bitalign_capture/fingerprints.py ALWAYS_FULL) is checked against the test vectors.
var FullAlways = []string{OpTokens, OpLogprobs, OpSample}

// FingerprintGamma is splitmix64's increment (γ above).
const FingerprintGamma = 0x9E3779B97F4A7C15

// Mix64 is splitmix64's finaliser, a bijection of uint64.
func Mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// FingerprintConst is K_i: the i-th splitmix64 output (seed 0), made odd.
func FingerprintConst(i uint64) uint64 { return Mix64((i+1)*FingerprintGamma) | 1 }

// FingerprintRole returns the role whose fingerprints a role holds ("fp.out" → "out") and whether it is a
// fingerprint role at all.
func FingerprintRole(role string) (string, bool) {
	return strings.CutPrefix(role, FingerprintPrefix)
}

var (
	constMu sync.Mutex
	consts  []uint64 // K_0, K_1, ...: grown on demand, never shrunk; readers take a prefix under constMu
)

// fingerprintConsts returns K_0 .. K_{n−1}.
func fingerprintConsts(n int) []uint64 {
	constMu.Lock()
	defer constMu.Unlock()
	for i := len(consts); i < n; i++ {
		consts = append(consts, FingerprintConst(uint64(i)))
	}
	return consts[:n:n]
}

// Fingerprint is the fingerprint of one row's bytes.
func Fingerprint(row []byte) uint64 {
	return fingerprint(row, fingerprintConsts((len(row)+3)/4))
}

func fingerprint(row []byte, k []uint64) uint64 {
	var h0, h1, h2, h3 uint64 // four chains: the sum is order-free, so splitting it changes nothing
	n := len(row) / 4
	k = k[:(len(row)+3)/4]
	i := 0
	for ; i+4 <= n; i += 4 {
		b := row[4*i : 4*i+16 : 4*i+16]
		kk := k[i : i+4 : i+4]
		w0, w1 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		h0 += uint64(uint32(w0)) * kk[0]
		h1 += (w0 >> 32) * kk[1]
		h2 += uint64(uint32(w1)) * kk[2]
		h3 += (w1 >> 32) * kk[3]
	}
	for ; i < n; i++ {
		h0 += uint64(binary.LittleEndian.Uint32(row[4*i:])) * k[i]
	}
	if r := len(row) % 4; r != 0 {
		var last [4]byte
		copy(last[:], row[4*n:])
		h0 += uint64(binary.LittleEndian.Uint32(last[:])) * k[n]
	}
	return Mix64(h0 + h1 + h2 + h3 + uint64(len(row))*FingerprintGamma)
}

// FingerprintRows returns the fingerprints of data split into rows equal rows (rows ≥ 1, dividing len(data)).
func FingerprintRows(data []byte, rows int64) ([]uint64, error) {
	if rows < 1 || int64(len(data))%rows != 0 {
		return nil, fmt.Errorf("%d bytes do not split into %d rows", len(data), rows)
	}
	l := int64(len(data)) / rows
	k := fingerprintConsts(int((l + 3) / 4))
	out := make([]uint64, rows)
	for r := range out {
		out[r] = fingerprint(data[int64(r)*l:int64(r+1)*l], k)
	}
	return out, nil
}

// FingerprintRowCount is the number of rows (and fingerprints) of a tensor covering ntok positions: ntok, or 1
// for a tensor that is not per token.
func FingerprintRowCount(ntok int64) int64 { return max(ntok, 1) }

// FingerprintTensor returns the fingerprint tensor of t (unsharded: the fingerprints of a shard are not those
// of the full rows, so a sharded tensor is refused).
func FingerprintTensor(t Tensor) (Tensor, error) {
	if t.Shard.Sharded() && len(t.Shard.FullShape) > 0 { // the zero Shard means NoShard, as for Writer.Write
		return Tensor{}, fmt.Errorf("capture: %s: fingerprints of a sharded tensor (dim %d) are not those of its full rows", t.Op, t.Shard.Dim)
	}
	if _, ok := FingerprintRole(t.Role); ok {
		return Tensor{}, fmt.Errorf("capture: %s: role %q is already a fingerprint", t.Op, t.Role)
	}
	fps, err := FingerprintRows(t.Data, FingerprintRowCount(t.NTok))
	if err != nil {
		return Tensor{}, fmt.Errorf("capture: %s: %v", t.Op, err)
	}
	return FingerprintsOf(t, fps), nil
}

// FingerprintsOf returns the fingerprint tensor of t holding fps, the fingerprints of t's rows computed
// elsewhere (FingerprintRows over chunks of rows, as the engine's recorder does while it encodes): t's
// coordinates, role FingerprintPrefix + t.Role, i64, shape [len(fps)], unsharded. t.Data is not read.
func FingerprintsOf(t Tensor, fps []uint64) Tensor {
	role := t.Role
	if role == "" {
		role = "out"
	}
	data := make([]byte, 8*len(fps))
	for i, v := range fps {
		binary.LittleEndian.PutUint64(data[8*i:], v)
	}
	return Tensor{Step: t.Step, Seq: t.Seq, Pos: t.Pos, NTok: t.NTok, Op: t.Op, Index: t.Index,
		Role: FingerprintPrefix + role, DType: I64, Shape: []int64{int64(len(fps))}, Rank: t.Rank, Shard: NoShard, Data: data}
}

// checkFingerprint checks the layout rules of a fingerprint tensor (role fp.*); nil for any other role.
func checkFingerprint(role string, ntok int64, dt DType, shape []int64, s Shard) error {
	base, ok := FingerprintRole(role)
	if !ok {
		return nil
	}
	switch _, nested := FingerprintRole(base); {
	case base == "" || nested:
		return fmt.Errorf("fingerprint role %q names no tensor role", role)
	case dt != I64:
		return fmt.Errorf("fingerprint %q has dtype %s (want i64)", role, dt)
	case len(shape) != 1 || shape[0] != FingerprintRowCount(ntok):
		return fmt.Errorf("fingerprint %q has shape %v (want [%d]: one per row of ntok %d)", role, shape, FingerprintRowCount(ntok), ntok)
	case s.Sharded():
		return errors.New("fingerprint " + fmt.Sprintf("%q", role) + " is sharded (fingerprints are of full rows)")
	}
	return nil
}
