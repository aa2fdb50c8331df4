"""bitalign.cpu, the exact CPU twins of the kernels a tensor-parallel layer needs, against the Go reference's bits
(kernels/testdata/op_vectors.tsv): the linear (MatmulForward) rows, each rank's row-parallel partial
(MatmulPartial), every rank's partials added by the tree and finished equal to the whole linear, and the
log-softmax and logprobs rows. The standard profile's rows are run through the same code: they have other
hashes, so a twin that ignored the profile would fail."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from bitalign import cpu  # noqa: E402
from opvectors import digest, rows, stream  # noqa: E402


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _linear_inputs(kv):
    M, K, N = int(kv["M"]), int(kv["K"]), int(kv["N"])
    return M, K, N, _t(stream(1, M * K, 6).reshape(M, K)), _t(stream(2, N * K, 10).reshape(N, K))


def _hash(t):
    return digest(t.contiguous().numpy())


def _first_diff(got, want):
    g, w = got.view(torch.int32).flatten(), want.view(torch.int32).flatten()
    bad = (g != w).nonzero()
    return None if not len(bad) else int(bad[0, 0])


SMALL = lambda r: int(r[2].get("M", 0)) * int(r[2].get("K", 0)) <= 300 * 1536  # noqa: E731


@pytest.mark.parametrize("row", [r for r in rows() if r[0] == "linear"], ids=lambda r: r[1])
def test_linear_matches_go(row):
    _, params, kv, want = row
    M, K, N, x, w = _linear_inputs(kv)
    b = _t(stream(3, N, 8)) if kv["bias"] == "true" else None
    assert _hash(cpu.linear(x, w, b, kv["profile"], kv["dt"])) == want, params


@pytest.mark.parametrize("row", [r for r in rows() if r[0] == "linear_partial"], ids=lambda r: r[1])
def test_linear_partial_matches_go(row):
    _, params, kv, want = row
    M, K, N, x, w = _linear_inputs(kv)
    tp, r = int(kv["tp"]), int(kv["rank"])
    kl = K // tp
    got = cpu.linear_partial(x[:, r * kl:(r + 1) * kl].contiguous(), w[:, r * kl:(r + 1) * kl].contiguous(), tp,
                             kv["profile"])
    assert _hash(got) == want, params


def _tp_rows():
    out = []
    for op, params, kv, want in rows():
        if op == "linear" and kv["profile"] == "canonical" and int(kv["K"]) % 8 == 0:
            for tp in (2, 4, 8):
                out.append((params, kv, tp, want))
    return out


@pytest.mark.parametrize("case", _tp_rows(), ids=lambda c: f"{c[0]} tp={c[2]}")
def test_rank_partials_by_the_tree_are_the_whole_linear(case):
    """Every rank's MatmulPartial, the tree over ranks (the exchange's order), then bias and rounding: the Go
    MatmulForward's bits at every degree."""
    params, kv, tp, want = case
    M, K, N, x, w = _linear_inputs(kv)
    b = _t(stream(3, N, 8)) if kv["bias"] == "true" else None
    kl = K // tp
    parts = torch.stack([cpu.linear_partial(x[:, r * kl:(r + 1) * kl].contiguous(),
                                            w[:, r * kl:(r + 1) * kl].contiguous(), tp, "canonical")
                         for r in range(tp)])
    assert _hash(cpu.finish(cpu.tree(parts), b, kv["dt"])) == want, params
    # the control: the ranks' partials added left to right (a ring's order at this rank) are other bits at tp ≥ 4
    # somewhere in the table (checked over all rows in test_left_to_right_differs)


def test_left_to_right_differs():
    """The same partials added left to right (what a ring all-reduce does at some element) instead of by the
    tree: some element of some row differs from Go's bits, so the tree test above can fail."""
    differ = 0
    for params, kv, tp, want in _tp_rows():
        if tp < 4 or kv["dt"] != "f32" or int(kv["M"]) * int(kv["K"]) > 17 * 4096:
            continue
        M, K, N, x, w = _linear_inputs(kv)
        kl = K // tp
        parts = [cpu.linear_partial(x[:, r * kl:(r + 1) * kl].contiguous(), w[:, r * kl:(r + 1) * kl].contiguous(),
                                    tp, "canonical") for r in range(tp)]
        s = parts[0]
        for p in parts[1:]:
            s = s + p
        differ += _hash(cpu.finish(s, None, "f32")) != _hash(cpu.finish(cpu.tree(torch.stack(parts)), None, "f32"))
    assert differ > 0


