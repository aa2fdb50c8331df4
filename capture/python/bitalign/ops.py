"""bitalign's kernels as PyTorch custom ops (torch.library), on CUDA tensors, PyTorch's stream and allocator.

Every op runs the committed PTX (bitalign.ptx, checked against kernels/cuda/MANIFEST.sha256) with the launch
plans of bitalign.launch, so its bits are the Go engine's (docs/arithmetic.md). Tensors are float32 holding the
model dtype's values, as in the engine (docs/design.md, "Data conventions"): a bf16 activation is widened with
.float() (exact) before an op and narrowed with .to(torch.bfloat16) after it (exact: the op rounded to bf16).
`out_dtype` is the op's output rounding: "bf16", "f16" or "f32" (no rounding of a float32 result).

Each op has a fake (meta) implementation, so it traces under torch.compile and works inside CUDA graph capture
(launches go to the current stream; temporaries come from PyTorch's caching allocator). Wrong dtypes, devices,
shapes, non-contiguous or misaligned inputs are a ValueError naming the op and the argument.
"""

import struct
import sys
from typing import Optional

import torch

from . import launch as _launch
from . import mathf as _mathf
from . import sampling as _sampling

_DT = {"f32": 0, "bf16": 1, "f16": 2}
_PROFILES = ("canonical", "standard")


def _dt(op, out_dtype):
    if out_dtype not in _DT:
        raise ValueError(f"bitalign.{op}: out_dtype must be one of {sorted(_DT)}, not {out_dtype!r}")
    return _DT[out_dtype]


def _profile(op, profile):
    if profile not in _PROFILES:
        raise ValueError(f"bitalign.{op}: profile must be 'canonical' or 'standard', not {profile!r}")
    return profile


def _check(op, dtype=torch.float32, device=None, **tensors):
    """Every named tensor: on one CUDA device (or meta, or fake), dtype, contiguous; returns the device."""
    for name, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"bitalign.{op}: {name} must be a tensor, not {type(t).__name__}")
        want = dtype[name] if isinstance(dtype, dict) else dtype
        if t.dtype != want:
            raise ValueError(f"bitalign.{op}: {name} must be {want}, is {t.dtype}")
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"bitalign.{op}: {name} is on {t.device}: bitalign's kernels run on CUDA tensors")
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError(f"bitalign.{op}: {name} is on {t.device}, the other inputs on {device}")
        if not t.is_contiguous():
            raise ValueError(f"bitalign.{op}: {name} must be contiguous (call .contiguous())")
    return device


def _aligned(op, **tensors):
    """The real kernels' 16-byte loads: every named tensor's data starts 16-byte aligned (checked at run time
    only, never on fake tensors)."""
    for name, t in tensors.items():
        if t is not None and t.data_ptr() % 16:
            raise ValueError(f"bitalign.{op}: {name} is not 16-byte aligned (a view at an odd offset: .clone() it)")


def _shape(op, name, t, *dims):
    if t.dim() != len(dims) or any(d is not None and s != d for s, d in zip(t.shape, dims)):
        want = ", ".join("*" if d is None else str(d) for d in dims)
        raise ValueError(f"bitalign.{op}: {name} must have shape ({want}), has {tuple(t.shape)}")


def _ptr(t):
    return 0 if t is None else t.data_ptr()


def _run(device, launches_args):
    from . import driver

    dev = driver.device(device.index if device.index is not None else torch.cuda.current_device())
    stream = torch.cuda.current_stream(device).cuda_stream
    for l, args in launches_args:
        dev.launch(l, args, stream)


def _planner(device):
    from . import driver

    return driver.device(device.index if device.index is not None else torch.cuda.current_device()).planner


_THIS = sys.modules[__name__]
_IMPL = {}  # op name → its implementation (the function the custom op wraps)
_OPS = {}  # op name → the custom op


def _custom(name):
    """torch.library.custom_op("bitalign::name") around fn, keeping fn for eager() calls."""

    def wrap(fn):
        op = torch.library.custom_op(f"bitalign::{name}", mutates_args=())(fn)
        _IMPL[name], _OPS[name] = fn, op
        return op

    return wrap


def eager(name, *args):
    """Op `name` on args: in plain eager mode on real CUDA tensors its implementation directly (the same code and
    launches, without the dispatcher's ~0.1 ms a call), else the custom op (tracing, torch.compile, fake and
    meta tensors, or an op this module's attribute no longer names: a test's stand-in is called as it is)."""
    op = getattr(_THIS, name)
    if op is not _OPS.get(name):  # a Python wrapper of the op (sample), or a test's stand-in
        return op(*args)
    return _dispatch(name, *args)


def _dispatch(name, *args):
    x = args[0]
    if type(x) is torch.Tensor and x.device.type == "cuda" and not torch.compiler.is_compiling():
        return _IMPL[name](*args)
    return _OPS[name](*args)


def segs(bounds):
    """The kernels' Segs struct (int n; int b[9]) by value: the chains' bounds (kernels/cuda segs)."""
    if not 2 <= len(bounds) <= 9:
        raise ValueError(f"bitalign: {len(bounds) - 1} chains; the kernels take 1 to 8")
    return struct.pack("<i9i", len(bounds) - 1, *bounds, *([0] * (9 - len(bounds))))


