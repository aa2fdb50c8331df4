"""bf16 transformers on a GPU is not batch-invariant: batch 1 and batch 16 captures of the same prompts differ,
and the first divergent op (in execution order) is a matmul (cuBLAS picks other kernels for other M).

Needs CUDA; the `bitalign diff` half also needs BITALIGN_BIN.
"""

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
BIN = os.environ.get("BITALIGN_BIN", "")
MATMULS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "logits")
B, S = 16, 8


def is_matmul(op):
    return op.endswith(MATMULS)


def captures(tmp_path, arch):
    m = hf_model(arch, torch.bfloat16, vocab=8192, hidden=2048, intermediate=5632, heads=16, kv_heads=4,
                 head_dim=128 if arch == "qwen3" else None, positions=64).cuda()
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(1, 8192, (B, S), generator=g).cuda()
    b1, b16 = tmp_path / "batch1.arrow", tmp_path / "batch16.arrow"
    with torch.no_grad(), bc.record(m, b1, "batch1", batch_size=1) as rec:
        for i in range(B):
            rec.batch(seq_ids=[i])
            m(input_ids=prompts[i : i + 1])
    with torch.no_grad(), bc.record(m, b16, "batch16", batch_size=B):
        m(input_ids=prompts)
    return b1, b16


def first_divergent_op(a_path, b_path):
    """The lowest-index op with any bit differing between the captures (same tensors on both sides)."""
    a = {(t["op"], t["seq"], t["pos"]): t for t in bc.read(a_path)[1]}
    b = {(t["op"], t["seq"], t["pos"]): t for t in bc.read(b_path)[1]}
    assert set(a) == set(b)
    bad = sorted((t["index"], k[0]) for k, t in a.items() if t["data"] != b[k]["data"])
    return bad[0][1] if bad else None


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def batch_captures(request, tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return captures(tmp_path_factory.mktemp(request.param), request.param)


@needs_cuda
def test_bf16_batch1_vs_batch16_first_divergence_is_a_matmul(batch_captures):
    first = first_divergent_op(*batch_captures)
    assert first is not None, "batch 1 and batch 16 agree bit for bit: cuBLAS was batch-invariant here"
    assert is_matmul(first), f"first divergent op {first} is not a matmul"


@needs_cuda
@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)), reason="set BITALIGN_BIN to a built bitalign binary")
def test_bitalign_diff_finds_the_same_first_divergence(batch_captures):
    rep = diff_json(*batch_captures)
    op = rep["first_divergence"]["op"]
    assert is_matmul(op), f"bitalign diff: first divergent op {op} is not a matmul"
    assert op == first_divergent_op(*batch_captures)


def diff_json(a, b):
    """`bitalign diff` of a and b as its JSON report (exit 1: divergent)."""
    for flags in (["--format", "json"], ["--json"]):
        r = subprocess.run([BIN, "diff", *flags, str(a), str(b)], capture_output=True, text=True, timeout=300)
        if r.returncode == 1 and r.stdout.lstrip().startswith("{"):
            return json.loads(r.stdout)
    raise AssertionError(f"bitalign diff: exit {r.returncode} (want 1: divergent)\n{r.stdout}\n{r.stderr}")
