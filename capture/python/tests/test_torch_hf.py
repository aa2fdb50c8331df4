"""bitalign.hf without a GPU: the patch's wiring on tiny random Llama, Qwen2 and Qwen3 models.

- which modules are replaced, that unpatch restores every forward and the config, the errors for unsupported
  models, modules and settings;
- segments(), the mask → (run of queries, first key, positions) step, on right and left padding, packed
  sequences and decode steps;
- the patched model with bitalign.ops swapped for plain float32 CPU references (cpu_ops below) against the
  unpatched transformers model: the same logits (to float32 rounding) on right-padded, left-padded and packed
  batches and the same tokens from generate with its KV cache: the transposes, the masks, the RoPE tables and
  the cache handling are wired right (the kernels' own bits are test_ops_gpu.py's, the patched model's
  test_hf_gpu.py's);
- the sampler's (sequence, position) keys under left padding, and batch 1 = batch 4 through a CPU reference of
  the canonical sampling rule built on bitalign.sampling's uniforms;
- the patched forward on meta tensors and through torch.compile(fullgraph=True).
"""


import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.torch

import bitalign.hf as bh  # noqa: E402
from bitalign import ops, sampling  # noqa: E402
from tinymodels import hf_model, padded as _padded  # noqa: E402

ARCHS = ["llama", "qwen2", "qwen3"]
_DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _round(x, dt):
    return x.to(_DT[dt]).to(torch.float32)


def _ref_linear(x, w, b, profile, dt):
    y = x.double() @ w.double().T
    if b is not None:
        y = y + b.double()
    return _round(y.float(), dt)


def _ref_rms(x, w, eps, profile, dt):
    r = torch.rsqrt((x.double() ** 2).mean(1, keepdim=True) + eps)
    return _round(_round((x.double() * r).float(), dt) * w, dt)


def _ref_attention(q, k, v, pos, heads, kv_heads, hd, scale, profile, dt):
    T, S = q.shape[0], k.shape[0]
    qh = q.view(T, heads, hd).double()
    g = heads // kv_heads
    kh = k.view(S, kv_heads, hd).double().repeat_interleave(g, 1)
    vh = v.view(S, kv_heads, hd).double().repeat_interleave(g, 1)
    s = torch.einsum("thd,shd->hts", qh, kh) * scale
    see = torch.arange(S)[None, :] <= pos.long()[:, None].cpu()
    s = s.masked_fill(~see[None], float("-inf"))
    o = torch.einsum("hts,shd->thd", s.softmax(-1), vh)
    return _round(o.reshape(T, heads * hd).float(), dt)


def _ref_sample(logits, seqs, pos, temperature, seed, top_k=0, top_p=1.0):
    """ops.sample on the CPU: sampling.draw, the numpy reference of §10 (the kernels' own bits are
    test_ops_gpu.py's; test_torch_sample.py shows that ops.restrict plus the kernel's rule is draw)."""
    x, s, p = logits.detach().cpu().numpy(), seqs.cpu().numpy(), pos.cpu().numpy()
    tok = [sampling.draw(x[r], temperature, top_k, top_p, seed, s[r], p[r]) for r in range(x.shape[0])]
    return torch.tensor(tok, dtype=torch.int32, device=logits.device)


@pytest.fixture
def cpu_ops(monkeypatch):
    """bitalign.ops replaced by float32 references on CPU tensors (the wiring is under test, not the kernels)."""
    monkeypatch.setattr(ops, "linear", _ref_linear)
    monkeypatch.setattr(ops, "rms_norm", _ref_rms)
    monkeypatch.setattr(ops, "attention", _ref_attention)
    monkeypatch.setattr(ops, "residual", lambda a, b, dt: _round(a + b, dt))
    monkeypatch.setattr(ops, "swiglu", lambda g, u, dt: _round(_round(torch.nn.functional.silu(g), dt) * u, dt))
    monkeypatch.setattr(ops, "sample", _ref_sample)
    monkeypatch.setattr(ops, "log_softmax", lambda x, profile: torch.log_softmax(x, -1))


def model(arch, dtype=torch.float32, **kw):
    m = hf_model(arch, dtype, seed=3, positions=64, **kw)
    m.generation_config.pad_token_id = 0
    return m


def padded(seqs, left):
    """(input_ids, attention_mask) of a padded batch (tinymodels.padded)."""
    ids, mask, _ = _padded(seqs, "left" if left else "right")
    return ids, mask


