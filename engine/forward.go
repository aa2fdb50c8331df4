package engine

import (
	"fmt"

	"bitalign/kernels"
	"bitalign/nvls"
)

// variant is how one run's kernels are chosen: the profile of each op family and the deliberate faults.
type variant struct {
	matmul, norm, attn, softmax kernels.Profile
	router                      kernels.Profile // the MoE router matmul (router-split-k fault: standard)
	routerModelDType            bool            // router logits rounded to the model dtype (router-split-k fault)
	experts                     kernels.Profile // the MoE experts' matmuls (standard: split-K from the tokens an expert got)
	ring                        bool            // every all-reduce in ring order (the standard profile)
	ringLayer                   int             // ≥ 0: only this layer's all-reduces in ring order (ring-allreduce fault)
	fusionLayer                 int             // ≥ 0: this layer's mlp_norm reads the unrounded residual sum (fusion fault)
	fastExpLayer                int             // ≥ 0: this layer's attention uses an approximate exp (fast-exp fault)
	rngSlot                     bool            // Gumbel noise keyed by batch slot instead of sequence id (rng-slot fault)
}

// profileVariant is profile p's kernels for every op family: the matmuls and attention run p, the rest
// p.Others() (tc: canonical), the all-reduces in ring order only for the standard profile (kernels.Profile's rules).
func profileVariant(p kernels.Profile) variant {
	o := p.Others()
	return variant{matmul: p, norm: o, attn: p, softmax: o, router: p, experts: p, ring: p.RingAllReduce(),
		ringLayer: -1, fusionLayer: -1, fastExpLayer: -1}
}

type layerWeights struct {
	attnNorm, mlpNorm          Buf
	q, k, v, o, qb, kb, vb, ob Buf
	qn, kn                     Buf
	gate, up, down             Buf
	router                     Buf          // (E, H), replicated: MoE layers
	experts                    []expertBufs // this rank's shard of each expert: MoE layers
	shared                     expertBufs   // this rank's shard of the shared expert (Qwen2-MoE)
	sharedGate                 Buf          // (1, H), replicated (Qwen2-MoE)
}

// expertBufs is one expert's TP shard: gate and up column-parallel, down row-parallel over moe_intermediate.
type expertBufs struct{ gate, up, down Buf }

// rank is one TP rank: its backend, its weight shards, its KV caches and its capture writer.
type rank struct {
	cfg      Config
	lay      layout
	be       Backend
	comm     nvls.Comm
	ring     nvls.Comm // ring-order group (standard profile, ring-allreduce fault); nil when unused
	v        variant
	embed    Buf
	norm     Buf
	lmHead   Buf
	layers   []layerWeights
	cos      Buf
	sin      Buf
	caches   map[int64]*kvCache
	kv16     BF16Cacher // non-nil: the KV caches are bf16 on this backend (two values a float32 slot)
	rec      *recorder  // nil: nothing captured
	scratch  []Buf
	attnSeqs []AttnSeq // a layer's attention calls (reused)
	logits   Buf       // the last forward's logits shard (T, vLocal)
	logitsT  int
	step     int64    // the step being run (the routing replay's key)
	routing  *Routing // another run's routing replayed in the MoE layers; nil: the rank's own
	// stopLayer > 0: the forward runs layers 0..stopLayer-1 and returns no logits (RunOptions.StopLayer)
	stopLayer int
}

// kvCache holds one sequence's k (after RoPE) and v for every layer, for this rank's kv heads.
type kvCache struct {
	k, v []Buf // per layer, (capacity, kvLocal*hd)
	n    int   // positions filled
	cap  int
}

