import numpy as np
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")

import bitalign_capture as bc


def test_write_logprobs_from_torch(tmp_path):
    """torch tensors (bf16 log-probs widen exactly, a bool mask, int64 ids) are written as numpy would be."""
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 6, generator=g).to(torch.bfloat16)
    tok = torch.randint(0, 1000, (3, 6), generator=g)
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    p = bc.write_logprobs(tmp_path / "t.parquet", "trainer", torch.tensor([4, 5, 6]), tok, lp, mask=mask, start=torch.tensor([10, 11, 12]))
    rows = pq.read_table(p).to_pylist()
    assert [r["start"] for r in rows] == [10, 11, 12]
    want = lp.float().numpy()
    for i, r in enumerate(rows):
        m = mask[i].numpy()
        assert np.array_equal(np.asarray(r["logprobs"], np.float32).view(np.uint32), want[i][m].view(np.uint32))
        assert r["tokens"] == tok[i][m].tolist()
