package engine

import (
	"fmt"

	"bitalign/capture"
	"bitalign/kernels"
)

// OpInputs are what RunOp needs to re-execute one op for one sequence over positions [Pos, Pos+N).
type OpInputs struct {
	Step int64
	Seq  int64
	Pos  int // first position to compute
	N    int // number of positions
	// Tensors holds producers' captured outputs by op name (Producers(cfg, op)): any chunking over positions
	// (a trainer's one tensor per sequence, a sampler's prefill chunk and decode steps) and any TP shards
	// (column-parallel ops from every rank); tensors of other sequences or steps are ignored. RunOp needs rows
	// [Pos, Pos+N) of each producer, rows 0..Pos+N-1 of k_rope and v_proj for the attention (without q_rope or
	// k_rope: AltProducers, rotated by the model's RoPE at their positions), and for logprobs
	// the tokens at Pos+1..Pos+N: from "tokens", or from "sample" at the position before where "tokens" ends
	// (the sampler's drawn token is the next input).
	Tensors  map[string][]capture.Tensor
	Seed     uint64          // sample: the sampling key
	Sampling *SamplingParams // sample: nil means DefaultSampling
}

// Option changes how RunOp executes.
type Option func(*opOptions)

type opOptions struct {
	profile kernels.Profile
	backend Backend
}

// WithProfile selects the kernel profile (default canonical).
func WithProfile(p kernels.Profile) Option { return func(o *opOptions) { o.profile = p } }

// WithBackend runs the op on b (default: a new CPU backend).
func WithBackend(b Backend) Option { return func(o *opOptions) { o.backend = b } }

// RunOp re-executes op for one sequence over positions [in.Pos, in.Pos+in.N) from its producers' captured
// tensors and returns its output as an unsharded capture tensor (TP 1: with the canonical profile the bits are
// those of any TP degree, batch or schedule).
func (m *Model) RunOp(op string, in OpInputs, opts ...Option) (capture.Tensor, error) {
	var o opOptions
	for _, f := range opts {
		f(&o)
	}
	cfg := m.Config
	if err := checkOp(cfg, op); err != nil {
		return capture.Tensor{}, err
	}
	if err := CheckProfile(o.profile, cfg, ""); err != nil {
		return capture.Tensor{}, err
	}
	if err := in.check("RunOp", op); err != nil {
		return capture.Tensor{}, err
	}
	asm, err := in.assemble("RunOp " + op)
	if err != nil {
		return capture.Tensor{}, err
	}
	be := o.backend
	if be == nil {
		be = NewCPU()
	}
	if err := checkBackend(be, profileVariant(o.profile)); err != nil {
		return capture.Tensor{}, err
	}
	x := &opRun{m: m, be: be, asm: asm, in: in, op: op, prof: o.profile}
	out, dt, width, err := x.run()
	if err != nil {
		return capture.Tensor{}, err
	}
	return in.output(cfg, op, out, dt, width), nil
}

// check rejects positions RunOp and Oracle cannot compute.
func (in OpInputs) check(what, op string) error {
	if in.N <= 0 || in.Pos < 0 {
		return fmt.Errorf("engine: %s %s: positions [%d, %d) are empty or negative", what, op, in.Pos, in.Pos+in.N)
	}
	if in.Pos+in.N > 1<<20 {
		return fmt.Errorf("engine: %s %s: position %d too large", what, op, in.Pos+in.N)
	}
	if op == OpTokens {
		return fmt.Errorf("engine: %s: tokens are an input, not computed", what)
	}
	return nil
}

// assemble gathers the tensors of (in.Step, in.Seq) by op.
func (in OpInputs) assemble(what string) (assembly, error) {
	asm := assembly{}
	for name, ts := range in.Tensors {
		for _, t := range ts {
			if t.Step != in.Step || t.Seq != in.Seq || t.Op != name {
				continue
			}
			if err := asm.add(t); err != nil {
				return nil, fmt.Errorf("engine: %s: input %v", what, err)
			}
		}
	}
	return asm, nil
}

