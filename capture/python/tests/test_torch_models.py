"""The recorder on models beyond the Llama family (Qwen3-MoE, Gemma3) and on generate with seq ids: issue 13's
findings on real Hugging Face models, reproduced with random tiny ones."""

import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from test_torch_record import SEQS, by_key, capture  # noqa: E402
from tinymodels import hf_model, padded  # noqa: E402


def test_generate_with_seq_ids_keeps_them_for_every_decode_step(tmp_path):
    m = hf_model("qwen3")
    prompts = [SEQS[0][:3], SEQS[1][:4]]
    ids, mask, _ = padded(prompts, "left")
    new = 3
    res = {}

    def gen(rec, seq_ids=None):
        if seq_ids is not None:
            rec.batch(seq_ids=seq_ids)
        res["out"] = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False)
        rec.sampled(seq_ids or [0, 1], res["out"][:, -1])

    plain = capture(m, tmp_path / "plain.arrow", "sampler", forward=gen)
    named = capture(m, tmp_path / "named.arrow", "sampler", forward=lambda r: gen(r, [7, 3]))
    assert {k[2] for k in named} == {7, 3}
    for b, sid in enumerate((7, 3)):
        N = len(prompts[b]) + new
        # prefill and every decode step of row b are sequence sid, position for position
        assert sorted(p for (op, _, s, p) in named if op == "layers.1.mlp.down_proj" and s == sid) == list(range(N - 1))
        for (op, role, s, p), (row, _) in plain.items():
            if s == b:
                np.testing.assert_array_equal(named[(op, role, sid, p)][0], row, err_msg=f"{op} {p}")

    # a forward that does not continue those sequences (a trainer pass from position 0) gets the default ids
    def gen_then_train(rec):
        gen(rec, [7, 3])
        m(input_ids=ids, attention_mask=mask)

    both = capture(m, tmp_path / "both.arrow", "sampler", forward=gen_then_train)
    assert {k[2] for k in both} == {0, 1, 3, 7}
    assert sorted(p for (op, _, s, p) in both if op == "embed" and s == 0) == list(range(len(prompts[0])))


def test_the_same_coordinates_twice_are_refused_at_write_time(tmp_path):
    """Two generate calls without seq ids put both on sequences 0 and 1: the second is refused, naming the op,
    the sequence and the position, and no capture is left behind."""
    m = hf_model("llama")
    ids, mask, _ = padded([SEQS[0][:3], SEQS[2]], "left")
    p = tmp_path / "dup.arrow"
    with pytest.raises(ValueError, match=r"tokens \[out\] step 0 seq 0 pos 0 written twice.*seq_ids"):
        with torch.no_grad(), bc.record(m, p, "sampler"):
            m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
            m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
    assert not p.exists()
    # with seq ids for the second call it is a capture of four sequences
    with torch.no_grad(), bc.record(m, p, "sampler") as rec:
        m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
        rec.batch(seq_ids=[2, 3])
        m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)
    assert {t["seq"] for t in bc.read(p)[1]} == {0, 1, 2, 3}


@pytest.mark.parametrize("arch", ["qwen3_moe", "gemma3_text"])
def test_qk_norm_indexes_come_before_logits(tmp_path, arch):
    m = hf_model(arch)
    ids, mask, pos = padded(SEQS, "right")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unmapped modules: the next test
        cap = capture(m, tmp_path / "c.arrow", forward=lambda r: m(input_ids=ids, attention_mask=mask, position_ids=pos))
    canon = bc.canonical_ops(2, qk_norm=True)
    idx = {k[0]: t["index"] for k, (_, t) in cap.items()}
    for op in ("layers.0.attn.q_norm", "layers.1.attn.k_norm", "layers.1.attn.v_proj", "logits", "final_norm"):
        assert idx[op] == canon.index(op), op
    assert idx["layers.1.attn.k_norm"] < idx["final_norm"] < idx["logits"]
    assert all(i < len(canon) for i in idx.values())  # every op recorded is canonical


def _module_outputs(model, names):
    """{module path: [output, ...]} of the named modules during the forwards that follow, and its hook handles."""
    got = {n: [] for n in names}
    mods = dict(model.named_modules())
    hs = [mods[n].register_forward_hook(lambda mod, a, out, n=n: got[n].append(out.detach().clone())) for n in names]
    return got, hs


