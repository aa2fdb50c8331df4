package engine

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"bitalign/capture"
	"bitalign/kernels"
)

// moe runs layer l's mixture-of-experts block on the packed rows h (T, H) of segs and writes the combine into
// out (T, H) (docs/arithmetic.md §19): the router matmul (float32 output, replicated on every rank), the routing
// on the host (or another run's routing, r.routing), each expert on the tokens that chose it (gathered, so an
// expert's matmul sees as many rows as it got tokens; with the canonical kernels a row's bits never depend on
// how many), TP over moe_intermediate like the dense MLP, and the combine on the host.
func (r *rank) moe(l int, w layerWeights, h, out Buf, T int, segs []segment, offs []int) error {
	cfg, be, lay := r.cfg, r.be, r.lay
	E, k, H := cfg.Experts, cfg.ExpertsPerTok, cfg.Hidden
	dt := kdt(cfg.DType)
	emit := func(op string, b Buf, width int) error { return r.rec.emit(r, op, b, width, segs, offs) }

	logits := r.alloc(T * E)
	routerDT := kernels.F32
	if r.v.routerModelDType { // the router-split-k fault: a vendor GEMM's output in the model dtype
		routerDT = dt
	}
	be.Matmul(r.v.router, logits, h, w.router, nil, T, H, E, routerDT)
	if err := emit(LayerOp(l, opRouter), logits, E); err != nil {
		return err
	}
	hostLogits := make([]float32, T*E)
	if err := be.Download(hostLogits, logits); err != nil {
		return err
	}
	ids, wts := make([]int32, T*k), make([]float32, T*k)
	kernels.Route(dt, ids, wts, hostLogits, T, E, k, cfg.NormTopK)
	if r.routing != nil {
		if err := r.routing.apply(r, l, ids, wts, hostLogits, segs, offs); err != nil {
			return err
		}
	}
	if err := r.rec.emitHost(r, LayerOp(l, opExperts), capture.I32, k, segs, offs, nil, ids); err != nil {
		return err
	}
	if err := r.rec.emitHost(r, LayerOp(l, opExpertWeights), capture.F32, k, segs, offs, wts, nil); err != nil {
		return err
	}

	hostH := make([]float32, T*H)
	if err := be.Download(hostH, h); err != nil {
		return err
	}
	Y, err := runExperts(be, r.v.experts, dt, hostH, ids, T, k, H, lay.mLocal, r.alloc,
		func(e int) expertBufs { return w.experts[e] },
		func(y, a, down Buf, n int) { r.rowParallel(r.v.experts, l, y, a, down, nil, n, lay.mLocal, H) })
	if err != nil {
		return err
	}
	var shared, gate []float32
	if cfg.SharedIntermediate > 0 { // Qwen2-MoE: the shared expert on every token, the dense MLP's contract
		sW := lay.sLocal
		g, u, a, y, gl := r.alloc(T*sW), r.alloc(T*sW), r.alloc(T*sW), r.alloc(T*H), r.alloc(T)
		be.Matmul(r.v.matmul, g, h, w.shared.gate, nil, T, H, sW, dt)
		be.Matmul(r.v.matmul, u, h, w.shared.up, nil, T, H, sW, dt)
		be.SwiGLU(a, g, u, T*sW, dt)
		r.rowParallel(r.v.matmul, l, y, a, w.shared.down, nil, T, sW, H)
		be.Matmul(r.v.matmul, gl, h, w.sharedGate, nil, T, H, 1, kernels.F32) // float32, like the router
		shared, gate = make([]float32, T*H), make([]float32, T)
		if err := be.Download(shared, y); err != nil {
			return err
		}
		if err := be.Download(gate, gl); err != nil {
			return err
		}
	}
	comb := make([]float32, T*H)
	kernels.MoECombine(dt, comb, Y, wts, ids, T, k, H, shared, gate)
	be.Upload(out, comb)
	return emit(LayerOp(l, opCombine), out, H)
}

// runExperts computes every (token, slot)'s expert output: hostH (T, H) the block's input rows, ids (T, k) the
// routing; it returns Y (T·k, H) whose row t·k+j is expert ids[t·k+j]'s output for token t. Each expert runs once
// on the rows of the tokens that chose it, gathered in ascending token order: gate and up (n, mW) with profile
// p, SwiGLU, then down, which rowParallel finishes (the TP tree, MatmulFinish) into y (n, H). alloc gives
// scratch buffers freed by the caller.
func runExperts(be Backend, p kernels.Profile, dt kernels.DType, hostH []float32, ids []int32, T, k, H, mW int,
	alloc func(int) Buf, expert func(e int) expertBufs, down func(y, a, w Buf, n int)) ([]float32, error) {
	var slots [][]int // slots[e]: the slots t·k+j that chose expert e, ascending
	for i, e := range ids {
		for int(e) >= len(slots) {
			slots = append(slots, nil)
		}
		slots[e] = append(slots[e], i)
	}
	Y := make([]float32, T*k*H)
	xe, g, u, a, ye := alloc(T*H), alloc(T*mW), alloc(T*mW), alloc(T*mW), alloc(T*H)
	rows := make([]float32, 0, T*H)
	for e, sl := range slots {
		n := len(sl)
		if n == 0 {
			continue
		}
		rows = rows[:0]
		for _, i := range sl {
			t := i / k
			rows = append(rows, hostH[t*H:(t+1)*H]...)
		}
		xv := be.View(xe, 0, n*H)
		be.Upload(xv, rows)
		x := expert(e)
		gv, uv, av, yv := be.View(g, 0, n*mW), be.View(u, 0, n*mW), be.View(a, 0, n*mW), be.View(ye, 0, n*H)
		be.Matmul(p, gv, xv, x.gate, nil, n, H, mW, dt)
		be.Matmul(p, uv, xv, x.up, nil, n, H, mW, dt)
		be.SwiGLU(av, gv, uv, n*mW, dt)
		down(yv, av, x.down, n)
		if err := be.Download(rows[:n*H], yv); err != nil {
			return nil, err
		}
		for q, i := range sl {
			copy(Y[i*H:(i+1)*H], rows[q*H:(q+1)*H])
		}
	}
	return Y, nil
}