// output wraps an op's result for positions [in.Pos, in.Pos+in.N) as an unsharded capture tensor: out is
// []int32 for I32, else []float32 values representable in dt.
func (in OpInputs) output(cfg Config, op string, out any, dt capture.DType, width int) capture.Tensor {
	t := capture.Tensor{Step: in.Step, Seq: in.Seq, Pos: int64(in.Pos), NTok: int64(in.N), Op: op,
		Index: int32(OpIndex(cfg, op)), Role: "out", DType: dt, Shard: capture.NoShard}
	switch dt {
	case capture.I32:
		t.Shape = []int64{int64(in.N)}
		if width > 0 { // the experts (N, k)
			t.Shape = []int64{int64(in.N), int64(width)}
		}
		t.Data = encodeI32(out.([]int32))
	default:
		f := out.([]float32)
		if width == 0 {
			t.Shape = []int64{int64(in.N)}
		} else {
			t.Shape = []int64{int64(in.N), int64(width)}
		}
		t.Data = encode(dt, f)
	}
	return t
}

// opRun is one RunOp execution.
type opRun struct {
	m    *Model
	be   Backend
	asm  assembly
	in   OpInputs
	op   string
	prof kernels.Profile
	bufs []Buf
}

// input returns producer rows [pos, pos+n) as a backend buffer.
func (x *opRun) input(name string, pos, n int) (Buf, error) {
	v, err := x.floats(name, pos, n)
	if err != nil {
		return nil, err
	}
	return x.upload(v), nil
}

// floats returns producer rows [pos, pos+n) decoded to float32 (exact for bf16, f16, f32).
func (x *opRun) floats(name string, pos, n int) ([]float32, error) {
	st := x.asm[tensorKey{x.in.Step, x.in.Seq, name}]
	if st == nil {
		return nil, fmt.Errorf("engine: %s %s: no %s tensor for step %d seq %d", x.what(), x.op, name, x.in.Step, x.in.Seq)
	}
	if err := st.complete(pos, n); err != nil {
		return nil, fmt.Errorf("engine: %s %s: input %s: %v", x.what(), x.op, name, err)
	}
	switch st.dtype {
	case capture.BF16, capture.F16, capture.F32, capture.F64:
	default:
		return nil, fmt.Errorf("engine: %s %s: input %s is %s, not a bf16, f16, f32 or f64 tensor", x.what(), x.op, name, st.dtype)
	}
	if w := opWidth(x.m.Config, name); w != 0 && w != st.width {
		return nil, fmt.Errorf("engine: %s %s: input %s has %d features, the model needs %d", x.what(), x.op, name, st.width, w)
	}
	return st.floats(pos, n), nil
}

// what names the function running, for errors.
func (x *opRun) what() string {
	if x.be == nil {
		return "Oracle"
	}
	return "RunOp"
}

// has reports whether the inputs hold a tensor of op name for this step and sequence.
func (x *opRun) has(name string) bool { return x.asm[tensorKey{x.in.Step, x.in.Seq, name}] != nil }

// attnInputs returns the attention's q, k and v names and whether q and k still need RoPE: q_rope and k_rope
// when both are captured, else AltProducers (the rotary inputs and v_proj).
func (x *opRun) attnInputs() (q, k, v string, rope bool) {
	p := Producers(x.m.Config, x.op)
	if x.has(p[0]) && x.has(p[1]) {
		return p[0], p[1], p[2], false
	}
	a := AltProducers(x.m.Config, x.op)
	return a[0], a[1], a[2], true
}

// positions returns pos, pos+1, ..., pos+n-1.
func positions(pos, n int) []int32 {
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(pos + i)
	}
	return ps
}

func (x *opRun) upload(v []float32) Buf {
	b := x.be.Alloc(len(v))
	x.be.Upload(b, v)
	x.bufs = append(x.bufs, b)
	return b
}

