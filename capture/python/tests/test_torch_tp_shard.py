"""bitalign.tp.shard on the meta device and on small CPU models, without a process group (tp and rank given):
which parameters each rank holds, their shapes and their rows, kv heads fewer than the ranks (replicated as
the engine does), and every refusal."""

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.torch

from bitalign import tp as btp  # noqa: E402
from tinymodels import hf_model  # noqa: E402


def _meta(arch, **kw):
    with torch.device("meta"):
        return hf_model(arch, **kw)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shapes_on_meta(arch, tp):
    ref = _meta(arch, heads=8, kv_heads=4, intermediate=128, vocab=128)
    cfg = ref.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    H, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    for r in range(tp):
        m = btp.shard(_meta(arch, heads=8, kv_heads=4, intermediate=128, vocab=128), tp=tp, rank=r)
        lay = btp.layout(m)
        assert (lay.tp, lay.rank, lay.q_heads, lay.kv_heads, lay.i_local, lay.v_local) == (tp, r, 8 // tp, 4 // tp,
                                                                                            I // tp, V // tp)
        got = {n: tuple(p.shape) for n, p in m.named_parameters()}
        for L in range(cfg.num_hidden_layers):
            a, f = f"model.layers.{L}.self_attn", f"model.layers.{L}.mlp"
            assert got[f"{a}.q_proj.weight"] == (8 // tp * hd, H)
            assert got[f"{a}.k_proj.weight"] == got[f"{a}.v_proj.weight"] == (4 // tp * hd, H)
            assert got[f"{a}.o_proj.weight"] == (H, 8 // tp * hd)
            assert got[f"{f}.gate_proj.weight"] == got[f"{f}.up_proj.weight"] == (I // tp, H)
            assert got[f"{f}.down_proj.weight"] == (H, I // tp)
            if arch == "qwen2":  # q/k/v biases are sharded with their rows
                assert got[f"{a}.q_proj.bias"] == (8 // tp * hd,) and got[f"{a}.k_proj.bias"] == (4 // tp * hd,)
            if arch == "qwen3":  # per-head norms: replicated
                assert got[f"{a}.q_norm.weight"] == got[f"{a}.k_norm.weight"] == (hd,)
            assert got[f"model.layers.{L}.input_layernorm.weight"] == (H,)
            assert m.model.layers[L].self_attn.num_key_value_groups == 2
        assert got["lm_head.weight"] == (V // tp, H)
        assert got["model.embed_tokens.weight"] == (V, H)  # the engine keeps the embedding whole
        assert got["model.norm.weight"] == (H,)
        assert sum(p.numel() for p in m.parameters()) < sum(p.numel() for p in ref.parameters()) or tp == 1


@pytest.mark.parametrize("tied", [False, True])
def test_each_rank_holds_its_rows(tied):
    """On a CPU model: rank r's shards are exactly the engine's slices of the full weights (rows of the
    column-parallel projections, columns of the row-parallel ones, vocab rows of the head); a tied head gets
    its own copy and the embedding stays whole."""
    tp = 2
    full = hf_model("qwen2", tied=tied, heads=4, kv_heads=2)
    hd = full.config.hidden_size // 4
    W = {n: p.detach().clone() for n, p in full.named_parameters()}
    for r in range(tp):
        m = btp.shard(hf_model("qwen2", tied=tied, heads=4, kv_heads=2), tp=tp, rank=r)
        P = dict(m.named_parameters(remove_duplicate=False))
        a = "model.layers.1.self_attn"
        assert torch.equal(P[f"{a}.q_proj.weight"], W[f"{a}.q_proj.weight"][r * 2 * hd:(r + 1) * 2 * hd])
        assert torch.equal(P[f"{a}.q_proj.bias"], W[f"{a}.q_proj.bias"][r * 2 * hd:(r + 1) * 2 * hd])
        assert torch.equal(P[f"{a}.k_proj.weight"], W[f"{a}.k_proj.weight"][r * hd:(r + 1) * hd])
        assert torch.equal(P[f"{a}.o_proj.weight"], W[f"{a}.o_proj.weight"][:, r * 2 * hd:(r + 1) * 2 * hd])
        I = full.config.intermediate_size // tp
        assert torch.equal(P["model.layers.0.mlp.down_proj.weight"],
                           W["model.layers.0.mlp.down_proj.weight"][:, r * I:(r + 1) * I])
        assert torch.equal(P["model.layers.0.mlp.up_proj.weight"], W["model.layers.0.mlp.up_proj.weight"][r * I:(r + 1) * I])
        V = full.config.vocab_size // tp
        head = W["model.embed_tokens.weight"] if tied else W["lm_head.weight"]
        assert torch.equal(m.lm_head.weight, head[r * V:(r + 1) * V])
        assert torch.equal(m.model.embed_tokens.weight, W["model.embed_tokens.weight"])
        assert m.lm_head.weight.data_ptr() != m.model.embed_tokens.weight.data_ptr()


def test_kv_heads_fewer_than_ranks_are_replicated():
    """8 query heads, 2 kv heads at TP 4: each rank holds one kv head, head r // 2 (the engine's and vLLM's
    layout; bitalign_capture's shard_of reads the same), and 2 query heads that all read it."""
    full = hf_model("llama", heads=8, kv_heads=2, hidden=64)
    hd = 8
    K = full.model.layers[0].self_attn.k_proj.weight.detach()
    for r in range(4):
        m = btp.shard(hf_model("llama", heads=8, kv_heads=2, hidden=64), tp=4, rank=r)
        lay = btp.layout(m)
        assert (lay.kv_heads, lay.kv_head0, lay.kv_writer, lay.q_heads) == (1, r // 2, r % 2 == 0, 2)
        at = m.model.layers[0].self_attn
        assert torch.equal(at.k_proj.weight, K[(r // 2) * hd:(r // 2 + 1) * hd])
        assert at.num_key_value_groups == 2


@pytest.mark.parametrize("kw,tp,msg", [
    (dict(heads=4, kv_heads=2), 8, "TP 8 does not divide 4 attention heads"),
    (dict(heads=6, kv_heads=3, hidden=48), 2, "TP 2 and 3 kv heads: one must divide the other"),
    (dict(heads=4, kv_heads=4, intermediate=90), 4, "TP 4 does not divide intermediate size 90"),
    (dict(heads=4, kv_heads=2, vocab=98), 4, "TP 4 does not divide vocab size 98"),
    (dict(), 3, "TP 3: must be 1, 2, 4 or 8"),
])
def test_refusals(kw, tp, msg):
    with pytest.raises(ValueError, match=msg):
        btp.shard(_meta("llama", **kw), tp=tp, rank=0)


def test_refuses_unknown_modules_models_and_order():
    m = _meta("llama")
    m.model.layers[1].mlp = torch.nn.Identity()
    with pytest.raises(ValueError, match="module model.layers.1.mlp is a Identity"):
        btp.shard(m, tp=2, rank=0)
    with pytest.raises(ValueError, match="model class Qwen3MoeForCausalLM is not supported"):
        btp.shard(_meta("qwen3_moe"), tp=2, rank=0)
    with pytest.raises(ValueError, match="rank 2 outside TP 2"):
        btp.shard(_meta("llama"), tp=2, rank=2)
    m = btp.shard(_meta("llama"), tp=2, rank=1)
    with pytest.raises(ValueError, match="already sharded"):
        btp.shard(m, tp=2, rank=1)
    import bitalign.hf as bh

    p = bh.patch(_meta("llama"))
    with pytest.raises(ValueError, match="shard first, then patch"):
        btp.shard(p, tp=2, rank=0)


def test_patch_of_a_sharded_model_uses_the_tp_layers_and_unpatch_restores_them():
    """patch gives o_proj, down_proj and lm_head bitalign.tp's layers (the marks shard left), the other linears
    ops.linear; unpatch gives back shard's forwards (the usual all_reduce arithmetic), not transformers'."""
    import bitalign.hf as bh

    m = btp.shard(_meta("qwen3"), tp=2, rank=0)
    before = {n: mod.__dict__.get("forward") for n, mod in m.named_modules()}
    assert before["model.layers.0.self_attn.o_proj"] is not None and before["lm_head"] is not None
    assert before["model.layers.0.self_attn.q_proj"] is None
    bh.patch(m)
    for n in ("model.layers.0.self_attn.o_proj", "model.layers.1.mlp.down_proj", "lm_head"):
        mod = dict(m.named_modules())[n]
        assert mod.forward is not before[n] and mod._bitalign_tp[0] == ("vocab" if n == "lm_head" else "row")
    bh.unpatch(m)
    after = {n: mod.__dict__.get("forward") for n, mod in m.named_modules()}
    assert after == before
