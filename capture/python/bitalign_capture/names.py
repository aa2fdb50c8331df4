"""Canonical op names and the maps from a model's module paths to them.

canonical_ops mirrors Go's capture.OpNames (capture/opnames.go, which engine.OpNames uses; docs/design.md): an
op's execution index is its position in that list. A name map is a list of Rules; each rule matches module paths
(a regular expression, searched) and says which canonical ops the matched module's input or output carries. The
built-in map covers Hugging Face Llama, Qwen2, Qwen3, Qwen3-MoE and Gemma2/3's sandwich-norm blocks, and vLLM's
module names for the same models (fused qkv_proj and gate_up_proj, split back into the canonical projections;
rotary_emb returning (q, k); norms that take and return the residual; FusedMoE's router).

Mixture-of-experts layers (issue #16) record, in place of the dense mlp.gate_proj/up_proj/act/down_proj, MOE_OPS:
the router's logits (float32), the selected expert ids (int32, [T, k], in the order the model ranks them), the
combine weights (float32, same order) and the MoE block's output.
"""

import re
from dataclasses import dataclass, field

ARCHITECTURES = ("llama", "qwen2", "qwen3")
"""The model types the built-in map is tested against op for op (others get what their modules match)."""


@dataclass(frozen=True)
class ModelConfig:
    """The sizes that name and shard ops. Build one with from_hf(config) or by hand."""

    architecture: str
    layers: int
    hidden: int = 0
    intermediate: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    vocab: int = 0
    experts: int = 0  # MoE: experts per layer (num_experts)
    experts_per_tok: int = 0  # MoE: k (num_experts_per_tok)
    moe_layers: tuple = ()  # MoE: the layers whose MLP is a mixture of experts

    @staticmethod
    def from_hf(config):
        """From a transformers PretrainedConfig (or its dict)."""
        c = config if isinstance(config, dict) else config.to_dict()
        arch = str(c.get("model_type", "")).lower()
        heads = int(c.get("num_attention_heads", 0) or 0)
        hidden = int(c.get("hidden_size", 0) or 0)
        hd = c.get("head_dim") or (hidden // heads if heads else 0)
        layers = int(c.get("num_hidden_layers", 0) or 0)
        experts = _num_experts(c)
        return ModelConfig(
            architecture=arch,
            layers=layers,
            hidden=hidden,
            intermediate=int(c.get("intermediate_size", 0) or 0),
            heads=heads,
            kv_heads=int(c.get("num_key_value_heads", 0) or heads),
            head_dim=int(hd),
            vocab=int(c.get("vocab_size", 0) or 0),
            experts=experts,
            experts_per_tok=int(c.get("num_experts_per_tok", 0) or 0),
            moe_layers=moe_layers(c, layers),
        )


def _num_experts(c):
    """num_experts (transformers 4.x, vLLM, config.json) or num_local_experts (what transformers 5.x's
    Qwen3MoeConfig.to_dict writes)."""
    return int(c.get("num_experts") or c.get("num_local_experts") or 0)


def moe_layers(c, layers):
    """The MoE layers of a Qwen3-MoE / Qwen2-MoE config dict: every decoder_sparse_step-th layer not in
    mlp_only_layers, when num_experts > 0 (transformers' and vLLM's Qwen3MoeDecoderLayer rule)."""
    experts = _num_experts(c)
    step = int(c.get("decoder_sparse_step", 1) or 1)
    dense = set(int(x) for x in (c.get("mlp_only_layers") or ()))
    if experts <= 0:
        return ()
    return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)


