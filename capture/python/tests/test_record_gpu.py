"""Fingerprint recording on a GPU: fingerprints.fingerprint_sets launches the repository's fingerprint_rows
(kernels/cuda/fingerprint.cu through bitalign.driver) and gives numpy's fingerprint of every row, for rows of any
length and alignment; a recorder's fingerprint capture is the same bytes through the kernel and through the torch
expression. Needs torch with CUDA and cuda-bindings; skips otherwise (`bash scripts/gpu.sh record` runs it)."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (fingerprint_rows runs the PTX)"),
]

import bitalign_capture as bc  # noqa: E402
from bitalign_capture import fingerprints as fpm  # noqa: E402

CREATED = "2026-01-01T00:00:00.000000Z"


def test_the_kernel_is_used():
    assert fpm.backend(torch.device("cuda")) == ("kernel", "")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int32, torch.uint8, torch.bool])
def test_fingerprint_sets_kernel_is_numpys(dtype):
    """Many tensors in one launch: row lengths from 1 byte to a logits row, row starts 16-byte, 4-byte and
    1-byte aligned (a view at an odd byte offset), rows at a stride larger than the row."""
    g = np.random.default_rng(3)
    xs, want = [], []
    for n, f, skip in [(3, 5, 0), (1, 1, 0), (7, 1536, 0), (2, 8960, 1), (4, 151936, 0), (5, 3, 3), (64, 17, 1),
                       (1000, 64, 0), (2, 0, 0)]:
        base = torch.from_numpy(g.integers(0, 250, size=(n, f + skip + 2)).astype(np.float32))
        base = base > 120 if dtype == torch.bool else base.to(dtype)
        t = base[:, skip : skip + f]  # rows contiguous inside, at a stride of f + skip + 2 elements
        xs.append(t.cuda() if skip == 0 else base.cuda()[:, skip : skip + f])
        want.append(bc.fingerprint_rows(t.contiguous().view(torch.uint8).numpy().reshape(n, -1), n))
    got = fpm.fingerprint_sets(xs)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy().view(np.uint64), np.concatenate(want))
    # the torch expression agrees (the fallback where the driver is unavailable)
    np.testing.assert_array_equal(torch.cat([fpm.fingerprint_rows_torch(x) for x in xs]).cpu().numpy().view(np.uint64),
                                  np.concatenate(want))


def test_recorded_capture_is_the_same_through_the_kernel_and_torch(tmp_path, monkeypatch):
    from tinymodels import hf_model

    m = hf_model("qwen2", torch.bfloat16).cuda()
    ids = torch.randint(1, 64, (3, 9), generator=torch.Generator().manual_seed(1)).cuda()
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding: rows the kernel fingerprints and the capture leaves out
    paths = {}
    for backend in ("kernel", "torch"):
        if backend == "torch":
            monkeypatch.setenv(fpm.BACKEND_ENV, "torch")
        assert fpm.backend(ids.device)[0] == backend
        paths[backend] = tmp_path / f"{backend}.arrow"
        with torch.no_grad(), bc.record(m, paths[backend], "trainer", mode="fingerprint", created=CREATED,
                                        full_ops=["logits"]) as rec:
            for step, n in enumerate((9, 4)):
                rec.set_step(step)
                m(input_ids=ids[:, :n], attention_mask=mask[:, :n])
    assert paths["kernel"].read_bytes() == paths["torch"].read_bytes()
    assert os.path.getsize(paths["kernel"]) > 0