// newRank places the rank's weights on be. stop > 0 (RunOptions.StopLayer, below the model's layers): only
// layers 0..stop-1 and the embedding go up (the forward never reaches the others, the final norm or the LM head).
func newRank(m *Model, lay layout, be Backend, comm, ring nvls.Comm, v variant, maxPos, stop int) *rank {
	cfg := m.Config
	r := &rank{cfg: cfg, lay: lay, be: be, comm: comm, ring: ring, v: v, caches: map[int64]*kvCache{}}
	if bc, ok := be.(BF16Cacher); ok && v.fastExpLayer < 0 && bc.BF16Caches(v.attn, cfg.HeadDim) {
		r.kv16 = bc // the fast-exp fault's attention reads float32 caches
	}
	vec := func(x []float32) Buf { // a float32 vector (norm weights, biases, RoPE tables)
		if x == nil {
			return nil
		}
		b := be.Alloc(len(x))
		if b != nil {
			be.Upload(b, x)
		}
		return b
	}
	up := func(w W) Buf { return vec(w.Float32()) } // a bias, as float32 values
	mat := func(w W) Buf {                          // a weight matrix or a norm weight, in its stored dtype
		if w.IsZero() {
			return nil
		}
		return be.UploadWeights(w)
	}
	H, hd := cfg.Hidden, cfg.HeadDim
	layers := m.Layers
	if stop > 0 && stop < len(layers) {
		layers = layers[:stop]
		r.stopLayer = stop
	}
	r.embed = mat(m.Embed)
	switch {
	case r.stopLayer > 0: // no final norm, no LM head
	case cfg.TiedEmbeddings && lay.tp == 1:
		r.norm = mat(m.Norm)
		r.lmHead = r.embed // the same tensor: held once (a tied checkpoint's size on the device too)
	default:
		r.norm = mat(m.Norm)
		r.lmHead = mat(m.LMHead.Rows(H, lay.v0, lay.vLocal))
	}
	q0, qn := lay.qHead0*hd, lay.qHeads*hd
	k0, kn := lay.kvHead0*hd, lay.kvHeads*hd
	for l, L := range layers {
		var experts []expertBufs
		if cfg.MoELayer(l) {
			Im := cfg.MoEIntermediate
			for _, x := range L.Experts {
				experts = append(experts, expertBufs{gate: mat(x.Gate.Rows(H, lay.m0, lay.mLocal)),
					up: mat(x.Up.Rows(H, lay.m0, lay.mLocal)), down: mat(x.Down.Cols(H, Im, lay.m0, lay.mLocal))})
			}
		}
		var shared expertBufs
		if !L.SharedGate.IsZero() {
			Is := cfg.SharedIntermediate
			shared = expertBufs{gate: mat(L.Shared.Gate.Rows(H, lay.s0, lay.sLocal)),
				up: mat(L.Shared.Up.Rows(H, lay.s0, lay.sLocal)), down: mat(L.Shared.Down.Cols(H, Is, lay.s0, lay.sLocal))}
		}
		r.layers = append(r.layers, layerWeights{
			router: mat(L.Router), experts: experts, shared: shared, sharedGate: mat(L.SharedGate),
			attnNorm: mat(L.AttnNorm), mlpNorm: mat(L.MLPNorm),
			q: mat(L.Q.Rows(H, q0, qn)), k: mat(L.K.Rows(H, k0, kn)), v: mat(L.V.Rows(H, k0, kn)),
			o:  mat(L.O.Cols(H, cfg.QDim(), q0, qn)),
			qb: up(L.QBias.Slice(q0, q0+qn)), kb: up(L.KBias.Slice(k0, k0+kn)), vb: up(L.VBias.Slice(k0, k0+kn)), ob: up(L.OB),
			qn: mat(L.QNorm), kn: mat(L.KNorm),
			gate: mat(L.Gate.Rows(H, lay.i0, lay.iLocal)), up: mat(L.Up.Rows(H, lay.i0, lay.iLocal)),
			down: mat(L.Down.Cols(H, cfg.Intermediate, lay.i0, lay.iLocal)),
		})
	}
	cos, sin := kernels.RoPETables(cfg.RopeTheta, cfg.HeadDim, max(maxPos, 1), kdt(cfg.DType))
	r.cos, r.sin = vec(cos), vec(sin)
	return r
}

// freeWeights releases the rank's weights and tables on its backend (the run is over: on a GPU they would
// otherwise hold device memory until the process ends).
func (r *rank) freeWeights() {
	free := func(bs ...Buf) {
		for _, b := range bs {
			if b != nil {
				r.be.Free(b)
			}
		}
	}
	if r.lmHead == r.embed {
		r.lmHead = nil // tied at TP 1: freed once, as the embedding
	}
	free(r.embed, r.norm, r.lmHead, r.cos, r.sin)
	for _, w := range r.layers {
		free(w.attnNorm, w.mlpNorm, w.q, w.k, w.v, w.o, w.qb, w.kb, w.vb, w.ob, w.qn, w.kn, w.gate, w.up, w.down,
			w.router, w.sharedGate, w.shared.gate, w.shared.up, w.shared.down)
		for _, x := range w.experts {
			free(x.gate, x.up, x.down)
		}
	}
	r.embed, r.norm, r.lmHead, r.cos, r.sin, r.layers = nil, nil, nil, nil, nil, nil
}

// segment is one sequence's share of a forward: tokens at positions start..start+len(toks)-1.
type segment struct {
	seq        int64
	slot       int
	start      int
	toks       []int32
	sampleFrom int // first position whose `sample` is recorded (rows before it record none)
}