# (4, 2, 4): as many tokens as q heads (4); (2, 1, 2): as many as kv heads (2)
@pytest.mark.parametrize("lengths", [(7, 5, 3), (4, 2, 4), (2, 1, 2)])
@pytest.mark.parametrize("arch", ["gemma3_text", "qwen3"])
def test_per_head_qk_norms_are_flattened_per_token(tmp_path, arch, lengths):
    """Gemma3's q_norm/k_norm get [B, heads, S, head_dim] (Qwen3's [B, S, heads, head_dim]): recorded as
    [tokens, heads * head_dim], the module's output made token-major by hand; also when the number of heads
    equals the number of tokens."""
    m = hf_model(arch)
    seqs = [s[:n] for s, n in zip(SEQS, lengths)]
    ids, mask, pos = padded(seqs, "right")
    watch = ["model.layers.1.self_attn.q_norm", "model.layers.0.self_attn.k_norm"]
    got, hs = _module_outputs(m, watch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cap = capture(m, tmp_path / "g.arrow", forward=lambda r: m(input_ids=ids, attention_mask=mask, position_ids=pos))
    for h in hs:
        h.remove()
    B, S = ids.shape
    for path, op, heads in ((watch[0], "layers.1.attn.q_norm", 4), (watch[1], "layers.0.attn.k_norm", 2)):
        (out,) = got[path]
        if arch == "gemma3_text":
            assert tuple(out.shape) == (B, heads, S, 16)  # head-major, as Gemma3 calls it
            out = out.transpose(1, 2)
        else:
            assert tuple(out.shape) == (B, S, heads, 16)
        by_hand = out.reshape(B, S, heads * 16)
        for b, s in enumerate(seqs):
            for p in range(len(s)):
                row, t = cap[(op, "out", b, p)]
                assert t["shape"] == [t["ntok"], heads * 16]
                np.testing.assert_array_equal(row, by_hand[b, p].numpy(), err_msg=f"{op} {b} {p}")


def test_gemma3_decode_steps_flatten_heads_too(tmp_path):
    m = hf_model("gemma3_text")
    ids, mask, _ = padded([SEQS[0][:3], SEQS[1][:2]], "left")
    res = {}

    def gen(rec):
        res["out"] = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samp = capture(m, tmp_path / "s.arrow", "sampler", forward=gen)
        full = [res["out"][b, ids.shape[1] - n :].tolist() for b, n in enumerate((3, 2))]
        tids, tmask, tpos = padded([f[:-1] for f in full], "right")
        trn = capture(m, tmp_path / "t.arrow", forward=lambda r: m(input_ids=tids, attention_mask=tmask, position_ids=tpos))
    keys = [k for k in trn if k[0] == "layers.0.attn.q_norm"]
    assert len(keys) == sum(len(f) - 1 for f in full)
    for k in keys:
        np.testing.assert_allclose(samp[k][0], trn[k][0], rtol=1e-5, atol=1e-5, err_msg=str(k))


def test_unknown_block_structures_are_named_not_mislabelled(tmp_path):
    g = hf_model("gemma3_text")
    ids = torch.tensor([SEQS[0]])
    watch = ["model.layers.0.pre_feedforward_layernorm", "model.layers.0.post_attention_layernorm"]
    got, hs = _module_outputs(g, watch)
    with pytest.warns(UserWarning) as rec:
        cap = capture(g, tmp_path / "g.arrow", forward=lambda r: g(input_ids=ids))
    for h in hs:
        h.remove()
    msgs = [str(w.message) for w in rec if "name map does not know" in str(w.message)]
    assert len(msgs) == 1, [str(w.message) for w in rec]
    assert (
        "model.layers.*.post_attention_layernorm (2 layers), model.layers.*.post_feedforward_layernorm (2 layers)"
        in msgs[0]
    )
    # mlp_norm is the MLP's input norm (pre_feedforward_layernorm), not the attention's post-norm
    (pre,) = got[watch[0]]
    (post,) = got[watch[1]]
    np.testing.assert_array_equal(cap[("layers.0.mlp_norm", "out", 0, 2)][0], pre[0, 2].numpy())
    assert not np.array_equal(cap[("layers.0.mlp_norm", "out", 0, 2)][0], post[0, 2].numpy())

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the Llama and Qwen3-MoE blocks are fully known: no warning
        capture(hf_model("llama"), tmp_path / "l.arrow", forward=lambda r: None)
        moe = hf_model("qwen3_moe")
        cap = capture(moe, tmp_path / "m.arrow", forward=lambda r: moe(input_ids=ids))
    ops = {k[0] for k in cap}
    assert {"layers.0.mlp_norm", "layers.0.mlp.router", "layers.1.mlp.combine"} <= ops
    assert "layers.0.mlp.down_proj" not in ops
