"""Fingerprints computed with torch integer ops (the recorder's path) against the Go-written vectors, and
record(mode="fingerprint", full_ops=[...]) on a real Hugging Face model against a full recording."""

import os
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from test_fingerprint import vectors  # noqa: E402
from tinymodels import FusedModel, hf_model  # noqa: E402

BIN = os.environ.get("BITALIGN_BIN")
SEQS = [[5, 17, 33, 2, 71, 9, 40], [11, 64, 3, 3, 58, 7, 1]]


def test_torch_matches_go_vectors():
    # int64 multiply and sum wrap modulo 2^64 on this device (the CPU here; CUDA wraps the same way)
    for v in vectors():
        row = bytes.fromhex(v["hex"])
        if not row:
            continue
        t = torch.frombuffer(bytearray(row), dtype=torch.uint8).reshape(1, -1)
        assert int(bc.fingerprint_rows_torch(t)[0]) == int(v["fp_int64"]), v["name"]
        if v["dtype"] == "bf16":
            assert int(bc.fingerprint_rows_torch(t.view(torch.bfloat16))[0]) == int(v["fp_int64"]), v["name"]


def test_torch_rows_and_dtypes(rng):
    for dt in (torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.int32):
        x = torch.from_numpy(rng.standard_normal((6, 7)).astype(np.float32) * 100).to(dt)
        got = bc.fingerprint_rows_torch(x).numpy().view(np.uint64)
        want = bc.fingerprint_rows(x.contiguous().view(torch.uint8).numpy(), 6)
        np.testing.assert_array_equal(got, want, err_msg=str(dt))
    # a non-contiguous view fingerprints its values, not its storage
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    np.testing.assert_array_equal(bc.fingerprint_rows_torch(x[:, ::2]), bc.fingerprint_rows_torch(x[:, ::2].clone()))


def record(model, path, **kw):
    with torch.no_grad(), bc.record(model, path, "trainer", **kw):
        model(input_ids=torch.tensor(SEQS))
    return bc.read(path)[1]


def test_record_fingerprints_match_the_full_rows(tmp_path):
    m = hf_model("llama")
    full = record(m, tmp_path / "full.arrow")
    fp = record(m, tmp_path / "fp.arrow", mode="fingerprint", full_ops=["layers.1.mlp.*"])
    rows = {(t["op"], t["seq"], t["pos"]): t for t in full}
    fps = {(t["op"], t["role"], t["seq"], t["pos"]): t for t in fp}
    n = 0
    for (op, seq, pos), t in rows.items():
        if op in bc.fingerprints.ALWAYS_FULL:  # one value a token: kept in full
            assert (op, "out", seq, pos) in fps and (op, "fp.out", seq, pos) not in fps
            continue
        f = fps[(op, "fp.out", seq, pos)]
        assert f["dtype"] == "i64" and f["shape"] == [t["ntok"]] and f["ntok"] == t["ntok"]
        want = bc.fingerprint_rows(np.ascontiguousarray(t["array"]).view(np.uint8), t["ntok"])
        np.testing.assert_array_equal(f["array"].view(np.uint64), want, err_msg=op)
        assert ((op, "out", seq, pos) in fps) == op.startswith("layers.1.mlp."), op
        n += 1
    assert n > 20
    assert os.path.getsize(tmp_path / "fp.arrow") < os.path.getsize(tmp_path / "full.arrow")


@pytest.mark.parametrize("case", ["fused", "inference_mode", "twice"])
def test_every_watching_path_fingerprints_the_full_rows(tmp_path, case):
    """The fingerprints of each way a module's output is taken equal the full recording's rows: the lean wrapper
    of a plain output, the general one (a vLLM-style model's tuple outputs, fused splits and residual-returning
    norms), tensors without a version counter (torch.inference_mode: fingerprinted at once), and a module run
    twice in one forward (its first output kept)."""
    hf = hf_model("qwen2")
    if case == "fused":
        m = FusedModel(hf).eval()
        flat = torch.tensor(sum(SEQS, []))
        cu = torch.tensor(np.cumsum([0] + [len(s) for s in SEQS]))
        positions = torch.cat([torch.arange(len(s)) for s in SEQS])
        run = lambda: m(flat, positions, cu_seqlens=cu)  # noqa: E731
    else:
        m = hf
        run = lambda: m(input_ids=torch.tensor(SEQS))  # noqa: E731
        if case == "twice":  # gate_proj called again after the MLP, its output dropped
            mlp = m.model.layers[0].mlp
            mlp.register_forward_hook(lambda mod, a, out: [mod.gate_proj(a[0] * 2), None][1])
    ctx = torch.inference_mode if case == "inference_mode" else torch.no_grad
    caps = {}
    for mode in ("full", "fingerprint"):
        with ctx(), bc.record(m, tmp_path / f"{mode}.arrow", "trainer", mode=mode):
            run()
        caps[mode] = bc.read(tmp_path / f"{mode}.arrow")[1]
    fps = {(t["op"], t["seq"], t["pos"]): t for t in caps["fingerprint"] if t["role"] == "fp.out"}
    n = 0
    for t in caps["full"]:
        if t["op"] in bc.fingerprints.ALWAYS_FULL:
            continue
        f = fps.pop((t["op"], t["seq"], t["pos"]))
        want = bc.fingerprint_rows(np.ascontiguousarray(t["array"]).view(np.uint8), t["ntok"])
        np.testing.assert_array_equal(f["array"].view(np.uint64), want, err_msg=t["op"])
        n += 1
    assert not fps and n > 20


def test_record_mode_errors(tmp_path):
    m = hf_model("llama")
    with pytest.raises(ValueError, match="mode 'hash'"):
        bc.record(m, tmp_path / "x.arrow", "trainer", mode="hash")
    with pytest.raises(ValueError, match="full_ops needs 'fingerprint'"):
        bc.record(m, tmp_path / "x.arrow", "trainer", full_ops=["logits"])
    with pytest.raises(ValueError, match="not TP shards"):
        bc.record(m, tmp_path / "x.arrow", "trainer", mode="fingerprint", tp=2, rank=0)


@pytest.mark.skipif(not BIN, reason="BITALIGN_BIN is not set (make test-torch sets it)")
def test_bitalign_diff_locates_a_perturbed_op(tmp_path):
    m = hf_model("llama")
    a = tmp_path / "a.arrow"
    record(m, a, mode="fingerprint")
    with torch.no_grad():  # one weight element of layer 1's down_proj changes: its output differs from there
        m.model.layers[1].mlp.down_proj.weight[3, 5] += 1.0
    b = tmp_path / "b.arrow"
    record(m, b)
    out = subprocess.run([BIN, "diff", str(a), str(b)], capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "first divergence: layers.1.mlp.down_proj" in out.stdout, out.stdout
    assert 'full_ops=["layers.1.mlp.down_proj"' in out.stdout, out.stdout