func (x *opRun) uploadWeights(v W) Buf {
	b := x.be.UploadWeights(v)
	x.bufs = append(x.bufs, b)
	return b
}

func (x *opRun) alloc(n int) Buf {
	b := x.be.Alloc(n)
	x.bufs = append(x.bufs, b)
	return b
}

// tokens returns token ids at positions [pos, pos+n): from "tokens", the last one possibly from "sample".
func (x *opRun) tokens(pos, n int) ([]int32, error) {
	st := x.asm[tensorKey{x.in.Step, x.in.Seq, OpTokens}]
	smp := x.asm[tensorKey{x.in.Step, x.in.Seq, OpSample}]
	out := make([]int32, n)
	for i := range out {
		p := pos + i
		switch {
		case st != nil && st.rows[p] != nil:
			decodeI32(st.rows[p], out[i:i+1])
		case smp != nil && smp.rows[p-1] != nil:
			decodeI32(smp.rows[p-1], out[i:i+1])
		default:
			return nil, fmt.Errorf("engine: RunOp %s: no token at position %d (tokens, or sample at %d)", x.op, p, p-1)
		}
		if out[i] < 0 || int(out[i]) >= x.m.Config.Vocab {
			return nil, fmt.Errorf("engine: RunOp %s: token %d at position %d outside the vocabulary", x.op, out[i], p)
		}
	}
	return out, nil
}

