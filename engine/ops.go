package engine

import (
	"fmt"

	"bitalign/capture"
)

// Op names outside the layers, in docs/design.md's spelling (the canonical list lives in package capture).
const (
	OpTokens    = capture.OpTokens
	OpEmbed     = capture.OpEmbed
	OpFinalNorm = capture.OpFinalNorm
	OpLogits    = capture.OpLogits
	OpLogprobs  = capture.OpLogprobs
	OpSample    = capture.OpSample
)

// Per-layer op suffixes ("layers.L." + suffix); capture.LayerOps orders them.
const (
	opAttnNorm     = capture.LayerAttnNorm
	opQProj        = capture.LayerQProj
	opKProj        = capture.LayerKProj
	opVProj        = capture.LayerVProj
	opQNorm        = capture.LayerQNorm
	opKNorm        = capture.LayerKNorm
	opQRope        = capture.LayerQRope
	opKRope        = capture.LayerKRope
	opSDPA         = capture.LayerSDPA
	opOProj        = capture.LayerOProj
	opAttnResidual = capture.LayerAttnResidual
	opMLPNorm      = capture.LayerMLPNorm
	opGateProj     = capture.LayerGateProj
	opUpProj       = capture.LayerUpProj
	opAct          = capture.LayerAct
	opDownProj     = capture.LayerDownProj
	opMLPResidual  = capture.LayerMLPResidual
)

// LayerOp returns "layers.L.suffix".
func LayerOp(l int, suffix string) string { return capture.LayerOp(l, suffix) }

// OpNames returns the canonical op names of one forward pass in execution order (capture.OpNames for cfg): a
// name's index in this list is its capture Index.
func OpNames(cfg Config) []string { return capture.OpNames(cfg.Layers, cfg.QKNorm) }

// OpIndex returns op's execution index in OpNames(cfg), or -1.
func OpIndex(cfg Config, op string) int { return capture.OpIndex(op, cfg.Layers, cfg.QKNorm) }

// SplitLayerOp splits "layers.L.suffix" into L and suffix.
func SplitLayerOp(op string) (layer int, suffix string, ok bool) { return capture.SplitLayerOp(op) }

// Producers names the ops whose outputs op reads, in argument order. `tokens` has none. The attention
// (`layers.L.attn.sdpa`) reads q_rope at its own positions and k_rope, v_proj at every position ≤ the query's
// (AltProducers when q_rope and k_rope are not captured); `logprobs` reads `tokens` at pos+1. It returns nil
// for an op not in OpNames(cfg).
func Producers(cfg Config, op string) []string {
	if OpIndex(cfg, op) < 0 {
		return nil
	}
	residualIn := func(l int) string {
		if l == 0 {
			return OpEmbed
		}
		return LayerOp(l-1, opMLPResidual)
	}
	if l, s, ok := SplitLayerOp(op); ok {
		L := func(s string) string { return LayerOp(l, s) }
		switch s {
		case opAttnNorm:
			return []string{residualIn(l)}
		case opQProj, opKProj, opVProj:
			return []string{L(opAttnNorm)}
		case opQNorm:
			return []string{L(opQProj)}
		case opKNorm:
			return []string{L(opKProj)}
		case opQRope:
			if cfg.QKNorm {
				return []string{L(opQNorm)}
			}
			return []string{L(opQProj)}
		case opKRope:
			if cfg.QKNorm {
				return []string{L(opKNorm)}
			}
			return []string{L(opKProj)}
		case opSDPA:
			return []string{L(opQRope), L(opKRope), L(opVProj)}
		case opOProj:
			return []string{L(opSDPA)}
		case opAttnResidual:
			return []string{residualIn(l), L(opOProj)}
		case opMLPNorm:
			return []string{L(opAttnResidual)}
		case opGateProj, opUpProj:
			return []string{L(opMLPNorm)}
		case opAct:
			return []string{L(opGateProj), L(opUpProj)}
		case opDownProj:
			return []string{L(opAct)}
		case opMLPResidual:
			return []string{L(opAttnResidual), L(opDownProj)}
		case "mlp.router": // MoE layers (issue #16): the router reads the post-attention norm
			return []string{L(opMLPNorm)}
		case "mlp.experts", "mlp.expert_weights": // the top-k selection and its weights read the router's logits
			return []string{L("mlp.router")}
		}
		return nil
	}
	switch op {
	case OpTokens:
		return []string{}
	case OpEmbed:
		return []string{OpTokens}
	case OpFinalNorm:
		return []string{LayerOp(cfg.Layers-1, opMLPResidual)}
	case OpLogits:
		return []string{OpFinalNorm}
	case OpLogprobs:
		return []string{OpLogits, OpTokens}
	case OpSample:
		return []string{OpLogits}
	}
	return nil
}

// AltProducers is the attention's other producer set, for captures without q_rope and k_rope (transformers
// applies RoPE as a function, not a module): the RoPE inputs (q_norm and k_norm with Qwen3's q/k norm, else
// q_proj and k_proj) and v_proj, read like Producers' (q at the query positions, k and v at every position ≤
// the query's). RunOp and Oracle apply the model's RoPE to them at their captured positions when q_rope or
// k_rope is missing. It returns nil for every other op.
func AltProducers(cfg Config, op string) []string {
	l, s, ok := SplitLayerOp(op)
	if !ok || s != opSDPA || OpIndex(cfg, op) < 0 {
		return nil
	}
	q, k := opQProj, opKProj
	if cfg.QKNorm {
		q, k = opQNorm, opKNorm
	}
	return []string{LayerOp(l, q), LayerOp(l, k), LayerOp(l, opVProj)}
}

// opShard describes how an op's output is laid out over TP ranks.
type opShard int

const (
	replicated opShard = iota // every rank holds the full tensor
	colShard                  // column-parallel: each rank holds a slice of dim 1
)

// opLayout returns the TP layout of an op's output, per docs/design.md.
func opLayout(op string) opShard {
	if op == OpLogits {
		return colShard
	}
	_, s, ok := SplitLayerOp(op)
	if !ok {
		return replicated
	}
	switch s {
	case opQProj, opKProj, opVProj, opQNorm, opKNorm, opQRope, opKRope, opSDPA, opGateProj, opUpProj, opAct:
		return colShard
	}
	return replicated
}

// opWidth is the number of features of op's output (0 for per-token scalars).
func opWidth(cfg Config, op string) int {
	if _, s, ok := SplitLayerOp(op); ok {
		switch s {
		case opQProj, opQNorm, opQRope, opSDPA:
			return cfg.QDim()
		case opKProj, opVProj, opKNorm, opKRope:
			return cfg.KVDim()
		case opGateProj, opUpProj, opAct:
			return cfg.Intermediate
		}
		return cfg.Hidden
	}
	switch op {
	case OpEmbed, OpFinalNorm:
		return cfg.Hidden
	case OpLogits:
		return cfg.Vocab
	}
	return 0
}

func checkOp(cfg Config, op string) error {
	if OpIndex(cfg, op) < 0 {
		return fmt.Errorf("engine: unknown op %q for this %s model with %d layers", op, cfg.Architecture, cfg.Layers)
	}
	return nil
}