// Routing is another run's routing, replayed in the MoE layers (R3, "routing replay"): at every position the
// experts that run's `layers.L.mlp.experts` recorded and, with Weights, its `layers.L.mlp.expert_weights`;
// without Weights the combine weights are the replaying run's own router probabilities of those experts
// (normalised as the model says), as R3 does in training.
type Routing struct {
	Path    string // the capture it came from, for errors
	Weights bool   // take the other run's weights too
	asm     assembly
}

// RoutingFromCapture reads the routing of every MoE layer from the capture at path (a file or a per-rank
// directory). It checks that the capture has `layers.L.mlp.experts` (and `expert_weights` when weights is set)
// k wide for cfg's MoE layers; positions are checked when a forward needs them.
func RoutingFromCapture(path string, cfg Config, weights bool) (*Routing, error) {
	if cfg.Experts <= 0 {
		return nil, fmt.Errorf("engine: routing from %s: the model has no mixture-of-experts layers", path)
	}
	c, err := capture.Open(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	keep := map[string]bool{}
	for l := range cfg.Layers {
		if cfg.MoELayer(l) {
			keep[LayerOp(l, opExperts)] = true
			if weights {
				keep[LayerOp(l, opExpertWeights)] = true
			}
		}
	}
	asm := assembly{}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if !keep[e.Op] || (e.Role != "" && e.Role != "out") {
			continue
		}
		t, err := c.Tensor(i)
		if err != nil {
			return nil, err
		}
		if err := asm.add(t); err != nil {
			return nil, fmt.Errorf("engine: routing from %s: %v", path, err)
		}
	}
	found := map[string]bool{}
	keys := slices.SortedFunc(maps.Keys(asm), func(a, b tensorKey) int { // the first bad tensor in execution order
		return cmp.Or(cmp.Compare(OpIndex(cfg, a.op), OpIndex(cfg, b.op)), cmp.Compare(a.step, b.step), cmp.Compare(a.seq, b.seq))
	})
	for _, key := range keys {
		st := asm[key]
		found[key.op] = true
		want := capture.I32
		if _, s, _ := SplitLayerOp(key.op); s == opExpertWeights {
			want = capture.F32
		}
		if st.dtype != want || st.width != cfg.ExpertsPerTok {
			return nil, fmt.Errorf("engine: routing from %s: %s is %s with %d values per token, the model needs %s with %d (num_experts_per_tok)",
				path, key.op, st.dtype, st.width, want, cfg.ExpertsPerTok)
		}
	}
	for _, op := range OpNames(cfg) {
		if keep[op] && !found[op] {
			return nil, fmt.Errorf("engine: routing from %s: the capture has no %s", path, op)
		}
	}
	return &Routing{Path: path, Weights: weights, asm: asm}, nil
}

// apply replaces the rank's own routing of layer l (ids, wts: (T, k)) by the recorded one at every row of segs.
func (rt *Routing) apply(r *rank, l int, ids []int32, wts, logits []float32, segs []segment, offs []int) error {
	cfg := r.cfg
	E, k := cfg.Experts, cfg.ExpertsPerTok
	p := make([]float32, E)
	for i, s := range segs {
		n := len(s.toks)
		st := rt.asm[tensorKey{r.step, s.seq, LayerOp(l, opExperts)}]
		if st == nil {
			return fmt.Errorf("engine: routing from %s: no %s for step %d seq %d", rt.Path, LayerOp(l, opExperts), r.step, s.seq)
		}
		if err := st.complete(s.start, n); err != nil {
			return fmt.Errorf("engine: routing from %s: %s seq %d: %v", rt.Path, LayerOp(l, opExperts), s.seq, err)
		}
		rows := ids[offs[i]*k : (offs[i]+n)*k]
		copy(rows, st.ints(s.start, n))
		if err := kernels.CheckExperts(rows, n, E, k); err != nil {
			return fmt.Errorf("engine: routing from %s: %s seq %d from position %d: %v", rt.Path, LayerOp(l, opExperts), s.seq, s.start, err)
		}
		if rt.Weights {
			sw := rt.asm[tensorKey{r.step, s.seq, LayerOp(l, opExpertWeights)}]
			if sw == nil {
				return fmt.Errorf("engine: routing from %s: no %s for step %d seq %d", rt.Path, LayerOp(l, opExpertWeights), r.step, s.seq)
			}
			if err := sw.complete(s.start, n); err != nil {
				return fmt.Errorf("engine: routing from %s: %s seq %d: %v", rt.Path, LayerOp(l, opExpertWeights), s.seq, err)
			}
			copy(wts[offs[i]*k:(offs[i]+n)*k], sw.floats(s.start, n))
			continue
		}
		for t := offs[i]; t < offs[i]+n; t++ {
			kernels.RouterProbs(p, logits[t*E:(t+1)*E])
			kernels.ExpertWeights(kdt(cfg.DType), wts[t*k:(t+1)*k], p, ids[t*k:(t+1)*k], cfg.NormTopK)
		}
	}
	return nil
}