# --- linear -------------------------------------------------------------------------------------------------------


def _linear_args(x, w, bias, profile, out_dtype):
    dev = _check("linear", x=x, w=w, bias=bias)
    _profile("linear", profile)
    dt = _dt("linear", out_dtype)
    if x.dim() != 2:
        raise ValueError(f"bitalign.linear: x must be (M, K), has shape {tuple(x.shape)}")
    M, K = x.shape
    _shape("linear", "w", w, None, K)
    N = w.shape[0]
    if bias is not None:
        _shape("linear", "bias", bias, N)
    return dev, M, K, N, dt


@_custom("linear")
def linear(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor], profile: str, out_dtype: str) -> torch.Tensor:
    """out (M, N) = round_out_dtype(x·wᵀ + bias): x (M, K), w (N, K) as PyTorch stores a Linear, bias (N) or None;
    the K order is the profile's (canonical: 8 fixed segments added by the tree, whatever M)."""
    dev, M, K, N, dt = _linear_args(x, w, bias, profile, out_dtype)
    _aligned("linear", x=x, w=w, bias=bias)
    out = torch.empty((M, N), dtype=torch.float32, device=dev)
    if M == 0 or N == 0:
        return out
    bounds, tree = _launch.matmul_bounds(profile, M, K)
    _matmul(dev, out, x, w, bias, M, K, N, bounds, tree, dt)
    return out


_PLANS = {}  # (device, M, K, N, bounds, tree) → (the launch plan, the Segs bytes): plans are pure functions of these
_NO_ROUND = -1  # the kernels' dt code for no output rounding at all (kernels/cuda NoRound: a partial)


def _matmul(dev, out, x, w, bias, M, K, N, bounds, tree, dt, force_bm=0, force_g=0):
    """Launches the plan for M (kernels/cuda matmul): bounds are the chains' K-ranges, tree whether their partials
    are added by the tree (else left to right); force_bm/force_g override the tiled kernel's tile rows and
    segments per block (benchmarks: every choice gives the same bits)."""
    key = (dev, M, K, N, tuple(bounds), tree, force_bm, force_g)
    hit = _PLANS.get(key)
    if hit is None:
        vec = K % 4 == 0 and all(b % 4 == 0 for b in bounds)
        if len(_PLANS) >= 4096:  # a bound on the shapes remembered (each decode step's M is one)
            _PLANS.clear()
        plan = _planner(dev).matmul(M, K, N, bounds, tree, vec, force_bm=force_bm, force_g=force_g)
        hit = _PLANS[key] = (plan, segs(bounds))
    plan, sg = hit
    seq = 0 if tree else 1
    if plan.bm == 0:
        _run(dev, [(plan.launches[0], (_ptr(out), _ptr(x), _ptr(w), _ptr(bias), M, K, N, sg, seq, dt))])
        return
    scratch = torch.empty(plan.part_floats + plan.stack_floats, dtype=torch.float32, device=dev)
    part, stack = scratch.data_ptr(), scratch.data_ptr() + 4 * plan.part_floats
    runs = [(plan.launches[0], (_ptr(out), part, stack, _ptr(x), _ptr(w), _ptr(bias), M, K, N, sg, plan.g, seq, dt))]
    if len(plan.launches) == 2:
        runs.append((plan.launches[1], (_ptr(out), part, _ptr(bias), M, N, plan.launches[0].grid[2], seq, dt)))
    _run(dev, runs)


@linear.register_fake
def _(x, w, bias, profile, out_dtype):
    dev, M, K, N, _ = _linear_args(x, w, bias, profile, out_dtype)
    return x.new_empty((M, N))


def _partial_args(x, w, tp, profile):
    dev = _check("linear_partial", x=x, w=w)
    _profile("linear_partial", profile)
    if x.dim() != 2:
        raise ValueError(f"bitalign.linear_partial: x must be (M, K/tp), has shape {tuple(x.shape)}")
    if tp not in (1, 2, 4, 8):
        raise ValueError(f"bitalign.linear_partial: tensor-parallel degree {tp} not in {{1, 2, 4, 8}} (8-segment rule)")
    M, K = x.shape
    _shape("linear_partial", "w", w, None, K)
    return dev, M, K, w.shape[0]


@_custom("linear_partial")
def linear_partial(x: torch.Tensor, w: torch.Tensor, tp: int, profile: str) -> torch.Tensor:
    """One rank's share of a row-parallel linear (kernels.MatmulPartial): x (M, K/tp) and w (N, K/tp) are the
    rank's K slice; out (M, N) float32 is the subtree of the rank's G = 8/tp whole segments of the contract's 8,
    unrounded, without bias (standard: one chain over the local K). The ranks' partials, added by the tree in rank
    order (linear_finish), are linear's bits at every tp. The same kernels as linear with the local bounds and
    no output rounding (kernels/cuda MatmulPartial)."""
    dev, M, K, N = _partial_args(x, w, tp, profile)
    _aligned("linear_partial", x=x, w=w)
    out = torch.empty((M, N), dtype=torch.float32, device=dev)
    if M == 0 or N == 0:
        return out
    bounds, tree = _launch.partial_bounds(profile, K, tp)
    _matmul(dev, out, x, w, None, M, K, N, bounds, tree, _NO_ROUND)
    return out


