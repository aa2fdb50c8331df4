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
	"slices"
	"strings"
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
	// MoE makes every layer a mixture-of-experts layer (MoEExperts experts, top MoEK): mlp.router,
	// mlp.experts, mlp.expert_weights and mlp.combine in place of the dense MLP; the fault is then in
	// layers.FaultLayer.mlp.router, and the experts are each side's top-k of its own router logits.
	MoE bool
}

// The fake MoE layers' sizes.
const (
	MoEExperts = 8
	MoEK       = 2
)

// MoEDefault is Default with mixture-of-experts layers, the fault in layer 1's router.
func MoEDefault() Config {
	c := Default()
	c.MoE, c.FaultLayer, c.MissingOp = true, 1, ""
	return c
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
	type op struct {
		n  string
		c  int
		dt string
	}
	mlp := []op{{"mlp.gate_proj", in, "bf16"}, {"mlp.up_proj", in, "bf16"}, {"mlp.act", in, "bf16"}, {"mlp.down_proj", h, "bf16"}}
	if c.MoE {
		mlp = []op{{"mlp.router", MoEExperts, "f32"}, {"mlp.experts", MoEK, "i32"}, {"mlp.expert_weights", MoEK, "f32"},
			{"mlp.combine", h, "bf16"}}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("layers.%d.", l)
		per := []op{{"attn_norm", h, "bf16"}, {"attn.q_proj", h, "bf16"}, {"attn.k_proj", h / 2, "bf16"},
			{"attn.v_proj", h / 2, "bf16"}, {"attn.q_rope", h, "bf16"}, {"attn.k_rope", h / 2, "bf16"},
			{"attn.sdpa", h, "bf16"}, {"attn.o_proj", h, "bf16"}, {"attn_residual", h, "bf16"}, {"mlp_norm", h, "bf16"}}
		per = append(append(per, mlp...), op{"mlp_residual", h, "bf16"})
		for _, o := range per {
			d = append(d, opDef{p + o.n, o.dt, o.c, l})
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
		faultOp := fmt.Sprintf("layers.%d.mlp.down_proj", c.FaultLayer)
		if c.MoE {
			faultOp = fmt.Sprintf("layers.%d.mlp.router", c.FaultLayer)
		}
		if c.FaultLayer >= 0 && d.name == faultOp {
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
			if c.MoE && d.layer >= 0 && (strings.HasSuffix(d.name, ".mlp.experts") || strings.HasSuffix(d.name, ".mlp.expert_weights")) {
				rk := view.Key{Op: fmt.Sprintf("layers.%d.mlp.router", d.layer), Role: "out", Seq: int64(seq)}
				p = route(s.pairs[rk], k, strings.HasSuffix(d.name, ".mlp.experts"))
			}
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
	if c.MoE {
		s.report.Routing = s.routing()
	}
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

// route derives a layer's experts (ids) or expert weights pair from its router pair: each side's top MoEK
// experts by score descending, id ascending, and weights |logit| / Σ|logit| over them.
func route(router *view.Pair, k view.Key, ids bool) *view.Pair {
	dt, size := "f32", 4
	if ids {
		dt = "i32"
	}
	p := &view.Pair{Key: k, DType: dt, Rows: router.Rows, Cols: MoEK, A: make([]byte, router.Rows*MoEK*size),
		B: make([]byte, router.Rows*MoEK*size)}
	for side, src := range [][]byte{router.A, router.B} {
		dst := [][]byte{p.A, p.B}[side]
		for r := 0; r < router.Rows; r++ {
			top, vals := topK(src, r)
			var sum float64
			for _, e := range top[:MoEK] {
				sum += math.Abs(float64(vals[e]))
			}
			for j, e := range top[:MoEK] {
				v := uint32(e)
				if !ids {
					v = math.Float32bits(float32(math.Abs(float64(vals[e])) / sum))
				}
				binary.LittleEndian.PutUint32(dst[4*(r*MoEK+j):], v)
			}
		}
	}
	return p
}

// topK ranks row r of a router pair side: expert ids by score descending, id ascending, and the logits.
func topK(data []byte, r int) ([]int, []float32) {
	vals := make([]float32, MoEExperts)
	ids := make([]int, MoEExperts)
	for e := range vals {
		vals[e] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*(r*MoEExperts+e):]))
		ids[e] = e
	}
	slices.SortStableFunc(ids, func(a, b int) int {
		if vals[a] != vals[b] {
			if vals[a] > vals[b] {
				return -1
			}
			return 1
		}
		return a - b
	})
	return ids, vals
}

// ints decodes row r of an i32 pair side.
func ints(data []byte, r, cols int) []int {
	out := make([]int, cols)
	for j := range out {
		out[j] = int(int32(binary.LittleEndian.Uint32(data[4*(r*cols+j):])))
	}
	return out
}

// mark compares one token's routing: ids (each side's order) and weight bytes.
func mark(a, b []int, wa, wb []byte) view.RouteMark {
	if !slices.Equal(a, b) {
		sa, sb := slices.Clone(a), slices.Clone(b)
		slices.Sort(sa)
		slices.Sort(sb)
		if slices.Equal(sa, sb) {
			return view.RouteOrder
		}
		return view.RouteSet
	}
	if string(wa) != string(wb) {
		return view.RouteWeights
	}
	return view.RouteSame
}

// routing is the fake's routing comparison, from its own experts and weights pairs.
func (s *Source) routing() *view.Routing {
	c := s.cfg
	r := &view.Routing{}
	for q := 0; q < c.Seqs; q++ {
		for p := 0; p < c.Tokens; p++ {
			r.Tokens = append(r.Tokens, view.Coord{Seq: int64(q), Pos: int64(p)})
		}
	}
	var flipped, all int64
	firstTok, firstLayer := -1, -1
	for l := 0; l < c.Layers; l++ {
		op := fmt.Sprintf("layers.%d.mlp.experts", l)
		rl := view.RoutingLayer{Layer: l, Op: op, FirstFlip: -1, Marks: make([]view.RouteMark, len(r.Tokens))}
		for ti, t := range r.Tokens {
			e := s.pairs[view.Key{Op: op, Role: "out", Seq: t.Seq}]
			w := s.pairs[view.Key{Op: fmt.Sprintf("layers.%d.mlp.expert_weights", l), Role: "out", Seq: t.Seq}]
			row := int(t.Pos)
			k := mark(ints(e.A, row, MoEK), ints(e.B, row, MoEK), w.A[4*row*MoEK:4*(row+1)*MoEK], w.B[4*row*MoEK:4*(row+1)*MoEK])
			rl.Marks[ti] = k
			rl.Tokens++
			switch k {
			case view.RouteSet:
				rl.Flipped++
				if rl.FirstFlip < 0 {
					rl.FirstFlip = ti
				}
			case view.RouteOrder:
				rl.OrderOnly++
			case view.RouteWeights:
				rl.WeightsOnly++
			}
		}
		if rl.FirstFlip >= 0 && (firstTok < 0 || rl.FirstFlip < firstTok) {
			firstTok, firstLayer = rl.FirstFlip, l
		}
		flipped += rl.Flipped
		all += rl.Tokens
		r.Layers = append(r.Layers, rl)
	}
	r.Summary = fmt.Sprintf("%d of %d token-layers flipped (expert set differs) in %d MoE layers", flipped, all, c.Layers)
	if firstTok >= 0 {
		tr, _ := s.Route(context.Background(), firstLayer, r.Tokens[firstTok])
		r.First = tr.Text
	}
	return r
}

// Route implements view.Router.
func (s *Source) Route(ctx context.Context, layer int, at view.Coord) (*view.TokenRoute, error) {
	if !s.cfg.MoE || layer < 0 || layer >= s.cfg.Layers || at.Pos < 0 || at.Pos >= int64(s.cfg.Tokens) {
		return nil, fmt.Errorf("fake: no routing of layer %d at seq %d pos %d", layer, at.Seq, at.Pos)
	}
	key := func(op string) view.Key {
		return view.Key{Op: fmt.Sprintf("layers.%d.mlp.%s", layer, op), Role: "out", Seq: at.Seq}
	}
	e, w, rt := s.pairs[key("experts")], s.pairs[key("expert_weights")], s.pairs[key("router")]
	row := int(at.Pos)
	tr := &view.TokenRoute{Layer: layer, At: at, K: MoEK}
	for side, sd := range []*view.RouteSide{&tr.A, &tr.B} {
		ed, wd, rd := [][]byte{e.A, e.B}[side], [][]byte{w.A, w.B}[side], [][]byte{rt.A, rt.B}[side]
		sd.Experts = ints(ed, row, MoEK)
		for j := 0; j < MoEK; j++ {
			sd.Weights = append(sd.Weights, float64(math.Float32frombits(binary.LittleEndian.Uint32(wd[4*(row*MoEK+j):]))))
		}
		ids, vals := topK(rd, row)
		for _, id := range ids[:MoEK+2] {
			sd.Top = append(sd.Top, view.ExpertScore{ID: id, Logit: fmt.Sprint(vals[id]), Selected: slices.Contains(sd.Experts, id)})
		}
	}
	tr.Mark = mark(tr.A.Experts, tr.B.Experts, w.A[4*row*MoEK:4*(row+1)*MoEK], w.B[4*row*MoEK:4*(row+1)*MoEK])
	what := map[view.RouteMark]string{view.RouteSame: "same experts", view.RouteWeights: "expert weights differ",
		view.RouteOrder: "expert order differs", view.RouteSet: "expert set differs"}[tr.Mark]
	list := func(x []int) string { return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(x)), ", "), "") }
	tr.Text = fmt.Sprintf("layers.%d.mlp.experts: %s at seq %d pos %d: %s vs %s", layer, what, at.Seq, at.Pos, list(tr.A.Experts), list(tr.B.Experts))
	return tr, ctx.Err()
}