// alloc returns a scratch buffer freed at the end of the forward.
func (r *rank) alloc(n int) Buf {
	b := r.be.Alloc(n)
	r.scratch = append(r.scratch, b)
	return b
}

func (r *rank) freeScratch() {
	for _, b := range r.scratch {
		r.be.Free(b)
	}
	r.scratch = r.scratch[:0]
}

func (r *rank) cache(seq int64, need int) *kvCache {
	c := r.caches[seq]
	if c != nil && c.cap >= need {
		return c
	}
	capacity := 64
	for capacity < need {
		capacity *= 2
	}
	w := r.lay.kvHeads * r.cfg.HeadDim
	if r.kv16 != nil {
		w /= 2 // float32 slots of a position's bf16 values (kvHeads·hd is even: hd is a multiple of 16)
	}
	nc := &kvCache{cap: capacity}
	for range r.cfg.Layers {
		k, v := r.be.Alloc(capacity*w), r.be.Alloc(capacity*w)
		nc.k, nc.v = append(nc.k, k), append(nc.v, v)
	}
	if c != nil { // grow: copy what is filled
		for l := range c.k {
			if c.n > 0 {
				r.be.Copy(r.be.View(nc.k[l], 0, c.n*w), r.be.View(c.k[l], 0, c.n*w))
				r.be.Copy(r.be.View(nc.v[l], 0, c.n*w), r.be.View(c.v[l], 0, c.n*w))
			}
			r.be.Free(c.k[l])
			r.be.Free(c.v[l])
		}
		nc.n = c.n
	}
	r.caches[seq] = nc
	return nc
}

// dropCache frees a finished sequence's KV cache.
func (r *rank) dropCache(seq int64) {
	if c := r.caches[seq]; c != nil {
		for l := range c.k {
			r.be.Free(c.k[l])
			r.be.Free(c.v[l])
		}
		delete(r.caches, seq)
	}
}

