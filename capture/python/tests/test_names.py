import os
import re

import numpy as np
import pytest

import bitalign_capture as bc
from bitalign_capture import names

QWEN3 = bc.ModelConfig("qwen3", layers=2, hidden=32, intermediate=48, heads=4, kv_heads=2, head_dim=8, vocab=64)
LLAMA = bc.ModelConfig("llama", layers=2, hidden=32, intermediate=48, heads=4, kv_heads=2, head_dim=8, vocab=64)


def hf_paths(layers, qwen3):
    ps = ["", "model", "model.embed_tokens", "model.layers"]
    for i in range(layers):
        L = f"model.layers.{i}"
        ps += [L, f"{L}.self_attn"]
        ps += [f"{L}.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
        if qwen3:
            ps += [f"{L}.self_attn.q_norm", f"{L}.self_attn.k_norm"]
        ps += [f"{L}.mlp", f"{L}.mlp.gate_proj", f"{L}.mlp.up_proj", f"{L}.mlp.down_proj", f"{L}.mlp.act_fn"]
        ps += [f"{L}.input_layernorm", f"{L}.post_attention_layernorm"]
    return ps + ["model.norm", "model.rotary_emb", "lm_head"]


def ops_of(resolved):
    return sorted(n for _, takes in resolved for _, n in takes)


def test_canonical_ops_mirror_engine_opnames():
    ll = bc.canonical_ops(2)
    q3 = bc.canonical_ops(2, qk_norm=True)
    assert ll[:3] == ["tokens", "embed", "layers.0.attn_norm"]
    assert ll[-4:] == ["final_norm", "logits", "logprobs", "sample"]
    assert len(ll) == 2 + 2 * 15 + 4 and len(q3) == 2 + 2 * 17 + 4
    assert q3.index("layers.0.attn.q_norm") == q3.index("layers.0.attn.v_proj") + 1
    assert ll.index("layers.0.attn.q_rope") == ll.index("layers.0.attn.v_proj") + 1
    assert ll.index("layers.1.attn_norm") == ll.index("layers.0.mlp_residual") + 1


def _go_consts(text, block):
    """{Go constant name: string value} of the const block after the comment line starting with block."""
    body = text[text.index(block) :]
    body = body[body.index("const (") : body.index("\n)\n")]
    return dict(re.findall(r'^\t(\w+)\s*=\s*"([^"]*)"', body, re.M))


def test_layer_ops_are_go_capture_layer_ops():
    """names.LAYER_OPS is capture.LayerOps(true) of capture/opnames.go, the list engine.OpNames uses."""
    src = os.path.join(os.path.dirname(__file__), "..", "..", "opnames.go")
    if not os.path.exists(src):
        pytest.skip("not in a bitalign checkout")
    text = open(src).read()
    suffix = _go_consts(text, "// Per-layer op suffixes")
    body = text[text.index("func LayerOps(") : text.index("func LayerOp(")]
    order = [suffix[n] for n in re.findall(r"\bLayer\w+\b", body) if n in suffix]
    assert tuple(order) == names.LAYER_OPS
    outside = _go_consts(text, "// Op names outside the layers")
    body = text[text.index("func OpNames(") : text.index("func OpIndex(")]
    go = [outside[n] for n in re.findall(r"\bOp[A-Z]\w*\b", body) if n in outside]
    py = [op for op in bc.canonical_ops(0)]
    assert go == py


def test_op_index_follows_the_modules_the_model_has():
    """q_norm/k_norm take their canonical place whenever the model has them (Qwen3-MoE, Gemma3 too), not only
    for model type qwen3; a user map's other names come after the canonical list in registration order."""
    q3 = bc.canonical_ops(2, qk_norm=True)
    for qk in (True, False):
        res = bc.resolve(hf_paths(2, qk), bc.HF_RULES, LLAMA)  # the config's model type plays no part
        idx = names.op_index(res, 2)
        want = q3 if qk else bc.canonical_ops(2)
        assert idx == {op: i for i, op in enumerate(want)}
    assert names.op_index(bc.resolve(hf_paths(2, True), bc.HF_RULES, LLAMA))["logits"] == q3.index("logits")
    res = [("a", [(bc.Take("x"), "layers.0.custom")]), ("b", [(bc.Take("x"), "layers.0.attn_norm")])]
    idx = names.op_index(res, 1)
    assert idx["layers.0.attn_norm"] == 2 and idx["layers.0.custom"] == len(bc.canonical_ops(1))


def gemma_paths(layers):
    ps = ["model", "model.embed_tokens", "model.layers"]
    for i in range(layers):
        L = f"model.layers.{i}"
        ps += [L, f"{L}.self_attn"]
        ps += [f"{L}.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")]
        ps += [f"{L}.mlp", f"{L}.mlp.gate_proj", f"{L}.mlp.up_proj", f"{L}.mlp.down_proj", f"{L}.mlp.act_fn"]
        ps += [f"{L}.{n}_layernorm" for n in ("input", "post_attention", "pre_feedforward", "post_feedforward")]
    return ps + ["model.norm", "model.rotary_emb", "lm_head"]


