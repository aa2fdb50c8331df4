// Package fake is a deterministic, self-consistent view.Source for tests, benchmarks and screenshots: a small
// llama-like forward pass captured by a "trainer" and a "sampler" whose split-K order differs from one op on.
// The report is computed from the generated tensors, so the heatmap, histogram and bit view agree with it.
package fake

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"bitalign/internal/fp"
	"bitalign/session/view"
)

// Config shapes the fake model.
type Config struct {
	Layers, Tokens, Hidden, Inter, Vocab int
	Seqs                                 int
	FaultLayer                           int    // the first divergent op is layers.FaultLayer.mlp.down_proj; -1: identical
	MissingOp                            string // an op the sampler did not capture ("" for none)
	PairErrOp                            string // Pair fails for this op (error-path tests)
	ReplayDelay                          time.Duration
	NoCheckpoint                         bool // Replay returns view.ErrNoReplay
}

// Default is the configuration of the golden tests and screenshots.
func Default() Config {
	return Config{Layers: 4, Tokens: 24, Hidden: 256, Inter: 512, Vocab: 512, Seqs: 2, FaultLayer: 2,
		MissingOp: "layers.3.attn.sdpa"}
}

// Source implements view.Source.
type Source struct {
	cfg    Config
	report view.Report
	pairs  map[view.Key]*view.Pair
	depth  map[string]int // op → distance from the fault (≥1 downstream), 0 at the fault, -1 upstream
}

type opDef struct {
	name  string
	dtype string
	cols  int
	layer int
}

func ops(c Config) []opDef {
	h, in := c.Hidden, c.Inter
	d := []opDef{{"tokens", "i32", 1, -1}, {"embed", "bf16", h, -1}}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		for _, o := range []struct {
			n string
			c int
		}{{"attn_norm", h}, {"attn.q_proj", h}, {"attn.k_proj", h / 2}, {"attn.v_proj", h / 2},
			{"attn.q_rope", h}, {"attn.k_rope", h / 2}, {"attn.sdpa", h}, {"attn.o_proj", h},
			{"attn_residual", h}, {"mlp_norm", h}, {"mlp.gate_proj", in}, {"mlp.up_proj", in},
			{"mlp.act", in}, {"mlp.down_proj", h}, {"mlp_residual", h}} {
			d = append(d, opDef{p + o.n, "bf16", o.c, l})
		}
	}
	return append(d, opDef{"final_norm", "bf16", h, -1}, opDef{"logits", "f32", c.Vocab, -1},
		opDef{"logprobs", "f32", 1, -1}, opDef{"sample", "i32", 1, -1})
}

// New generates the captures and their report.
func New(c Config) *Source {
	s := &Source{cfg: c, pairs: map[view.Key]*view.Pair{}, depth: map[string]int{}}
	defs := ops(c)
	fault := -1
	for i, d := range defs {
		if c.FaultLayer >= 0 && d.name == fmt.Sprintf("layers.%d.mlp.down_proj", c.FaultLayer) {
			fault = i
		}
	}
	s.report = view.Report{
		A: view.CaptureInfo{Path: "demo/trainer", Side: "trainer", Producer: "bitalign engine (fake)", Model: "llama 4L h256",
			DType: "bf16", BatchSize: 2, TP: 2, PP: 1, DP: 1, Ranks: 2, KernelProfile: "canonical", Step: 0, Seed: 7,
			Created: time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)},
		B: view.CaptureInfo{Path: "demo/sampler", Side: "sampler", Producer: "bitalign engine (fake)", Model: "llama 4L h256",
			DType: "bf16", BatchSize: 1, TP: 1, PP: 1, DP: 1, Ranks: 1, KernelProfile: "standard", Step: 0, Seed: 7,
			Created: time.Date(2026, 11, 29, 18, 0, 5, 0, time.UTC)},
	}
	for i, d := range defs {
		depth := -1
		if fault >= 0 && i >= fault {
			depth = i - fault
		}
		s.depth[d.name] = depth
		f, _ := fp.Parse(d.dtype)
		st := view.OpStat{Op: d.name, Index: int32(i), Role: "out", Layer: d.layer, DType: d.dtype,
			Shape: []int64{int64(d.cols)}}
		if d.cols == 1 {
			st.Shape = []int64{}
		}
		missing := d.name == c.MissingOp
		for seq := 0; seq < c.Seqs; seq++ {
			k := view.Key{Op: d.name, Role: "out", Step: 0, Seq: int64(seq)}
			st.Seqs = append(st.Seqs, view.SeqKey{Step: 0, Seq: int64(seq)})
			p := gen(f, k, c.Tokens, d.cols, depth, i)
			if missing {
				p.B = nil
			} else {
				accumulate(&st, f, p)
			}
			s.pairs[k] = p
		}
		switch {
		case missing:
			st.Status = view.MissingB
		case st.Mismatched > 0:
			st.Status = view.Divergent
			st.Cause = "propagated"
			if depth == 0 {
				st.Cause = "local"
			}
		}
		if st.Elements > 0 {
			st.MeanAbs /= float64(st.Elements)
		}
		s.report.Ops = append(s.report.Ops, st)
		s.report.A.Tensors += c.Seqs
		if !missing {
			s.report.B.Tensors += c.Seqs
		}
		s.report.A.Bytes += int64(c.Seqs * c.Tokens * d.cols * f.Size)
	}
	s.report.B.Bytes = s.report.A.Bytes
	s.report.Identical = true
	for _, o := range s.report.Ops {
		if o.Status != view.Identical {
			s.report.Identical = false
		}
		if o.Status == view.Divergent && s.report.First == nil {
			s.report.First = &view.Divergence{Op: o.Op, Role: o.Role, At: *o.MaxAt, MaxULP: o.MaxULP}
		}
	}
	return s
}