// forward runs one packed batch of segments through the model on this rank and returns the full logits (T, V),
// gathered from the vocab shards, on the host. Every captured op output is recorded as it is produced.
func (r *rank) forward(segs []segment) (*fwdResult, error) {
	defer r.freeScratch()
	cfg, be, lay := r.cfg, r.be, r.lay
	H, hd, dt := cfg.Hidden, cfg.HeadDim, kdt(cfg.DType)
	T := 0
	var ids, pos []int32
	offs := make([]int, len(segs)) // first row of each segment
	for i, s := range segs {
		offs[i] = T
		T += len(s.toks)
		ids = append(ids, s.toks...)
		for p := range s.toks {
			pos = append(pos, int32(s.start+p))
		}
		c := r.caches[s.seq]
		filled := 0
		if c != nil {
			filled = c.n
		}
		if filled != s.start {
			return nil, fmt.Errorf("engine: sequence %d: forward at position %d but its KV cache holds %d positions", s.seq, s.start, filled)
		}
		r.cache(s.seq, s.start+len(s.toks))
	}
	qW, kvW, iW, vW := lay.qHeads*hd, lay.kvHeads*hd, lay.iLocal, lay.vLocal
	emit := func(op string, b Buf, width int) error { return r.rec.emit(r, op, b, width, segs, offs) }

	if err := r.rec.emitTokens(r, segs); err != nil {
		return nil, err
	}
	x := r.alloc(T * H)
	be.Embed(x, r.embed, ids, H, dt)
	if err := emit(OpEmbed, x, H); err != nil {
		return nil, err
	}
	h := r.alloc(T * H)
	q, qr := r.alloc(T*qW), r.alloc(T*qW)
	k, kr := r.alloc(T*kvW), r.alloc(T*kvW)
	v := r.alloc(T * kvW)
	attn := r.alloc(T * qW)
	o := r.alloc(T * H)
	x2 := r.alloc(T * H)
	g, u, a := r.alloc(T*iW), r.alloc(T*iW), r.alloc(T*iW)
	var sum Buf
	if r.v.fusionLayer >= 0 {
		sum = r.alloc(T * H)
	}
	layers := r.layers
	if r.stopLayer > 0 {
		layers = layers[:r.stopLayer] // the ops asked for end here: nothing after them is computed
	}
	for l, w := range layers {
		op := func(s string) string { return LayerOp(l, s) }
		be.RMSNorm(r.v.norm, h, x, w.attnNorm, T, H, cfg.Eps, dt)
		if err := emit(op(opAttnNorm), h, H); err != nil {
			return nil, err
		}
		for _, p := range []struct {
			s         string
			out, w, b Buf
			n         int
		}{{opQProj, q, w.q, w.qb, qW}, {opKProj, k, w.k, w.kb, kvW}, {opVProj, v, w.v, w.vb, kvW}} {
			be.Matmul(r.v.matmul, p.out, h, p.w, p.b, T, H, p.n, dt)
			if err := emit(op(p.s), p.out, p.n); err != nil {
				return nil, err
			}
		}
		if cfg.QKNorm { // per-head RMSNorm over hd, written back into q and k
			be.RMSNorm(r.v.norm, qr, q, w.qn, T*lay.qHeads, hd, cfg.Eps, dt)
			if err := emit(op(opQNorm), qr, qW); err != nil {
				return nil, err
			}
			be.RMSNorm(r.v.norm, kr, k, w.kn, T*lay.kvHeads, hd, cfg.Eps, dt)
			if err := emit(op(opKNorm), kr, kvW); err != nil {
				return nil, err
			}
			be.Copy(q, qr)
			be.Copy(k, kr)
		}
		be.RoPE(qr, q, pos, T, lay.qHeads, hd, r.cos, r.sin, dt)
		if err := emit(op(opQRope), qr, qW); err != nil {
			return nil, err
		}
		be.RoPE(kr, k, pos, T, lay.kvHeads, hd, r.cos, r.sin, dt)
		if err := emit(op(opKRope), kr, kvW); err != nil {
			return nil, err
		}
		ao := AttnOptions{FastExp: r.v.fastExpLayer == l}
		att := r.attnSeqs[:0]
		for i, s := range segs { // each sequence's keys and values into its cache, then its attention
			c := r.caches[s.seq]
			n := len(s.toks)
			end := (s.start + n) * kvW
			if r.kv16 != nil { // bf16 caches: two values a slot
				r.kv16.NarrowBF16(be.View(c.k[l], s.start*kvW/2, n*kvW/2), be.View(kr, offs[i]*kvW, n*kvW), n*kvW)
				r.kv16.NarrowBF16(be.View(c.v[l], s.start*kvW/2, n*kvW/2), be.View(v, offs[i]*kvW, n*kvW), n*kvW)
				end /= 2
			} else {
				be.Copy(be.View(c.k[l], s.start*kvW, n*kvW), be.View(kr, offs[i]*kvW, n*kvW))
				be.Copy(be.View(c.v[l], s.start*kvW, n*kvW), be.View(v, offs[i]*kvW, n*kvW))
			}
			att = append(att, AttnSeq{Out: be.View(attn, offs[i]*qW, n*qW), Q: be.View(qr, offs[i]*qW, n*qW),
				K: be.View(c.k[l], 0, end), V: be.View(c.v[l], 0, end), Start: s.start, N: n, KV16: r.kv16 != nil})
		}
		r.attnSeqs = att
		// one launch for the layer's sequences where the backend can (the same bits as one a sequence); bf16
		// caches always so (BF16Cacher: AttentionBatch does not refuse them)
		if ab, ok := be.(AttentionBatcher); !ok || (len(att) < 2 && r.kv16 == nil) || !ab.AttentionBatch(r.v.attn, att, lay.qHeads, lay.kvHeads, hd, dt, ao) {
			for _, a := range att {
				be.Attention(r.v.attn, a.Out, a.Q, a.K, a.V, a.Start, a.N, lay.qHeads, lay.kvHeads, hd, dt, ao)
			}
		}
		if err := emit(op(opSDPA), attn, qW); err != nil {
			return nil, err
		}
		r.rowParallel(r.v.matmul, l, o, attn, w.o, w.ob, T, qW, H)
		if err := emit(op(opOProj), o, H); err != nil {
			return nil, err
		}
		be.Residual(x2, x, o, dt)
		if err := emit(op(opAttnResidual), x2, H); err != nil {
			return nil, err
		}
		normIn := x2
		if r.v.fusionLayer == l {
			// the fusion fault: residual add and RMSNorm fused, the norm reads the sum before its rounding
			be.Residual(sum, x, o, kernels.F32)
			normIn = sum
		}
		be.RMSNorm(r.v.norm, h, normIn, w.mlpNorm, T, H, cfg.Eps, dt)
		if err := emit(op(opMLPNorm), h, H); err != nil {
			return nil, err
		}
		if cfg.MoELayer(l) {
			if err := r.moe(l, w, h, o, T, segs, offs); err != nil {
				return nil, err
			}
			be.Residual(x, x2, o, dt)
			if err := emit(op(opMLPResidual), x, H); err != nil {
				return nil, err
			}
			continue
		}
		be.Matmul(r.v.matmul, g, h, w.gate, nil, T, H, iW, dt)
		if err := emit(op(opGateProj), g, iW); err != nil {
			return nil, err
		}
		be.Matmul(r.v.matmul, u, h, w.up, nil, T, H, iW, dt)
		if err := emit(op(opUpProj), u, iW); err != nil {
			return nil, err
		}
		be.SwiGLU(a, g, u, T*iW, dt)
		if err := emit(op(opAct), a, iW); err != nil {
			return nil, err
		}
		r.rowParallel(r.v.matmul, l, o, a, w.down, nil, T, iW, H)
		if err := emit(op(opDownProj), o, H); err != nil {
			return nil, err
		}
		be.Residual(x, x2, o, dt)
		if err := emit(op(opMLPResidual), x, H); err != nil {
			return nil, err
		}
	}
	for _, s := range segs {
		if c := r.caches[s.seq]; c != nil {
			c.n = s.start + len(s.toks)
		}
	}
	if r.stopLayer > 0 {
		return nil, be.Err()
	}
	be.RMSNorm(r.v.norm, h, x, r.norm, T, H, cfg.Eps, dt)
	if err := emit(OpFinalNorm, h, H); err != nil {
		return nil, err
	}
	// The vocab-parallel LM head: this rank's logits shard stays on the backend for logprobs; the full rows are
	// gathered (float32, exact) for the sampling rule.
	r.be.Free(r.logits)
	r.logits, r.logitsT = be.Alloc(T*vW), T
	be.Matmul(r.v.matmul, r.logits, h, r.lmHead, nil, T, H, vW, kernels.F32)
	if err := emit(OpLogits, r.logits, vW); err != nil {
		return nil, err
	}
	res := &fwdResult{V: cfg.Vocab}
	if !sampling(segs) { // no row is sampled: the (T, V) float32 logits stay on the backend (logprobs read them there)
		return res, be.Err()
	}
	full := r.logits
	if lay.tp > 1 {
		full = r.alloc(T * cfg.Vocab)
		be.AllGather(r.comm, full, r.logits, T, vW)
	}
	res.logits = make([]float32, T*cfg.Vocab)
	if err := be.Download(res.logits, full); err != nil {
		return nil, err
	}
	return res, nil
}