def test_gemma_sandwich_norms_are_not_mislabelled():
    ps = gemma_paths(2)
    res = bc.resolve(ps, bc.HF_RULES, QWEN3)
    by_path = dict(res)
    assert "model.layers.0.post_attention_layernorm" not in by_path
    assert [(t.source, n) for t, n in by_path["model.layers.1.pre_feedforward_layernorm"]] == [
        ("out", "layers.1.mlp_norm"),
        ("residual", "layers.1.attn_residual"),
    ]
    assert len(ops_of(res)) == len(set(ops_of(res)))
    own = [p for p in ps if p.count(".") >= 2 and not p.endswith(("act_fn", "self_attn", "mlp", "rotary_emb"))]
    own = [p for p in own if not re.fullmatch(r"model\.layers\.\d+", p)] + ["lm_head"]
    missed = names.unmapped_modules(own, res)
    assert missed == [f"model.layers.{i}.{n}_layernorm" for i in range(2) for n in ("post_attention", "post_feedforward")]
    assert names.describe_paths(missed) == (
        "model.layers.*.post_attention_layernorm (2 layers), model.layers.*.post_feedforward_layernorm (2 layers)"
    )
    # the Llama block keeps post_attention_layernorm as mlp_norm
    assert [n for _, n in dict(bc.resolve(hf_paths(1, False), bc.HF_RULES, LLAMA))["model.layers.0.post_attention_layernorm"]] == [
        "layers.0.mlp_norm",
        "layers.0.attn_residual",
    ]


def test_unmapped_modules_skip_children_of_mapped_ones():
    res = [("model.layers.0.input_layernorm", [(bc.Take("x"), "layers.0.attn_norm")])]
    own = ["model.layers.0.input_layernorm.hf", "model.layers.0.mlp.experts", "model.layers.0.mlp.gate"]
    assert names.unmapped_modules(own, res) == ["model.layers.0.mlp.experts", "model.layers.0.mlp.gate"]


def test_hf_qwen3_map_covers_every_op_hooks_can_see():
    res = bc.resolve(hf_paths(2, True), bc.HF_RULES, QWEN3)
    want = set(bc.canonical_ops(2, qk_norm=True)) - {"tokens", "logprobs", "sample"}
    want -= {f"layers.{i}.{o}" for i in range(2) for o in bc.HF_NOT_CAPTURED}
    assert set(ops_of(res)) == want
    assert len(ops_of(res)) == len(want)  # each op from exactly one place
    by_path = dict(res)
    assert [n for _, n in by_path["model.layers.1.input_layernorm"]] == ["layers.1.attn_norm", "layers.0.mlp_residual"]
    assert [n for _, n in by_path["model.layers.0.input_layernorm"]] == ["layers.0.attn_norm"]
    assert [n for _, n in by_path["model.norm"]] == ["final_norm", "layers.1.mlp_residual"]
    assert [(t.source, n) for t, n in by_path["model.layers.0.self_attn.o_proj"]] == [
        ("in", "layers.0.attn.sdpa"),
        ("out", "layers.0.attn.o_proj"),
    ]
    assert [(t.source, n) for t, n in by_path["model.layers.0.mlp.down_proj"]][0] == ("in", "layers.0.mlp.act")
    assert "model.layers.0.mlp.act_fn" not in by_path and "model.rotary_emb" not in by_path


