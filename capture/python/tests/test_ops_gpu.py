"""bitalign.ops on a GPU: every op of kernels/testdata/op_vectors.tsv, run through the PTX from PyTorch, gives the
Go CPU reference's bits (the sha256 of its output). Needs torch with CUDA and cuda-bindings; skips otherwise."""

import numpy as np
import pytest

from opvectors import digest, rows, stream

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bitalign.ops runs the PTX)"),
]


def _t(a, dtype=None):
    return torch.from_numpy(np.ascontiguousarray(a)).to("cuda") if dtype is None else torch.tensor(a, dtype=dtype, device="cuda")


def _run(op, kv):
    from bitalign import ops

    dt = kv.get("dt")
    p = kv.get("profile", "canonical")
    if op == "linear":
        M, K, N = int(kv["M"]), int(kv["K"]), int(kv["N"])
        x, w = _t(stream(1, M * K, 6).reshape(M, K)), _t(stream(2, N * K, 10).reshape(N, K))
        b = _t(stream(3, N, 8)) if kv["bias"] == "true" else None
        return ops.linear(x, w, b, p, dt)
    if op == "linear_partial":
        M, K, N, tp, r = (int(kv[k]) for k in ("M", "K", "N", "tp", "rank"))
        kl = K // tp
        x = stream(1, M * K, 6).reshape(M, K)[:, r * kl:(r + 1) * kl]
        w = stream(2, N * K, 10).reshape(N, K)[:, r * kl:(r + 1) * kl]
        return ops.linear_partial(_t(x), _t(w), tp, p)
    if op == "rms_norm":
        r, C = int(kv["rows"]), int(kv["C"])
        return ops.rms_norm(_t(stream(4, r * C, 6).reshape(r, C)), _t(stream(5, C, 7)), float(np.float32(1e-6)), p, dt)
    if op == "attention":
        T, S, nh, nkv, hd = (int(kv[k]) for k in ("T", "S", "nh", "nkv", "hd"))
        q = _t(stream(8, T * nh * hd, 6).reshape(T, nh * hd))
        k, v = (_t(stream(s, S * nkv * hd, 6).reshape(S, nkv * hd)) for s in (9, 10))
        pos = _t(np.arange(S - T, S, dtype=np.int32))
        scale = float(np.float32(1 / np.sqrt(np.float64(hd))))
        return ops.attention(q, k, v, pos, nh, nkv, hd, scale, p, dt)
    if op in ("log_softmax", "logprobs"):
        T, V = int(kv["T"]), int(kv["V"])
        lg = _t(stream(14, T * V, 5).reshape(T, V))
        if op == "log_softmax":
            return ops.log_softmax(lg, p)
        return ops.logprobs(lg, _t(np.array([(i * 17) % V for i in range(T)], dtype=np.int32)), p)
    if op in ("residual", "swiglu"):
        n = int(kv["n"])
        return getattr(ops, op)(_t(stream(6, n, 6)), _t(stream(7, n, 6)), dt)
    if op == "rope":
        T, heads, hd, mp = int(kv["T"]), int(kv["heads"]), int(kv["hd"]), int(kv["maxPos"])
        x = _t(stream(11, T * heads * hd, 6).reshape(T, heads * hd))
        cos, sin = (_t(stream(s, mp * hd // 2, 7).reshape(mp, hd // 2)) for s in (12, 13))
        return ops.rope(x, _t(np.array([0, 1, 7, 20, 38, 39], dtype=np.int32)), cos, sin, heads, hd, dt)
    if op == "embedding":
        V, C, T = int(kv["V"]), int(kv["C"]), int(kv["T"])
        tokens = _t(np.array([(i * 31) % V for i in range(T)], dtype=np.int32))
        return ops.embedding(_t(stream(15, V * C, 6).reshape(V, C)), tokens, dt)
    if op == "sample":
        T, V = int(kv["T"]), int(kv["V"])
        lg = _t(stream(16, T * V, 5).reshape(T, V))
        seqs = _t(np.arange(1000, 1000 + T, dtype=np.int64))
        pos = _t(np.arange(0, 5 * T, 5, dtype=np.int64))
        return ops.sample(lg, seqs, pos, float(kv["temperature"]), int(kv["seed"]))
    raise AssertionError(op)


@pytest.mark.parametrize("row", [r for r in rows() if r[0] != "input"], ids=lambda r: f"{r[0]} {r[1]}")
def test_op_matches_the_go_reference(row):
    op, params, kv, want = row
    got = _run(op, kv)
    torch.cuda.synchronize()
    assert digest(got.cpu().numpy()) == want, f"{op} {params}: the GPU's bits differ from the Go reference's"


def _chain(x, w_norm, w1, w2, targets, profile="canonical"):
    """A forward's op chain on bitalign.ops: norm, two linears, SwiGLU, residual, log-softmax, logprobs."""
    from bitalign import ops

    h = ops.rms_norm(x, w_norm, float(torch.tensor(1e-6, dtype=torch.float32)), profile, "bf16")
    g = ops.linear(h, w1, None, profile, "bf16")
    u = ops.linear(h, w2, None, profile, "bf16")
    a = ops.swiglu(g, u, "bf16")
    r = ops.residual(x, a, "bf16")
    return ops.log_softmax(r, profile), ops.logprobs(r, targets, profile)


def _chain_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    M, C = 24, 256
    bf = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16).float().cuda()  # noqa: E731
    return bf(M, C), bf(C), bf(C, C) / 16, bf(C, C) / 16, torch.randint(0, C, (M,), generator=g, dtype=torch.int32).cuda()


def test_ops_replay_bitwise_inside_a_cuda_graph():
    """The ops launch on the current stream with PyTorch's allocator, so a captured CUDA graph replays them: new
    inputs copied into the captured buffers give the eager bits."""
    static = [t.clone() for t in _chain_inputs(1)]
    _chain(*static)  # loads the PTX and warms the allocator outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _chain(*static)
    for seed in (2, 3):
        fresh = _chain_inputs(seed)
        for s, f in zip(static, fresh):
            s.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        for name, got, want in zip(("log_softmax", "logprobs"), outs, _chain(*fresh)):
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), f"{name} after graph replay (seed {seed})"


def test_ops_compiled_equal_eager():
    """torch.compile(fullgraph=True) on the GPU: the custom ops are opaque to inductor, so the compiled chain gives
    the eager bits."""
    inputs = _chain_inputs(4)
    compiled = torch.compile(_chain, fullgraph=True)
    for got, want in zip(compiled(*inputs), _chain(*inputs)):
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


# --- top-k and top-p (kernels/testdata/topkp_vectors.tsv) -------------------------------------------------------


def test_sample_top_k_top_p_matches_the_go_reference():
    """ops.sample with top_k and top_p on the GPU (ops.restrict on the device and the host, then the sample kernel)
    draws every token kernels.Sample drew: Qwen2-sized rows with ties at the top, NaN and ±Inf, small rows of NaN,
    ±Inf, signed zeros and ties, greedy, a subnormal temperature."""
    from bitalign import ops
    from topkpvectors import expected, keys, logits, rows

    table = rows()
    cache, bad = {}, []
    for spec, V, T, temp, k, p, seed, want, kept in table:
        if (spec, T, V) not in cache:
            cache = {(spec, T, V): _t(logits(spec, T, V))}
        seqs, poss = keys(T)
        got = ops.sample(cache[(spec, T, V)], _t(seqs), _t(poss), temp, seed, k, p).cpu().tolist()
        same = True
        if temp > 0 and (k or p < 1):  # restrict()'s row on the GPU: bit for bit the kept set of sampling.kept
            cut = ops.restrict(cache[(spec, T, V)], temp, k, p).cpu().numpy()
            x = cache[(spec, T, V)].cpu().numpy()
            same = all(np.array_equal(cut[r].view(np.uint32), expected(x[r], temp, k, p).view(np.uint32)) for r in range(T))
        if got != want or not same:
            bad.append((spec[:40], V, temp, k, p, got, want, same))
    assert not bad, f"{len(bad)} of {len(table)} lines differ from the Go reference, first {bad[0]}"


def test_temperature_division_is_ieee_on_the_gpu():
    """z = x ⊘ T on CUDA is numpy's float32 division bit for bit (PyTorch divides by a CPU scalar through its
    reciprocal; ops._scaled divides by a device tensor)."""
    from bitalign import ops

    x = np.random.default_rng(3).normal(0, 30, 1 << 20).astype(np.float32)
    for t in (0.7, 0.3, 1.3, 3.0, 1e-40):
        got = ops._scaled(_t(x)[None, :], float(np.float32(t))).cpu().numpy()[0]
        with np.errstate(over="ignore"):
            want = x / np.float32(t)
        d = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        assert d.size == 0, f"T = {t}: {d.size} differ, first at {d[0]}: {got[d[0]]!r} vs {want[d[0]]!r}"


def test_top_k_inside_a_cuda_graph_top_p_refused():
    """top-k alone is device work (sort, scatter, the kernel): a captured graph replays it with the eager tokens.
    top-p's host walk cannot be captured and says so."""
    from bitalign import ops

    g = torch.Generator().manual_seed(5)
    x = (torch.randn(4, 151936, generator=g) * 3).cuda()
    seqs, pos = torch.arange(4, dtype=torch.int64).cuda(), torch.arange(4, dtype=torch.int64).cuda() * 3
    ops.sample(x, seqs, pos, 0.8, 11, 50)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.sample(x, seqs, pos, 0.8, 11, 50)
    for s in (6, 7):
        x.copy_((torch.randn(4, 151936, generator=torch.Generator().manual_seed(s)) * 3).cuda())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, ops.sample(x, seqs, pos, 0.8, 11, 50)), f"top-k after graph replay (seed {s})"
    with pytest.raises(ValueError, match="CUDA graph capture"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ops.sample(x, seqs, pos, 0.8, 11, 50, 0.9)


def _tp_linear_rows():
    return [(params, kv, tp, h) for op, params, kv, h in rows()
            if op == "linear" and kv["profile"] == "canonical" and int(kv["K"]) % 8 == 0 for tp in (2, 4, 8)]


@pytest.mark.parametrize("case", _tp_linear_rows(), ids=lambda c: f"{c[0]} tp={c[2]}")
def test_rank_partials_finished_are_the_go_linear(case):
    """bitalign.tp's row-parallel arithmetic on one GPU: every rank's ops.linear_partial, stacked in rank order
    (what all_gather gives), then ops.linear_finish (the tree over ranks, bias, rounding): the Go linear's bits."""
    from bitalign import ops

    params, kv, tp, want = case
    M, K, N = int(kv["M"]), int(kv["K"]), int(kv["N"])
    x, w = stream(1, M * K, 6).reshape(M, K), stream(2, N * K, 10).reshape(N, K)
    b = _t(stream(3, N, 8)) if kv["bias"] == "true" else None
    kl = K // tp
    parts = torch.stack([ops.linear_partial(_t(x[:, r * kl:(r + 1) * kl]), _t(w[:, r * kl:(r + 1) * kl]), tp,
                                            "canonical") for r in range(tp)])
    got = ops.linear_finish(parts, b, "canonical", kv["dt"])
    torch.cuda.synchronize()
    assert digest(got.cpu().numpy()) == want, f"{params} tp={tp}"


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("row", [r for r in rows() if r[0] in ("log_softmax", "logprobs")
                                 and r[2]["profile"] == "canonical"], ids=lambda r: r[0] + " " + r[1])
def test_vocab_parallel_stages_are_the_go_bits(row, tp):
    """The vocab-parallel log-softmax stages on one GPU, each rank's shard in turn, combined as bitalign.tp
    combines the gathered values (max tree, sum tree, target tree): the Go bits of the whole rows."""
    from bitalign import ops, tp as btp

    op, params, kv, want = row
    T, V = int(kv["T"]), int(kv["V"])
    lg = stream(14, T * V, 5).reshape(T, V)
    vl = V // tp
    shards = [_t(lg[:, r * vl:(r + 1) * vl]) for r in range(tp)]
    m = btp.max_tree(torch.stack([ops.log_softmax_max(s) for s in shards]))
    S = btp.tree(torch.stack([ops.log_softmax_sum(s, m, tp, "canonical") for s in shards]))
    if op == "log_softmax":
        got = torch.cat([ops.log_softmax_finish(s, m, S) for s in shards], 1)
    else:
        targets = _t(np.array([(i * 17) % V for i in range(T)], dtype=np.int32))
        d = btp.tree(torch.stack([ops.logprob_target(s, targets, m, r * vl) for r, s in enumerate(shards)]))
        got = ops.logprob_finish(d, S)
    torch.cuda.synchronize()
    assert digest(got.contiguous().cpu().numpy()) == want, f"{params} tp={tp}"
