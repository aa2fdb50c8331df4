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
// weight, SwiGLU's rounded SiLU, RoPE's rounded cos/sin and products) are kept; docs/arithmetic.md ("Oracle")
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
	if op == OpSample {
		return capture.Tensor{}, fmt.Errorf("engine: Oracle: sample is a rule over the logits, not arithmetic (RunOp replays it)")
	}
	dt := cfg.DType
	if op == OpLogits || op == OpLogprobs {
		dt = capture.F32
	}
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
	matmul := func(w, bias []float32, K, Nout int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		oracleMatmul(out, a, w, bias, N, K, Nout, dt)
		return nil
	}
	norm := func(w []float32, rows, C int) error {
		a, err := in0()
		if err != nil {
			return err
		}
		oracleRMSNorm(out, a, w, rows, C, cfg.Eps, act, dt)
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
	binary := func(f func(a, b []float32)) error {
		a, err := x.floats(prod[0], P, N)
		if err != nil {
			return err
		}
		b, err := x.floats(prod[1], P, N)
		if err != nil {
			return err
		}
		f(a, b)
		return nil
	}
	var err error
	switch {
	case x.op == OpEmbed:
		ids, e := x.tokens(P, N)
		if e != nil {
			return nil, 0, e
		}
		for t, id := range ids {
			for i, v := range m.Embed[int(id)*H : (int(id)+1)*H] {
				out[t*H+i] = roundOnce(float64(v), 0, dt)
			}
		}
	case x.op == OpFinalNorm:
		err = norm(m.Norm, N, H)
	case x.op == OpLogits:
		err = matmul(m.LMHead, nil, H, cfg.Vocab)
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
	case s == opAttnNorm:
		err = norm(L.AttnNorm, N, H)
	case s == opMLPNorm:
		err = norm(L.MLPNorm, N, H)
	case s == opQProj:
		err = matmul(L.Q, L.QBias, H, cfg.QDim())
	case s == opKProj:
		err = matmul(L.K, L.KBias, H, cfg.KVDim())
	case s == opVProj:
		err = matmul(L.V, L.VBias, H, cfg.KVDim())
	case s == opQNorm:
		err = norm(L.QNorm, N*cfg.Heads, hd)
	case s == opKNorm:
		err = norm(L.KNorm, N*cfg.KVHeads, hd)
	case s == opQRope:
		err = rope(cfg.Heads)
	case s == opKRope:
		err = rope(cfg.KVHeads)
	case s == opSDPA:
		err = x.oracleSDPA(out, act, dt)
	case s == opOProj:
		err = matmul(L.O, L.OB, cfg.QDim(), H)
	case s == opGateProj:
		err = matmul(L.Gate, nil, H, cfg.Intermediate)
	case s == opUpProj:
		err = matmul(L.Up, nil, H, cfg.Intermediate)
	case s == opDownProj:
		err = matmul(L.Down, nil, cfg.Intermediate, H)
	case s == opAct:
		err = binary(func(g, u []float32) {
			for i := range out {
				gv := float64(g[i])
				sl := roundOnce(gv/(1+math.Exp(-gv)), 0, act) // HF: act_fn(gate) is a tensor of the model dtype
				out[i] = roundOnce(float64(sl)*float64(u[i]), 0, dt)
			}
		})
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