def test_llama_map_has_no_qk_norm():
    res = bc.resolve(hf_paths(2, False), bc.HF_RULES, LLAMA)
    assert not [n for n in ops_of(res) if "q_norm" in n or "k_norm" in n]
    assert set(ops_of(res)) <= set(bc.canonical_ops(2))


def test_vllm_fused_names():
    paths = [
        "model.embed_tokens",
        "model.layers.0.self_attn.qkv_proj",
        "model.layers.0.self_attn.rotary_emb",
        "model.layers.0.self_attn.attn",
        "model.layers.0.mlp.gate_up_proj",
        "model.layers.0.mlp.act_fn",
        "model.layers.0.mlp.down_proj",
        "model.layers.0.post_attention_layernorm",
    ]
    res = dict(bc.resolve(paths, bc.HF_RULES, QWEN3))
    assert [(t.split, n) for t, n in res["model.layers.0.self_attn.qkv_proj"]] == [
        (("qkv", 0), "layers.0.attn.q_proj"),
        (("qkv", 1), "layers.0.attn.k_proj"),
        (("qkv", 2), "layers.0.attn.v_proj"),
    ]
    assert [(t.source, n) for t, n in res["model.layers.0.self_attn.rotary_emb"]] == [
        ("out.0", "layers.0.attn.q_rope"),
        ("out.1", "layers.0.attn.k_rope"),
    ]
    assert [n for _, n in res["model.layers.0.mlp.gate_up_proj"]] == ["layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"]


def test_split_fused_qkv_full_and_tp_shards(rng):
    hd = QWEN3.head_dim
    q, k, v = (rng.standard_normal((3, n * hd)) for n in (4, 2, 2))
    fused = np.concatenate([q, k, v], axis=1)
    for part, want in enumerate((q, k, v)):
        assert np.array_equal(bc.split_fused(fused, ("qkv", part), QWEN3), want)
    # TP 2: each rank holds 2 q heads, 1 k head, 1 v head
    local = np.concatenate([q[:, : 2 * hd], k[:, :hd], v[:, :hd]], axis=1)
    assert np.array_equal(bc.split_fused(local, ("qkv", 1), QWEN3), k[:, :hd])
    # TP 4 with 2 kv heads: 1 q head and a replicated kv head per rank
    local = np.concatenate([q[:, :hd], k[:, :hd], v[:, :hd]], axis=1)
    assert np.array_equal(bc.split_fused(local, ("qkv", 0), QWEN3), q[:, :hd])
    assert np.array_equal(bc.split_fused(local, ("qkv", 2), QWEN3), v[:, :hd])
    with pytest.raises(ValueError, match="does not split"):
        bc.split_fused(fused[:, :-1], ("qkv", 0), QWEN3)


def test_split_fused_gate_up(rng):
    g, u = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 3, 6))
    fused = np.concatenate([g, u], axis=-1)
    assert np.array_equal(bc.split_fused(fused, ("halves", 0), QWEN3), g)
    assert np.array_equal(bc.split_fused(fused, ("halves", 1), QWEN3), u)
    with pytest.raises(ValueError, match="odd"):
        bc.split_fused(fused[..., :-1], ("halves", 0), QWEN3)


@pytest.mark.parametrize(
    "op, features, tp, rank, want",
    [
        ("layers.0.attn.q_proj", 32, 1, 0, (-1, 0, 32)),
        ("layers.0.attn.q_proj", 16, 2, 1, (1, 16, 32)),
        ("layers.1.mlp.act", 12, 4, 3, (1, 36, 48)),
        ("layers.0.attn.o_proj", 32, 2, 1, (-1, 0, 32)),  # row-parallel: replicated after the all-reduce
        ("logits", 16, 4, 2, (1, 32, 64)),
        ("layers.0.attn.k_proj", 8, 4, 3, (1, 8, 16)),  # 2 kv heads over 4 ranks: rank 3 holds head 1
        ("layers.0.attn.k_proj", 8, 4, 1, (1, 0, 16)),
    ],
)
def test_shard_of(op, features, tp, rank, want):
    assert bc.shard_of(QWEN3, op, features, tp, rank) == want


def test_shard_of_rejects_sizes_that_fit_nothing():
    with pytest.raises(ValueError, match="fit neither"):
        bc.shard_of(QWEN3, "layers.0.mlp.up_proj", 20, 2, 0)


