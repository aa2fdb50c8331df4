package session

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// A capture pair at size (issue 15, "Replay and diff at size"): a Qwen2-1.5B-shaped op set (hidden 1536,
// 12/2 heads of 128, intermediate 8960, V 151936, bf16 activations, f32 logits and logprobs, i32 tokens),
// one tensor per (op, sequence) of T tokens as bitalign_capture records a prefill. The full model (28 layers,
// 4 × 256 tokens) is 2.8 GiB (3.0 GB) per side, the pair; the CI default (4 layers, 2 × 128) 242 MB.

// sizeSpec is the generated pair's shape.
type sizeSpec struct{ layers, seqs, tokens int }

// ciSize is the size the CI benchmark builds (within 2 cores and 24 GB: 3 files of about 240 MB).
var ciSize = sizeSpec{layers: 4, seqs: 2, tokens: 128}

// sizeFromEnv is BITALIGN_SIZE ("LAYERS,SEQS,TOKENS", e.g. "28,4,256" for the 2.8 GiB pair), else def.
func sizeFromEnv(tb testing.TB, def sizeSpec) sizeSpec {
	s := os.Getenv("BITALIGN_SIZE")
	if s == "" {
		return def
	}
	f := strings.Split(s, ",")
	var v [3]int
	for i := range v {
		if len(f) != 3 {
			break
		}
		n, err := strconv.Atoi(strings.TrimSpace(f[i]))
		if err != nil || n <= 0 {
			break
		}
		v[i] = n
	}
	if v[2] == 0 {
		tb.Fatalf("BITALIGN_SIZE=%q: want LAYERS,SEQS,TOKENS (positive integers)", s)
	}
	return sizeSpec{v[0], v[1], v[2]}
}

func (s sizeSpec) String() string { return fmt.Sprintf("%dL-%dx%d", s.layers, s.seqs, s.tokens) }

// sizeConfig is the engine config the pair's metadata records (so Load builds the real producer graph).
func (s sizeSpec) config() engine.Config {
	return engine.Config{Architecture: engine.ArchQwen2, Vocab: 151936, Hidden: 1536, Intermediate: 8960,
		Layers: s.layers, Heads: 12, KVHeads: 2, HeadDim: 128, RopeTheta: 1e6, Eps: 1e-6, MaxPositions: 4096,
		DType: capture.BF16, TiedEmbeddings: true}
}

// sizeOp is one op of the pair: its name, index, dtype and features per token.
type sizeOp struct {
	name  string
	index int32
	dt    capture.DType
	feat  int64 // 0: one element per token ([T])
}

func (s sizeSpec) ops() []sizeOp {
	c := s.config()
	feat := map[string]int64{capture.LayerKProj: int64(c.KVDim()), capture.LayerVProj: int64(c.KVDim()),
		capture.LayerKRope: int64(c.KVDim()), capture.LayerGateProj: int64(c.Intermediate),
		capture.LayerUpProj: int64(c.Intermediate), capture.LayerAct: int64(c.Intermediate)}
	var ops []sizeOp
	for i, name := range capture.OpNames(s.layers, false, nil) {
		o := sizeOp{name: name, index: int32(i), dt: capture.BF16, feat: int64(c.Hidden)}
		switch name {
		case capture.OpTokens, capture.OpSample:
			o.dt, o.feat = capture.I32, 0
		case capture.OpLogits:
			o.dt, o.feat = capture.F32, int64(c.Vocab)
		case capture.OpLogprobs:
			o.dt, o.feat = capture.F32, 0
		default:
			if _, suf, ok := capture.SplitLayerOp(name); ok && feat[suf] > 0 {
				o.feat = feat[suf]
			}
		}
		if name == capture.OpSample {
			continue // recorded from the prompt's last position only: left out of a prefill pair
		}
		ops = append(ops, o)
	}
	return ops
}

// bytes is one side's tensor bytes.
func (s sizeSpec) bytes() int64 {
	var n int64
	for _, o := range s.ops() {
		n += int64(s.seqs) * int64(s.tokens) * max(o.feat, 1) * int64(o.dt.Size())
	}
	return n
}

// sizeVariant says how B departs from A.
type sizeVariant string