@linear_partial.register_fake
def _(x, w, tp, profile):
    _, M, _, N = _partial_args(x, w, tp, profile)
    return x.new_empty((M, N))


def _finish_args(parts, bias, profile, out_dtype):
    dev = _check("linear_finish", parts=parts, bias=bias)
    _profile("linear_finish", profile)
    dt = _dt("linear_finish", out_dtype)
    if parts.dim() != 3 or parts.shape[0] not in (1, 2, 4, 8):
        raise ValueError(f"bitalign.linear_finish: parts must be (tp, M, N) with tp in 1, 2, 4, 8, has shape "
                         f"{tuple(parts.shape)}")
    if bias is not None:
        _shape("linear_finish", "bias", bias, parts.shape[2])
    return dev, dt


@_custom("linear_finish")
def linear_finish(parts: torch.Tensor, bias: Optional[torch.Tensor], profile: str, out_dtype: str) -> torch.Tensor:
    """out (M, N) = round_out_dtype(tree(parts) ⊕ bias): parts (tp, M, N) float32 are the ranks' linear_partial
    outputs in rank order (what all_gather gives), added by the fixed tree over ranks (§12's T(0, tp), the upper
    levels of the 8-segment tree; standard: left to right), then the bias and the rounding (kernels.MatmulFinish
    after the all-reduce). The kernel is matmul_reduce, the tiled matmul's own finish."""
    dev, dt = _finish_args(parts, bias, profile, out_dtype)
    _aligned("linear_finish", parts=parts, bias=bias)
    n, M, N = parts.shape
    out = torch.empty((M, N), dtype=torch.float32, device=dev)
    if M and N:
        seq = 1 if profile == "standard" else 0
        _run(dev, [(_planner(dev).matmul_reduce(M, N), (_ptr(out), _ptr(parts), _ptr(bias), M, N, n, seq, dt))])
    return out


@linear_finish.register_fake
def _(parts, bias, profile, out_dtype):
    _finish_args(parts, bias, profile, out_dtype)
    return parts.new_empty(parts.shape[1:])


# --- RMSNorm ------------------------------------------------------------------------------------------------------


def _rms_args(x, w, eps, profile, out_dtype):
    dev = _check("rms_norm", x=x, w=w)
    _profile("rms_norm", profile)
    dt = _dt("rms_norm", out_dtype)
    if x.dim() != 2:
        raise ValueError(f"bitalign.rms_norm: x must be (rows, C), has shape {tuple(x.shape)}")
    _shape("rms_norm", "w", w, x.shape[1])
    if not eps > 0:
        raise ValueError(f"bitalign.rms_norm: eps must be positive, is {eps}")
    return dev, dt


@_custom("rms_norm")
def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, profile: str, out_dtype: str) -> torch.Tensor:
    """out (rows, C) = RMSNorm of each row of x times w (docs/arithmetic.md: 8 segments of the sum of squares)."""
    dev, dt = _rms_args(x, w, eps, profile, out_dtype)
    _aligned("rms_norm", x=x, w=w)
    rows, C = x.shape
    out = torch.empty_like(x)
    if rows == 0:
        return out
    l = _planner(dev).rmsnorm(profile, False, rows, C)
    if l.kernel == "rmsnorm_row":
        vec = 1 if C % 4 == 0 else 0
        _run(dev, [(l, (_ptr(out), _ptr(x), _ptr(w), rows, C, eps, dt, vec))])
    else:
        _run(dev, [(l, (_ptr(out), _ptr(x), _ptr(w), rows, C, eps, 1 if profile == "standard" else 0, dt))])
    return out


@rms_norm.register_fake
def _(x, w, eps, profile, out_dtype):
    _rms_args(x, w, eps, profile, out_dtype)
    return torch.empty_like(x)


# --- RoPE ---------------------------------------------------------------------------------------------------------