def test_user_map():
    rules = bc.user_rules(
        {
            r"transformer\.h\.(\d+)\.ln_1$": "layers.{0}.attn_norm",
            r"transformer\.h\.(\d+)\.attn\.c_proj$": [bc.Take("layers.{0}.attn.sdpa", "in"), "layers.{0}.attn.o_proj"],
            r"transformer\.wte$": "embed",
        }
    )
    res = bc.resolve(
        ["transformer.wte", "transformer.h.3.ln_1", "transformer.h.3.attn.c_proj", "transformer.h.3.mlp"],
        rules,
        bc.ModelConfig("gpt2", layers=4),
    )
    assert [(p, [(t.source, n) for t, n in ts]) for p, ts in res] == [
        ("transformer.wte", [("out", "embed")]),
        ("transformer.h.3.ln_1", [("out", "layers.3.attn_norm")]),
        ("transformer.h.3.attn.c_proj", [("in", "layers.3.attn.sdpa"), ("out", "layers.3.attn.o_proj")]),
    ]


def test_model_config_from_hf_dict():
    c = bc.ModelConfig.from_hf(
        {
            "model_type": "qwen2",
            "num_hidden_layers": 3,
            "hidden_size": 64,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 100,
        }
    )
    assert (c.architecture, c.layers, c.head_dim, c.kv_heads) == ("qwen2", 3, 8, 2)
    assert names.feature_size(c, "layers.2.attn.k_proj") == 16 and names.feature_size(c, "logits") == 100
    assert names.feature_size(c, "tokens") == 0 and names.feature_size(c, "weird") is None


# ----- mixture of experts (issue #16)

MOE = bc.ModelConfig("qwen3_moe", layers=3, hidden=32, intermediate=48, heads=4, kv_heads=2, head_dim=8, vocab=64,
                     experts=8, experts_per_tok=2, moe_layers=(1, 2))


def hf_moe_paths(layers, dense=()):
    """transformers' Qwen3MoeForCausalLM module tree (5.x): mlp = Qwen3MoeSparseMoeBlock(gate = TopKRouter,
    experts = Qwen3MoeExperts, its weights 3-D parameters) except in the dense layers (Qwen3MoeMLP)."""
    ps = ["", "model", "model.embed_tokens", "model.layers"]
    for i in range(layers):
        L = f"model.layers.{i}"
        ps += [L, f"{L}.self_attn"] + [f"{L}.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")]
        if i in dense:
            ps += [f"{L}.mlp", f"{L}.mlp.gate_proj", f"{L}.mlp.up_proj", f"{L}.mlp.down_proj", f"{L}.mlp.act_fn"]
        else:
            ps += [f"{L}.mlp", f"{L}.mlp.experts", f"{L}.mlp.experts.act_fn", f"{L}.mlp.gate"]
        ps += [f"{L}.input_layernorm", f"{L}.post_attention_layernorm"]
    return ps + ["model.norm", "model.rotary_emb", "lm_head"]


def vllm_moe_paths(layers, dense=()):
    """vLLM's Qwen3MoeForCausalLM module tree (vllm/model_executor/models/qwen3_moe.py): fused qkv_proj,
    per-layer rotary_emb and attn; the MoE block's gate (ReplicatedLinear) and experts (FusedMoE); dense layers
    a Qwen3MoeMLP with gate_up_proj."""
    ps = ["", "model", "model.embed_tokens", "model.layers"]
    for i in range(layers):
        L = f"model.layers.{i}"
        ps += [L, f"{L}.self_attn"] + [f"{L}.self_attn.{p}" for p in ("qkv_proj", "o_proj", "rotary_emb", "attn", "q_norm", "k_norm")]
        if i in dense:
            ps += [f"{L}.mlp", f"{L}.mlp.gate_up_proj", f"{L}.mlp.down_proj", f"{L}.mlp.act_fn"]
        else:
            ps += [f"{L}.mlp", f"{L}.mlp.experts", f"{L}.mlp.gate"]
        ps += [f"{L}.input_layernorm", f"{L}.post_attention_layernorm"]
    return ps + ["model.norm", "lm_head", "logits_processor"]


