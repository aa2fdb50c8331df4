"""Recording real Hugging Face models (random init, float32, eager) and a vLLM-style fused twin."""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from tinymodels import FusedModel, hf_model, padded  # noqa: E402

ARCHS = ["llama", "qwen2", "qwen3"]
SEQS = [[5, 17, 33, 2, 71, 9, 40], [11, 64, 3, 3, 58], [90, 1, 2]]


def by_key(path):
    """{(op, role, seq, pos): row} with every tensor split into its positions."""
    out = {}
    for t in bc.read(path)[1]:
        a = t["array"]
        for i in range(t["ntok"]):
            key = (t["op"], t["role"], t["seq"], t["pos"] + i)
            assert key not in out, key
            out[key] = (a[i], t)
    return out


def capture(model, path, side="trainer", forward=None, **kw):
    with torch.no_grad(), bc.record(model, path, side, **kw) as rec:
        forward(rec)
    return by_key(path)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_capture_is_the_model_output(tmp_path, arch, side):
    m = hf_model(arch)
    ids, mask, pos = padded(SEQS, side)
    res = {}

    def fwd(rec):
        res["out"] = m(input_ids=ids, attention_mask=mask, position_ids=pos, output_hidden_states=True)

    cap = capture(m, tmp_path / "c.arrow", forward=fwd)
    out = res["out"]
    lsm = torch.log_softmax(out.logits.float(), -1)
    canon = bc.canonical_ops(2, qk_norm=arch == "qwen3")
    for b, s in enumerate(SEQS):
        cols = torch.nonzero(mask[b]).flatten().tolist()
        assert len(cols) == len(s)
        for p, c in enumerate(cols):
            assert cap[("tokens", "out", b, p)][0] == s[p]
            # the hooks see the very tensors the model returns: equal bits
            assert np.array_equal(cap[("embed", "out", b, p)][0], out.hidden_states[0][b, c].numpy())
            assert np.array_equal(cap[("layers.0.mlp_residual", "out", b, p)][0], out.hidden_states[1][b, c].numpy())
            assert np.array_equal(cap[("logits", "out", b, p)][0], out.logits[b, c].numpy())
            if p + 1 < len(s):
                lp = cap[("logprobs", "out", b, p)][0]
                assert lp == pytest.approx(float(lsm[b, c, s[p + 1]]), rel=1e-6, abs=1e-6)
            else:
                assert ("logprobs", "out", b, p) not in cap  # its next token is not known
        for op in canon:
            if op in ("sample",) or op.endswith(("q_rope", "k_rope")):
                assert (op, "out", b, 0) not in cap
                continue
            row, t = cap[(op, "out", b, 0)]
            assert t["index"] == canon.index(op), op
            assert t["dtype"] == ("i32" if op == "tokens" else "f32")
            want = bc.feature_size(bc.ModelConfig.from_hf(m.config), op)
            assert t["shape"] == ([t["ntok"]] if want == 0 else [t["ntok"], want]), op


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_side_does_not_move_positions(tmp_path, arch):
    """Left- and right-padded batches of the same sequences, and each sequence alone, give the same
    tensors at the same (seq, position)."""
    m = hf_model(arch)
    caps = []
    for side in ("left", "right"):
        ids, mask, pos = padded(SEQS, side)
        caps.append(
            capture(
                m, tmp_path / f"{side}.arrow", forward=lambda r: m(input_ids=ids, attention_mask=mask, position_ids=pos)
            )
        )
    alone = {}
    for b, s in enumerate(SEQS):

        def fwd(rec, s=s, b=b):
            rec.batch(seq_ids=[b])
            m(input_ids=torch.tensor([s]))

        alone.update(capture(m, tmp_path / f"alone{b}.arrow", forward=fwd))
    assert set(caps[0]) == set(caps[1]) == set(alone)
    for k in alone:
        for c in caps:
            np.testing.assert_allclose(c[k][0], alone[k][0], rtol=1e-5, atol=1e-5, err_msg=str(k))


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_sampler_aligns_with_trainer(tmp_path, arch):
    """A sampler capture (generate: left-padded prefill, then one token per forward from the KV cache) and a
    trainer capture (one forward over the full sequences) hold the same ops at the same positions."""
    m = hf_model(arch)
    prompts = [s[:3] for s in SEQS]
    ids, mask, _ = padded(prompts, "left")
    new = 4
    res = {}

    def sample(rec):
        res["out"] = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False)
        rec.sampled(range(len(prompts)), res["out"][:, -1])

    samp = capture(m, tmp_path / "sampler.arrow", "sampler", forward=sample, record_samples=True)
    full = [res["out"][b, ids.shape[1] - len(p) :].tolist() for b, p in enumerate(prompts)]
    # the trainer's input is t0..t(N-2); the last token is the target of position N-2
    tids, tmask, tpos = padded([f[:-1] for f in full], "right")

    def train(rec):
        rec.batch(record_mask=tmask.bool())
        logits = m(input_ids=tids, attention_mask=tmask, position_ids=tpos).logits
        rec.sampled(range(len(full)), [f[-1] for f in full])
        res["logits"] = logits

    trn = capture(m, tmp_path / "trainer.arrow", "trainer", forward=train)
    only_sampler = set(samp) - set(trn)
    assert {k[0] for k in only_sampler} == {"sample"}
    # generate keeps logits only at the last prompt position, then at each decode step
    assert {k[0] for k in set(trn) - set(samp)} == {"logits", "logprobs"}
    for k in set(samp) & set(trn):
        np.testing.assert_allclose(samp[k][0], trn[k][0], rtol=1e-4, atol=1e-5, err_msg=str(k))
    for b, f in enumerate(full):
        N, P = len(f), len(prompts[b])
        assert sorted(p for (op, _, s, p) in samp if op == "layers.1.mlp.down_proj" and s == b) == list(range(N - 1))
        assert sorted(p for (op, _, s, p) in samp if op == "logprobs" and s == b) == list(range(P - 1, N - 1))
        assert sorted(p for (op, _, s, p) in trn if op == "logprobs" and s == b) == list(range(N - 1))
        assert [int(samp[("sample", "out", b, p)][0]) for p in range(P - 1, N - 1)] == f[P:]


