package engine

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/kernels"
)

// TestMoECaptureOps: a MoE layer records router (f32 [T, E]), experts (i32 [T, k]), expert_weights (f32 [T, k],
// bf16 values) and combine instead of the dense MLP's four ops, each at its OpIndex; the dense layer keeps them.
func TestMoECaptureOps(t *testing.T) {
	cfg := tinyConfig(ArchQwen3MoE, capture.BF16)
	m := NewRandom(cfg, 3)
	dir := filepath.Join(t.TempDir(), "cap")
	seqs, _ := tinyPrompts(cfg)
	for i := range seqs {
		seqs[i] = append(seqs[i], 1, 2)
	}
	if _, err := m.Train(context.Background(), seqs, TrainOptions{RunOptions: RunOptions{TP: 2, CaptureDir: dir}}); err != nil {
		t.Fatal(err)
	}
	c, err := capture.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]capture.Entry{}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if e.Seq == 0 && e.Rank == 0 {
			seen[e.Op] = e
		}
	}
	k, E := int64(cfg.ExpertsPerTok), int64(cfg.Experts)
	for _, c := range []struct {
		op    string
		dt    capture.DType
		width int64
	}{{"layers.0.mlp.router", capture.F32, E}, {"layers.0.mlp.experts", capture.I32, k},
		{"layers.0.mlp.expert_weights", capture.F32, k}, {"layers.2.mlp.combine", capture.BF16, int64(cfg.Hidden)},
		{"layers.1.mlp.down_proj", capture.BF16, int64(cfg.Hidden)}} {
		e, ok := seen[c.op]
		if !ok {
			t.Fatalf("no %s in the capture", c.op)
		}
		if e.DType != c.dt || len(e.Shape) != 2 || e.Shape[1] != c.width || e.Index != int32(OpIndex(cfg, c.op)) {
			t.Errorf("%s: %s %v index %d, want %s [T %d] index %d", c.op, e.DType, e.Shape, e.Index, c.dt, c.width, OpIndex(cfg, c.op))
		}
	}
	for _, op := range []string{"layers.0.mlp.gate_proj", "layers.2.mlp.down_proj", "layers.1.mlp.router"} {
		if _, ok := seen[op]; ok {
			t.Errorf("%s recorded", op)
		}
	}
	asm, err := assembleCapture(c)
	if err != nil {
		t.Fatal(err)
	}
	w := asm[tensorKey{0, 0, "layers.0.mlp.expert_weights"}].floats(0, len(seqs[0])-1)
	for _, v := range w {
		if v != kernels.RoundBF16(v) || !(v > 0 && v <= 1) {
			t.Fatalf("expert weight %v: want a bf16 value in (0, 1]", v)
		}
	}
}