def _rope_args(x, pos, cos, sin, heads, head_dim, out_dtype):
    dev = _check("rope", dtype={"x": torch.float32, "pos": torch.int32, "cos": torch.float32, "sin": torch.float32},
                 x=x, pos=pos, cos=cos, sin=sin)
    dt = _dt("rope", out_dtype)
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"bitalign.rope: head_dim {head_dim} must be a positive even number")
    if x.dim() != 2:
        raise ValueError(f"bitalign.rope: x must be (T, heads·head_dim), has shape {tuple(x.shape)}")
    _shape("rope", "x", x, None, heads * head_dim)
    _shape("rope", "pos", pos, x.shape[0])
    _shape("rope", "cos", cos, None, head_dim // 2)
    _shape("rope", "sin", sin, cos.shape[0], head_dim // 2)
    return dev, dt


@_custom("rope")
def rope(x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, head_dim: int,
         out_dtype: str) -> torch.Tensor:
    """Rotary embeddings in the rotate_half convention: x (T, heads·head_dim), pos (T) int32, cos and sin the
    engine's tables (maxPos, head_dim/2) (kernels.RoPETables). Positions outside the tables give NaN rows: the
    caller checks them (bitalign.hf gathers its tables at checked positions instead)."""
    dev, dt = _rope_args(x, pos, cos, sin, heads, head_dim, out_dtype)
    _aligned("rope", x=x, pos=pos, cos=cos, sin=sin)
    out = torch.empty_like(x)
    n = x.shape[0] * heads * (head_dim // 2)
    if n:
        l = _planner(dev).elementwise("rope", n)
        _run(dev, [(l, (_ptr(out), _ptr(x), _ptr(pos), x.shape[0], heads, head_dim, _ptr(cos), _ptr(sin), dt))])
    return out


@rope.register_fake
def _(x, pos, cos, sin, heads, head_dim, out_dtype):
    _rope_args(x, pos, cos, sin, heads, head_dim, out_dtype)
    return torch.empty_like(x)


# --- attention ----------------------------------------------------------------------------------------------------


def _att_args(q, k_cache, v_cache, pos, heads, kv_heads, head_dim, profile, out_dtype):
    dev = _check("attention", dtype={"q": torch.float32, "k_cache": torch.float32, "v_cache": torch.float32,
                                     "pos": torch.int32}, q=q, k_cache=k_cache, v_cache=v_cache, pos=pos)
    _profile("attention", profile)
    dt = _dt("attention", out_dtype)
    if kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"bitalign.attention: {heads} query heads are not a multiple of {kv_heads} kv heads")
    limit = _launch.load_rules()["attention"]["max_head_dim"]
    if not 0 < head_dim <= limit:
        raise ValueError(f"bitalign.attention: head_dim {head_dim} not in 1…{limit}")
    if q.dim() != 2:
        raise ValueError(f"bitalign.attention: q must be (T, heads·head_dim), has shape {tuple(q.shape)}")
    _shape("attention", "q", q, None, heads * head_dim)
    _shape("attention", "k_cache", k_cache, None, kv_heads * head_dim)
    _shape("attention", "v_cache", v_cache, k_cache.shape[0], kv_heads * head_dim)
    _shape("attention", "pos", pos, q.shape[0])
    return dev, dt


@_custom("attention")
def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor, heads: int,
              kv_heads: int, head_dim: int, scale: float, profile: str, out_dtype: str) -> torch.Tensor:
    """Causal attention of one sequence: q (T, heads·head_dim) at positions pos (T) int32 over that sequence's
    cache k_cache, v_cache (S, kv_heads·head_dim), key j at position j; row t sees keys 0…pos[t] (< S, checked
    by the caller). 64-key blocks in order, online softmax (docs/arithmetic.md §7): prefill and decode give the
    same bits for the same position."""
    out = torch.empty_like(q)
    _attention_launch(out, q, k_cache, v_cache, pos, heads, kv_heads, head_dim, scale, profile, out_dtype)
    return out


def attention_into(out, q, k_cache, v_cache, pos, heads, kv_heads, head_dim, scale, profile, out_dtype):
    """attention() written into out (float32, q's shape, contiguous, 16-byte aligned: e.g. a run's rows of a
    batch's output), for eager callers that launch one run after another into one tensor (bitalign.hf). On
    plain CUDA tensors outside tracing the kernel writes out itself; otherwise (tracing, other devices, a test's
    stand-in for attention) out is given the op's result."""
    if type(q) is torch.Tensor and q.device.type == "cuda" and _THIS.attention is _OPS.get("attention") and \
            not torch.compiler.is_compiling():
        _attention_launch(out, q, k_cache, v_cache, pos, heads, kv_heads, head_dim, scale, profile, out_dtype)
    else:
        out.copy_(eager("attention", q, k_cache, v_cache, pos, heads, kv_heads, head_dim, scale, profile, out_dtype))


def _attention_launch(out, q, k_cache, v_cache, pos, heads, kv_heads, head_dim, scale, profile, out_dtype):
    dev, dt = _att_args(q, k_cache, v_cache, pos, heads, kv_heads, head_dim, profile, out_dtype)
    _check("attention", out=out)
    _shape("attention", "out", out, *q.shape)
    _aligned("attention", out=out, q=q, k_cache=k_cache, v_cache=v_cache, pos=pos)
    T, S = q.shape[0], k_cache.shape[0]
    if T == 0:
        return
    l, tq, mode = _planner(dev).attention(profile, False, False, T, heads, kv_heads, head_dim)
    if l.kernel != "attention":
        args = (_ptr(out), _ptr(q), _ptr(k_cache), _ptr(v_cache), _ptr(pos), T, heads, kv_heads, head_dim, scale, dt, tq)
    else:
        args = (_ptr(out), _ptr(q), _ptr(k_cache), _ptr(v_cache), _ptr(pos), T, S, heads, kv_heads, head_dim, scale,
                mode, dt)
    _run(dev, [(l, args)])


@attention.register_fake
def _(q, k_cache, v_cache, pos, heads, kv_heads, head_dim, scale, profile, out_dtype):
    _att_args(q, k_cache, v_cache, pos, heads, kv_heads, head_dim, profile, out_dtype)
    return torch.empty_like(q)


# --- element-wise -------------------------------------------------------------------------------------------------


def _pair_args(op, a, b, out_dtype):
    dev = _check(op, a=a, b=b)
    if a.shape != b.shape:
        raise ValueError(f"bitalign.{op}: the inputs' shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    return dev, _dt(op, out_dtype)


@_custom("residual")
def residual(a: torch.Tensor, b: torch.Tensor, out_dtype: str) -> torch.Tensor:
    """out = round_out_dtype(a ⊕ b), element-wise."""
    dev, dt = _pair_args("residual", a, b, out_dtype)
    _aligned("residual", a=a, b=b)
    out = torch.empty_like(a)
    if a.numel():
        _run(dev, [(_planner(dev).elementwise("residual", a.numel()), (_ptr(out), _ptr(a), _ptr(b), a.numel(), dt))])
    return out


@residual.register_fake
def _(a, b, out_dtype):
    _pair_args("residual", a, b, out_dtype)
    return torch.empty_like(a)


@_custom("swiglu")
def swiglu(gate: torch.Tensor, up: torch.Tensor, out_dtype: str) -> torch.Tensor:
    """out = round(round(SiLU(gate)) · up), element-wise, with the engine's SiLU (its own exp)."""
    dev, dt = _pair_args("swiglu", gate, up, out_dtype)
    _aligned("swiglu", gate=gate, up=up)
    out = torch.empty_like(gate)
    if gate.numel():
        aligned = (out.data_ptr() | gate.data_ptr() | up.data_ptr()) % 16 == 0
        l = _planner(dev).swiglu(gate.numel(), aligned)
        _run(dev, [(l, (_ptr(out), _ptr(gate), _ptr(up), gate.numel(), dt))])
    return out


@swiglu.register_fake
def _(gate, up, out_dtype):
    _pair_args("swiglu", gate, up, out_dtype)
    return torch.empty_like(gate)


def _emb_args(table, tokens, out_dtype):
    dev = _check("embedding", dtype={"table": torch.float32, "tokens": torch.int32}, table=table, tokens=tokens)
    if table.dim() != 2 or tokens.dim() != 1:
        raise ValueError(f"bitalign.embedding: table must be (V, C) and tokens (T), are {tuple(table.shape)} and {tuple(tokens.shape)}")
    return dev, _dt("embedding", out_dtype)


@_custom("embedding")
def embedding(table: torch.Tensor, tokens: torch.Tensor, out_dtype: str) -> torch.Tensor:
    """out (T, C) = the rows of table (V, C) at tokens (T) int32; a token outside [0, V) gives a NaN row (the
    caller checks them: bitalign.hf keeps transformers' embedding, which refuses them)."""
    dev, dt = _emb_args(table, tokens, out_dtype)
    _aligned("embedding", table=table, tokens=tokens)
    (V, C), T = table.shape, tokens.shape[0]
    out = table.new_empty((T, C))
    if T * C:
        l = _planner(dev).elementwise("embedding", T * C)
        _run(dev, [(l, (_ptr(out), _ptr(table), _ptr(tokens), T, V, C, dt))])
    return out


@embedding.register_fake
def _(table, tokens, out_dtype):
    _emb_args(table, tokens, out_dtype)
    return table.new_empty((tokens.shape[0], table.shape[1]))


# --- log-softmax, log-probabilities, sampling ---------------------------------------------------------------------


def _ls_args(op, logits, profile):
    dev = _check(op, logits=logits)
    _profile(op, profile)
    if logits.dim() != 2:
        raise ValueError(f"bitalign.{op}: logits must be (T, V), has shape {tuple(logits.shape)}")
    return dev


def _max_runs(dev, logits, m, zero_fix):
    """The launches of the rows' max into m (a pointer to T floats) and the scratch they need (LogSoftmaxMax)."""
    T, V = logits.shape
    part_l, fin_l, nb = _planner(dev).logsoftmax_max(T, V)
    pm = torch.empty(T * nb, dtype=torch.float32, device=dev)
    return pm, [(part_l, (pm.data_ptr(), _ptr(logits), T, V)), (fin_l, (m, pm.data_ptr(), T, nb, zero_fix))]


def _sum_runs(dev, logits, m, S, nseg):
    """The launches of the subtree of Σ Exp(x ⊖ m) over nseg segments of each row into S (LogSoftmaxSum)."""
    T, V = logits.shape
    seg_l, tree_l = _planner(dev).logsoftmax_sum(T, nseg)
    part = torch.empty(T * nseg, dtype=torch.float32, device=dev)
    return part, [(seg_l, (part.data_ptr(), _ptr(logits), m, T, V, nseg)), (tree_l, (S, part.data_ptr(), T, nseg))]


def _nseg(op, profile, tp):
    if tp not in (1, 2, 4, 8):
        raise ValueError(f"bitalign.{op}: tensor-parallel degree {tp} not in {{1, 2, 4, 8}} (8-segment rule)")
    return 1 if profile == "standard" else _launch.SEGMENTS // tp


def _stats(dev, logits, profile):
    """The rows' max m and the segment tree of Σ exp(x ⊖ m), S, each (T) float32 (the LogSoftmaxStats stages)."""
    T, V = logits.shape
    tmp = torch.empty(2 * T, dtype=torch.float32, device=dev)
    m, S = tmp.data_ptr(), tmp.data_ptr() + 4 * T
    pm, runs = _max_runs(dev, logits, m, 1)
    part, more = _sum_runs(dev, logits, m, S, _nseg("log_softmax", profile, 1))
    _run(dev, runs + more)
    return tmp, m, S


@_custom("log_softmax")
def log_softmax(logits: torch.Tensor, profile: str) -> torch.Tensor:
    """out (T, V) = log-softmax of each row of logits (T, V) float32 (docs/arithmetic.md §9)."""
    dev = _ls_args("log_softmax", logits, profile)
    _aligned("log_softmax", logits=logits)
    out = torch.empty_like(logits)
    T, V = logits.shape
    if T * V:
        tmp, m, S = _stats(dev, logits, profile)
        _run(dev, [(_planner(dev).logsoftmax_finish(T, V), (_ptr(out), _ptr(logits), m, S, T, V))])
        del tmp
    return out


@log_softmax.register_fake
def _(logits, profile):
    _ls_args("log_softmax", logits, profile)
    return torch.empty_like(logits)


def _lp_args(logits, targets, profile):
    dev = _ls_args("logprobs", logits, profile)
    _check("logprobs", dtype=torch.int32, device=dev, targets=targets)
    _shape("logprobs", "targets", targets, logits.shape[0])
    return dev


@_custom("logprobs")
def logprobs(logits: torch.Tensor, targets: torch.Tensor, profile: str) -> torch.Tensor:
    """out (T) = log p(targets[t]) under the log-softmax of row t of logits (T, V); targets (T) int32."""
    dev = _lp_args(logits, targets, profile)
    _aligned("logprobs", logits=logits, targets=targets)
    T, V = logits.shape
    out = logits.new_empty((T,))
    if T:
        tmp, m, S = _stats(dev, logits, profile)
        _run(dev, [(_planner(dev).logprobs(T), (_ptr(out), _ptr(logits), _ptr(targets), m, S, T, V, 0, 1))])
        del tmp
    return out


@logprobs.register_fake
def _(logits, targets, profile):
    _lp_args(logits, targets, profile)
    return logits.new_empty((logits.shape[0],))


# --- the vocab-parallel log-softmax stages (docs/arithmetic.md §9; bitalign.tp runs them across ranks) ------------


@_custom("log_softmax_max")
def log_softmax_max(logits: torch.Tensor) -> torch.Tensor:
    """(T) this rank's max of each row of its logits shard (T, V/tp): NaN anywhere gives NaN; a zero max keeps
    its sign (the caller combines the ranks' maxima, then makes a zero +0: bitalign.tp)."""
    dev = _ls_args("log_softmax_max", logits, "canonical")
    _aligned("log_softmax_max", logits=logits)
    out = logits.new_empty((logits.shape[0],))
    if logits.numel():
        pm, runs = _max_runs(dev, logits, out.data_ptr(), 0)
        _run(dev, runs)
    return out


@log_softmax_max.register_fake
def _(logits):
    _ls_args("log_softmax_max", logits, "canonical")
    return logits.new_empty((logits.shape[0],))


def _lsum_args(logits, m, tp, profile):
    dev = _ls_args("log_softmax_sum", logits, profile)
    _check("log_softmax_sum", device=dev, m=m)
    _shape("log_softmax_sum", "m", m, logits.shape[0])
    return dev, _nseg("log_softmax_sum", profile, tp)


@_custom("log_softmax_sum")
def log_softmax_sum(logits: torch.Tensor, m: torch.Tensor, tp: int, profile: str) -> torch.Tensor:
    """(T) this rank's subtree of Σ Exp(x ⊖ m[t]) over its shard (T, V/tp): 8/tp local segments, each one ⊕ chain
    in ascending column, by the tree (standard: one chain); m (T) is the combined max. The tree over ranks
    finishes the sum (kernels/cuda LogSoftmaxSum)."""
    dev, nseg = _lsum_args(logits, m, tp, profile)
    _aligned("log_softmax_sum", logits=logits, m=m)
    out = logits.new_empty((logits.shape[0],))
    if logits.numel():
        part, runs = _sum_runs(dev, logits, m.data_ptr(), out.data_ptr(), nseg)
        _run(dev, runs)
    return out


@log_softmax_sum.register_fake
def _(logits, m, tp, profile):
    _lsum_args(logits, m, tp, profile)
    return logits.new_empty((logits.shape[0],))


def _target_args(logits, targets, m):
    dev = _ls_args("logprob_target", logits, "canonical")
    _check("logprob_target", dtype=torch.int32, device=dev, targets=targets)
    _check("logprob_target", device=dev, m=m)
    _shape("logprob_target", "targets", targets, logits.shape[0])
    _shape("logprob_target", "m", m, logits.shape[0])
    return dev


@_custom("logprob_target")
def logprob_target(logits: torch.Tensor, targets: torch.Tensor, m: torch.Tensor, offset: int) -> torch.Tensor:
    """(T) d = (x[t, targets[t] − offset] ⊖ m[t]) ⊕ 0 where this rank's shard (T, V/tp), columns [offset,
    offset + V/tp), holds the target, else +0 (kernels/cuda LogProbsTarget); targets (T) int32 global ids."""
    dev = _target_args(logits, targets, m)
    _aligned("logprob_target", logits=logits, targets=targets, m=m)
    T, V = logits.shape
    out = logits.new_empty((T,))
    if T:
        _run(dev, [(_planner(dev).logprobs(T), (_ptr(out), _ptr(logits), _ptr(targets), _ptr(m), 0, T, V, offset, 0))])
    return out


@logprob_target.register_fake
def _(logits, targets, m, offset):
    _target_args(logits, targets, m)
    return logits.new_empty((logits.shape[0],))


def _lpfin_args(d, S):
    dev = _check("logprob_finish", d=d, S=S)
    if d.dim() != 1:
        raise ValueError(f"bitalign.logprob_finish: d must be (T), has shape {tuple(d.shape)}")
    _shape("logprob_finish", "S", S, d.shape[0])
    return dev


@_custom("logprob_finish")
def logprob_finish(d: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """(T) round_f32(d ⊖ Log(S)): d and S (T) combined over the ranks. The logprobs kernel on d as a one-column
    row with max +0 and target 0: (d ⊖ +0) ⊕ 0 is d (d is never −0 after the stage's ⊕ 0 and the sum)."""
    dev = _lpfin_args(d, S)
    _aligned("logprob_finish", d=d, S=S)
    T = d.shape[0]
    out = d.new_empty((T,))
    if T:
        zeros = torch.zeros(T, dtype=torch.int32, device=dev)  # the target column 0 and the max +0 (same bits)
        _run(dev, [(_planner(dev).logprobs(T), (_ptr(out), _ptr(d), _ptr(zeros), _ptr(zeros), _ptr(S), T, 1, 0, 1))])
    return out


@logprob_finish.register_fake
def _(d, S):
    _lpfin_args(d, S)
    return d.new_empty((d.shape[0],))


def _lsfin_args(logits, m, S):
    dev = _ls_args("log_softmax_finish", logits, "canonical")
    _check("log_softmax_finish", device=dev, m=m, S=S)
    _shape("log_softmax_finish", "m", m, logits.shape[0])
    _shape("log_softmax_finish", "S", S, logits.shape[0])
    return dev


@_custom("log_softmax_finish")
def log_softmax_finish(logits: torch.Tensor, m: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """(T, V/tp) round_f32(((x ⊖ m) ⊕ 0) ⊖ Log(S)) over this rank's shard, m and S (T) combined over the ranks."""
    dev = _lsfin_args(logits, m, S)
    _aligned("log_softmax_finish", logits=logits, m=m, S=S)
    T, V = logits.shape
    out = torch.empty_like(logits)
    if T * V:
        _run(dev, [(_planner(dev).logsoftmax_finish(T, V), (_ptr(out), _ptr(logits), _ptr(m), _ptr(S), T, V))])
    return out


@log_softmax_finish.register_fake
def _(logits, m, S):
    _lsfin_args(logits, m, S)
    return torch.empty_like(logits)


def _sample_args(logits, seqs, pos, temperature, seed, top_k, top_p):
    dev = _ls_args("sample", logits, "canonical")
    _check("sample", dtype=torch.int64, device=dev, seqs=seqs, pos=pos)
    _shape("sample", "seqs", seqs, logits.shape[0])
    _shape("sample", "pos", pos, logits.shape[0])
    if isinstance(seed, int) and not -(1 << 63) <= seed < 1 << 63:  # int64, the op's schema (traced: a SymInt)
        raise ValueError(f"bitalign.sample: seed {seed} is not a 64-bit integer")
    try:
        _sampling.params(temperature, top_k, top_p)
    except ValueError as e:
        raise ValueError(str(e).replace("bitalign: sampling:", "bitalign.sample:")) from None
    return dev


def _scaled(logits, temperature):
    """z = x ⊘ T (float32, IEEE division). The divisor is a device tensor: PyTorch's CUDA division by a CPU
    scalar multiplies by its reciprocal, which is not x ⊘ T."""
    return logits / torch.full((1,), float(temperature), dtype=torch.float32, device=logits.device)


def _order(z):
    """Each row's tokens in the order (z desc, index asc) of §10, NaN last: (T, V) int64. One int64 key per token,
    unique, so any sort gives this permutation: z's float32 bits mapped to an integer monotone in z (−0 as +0:
    they compare equal; NaN below −Inf), complemented, then the index in the low 31 bits."""
    T, V = z.shape
    b = torch.where(z == 0, torch.zeros_like(z), z).view(torch.int32)
    k = b ^ ((b >> 31) & 0x7FFFFFFF)
    k = torch.where(torch.isnan(z), torch.full_like(k, -(1 << 31)), k)
    desc = 0x7FFFFFFF - k.to(torch.int64)  # in [0, 2^32): smaller comes first
    idx = torch.arange(V, dtype=torch.int64, device=z.device)
    return torch.sort((desc << 31) | idx[None, :], dim=1).values & 0x7FFFFFFF


def restrict(logits, temperature, top_k=0, top_p=1.0):
    """logits (T, V) float32 with every token outside top-k's and top-p's kept set (docs/arithmetic.md §10) set
    to −Inf, NaN logits left NaN: Gumbel-max over the result (the sample kernel) draws the token kernels.Sample
    draws with top_k and top_p. Returns logits itself when nothing is cut (greedy, top_k 0 or >= V, top_p 1).

    On the device: z = x ⊘ T (IEEE), the order (z desc, index asc) by a sort of unique integer keys, top-k's
    first k (no host step: this part also runs inside CUDA graph capture). Top-p's walk sums Exp(z_j ⊖ mx) in
    order, which needs the engine's Exp and a sequential float32 sum: the sorted z of each row's tokens with
    z ⊖ mx >= −104 (Exp gives +0 below, which no sum sees) go to the host, where bitalign.sampling.nucleus walks
    them (two small device-to-host copies and one host-to-device copy per call)."""
    t, top_k, top_p = _sampling.params(temperature, top_k, top_p)
    T, V = logits.shape
    cut_k = 0 < top_k < V
    if not t > 0 or not (cut_k or top_p < 1) or T == 0 or V == 0:
        return logits
    if top_p < 1 and logits.is_cuda and torch.cuda.is_current_stream_capturing():
        raise ValueError("bitalign.sample: top_p < 1 walks the kept set on the host, which CUDA graph capture "
                         "cannot contain (top_k alone can)")
    z = _scaled(logits, t)
    order = _order(z)
    ranks = torch.arange(V, dtype=torch.int64, device=logits.device)
    if top_p < 1:
        L = (~torch.isnan(z)).sum(1)
        if cut_k:
            L = L.clamp(max=top_k)
        zs = z.gather(1, order)
        live = ((zs - zs[:, :1]) >= float(_mathf.LO_X)) & (ranks[None, :] < L[:, None])  # the rest: Exp = +0
        n = int(live.sum(1).max())
        host = zs[:, : max(n, 1)].cpu().numpy()
        cut = torch.from_numpy(_sampling.nucleus(host, L.cpu().numpy(), top_p)).to(logits.device)
    else:
        cut = torch.full((T,), top_k, dtype=torch.int64, device=logits.device)
    keep = torch.zeros((T, V), dtype=torch.bool, device=logits.device)
    keep.scatter_(1, order, ranks[None, :] < cut[:, None])
    return torch.where(keep | torch.isnan(logits), logits, torch.full_like(logits, float("-inf")))


def sample(logits, seqs, pos, temperature, seed, top_k=0, top_p=1.0):
    """The token (T) int32 drawn from each row of logits (T, V) by docs/arithmetic.md §10 (see _sample_op);
    seed is an unsigned 64-bit integer, handed to the op (whose schema holds int64) as its two's complement."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ValueError(f"bitalign.sample: seed {seed!r} is not an unsigned 64-bit integer")
    return _dispatch("sample", logits, seqs, pos, temperature, seed - (1 << 64) if seed >> 63 else seed, top_k,
                     top_p)


@_custom("sample")
def _sample_op(logits: torch.Tensor, seqs: torch.Tensor, pos: torch.Tensor, temperature: float, seed: int,
               top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The token (T) int32 the canonical rule draws after position pos[t] of sequence seqs[t] (both int64) from
    row t of logits (T, V): greedy argmax when temperature <= 0, else z = logits ⊘ temperature, top-k (0: off)
    and top-p (1: off) in the order (z desc, index asc), and Gumbel-max over the kept set with Philox noise
    keyed by (seed, sequence, position, vocabulary index), never by batch slot (docs/arithmetic.md §10;
    bitalign.sampling). temperature and top_p are rounded to float32, as the engine holds them. The kept set
    comes from restrict(); top_p < 1 takes a host step (not inside CUDA graph capture)."""
    dev = _sample_args(logits, seqs, pos, temperature, seed, top_k, top_p)
    _aligned("sample", logits=logits, seqs=seqs, pos=pos)
    T, V = logits.shape
    out = torch.empty((T,), dtype=torch.int32, device=dev)
    if T:
        x = restrict(logits, temperature, top_k, top_p)
        _run(dev, [(_planner(dev).sample(T), (_ptr(out), _ptr(x), T, V, temperature, seed & (1 << 64) - 1, _ptr(seqs),
                                              _ptr(pos)))])
    return out


@_sample_op.register_fake
def _(logits, seqs, pos, temperature, seed, top_k=0, top_p=1.0):
    _sample_args(logits, seqs, pos, temperature, seed, top_k, top_p)
    return torch.empty((logits.shape[0],), dtype=torch.int32, device=logits.device)