@pytest.mark.parametrize("arch", ARCHS)
def test_fused_vllm_style_model_splits_back_to_canonical_ops(tmp_path, arch):
    """Packed flat tokens with cu_seqlens through fused qkv/gate_up projections, residual-returning norms and
    a per-layer rotary_emb give the same canonical ops as the unfused HF model (plus q_rope/k_rope)."""
    hf = hf_model(arch)
    fused = FusedModel(hf).eval()
    flat = torch.tensor(sum(SEQS, []))
    cu = torch.tensor(np.cumsum([0] + [len(s) for s in SEQS]))
    positions = torch.cat([torch.arange(len(s)) for s in SEQS])
    got = capture(fused, tmp_path / "fused.arrow", forward=lambda r: fused(flat, positions, cu_seqlens=cu))
    ids, mask, pos = padded(SEQS, "right")
    want = capture(
        hf, tmp_path / "hf.arrow", forward=lambda r: hf(input_ids=ids, attention_mask=mask, position_ids=pos)
    )
    assert set(want) <= set(got)
    extra = {k[0].split(".", 2)[-1] for k in set(got) - set(want)}
    assert extra == {"attn.q_rope", "attn.k_rope"}
    for k in want:
        np.testing.assert_allclose(got[k][0], want[k][0], rtol=1e-5, atol=1e-5, err_msg=str(k))
        assert got[k][1]["index"] == want[k][1]["index"]
    # q_rope: rotating position 0 is the identity on q_norm (qwen3) or q_proj
    q0 = "layers.0.attn.q_norm" if arch == "qwen3" else "layers.0.attn.q_proj"
    np.testing.assert_allclose(got[("layers.0.attn.q_rope", "out", 1, 0)][0], got[(q0, "out", 1, 0)][0], rtol=1e-6)


