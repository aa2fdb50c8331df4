"""Tensor parallelism: two ranks (torch.distributed, gloo on the CPU) each record their shard of a
vLLM-style model into DIR/rankN.arrow; reassembled, the shards are the single-process capture."""

import os
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
dist = pytest.importorskip("torch.distributed")

import bitalign_capture as bc  # noqa: E402
from tinymodels import FusedModel, hf_model  # noqa: E402

SEQS = [[5, 17, 33, 2, 71, 9, 40], [11, 64, 3, 3, 58], [90, 1, 2]]
TP = 2


def _inputs():
    flat = torch.tensor(sum(SEQS, []))
    cu = torch.tensor(np.cumsum([0] + [len(s) for s in SEQS]))
    positions = torch.cat([torch.arange(len(s)) for s in SEQS])
    return flat, positions, cu


def _rank(rank, arch, init, out):
    sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=TP)
    try:
        torch.set_num_threads(1)
        model = FusedModel(hf_model(arch), tp=TP, rank=rank).eval()
        flat, positions, cu = _inputs()
        with torch.no_grad(), bc.record(model, out, "trainer") as rec:  # tp and rank from torch.distributed
            model(flat, positions, cu_seqlens=cu)
        assert rec.tp == TP and rec.rank == rank
    finally:
        dist.destroy_process_group()


def by_key(path):
    out = {}
    for t in bc.read(path)[1]:
        for i in range(t["ntok"]):
            out[(t["op"], t["seq"], t["pos"] + i)] = (t["array"][i], t)
    return out


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tp_ranks_write_shards_that_reassemble(tmp_path, arch):
    import torch.multiprocessing as mp

    out = tmp_path / "tp"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_rank, args=(arch, init, str(out)), nprocs=TP, join=True)
    assert sorted(os.listdir(out)) == ["rank0.arrow", "rank1.arrow"]

    single = FusedModel(hf_model(arch)).eval()
    flat, positions, cu = _inputs()
    with torch.no_grad(), bc.record(single, tmp_path / "one.arrow", "trainer"):
        single(flat, positions, cu_seqlens=cu)
    one = by_key(tmp_path / "one.arrow")
    ranks = [by_key(out / f"rank{r}.arrow") for r in range(TP)]
    metas = [bc.read(out / f"rank{r}.arrow")[0] for r in range(TP)]
    assert [(m["tp"], m["rank"]) for m in metas] == [(TP, 0), (TP, 1)]

    sharded = set()
    for k, (want, t1) in one.items():
        if k[0] == "logprobs":  # a vocab shard cannot give them
            assert all(k not in r for r in ranks)
            continue
        parts = [r[k] for r in ranks]
        if parts[0][1]["shard_dim"] == -1:
            for row, t in parts:
                assert t["shard_dim"] == -1 and t["full_shape"] == []
                np.testing.assert_allclose(row, want, rtol=1e-5, atol=1e-5, err_msg=str(k))
            continue
        sharded.add(k[0].split(".", 2)[-1])
        full = np.zeros_like(want)
        for r, (row, t) in enumerate(parts):
            assert t["shard_dim"] == 1 and t["rank"] == r, (k, t)
            assert t["full_shape"] == [t["ntok"], want.shape[0]]
            assert t["shard_start"] == r * row.shape[0]
            full[t["shard_start"] : t["shard_start"] + row.shape[0]] = row
        np.testing.assert_allclose(full, want, rtol=1e-5, atol=1e-5, err_msg=str(k))
    want_sharded = {
        "attn.q_proj",
        "attn.k_proj",
        "attn.v_proj",
        "attn.q_rope",
        "attn.k_rope",
        "attn.sdpa",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.act",
        "logits",
    }
    if arch == "qwen3":
        want_sharded |= {"attn.q_norm", "attn.k_norm"}
    assert sharded == want_sharded


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.skipif(
    not (os.environ.get("BITALIGN_BIN") and os.access(os.environ["BITALIGN_BIN"], os.X_OK)),
    reason="set BITALIGN_BIN to a built bitalign binary",
)
def test_bitalign_diff_reassembles_python_rank_files(tmp_path):
    """bitalign reads the rank directory as one capture and joins the shards: against the single-process
    capture nothing is missing but the rope ops and logprobs, and no op has mismatched shapes."""
    import json
    import subprocess

    import torch.multiprocessing as mp

    out = tmp_path / "tp"
    mp.spawn(_rank, args=("llama", f"file://{tmp_path / 'rendezvous'}", str(out)), nprocs=TP, join=True)
    single = FusedModel(hf_model("llama")).eval()
    flat, positions, cu = _inputs()
    with torch.no_grad(), bc.record(single, tmp_path / "one.arrow", "trainer"):
        single(flat, positions, cu_seqlens=cu)
    bin_ = os.environ["BITALIGN_BIN"]
    for flags in (["--format", "json"], ["--json"]):
        r = subprocess.run(
            [bin_, "diff", *flags, str(out), str(tmp_path / "one.arrow")], capture_output=True, text=True
        )
        if r.returncode in (0, 1) and r.stdout.lstrip().startswith("{"):
            break
    else:
        raise AssertionError(f"bitalign diff exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    rep = json.loads(r.stdout)
    assert rep["a"]["tp"] == TP
    bad = [o["op"] for o in rep["ops"] if o["status"] in ("shape_mismatch", "missing_in_a", "missing_in_b")]
    assert bad == ["logprobs"], bad  # the vocab-sharded side has none
    for o in rep["ops"]:
        assert o["max_abs"] < 1e-4, (o["op"], o["max_abs"])