# capture.LayerOps in Go (capture/opnames.go): a layer's op suffixes in execution order; the test suite checks
# that the two lists agree.
LAYER_OPS = (
    "attn_norm",
    "attn.q_proj",
    "attn.k_proj",
    "attn.v_proj",
    "attn.q_norm",
    "attn.k_norm",
    "attn.q_rope",
    "attn.k_rope",
    "attn.sdpa",
    "attn.o_proj",
    "attn_residual",
    "mlp_norm",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.act",
    "mlp.down_proj",
    "mlp_residual",
)
QK_NORM_OPS = ("attn.q_norm", "attn.k_norm")  # optional: present only in models with per-head q/k norms
DENSE_MLP_OPS = ("mlp.gate_proj", "mlp.up_proj", "mlp.act", "mlp.down_proj")
MOE_OPS = ("mlp.router", "mlp.experts", "mlp.expert_weights", "mlp.combine")
"""A MoE layer's ops, in execution order, in place of DENSE_MLP_OPS (the contract with the Go engine, issue #16)."""
HEAD_OPS = ("attn.q_proj", "attn.k_proj", "attn.v_proj") + QK_NORM_OPS + ("attn.q_rope", "attn.k_rope", "attn.sdpa")
"""Ops whose features are heads x head_dim (a model may hand them over as [B, heads, S, head_dim])."""


def canonical_ops(layers, qk_norm=False, moe_layers=()):
    """The canonical op names in execution order (capture.OpNames / engine.OpNames): q_norm/k_norm only with
    qk_norm (skipped without leaving a gap otherwise); the layers in moe_layers have MOE_OPS where the others
    have DENSE_MLP_OPS."""
    ops = ["tokens", "embed"]
    moe = set(moe_layers)
    for layer in range(layers):
        for op in LAYER_OPS:
            if op in QK_NORM_OPS and not qk_norm:
                continue
            if layer in moe and op in DENSE_MLP_OPS:
                if op == DENSE_MLP_OPS[0]:
                    ops += [f"layers.{layer}.{m}" for m in MOE_OPS]
                continue
            ops.append(f"layers.{layer}.{op}")
    ops += ["final_norm", "logits", "logprobs", "sample"]
    return ops


def op_index(resolved, layers=0):
    """{op name: execution index} for a model whose modules resolve to resolved ([(path, [(Take, name)])] in
    the model's module registration order, as resolve returns it).

    Canonical names get their position in canonical_ops(layers, qk_norm, moe), qk_norm being whether the model
    has a q_norm or k_norm module, moe the layers with a MoE op, and layers at least one more than the highest
    layer the names mention; other names (a user map's) are numbered after that list in registration order.
    """
    found = [n for _, takes in resolved for _, n in takes]
    split = [split_layer_op(n) for n in found]
    layers = max([layers] + [layer + 1 for layer, suffix in split if suffix in LAYER_OPS + MOE_OPS])
    qk = any(suffix in QK_NORM_OPS for _, suffix in split)
    moe = sorted({layer for layer, suffix in split if suffix in MOE_OPS})
    index = {op: i for i, op in enumerate(canonical_ops(layers, qk, moe))}
    for n in found:
        if n not in index:
            index[n] = len(index)
    return index


_LAYER_RE = re.compile(r"^layers\.(0|[1-9]\d*)\.(.+)$")


def split_layer_op(op):
    """(layer, suffix) of "layers.L.suffix", else (None, None) (capture.SplitLayerOp)."""
    m = _LAYER_RE.match(op)
    return (int(m.group(1)), m.group(2)) if m else (None, None)


def feature_size(cfg, op):
    """Features per token of op's full (unsharded) output, 0 for a per-token scalar, None if unknown."""
    if op in ("tokens", "logprobs", "sample"):
        return 0
    if op in ("embed", "final_norm"):
        return cfg.hidden or None
    if op == "logits":
        return cfg.vocab or None
    m = _LAYER_RE.match(op)
    if not m:
        return None
    sub = m.group(2)
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    sizes = {
        "attn.q_proj": q,
        "attn.q_norm": q,
        "attn.q_rope": q,
        "attn.sdpa": q,
        "attn.k_proj": kv,
        "attn.k_norm": kv,
        "attn.k_rope": kv,
        "attn.v_proj": kv,
        "mlp.gate_proj": cfg.intermediate,
        "mlp.up_proj": cfg.intermediate,
        "mlp.act": cfg.intermediate,
        "mlp.router": cfg.experts,
        "mlp.experts": cfg.experts_per_tok,
        "mlp.expert_weights": cfg.experts_per_tok,
    }
    return sizes.get(sub, cfg.hidden) or None