// logprobs computes log p(targets[t]) for every row of the last forward with the sharded log-softmax.
func (r *rank) logprobs(targets []int32) ([]float32, error) {
	if len(targets) != r.logitsT {
		return nil, fmt.Errorf("engine: %d targets for %d rows", len(targets), r.logitsT)
	}
	out := r.be.Alloc(len(targets))
	defer r.be.Free(out)
	r.be.LogProbs(r.v.softmax, out, r.logits, targets, r.logitsT, r.lay.vLocal, r.comm)
	host := make([]float32, len(targets))
	if err := r.be.Download(host, out); err != nil {
		return nil, err
	}
	return host, nil
}

// sampling reports whether any segment has a row the sampling rule draws from (sampleFrom, a position, inside
// the segment's positions).
func sampling(segs []segment) bool {
	for _, s := range segs {
		if s.sampleFrom < s.start+len(s.toks) {
			return true
		}
	}
	return false
}

// fwdResult is a forward's output on the host: the full logits (T, V), nil when no row is sampled.
type fwdResult struct {
	V      int
	logits []float32
}

func (f *fwdResult) row(t int) []float32 { return f.logits[t*f.V : (t+1)*f.V] }

// rowParallel computes out (T, N) = x (T, kLocal) · wᵀ + bias over the TP group: the rank's partial subtree,
// the all-reduce that finishes the tree, then the bias and the rounding.
func (r *rank) rowParallel(p kernels.Profile, layer int, out, x, w, bias Buf, T, kLocal, N int) {
	be := r.be
	be.MatmulPartial(p, out, x, w, T, kLocal, N, r.lay.rank, r.lay.tp)
	if r.lay.tp > 1 {
		c := r.comm
		if r.v.ring || r.v.ringLayer == layer {
			c = r.ring
		}
		if r.v.ringLayer == layer {
			// the ring-allreduce fault: NCCL-style, the partials travel (and are summed) as bf16 in ring order
			be.Round(out, kdt(r.cfg.DType))
		}
		be.AllReduce(c, out)
	}
	be.MatmulFinish(out, bias, T, N, kdt(r.cfg.DType))
}