def test_tree_order():
    """The tree adds adjacent pairs level by level: on values where every order gives other bits, it is the
    contract's ((p0⊕p1)⊕(p2⊕p3))⊕((p4⊕p5)⊕(p6⊕p7)) written out."""
    p = torch.tensor([1.0, 2.0 ** -24, 2.0 ** -24, 2.0 ** -24, -1.0, 2.0 ** -25, 3.0, 2.0 ** -23], dtype=torch.float32)
    f = np.float32
    a = [f(v) for v in p.tolist()]
    want = f(f(f(a[0] + a[1]) + f(a[2] + a[3])) + f(f(a[4] + a[5]) + f(a[6] + a[7])))
    assert cpu.tree(p[:, None])[0].item() == want
    assert cpu.tree(p[:2, None])[0].item() == f(a[0] + a[1])
    with pytest.raises(ValueError, match="power of two"):
        cpu.tree(p[:3])


# the standard profile's rows of V = 151936 are one chain of 151936 adds (20 s each in Python): its V = 1000 rows
# cover the standard path
@pytest.mark.parametrize("row", [r for r in rows() if r[0] in ("log_softmax", "logprobs")
                                 and not (r[2]["profile"] == "standard" and int(r[2]["V"]) > 1000)],
                         ids=lambda r: r[0] + " " + r[1])
def test_log_softmax_matches_go(row):
    op, params, kv, want = row
    T, V = int(kv["T"]), int(kv["V"])
    lg = _t(stream(14, T * V, 5).reshape(T, V))
    if op == "log_softmax":
        got = cpu.log_softmax(lg, kv["profile"])
    else:
        got = cpu.logprobs(lg, torch.tensor([(i * 17) % V for i in range(T)], dtype=torch.int32), kv["profile"])
    assert _hash(got) == want, params


def test_fma32_single_rounding():
    """fma32 rounds once where a float32 multiply then add rounds twice, and where the float64 sum's own rounding
    would land on a float32 halfway point (the case kernels.FMA32 corrects by round-to-odd)."""
    a = torch.tensor([1 + 2.0 ** -12], dtype=torch.float32)
    c = torch.tensor([-1.0], dtype=torch.float32)
    # (1+2^-12)^2 - 1 = 2^-11 + 2^-24 exactly: float32 multiply first loses 2^-24
    assert cpu.fma32(a, a, c).item() == 2.0 ** -11 + 2.0 ** -24
    assert (a * a + c).item() == 2.0 ** -11
    # a·b = 1 + 2^-11 + 2^-24 (exact in float64), c = 2^-100 (docs/arithmetic.md's example): the exact sum lies
    # just above the float32 halfway point 1 + 2^-11 + 2^-24; the float64 sum rounds onto it and a second
    # rounding goes to even (down), one rounding goes up
    x = torch.tensor([1 + 2.0 ** -12], dtype=torch.float32)
    got = cpu.fma32(x, x, torch.tensor([2.0 ** -100], dtype=torch.float32)).item()
    assert got == 1 + 2.0 ** -11 + 2.0 ** -23
    twice = float(np.float32(np.float64(x.item()) * np.float64(x.item()) + 2.0 ** -100))
    assert twice != got


def test_exp_log_special_values():
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 88.7228317, 89.0, -104.5, -103.0],
                     dtype=torch.float32)
    e = cpu.exp(x)
    assert e[0].item() == 1.0 and e[1].item() == 1.0 and e[2].item() == float("inf") and e[3].item() == 0.0
    assert np.isnan(e[4].item()) and np.isfinite(e[5].item()) and e[6].item() == float("inf") and e[7].item() == 0.0
    assert 0 < e[8].item() < 2.0 ** -126  # subnormal
    l = cpu.log(torch.tensor([1.0, 0.0, -0.0, -1.0, float("inf"), 2.0 ** -140], dtype=torch.float32))
    assert l[0].item() == 0.0 and l[1].item() == float("-inf") and l[2].item() == float("-inf")
    assert l[3].view(torch.int32).item() == 0x7FC00000 and l[4].item() == float("inf")
    assert abs(l[5].item() - (-140 * np.log(2))) < 1e-4