def test_ops_filter_inputs_and_overwrite(tmp_path):
    m = hf_model("llama")
    ids = torch.tensor([SEQS[0]])
    p = tmp_path / "f.arrow"
    with torch.no_grad(), bc.record(m, p, "trainer", ops=["layers.1.*"], record_inputs=True) as rec:
        # only what the filter records is watched: layer 0's modules are left as they are
        watched = {n for n, mod in m.named_modules() if "_call_impl" in mod.__dict__}
        assert "model.layers.1.self_attn.q_proj" in watched and "model.norm" in watched  # layers.1.mlp_residual
        assert not any(n.startswith("model.layers.0.") for n in watched) and "lm_head" in watched  # logprobs
        m(input_ids=ids)
    assert rec.written > 0
    cap = by_key(p)
    assert {k[0] for k in cap} <= {o for o in bc.canonical_ops(2) if o.startswith("layers.1.")}
    roles = {k[1] for k in cap}
    assert roles == {"out", "in"}
    # q_proj's input is attn_norm's output
    np.testing.assert_array_equal(
        cap[("layers.1.attn.q_proj", "in", 0, 3)][0], cap[("layers.1.attn_norm", "out", 0, 3)][0]
    )
    with pytest.raises(FileExistsError):
        bc.record(m, p, "trainer").start()
    with torch.no_grad(), bc.record(m, p, "trainer", overwrite=True, step=4) as rec:
        m(input_ids=ids)
    meta, ts = bc.read(p)
    assert meta["step"] == 4 and {t["step"] for t in ts} == {4} and meta["extra"]["dtype"] == "f32"
    assert meta["model"]["architecture"] == "llama" and meta["model"]["config"]["hidden_size"] == 64
    assert "torch" in meta["producer"]


def test_exception_in_forward_leaves_no_file_and_no_hooks(tmp_path):
    m = hf_model("qwen3")
    p = tmp_path / "x.arrow"
    with pytest.raises(RuntimeError):
        with torch.no_grad(), bc.record(m, p, "trainer"):
            m(input_ids=torch.tensor([[1, 2, 3]]))
            raise RuntimeError("boom")
    assert not p.exists() and os.listdir(tmp_path) == []
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks and "_call_impl" not in mod.__dict__
               for mod in m.modules())


def test_overlapping_recorders_and_compiled_modules(tmp_path):
    """Two recorders on one model, closed in either order, each record what one alone does (a wrapper under
    another passes calls through once its recorder closes); a module compiled in place (its own compiled
    _call_impl, which a wrapper would miss) is watched with forward hooks instead, the same bits; nothing is
    left on any module after."""
    from bitalign_capture import recorder

    ids = torch.tensor([[5, 17, 33, 2], [11, 64, 3, 3]])

    def one(path, **kw):
        m = hf_model("qwen2", torch.bfloat16)
        with torch.no_grad(), bc.record(m, path, "trainer", **{"mode": "fingerprint", **kw}):
            m(input_ids=ids)
        return by_key(path)

    want, want_full = one(tmp_path / "w.arrow"), one(tmp_path / "wf.arrow", mode="full")
    for first in ("outer", "inner"):
        m = hf_model("qwen2", torch.bfloat16)
        a, b = tmp_path / f"{first}-a.arrow", tmp_path / f"{first}-b.arrow"
        ra = bc.record(m, a, "trainer", mode="fingerprint").__enter__()
        rb = bc.record(m, b, "trainer", mode="full").__enter__()
        with torch.no_grad():
            m(input_ids=ids)
        (ra if first == "outer" else rb).__exit__(None, None, None)
        assert recorder.observed(m.model.layers[0].mlp.down_proj)
        (rb if first == "outer" else ra).__exit__(None, None, None)
        assert not any("_call_impl" in mod.__dict__ for mod in m.modules())
        for got, w in ((by_key(a), want), (by_key(b), want_full)):
            assert got.keys() == w.keys()
            assert all(np.array_equal(got[k][0], w[k][0]) for k in w)

    m = hf_model("qwen2", torch.bfloat16)
    mlp = m.model.layers[1].mlp.down_proj  # recorded: its input (mlp.act) and its output
    mlp._compiled_call_impl = type(mlp)._call_impl.__get__(mlp)  # what Module.compile() leaves, uncompiled
    with torch.no_grad(), bc.record(m, tmp_path / "c.arrow", "trainer", mode="fingerprint"):
        assert recorder.observed(mlp)
        assert "_call_impl" not in mlp.__dict__ and mlp._forward_hooks and mlp._forward_pre_hooks
        m(input_ids=ids)
    assert not mlp._forward_hooks and not mlp._forward_pre_hooks
    got = by_key(tmp_path / "c.arrow")
    assert got.keys() == want.keys() and all(np.array_equal(got[k][0], want[k][0]) for k in want)