def shard_of(cfg, op, features, tp, rank):
    """(dim, start, full_features) of a per-token tensor [ntok, features] that rank holds.

    dim is -1 when the tensor is the op's whole output (replicated); 1 when it is a column slice of the
    op's full output (column-parallel projections, per-head norms, vocab-parallel logits). KV heads that are
    fewer than the ranks are replicated (vLLM): rank r holds head r * kv_heads // tp.
    """
    full = feature_size(cfg, op)
    if full is None or full == 0 or features == full or tp <= 1:
        return -1, 0, features
    if features * tp == full:
        return 1, rank * features, full
    m = _LAYER_RE.match(op)
    if m and m.group(2) in ("attn.k_proj", "attn.k_norm", "attn.k_rope", "attn.v_proj") and cfg.head_dim:
        if features == cfg.head_dim and cfg.kv_heads < tp:
            return 1, (rank * cfg.kv_heads // tp) * cfg.head_dim, full
    raise ValueError(
        f"bitalign_capture: {op}: {features} features per token fit neither the full {full} nor a 1/{tp} shard"
    )


@dataclass(frozen=True)
class Take:
    """One canonical op carried by a matched module.

    op: a template formatted with the match's groups ({0} = first group) and cfg (e.g. "layers.{0}.attn.q_proj");
    it may also be a function (match, cfg) -> name or None (None: not recorded for this match).
    source: "out" (the output, or its first element if a tuple), "out.N" (element N of a tuple output),
    "in" (the first positional input, read before the module runs), "residual" (the residual stream a norm
    sees: element 1 of a (normed, residual) tuple output, else the norm's single input), or "select.N" (element
    N of what the module's expert selection returns: vLLM's FusedMoE router's select_experts(hidden_states,
    router_logits) -> (topk_weights, topk_ids), a method, not a module, which the recorder wraps).
    split: None; ("qkv", part) for a fused q|k|v projection; ("halves", part) for a fused gate|up projection.
    dtype: None (as the model computes it), "f32" (floats widened to float32, exact) or "i32" (ids narrowed to
    int32).
    """

    op: object
    source: str = "out"
    split: tuple = None
    dtype: str = None

    def name(self, match, cfg):
        if callable(self.op):
            return self.op(match, cfg)
        return self.op.format(*match.groups(), cfg=cfg)


@dataclass(frozen=True)
class Rule:
    """Modules whose path the regular expression pattern matches carry takes.

    unless: a sibling module name (e.g. "pre_feedforward_layernorm"); where the matched module's parent has a
    child of that name, the rule does not apply (a block of another structure: the module's output means
    something else there).
    child: a child module name (e.g. "experts"); the rule applies only where the matched module has it.
    """

    pattern: str
    takes: tuple = field(default_factory=tuple)
    unless: str = None
    child: str = None

    def __post_init__(self):
        object.__setattr__(self, "_re", re.compile(self.pattern))

    def match(self, path, paths=()):
        m = self._re.search(path)
        if m and self.unless:
            parent = path.rpartition(".")[0]
            if (f"{parent}.{self.unless}" if parent else self.unless) in paths:
                return None
        if m and self.child and f"{path}.{self.child}" not in paths:
            return None
        return m


def _prev_mlp_residual(m, cfg):
    layer = int(m.group(1))
    return f"layers.{layer - 1}.mlp_residual" if layer > 0 else None


def _last_mlp_residual(m, cfg):
    return f"layers.{cfg.layers - 1}.mlp_residual" if cfg.layers > 0 else None


_L = r"(?:^|\.)layers\.(\d+)\."


def _fused(module, kind, ops):
    """The rule of a layer's fused projection module: its output is the layer's ops side by side, cut apart as
    the split kind ("qkv" or "halves", see Take.split) says."""
    return Rule(_L + module, tuple(Take(f"layers.{{0}}.{op}", split=(kind, i)) for i, op in enumerate(ops)))


HF_RULES = (
    Rule(r"(?:^|\.)embed_tokens$", (Take("embed"),)),
    Rule(_L + r"input_layernorm$", (Take("layers.{0}.attn_norm"), Take(_prev_mlp_residual, "residual"))),
    Rule(_L + r"self_attn\.q_proj$", (Take("layers.{0}.attn.q_proj"),)),
    Rule(_L + r"self_attn\.k_proj$", (Take("layers.{0}.attn.k_proj"),)),
    Rule(_L + r"self_attn\.v_proj$", (Take("layers.{0}.attn.v_proj"),)),
    _fused(r"self_attn\.qkv_proj$", "qkv", ("attn.q_proj", "attn.k_proj", "attn.v_proj")),
    Rule(_L + r"self_attn\.q_norm$", (Take("layers.{0}.attn.q_norm"),)),
    Rule(_L + r"self_attn\.k_norm$", (Take("layers.{0}.attn.k_norm"),)),
    # vLLM's per-layer rotary_emb(positions, q, k) returns (q, k); Hugging Face's model-level one returns
    # (cos, sin) and is not per layer, so this never matches it.
    Rule(
        _L + r"self_attn\.rotary_emb$",
        (Take("layers.{0}.attn.q_rope", "out.0"), Take("layers.{0}.attn.k_rope", "out.1")),
    ),
    Rule(_L + r"self_attn\.o_proj$", (Take("layers.{0}.attn.sdpa", "in"), Take("layers.{0}.attn.o_proj"))),
    # Gemma2/3's sandwich: post_attention_layernorm normalises the attention output before the residual add
    # and pre_feedforward_layernorm is the MLP's input norm; post_attention_layernorm and
    # post_feedforward_layernorm have no canonical op (unmapped_modules names them).
    Rule(
        _L + r"pre_feedforward_layernorm$",
        (Take("layers.{0}.mlp_norm"), Take("layers.{0}.attn_residual", "residual")),
    ),
    Rule(
        _L + r"post_attention_layernorm$",
        (Take("layers.{0}.mlp_norm"), Take("layers.{0}.attn_residual", "residual")),
        unless="pre_feedforward_layernorm",
    ),
    # Mixture of experts. The block (transformers' and vLLM's Qwen3MoeSparseMoeBlock, a module with an experts
    # child) gives the combine. transformers' router (mlp.gate, Qwen3MoeTopKRouter) returns (router_logits,
    # top-k weights, top-k ids), ranked by torch.topk of the float32 softmax; vLLM's gate (ReplicatedLinear)
    # returns (router_logits, bias) and its FusedMoE (mlp.experts) selects inside: its router's
    # select_experts(hidden_states, router_logits) -> (topk_weights, topk_ids) is wrapped ("select.N").
    Rule(_L + r"mlp$", (Take("layers.{0}.mlp.combine"),), child="experts"),
    Rule(
        _L + r"mlp\.gate$",
        (
            Take("layers.{0}.mlp.router", dtype="f32"),
            Take("layers.{0}.mlp.expert_weights", "out.1", dtype="f32"),
            Take("layers.{0}.mlp.experts", "out.2", dtype="i32"),
        ),
    ),
    Rule(
        _L + r"mlp\.experts$",
        (
            Take("layers.{0}.mlp.expert_weights", "select.0", dtype="f32"),
            Take("layers.{0}.mlp.experts", "select.1", dtype="i32"),
        ),
    ),
    Rule(_L + r"mlp\.gate_proj$", (Take("layers.{0}.mlp.gate_proj"),)),
    Rule(_L + r"mlp\.up_proj$", (Take("layers.{0}.mlp.up_proj"),)),
    _fused(r"mlp\.gate_up_proj$", "halves", ("mlp.gate_proj", "mlp.up_proj")),
    # down_proj's input is silu(gate) * up: the canonical act, which HF's act_fn (silu alone) is not.
    Rule(_L + r"mlp\.down_proj$", (Take("layers.{0}.mlp.act", "in"), Take("layers.{0}.mlp.down_proj"))),
    Rule(r"(?:^|\.)norm$", (Take("final_norm"), Take(_last_mlp_residual, "residual"))),
    Rule(r"(?:^|\.)lm_head$", (Take("logits"),)),
    # vLLM computes logits through logits_processor(lm_head, hidden[last positions]): one row per sequence
    Rule(r"^logits_processor$", (Take("logits"),)),
)
"""Hugging Face Llama/Qwen2/Qwen3/Qwen3-MoE/Gemma2/Gemma3 (and vLLM's module names for them)."""

# Ops a hooked Hugging Face model does not expose: RoPE and attention are functions, not modules, in
# transformers. (sdpa is still captured, as o_proj's input.)
HF_NOT_CAPTURED = ("attn.q_rope", "attn.k_rope")


def user_rules(name_map):
    """Rules from a user map {pattern: template | Take | [templates or Takes]}."""
    rules = []
    for pattern, v in name_map.items():
        vs = v if isinstance(v, (list, tuple)) else [v]
        takes = tuple(t if isinstance(t, Take) else Take(str(t)) for t in vs)
        rules.append(Rule(pattern, takes))
    return tuple(rules)


def resolve(paths, rules, cfg):
    """[(path, [(Take, op name)])] for the module paths that carry canonical ops, in the paths' order.

    A path matches the first rule whose pattern it contains (and whose unless sibling is not among paths);
    ops named None are dropped.
    """
    out = []
    known = set(paths)
    for path in paths:
        for rule in rules:
            m = rule.match(path, known)
            if not m:
                continue
            takes = [(t, t.name(m, cfg)) for t in rule.takes]
            takes = [(t, n) for t, n in takes if n is not None]
            if takes:
                out.append((path, takes))
            break
    return out


def unmapped_modules(param_paths, resolved):
    """The paths among param_paths (modules holding parameters of their own) that no resolved path is or
    contains: modules whose outputs no canonical op records (an MoE block's experts, a sandwich norm)."""
    mapped = [p for p, _ in resolved]
    return [p for p in param_paths if not any(p == m or p.startswith(m + ".") for m in mapped)]


def describe_paths(paths, limit=6):
    """paths as a short text, layers folded: "model.layers.*.mlp.gate (2 layers), lm_head"."""
    groups = {}
    for p in paths:
        key = re.sub(r"(?:^|(?<=\.))layers\.\d+\.", "layers.*.", p)
        groups.setdefault(key, []).append(p)
    parts = [k if len(v) == 1 else f"{k} ({len(v)} layers)" for k, v in groups.items()]
    if len(parts) > limit:
        parts = parts[:limit] + [f"and {len(parts) - limit} more"]
    return ", ".join(parts)


def split_fused(x, split, cfg):
    """The part of a fused projection output x [..., F] that split = (kind, part) names.

    qkv: q | k | v with heads:kv_heads:kv_heads columns of head_dim each (F may be a TP shard of the fused
    output: the local head counts follow from F). halves: gate | up, F/2 each.
    """
    kind, part = split
    F = x.shape[-1]
    if kind == "halves":
        if F % 2:
            raise ValueError(f"bitalign_capture: fused gate_up output has odd width {F}")
        h = F // 2
        return x[..., part * h : (part + 1) * h]
    if kind == "qkv":
        hd = cfg.head_dim
        if not (hd and cfg.heads and cfg.kv_heads) or F % hd:
            raise ValueError(f"bitalign_capture: fused qkv width {F} does not split into heads of {hd}")
        total = F // hd
        # rank-local heads: q:k:v = heads:kv:kv, with kv heads replicated (1 per rank) when fewer than ranks
        denom = cfg.heads + 2 * cfg.kv_heads
        if (total * cfg.heads) % denom == 0 and (total * cfg.kv_heads) % denom == 0:
            nq, nkv = total * cfg.heads // denom, total * cfg.kv_heads // denom
        elif total > 2:
            nq, nkv = total - 2, 1
        else:
            raise ValueError(f"bitalign_capture: fused qkv width {F} does not split into q|k|v heads")
        cuts = [0, nq * hd, (nq + nkv) * hd, (nq + 2 * nkv) * hd]
        return x[..., cuts[part] : cuts[part + 1]]
    raise ValueError(f"bitalign_capture: unknown split {kind!r}")