def test_round_dt():
    x = torch.tensor([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, float("nan"), 3.4e38, 1e-40, 65520.0, 2.0 ** -20],
                     dtype=torch.float32)
    bf = cpu.round_dt(x, "bf16")
    assert bf[0].item() == 1.0 and bf[1].item() == 1 + 2.0 ** -6  # ties to even
    assert bf[2].view(torch.int32).item() == 0x7FC00000
    assert torch.equal(bf[[0, 1, 3, 4]], x[[0, 1, 3, 4]].to(torch.bfloat16).float())
    h = cpu.round_dt(x, "f16")
    assert h[5].item() == float("inf") and h[6].item() == 2.0 ** -20
    assert torch.equal(h[[0, 1, 4, 6]], x[[0, 1, 4, 6]].to(torch.float16).float())
    assert cpu.round_dt(x, "f32")[2].view(torch.int32).item() == 0x7FC00000
    with pytest.raises(ValueError, match="out_dtype"):
        cpu.round_dt(x, "fp8")


def test_exact_fma_path_gives_the_same_bits(monkeypatch):
    """On bf16 operands the chains take one float32 add per product; forced through fma32 (the path of operands
    that are not bf16) a row gives the same Go bits, and a non-bf16 input really takes that path."""
    row = next(r for r in rows() if r[0] == "linear_partial" and "M=17" in r[1] and "tp=2 rank=1" in r[1]
               and "canonical" in r[1])
    _, params, kv, want = row
    M, K, N, x, w = _linear_inputs(kv)
    monkeypatch.setattr(cpu, "exact_products", lambda *t: False)
    kl = K // 2
    got = cpu.linear_partial(x[:, kl:].contiguous(), w[:, kl:].contiguous(), 2, "canonical")
    assert _hash(got) == want, params
    monkeypatch.undo()
    assert cpu.exact_products(x, w)
    assert not cpu.exact_products(x + 2.0 ** -20)
    assert not cpu.exact_products(torch.tensor([2.0 ** 70]))


@pytest.mark.parametrize("row", [r for r in rows() if r[0] in ("rms_norm", "residual", "swiglu")
                                 and r[2].get("profile", "canonical") == "canonical"], ids=lambda r: r[0] + " " + r[1])
def test_elementwise_and_norm_match_go(row):
    op, params, kv, want = row
    if op == "rms_norm":
        r, C = int(kv["rows"]), int(kv["C"])
        got = cpu.rms_norm(_t(stream(4, r * C, 6).reshape(r, C)), _t(stream(5, C, 7)), float(np.float32(1e-6)),
                           "canonical", kv["dt"])
    else:
        n = int(kv["n"])
        got = getattr(cpu, op)(_t(stream(6, n, 6)), _t(stream(7, n, 6)), kv["dt"])
    assert _hash(got) == want, params


@pytest.mark.parametrize("row", [r for r in rows() if r[0] == "attention" and r[2]["profile"] == "canonical"],
                         ids=lambda r: r[1])
def test_attention_matches_go(row):
    _, params, kv, want = row
    T, S, nh, nkv, hd = (int(kv[k]) for k in ("T", "S", "nh", "nkv", "hd"))
    q = _t(stream(8, T * nh * hd, 6).reshape(T, nh * hd))
    k, v = (_t(stream(s, S * nkv * hd, 6).reshape(S, nkv * hd)) for s in (9, 10))
    pos = torch.arange(S - T, S, dtype=torch.int32)
    scale = float(np.float32(1 / np.sqrt(np.float64(hd))))
    assert _hash(cpu.attention(q, k, v, pos, nh, nkv, hd, scale, "canonical", kv["dt"])) == want, params


@pytest.mark.parametrize("row", [r for r in rows() if r[0] == "sample"], ids=lambda r: r[1])
def test_sample_matches_go(row):
    _, params, kv, want = row
    T, V = int(kv["T"]), int(kv["V"])
    lg = _t(stream(16, T * V, 5).reshape(T, V))
    seqs, pos = torch.arange(1000, 1000 + T), torch.arange(0, 5 * T, 5)
    got = cpu.sample(lg, seqs, pos, float(kv["temperature"]), int(kv["seed"]))
    assert digest(got.numpy()) == want, params