SEQS = [[5, 17, 33, 2, 9, 40, 11], [7, 3, 81], [12, 55, 6, 6, 70], [90, 1]]


# --- segments -----------------------------------------------------------------------------------------------------


def _mask_rows(mask):
    return [(r0, r1, k0, p.tolist()) for r0, r1, k0, p in bh.segments(mask)]


def test_segments_causal_right_and_left_padding():
    assert _mask_rows(bh.causal_mask(4, 4)) == [(0, 4, 0, [0, 1, 2, 3])]
    # right padding: 3 real tokens of 5; transformers' padded query rows see the real keys (positions repeat)
    m = bh.causal_mask(5, 5) & torch.tensor([1, 1, 1, 0, 0], dtype=torch.bool)[None]
    assert _mask_rows(m) == [(0, 5, 0, [0, 1, 2, 2, 2])]
    # left padding by 2: the sequence's keys start at 2, key 2 is its position 0; padding queries see nothing
    m = bh.causal_mask(5, 5) & torch.tensor([0, 0, 1, 1, 1], dtype=torch.bool)[None]
    assert _mask_rows(m) == [(2, 5, 2, [0, 1, 2])]


def test_segments_packed_and_decode():
    # two sequences of 3 and 2 tokens packed in one row: block-diagonal causal
    seq = torch.tensor([0, 0, 0, 1, 1])
    m = bh.causal_mask(5, 5) & (seq[:, None] == seq[None, :])
    assert _mask_rows(m) == [(0, 3, 0, [0, 1, 2]), (3, 5, 3, [0, 1])]
    # a decode step over a cache of 6 keys, left-padded by 1: one query at position 4
    m = torch.tensor([[0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    assert _mask_rows(m) == [(0, 1, 1, [4])]
    # a chunked prefill: 2 new queries after 4 cached keys
    assert _mask_rows(bh.causal_mask(2, 6)) == [(0, 2, 0, [4, 5])]


def test_no_mask_runs_are_the_causal_masks():
    """The attention without a mask (causal, the queries the last Tq keys) takes the runs segments() finds in
    causal_mask, without building it."""
    bh._last_mask[:] = [None, None]
    for Tq, S in ((4, 4), (2, 6), (1, 9), (0, 3)):
        got = bh._row_segments(None, 2, Tq, S, torch.device("cpu"))
        want = _mask_rows(bh.causal_mask(Tq, S))
        assert [[(r0, r1, k0, p.tolist()) for r0, r1, k0, _, p in runs] for runs in got] == [want, want]


def test_segments_refuse_holes():
    m = torch.tensor([[1, 0, 1]], dtype=torch.bool)
    with pytest.raises(ValueError, match=r"query 0 sees keys \[0, 2\]: not one contiguous run"):
        bh.segments(m)
    with pytest.raises(ValueError, match="must be \\(queries, keys\\)"):
        bh.segments(torch.ones(2, 2, 2, dtype=torch.bool))


def test_segments_match_transformers_masks():
    """The masks transformers makes for the "bitalign" implementation give the runs the padding implies."""
    bh.register()
    from transformers.masking_utils import create_causal_mask

    m = model("qwen3")
    m.config._attn_implementation_internal = bh.ATTN
    for left in (False, True):
        ids, mask = padded(SEQS, left)
        emb = torch.zeros(ids.shape[0], ids.shape[1], 8)
        cm = create_causal_mask(config=m.config, inputs_embeds=emb, attention_mask=mask, cache=None,
                                position_ids=(mask.cumsum(1) - 1).clamp(min=0))
        assert cm.dtype == torch.bool and cm.shape == (4, 1, 7, 7)
        for b, s in enumerate(SEQS):
            runs = bh.segments(cm[b, 0])
            pad = 7 - len(s) if left else 0
            assert runs[0][0] == pad and runs[0][2] == pad
            assert runs[0][3].tolist()[:len(s)] == list(range(len(s)))


# --- patch and unpatch --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_patch_replaces_and_unpatch_restores(arch):
    m = model(arch, torch.bfloat16)
    before = m.config.to_dict()
    impl = m.config._attn_implementation
    bh.patch(m)
    assert bh.is_patched(m) and m.config._attn_implementation == bh.ATTN
    patched = {n for n, x in m.named_modules() if "forward" in x.__dict__}
    L = m.config.num_hidden_layers
    per = ["input_layernorm", "post_attention_layernorm", "mlp", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
           "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"]
    if arch == "qwen3":
        per += ["self_attn.q_norm", "self_attn.k_norm"]
    want = {f"model.layers.{i}" for i in range(L)} | {f"model.layers.{i}.{p}" for i in range(L) for p in per}
    want |= {"model.norm", "lm_head", "model.rotary_emb"}
    assert patched == want
    st = m._bitalign
    assert all(w.dtype == torch.float32 for w in st.weights.values())
    assert all(isinstance(L.self_attn.rotary_emb, bh.RotaryOut) for L in m.model.layers)
    assert set(m.state_dict()) == set(model(arch, torch.bfloat16).state_dict())
    with pytest.raises(ValueError, match="already patched"):
        bh.patch(m)
    bh.unpatch(m)
    assert not any("forward" in x.__dict__ or "_bitalign" in x.__dict__ for x in m.modules())
    assert not hasattr(m, "bitalign_log_softmax")
    assert not any(hasattr(L.self_attn, "rotary_emb") for L in m.model.layers)
    assert [n for n, _ in m.named_modules()] == [n for n, _ in model(arch, torch.bfloat16).named_modules()]
    assert m.config._attn_implementation == impl and m.config.to_dict() == before
    assert not st.weights and st.tables is None
    with pytest.raises(ValueError, match="is not patched"):
        bh.unpatch(m)


def test_tied_weights_widened_once():
    """Every parameter but the embedding (a gather, left to transformers) is widened once — q/k/v's weights
    and biases as one stacked copy per layer — and a tied LM head is the embedding's one copy."""
    for tied in (False, True):
        m = model("qwen2", torch.bfloat16, tied=tied)
        bh.patch(m)
        params = list(m.parameters())  # tied: one parameter
        widened = sum(p.numel() for p in params) - (0 if tied else m.model.embed_tokens.weight.numel())
        assert sum(w.numel() for w in m._bitalign.weights.values()) == widened
        assert len(m._bitalign.weights) == len(params) - (0 if tied else 1) - 4 * len(m.model.layers)
        w = m._bitalign.weights[id(m.lm_head.weight)]
        assert torch.equal(w, m.lm_head.weight.float())


@pytest.mark.parametrize(
    "make,msg",
    [
        (lambda: hf_model("gemma3_text"), "model class Gemma3ForCausalLM is not supported"),
        (lambda: hf_model("qwen3_moe"), "model class Qwen3MoeForCausalLM is not supported"),
        (lambda: model("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=0),
         "sliding window"),
        (lambda: model("llama", rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
         "rope scaling 'linear'"),
        (lambda: model("llama", mlp_bias=True), "mlp_bias"),
        (lambda: model("llama", hidden_act="gelu"), "hidden_act 'gelu'"),
        (lambda: model("qwen3", head_dim=512), "head_dim 512"),
    ],
)
def test_unsupported_models(make, msg):
    with pytest.raises(ValueError, match=msg):
        bh.patch(make())


def test_unsupported_modules_and_dtypes():
    m = model("llama")
    m.model.layers[1].mlp = torch.nn.Sequential(torch.nn.Linear(64, 64))
    with pytest.raises(ValueError, match=r"module model.layers.1.mlp is a Sequential"):
        bh.patch(m)
    m = model("llama")
    m.model.layers[0].self_attn.q_proj.weight.data = m.model.layers[0].self_attn.q_proj.weight.data.half()
    with pytest.raises(ValueError, match="mixes parameter dtypes"):
        bh.patch(m)
    m = model("qwen3").to(torch.float64)
    with pytest.raises(ValueError, match="torch.float64"):
        bh.patch(m)
    with pytest.raises(ValueError, match="profile must be"):
        bh.patch(model("qwen3"), profile="fast")
    # a failed patch leaves nothing behind
    m = model("qwen3")
    m.model.layers[1].mlp.act_fn = torch.nn.GELU()
    with pytest.raises(ValueError, match="act_fn"):
        bh.patch(m)
    assert not any("forward" in x.__dict__ for x in m.modules()) and not bh.is_patched(m)


def test_wrong_input_dtype_and_positions(cpu_ops):
    m = bh.patch(model("qwen3"), max_positions=8)
    with pytest.raises(ValueError, match="outside the RoPE tables' 0…7"):
        m(input_ids=torch.ones(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="RMSNorm input is torch.bfloat16"):
        m.model.norm(torch.ones(2, 64, dtype=torch.bfloat16))


def test_rotary_returns_the_engine_tables():
    m = bh.patch(model("qwen3", torch.bfloat16))
    pos = torch.tensor([[0, 1, 5, 63]])
    cos, sin = m.model.rotary_emb(torch.zeros(1, dtype=torch.bfloat16), pos)
    from bitalign import rope

    c, s = rope.tables(m.config.rope_parameters["rope_theta"], 16, 64, "bf16")
    assert cos.dtype == torch.bfloat16 and cos.shape == (1, 4, 16)
    assert torch.equal(cos[0, :, :8].float(), torch.from_numpy(c[[0, 1, 5, 63]]))
    assert torch.equal(cos[0, :, 8:], cos[0, :, :8]) and torch.equal(sin[0, 2, 8:].float(), torch.from_numpy(s[5]))


# --- the patched model against transformers (CPU reference ops) ---------------------------------------------------


def _close(a, b):
    assert a.shape == b.shape
    err = (a - b).abs().max().item()
    assert err < 2e-4, err


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("left", [False, True])
def test_padded_forward_matches_transformers(cpu_ops, arch, left):
    m = model(arch)
    ids, mask = padded(SEQS, left)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        bh.patch(m)
        got = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert got.dtype == torch.float32
    real = mask.bool()
    _close(got[real], ref[real])
    # each sequence alone (batch 1) gives its rows of the batch
    with torch.no_grad():
        for b, s in enumerate(SEQS):
            one = m(input_ids=torch.tensor([s])).logits[0]
            _close(one, got[b][real[b]])


def test_packed_forward_matches_per_sequence(cpu_ops):
    m = bh.patch(model("qwen3"))
    ids = torch.tensor([sum(SEQS[:3], [])])
    pos = torch.tensor([sum([list(range(len(s))) for s in SEQS[:3]], [])])
    with torch.no_grad():
        got = m(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
        o = 0
        for s in SEQS[:3]:
            _close(got[o:o + len(s)], m(input_ids=torch.tensor([s])).logits[0])
            o += len(s)


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_matches_transformers(cpu_ops, arch):
    """Left-padded generate with the KV cache: the patched model's greedy tokens are transformers' own."""
    m = model(arch)
    ids, mask = padded(SEQS, left=True)
    with torch.no_grad():
        ref = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        bh.patch(m)
        got = bh.generate(m, ids, mask, max_new_tokens=6)
    assert torch.equal(got, ref)


# --- sampling -----------------------------------------------------------------------------------------------------


def test_rows_under_left_padding():
    pm = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    assert bh.rows(pm, 4).tolist() == [1, 3, 0]
    assert bh.rows(pm, 7).tolist() == [4, 6, 3]
    with pytest.raises(ValueError, match="prompt row 0 is right-padded"):
        bh.rows(torch.tensor([[1, 1, 0]]), 3)
    with pytest.raises(ValueError, match="prompt row 1 has no tokens"):
        bh.rows(torch.tensor([[1, 1], [0, 0]]), 2)
    with pytest.raises(ValueError, match="shorter than the 4-token prompt"):
        bh.rows(pm, 3)


def test_sampler_keys_and_errors():
    s = bh.Sampler(9, 1.0, seq_ids=[10, 11, 12], prompt_mask=torch.tensor([[0, 1], [1, 1], [0, 1]]))
    seqs, pos = s.keys(torch.zeros(3, 5, dtype=torch.long))
    assert seqs.tolist() == [10, 11, 12] and pos.tolist() == [3, 4, 3]
    with pytest.raises(ValueError, match="num_return_sequences and beam search"):
        s.keys(torch.zeros(6, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="seed -1"):
        bh.Sampler(-1)
    with pytest.raises(ValueError, match="do_sample"):
        bh.generate(None, torch.zeros(1, 2, dtype=torch.long), do_sample=True)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        bh.Sampler(1, 1.0, top_p=0)
    with pytest.raises(ValueError, match="top_k must be an integer"):
        bh.generate(None, torch.zeros(1, 2, dtype=torch.long), top_k=-1)


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (1.0, 0, 1.0), (1.0, 5, 1.0), (1.3, 0, 0.9),
                                                     (1.3, 20, 0.8)])
def test_sampled_sequences_do_not_depend_on_the_batch(cpu_ops, temperature, top_k, top_p):
    """Seeded sampling keyed by (seq, pos), with top-k and top-p too: each sequence draws the same tokens alone
    and in a left-padded batch (the reference ops agree across batch sizes on these tiny shapes; the GPU test
    makes the same claim bitwise with the kernels)."""
    m = bh.patch(model("qwen3"))
    ids, mask = padded(SEQS, left=True)
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=8)
    with torch.no_grad():
        batch = bh.generate(m, ids, mask, seed=5, seq_ids=[20, 21, 22, 23], **kw)
        for b, s in enumerate(SEQS):
            one = bh.generate(m, torch.tensor([s]), seed=5, seq_ids=[20 + b], **kw)
            assert one[0, len(s):].tolist() == batch[b, ids.shape[1]:].tolist()
        other = bh.generate(m, ids, mask, seed=6, seq_ids=[20, 21, 22, 23], **{**kw, "temperature": 1.0})
        if top_k or top_p < 1:  # the cut reaches the draws: without it, other tokens
            free = bh.generate(m, ids, mask, seed=5, seq_ids=[20, 21, 22, 23], **{**kw, "top_k": 0, "top_p": 1.0})
            assert not torch.equal(free, batch), "top-k/top-p changed no token: the test cannot see them"
    if temperature > 0:
        assert not torch.equal(other, batch)  # the seed is in the key


# --- tracing ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_patched_forward_on_meta(arch):
    m = bh.patch(model(arch, torch.bfloat16).to("meta"))
    ids = torch.ones(2, 5, dtype=torch.long, device="meta")
    out = m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert out.shape == (2, 5, 96) and out.dtype == torch.float32 and out.device.type == "meta"


def test_patched_forward_compiles_fullgraph():
    """The decoder stack (norms, projections, RoPE tables, attention op, residuals) is one graph. transformers'
    own top-level forward is traced too (mask creation included) with use_cache=False."""
    m = bh.patch(model("qwen3", torch.bfloat16).to("meta"))
    ids = torch.ones(2, 5, dtype=torch.long, device="meta")
    mask = torch.ones_like(ids)
    f = torch.compile(lambda i, a: m(input_ids=i, attention_mask=a, use_cache=False).logits, fullgraph=True,
                      backend="eager")
    assert f(ids, mask).shape == (2, 5, 96)


@pytest.mark.parametrize("arch", ARCHS)
def test_unpatched_model_computes_transformers_bits_again(cpu_ops, arch):
    """patch, run, unpatch: the model's forward and generate are transformers' own again, bit for bit."""
    m, fresh = model(arch, torch.bfloat16), model(arch, torch.bfloat16)
    ids, mask = padded(SEQS, left=True)
    with torch.no_grad():
        bh.patch(m)
        patched = m(input_ids=ids, attention_mask=mask).logits
        bh.unpatch(m)
        got, ref = (x(input_ids=ids, attention_mask=mask).logits for x in (m, fresh))
    assert got.dtype == torch.bfloat16 and patched.dtype == torch.float32
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))


def test_mask_runs_computed_once_per_forward(cpu_ops, monkeypatch):
    """Every layer gets the same mask: its runs are found once per batch row, not once per layer."""
    calls = []
    real = bh._runs
    monkeypatch.setattr(bh, "_runs", lambda *a: calls.append(1) or real(*a))
    m = bh.patch(model("qwen3", layers=4))
    ids, mask = padded(SEQS, left=True)
    with torch.no_grad():
        m(input_ids=ids, attention_mask=mask)
        assert len(calls) == len(SEQS)
        m(input_ids=ids, attention_mask=mask)  # a new forward: a new mask
        assert len(calls) == 2 * len(SEQS)


def test_rope_of_transformers_is_the_engines():
    """transformers' apply_rotary_pos_emb on bf16 tensors with the engine's tables is docs/arithmetic.md §6 (each
    product rounded to bf16, then the float32 sum or difference rounded to bf16), element for element."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from bitalign import rope

    c, s = rope.tables(1e6, 64, 256, "bf16")
    pos = torch.tensor([[0, 1, 2, 100, 255, 7, 31, 64]]).expand(2, -1)
    cos = torch.from_numpy(np.concatenate([c, c], 1))[pos].bfloat16()
    sin = torch.from_numpy(np.concatenate([s, s], 1))[pos].bfloat16()
    g = torch.Generator().manual_seed(4)
    q = (torch.randn(2, 8, 8, 64, generator=g) * 3).bfloat16()
    q[0, 0, 0, :4] = torch.tensor([0.0, -0.0, 1e-30, -1e-30])  # signed zeros and tiny products
    k = (torch.randn(2, 2, 8, 64, generator=g) * 1e3).bfloat16()
    got = apply_rotary_pos_emb(q, k, cos, sin)

    def engine(x):  # §6, with every rounding written out
        r = lambda t: t.bfloat16().float()  # noqa: E731
        x, cc, ss = x.float(), cos[:, None, :, :32].float(), sin[:, None, :, :32].float()
        x1, x2 = x[..., :32], x[..., 32:]
        return torch.cat([r(r(x1 * cc) - r(x2 * ss)), r(r(x2 * cc) + r(x1 * ss))], -1).bfloat16()

    for a, x in zip(got, (q, k)):
        assert torch.equal(a.view(torch.int16), engine(x).view(torch.int16))


def test_recorder_takes_the_engines_log_softmax(cpu_ops, monkeypatch, tmp_path):
    """bitalign_capture computes a patched model's logprobs with its bitalign_log_softmax (ops.log_softmax, the
    engine's §9), so that replay can reproduce them; an unpatched model's with torch's."""
    import bitalign_capture as bc

    calls = []
    monkeypatch.setattr(ops, "log_softmax", lambda x, profile: calls.append((tuple(x.shape), profile))
                        or torch.log_softmax(x, -1))
    m = model("qwen3")
    ids, mask = padded(SEQS, left=False)
    with torch.no_grad():
        with bc.record(m, tmp_path / "a.arrow", "trainer", final_tokens={b: 1 for b in range(len(SEQS))}):
            m(input_ids=ids, attention_mask=mask)
        assert not calls
        bh.patch(m, profile="standard")
        with bc.record(m, tmp_path / "b.arrow", "trainer", final_tokens={b: 1 for b in range(len(SEQS))}):
            m(input_ids=ids, attention_mask=mask)
    assert calls == [((sum(map(len, SEQS)), 96), "standard")]


def test_captures_hold_q_rope_and_k_rope(cpu_ops, tmp_path):
    """A patched model's captures hold every op the engine records, q_rope and k_rope included (through
    self_attn.rotary_emb, a RotaryOut), at the same coordinates in a trainer forward and in generate's decode
    steps; q_rope is q_norm's output rotated by §6 with the engine's tables, bit for bit."""
    import bitalign_capture as bc
    from test_torch_record import by_key

    from bitalign import rope

    m = bh.patch(model("qwen3", torch.bfloat16))
    ids, mask = padded(SEQS, left=True)
    with torch.no_grad():
        with bc.record(m, tmp_path / "s.arrow", "sampler", record_samples=True) as rec:
            out = bh.generate(m, ids, mask, max_new_tokens=3)
            rec.sampled(range(len(SEQS)), out[:, -1])
        seqs = [s + out[b, ids.shape[1]:].tolist() for b, s in enumerate(SEQS)]
        tids, tmask = padded([s[:-1] for s in seqs], left=False)
        with bc.record(m, tmp_path / "t.arrow", "trainer", final_tokens={b: s[-1] for b, s in enumerate(seqs)}):
            m(input_ids=tids, attention_mask=tmask, position_ids=(tmask.cumsum(1) - 1).clamp(min=0))
    s, t = by_key(tmp_path / "s.arrow"), by_key(tmp_path / "t.arrow")
    for op in ("attn.q_rope", "attn.k_rope"):
        for L in range(2):
            name = f"layers.{L}.{op}"
            keys = {k for k in t if k[0] == name}
            assert keys == {k for k in s if k[0] == name}
            assert keys == {(name, "out", b, p) for b, sq in enumerate(seqs) for p in range(len(sq) - 1)}
    c, sn = rope.tables(m.config.rope_parameters["rope_theta"], 16, 64, "bf16")

    def bf16(a):  # a capture's bf16 row (its bits) as float32
        a = np.asarray(a)
        assert a.dtype == np.uint16
        return torch.from_numpy((a.astype(np.uint32) << 16).view(np.float32)).view(-1, 16)

    n = 0
    for (op, role, b, p), (row, _) in t.items():
        if op != "layers.1.attn.q_rope":
            continue
        x = bf16(t[("layers.1.attn.q_norm", "out", b, p)][0])
        r = lambda v: v.bfloat16().float()  # noqa: E731
        cc, ss = torch.from_numpy(c[p]), torch.from_numpy(sn[p])
        want = torch.cat([r(r(x[:, :8] * cc) - r(x[:, 8:] * ss)), r(r(x[:, 8:] * cc) + r(x[:, :8] * ss))], 1)
        assert torch.equal(bf16(row), want), (b, p)
        n += 1
    assert n == sum(len(sq) - 1 for sq in seqs)


def test_recorder_sees_the_patched_model_and_an_unpatch(cpu_ops, tmp_path):
    """The recorder watches a module's calls, not its forward (recorder._Observer wraps _call_impl): a patched
    model records every op, q_rope and k_rope included; an unpatch within the recording gives it transformers'
    forward back (the next step's rows are an unpatched model's, bit for bit); the patch's direct weight calls
    (_unobserved) and its RotaryOut see the wrapper (observed); closing leaves nothing on any module; a patch
    within a recording is refused (the recorder would miss the RotaryOut it adds)."""
    import bitalign_capture as bc
    from bitalign_capture import recorder

    def run(path, order):
        m = model("qwen2", torch.bfloat16)
        ids, mask = padded(SEQS, left=True)
        with torch.no_grad():
            if order != "plain":
                bh.patch(m)
            with bc.record(m, path, "trainer", mode="fingerprint", full_ops=["layers.0.*"]) as rec:
                if order != "plain":
                    mlp, ro = m.model.layers[1].mlp, m.model.layers[0].self_attn.rotary_emb
                    assert recorder.observed(mlp.gate_proj) and recorder.observed(ro)
                    assert not bh._unobserved(mlp.gate_proj, mlp.up_proj)
                    m(input_ids=ids, attention_mask=mask)
                rec.set_step(1)
                if order == "unpatch":
                    bh.unpatch(m)
                if order != "patched":
                    m(input_ids=ids, attention_mask=mask)
            if order == "patched":
                bh.unpatch(m)
        assert not any("_call_impl" in mod.__dict__ or "forward" in mod.__dict__ for mod in m.modules())
        assert not recorder.observed(m.model.layers[1].mlp.gate_proj)
        out = {}
        for t in bc.read(path)[1]:
            for i in range(t["ntok"]):
                out[(t["step"], t["op"], t["role"], t["seq"], t["pos"] + i)] = np.asarray(t["array"][i])
        return out

    got = run(tmp_path / "a.arrow", "unpatch")
    want = run(tmp_path / "b.arrow", "patched")
    assert {k[1] for k in want} >= {"layers.1.mlp.gate_proj", "layers.0.attn.q_rope", "layers.1.attn.k_rope"}
    assert {k[0] for k in want} == {0}
    plain = run(tmp_path / "c.arrow", "plain")
    assert "layers.0.attn.q_rope" not in {k[1] for k in plain}
    assert got.keys() == want.keys() | plain.keys()
    for k, row in (want | plain).items():
        assert np.array_equal(got[k], row), k

    m = model("qwen2", torch.bfloat16)
    with bc.record(m, tmp_path / "d.arrow", "trainer"):
        with pytest.raises(ValueError, match="being recorded"):
            bh.patch(m)
    bh.patch(m)  # after it: fine


def test_right_padding_of_every_row(cpu_ops):
    """A batch padded past its longest sequence (pad_to_multiple_of): no query sees the last key, which is fine
    without a cache; each sequence's logits are still its own."""
    m = bh.patch(model("llama"))
    ids, mask = padded(SEQS, left=False)
    ids, mask = (torch.nn.functional.pad(x, (0, 3)) for x in (ids, mask))
    with torch.no_grad():
        got = m(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
        for b, s in enumerate(SEQS):
            _close(got[b, :len(s)], m(input_ids=torch.tensor([s])).logits[0])


def test_static_cache_is_refused(cpu_ops):
    m = bh.patch(model("qwen3"))
    with pytest.raises(ValueError, match="a static or preallocated cache"):
        m.generate(input_ids=torch.tensor([SEQS[0]]), max_new_tokens=2, do_sample=False, cache_implementation="static")