def test_bf16_activations_are_bf16_bits(tmp_path):
    m = hf_model("qwen2", dtype=torch.bfloat16)
    ids = torch.tensor([SEQS[1]])
    res = {}

    def fwd(rec):
        res["out"] = m(input_ids=ids, output_hidden_states=True)

    cap = capture(m, tmp_path / "b.arrow", forward=fwd)
    row, t = cap[("embed", "out", 0, 2)]
    assert t["dtype"] == "bf16" and row.dtype == np.uint16
    assert np.array_equal(row, res["out"].hidden_states[0][0, 2].view(torch.int16).numpy().view(np.uint16))
    row, t = cap[("logits", "out", 0, 2)]
    assert t["dtype"] == "f32" and np.array_equal(row, res["out"].logits[0, 2].float().numpy())


def test_user_name_map(tmp_path):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(8)
            self.fc = torch.nn.Linear(8, 8)

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(16, 8)
            self.h = torch.nn.ModuleList([Block(), Block()])
            self.head = torch.nn.Linear(8, 16)

        def forward(self, input_ids):
            x = self.wte(input_ids)
            for b in self.h:
                x = x + b.fc(b.ln(x))
            return self.head(x)

    toy = Toy().eval()
    p = tmp_path / "u.arrow"
    nm = {
        r"^wte$": "embed",
        r"^h\.(\d+)\.ln$": "layers.{0}.attn_norm",
        r"^h\.(\d+)\.fc$": [bc.Take("layers.{0}.custom_in", "in"), "layers.{0}.custom"],
        r"^head$": "logits",
    }
    with torch.no_grad(), bc.record(toy, p, "trainer", name_map=nm, config=bc.ModelConfig("toy", layers=2, vocab=16)):
        toy(torch.tensor([[1, 2, 3, 4]]))
    ts = bc.read(p)[1]
    ops = [t["op"] for t in ts]
    assert ops[:3] == ["tokens", "embed", "layers.0.attn_norm"] and "logprobs" in ops and "layers.1.custom" in ops
    idx = {t["op"]: t["index"] for t in ts}
    canon = bc.canonical_ops(2)
    assert idx["layers.1.attn_norm"] == canon.index("layers.1.attn_norm")
    # other names follow the canonical list in module registration order
    assert idx["layers.0.custom_in"] == len(canon) and idx["layers.0.custom"] == len(canon) + 1
    assert idx["layers.1.custom_in"] == len(canon) + 2


def test_positional_arguments_are_read_like_keywords(tmp_path):
    m = hf_model("qwen3")
    ids, mask, pos = padded(SEQS, "left")
    a = capture(m, tmp_path / "kw.arrow", forward=lambda r: m(input_ids=ids, attention_mask=mask, position_ids=pos))
    b = capture(m, tmp_path / "pos.arrow", forward=lambda r: m(ids, mask, pos))
    assert set(a) == set(b)
    for k in a:
        assert np.array_equal(a[k][0], b[k][0]), k