func (x *opRun) run() (result any, dt capture.DType, width int, err error) {
	defer func() {
		for _, b := range x.bufs {
			x.be.Free(b)
		}
	}()
	m, be, cfg := x.m, x.be, x.m.Config
	P, N := x.in.Pos, x.in.N
	kd := kdt(cfg.DType)
	dt = cfg.DType
	width = opWidth(cfg, x.op)
	prod := Producers(cfg, x.op)
	out := x.alloc(N * max(width, 1))
	w := func(v []float32) Buf {
		if v == nil {
			return nil
		}
		return x.upload(v)
	}
	mat := func(v W) Buf { // a weight matrix in its stored dtype
		if v.IsZero() {
			return nil
		}
		return x.uploadWeights(v)
	}
	in0 := func() (Buf, error) { return x.input(prod[0], P, N) }
	l, s, layered := SplitLayerOp(x.op)
	var L Layer
	if layered {
		L = m.Layers[l]
	}
	H, hd := cfg.Hidden, cfg.HeadDim
	matmul := func(wt, bias W, K, Nout int, row bool, d kernels.DType) error {
		a, err := in0()
		if err != nil {
			return err
		}
		if row { // o_proj, down_proj: the forward's row-parallel path at TP 1 (the tc profile's tree, tc.2)
			be.MatmulPartial(x.prof, out, a, mat(wt), N, K, Nout, 0, 1)
			be.MatmulFinish(out, w(bias.Float32()), N, Nout, d)
			return nil
		}
		be.Matmul(x.prof, out, a, mat(wt), w(bias.Float32()), N, K, Nout, d)
		return nil
	}
	norm := func(wt W, rows, C int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		be.RMSNorm(x.prof.Others(), out, a, w(wt.Float32()), rows, C, cfg.Eps, kd)
		return nil
	}
	rope := func(heads int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		cos, sin := kernels.RoPETables(cfg.RopeTheta, hd, P+N, kd)
		be.RoPE(out, a, positions(P, N), N, heads, hd, w(cos), w(sin), kd)
		return nil
	}
	binary := func(f func(a, b Buf)) error { return withTwo(x.input, prod, P, N, f) }
	lp := layerOpOf(cfg, L, s)
	switch {
	case x.op == OpEmbed:
		ids, e := x.tokens(P, N)
		if e != nil {
			return nil, 0, 0, e
		}
		be.Embed(out, mat(m.Embed), ids, H, kd)
	case x.op == OpFinalNorm:
		err = norm(m.Norm, N, H)
	case x.op == OpLogits:
		dt = capture.F32
		err = matmul(m.LMHead, W{}, H, cfg.Vocab, false, kernels.F32)
	case x.op == OpLogprobs:
		dt, width = capture.F32, 0
		logits, e := x.input(OpLogits, P, N)
		if e != nil {
			return nil, 0, 0, e
		}
		targets, e := x.tokens(P+1, N)
		if e != nil {
			return nil, 0, 0, e
		}
		be.LogProbs(x.prof.Others(), out, logits, targets, N, cfg.Vocab, nil)
	case x.op == OpSample:
		st := x.asm[tensorKey{x.in.Step, x.in.Seq, OpLogits}]
		if st == nil {
			return nil, 0, 0, fmt.Errorf("engine: RunOp sample: no logits for step %d seq %d", x.in.Step, x.in.Seq)
		}
		if e := st.complete(P, N); e != nil {
			return nil, 0, 0, fmt.Errorf("engine: RunOp sample: logits: %v", e)
		}
		sp := DefaultSampling
		if x.in.Sampling != nil {
			sp = *x.in.Sampling
		}
		rows := st.floats(P, N)
		toks := make([]int32, N)
		for i := range toks {
			toks[i] = drawToken(rows[i*cfg.Vocab:(i+1)*cfg.Vocab], sp, x.in.Seed, x.in.Seq, P+i)
		}
		return toks, capture.I32, 0, nil
	case s == opRouter:
		dt = capture.F32
		err = matmul(L.Router, W{}, H, cfg.Experts, false, kernels.F32)
	case s == opExperts, s == opExpertWeights:
		logits, e := x.floats(prod[0], P, N)
		if e != nil {
			return nil, 0, 0, e
		}
		k := cfg.ExpertsPerTok
		ids, wts := make([]int32, N*k), make([]float32, N*k)
		kernels.Route(kd, ids, wts, logits, N, cfg.Experts, k, cfg.NormTopK)
		if s == opExperts {
			return ids, capture.I32, k, nil
		}
		return wts, capture.F32, k, nil
	case s == opCombine:
		err = x.combine(out, L)
	case lp.kind == layerMatmul:
		err = matmul(lp.w, lp.bias, lp.k, lp.n, lp.row, kd)
	case lp.kind == layerNorm:
		err = norm(lp.w, N*lp.rows, lp.k)
	case lp.kind == layerRoPE:
		err = rope(lp.heads)
	case s == opSDPA:
		qName, kName, vName, needRope := x.attnInputs()
		q, e := x.input(qName, P, N)
		if e != nil {
			return nil, 0, 0, e
		}
		k, e := x.input(kName, 0, P+N)
		if e != nil {
			return nil, 0, 0, e
		}
		v, e := x.input(vName, 0, P+N)
		if e != nil {
			return nil, 0, 0, e
		}
		if needRope { // q_rope and k_rope not captured (transformers): the model's RoPE, as the forward does
			cos, sin := kernels.RoPETables(cfg.RopeTheta, hd, P+N, kd)
			cb, sb := w(cos), w(sin)
			qr, kr := x.alloc(N*cfg.QDim()), x.alloc((P+N)*cfg.KVDim())
			be.RoPE(qr, q, positions(P, N), N, cfg.Heads, hd, cb, sb, kd)
			be.RoPE(kr, k, positions(0, P+N), P+N, cfg.KVHeads, hd, cb, sb, kd)
			q, k = qr, kr
		}
		be.Attention(x.prof, out, q, k, v, P, N, cfg.Heads, cfg.KVHeads, hd, kd, AttnOptions{})
	case s == opAct:
		err = binary(func(a, b Buf) { be.SwiGLU(out, a, b, N*cfg.Intermediate, kd) })
	case s == opAttnResidual, s == opMLPResidual:
		err = binary(func(a, b Buf) { be.Residual(out, a, b, kd) })
	default:
		return nil, 0, 0, fmt.Errorf("engine: RunOp: op %s not supported", x.op)
	}
	if err != nil {
		return nil, 0, 0, err
	}
	host := make([]float32, out.Len())
	if err := be.Download(host, out); err != nil {
		return nil, 0, 0, fmt.Errorf("engine: RunOp %s: %v", x.op, err)
	}
	return host, dt, width, nil
}