// gen makes one tensor pair: A random, B perturbed by an amount that grows with the distance from the fault.
func gen(f fp.Format, k view.Key, rows, cols, depth, idx int) *view.Pair {
	r := rand.New(rand.NewPCG(uint64(idx)*7919+uint64(k.Seq), 42))
	n := rows * cols
	p := &view.Pair{Key: k, DType: f.Name, Rows: rows, Cols: cols, A: make([]byte, n*f.Size), B: make([]byte, n*f.Size)}
	for i := 0; i < n; i++ {
		var a uint64
		switch f.Name {
		case "i32":
			a = uint64(r.IntN(32000))
		case "f32":
			a = uint64(math.Float32bits(float32(r.NormFloat64() * 4)))
		default:
			a = uint64(math.Float32bits(float32(r.NormFloat64())) >> 16)
		}
		b := a
		if depth >= 0 && f.Name != "i32" {
			row, col := i/cols, i%cols
			// the fault hits late positions first (the sampler's decode steps), then spreads
			prob := 0.04 + 0.12*float64(depth)
			if row >= rows*2/3 {
				prob += 0.35
			}
			if k.Seq == 0 {
				prob /= 3
			}
			if col%64 < 8 {
				prob += 0.2 // a few "outlier" feature columns
			}
			if r.Float64() < prob {
				mag := 1 + r.IntN(2+depth*depth)
				if f.Name == "f32" {
					mag <<= 13 // a bf16-sized difference measured in f32 ulps
				}
				if r.IntN(2) == 0 {
					b = shift(f, a, int64(mag))
				} else {
					b = shift(f, a, -int64(mag))
				}
			}
		}
		if depth >= 0 && f.Name == "i32" && k.Seq == 1 && i == rows-2 && depth > 3 {
			b = a + 17 // one sampled token differs at the end
		}
		put(f, p.A, i, a)
		put(f, p.B, i, b)
	}
	return p
}

// shift moves bits b by d steps in the ordered-integer image of f (staying within the same sign).
func shift(f fp.Format, b uint64, d int64) uint64 {
	mag := int64(b &^ f.Sign)
	m := mag + d
	if m < 0 {
		m = mag - d
	}
	return uint64(m) | b&f.Sign
}

