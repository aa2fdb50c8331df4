package capture_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"bitalign/capture"
)

// The captures in testdata/python were written by the Python module (capture/python, make_fixtures.py) from a
// one-layer random Qwen3 in float32: the trainer ran one right-padded forward over t0..t(N-2) of each sequence,
// the sampler ran transformers' generate from left-padded prompts (prefill, then one decode step).
// These tests pin the format both writers share: if either side drifts, they fail.

var pySeqs = [][]int32{{7, 21, 3, 39, 9}, {40, 12, 12, 47}} // full sequences t0..t(N-1)
var pyPrompt = []int{3, 2}                                  // prompt lengths P

// pyOps is engine.OpNames for the fixture's config (qwen3, 1 layer): name → execution index.
var pyOps = []string{"tokens", "embed", "layers.0.attn_norm", "layers.0.attn.q_proj", "layers.0.attn.k_proj",
	"layers.0.attn.v_proj", "layers.0.attn.q_norm", "layers.0.attn.k_norm", "layers.0.attn.q_rope",
	"layers.0.attn.k_rope", "layers.0.attn.sdpa", "layers.0.attn.o_proj", "layers.0.attn_residual",
	"layers.0.mlp_norm", "layers.0.mlp.gate_proj", "layers.0.mlp.up_proj", "layers.0.mlp.act",
	"layers.0.mlp.down_proj", "layers.0.mlp_residual", "final_norm", "logits", "logprobs", "sample"}

// pyWidth is the per-token feature count of each op (hidden 16, 2 heads × 8, 1 kv head × 8, intermediate 32,
// vocab 48); 0 for per-token scalars.
func pyWidth(op string) int64 {
	switch {
	case op == "tokens" || op == "logprobs" || op == "sample":
		return 0
	case op == "logits":
		return 48
	case strings.HasSuffix(op, "k_proj"), strings.HasSuffix(op, "v_proj"), strings.HasSuffix(op, "k_norm"):
		return 8
	case strings.HasPrefix(op, "layers.0.mlp.") && !strings.HasSuffix(op, "down_proj"):
		return 32
	}
	return 16
}

type pyKey struct {
	op  string
	seq int64
	pos int64
}

// openPy opens a fixture and returns its rows (one float32/int32 row per op, sequence and position), checking
// every entry's layout on the way.
func openPy(t *testing.T, name, side string) (*capture.Capture, map[pyKey][]byte) {
	t.Helper()
	c, err := capture.Open(filepath.Join("..", "testdata", "python", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := c.Meta()
	if m.Side != side || m.Step != 0 || m.BatchSize != 2 || m.TP != 1 || m.Rank != 0 || m.FormatVersion != 1 {
		t.Errorf("%s: meta %+v", name, m)
	}
	if !strings.HasPrefix(m.Producer, "bitalign_capture ") || !strings.Contains(m.Producer, "torch") {
		t.Errorf("%s: producer %q", name, m.Producer)
	}
	if want := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC); !m.Created.Equal(want) {
		t.Errorf("%s: created %v, want %v", name, m.Created, want)
	}
	var model struct {
		Architecture string
		Config       struct {
			HiddenSize int    `json:"hidden_size"`
			ModelType  string `json:"model_type"`
		}
	}
	if err := json.Unmarshal(m.Model, &model); err != nil || model.Architecture != "qwen3" ||
		model.Config.HiddenSize != 16 || model.Config.ModelType != "qwen3" {
		t.Errorf("%s: model %s (%v)", name, m.Model, err)
	}
	rows := map[pyKey][]byte{}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		idx := slices.Index(pyOps, e.Op)
		if idx < 0 || e.Index != int32(idx) {
			t.Fatalf("%s: tensor %d: op %q index %d (canonical index %d)", name, i, e.Op, e.Index, idx)
		}
		if e.Offset%capture.Alignment != 0 {
			t.Errorf("%s: %s seq %d pos %d: data at offset %d, not %d-byte aligned", name, e.Op, e.Seq, e.Pos,
				e.Offset, capture.Alignment)
		}
		wantDT := capture.F32
		if e.Op == "tokens" || e.Op == "sample" {
			wantDT = capture.I32
		}
		wantShape := []int64{e.NTok}
		if w := pyWidth(e.Op); w > 0 {
			wantShape = append(wantShape, w)
		}
		if e.DType != wantDT || !slices.Equal(e.Shape, wantShape) || e.Role != "out" || e.Rank != 0 ||
			e.Shard.Sharded() || e.Step != 0 || e.NTok < 1 {
			t.Fatalf("%s: tensor %d: %+v (want %s %v)", name, i, e, wantDT, wantShape)
		}
		data, err := c.Data(i)
		if err != nil {
			t.Fatal(err)
		}
		row := int64(len(data)) / e.NTok
		for p := int64(0); p < e.NTok; p++ {
			k := pyKey{e.Op, e.Seq, e.Pos + p}
			if _, dup := rows[k]; dup {
				t.Fatalf("%s: %v recorded twice", name, k)
			}
			rows[k] = data[p*row : (p+1)*row]
		}
	}
	return c, rows
}

