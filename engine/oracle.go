package engine

import (
	"fmt"
	"math"

	"bitalign/capture"
)

// Oracle re-executes op for one sequence over positions [in.Pos, in.Pos+in.N) from the inputs RunOp reads
// (the same OpInputs: one side's captured producers), as the exact math function of those inputs rounded once
// to the output dtype: the correctly rounded result of that side's inputs, against which a kernel's local
// error is measured. The rounding points inside an op that the model itself defines (RMSNorm's cast before the
// weight, SwiGLU's rounded SiLU, RoPE's rounded cos/sin and products) are kept; docs/arithmetic.md ("The oracle")
// lists them and says where float64 is exact and where it is only correctly rounded away from ties.
//
// out is the dtype to round to: capture.InvalidDType for the op's own (the model dtype; F32 for logits and
// logprobs), or BF16, F16, F32 (e.g. a bf16 model's logits computed in bf16 and stored as float32). The attention
// reads q_rope and k_rope, or, when they are not captured, AltProducers with the model's RoPE. `tokens` and
// `sample` (an integer input and a rule) have no oracle.
func (m *Model) Oracle(op string, in OpInputs, out capture.DType) (capture.Tensor, error) {
	cfg := m.Config
	if err := checkOp(cfg, op); err != nil {
		return capture.Tensor{}, err
	}
	if err := in.check("Oracle", op); err != nil {
		return capture.Tensor{}, err
	}
	if !HasOracle(op) {
		return capture.Tensor{}, fmt.Errorf("engine: Oracle: %s is a rule, not arithmetic (RunOp replays it)", op)
	}
	dt := opDType(cfg, op)
	switch out {
	case capture.InvalidDType:
	case capture.BF16, capture.F16, capture.F32:
		dt = out
	default:
		return capture.Tensor{}, fmt.Errorf("engine: Oracle %s: cannot round to %s (bf16, f16 or f32)", op, out)
	}
	asm, err := in.assemble("Oracle " + op)
	if err != nil {
		return capture.Tensor{}, err
	}
	x := &opRun{m: m, asm: asm, in: in, op: op}
	res, width, err := x.oracle(dt)
	if err != nil {
		return capture.Tensor{}, err
	}
	return in.output(cfg, op, res, dt, width), nil
}

// HasOracle reports whether op has an oracle: every op but the integer inputs and rules (tokens, sample, a MoE
// layer's expert selection) and the routing weights, which follow the selection.
func HasOracle(op string) bool {
	if op == OpTokens || op == OpSample {
		return false
	}
	if _, s, ok := SplitLayerOp(op); ok && (s == opExperts || s == opExpertWeights) {
		return false
	}
	return true
}

