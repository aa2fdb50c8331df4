"""bitalign.ops without a GPU: every op is registered under torch.ops.bitalign with a fake implementation (shapes
and dtypes on fake CUDA tensors, torch.compile without graph breaks on meta tensors), and bad arguments are a
ValueError naming the op and the argument. The kernels' bits are test_ops_gpu.py's."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from bitalign import driver, ops  # noqa: E402

F32, I32, I64 = torch.float32, torch.int32, torch.int64


def _calls(dev):
    z = lambda *s, dtype=F32: torch.empty(*s, dtype=dtype, device=dev)  # noqa: E731
    return {
        "linear": (lambda: ops.linear(z(5, 64), z(32, 64), z(32), "canonical", "bf16"), (5, 32), F32),
        "rms_norm": (lambda: ops.rms_norm(z(3, 64), z(64), 1e-6, "canonical", "bf16"), (3, 64), F32),
        "rope": (lambda: ops.rope(z(4, 128), z(4, dtype=I32), z(16, 32), z(16, 32), 2, 64, "bf16"), (4, 128), F32),
        "attention": (lambda: ops.attention(z(3, 256), z(9, 128), z(9, 128), z(3, dtype=I32), 4, 2, 64, 0.125,
                                            "canonical", "bf16"), (3, 256), F32),
        "residual": (lambda: ops.residual(z(7, 5), z(7, 5), "bf16"), (7, 5), F32),
        "swiglu": (lambda: ops.swiglu(z(7, 5), z(7, 5), "bf16"), (7, 5), F32),
        "embedding": (lambda: ops.embedding(z(50, 16), z(6, dtype=I32), "bf16"), (6, 16), F32),
        "log_softmax": (lambda: ops.log_softmax(z(3, 100), "canonical"), (3, 100), F32),
        "logprobs": (lambda: ops.logprobs(z(3, 100), z(3, dtype=I32), "canonical"), (3,), F32),
        "sample": (lambda: ops.sample(z(3, 100), z(3, dtype=I64), z(3, dtype=I64), 0.7, 42), (3,), I32),
        "linear_partial": (lambda: ops.linear_partial(z(5, 32), z(24, 32), 2, "canonical"), (5, 24), F32),
        "linear_finish": (lambda: ops.linear_finish(z(4, 5, 24), z(24), "canonical", "bf16"), (5, 24), F32),
        "log_softmax_max": (lambda: ops.log_softmax_max(z(3, 50)), (3,), F32),
        "log_softmax_sum": (lambda: ops.log_softmax_sum(z(3, 50), z(3), 2, "canonical"), (3,), F32),
        "logprob_target": (lambda: ops.logprob_target(z(3, 50), z(3, dtype=I32), z(3), 50), (3,), F32),
        "logprob_finish": (lambda: ops.logprob_finish(z(3), z(3)), (3,), F32),
        "log_softmax_finish": (lambda: ops.log_softmax_finish(z(3, 50), z(3), z(3)), (3, 50), F32),
    }


def test_every_op_is_registered():
    for name in _calls("meta"):
        assert hasattr(torch.ops.bitalign, name), name


@pytest.mark.parametrize("name", sorted(_calls("meta")))
def test_fake_on_meta_and_fake_cuda(name):
    call, shape, dtype = _calls("meta")[name]
    out = call()
    assert out.device.type == "meta" and tuple(out.shape) == shape and out.dtype == dtype
    with FakeTensorMode(allow_non_fake_inputs=False):
        call, shape, dtype = _calls("cuda")[name]
        out = call()
        assert out.device.type == "cuda" and tuple(out.shape) == shape and out.dtype == dtype


def test_compiles_without_graph_breaks():
    def block(x, w1, w2, nw):
        h = ops.rms_norm(x, nw, 1e-6, "canonical", "bf16")
        g = ops.linear(h, w1, None, "canonical", "bf16")
        y = ops.linear(ops.swiglu(g, g, "bf16"), w2, None, "canonical", "bf16")
        return ops.residual(x, y, "bf16")

    m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    f = torch.compile(block, fullgraph=True, backend="eager")
    out = f(m(6, 64), m(128, 64), m(64, 128), m(64))
    assert out.shape == (6, 64) and out.device.type == "meta"


@pytest.mark.parametrize(
    "call,msg",
    [
        (lambda: ops.linear(torch.zeros(5, 64), torch.zeros(3, 64), None, "canonical", "bf16"),
         "linear: x is on cpu: bitalign's kernels run on CUDA tensors"),
        (lambda: ops.linear(torch.empty(5, 64, device="meta", dtype=torch.bfloat16), torch.empty(3, 64, device="meta"),
                            None, "canonical", "bf16"), "linear: x must be torch.float32, is torch.bfloat16"),
        (lambda: ops.linear(torch.empty(5, 64, device="meta"), torch.empty(3, 65, device="meta"), None, "canonical",
                            "bf16"), r"linear: w must have shape \(\*, 64\), has \(3, 65\)"),
        (lambda: ops.linear(torch.empty(64, 5, device="meta").t(), torch.empty(3, 64, device="meta"), None,
                            "canonical", "bf16"), "linear: x must be contiguous"),
        (lambda: ops.linear(torch.empty(5, 64, device="meta"), torch.empty(3, 64, device="meta"), None, "fast",
                            "bf16"), "profile must be 'canonical' or 'standard'"),
        (lambda: ops.linear(torch.empty(5, 64, device="meta"), torch.empty(3, 64, device="meta"), None, "canonical",
                            "fp8"), "out_dtype must be one of"),
        (lambda: ops.attention(torch.empty(3, 256, device="meta"), torch.empty(9, 128, device="meta"),
                               torch.empty(9, 128, device="meta"), torch.empty(3, dtype=I32, device="meta"), 3, 2, 64,
                               0.125, "canonical", "bf16"), "3 query heads are not a multiple of 2 kv heads"),
        (lambda: ops.attention(torch.empty(3, 1024, device="meta"), torch.empty(9, 512, device="meta"),
                               torch.empty(9, 512, device="meta"), torch.empty(3, dtype=I32, device="meta"), 2, 1, 512,
                               0.125, "canonical", "bf16"), r"head_dim 512 not in 1…256"),
        (lambda: ops.rope(torch.empty(4, 128, device="meta"), torch.empty(4, dtype=I64, device="meta"),
                          torch.empty(16, 32, device="meta"), torch.empty(16, 32, device="meta"), 2, 64, "bf16"),
         "rope: pos must be torch.int32"),
        (lambda: ops.sample(torch.empty(3, 100, device="meta"), torch.empty(3, dtype=I64, device="meta"),
                            torch.empty(3, dtype=I64, device="meta"), 1.0, -1), "seed -1 is not an unsigned 64-bit"),
        (lambda: ops.sample(torch.empty(3, 100, device="meta"), torch.empty(3, dtype=I64, device="meta"),
                            torch.empty(3, dtype=I64, device="meta"), 1.0, 1, -2), "sample: top_k must be an integer"),
        (lambda: ops.sample(torch.empty(3, 100, device="meta"), torch.empty(3, dtype=I64, device="meta"),
                            torch.empty(3, dtype=I64, device="meta"), 1.0, 1, 0, 0.0), r"sample: top_p must be in \(0, 1\]"),
        (lambda: ops.sample(torch.empty(3, 100, device="meta"), torch.empty(3, dtype=I64, device="meta"),
                            torch.empty(3, dtype=I64, device="meta"), float("nan"), 1), "sample: temperature is NaN"),
        (lambda: ops.rms_norm(torch.empty(3, 64, device="meta"), torch.empty(64, device="meta"), 0.0, "canonical",
                              "bf16"), "eps must be positive"),
    ],
)
def test_bad_arguments(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_ptx_parameters_and_packing():
    from bitalign import ptx

    lib = ptx.Library()
    n = 0
    for m in lib.modules():
        src = lib.ptx(m)
        params = driver.entry_params(src)
        assert len(params) == src.count(b".visible .entry "), m
        n += len(params)
    mm = driver.entry_params(lib.ptx("matmul"))["matmul_dec1"]
    assert mm[7] == ("b8", 40) and mm[0] == ("u64", 8) and mm[4] == ("u32", 4)
    data, offs = driver.pack("k", [("u64", 8), ("u32", 4), ("f32", 4), ("b8", 40)], (1 << 40, -3, 0.5, ops.segs([0, 1, 2])))
    assert offs == [0, 8, 16, 24] and data[8:12] == (2**32 - 3).to_bytes(4, "little") and len(data) == 64
    with pytest.raises(TypeError, match="takes 2 arguments, got 1"):
        driver.pack("k", [("u64", 8), ("u32", 4)], (1,))
    with pytest.raises(ValueError, match=r"argument 0 \(u32\): 4294967296 does not fit 32 bits"):
        driver.pack("k", [("u32", 4)], (1 << 32,))
    with pytest.raises(ValueError, match="is 39 bytes, the kernel's struct 40"):
        driver.pack("k", [("b8", 40)], (b"\0" * 39,))
    assert n > 30


def test_segs_layout():
    b = ops.segs([0, 8, 16, 24, 32, 40, 48, 56, 64])
    assert len(b) == 40 and int.from_bytes(b[:4], "little") == 8 and int.from_bytes(b[36:40], "little") == 64
    with pytest.raises(ValueError, match="1 to 8"):
        ops.segs(list(range(11)))


@pytest.mark.parametrize("call,msg", [
    (lambda z: ops.linear_partial(z(5, 32), z(24, 32), 3, "canonical"), "degree 3 not in"),
    (lambda z: ops.linear_partial(z(5, 32), z(24, 16), 2, "canonical"), "w must have shape"),
    (lambda z: ops.linear_finish(z(3, 5, 24), None, "canonical", "bf16"), "parts must be \\(tp, M, N\\)"),
    (lambda z: ops.linear_finish(z(2, 5, 24), z(23), "canonical", "bf16"), "bias must have shape"),
    (lambda z: ops.log_softmax_sum(z(3, 50), z(4), 2, "canonical"), "m must have shape"),
    (lambda z: ops.log_softmax_sum(z(3, 50), z(3), 16, "canonical"), "degree 16 not in"),
    (lambda z: ops.logprob_target(z(3, 50), z(3), z(3), 0), "targets must be torch.int32"),
    (lambda z: ops.logprob_finish(z(3), z(2)), "S must have shape"),
])
def test_tp_op_errors(call, msg):
    z = lambda *s, dtype=F32: torch.empty(*s, dtype=dtype, device="meta")  # noqa: E731
    with pytest.raises(ValueError, match=msg):
        call(z)


def test_tp_ops_launches_pack_against_the_ptx(monkeypatch):
    """Without a GPU: every launch the TP ops make (linear_partial at the decode, small and tiled plans,
    linear_finish, the vocab-parallel log-softmax stages) has the argument count and kinds of its kernel's own
    PTX parameter list (driver.pack against the committed PTX), with the plans of launch.json."""
    from bitalign import launch, ptx

    lib = ptx.Library()
    params = {k: v for m in lib.modules() for k, v in driver.entry_params(lib.ptx(m)).items()}
    planner = launch.Planner(launch.Limits(132, 232448))
    seen = []

    def run(dev, launches):
        for l, args in launches:
            seen.append(l.kernel)
            driver.pack(l.kernel, params[l.kernel], args)

    monkeypatch.setattr(ops, "_planner", lambda dev: planner)
    monkeypatch.setattr(ops, "_run", run)
    monkeypatch.setattr(ops, "_check", lambda op, dtype=F32, device=None, **t: torch.device("cpu"))
    z = lambda *s, dtype=F32: torch.zeros(*s, dtype=dtype)  # noqa: E731
    for M, K in ((1, 64), (5, 66), (300, 1536)):  # matmul_dec, matmul_small (K % 4 ≠ 0), matmul_t with reduce
        ops.linear_partial(z(M, K), z(96, K), 2, "canonical")
    ops.linear_finish(z(4, 5, 24), z(24), "canonical", "bf16")
    ops.linear_finish(z(2, 5, 24), None, "standard", "f32")
    ops.log_softmax_max(z(3, 5000))
    ops.log_softmax_sum(z(3, 5000), z(3), 4, "canonical")
    ops.logprob_target(z(3, 5000), z(3, dtype=I32), z(3), 5000)
    ops.logprob_finish(z(3), z(3))
    ops.log_softmax_finish(z(3, 5000), z(3), z(3))
    assert {"matmul_dec1", "matmul_small8", "matmul_reduce", "ls_max_part", "ls_max_fin", "ls_sum_seg", "ls_tree",
            "logprobs", "ls_finish"} <= set(seen), seen
    assert any(k.startswith("matmul_t") for k in seen), seen


@pytest.mark.parametrize("seed", [0, (1 << 63) - 1, 1 << 63, 16045690984503111693, (1 << 64) - 1])
def test_sample_takes_every_unsigned_64_bit_seed(seed):
    """The op's schema holds int64: sample() hands it the seed's two's complement, so seeds >= 2^63 (which the
    H200 run refused) reach the kernel, eager on fake CUDA tensors and traced by torch.compile."""
    def call(dev):
        return ops.sample(torch.empty(3, 100, device=dev), torch.empty(3, dtype=I64, device=dev),
                          torch.empty(3, dtype=I64, device=dev), 1.0, seed, 5, 0.9)

    assert tuple(call("meta").shape) == (3,)
    with FakeTensorMode(allow_non_fake_inputs=False):
        assert call("cuda").dtype == torch.int32
    assert tuple(torch.compile(call, fullgraph=True)("meta").shape) == (3,)
