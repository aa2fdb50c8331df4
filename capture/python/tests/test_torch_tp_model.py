"""A tiny Hugging Face model sharded over CPU processes (gloo) at TP 1, 2 and 4, patched, with CPU stand-ins
where the CUDA kernels would run (tests/cpu_standins.py: bitalign.cpu's exact twins of every kernel the patch
calls, pinned to the Go bits).

- patched: the logits of a right-padded trainer batch, the vocab-parallel logprobs of the logits' shards, and
  seeded generate's tokens are bitwise equal at TP 1, 2 and 4 on every rank (kv heads replicated at TP 4);
  bitalign diff of each TP N run's rank captures against TP 1's capture: exit 0, no op missing; bitalign
  replay --device cpu of each (the Go engine re-executing the step): exit 0;
- unpatched (the control): the same sharded model with the usual arithmetic (torch's bf16 matmul, gloo's
  all_reduce of bf16 partials) gives other logits at TP 2 than at TP 1.
"""

import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")
pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")]

SEQS = [[5, 17, 33, 2, 9, 40, 11], [7, 3, 81], [12, 55, 6, 6, 70], [90, 1]]
MODELS = {"llama": dict(attention_bias=True), "qwen3": dict()}  # llama: o_proj has a bias (added after the tree)


def _model(arch):
    from tinymodels import hf_model

    m = hf_model(arch, torch.bfloat16, seed=3, positions=64, heads=4, kv_heads=2, **MODELS[arch])
    m.generation_config.pad_token_id = 0
    return m


def _worker(r, tp, init, out, arch):
    import cpu_standins
    import bitalign.hf as bh
    import bitalign_capture as bc
    from bitalign import cpu, tp as btp
    from tinymodels import padded

    dist.init_process_group("gloo", init_method=init, rank=r, world_size=tp)
    try:
        torch.set_num_threads(1)
        cpu_standins.install()
        res = {}
        ids, mask, pos = padded(SEQS, "right")
        with torch.no_grad():
            plain = btp.shard(_model(arch))  # the control: the usual TP arithmetic
            res["plain"] = plain(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()

            m = bh.patch(btp.shard(_model(arch)))
            cap = os.path.join(out, f"trainer-tp{tp}" + ("" if tp > 1 else ".arrow"))
            with bc.record(m, cap, "trainer", final_tokens={b: 1 for b in range(len(SEQS))}):
                logits = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits
            res["logits"] = logits
            # the vocab-parallel logprobs from this rank's shard of the logits
            lay = btp.layout(m)
            flat = logits.reshape(-1, logits.shape[-1])
            targets = torch.roll(ids, -1, 1).reshape(-1).to(torch.int32)
            res["logprobs"] = btp.logprobs(flat[:, lay.v0:lay.v0 + lay.v_local].contiguous(), targets)
            res["logprobs_full"] = cpu.logprobs(flat.contiguous(), targets, "canonical")
            lids, lmask, _ = padded(SEQS, "left")
            res["generate"] = bh.generate(m, lids, attention_mask=lmask, seed=7, temperature=0.8, max_new_tokens=4)
        torch.save(res, os.path.join(out, f"rank{r}.pt"))
    finally:
        dist.destroy_process_group()


def _run(out, tp, arch):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(tp, f"file://{out / f'rv{tp}'}", str(out), arch), nprocs=tp, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(tp)]


def _same(a, b, what):
    a, b = a.contiguous(), b.contiguous()
    assert a.shape == b.shape, (what, a.shape, b.shape)
    if a.dtype.is_floating_point:
        a, b = a.view(torch.int32), b.view(torch.int32)
    bad = (a != b).flatten().nonzero()
    assert not len(bad), f"{what}: {len(bad)} elements differ, the first at flat index {int(bad[0, 0])}"


@pytest.fixture(scope="module", params=list(MODELS))
def runs(request, tmp_path_factory):
    arch = request.param
    out = tmp_path_factory.mktemp(arch)
    tps = (1, 2, 4) if arch == "llama" else (1, 2)
    _model(arch).save_pretrained(out / "checkpoint", safe_serialization=True)
    return arch, out, {tp: _run(out, tp, arch) for tp in tps}


def test_patched_sharded_model_has_tp1_bits(runs):
    arch, _, res = runs
    one = res[1][0]
    for tp, ranks in res.items():
        for r, got in enumerate(ranks):
            for k in ("logits", "logprobs", "generate"):
                _same(got[k], one[k], f"{arch} TP {tp} rank {r} {k}")
            # the vocab-parallel logprobs equal the single-rank log-softmax of the whole rows
            _same(got["logprobs"], got["logprobs_full"], f"{arch} TP {tp} rank {r} vocab-parallel logprobs")


def test_unpatched_sharded_model_diverges(runs):
    """The control group: the same script without bitalign's layers gives other logits at TP 2 than at TP 1."""
    arch, _, res = runs
    a, b = res[1][0]["plain"], res[2][0]["plain"]
    n = int((a.view(torch.int32) != b.view(torch.int32)).sum())
    print(f"{arch}: unpatched TP 2 logits differ from TP 1 in {n} of {a.numel()}")
    assert n > 0


@pytest.mark.skipif(not (os.environ.get("BITALIGN_BIN") and os.access(os.environ["BITALIGN_BIN"], os.X_OK)),
                    reason="set BITALIGN_BIN to a built bitalign binary")
def test_bitalign_diff_of_rank_captures_against_tp1(runs):
    """bitalign reads each TP N run's rank directory as one capture (the shards reassembled; at TP 4 the two
    ranks of a replicated kv head both hold it) and finds every op identical to TP 1's capture."""
    arch, out, res = runs
    for tp in sorted(t for t in res if t > 1):
        r = subprocess.run([os.environ["BITALIGN_BIN"], "diff", "--format", "json", str(out / f"trainer-tp{tp}"),
                            str(out / "trainer-tp1.arrow")], capture_output=True, text=True)
        assert r.returncode == 0, f"TP {tp}: bitalign diff exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        rep = json.loads(r.stdout)
        assert rep["a"]["tp"] == tp
        assert not [o["op"] for o in rep["ops"] if o["status"] != "identical"]
        assert {o["op"] for o in rep["ops"]} >= {"logits", "logprobs", "layers.1.attn.o_proj", "layers.1.mlp.down_proj",
                                                 "layers.1.attn.k_proj", "layers.1.attn.k_rope"}


@pytest.mark.skipif(not (os.environ.get("BITALIGN_BIN") and os.access(os.environ["BITALIGN_BIN"], os.X_OK)),
                    reason="set BITALIGN_BIN to a built bitalign binary")
def test_bitalign_replay_of_rank_captures(runs):
    """The Go engine, replaying each TP N capture's step on the CPU from the checkpoint, reproduces every op."""
    arch, out, res = runs
    for tp in sorted(res):
        cap = out / (f"trainer-tp{tp}" if tp > 1 else "trainer-tp1.arrow")
        r = subprocess.run([os.environ["BITALIGN_BIN"], "replay", "--checkpoint", str(out / "checkpoint"), "--capture",
                            str(cap), "--device", "cpu", "-o", str(out / f"replay-tp{tp}.json")],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"TP {tp}: bitalign replay exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