// moeInputs returns the combine's inputs: mlp_norm (N, H) and the captured routing of its layer.
func (x *opRun) moeInputs() (h []float32, ids []int32, wts []float32, err error) {
	l, _, _ := SplitLayerOp(x.op)
	if h, err = x.floats(LayerOp(l, opMLPNorm), x.in.Pos, x.in.N); err != nil {
		return nil, nil, nil, err
	}
	ids, wts, err = x.routing(l)
	return h, ids, wts, err
}

// routing returns the captured experts (N, k) and weights (N, k) of this op's layer, checked.
func (x *opRun) routing(l int) ([]int32, []float32, error) {
	cfg := x.m.Config
	P, N, k := x.in.Pos, x.in.N, cfg.ExpertsPerTok
	name := LayerOp(l, opExperts)
	st := x.asm[tensorKey{x.in.Step, x.in.Seq, name}]
	if st == nil {
		return nil, nil, fmt.Errorf("engine: %s %s: no %s tensor for step %d seq %d", x.what(), x.op, name, x.in.Step, x.in.Seq)
	}
	if err := st.complete(P, N); err != nil {
		return nil, nil, fmt.Errorf("engine: %s %s: input %s: %v", x.what(), x.op, name, err)
	}
	if st.dtype != capture.I32 || st.width != k {
		return nil, nil, fmt.Errorf("engine: %s %s: input %s is %s with %d values per token, the model needs i32 with %d", x.what(), x.op, name, st.dtype, st.width, k)
	}
	ids := st.ints(P, N)
	if err := kernels.CheckExperts(ids, N, cfg.Experts, k); err != nil {
		return nil, nil, fmt.Errorf("engine: %s %s: input %s from position %d: %v", x.what(), x.op, name, P, err)
	}
	wts, err := x.floats(LayerOp(l, opExpertWeights), P, N)
	if err != nil {
		return nil, nil, err
	}
	return ids, wts, nil
}

// combine replays the MoE block of layer L from mlp_norm and the captured routing (TP 1).
func (x *opRun) combine(out Buf, L Layer) error {
	cfg, be := x.m.Config, x.be
	N, H, k := x.in.N, cfg.Hidden, cfg.ExpertsPerTok
	h, ids, wts, err := x.moeInputs()
	if err != nil {
		return err
	}
	kd, Im := kdt(cfg.DType), cfg.MoEIntermediate
	Y, err := runExperts(be, x.prof, kd, h, ids, N, k, H, Im, x.alloc,
		func(e int) expertBufs {
			ex := L.Experts[e]
			return expertBufs{gate: x.uploadWeights(ex.Gate), up: x.uploadWeights(ex.Up), down: x.uploadWeights(ex.Down)}
		},
		func(y, a, w Buf, n int) {
			be.MatmulPartial(x.prof, y, a, w, n, Im, H, 0, 1)
			be.MatmulFinish(y, nil, n, H, kd)
		})
	if err != nil {
		return err
	}
	var shared, gate []float32
	if Is := cfg.SharedIntermediate; Is > 0 { // Qwen2-MoE's shared expert and its gate, as the forward runs them
		hb := x.upload(h)
		g, u, a, y, gl := x.alloc(N*Is), x.alloc(N*Is), x.alloc(N*Is), x.alloc(N*H), x.alloc(N)
		be.Matmul(x.prof, g, hb, x.uploadWeights(L.Shared.Gate), nil, N, H, Is, kd)
		be.Matmul(x.prof, u, hb, x.uploadWeights(L.Shared.Up), nil, N, H, Is, kd)
		be.SwiGLU(a, g, u, N*Is, kd)
		be.MatmulPartial(x.prof, y, a, x.uploadWeights(L.Shared.Down), N, Is, H, 0, 1)
		be.MatmulFinish(y, nil, N, H, kd)
		be.Matmul(x.prof, gl, hb, x.uploadWeights(L.SharedGate), nil, N, H, 1, kernels.F32)
		shared, gate = make([]float32, N*H), make([]float32, N)
		if err := be.Download(shared, y); err != nil {
			return err
		}
		if err := be.Download(gate, gl); err != nil {
			return err
		}
	}
	comb := make([]float32, N*H)
	kernels.MoECombine(kd, comb, Y, wts, ids, N, k, H, shared, gate)
	be.Upload(out, comb)
	return nil
}