// positions lists the positions of op in seq, sorted.
func pyPositions(rows map[pyKey][]byte, op string, seq int64) []int64 {
	var ps []int64
	for k := range rows {
		if k.op == op && k.seq == seq {
			ps = append(ps, k.pos)
		}
	}
	slices.Sort(ps)
	return ps
}

func pySpan(a, b int) []int64 {
	var ps []int64
	for p := a; p < b; p++ {
		ps = append(ps, int64(p))
	}
	return ps
}

func pyI32(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) }
func pyF32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func TestPythonFixtureTrainer(t *testing.T) {
	_, rows := openPy(t, "trainer.arrow", "trainer")
	for s, seq := range pySeqs {
		N := len(seq)
		for _, op := range pyOps {
			var want []int64
			switch op {
			case "layers.0.attn.q_rope", "layers.0.attn.k_rope", "sample": // not visible to HF hooks / a trainer's draw
			default:
				want = pySpan(0, N-1) // positions 0..N-2, logprobs included (the last target came from sampled())
			}
			if got := pyPositions(rows, op, int64(s)); !slices.Equal(got, want) {
				t.Errorf("trainer: %s seq %d at positions %v, want %v", op, s, got, want)
			}
		}
		for p := 0; p < N-1; p++ {
			if tok := pyI32(rows[pyKey{"tokens", int64(s), int64(p)}]); tok != seq[p] {
				t.Errorf("trainer: token at seq %d pos %d is %d, want %d", s, p, tok, seq[p])
			}
			lp := pyF32s(rows[pyKey{"logprobs", int64(s), int64(p)}])[0]
			if !(lp <= 0) || math.IsInf(float64(lp), 0) {
				t.Errorf("trainer: logprob %v at seq %d pos %d", lp, s, p)
			}
		}
	}
}

func TestPythonFixtureSampler(t *testing.T) {
	_, rows := openPy(t, "sampler.arrow", "sampler")
	for s, seq := range pySeqs {
		N, P := len(seq), pyPrompt[s]
		for _, op := range pyOps {
			want := pySpan(0, N-1)
			switch op {
			case "layers.0.attn.q_rope", "layers.0.attn.k_rope":
				want = nil
			case "logits", "logprobs", "sample": // generate keeps the logits of the last prompt position on
				want = pySpan(P-1, N-1)
			}
			if got := pyPositions(rows, op, int64(s)); !slices.Equal(got, want) {
				t.Errorf("sampler: %s seq %d at positions %v, want %v", op, s, got, want)
			}
		}
		for p := P - 1; p < N-1; p++ {
			if got := pyI32(rows[pyKey{"sample", int64(s), int64(p)}]); got != seq[p+1] {
				t.Errorf("sampler: sample at seq %d pos %d is %d, want the next token %d", s, p, got, seq[p+1])
			}
		}
	}
}

// TestPythonFixturesAgree: the two sides computed the same float32 model on the same sequences, through
// different batch shapes (right-padded full forward vs left-padded prefill + decode). Values at the same
// (op, seq, pos) must agree to float32 rounding; a position mix-up would not.
func TestPythonFixturesAgree(t *testing.T) {
	_, tr := openPy(t, "trainer.arrow", "trainer")
	_, sa := openPy(t, "sampler.arrow", "sampler")
	shared := 0
	for k, a := range sa {
		b, ok := tr[k]
		if k.op == "sample" {
			continue
		}
		if !ok {
			t.Errorf("%v in the sampler capture only", k)
			continue
		}
		shared++
		if k.op == "tokens" {
			if pyI32(a) != pyI32(b) {
				t.Errorf("%v: tokens %d vs %d", k, pyI32(a), pyI32(b))
			}
			continue
		}
		fa, fb := pyF32s(a), pyF32s(b)
		for i := range fa {
			d := math.Abs(float64(fa[i] - fb[i]))
			if d > 1e-4*(1+math.Abs(float64(fb[i]))) {
				t.Fatalf("%v[%d]: sampler %v, trainer %v", k, i, fa[i], fb[i])
			}
		}
	}
	// 18 ops at every position 0..N-2, logits and logprobs at P-1..N-2: (18·4 + 2·2) + (18·3 + 2·2)
	if shared != 134 {
		t.Errorf("%d rows shared by both captures, want 134", shared)
	}
}
