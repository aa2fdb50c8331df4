"""bitalign.tp's layers across CPU processes (torch.distributed, gloo), 2 and 4 ranks.

Each rank gets its shard of the op vectors' inputs (kernels/testdata/op_vectors.tsv, the Go reference's bits)
and runs the layer; the test then checks, bitwise (first differing index when not):

- row_parallel: every rank's output is the Go MatmulForward's bits (the linear rows' hashes) and the
  single-process tree over the same partials;
- row_parallel_sp: the ranks' row blocks are those rows of row_parallel, and gather_rows rebuilds it;
- column_parallel with gather_output: the whole linear;
- the vocab-parallel log_softmax and logprobs: the Go bits of the whole rows (log_softmax, logprobs rows);
- the control: the usual row-parallel linear (torch's bf16 matmul, then gloo's all_reduce of the bf16 partials)
  differs from its own TP 1 result, where the layers above do not.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")]

from bitalign import cpu, tp as btp  # noqa: E402
from opvectors import digest, rows, stream  # noqa: E402

LINEARS = [  # (M, K, N, bias, dt) of op_vectors.tsv's canonical linear rows
    (17, 4096, 64, True, "bf16"),
    (64, 256, 256, False, "f32"),
    (1, 64, 7, True, "f32"),
]
LOGITS = (3, 1000)


def _want(op, **kv):
    for o, params, have, h in rows():
        if o == op and all(have.get(k) == str(v).lower() for k, v in kv.items()):
            return h
    raise KeyError((op, kv))


def _linear_inputs(M, K, N, bias):
    x = torch.from_numpy(stream(1, M * K, 6).reshape(M, K))
    w = torch.from_numpy(stream(2, N * K, 10).reshape(N, K))
    b = torch.from_numpy(stream(3, N, 8)) if bias else None
    return x, w, b


def _worker(r, tp, init, out):
    dist.init_process_group("gloo", init_method=init, rank=r, world_size=tp)
    try:
        torch.set_num_threads(1)
        res = {}
        for M, K, N, bias, dt in LINEARS:
            x, w, b = _linear_inputs(M, K, N, bias)
            kl = K // tp
            xs, ws = x[:, r * kl:(r + 1) * kl].contiguous(), w[:, r * kl:(r + 1) * kl].contiguous()
            res[("row", M, K, N)] = btp.row_parallel(xs, ws, b, None, "canonical", dt)
            res[("partial", M, K, N)] = cpu.linear_partial(xs, ws, tp, "canonical")
            res[("row_standard", M, K, N)] = btp.row_parallel(xs, ws, b, None, "standard", dt)
            if M % tp == 0:
                blk = btp.row_parallel_sp(xs, ws, b, None, "canonical", dt)
                res[("sp", M, K, N)] = blk
                res[("sp_gathered", M, K, N)] = btp.gather_rows(blk)
            nl = N // tp if N % tp == 0 else None
            if nl:
                res[("col", M, K, N)] = btp.column_parallel(x, w[r * nl:(r + 1) * nl].contiguous(),
                                                            None if b is None else b[r * nl:(r + 1) * nl].contiguous(),
                                                            None, "canonical", dt, gather_output=True)
            # the control: torch's bf16 matmul of the rank's slice and gloo's all_reduce of the bf16 partials
            res[("allreduce", M, K, N)] = btp.row_parallel_allreduce(xs.bfloat16(), ws.bfloat16(),
                                                                     None if b is None else b.bfloat16()).float()
        T, V = LOGITS
        lg = torch.from_numpy(stream(14, T * V, 5).reshape(T, V))
        vl = V // tp
        shard = lg[:, r * vl:(r + 1) * vl].contiguous()
        targets = torch.tensor([(i * 17) % V for i in range(T)], dtype=torch.int32)
        res["log_softmax"] = btp.gather_columns(btp.log_softmax(shard))
        res["logprobs"] = btp.logprobs(shard, targets)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            btp.logprobs(shard, torch.tensor([0, V, 1], dtype=torch.int32))
        torch.save(res, os.path.join(out, f"rank{r}.pt"))
    finally:
        dist.destroy_process_group()


def _run(tmp_path, tp):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(tp, f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=tp, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(tp)]


def _same(got, want, what):
    g, w = got.contiguous().view(torch.int32).flatten(), want.contiguous().view(torch.int32).flatten()
    assert g.shape == w.shape, (what, g.shape, w.shape)
    bad = (g != w).nonzero()
    assert not len(bad), f"{what}: first difference at {int(bad[0, 0])}: {got.flatten()[bad[0, 0]]} vs {want.flatten()[bad[0, 0]]}"


def _hash(t):
    return digest(t.contiguous().numpy())


@pytest.fixture(scope="module", params=[2, 4], ids=lambda n: f"tp{n}")
def ranks(request, tmp_path_factory):
    tp = request.param
    return tp, _run(tmp_path_factory.mktemp(f"tp{tp}"), tp)


def test_row_parallel_is_the_go_linear_on_every_rank(ranks):
    tp, res = ranks
    for M, K, N, bias, dt in LINEARS:
        want = _want("linear", profile="canonical", dt=dt, M=M, K=K, N=N, bias=bias)
        for r in range(tp):
            assert _hash(res[r][("row", M, K, N)]) == want, (tp, r, M, K, N)
        # the same partials added in one process by the tree: the exchange adds nothing and loses nothing
        parts = torch.stack([res[r][("partial", M, K, N)] for r in range(tp)])
        _, _, b = _linear_inputs(M, K, N, bias)
        _same(res[0][("row", M, K, N)], cpu.linear_finish(parts, b, "canonical", dt), f"tree of {tp} partials")


def test_sequence_parallel_rows_are_row_parallel_rows(ranks):
    tp, res = ranks
    seen = 0
    for M, K, N, bias, dt in LINEARS:
        if M % tp:
            continue
        seen += 1
        full = res[0][("row", M, K, N)]
        for r in range(tp):
            _same(res[r][("sp", M, K, N)], full[r * (M // tp):(r + 1) * (M // tp)], f"SP rows of rank {r}")
            _same(res[r][("sp_gathered", M, K, N)], full, "SP gathered")
    assert seen


def test_column_parallel_gathered_is_the_whole_linear(ranks):
    tp, res = ranks
    for M, K, N, bias, dt in LINEARS:
        if N % tp == 0:
            want = _want("linear", profile="canonical", dt=dt, M=M, K=K, N=N, bias=bias)
            for r in range(tp):
                assert _hash(res[r][("col", M, K, N)]) == want


def test_vocab_parallel_log_softmax_is_the_go_bits(ranks):
    tp, res = ranks
    T, V = LOGITS
    for r in range(tp):
        assert _hash(res[r]["log_softmax"]) == _want("log_softmax", profile="canonical", T=T, V=V), r
        assert _hash(res[r]["logprobs"]) == _want("logprobs", profile="canonical", T=T, V=V), r


def test_allreduce_of_bf16_partials_differs_from_tp1(ranks):
    """The control: the usual row-parallel linear at this tp against the same code at TP 1 (torch's matmul of
    the whole bf16 x and w): some output differs, where row_parallel's never do."""
    tp, res = ranks
    differ = 0
    for M, K, N, bias, dt in LINEARS:
        x, w, b = _linear_inputs(M, K, N, bias)
        one = btp.row_parallel_allreduce(x.bfloat16(), w.bfloat16(), None if b is None else b.bfloat16()).float()
        got = res[0][("allreduce", M, K, N)]
        differ += int((got.view(torch.int32) != one.view(torch.int32)).sum())
    print(f"tp {tp}: the all_reduce of bf16 partials differs from TP 1 in {differ} outputs")
    assert differ > 0


def test_standard_profile_through_the_same_layer_differs(ranks):
    """The same row_parallel with the standard profile (one chain per rank, ranks added left to right: the
    engine's control) is not TP-invariant: at this tp some output differs from the standard linear at TP 1."""
    tp, res = ranks
    differ = 0
    for M, K, N, bias, dt in LINEARS:
        x, w, b = _linear_inputs(M, K, N, bias)
        one = cpu.linear(x, w, b, "standard", dt)
        for r in range(tp):
            _same(res[r][("row_standard", M, K, N)], res[0][("row_standard", M, K, N)], f"standard, rank {r}")
        differ += int((res[0][("row_standard", M, K, N)].view(torch.int32) != one.view(torch.int32)).sum())
    print(f"tp {tp}: the standard profile's row_parallel differs from its TP 1 in {differ} outputs")
    assert differ > 0