// TestMoEExpertsTokensPerExpert: the experts' matmuls see as many rows as tokens chose the expert. With the
// canonical kernels a token's combine is the same bits alone and in a batch; with the standard profile's
// grouped GEMM (split-K from the rows) it changes, the rest of the forward being canonical.
func TestMoEExpertsTokensPerExpert(t *testing.T) {
	cfg := tinyConfig(ArchQwen3MoE, capture.F32)
	cfg.Layers, cfg.MLPOnly = 1, nil
	m := NewRandom(cfg, 4)
	seqs, _ := tinyPrompts(cfg)
	long := make([]int32, 40) // enough tokens that some expert gets ≥ 8 of them
	for i := range long {
		long[i] = int32((i * 7) % cfg.Vocab)
	}
	combine := func(p kernels.Profile, batch [][]int32) []float32 {
		v := profileVariant(kernels.Canonical)
		v.experts = p
		g, err := newGroup(m, groupOptions{tp: 1, v: v, maxPos: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer g.close(false)
		var segs []segment
		for i, s := range batch {
			segs = append(segs, segment{seq: int64(i), toks: s})
		}
		r := g.ranks[0]
		// run the block on the first sequence's rows through the rank's own moe, from the embedding's rows
		// (any input will do: what matters is which rows the experts see)
		T := 0
		var ids []int32
		for _, s := range segs {
			T += len(s.toks)
			ids = append(ids, s.toks...)
		}
		h := r.alloc(T * cfg.Hidden)
		r.be.Embed(h, r.embed, ids, cfg.Hidden, kdt(cfg.DType))
		out := r.alloc(T * cfg.Hidden)
		offs := make([]int, len(segs))
		for i := 1; i < len(segs); i++ {
			offs[i] = offs[i-1] + len(segs[i-1].toks)
		}
		if err := r.moe(0, r.layers[0], h, out, T, segs, offs); err != nil {
			t.Fatal(err)
		}
		host := make([]float32, len(batch[0])*cfg.Hidden)
		if err := r.be.Download(host, r.be.View(out, 0, len(host))); err != nil {
			t.Fatal(err)
		}
		return host
	}
	batch := append([][]int32{seqs[0]}, long)
	batch = append(batch, seqs[1:]...)
	for _, p := range []kernels.Profile{kernels.Canonical, kernels.Standard} {
		alone, together := combine(p, batch[:1]), combine(p, batch)
		i, u, differ := kernels.FirstDiff(alone, together)
		switch {
		case p == kernels.Canonical && differ:
			t.Fatalf("canonical: the combine of sequence 0 depends on the batch at %d (%d ulp)", i, u)
		case p == kernels.Standard && !differ:
			t.Fatal("standard: the grouped expert GEMM gave the same bits with other tokens per expert")
		case p == kernels.Standard:
			t.Logf("standard: first difference at element %d, %d ulp", i, u)
		}
	}
}

// TestLoadFusedExperts: a checkpoint holding transformers' fused expert tensors (gate_up_proj (E, 2·Im, H),
// down_proj (E, H, Im)) loads to the same weights as the per-expert layout save_pretrained writes.
func TestLoadFusedExperts(t *testing.T) {
	cfg := tinyConfig(ArchQwen3MoE, capture.BF16)
	m := NewRandom(cfg, 6)
	dir := t.TempDir()
	var ts []stTensor
	E, H, Im := cfg.Experts, cfg.Hidden, cfg.MoEIntermediate
	for _, s := range m.weightSpecs() {
		if _, _, ok := expertSpec(s.name); !ok {
			ts = append(ts, stTensor{s.name, s.shape, *s.ptr})
		}
	}
	for l, L := range m.Layers {
		if !cfg.MoELayer(l) {
			continue
		}
		var gu, down []float32
		for _, x := range L.Experts {
			gu = append(append(gu, x.Gate.Float32()...), x.Up.Float32()...)
			down = append(down, x.Down.Float32()...)
		}
		p := "model.layers." + strconv.Itoa(l) + ".mlp.experts."
		ts = append(ts, stTensor{p + "gate_up_proj", []int64{int64(E), int64(2 * Im), int64(H)}, kernels.RoundWeights(kdt(cfg.DType), gu)},
			stTensor{p + "down_proj", []int64{int64(E), int64(H), int64(Im)}, kernels.RoundWeights(kdt(cfg.DType), down)})
	}
	if err := writeSafetensors(filepath.Join(dir, "model.safetensors"), cfg.DType, ts); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), mustJSON(t, cfg.HFConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !sameWeights(m, back) {
		t.Fatal("fused experts load to other weights")
	}
	// bad checkpoints: an expert tensor missing (per-expert layout), one fused tensor without the other
	write := func(ts []stTensor) string {
		d := t.TempDir()
		if err := writeSafetensors(filepath.Join(d, "model.safetensors"), cfg.DType, ts); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "config.json"), mustJSON(t, cfg.HFConfig()), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var perExpert, oneFused []stTensor
	for _, s := range m.weightSpecs() {
		if s.name != "model.layers.2.mlp.experts.5.up_proj.weight" {
			perExpert = append(perExpert, stTensor{s.name, s.shape, *s.ptr})
		}
	}
	for _, x := range ts {
		if x.name != "model.layers.0.mlp.experts.down_proj" {
			oneFused = append(oneFused, x)
		}
	}
	for _, c := range []struct {
		ts   []stTensor
		want string
	}{{perExpert, `tensor "model.layers.2.mlp.experts.5.up_proj.weight" missing`},
		{oneFused, "only one of model.layers.0.mlp.experts.gate_up_proj and"}} {
		if _, err := Load(write(c.ts)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error containing %q, got %v", c.want, err)
		}
	}
}

// TestRoutingReplay: a run given another run's routing uses its experts (and, with Weights, its weights) in
// every MoE layer; its own routing replayed gives its own capture bitwise; a bad routing capture is an error.
func TestRoutingReplay(t *testing.T) {
	cfg := tinyConfig(ArchQwen3MoE, capture.BF16)
	m := NewRandom(cfg, 7)
	root := t.TempDir()
	seqs, plen, _ := rollout(t, m, kernels.Canonical, filepath.Join(root, "sampler"))
	runOn := func(m *Model, name string, o RunOptions) string {
		dir := filepath.Join(root, name)
		o.Seed, o.Step, o.CaptureDir = 9, 3, dir
		if _, err := m.Train(context.Background(), seqs, TrainOptions{RunOptions: o, PromptLens: plen}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	run := func(name string, o RunOptions) string { return runOn(m, name, o) }
	// another model's routing: certainly not the one m's router picks
	std := runOn(NewRandom(cfg, 70), "other", RunOptions{})
	flips := 0
	a0, s0 := assembled(t, filepath.Join(root, "sampler")), assembled(t, std)
	for key, x := range a0 {
		if _, s, _ := SplitLayerOp(key.op); s == opExperts {
			for p, row := range x.rows {
				if string(s0[key].rows[p]) != string(row) {
					flips++
				}
			}
		}
	}
	if flips == 0 {
		t.Fatal("the other model routes every token as m does: the test shows nothing")
	}
	own, err := RoutingFromCapture(filepath.Join(root, "sampler"), cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := compare(t, cfg, filepath.Join(root, "sampler"), run("own", RunOptions{Routing: own})); d != nil {
		t.Fatalf("own routing replayed: first divergence %v", d)
	}
	// the sampler (prefill chunks and decode steps, continuous batching) replays it too
	ps, mn := tinyPrompts(cfg)
	sampled := filepath.Join(root, "sampled-own")
	if _, err := m.Sample(context.Background(), ps, SampleOptions{RunOptions: RunOptions{Seed: 9, Step: 3,
		CaptureDir: sampled, Routing: own}, Slots: 2, MaxNew: mn}); err != nil {
		t.Fatal(err)
	}
	if d := compare(t, cfg, filepath.Join(root, "sampler"), sampled); d != nil {
		t.Fatalf("sampler with its own routing replayed: first divergence %v", d)
	}
	for _, weights := range []bool{false, true} {
		// (weights false: m's own probabilities of the other model's experts; true: the other's weights)
		rt, err := RoutingFromCapture(std, cfg, weights)
		if err != nil {
			t.Fatal(err)
		}
		dir := run("from-standard-"+strconv.FormatBool(weights), RunOptions{Routing: rt})
		a, b := assembled(t, std), assembled(t, dir)
		for l := range cfg.Layers {
			if !cfg.MoELayer(l) {
				continue
			}
			for seq := range int64(len(seqs)) {
				ops := []string{LayerOp(l, opExperts)}
				if weights {
					ops = append(ops, LayerOp(l, opExpertWeights))
				}
				for _, op := range ops {
					x, y := a[tensorKey{3, seq, op}], b[tensorKey{3, seq, op}]
					for p, row := range x.rows {
						if string(y.rows[p]) != string(row) {
							t.Fatalf("weights %v: %s seq %d pos %d: not the routing replayed", weights, op, seq, p)
						}
					}
				}
			}
		}
	}
	if _, err := RoutingFromCapture(filepath.Join(root, "sampler"), tinyConfig(ArchQwen3, capture.BF16), false); err == nil {
		t.Fatal("routing for a dense model accepted")
	}
	k3 := cfg
	k3.ExpertsPerTok = 3
	if _, err := RoutingFromCapture(std, k3, false); err == nil || !containsAll(err.Error(), "num_experts_per_tok", "layers.0.mlp.experts") {
		t.Fatalf("routing of another k: %v", err)
	}
	other := append([][]int32(nil), seqs...)
	other[0] = append(append([]int32(nil), other[0]...), 5, 6) // longer than the routing capture holds
	rt, _ := RoutingFromCapture(std, cfg, false)
	_, err = m.Train(context.Background(), other, TrainOptions{RunOptions: RunOptions{Step: 3, Routing: rt}})
	if err == nil || !containsAll(err.Error(), "routing from", "position") {
		t.Fatalf("routing missing positions: %v", err)
	}
}

func assembled(t *testing.T, dir string) assembly {
	t.Helper()
	c, err := capture.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := assembleCapture(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestDemoRoutingFlip: the MoE demo without a fault is bitwise identical; with router-split-k its first
// divergence is the documented router op and a routing flip (a token whose expert set differs) follows, first
// at the documented layer.
func TestDemoRoutingFlip(t *testing.T) {
	cfg := DemoMoEConfig()
	for _, fault := range []string{"", "router-split-k"} {
		dir := t.TempDir()
		if err := Demo(dir, DemoOptions{Model: DemoMoE, Fault: fault}); err != nil {
			t.Fatal(err)
		}
		tr, sa := filepath.Join(dir, SideTrainer), filepath.Join(dir, SideSampler)
		d := compare(t, cfg, tr, sa)
		if fault == "" {
			if d != nil {
				t.Fatalf("MoE demo without a fault: first divergence %v", d)
			}
			continue
		}
		f, _ := FaultByName(fault)
		if d == nil || d.Op != f.Where {
			t.Fatalf("first divergence %v, documented %s", d, f.Where)
		}
		a, b := assembled(t, tr), assembled(t, sa)
		first, flips := "", map[string]int{}
		for _, op := range OpNames(cfg) {
			if _, s, _ := SplitLayerOp(op); s != opExperts {
				continue
			}
			for key, x := range a {
				if key.op != op {
					continue
				}
				for p, row := range x.rows {
					if !sameSet(row, b[key].rows[p]) {
						flips[op]++
					}
				}
			}
			if first == "" && flips[op] > 0 {
				first = op
			}
		}
		t.Logf("routing flips (tokens whose expert set differs) per layer: %v", flips)
		if first != f.FirstFlip {
			t.Fatalf("first routing flip at %q, documented %q", first, f.FirstFlip)
		}
	}
}

// sameSet reports whether two encoded i32 expert lists hold the same experts.
func sameSet(a, b []byte) bool {
	x, y := make([]int32, len(a)/4), make([]int32, len(b)/4)
	decodeI32(a, x)
	decodeI32(b, y)
	if len(x) != len(y) {
		return false
	}
	for _, e := range x {
		found := false
		for _, f := range y {
			found = found || e == f
		}
		if !found {
			return false
		}
	}
	return true
}