// oracle computes the op's rows rounded to dt (x.be is nil: nothing runs on a backend).
func (x *opRun) oracle(dt capture.DType) ([]float32, int, error) {
	m, cfg := x.m, x.m.Config
	P, N := x.in.Pos, x.in.N
	width := opWidth(cfg, x.op)
	prod := Producers(cfg, x.op)
	out := make([]float32, N*max(width, 1))
	act := cfg.DType // the dtype of the rounding points inside an op (the model's activations)
	l, s, layered := SplitLayerOp(x.op)
	var L Layer
	if layered {
		L = m.Layers[l]
	}
	H, hd := cfg.Hidden, cfg.HeadDim
	in0 := func() ([]float32, error) { return x.floats(prod[0], P, N) }
	matmul := func(w, bias W, K, Nout int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		oracleMatmul(out, a, w, bias.Float32(), N, K, Nout, dt)
		return nil
	}
	norm := func(w W, rows, C int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		oracleRMSNorm(out, a, w.Float32(), rows, C, cfg.Eps, act, dt)
		return nil
	}
	rope := func(heads int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		oracleRoPE(out, a, oracleRoPETables(cfg, P+N, act), P, N, heads, hd, dt)
		return nil
	}
	binary := func(f func(a, b []float32)) error { return withTwo(x.floats, prod, P, N, f) }
	var err error
	lp := layerOpOf(cfg, L, s)
	switch {
	case x.op == OpEmbed:
		ids, e := x.tokens(P, N)
		if e != nil {
			return nil, 0, e
		}
		row := make([]float32, H)
		for t, id := range ids {
			m.Embed.Widen(row, int(id)*H)
			for i, v := range row {
				out[t*H+i] = roundOnce(float64(v), 0, dt)
			}
		}
	case x.op == OpFinalNorm:
		err = norm(m.Norm, N, H)
	case x.op == OpLogits:
		err = matmul(m.LMHead, W{}, H, cfg.Vocab)
	case x.op == OpLogprobs:
		width = 0
		logits, e := x.floats(OpLogits, P, N)
		if e != nil {
			return nil, 0, e
		}
		targets, e := x.tokens(P+1, N)
		if e != nil {
			return nil, 0, e
		}
		for t, tok := range targets {
			out[t] = roundOnce(oracleLogprob(logits[t*cfg.Vocab:(t+1)*cfg.Vocab], int(tok)), 0, dt)
		}
	case lp.kind == layerMatmul:
		err = matmul(lp.w, lp.bias, lp.k, lp.n)
	case lp.kind == layerNorm:
		err = norm(lp.w, N*lp.rows, lp.k)
	case lp.kind == layerRoPE:
		err = rope(lp.heads)
	case s == opSDPA:
		err = x.oracleSDPA(out, act, dt)
	case s == opAct:
		err = binary(func(g, u []float32) {
			for i := range out {
				gv := float64(g[i])
				sl := roundOnce(gv/(1+math.Exp(-gv)), 0, act) // HF: act_fn(gate) is a tensor of the model dtype
				out[i] = roundOnce(float64(sl)*float64(u[i]), 0, dt)
			}
		})
	case s == opCombine:
		err = x.oracleCombine(out, L, act, dt)
	case s == opAttnResidual, s == opMLPResidual:
		err = binary(func(a, b []float32) {
			for i := range out {
				hi, lo := twoSum(float64(a[i]), float64(b[i]))
				out[i] = roundOnce(hi, lo, dt)
			}
		})
	default:
		return nil, 0, fmt.Errorf("engine: Oracle: op %s not supported", x.op)
	}
	if err != nil {
		return nil, 0, err
	}
	return out, width, nil
}

// CapturedRows is one op's captured output for one sequence of one step, reassembled from any chunking over
// positions and any TP shards, as Oracle's and RunOp's outputs are laid out.
type CapturedRows struct {
	op  string
	cfg Config
	in  OpInputs
	st  *seqTensor
}

// Captured reassembles op's output for (in.Step, in.Seq) from in.Tensors[op]. It fails when there is none.
func (m *Model) Captured(op string, in OpInputs) (*CapturedRows, error) {
	if err := checkOp(m.Config, op); err != nil {
		return nil, err
	}
	only := in
	only.Tensors = map[string][]capture.Tensor{op: in.Tensors[op]}
	asm, err := only.assemble("Captured " + op)
	if err != nil {
		return nil, err
	}
	st := asm[tensorKey{in.Step, in.Seq, op}]
	if st == nil {
		return nil, fmt.Errorf("engine: no %s tensor for step %d seq %d", op, in.Step, in.Seq)
	}
	return &CapturedRows{op: op, cfg: m.Config, in: in, st: st}, nil
}

// DType is the captured dtype.
func (r *CapturedRows) DType() capture.DType { return r.st.dtype }

// Runs returns the maximal runs of consecutive positions held completely (every column), ascending, as
// [first position, count].
func (r *CapturedRows) Runs() [][2]int {
	var runs [][2]int
	for _, p := range r.st.positions() {
		if r.st.complete(p, 1) != nil {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1][0]+runs[n-1][1] == p {
			runs[n-1][1]++
			continue
		}
		runs = append(runs, [2]int{p, 1})
	}
	return runs
}

// Tensor returns positions [pos, pos+n) (from Runs) as one unsharded tensor, the shape Oracle and RunOp give.
func (r *CapturedRows) Tensor(pos, n int) (capture.Tensor, error) {
	if err := r.st.complete(pos, n); err != nil {
		return capture.Tensor{}, fmt.Errorf("engine: captured %s step %d seq %d: %v", r.op, r.in.Step, r.in.Seq, err)
	}
	var data []byte
	for p := pos; p < pos+n; p++ {
		data = append(data, r.st.rows[p]...)
	}
	t := capture.Tensor{Step: r.in.Step, Seq: r.in.Seq, Pos: int64(pos), NTok: int64(n), Op: r.op,
		Index: int32(OpIndex(r.cfg, r.op)), Role: "out", DType: r.st.dtype, Shard: capture.NoShard, Data: data,
		Shape: []int64{int64(n), int64(r.st.width)}}
	if opWidth(r.cfg, r.op) == 0 && r.st.width == 1 {
		t.Shape = []int64{int64(n)}
	}
	return t, nil
}