def test_several_forwards_and_steps_in_one_capture(tmp_path):
    """A trainer capture of two micro-batches (seq ids 0-2, then 3-5) and a second step."""
    m = hf_model("llama")
    ids, mask, pos = padded(SEQS, "right")
    p = tmp_path / "multi.arrow"
    with torch.no_grad(), bc.record(m, p, "trainer") as rec:
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
        rec.batch(seq_ids=[3, 4, 5])
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
        rec.set_step(1)
        m(input_ids=ids[:1], attention_mask=mask[:1], position_ids=pos[:1])
    assert rec.forwards == 3
    ts = bc.read(p)[1]
    seen = {(t["step"], t["seq"]) for t in ts if t["op"] == "tokens"}
    assert seen == {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 0)}
    emb = {(t["step"], t["seq"]): t["array"] for t in ts if t["op"] == "embed"}
    assert np.array_equal(emb[(0, 1)], emb[(0, 4)]) and np.array_equal(emb[(0, 0)], emb[(1, 0)])


def test_final_tokens_give_the_last_logprob_and_go_into_meta(tmp_path):
    m = hf_model("qwen2")
    ids, mask, pos = padded(SEQS, "right")
    p = tmp_path / "final.arrow"
    res = {}
    with torch.no_grad(), bc.record(m, p, "trainer", step=2, final_tokens={0: 4, 2: 6}):
        res["logits"] = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    meta, ts = bc.read(p)
    assert meta["extra"]["final_tokens"] == [[2, 0, 4], [2, 2, 6]]
    last = {(t["seq"], t["pos"]): t["array"][0] for t in ts if t["op"] == "logprobs" and t["ntok"] == 1}
    lsm = torch.log_softmax(res["logits"].float(), -1)
    assert set(last) == {(0, len(SEQS[0]) - 1), (2, len(SEQS[2]) - 1)}  # seq 1 has no final token
    assert last[(0, len(SEQS[0]) - 1)] == pytest.approx(float(lsm[0, len(SEQS[0]) - 1, 4]), abs=1e-6)
    assert last[(2, len(SEQS[2]) - 1)] == pytest.approx(float(lsm[2, len(SEQS[2]) - 1, 6]), abs=1e-6)


def test_inputs_embeds_record_activations_without_tokens(tmp_path):
    m = hf_model("llama")
    ids = torch.tensor([SEQS[0]])
    emb = m.model.embed_tokens(ids)
    a = capture(m, tmp_path / "ids.arrow", forward=lambda r: m(input_ids=ids))
    b = capture(m, tmp_path / "emb.arrow", forward=lambda r: m(inputs_embeds=emb))
    assert {k[0] for k in set(a) - set(b)} == {"tokens", "embed", "logprobs"}
    for k in b:
        assert np.array_equal(a[k][0], b[k][0]), k


def test_vllm_logits_processor_gives_last_position_logits(tmp_path):
    hf = hf_model("qwen2")
    fused = FusedModel(hf).eval()
    flat = torch.tensor(sum(SEQS, []))
    cu = torch.tensor(np.cumsum([0] + [len(s) for s in SEQS]))
    positions = torch.cat([torch.arange(len(s)) for s in SEQS])
    p = tmp_path / "lp.arrow"
    with torch.no_grad(), bc.record(fused, p, "sampler", record_samples=True) as rec:
        logits = fused(flat, positions, cu_seqlens=cu, last_only=True)
        rec.sampled([0, 1, 2], logits.argmax(-1))
    got = by_key(p)
    assert sorted((k[2], k[3]) for k in got if k[0] == "logits") == [(b, len(s) - 1) for b, s in enumerate(SEQS)]
    lsm = torch.log_softmax(logits, -1)
    for b, s in enumerate(SEQS):
        assert np.array_equal(got[("logits", "out", b, len(s) - 1)][0], logits[b].numpy())
        tok = int(logits[b].argmax())
        assert int(got[("sample", "out", b, len(s) - 1)][0]) == tok
        assert got[("logprobs", "out", b, len(s) - 1)][0] == pytest.approx(float(lsm[b, tok]), abs=1e-6)