// withTwo loads the inputs produced by prod[0] and prod[1] (rows P..P+N) with load and calls f on them: the
// binary ops (SwiGLU, residual) of the replay and of the oracle.
func withTwo[T any](load func(name string, pos, n int) (T, error), prod []string, P, N int, f func(a, b T)) error {
	a, err := load(prod[0], P, N)
	if err != nil {
		return err
	}
	b, err := load(prod[1], P, N)
	if err != nil {
		return err
	}
	f(a, b)
	return nil
}

// layerOp is what a layer op reads from the model, as RunOp and the Oracle run it: a projection (w, bias: k
// inputs → n outputs per token), an RMSNorm (w over rows vectors of k per token) or a RoPE (over heads).
type layerOp struct {
	kind       layerKind
	w, bias    W
	k, n, rows int
	heads      int
	row        bool // a row-parallel matmul (o_proj, down_proj): the segment tree that TP's all-reduce finishes
}

type layerKind uint8

const (
	layerOther layerKind = iota // no weights or heads of its own (SDPA, activation, residuals)
	layerMatmul
	layerNorm
	layerRoPE
)

// layerOpOf describes layer op s of layer L.
func layerOpOf(cfg Config, L Layer, s string) layerOp {
	H, hd := cfg.Hidden, cfg.HeadDim
	mm := func(w, bias W, k, n int) layerOp {
		return layerOp{kind: layerMatmul, w: w, bias: bias, k: k, n: n}
	}
	norm := func(w W, rows, k int) layerOp { return layerOp{kind: layerNorm, w: w, rows: rows, k: k} }
	switch s {
	case opAttnNorm:
		return norm(L.AttnNorm, 1, H)
	case opMLPNorm:
		return norm(L.MLPNorm, 1, H)
	case opQNorm:
		return norm(L.QNorm, cfg.Heads, hd)
	case opKNorm:
		return norm(L.KNorm, cfg.KVHeads, hd)
	case opQProj:
		return mm(L.Q, L.QBias, H, cfg.QDim())
	case opKProj:
		return mm(L.K, L.KBias, H, cfg.KVDim())
	case opVProj:
		return mm(L.V, L.VBias, H, cfg.KVDim())
	case opOProj:
		o := mm(L.O, L.OB, cfg.QDim(), H)
		o.row = true
		return o
	case opGateProj:
		return mm(L.Gate, W{}, H, cfg.Intermediate)
	case opUpProj:
		return mm(L.Up, W{}, H, cfg.Intermediate)
	case opDownProj:
		o := mm(L.Down, W{}, cfg.Intermediate, H)
		o.row = true
		return o
	case opRouter: // float32 output: RunOp and Oracle round to opDType
		return mm(L.Router, W{}, H, cfg.Experts)
	case opQRope:
		return layerOp{kind: layerRoPE, heads: cfg.Heads}
	case opKRope:
		return layerOp{kind: layerRoPE, heads: cfg.KVHeads}
	}
	return layerOp{}
}