func put(f fp.Format, data []byte, i int, v uint64) {
	switch f.Size {
	case 1:
		data[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(data[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
	}
}

func accumulate(st *view.OpStat, f fp.Format, p *view.Pair) {
	n := p.Rows * p.Cols
	for i := 0; i < n; i++ {
		a, b := f.Bits(p.A, i), f.Bits(p.B, i)
		u := f.ULP(a, b)
		st.Elements++
		st.Hist[fp.Bucket(u)]++
		d := math.Abs(f.Value(a) - f.Value(b))
		st.MeanAbs += d
		if u == 0 {
			continue
		}
		st.Mismatched++
		st.MaxAbs = math.Max(st.MaxAbs, d)
		st.MaxRel = math.Max(st.MaxRel, f.RelErr(a, b))
		if u > st.MaxULP {
			st.MaxULP = u
			st.MaxAt = &view.Coord{Step: p.Key.Step, Seq: p.Key.Seq, Pos: p.Pos0 + int64(i/p.Cols), Feature: int64(i % p.Cols)}
		}
	}
}

// Report implements view.Source.
func (s *Source) Report() *view.Report { return &s.report }

// Pair implements view.Source.
func (s *Source) Pair(ctx context.Context, k view.Key) (*view.Pair, error) {
	if k.Op == s.cfg.PairErrOp {
		return nil, fmt.Errorf("capture: sampler/rank0.arrow: tensor %s: data truncated (needs 49152 bytes, has 4096)", k.Op)
	}
	p, ok := s.pairs[k]
	if !ok {
		return nil, fmt.Errorf("session: no tensor %s", k)
	}
	return p, ctx.Err()
}

// Replay implements view.Source.
func (s *Source) Replay(ctx context.Context, k view.Key) (*view.Replay, error) {
	if s.cfg.NoCheckpoint {
		return nil, view.ErrNoReplay
	}
	select {
	case <-time.After(s.cfg.ReplayDelay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p, err := s.Pair(ctx, k)
	if err != nil {
		return nil, err
	}
	depth := s.depth[k.Op]
	r := &view.Replay{Key: k, Backend: "CPU", Elapsed: 180 * time.Millisecond}
	r.FromA = view.ReplaySide{Reproduces: true, Out: p.A}
	r.FromB = view.ReplaySide{Reproduces: true, Out: p.B}
	f, _ := fp.Parse(p.DType)
	switch {
	case depth < 0:
		r.InputsIdentical = true
		r.Verdict = "identical: both sides reproduce the engine bit for bit"
	case depth == 0:
		r.InputsIdentical, r.Local = true, true
		r.FromB = view.ReplaySide{Out: p.A}
		for i := 0; i < p.Rows*p.Cols; i++ {
			if u := f.ULP(f.Bits(p.A, i), f.Bits(p.B, i)); u > 0 {
				r.FromB.Mismatched++
				r.FromB.MaxULP = max(r.FromB.MaxULP, u)
			}
		}
		r.Verdict = "local: inputs identical; trainer reproduces the engine, sampler does not"
	default:
		r.Verdict = "propagated: inputs already differ; each side reproduces the engine from its own inputs"
	}
	return r, nil
}

// WriteReport implements view.Source.
func (s *Source) WriteReport(w io.Writer, format string) error {
	switch format {
	case "json":
		return json.NewEncoder(w).Encode(s.report)
	case "text":
		_, err := fmt.Fprintf(w, "bitalign report: %d ops, first divergence: %v\n", len(s.report.Ops), s.report.First)
		return err
	case "md":
		_, err := fmt.Fprintf(w, "# bitalign report\n\n%d ops, first divergence: %v\n", len(s.report.Ops), s.report.First)
		return err
	case "html":
		_, err := fmt.Fprintf(w, "<html><body><h1>bitalign report</h1><p>%d ops</p></body></html>\n", len(s.report.Ops))
		return err
	}
	return fmt.Errorf("fake: unknown report format %q", format)
}

// Big is a one-op source holding a rows×cols bf16 tensor, for render benchmarks.
func Big(rows, cols int) *Source {
	s := New(Config{Layers: 0, Tokens: 4, Hidden: 8, Inter: 8, Vocab: 8, Seqs: 1, FaultLayer: -1})
	f, _ := fp.Parse("bf16")
	k := view.Key{Op: "layers.0.mlp.down_proj", Role: "out"}
	p := gen(f, k, rows, cols, 3, 1)
	st := view.OpStat{Op: k.Op, Role: "out", Index: int32(len(s.report.Ops)), Layer: 0, DType: "bf16",
		Shape: []int64{int64(cols)}, Seqs: []view.SeqKey{{}}}
	accumulate(&st, f, p)
	st.Status = view.Divergent
	s.pairs[k] = p
	s.report.Ops = append(s.report.Ops, st)
	s.report.Identical = false
	s.report.First = &view.Divergence{Op: k.Op, Role: "out", At: *st.MaxAt, MaxULP: st.MaxULP}
	return s
}
