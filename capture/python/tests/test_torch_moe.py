"""The recorder on mixture-of-experts models (issue #16): transformers' Qwen3-MoE (random, tiny) and a model
with vLLM's Qwen3-MoE module structure (a gate returning (logits, bias), a FusedMoE whose router object selects
the experts), both recording the MoE ops under the canonical names."""

import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from bitalign_capture import names  # noqa: E402
from test_torch_record import SEQS, capture  # noqa: E402
from tinymodels import hf_model, padded  # noqa: E402


def _outputs(model, paths):
    got = {p: [] for p in paths}
    mods = dict(model.named_modules())
    hs = [mods[p].register_forward_hook(lambda m, a, out, p=p: got[p].append(out)) for p in paths]
    return got, hs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_qwen3_moe_records_the_routing_it_computes(tmp_path, dtype):
    """router = the gate's logits (float32), experts = its top-k ids (int32, in torch.topk's order), weights =
    its top-k weights (float32), combine = the block's output; layer 0 is dense (mlp_only_layers) and keeps the
    dense ops; every op numbered as canonical_ops with the MoE layers."""
    m = hf_model("qwen3_moe", dtype=dtype, layers=3, mlp_only_layers=[0], num_experts=8, num_experts_per_tok=3)
    ids, mask, pos = padded(SEQS, "right")
    watch = ["model.layers.1.mlp.gate", "model.layers.1.mlp", "model.layers.2.mlp.gate"]
    got, hs = _outputs(m, watch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every module is known
        cap = capture(m, tmp_path / "c.arrow", forward=lambda r: m(input_ids=ids, attention_mask=mask, position_ids=pos))
    for h in hs:
        h.remove()
    (gate,) = got[watch[0]]
    logits, weights, experts = gate
    (block,) = got[watch[1]]
    B, S = ids.shape
    for b, s in enumerate(SEQS):
        for p in range(len(s)):
            row = b * S + p  # right padding: column p of row b
            r, t = cap[("layers.1.mlp.router", "out", b, p)]
            assert t["dtype"] == "f32" and np.array_equal(r, logits[row].float().numpy())
            e, t = cap[("layers.1.mlp.experts", "out", b, p)]
            assert t["dtype"] == "i32" and e.tolist() == experts[row].tolist() and len(e) == 3
            w, t = cap[("layers.1.mlp.expert_weights", "out", b, p)]
            assert t["dtype"] == "f32" and np.array_equal(w, weights[row].float().numpy())
            c, t = cap[("layers.1.mlp.combine", "out", b, p)]
            want = block[b, p].float().numpy() if dtype == torch.float32 else block[b, p].view(torch.int16).numpy()
            got_c = c if dtype == torch.float32 else c.view(np.int16)
            assert np.array_equal(got_c, want)
            # the ids are the top-k of the router's softmax (ties aside, which random logits do not have)
            top = torch.topk(torch.softmax(logits[row].float(), -1), 3).indices.tolist()
            assert e.tolist() == top
    ops = {k[0] for k in cap}
    assert "layers.0.mlp.down_proj" in ops and "layers.0.mlp.router" not in ops
    assert "layers.1.mlp.down_proj" not in ops and "layers.2.mlp.combine" in ops
    canon = bc.canonical_ops(3, qk_norm=True, moe_layers=(1, 2))
    idx = {k[0]: t["index"] for k, (_, t) in cap.items()}
    for op in ("layers.0.mlp.down_proj", "layers.1.mlp.router", "layers.1.mlp.experts", "layers.2.mlp.combine", "logits"):
        assert idx[op] == canon.index(op), op
    assert bc.ModelConfig.from_hf(m.config).moe_layers == (1, 2)


# ----- vLLM's structure (vllm/model_executor/models/qwen3_moe.py, fused_moe/): not vLLM itself


class _Router:
    """Like vLLM's FusedMoERouter: a plain object (no module), select_experts -> (topk_weights, topk_ids)."""

    def __init__(self, k, renormalize):
        self.k, self.renormalize = k, renormalize
        self.calls = 0

    def select_experts(self, hidden_states, router_logits):
        self.calls += 1
        w, ids = torch.topk(torch.softmax(router_logits, dim=-1, dtype=torch.float32), self.k, dim=-1)
        if self.renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        return w, ids.to(torch.int32)


class FusedMoE(torch.nn.Module):
    def __init__(self, experts, k, hidden):
        super().__init__()
        self.router = _Router(k, True)
        self.w = torch.nn.Parameter(torch.randn(experts, hidden, hidden) / hidden**0.5)

    def forward(self, hidden_states, router_logits):
        w, ids = self.router.select_experts(hidden_states=hidden_states, router_logits=router_logits)
        out = torch.zeros_like(hidden_states)
        for j in range(ids.shape[1]):
            out += w[:, j : j + 1].to(hidden_states.dtype) * torch.einsum("th,tgh->tg", hidden_states, self.w[ids[:, j].long()])
        return out


class ReplicatedLinear(torch.nn.Linear):
    def forward(self, x):
        return super().forward(x), None


class SparseMoeBlock(torch.nn.Module):
    def __init__(self, experts, k, hidden):
        super().__init__()
        self.experts = FusedMoE(experts, k, hidden)
        self.gate = ReplicatedLinear(hidden, experts, bias=False)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.view(-1, shape[-1])
        router_logits, _ = self.gate(x)
        return self.experts(hidden_states=x, router_logits=router_logits).view(shape)


class Layer(torch.nn.Module):
    def __init__(self, experts, k, hidden):
        super().__init__()
        self.post_attention_layernorm = torch.nn.RMSNorm(hidden)
        self.mlp = SparseMoeBlock(experts, k, hidden)

    def forward(self, h):
        return h + self.mlp(self.post_attention_layernorm(h))


class Inner(torch.nn.Module):
    def __init__(self, vocab, experts, k, hidden, layers):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(Layer(experts, k, hidden) for _ in range(layers))

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h)
        return h


