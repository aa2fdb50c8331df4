package capture

import (
	"strconv"
	"strings"
)

// The canonical op names of one forward pass (docs/design.md "Canonical op names"). They live here, low in the
// import graph, so that the engine (engine.OpNames) and the safetensors import number ops the same way; the
// Python library mirrors them in bitalign_capture/names.py (its tests read this file).

// Op names outside the layers.
const (
	OpTokens    = "tokens"
	OpEmbed     = "embed"
	OpFinalNorm = "final_norm"
	OpLogits    = "logits"
	OpLogprobs  = "logprobs"
	OpSample    = "sample"
)

// Per-layer op suffixes ("layers.L." + suffix), in execution order.
const (
	LayerAttnNorm     = "attn_norm"
	LayerQProj        = "attn.q_proj"
	LayerKProj        = "attn.k_proj"
	LayerVProj        = "attn.v_proj"
	LayerQNorm        = "attn.q_norm" // optional: models with per-head q/k norms (Qwen3)
	LayerKNorm        = "attn.k_norm" // optional, with LayerQNorm
	LayerQRope        = "attn.q_rope"
	LayerKRope        = "attn.k_rope"
	LayerSDPA         = "attn.sdpa"
	LayerOProj        = "attn.o_proj"
	LayerAttnResidual = "attn_residual"
	LayerMLPNorm      = "mlp_norm"
	LayerGateProj     = "mlp.gate_proj"
	LayerUpProj       = "mlp.up_proj"
	LayerAct          = "mlp.act"
	LayerDownProj     = "mlp.down_proj"
	LayerMLPResidual  = "mlp_residual"
)

// LayerOps lists a layer's op suffixes in execution order; qkNorm includes the optional q_norm and k_norm
// (skipped without leaving a gap otherwise).
func LayerOps(qkNorm bool) []string {
	ops := []string{LayerAttnNorm, LayerQProj, LayerKProj, LayerVProj}
	if qkNorm {
		ops = append(ops, LayerQNorm, LayerKNorm)
	}
	return append(ops, LayerQRope, LayerKRope, LayerSDPA, LayerOProj, LayerAttnResidual, LayerMLPNorm,
		LayerGateProj, LayerUpProj, LayerAct, LayerDownProj, LayerMLPResidual)
}

// LayerOp returns "layers.L.suffix".
func LayerOp(l int, suffix string) string { return "layers." + strconv.Itoa(l) + "." + suffix }

// The ops of a mixture-of-experts layer that replace LayerGateProj, LayerUpProj, LayerAct and LayerDownProj, in
// execution order (docs/design.md, docs/arithmetic.md §19).
const (
	LayerRouter        = "mlp.router"         // f32 [T, E]: the router logits (mlp_norm · Wgateᵀ, float32 output)
	LayerExperts       = "mlp.experts"        // i32 [T, k]: the selected experts, score descending, id ascending
	LayerExpertWeights = "mlp.expert_weights" // f32 [T, k]: the combine weights, in the experts' order
	LayerCombine       = "mlp.combine"        // [T, H]: the MoE block's output, what mlp_residual adds
)

// MoELayerOps lists a mixture-of-experts layer's op suffixes in execution order: LayerOps with the dense MLP's
// four ops replaced by the router, the experts, their weights and the combine (as many ops: every layer of a
// model has the same number of ops, dense or not).
func MoELayerOps(qkNorm bool) []string {
	ops := LayerOps(qkNorm)
	n := len(ops)
	return append(ops[:n-5:n-5], LayerRouter, LayerExperts, LayerExpertWeights, LayerCombine, LayerMLPResidual)
}

// layerOps is layer l's suffixes: MoELayerOps when moe(l) (moe nil: a dense model), else LayerOps.
func layerOps(l int, qkNorm bool, moe func(int) bool) []string {
	if moe != nil && moe(l) {
		return MoELayerOps(qkNorm)
	}
	return LayerOps(qkNorm)
}

// OpNames returns the canonical op names of one forward pass of a model with the given layers in execution
// order: a name's position in this list is its capture Index. moe reports which layers are mixture-of-experts
// layers (nil: none).
func OpNames(layers int, qkNorm bool, moe func(l int) bool) []string {
	ops := []string{OpTokens, OpEmbed}
	for l := 0; l < layers; l++ {
		for _, s := range layerOps(l, qkNorm, moe) {
			ops = append(ops, LayerOp(l, s))
		}
	}
	return append(ops, OpFinalNorm, OpLogits, OpLogprobs, OpSample)
}

// OpIndex returns op's position in OpNames(layers, qkNorm, moe), or -1, without building the list.
func OpIndex(op string, layers int, qkNorm bool, moe func(l int) bool) int {
	per := LayerOps(qkNorm) // a MoE layer has as many ops
	if l, s, ok := SplitLayerOp(op); ok {
		if l >= layers {
			return -1
		}
		for i, x := range layerOps(l, qkNorm, moe) {
			if x == s {
				return 2 + l*len(per) + i
			}
		}
		return -1
	}
	base := 2 + layers*len(per)
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

// SplitLayerOp splits "layers.L.suffix" into L and suffix (L a decimal without leading zeros).
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