const (
	sizeIdentical sizeVariant = "identical" // the same bytes
	sizeTensors   sizeVariant = "tensors"   // three tensors differ in about half their elements by 1 ULP
	sizeBit       sizeVariant = "bit"       // one bit of one element in the middle of the capture
	sizeAll       sizeVariant = "all"       // every float tensor differs in about half its elements by 1 ULP (a
	// replay against another stack's forward: the whole capture diverges)
)

// sizeVariants are the variants the size benchmarks run.
var sizeVariants = []sizeVariant{sizeIdentical, sizeTensors, sizeBit, sizeAll}

// sizeDivergent are the (op, seq) whose tensors differ in the "tensors" variant (the first is the first
// divergence); sizeFlip is the op of the flipped bit (its middle element, seq 0).
func (s sizeSpec) sizeDivergent() [][2]string {
	mid := s.layers / 2
	return [][2]string{{capture.LayerOp(mid, capture.LayerDownProj), "0"},
		{capture.LayerOp(s.layers-1, capture.LayerOProj), "1"}, {capture.OpLogits, "0"}}
}

func (s sizeSpec) sizeFlip() string { return capture.LayerOp(s.layers/2, capture.LayerMLPNorm) }

// writeSizeCapture writes one side of the pair to path: A's bytes, departing from them as v says.
func writeSizeCapture(tb testing.TB, path, side string, s sizeSpec, v sizeVariant) {
	tb.Helper()
	meta := capture.Meta{FormatVersion: 1, Side: side, Model: s.config().ModelJSON(), TP: 1, PP: 1, DP: 1,
		KernelProfile: "canonical", BatchSize: s.seqs, Producer: "session size tests"}
	w, err := capture.Create(path, meta, capture.WithOverwrite())
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Abort()
	var buf []byte
	divergent := map[[2]string]bool{}
	if v == sizeTensors {
		for _, d := range s.sizeDivergent() {
			divergent[d] = true
		}
	}
	T := int64(s.tokens)
	for seq := 0; seq < s.seqs; seq++ {
		for _, o := range s.ops() {
			n := T * max(o.feat, 1) * int64(o.dt.Size())
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			data := buf[:n]
			fillSize(data, o, uint64(seq))
			switch {
			case divergent[[2]string{o.name, strconv.Itoa(seq)}], v == sizeAll && o.dt != capture.I32:
				perturb(data, o.dt, uint64(seq)+uint64(o.index)<<8)
			case v == sizeBit && seq == 0 && o.name == s.sizeFlip():
				data[n/2] ^= 0x04
			}
			shape := []int64{T}
			if o.feat > 0 {
				shape = []int64{T, o.feat}
			}
			t := capture.Tensor{Seq: int64(seq), NTok: T, Op: o.name, Index: o.index, Role: "out", DType: o.dt,
				Shape: shape, Shard: capture.NoShard, Data: data}
			if err := w.Write(t); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// splitmix is a tiny deterministic generator (the data only has to look like activations).
func splitmix(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillSize fills data with values of o's dtype that depend on (op, seq) only: bf16 of magnitude 2⁻⁷..2 with
// random signs and mantissas; f32 logits with every mantissa bit in use (not bf16-representable); f32
// logprobs negative; token ids below the vocabulary.
func fillSize(data []byte, o sizeOp, seq uint64) {
	st := seq*0x1000193 + uint64(o.index)*0x100000001b3
	switch {
	case o.dt == capture.BF16:
		for i := 0; i+8 <= len(data); i += 8 {
			binary.LittleEndian.PutUint64(data[i:], splitmix(&st)&0x83ff83ff83ff83ff|0x3c003c003c003c00)
		}
	case o.dt == capture.F32 && o.feat == 0:
		for i := 0; i+8 <= len(data); i += 8 {
			binary.LittleEndian.PutUint64(data[i:], splitmix(&st)&0x007fffff007fffff|0xbf000000bf000000)
		}
	case o.dt == capture.F32:
		for i := 0; i+8 <= len(data); i += 8 {
			binary.LittleEndian.PutUint64(data[i:], splitmix(&st)&0x83ffffff83ffffff|0x3c0000003c000000)
		}
	default: // i32 token ids
		for i := 0; i+4 <= len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], uint32(splitmix(&st)%151936))
		}
	}
}

// perturb flips the lowest mantissa bit of about half of data's elements (1 ULP each).
func perturb(data []byte, dt capture.DType, salt uint64) {
	st := salt ^ 0x5bd1e995
	mask := uint64(0x0001000100010001)
	if dt.Size() == 4 {
		mask = 0x0000000100000001
	}
	for i := 0; i+8 <= len(data); i += 8 {
		w := binary.LittleEndian.Uint64(data[i:])
		binary.LittleEndian.PutUint64(data[i:], w^splitmix(&st)&mask)
	}
}

// sizePair returns the paths of A and of B in variant v, written once per process into dir (or into
// BITALIGN_BENCH_DIR, kept between runs, when set).
func sizePair(tb testing.TB, s sizeSpec, v sizeVariant) (a, b string) {
	tb.Helper()
	dir := os.Getenv("BITALIGN_BENCH_DIR")
	if dir == "" {
		dir = sizeTempDir(tb)
	}
	a = filepath.Join(dir, s.String()+"-trainer.arrow")
	b = filepath.Join(dir, s.String()+"-sampler-"+string(v)+".arrow")
	for _, p := range []struct {
		path, side string
		v          sizeVariant
	}{{a, "trainer", sizeIdentical}, {b, "sampler", v}} {
		if st, err := os.Stat(p.path); err == nil && st.Size() > s.bytes() {
			continue
		}
		writeSizeCapture(tb, p.path, p.side, s, p.v)
	}
	return a, b
}

var sizeDir string

// sizeTempDir is one temporary directory for every size test and benchmark of this process (the pairs are
// expensive to write), removed by TestMain.
func sizeTempDir(tb testing.TB) string {
	if sizeDir == "" {
		d, err := os.MkdirTemp("", "bitalign-size-")
		if err != nil {
			tb.Fatal(err)
		}
		sizeDir = d
	}
	return sizeDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sizeDir != "" {
		os.RemoveAll(sizeDir)
	}
	os.Exit(code)
}

// TestSizePairFingerprints: the size pair's variants, small (2 layers, 2 × 16 tokens), as fingerprint
// captures against fingerprints and against the full captures, find the full diff's first divergence and
// per-op verdicts (the benchmarks' pair is a real diff, and fingerprints agree with it).
func TestSizePairFingerprints(t *testing.T) {
	s := sizeSpec{layers: 2, seqs: 2, tokens: 16}
	dir := t.TempDir()
	for _, v := range sizeVariants {
		t.Run(string(v), func(t *testing.T) {
			pa, pb := filepath.Join(dir, "a.arrow"), filepath.Join(dir, string(v)+".arrow")
			writeSizeCapture(t, pa, "trainer", s, sizeIdentical)
			writeSizeCapture(t, pb, "sampler", s, v)
			a, b := openTestCapture(t, pa), openTestCapture(t, pb)
			full := fpDiff(t, a, b)
			want := map[sizeVariant]string{sizeTensors: s.sizeDivergent()[0][0], sizeBit: s.sizeFlip(), sizeAll: capture.OpEmbed}[v]
			if full.Identical != (v == sizeIdentical) || (want != "") != (full.First != nil) || full.First != nil && full.First.Op != want {
				t.Fatalf("full diff: identical %v, first %+v; want %q", full.Identical, full.First, want)
			}
			if v == sizeBit && full.Mismatched != 1 {
				t.Errorf("one flipped bit: %d elements differ", full.Mismatched)
			}
			fa := writeFP(t, a, filepath.Join(dir, string(v)+"-a.fp.arrow"))
			fb := writeFP(t, b, filepath.Join(dir, string(v)+"-b.fp.arrow"))
			none := map[string]bool{}
			sameVerdicts(t, "fp/fp", full, fpDiff(t, fa, fb), none)
			sameVerdicts(t, "fp/full", full, fpDiff(t, fa, b), none)
			sameVerdicts(t, "full/fp", full, fpDiff(t, a, fb), none)
		})
	}
}
