"""bitalign.ops.sample's top-k and top-p without a GPU: ops.restrict (the device part of the kept set, the host
walk of sampling.nucleus) on CPU tensors, then the sample kernel's rule (Gumbel-max over every non-NaN logit of
the restricted row: sampling.draw with neither top-k nor top-p, the kernel's CPU twin), draws every token
kernels.Sample drew in kernels/testdata/topkp_vectors.tsv. That is the claim the GPU path rests on: cutting the
row to −Inf outside the kept set and running the existing kernel is §10's rule, ties, NaN, ±Inf and all −Inf
rows included. test_ops_gpu.py checks the same table through the real kernel."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from bitalign import ops, sampling  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from topkpvectors import expected, keys, logits, rows  # noqa: E402


def test_restrict_then_the_kernel_rule_reproduces_every_go_token():
    """Every token, and restrict's row itself bit for bit the kept set of sampling.kept (whose sizes
    test_sampling.py checks against the Go reference's)."""
    table = rows()
    cache, bad = {}, []
    for spec, V, T, temp, k, p, seed, want, _ in table:
        if (spec, T, V) not in cache:
            cache = {(spec, T, V): torch.from_numpy(logits(spec, T, V))}
        x = cache[(spec, T, V)]
        cut = ops.restrict(x, temp, k, p).numpy()
        seqs, poss = keys(T)
        got = [sampling.draw(cut[r], temp, 0, 1.0, seed, seqs[r], poss[r]) for r in range(T)]
        same = not temp > 0 or all(np.array_equal(cut[r].view(np.uint32), expected(x.numpy()[r], temp, k, p).view(np.uint32))
                                   for r in range(T))
        if got != want or not same:
            bad.append((spec[:40], V, temp, k, p, got, want, same))
    assert not bad, f"{len(bad)} of {len(table)} lines differ from the Go reference, first {bad[0]}"


def test_restrict_keeps_what_it_should():
    x = torch.tensor([[3.0, float("nan"), float("-inf"), 3.0, 2.5, -1e30, 1e30, 0.5]])
    inf = float("-inf")
    got = ops.restrict(x, 1.0, 2)  # the two largest: 1e30, then the first 3
    assert got[0].tolist()[2:] == [inf, inf, inf, inf, x[0, 6].item(), inf] and got[0, 0] == 3 and got[0, 1].isnan()
    assert ops.restrict(x, 1.0, 0, 1.0) is x and ops.restrict(x, 0.0, 2, 0.5) is x  # nothing cut; greedy
    assert ops.restrict(x, 1.0, 8) is x  # top_k >= V
    # top-p: 1e30 alone carries all the mass
    assert (ops.restrict(x, 1.0, 0, 0.5)[0] > inf).tolist() == [False, False, False, False, False, False, True, False]
    # NaN sums (an +Inf logit) keep the whole top-k set, as kernels.Sample
    y = torch.tensor([[float("inf"), 1.0, 0.0, -1.0]])
    assert (ops.restrict(y, 1.0, 3, 0.5)[0] > inf).tolist() == [True, True, True, False]


def test_scaled_is_ieee_division():
    """z = x ⊘ T bit for bit numpy's float32 division (not x times the reciprocal of T), on awkward T."""
    x = torch.from_numpy(np.random.default_rng(3).normal(0, 30, 100000).astype(np.float32))[None, :]
    for t in (0.7, 0.3, 1.3, 3.0, 1e-40):
        got = ops._scaled(x, np.float32(t)).numpy()
        with np.errstate(over="ignore"):
            want = x.numpy() / np.float32(t)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), t


def test_order_is_z_desc_index_asc():
    z = torch.tensor([[0.0, -0.0, float("nan"), 1.0, float("-inf"), 1.0, -0.0, float("inf"), -2.0]])
    assert ops._order(z)[0].tolist() == [7, 3, 5, 0, 1, 6, 8, 4, 2]


def test_fake_and_meta_with_top_k_top_p():
    m = lambda *s, dtype=torch.float32: torch.empty(*s, dtype=dtype, device="meta")  # noqa: E731
    out = ops.sample(m(3, 100), m(3, dtype=torch.int64), m(3, dtype=torch.int64), 0.7, 42, 50, 0.9)
    assert out.shape == (3,) and out.dtype == torch.int32 and out.device.type == "meta"
    with FakeTensorMode():
        c = lambda *s, dtype=torch.float32: torch.empty(*s, dtype=dtype, device="cuda")  # noqa: E731
        out = ops.sample(c(3, 100), c(3, dtype=torch.int64), c(3, dtype=torch.int64), 0.7, 42, top_k=5, top_p=0.5)
        assert out.shape == (3,) and out.device.type == "cuda"


def test_compiles_with_top_k_top_p():
    f = torch.compile(lambda x, s, p: ops.sample(x, s, p, 0.8, 7, 40, 0.95), fullgraph=True, backend="eager")
    m = torch.empty(2, 64, device="meta")
    assert f(m, torch.empty(2, dtype=torch.int64, device="meta"), torch.empty(2, dtype=torch.int64, device="meta")).shape == (2,)