def test_canonical_ops_of_moe_layers():
    ops = bc.canonical_ops(3, qk_norm=True, moe_layers=(1, 2))
    assert len(ops) == len(bc.canonical_ops(3, qk_norm=True))  # four MoE ops in place of four dense ones
    i = ops.index("layers.1.mlp_norm")
    assert ops[i + 1 : i + 6] == ["layers.1.mlp.router", "layers.1.mlp.experts", "layers.1.mlp.expert_weights",
                                  "layers.1.mlp.combine", "layers.1.mlp_residual"]
    assert "layers.0.mlp.down_proj" in ops and "layers.1.mlp.down_proj" not in ops and "layers.0.mlp.router" not in ops


def test_moe_layers_follow_the_config():
    c = {"model_type": "qwen3_moe", "num_hidden_layers": 6, "num_experts": 8, "num_experts_per_tok": 2,
         "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    cfg = bc.ModelConfig.from_hf(c)
    assert cfg.moe_layers == (1, 5) and cfg.experts == 8 and cfg.experts_per_tok == 2
    assert bc.ModelConfig.from_hf({"num_hidden_layers": 2}).moe_layers == ()
    assert names.feature_size(MOE, "layers.1.mlp.router") == 8
    assert names.feature_size(MOE, "layers.1.mlp.experts") == 2
    assert names.feature_size(MOE, "layers.1.mlp.combine") == 32
    # the router is replicated under TP (vLLM's ReplicatedLinear): its full width is no shard
    assert names.shard_of(MOE, "layers.1.mlp.router", 8, 2, 1) == (-1, 0, 8)


@pytest.mark.parametrize("side", ["hf", "vllm"])
def test_moe_name_maps(side):
    """transformers' and vLLM's Qwen3-MoE trees give the same canonical ops, each from where that side
    exposes it, numbered as canonical_ops with the MoE layers; a dense layer keeps the dense ops."""
    paths = (hf_moe_paths if side == "hf" else vllm_moe_paths)(3, dense=(0,))
    res = bc.resolve(paths, bc.HF_RULES, MOE)
    by = {p: [(t.source, n, t.dtype) for t, n in takes] for p, takes in res}
    L = "model.layers.1"
    assert by[f"{L}.mlp"] == [("out", "layers.1.mlp.combine", None)]
    if side == "hf":  # Qwen3MoeTopKRouter returns (router_logits, top-k weights, top-k ids)
        assert by[f"{L}.mlp.gate"] == [("out", "layers.1.mlp.router", "f32"), ("out.1", "layers.1.mlp.expert_weights", "f32"),
                                       ("out.2", "layers.1.mlp.experts", "i32")]
    else:  # ReplicatedLinear returns (logits, bias); out.1/out.2 are skipped at record time when absent
        assert by[f"{L}.mlp.gate"][0] == ("out", "layers.1.mlp.router", "f32")
    # FusedMoE selects inside: its router's select_experts is wrapped (transformers' experts have none)
    assert by[f"{L}.mlp.experts"] == [("select.0", "layers.1.mlp.expert_weights", "f32"), ("select.1", "layers.1.mlp.experts", "i32")]
    assert "model.layers.0.mlp" not in by  # a dense layer's MLP has no experts child: no combine
    idx = names.op_index(res, 3)
    want = bc.canonical_ops(3, qk_norm=True, moe_layers=(1, 2))
    for op in ("layers.1.mlp.router", "layers.2.mlp.combine", "layers.0.mlp.down_proj", "logits"):
        assert idx[op] == want.index(op), op
    got = set(ops_of(res))
    assert {f"layers.{l}.{m}" for l in (1, 2) for m in names.MOE_OPS} <= got
    assert not any(n.startswith(("layers.1.mlp.gate_proj", "layers.1.mlp.down_proj")) for n in got)
    own = [p for p in paths if p.endswith(("gate", "experts", "proj", "norm", "layernorm", "embed_tokens", "lm_head"))]
    assert names.unmapped_modules(own, res) == []


def test_rule_child_requires_the_child():
    r = names.Rule(r"mlp$", (bc.Take("x"),), child="experts")
    assert r.match("a.mlp", {"a.mlp", "a.mlp.experts"})
    assert not r.match("a.mlp", {"a.mlp", "a.mlp.gate_proj"})
