package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// Op names outside the layers, in docs/design.md's spelling.
const (
	OpTokens    = "tokens"
	OpEmbed     = "embed"
	OpFinalNorm = "final_norm"
	OpLogits    = "logits"
	OpLogprobs  = "logprobs"
	OpSample    = "sample"
)

// Per-layer op suffixes, in execution order ("layers.L." + suffix).
const (
	opAttnNorm     = "attn_norm"
	opQProj        = "attn.q_proj"
	opKProj        = "attn.k_proj"
	opVProj        = "attn.v_proj"
	opQNorm        = "attn.q_norm"
	opKNorm        = "attn.k_norm"
	opQRope        = "attn.q_rope"
	opKRope        = "attn.k_rope"
	opSDPA         = "attn.sdpa"
	opOProj        = "attn.o_proj"
	opAttnResidual = "attn_residual"
	opMLPNorm      = "mlp_norm"
	opGateProj     = "mlp.gate_proj"
	opUpProj       = "mlp.up_proj"
	opAct          = "mlp.act"
	opDownProj     = "mlp.down_proj"
	opMLPResidual  = "mlp_residual"
)

// layerOps lists a layer's op suffixes in execution order; qkNorm includes Qwen3's q_norm and k_norm.
func layerOps(qkNorm bool) []string {
	ops := []string{opAttnNorm, opQProj, opKProj, opVProj}
	if qkNorm {
		ops = append(ops, opQNorm, opKNorm)
	}
	return append(ops, opQRope, opKRope, opSDPA, opOProj, opAttnResidual, opMLPNorm, opGateProj, opUpProj, opAct,
		opDownProj, opMLPResidual)
}

// LayerOp returns "layers.L.suffix".
func LayerOp(l int, suffix string) string { return "layers." + strconv.Itoa(l) + "." + suffix }

// OpNames returns the canonical op names of one forward pass in execution order: a name's index in this list is
// its capture Index.
func OpNames(cfg Config) []string {
	ops := []string{OpTokens, OpEmbed}
	per := layerOps(cfg.QKNorm)
	for l := 0; l < cfg.Layers; l++ {
		for _, s := range per {
			ops = append(ops, LayerOp(l, s))
		}
	}
	return append(ops, OpFinalNorm, OpLogits, OpLogprobs, OpSample)
}

// OpIndex returns op's execution index in OpNames(cfg), or -1.
func OpIndex(cfg Config, op string) int {
	l, s, ok := SplitLayerOp(op)
	per := layerOps(cfg.QKNorm)
	if ok {
		if l < 0 || l >= cfg.Layers {
			return -1
		}
		for i, x := range per {
			if x == s {
				return 2 + l*len(per) + i
			}
		}
		return -1
	}
	base := 2 + cfg.Layers*len(per)
	switch op {
	case OpTokens:
		return 0
	case OpEmbed:
		return 1
	case OpFinalNorm:
		return base
	case OpLogits:
		return base + 1
	case OpLogprobs:
		return base + 2
	case OpSample:
		return base + 3
	}
	return -1
}

// SplitLayerOp splits "layers.L.suffix" into L and suffix.
func SplitLayerOp(op string) (layer int, suffix string, ok bool) {
	rest, found := strings.CutPrefix(op, "layers.")
	if !found {
		return 0, "", false
	}
	num, suffix, found := strings.Cut(rest, ".")
	if !found {
		return 0, "", false
	}
	l, err := strconv.Atoi(num)
	if err != nil || l < 0 || strconv.Itoa(l) != num {
		return 0, "", false
	}
	return l, suffix, true
}

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