class VllmStyleMoE(torch.nn.Module):
    def __init__(self, vocab=96, experts=6, k=2, hidden=16, layers=2):
        super().__init__()
        self.model = Inner(vocab, experts, k, hidden, layers)

    def forward(self, input_ids, positions):  # vLLM's flat (N,) ids and positions
        return self.model(input_ids)


def test_vllm_fused_moe_router_is_wrapped_and_restored(tmp_path):
    torch.manual_seed(0)
    m = VllmStyleMoE().eval()
    cfg = bc.ModelConfig("qwen3_moe", layers=2, hidden=16, experts=6, experts_per_tok=2, moe_layers=(0, 1))
    ids = torch.tensor(SEQS[0] + SEQS[1])
    positions = torch.tensor(list(range(len(SEQS[0]))) + list(range(len(SEQS[1]))))
    cu = torch.tensor([0, len(SEQS[0]), len(SEQS[0]) + len(SEQS[1])])
    router = m.model.layers[1].mlp.experts.router
    seen = []
    inner = router.select_experts
    router.select_experts = lambda **kw: seen.append(inner(**kw)) or seen[-1]  # the selection the model uses

    def fwd(rec):
        rec.batch(cu_seqlens=cu)
        m(ids, positions)

    cap = capture(m, tmp_path / "v.arrow", forward=fwd, config=cfg)
    (wt, it), = seen
    n0 = len(SEQS[0])
    for seq, s in enumerate(SEQS[:2]):
        for p in range(len(s)):
            row = p + (n0 if seq else 0)
            e, t = cap[("layers.1.mlp.experts", "out", seq, p)]
            assert t["dtype"] == "i32" and e.tolist() == it[row].tolist()
            w, t = cap[("layers.1.mlp.expert_weights", "out", seq, p)]
            assert t["dtype"] == "f32" and np.array_equal(w, wt[row].numpy())
            r, t = cap[("layers.1.mlp.router", "out", seq, p)]
            assert t["dtype"] == "f32" and r.shape == (6,)
    assert ("layers.0.mlp.combine", "out", 0, 0) in cap
    # the wrapper is gone once the recorder closes: the instance attribute set before is back
    assert router.select_experts.__name__ == "<lambda>"
    del router.select_experts
    assert "select_experts" not in vars(m.model.layers[0].mlp.experts.router)
    idx = names.op_index(bc.resolve([p for p, _ in m.named_modules() if p], bc.HF_RULES, cfg), 2)
    assert idx["layers.1.mlp.experts"] == bc.canonical_ops(2, moe_layers=(0, 1)).index("layers.1.mlp.experts")


def test_moe_proof_script_reports_the_flips_the_captures_hold(tmp_path):
    """moe_proof.py on the CPU (batch 8 against batch 1, the batch-1 side with SDPA attention for noise): the
    report's routing table counts exactly the flips, order-only and weights-only tokens that the two captures
    hold, recounted here from the files, and its first flip is the earliest of them."""
    import json
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    binary = os.environ.get("BITALIGN_BIN", "bin/bitalign")
    if not os.path.exists(binary):
        pytest.skip(f"{binary}: no bitalign binary (make build)")
    subprocess.run([sys.executable, os.path.join(here, "moe_proof.py"), str(tmp_path), "--device", "cpu",
                    "--layers", "2", "--hidden", "128", "--experts", "16", "--k", "4", "--tokens", "24",
                    "--sampler-attn", "sdpa", "--bin", binary], check=True, capture_output=True)
    rep = json.load(open(tmp_path / "report.json"))
    assert rep["version"] == 4 and [r["layer"] for r in rep["routing"]] == [0, 1]
    sides = [{(t["seq"], t["pos"] + i, t["op"]): t["array"][i] for t in bc.read(tmp_path / f)[1]
              if t["op"].endswith(("mlp.experts", "mlp.expert_weights")) for i in range(t["ntok"])}
             for f in ("batch8.arrow", "batch1.arrow")]
    for r in rep["routing"]:
        op = f"layers.{r['layer']}.mlp.experts"
        toks = sorted(k[:2] for k in sides[0] if k[2] == op)
        flips, order, weights = [], 0, 0
        for tok in toks:
            a, b = sides[0][tok + (op,)], sides[1][tok + (op,)]
            if sorted(a.tolist()) != sorted(b.tolist()):
                flips.append((tok, a.tolist(), b.tolist()))
            elif a.tolist() != b.tolist():
                order += 1
            elif sides[0][tok + (op.replace("experts", "expert_weights"),)].tobytes() != \
                    sides[1][tok + (op.replace("experts", "expert_weights"),)].tobytes():
                weights += 1
        assert (r["tokens"], r["flipped"], r["order_only"], r["weights_only"]) == (len(toks), len(flips), order, weights)
        if flips:
            (seq, pos), a, b = flips[0]
            ff = r["first_flip"]
            assert (ff["seq"], ff["pos"], ff["a_experts"], ff["b_experts"]) == (seq, pos, a, b)
            assert ff["margin_a"]["ulp_dtype"] == "bf16" and ff["text"] in open(tmp_path / "report.txt").read()
        else:
            assert r["first_flip"] is None
    proof = json.load(open(tmp_path / "proof.json"))
    assert proof["flipped"] == sum(r["flipped"] for r in rep["routing"]) and proof["token_layers"] == 2 * 8 * 24
