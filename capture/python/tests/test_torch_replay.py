"""bitalign's replay of a transformers capture agrees with transformers (float32, eager, padded batches).

Needs BITALIGN_BIN: a bitalign binary (cd /work/main && CGO_ENABLED=0 go build -o /tmp/bitalign .). For each of
Llama, Qwen2 and Qwen3 (random init, saved with save_pretrained), the capture of a left-padded batch is replayed
with `bitalign replay --checkpoint DIR --capture FILE --save OUT`; every op the capture holds must be in the replay
with a relative error (max |a - b| / max |b| over the op) below 1e-5, and the logits' argmax must agree.
"""

import glob
import os
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model, padded  # noqa: E402

BIN = os.environ.get("BITALIGN_BIN", "")
needs_bin = pytest.mark.skipif(
    not (BIN and os.access(BIN, os.X_OK)), reason="set BITALIGN_BIN to a built bitalign binary"
)
SEQS = [[5, 17, 33, 2, 71, 9, 40, 8, 60], [11, 64, 3, 3, 58], [90, 1, 2, 44, 45, 46, 47]]
REL = 1e-5


def rows(path):
    """{(op, role, seq, pos): float64 row} of a capture file or a directory of rank files."""
    files = sorted(glob.glob(os.path.join(path, "*.arrow"))) if os.path.isdir(path) else [path]
    out = {}
    for f in files:
        for t in bc.read(f)[1]:
            if t["dtype"] == "bf16":
                a = (t["array"].astype(np.uint32) << 16).view(np.float32)
            else:
                a = t["array"]
            for i in range(max(t["ntok"], 1)):
                out[(t["op"], t["role"], t["seq"], t["pos"] + i)] = a[i].astype(np.float64)
    return out


def replay(checkpoint, cap, out):
    r = subprocess.run(
        [BIN, "replay", "--checkpoint", str(checkpoint), "--capture", str(cap), "--save", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # 0: identical, 1: divergent (float32 transformers is not bitwise the engine), 2: error
    assert r.returncode in (0, 1), f"bitalign replay exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert os.path.exists(out), r.stdout + r.stderr
    return r


def compare(captured, replayed):
    """{op: relative error}; fails on ops missing from the replay and on logits whose argmax differs."""
    errs, num, den = {}, {}, {}
    for k, b in captured.items():
        op = k[0]
        if op in ("tokens", "sample") or k[1] != "out":
            continue
        assert k in replayed, f"{k} is not in the replay"
        a = replayed[k]
        assert a.shape == b.shape, (k, a.shape, b.shape)
        num[op] = max(num.get(op, 0.0), float(np.max(np.abs(a - b))))
        den[op] = max(den.get(op, 0.0), float(np.max(np.abs(b))))
        if op == "logits":
            assert int(np.argmax(a)) == int(np.argmax(b)), f"argmax of logits differs at {k}"
    for op in num:
        errs[op] = num[op] / den[op] if den[op] else num[op]
    return errs


@needs_bin
@pytest.mark.parametrize(
    "arch, tied, shard",
    [
        ("llama", False, None),
        ("qwen2", False, None),
        ("qwen3", False, None),
        ("llama", True, "40KB"),
        ("qwen3", True, None),
    ],
)
def test_replay_matches_transformers(tmp_path, arch, tied, shard):
    m = hf_model(arch, tied=tied)
    ck = tmp_path / "checkpoint"
    kw = {"max_shard_size": shard} if shard else {}
    m.save_pretrained(ck, safe_serialization=True, **kw)
    if shard:
        assert (ck / "model.safetensors.index.json").exists()
    ids, mask, pos = padded(SEQS, "left")
    cap = tmp_path / "hf.arrow"
    with torch.no_grad(), bc.record(m, cap, "trainer", final_tokens={0: 7, 1: 8, 2: 9}):
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
    out = tmp_path / "replay.arrow"
    replay(ck, cap, out)
    errs = compare(rows(str(cap)), rows(str(out)))
    captured_ops = {k[0] for k in rows(str(cap))} - {"tokens", "sample"}
    assert set(errs) == captured_ops
    bad = {op: e for op, e in errs.items() if not e < REL}
    assert not bad, f"relative error above {REL}: {bad}"


@needs_bin
def test_replay_detects_a_wrong_checkpoint(tmp_path):
    """The comparison can fail: replaying against other weights breaks the bound at the first op."""
    m = hf_model("llama", seed=0)
    other = hf_model("llama", seed=1)
    other.save_pretrained(tmp_path / "ck", safe_serialization=True)
    ids, mask, pos = padded(SEQS, "left")
    cap = tmp_path / "hf.arrow"
    with torch.no_grad(), bc.record(m, cap, "trainer"):
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
    out = tmp_path / "replay.arrow"
    replay(tmp_path / "ck", cap, out)
    c, r = rows(str(cap)), rows(str(out))
    errs = [float(np.max(np.abs(r[k] - v))) for k, v in c.items() if k[0] == "embed"]
    assert errs and max(errs) > 1e-3
