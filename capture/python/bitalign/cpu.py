"""Exact CPU twins, in PyTorch, of the kernels a tensor-parallel layer needs (docs/arithmetic.md §1–§4, §9).

The CUDA kernels (bitalign.ops) run only on a GPU. These functions compute the same bits on CPU tensors, slowly,
with every float32 operation written out in the contract's order: they are what bitalign.tp runs on the CPU
(the gloo tests, a CPU run of a sharded model), and kernels/testdata/op_vectors.tsv pins them to the Go
reference (capture/python/tests/test_torch_cpu.py).

- fma32(a, b, c): RN(a·b + c) with one rounding (kernels.FMA32: the float64 product is exact, the float64 sum
  is made round-to-odd with the exact TwoSum error, then rounded to float32 once);
- exp / log: kernels.Exp / kernels.Log (§2), element-wise;
- round_dt: §1 (canonical NaN 0x7FC00000);
- matmul_partial / linear: MatmulPartial / MatmulForward (§4): every segment's FMA chain in ascending k,
  the segments' partials by the fixed tree (standard profile: the split-K chunks left to right);
- tree: the fixed pairwise tree over a leading axis of n partials (kernels.TreeSum, nvls's T(0, n), §3, §12);
- the sharded log-softmax stages of §9 (local max, the rank's subtree of Σ exp(x ⊖ m), the target's
  (x ⊖ m) ⊕ 0, the finish), as kernels/softmax.go runs them on each rank.

All tensors are float32 holding exact values (targets int); nothing here may be fused or reordered: each line
is one elementwise torch op, which on the CPU rounds once (no torch op of eager mode fuses two of them).
"""

import torch

from . import launch as _launch

_NAN = 0x7FC00000


def _f32_bits(u):
    """int64 tensor of uint32 bit patterns → float32 tensor."""
    u = u & 0xFFFFFFFF
    return torch.where(u >= 1 << 31, u - (1 << 32), u).to(torch.int32).view(torch.float32)


def _bits(x):
    """float32 tensor → int64 tensor of its uint32 bit patterns."""
    return x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def round_dt(x, dt):
    """§1: round float32 x to dt ("bf16", "f16", "f32") and back; every NaN becomes 0x7FC00000."""
    if dt not in ("bf16", "f16", "f32"):
        raise ValueError(f"bitalign.cpu: out_dtype must be 'bf16', 'f16' or 'f32', not {dt!r}")
    x = x.to(torch.float32)
    nan = torch.isnan(x)
    if dt == "f32":
        return torch.where(nan, _f32_bits(torch.full_like(x, 0, dtype=torch.int64) + _NAN), x)
    u = _bits(x)
    if dt == "bf16":
        r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    else:
        sign = u & 0x80000000
        a = u & 0x7FFFFFFF
        af = _f32_bits(a)
        big = af >= 65520.0
        small = af < 2.0 ** -14
        sub = _bits(torch.round(af * 2.0 ** 24) * 2.0 ** -24)  # both products exact; round: ties to even
        norm = (a + 0x0FFF + ((a >> 13) & 1)) & 0xFFFFE000
        r = torch.where(big, torch.full_like(a, 0x7F800000), torch.where(small, sub, norm)) | sign
    return torch.where(nan, _f32_bits(torch.full_like(u, _NAN)), _f32_bits(r))


def fma32(a, b, c):
    """RN(a·b + c), one rounding, float32 (kernels.FMA32), broadcasting like a·b + c."""
    p = a.to(torch.float64) * b.to(torch.float64)  # exact: 24 + 24 bits
    cc = c.to(torch.float64)
    s = p + cc
    bp = s - cc  # TwoSum: s + e == p + cc exactly
    bc = s - bp
    e = (p - bp) + (cc - bc)
    u = s.view(torch.int64)
    # round to odd at 53 bits where the float64 sum was inexact and came out even; 53 >= 24 + 2 makes the
    # final rounding to float32 correct (no double-rounding error)
    fix = (e != 0) & ((u & 1) == 0) & torch.isfinite(s)
    step = torch.where((e > 0) == (s > 0), 1, -1)
    u = torch.where(fix, u + step, u)
    return u.view(torch.float64).to(torch.float32)


def div(a, b):
    """RN(a / b) in float32: the float64 quotient rounded once more (innocuous: 53 ≥ 2·24 + 2), whatever
    vector instructions torch picks."""
    return (a.to(torch.float64) / b.to(torch.float64)).to(torch.float32)


def sqrt(a):
    """RN(√a) in float32, as Go's float32(math.Sqrt(float64(a))): torch's own float32 sqrt on the CPU is not
    always correctly rounded (measured: 0.44763002 for √0.20037265, RN is 0.44763005)."""
    return torch.sqrt(a.to(torch.float64)).to(torch.float32)


def _c(bits):
    return _f32_bits(torch.tensor(bits, dtype=torch.int64)).item()


_L2E, _LN2_HI, _LN2_LO = _c(0x3FB8AA3B), _c(0x3F317218), _c(0xB102E308)
_E = [_c(b) for b in (0x39509279, 0x3AB6A192, 0x3C088870, 0x3D2AAA75, 0x3E2AAAAB, 0x3F000000)]
_HI_X, _LO_X = _c(0x42B17217), _c(0xC2D00000)
_LN2_HI_L, _LN2_LO_L = _c(0x3F317200), _c(0x35BFBE8E)
_L = [_c(b) for b in (0x3D8AA107, 0xBDECB35B, 0x3DF1EAA4, 0xBDFE60A7, 0x3E11BD19, 0xBE2AACF3, 0x3E4CD098,
                      0xBE800004, 0x3EAAAAA7, 0xBF000000)]


def _k(v, like):
    return torch.full_like(like, v, dtype=torch.float32)


def exp(x):
    """kernels.Exp (§2.1), element-wise on a float32 tensor."""
    x = x.to(torch.float32)
    t = x * _L2E
    n = torch.round(t)  # ties to even
    r = fma32(-n, _k(_LN2_HI, x), x)
    r = fma32(-n, _k(_LN2_LO, x), r)
    p = _k(_E[0], x)
    for c in _E[1:]:
        p = fma32(p, r, _k(c, x))
    p = fma32(p, r, _k(1.0, x))
    p = fma32(p, r, _k(1.0, x))
    k = torch.nan_to_num(n, nan=0.0, posinf=0.0, neginf=0.0).clamp(-150, 128).to(torch.int64)
    k1 = torch.div(k, 2, rounding_mode="floor")
    k2 = k - k1
    y = (p * _f32_bits((k1 + 127) << 23)) * _f32_bits((k2 + 127) << 23)
    y = torch.where(x < _LO_X, torch.zeros_like(x), y)
    y = torch.where(x > _HI_X, torch.full_like(x, float("inf")), y)
    return torch.where(torch.isnan(x), x, y)


def log(x):
    """kernels.Log (§2.2), element-wise on a float32 tensor."""
    x = x.to(torch.float32)
    u = _bits(x)
    sub = (u < 0x00800000) & (x > 0)
    xs = torch.where(sub, x * 2.0 ** 23, x)
    u = _bits(xs)
    e = torch.where(sub, -23, 0) + (u >> 23) - 127
    frac = u & 0x007FFFFF
    m = _f32_bits(frac | 0x3F800000)
    hi = frac > 0x003504F3
    m = torch.where(hi, m * 0.5, m)
    e = torch.where(hi, e + 1, e)
    g = m - 1.0
    q = _k(_L[0], x)
    for c in _L[1:]:
        q = fma32(q, g, _k(c, x))
    g2 = g * g
    y = fma32(g2, q, g)
    fe = e.to(torch.float32)
    y = fma32(fe, _k(_LN2_LO_L, x), y)
    y = fma32(fe, _k(_LN2_HI_L, x), y)
    y = torch.where(x == float("inf"), x, y)
    y = torch.where(x == 0, torch.full_like(x, float("-inf")), y)
    y = torch.where(x < 0, _f32_bits(torch.full_like(u, _NAN)), y)
    return torch.where(torch.isnan(x), x, y)


def tree(parts):
    """The fixed pairwise tree over the leading axis of parts (n, ...) float32, n a power of two: adjacent pairs
    first, level by level, ((p0⊕p1)⊕(p2⊕p3))⊕((p4⊕p5)⊕(p6⊕p7)) for 8 (kernels.TreeSum; nvls's T(0, n), §12)."""
    n = parts.shape[0]
    if n < 1 or n & (n - 1):
        raise ValueError(f"bitalign: the tree adds a power of two of partials, not {n}")
    while parts.shape[0] > 1:
        parts = parts[0::2] + parts[1::2]
    return parts[0]


def _seq(parts):
    s = parts[0]
    for p in parts[1:]:
        s = s + p
    return s


def exact_products(*ts):
    """Whether every product of two elements of the tensors is exact in float32 (kernels.exactProducts): all
    are bf16 values (8 significant bits, so a product has at most 16) of magnitude 0 or in [2^-60, 2^60] (no
    underflow, no overflow). Then fma(a, b, c) = RN(RN(a·b) + c) bit for bit."""
    for t in ts:
        u = _bits(t)
        a = u & 0x7FFFFFFF
        if bool(((u & 0xFFFF) != 0).any()) or bool(((a != 0) & ((a < 0x21800000) | (a > 0x5D800000))).any()):
            return False
    return True


def chains(x, w, bounds):
    """(len(bounds)-1, M, N) float32: chain s is Σ over k in [bounds[s], bounds[s+1]) ascending of
    fma(x[m, k], w[n, k], acc) from +0 (an empty chain is +0). x (M, K), w (N, K) float32 CPU tensors."""
    M, N = x.shape[0], w.shape[0]
    S = len(bounds) - 1
    lens = [bounds[s + 1] - bounds[s] for s in range(S)]
    acc = torch.zeros((S, M, N), dtype=torch.float32)
    xt, wt = x.T.contiguous(), w.T.contiguous()  # (K, M), (K, N)
    # bf16 operands in range: the product is exact, so the FMA is one float32 add of it (any fusion of the
    # multiply and the add gives the same bits); otherwise the exact fma32
    step = (lambda a, b, c: torch.addcmul(c, a, b)) if exact_products(x, w) else fma32
    for i in range(max(lens, default=0)):
        act = [s for s in range(S) if i < lens[s]]
        ks = torch.tensor([bounds[s] + i for s in act])
        if len(act) == S:
            acc = step(xt[ks][:, :, None], wt[ks][:, None, :], acc)  # every chain's next k
        else:
            sel = torch.tensor(act)
            acc[sel] = step(xt[ks][:, :, None], wt[ks][:, None, :], acc[sel])
    return acc


def _check2(op, x, w):
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"bitalign.{op}: x must be (M, K) and w (N, K), are {tuple(x.shape)} and {tuple(w.shape)}")
    if x.dtype != torch.float32 or w.dtype != torch.float32:
        raise ValueError(f"bitalign.{op}: x and w must be float32, are {x.dtype} and {w.dtype}")


def linear(x, w, bias, profile, out_dtype):
    """MatmulForward (§4): round_dt(tree(chains) ⊕ bias); the twin of bitalign.ops.linear."""
    _check2("linear", x, w)
    bounds, is_tree = _launch.matmul_bounds(profile, x.shape[0], x.shape[1])
    parts = chains(x, w, bounds)
    return finish(tree(parts) if is_tree else _seq(parts), bias, out_dtype)


def linear_partial(x, w, tp, profile):
    """MatmulPartial (§4): this rank's float32 subtree of its G = 8/tp local segments, unrounded, no bias
    (standard: one chain over the local K); the twin of bitalign.ops.linear_partial."""
    _check2("linear_partial", x, w)
    bounds, is_tree = _launch.partial_bounds(profile, x.shape[1], tp)
    parts = chains(x, w, bounds)
    return tree(parts) if is_tree else _seq(parts)


def linear_finish(parts, bias, profile, out_dtype):
    """round_dt(tree(parts) ⊕ bias): parts (tp, M, N) are the ranks' linear_partial outputs in rank order, added by
    the tree over ranks (standard: left to right); the twin of bitalign.ops.linear_finish."""
    if parts.dim() != 3 or parts.shape[0] not in (1, 2, 4, 8):
        raise ValueError(f"bitalign.linear_finish: parts must be (tp, M, N) with tp in 1, 2, 4, 8, has shape "
                         f"{tuple(parts.shape)}")
    return finish(_seq(parts) if profile == "standard" else tree(parts), bias, out_dtype)


def rms_norm(x, w, eps, profile, out_dtype):
    """RMSNormForward (§5), canonical profile: ss = the 8-segment sum of fma(x_k, x_k, acc), mean = ss ⊘ C,
    r = 1 ⊘ sqrt(mean ⊕ eps), out = round(w ⊗ round(x ⊗ r)); the twin of bitalign.ops.rms_norm."""
    if profile != "canonical":
        raise ValueError(f"bitalign.cpu.rms_norm: only the canonical profile, not {profile!r}")
    rows, C = x.shape
    bounds = _launch.seg_bounds(C, _launch.SEGMENTS)
    step = (lambda a, b, c: torch.addcmul(c, a, b)) if exact_products(x) else fma32
    xt = x.T.contiguous()
    S = _launch.SEGMENTS
    lens = [bounds[s + 1] - bounds[s] for s in range(S)]
    acc = torch.zeros((S, rows), dtype=torch.float32)
    for i in range(max(lens, default=0)):
        act = [s for s in range(S) if i < lens[s]]
        v = xt[torch.tensor([bounds[s] + i for s in act])]
        if len(act) == S:
            acc = step(v, v, acc)
        else:
            sel = torch.tensor(act)
            acc[sel] = step(v, v, acc[sel])
    mean = div(tree(acc), torch.tensor(float(C), dtype=torch.float32))
    r = div(torch.ones_like(mean), sqrt(mean + torch.tensor(eps, dtype=torch.float32)))
    h = round_dt(x * r[:, None], out_dtype)
    return round_dt(w[None, :] * h, out_dtype)


ATTENTION_BLOCK = 64  # kernels.AttentionBlock: the fixed key blocks of §7, from position 0


def attention(q, k, v, pos, heads, kv_heads, hd, scale, profile, out_dtype):
    """AttentionForward (§7), canonical profile: q (T, heads·hd) at positions pos (T) over one sequence's cache k, v
    (S, kv_heads·hd); for every (t, h): 64-key blocks from position 0 up to pos[t], each score one FMA chain over
    hd then ⊗ scale, the block's max, the online softmax with Exp, acc = fma(e, v, acc) in ascending key order,
    out = round_dt(acc ⊘ l); the twin of bitalign.ops.attention. Vectorised over queries and heads; a query's
    result depends only on its position and the cache, as the kernel's."""
    if profile != "canonical":
        raise ValueError(f"bitalign.cpu.attention: only the canonical profile, not {profile!r}")
    T, S = q.shape[0], k.shape[0]
    g = heads // kv_heads
    idx = torch.arange(heads) // g  # query head h reads kv head h / (heads / kv_heads)
    qh = q.reshape(T, heads, hd)
    kh = k.reshape(S, kv_heads, hd)[:, idx]  # (S, heads, hd)
    vh = v.reshape(S, kv_heads, hd)[:, idx]
    P = pos.to(torch.int64)
    m = torch.full((T, heads), float("-inf"))
    l = torch.zeros((T, heads))
    acc = torch.zeros((T, heads, hd))
    step = (lambda a, b, c: torch.addcmul(c, a, b)) if exact_products(q, k) else fma32
    sc = torch.tensor(scale, dtype=torch.float32)
    top = int(P.max()) if T else -1
    for blk in range(0, top + 1, ATTENTION_BLOCK):
        J = min(blk + ATTENTION_BLOCK, top + 1) - blk
        kb = kh[blk:blk + J].permute(1, 2, 0)  # (heads, hd, J)
        d = torch.zeros((T, heads, J))
        for i in range(hd):  # each score's chain over hd in ascending i
            d = step(qh[:, :, i, None], kb[None, :, i, :], d)
        s = d * sc
        valid = (blk + torch.arange(J))[None, :] <= P[:, None]  # (T, J): key j ≤ the query's position
        active = (blk <= P)[:, None]  # the query takes part in this block
        bm = torch.where(valid[:, None, :], s, float("-inf")).max(-1).values  # the block's max (finite scores)
        mn = torch.where(bm > m, bm, m)
        alpha = exp(m - mn)  # the first block: Exp(-Inf) = 0
        l2, acc2 = l * alpha, acc * alpha[..., None]
        for jj in range(J):  # ascending keys
            e = exp(s[:, :, jj] - mn)
            ok = valid[:, jj, None]
            l2 = torch.where(ok, l2 + e, l2)
            acc2 = torch.where(ok[..., None], fma32(e[..., None], vh[blk + jj][None], acc2), acc2)
        m = torch.where(active, mn, m)
        l = torch.where(active, l2, l)
        acc = torch.where(active[..., None], acc2, acc)
    return round_dt(div(acc, l[..., None]), out_dtype).reshape(T, heads * hd)


def sample(logits, seqs, pos, temperature, seed, top_k=0, top_p=1.0):
    """Sample (§10): row t of logits (T, V) drawn after position pos[t] of sequence seqs[t]: greedy (value desc,
    index asc) when temperature <= 0, else the Gumbel-max of z = x ⊘ temperature with score = z ⊕
    (−Log(−Log(u))), u = bitalign.sampling.uniform(seed, seq, pos, index); NaN never drawn. With top-k or top-p,
    each row goes through bitalign.sampling.draw (the numpy reference of the whole rule). The twin of
    bitalign.ops.sample."""
    import numpy as np

    from . import sampling

    if temperature > 0 and (0 < top_k < logits.shape[1] or top_p < 1):
        x, s, p = logits.to(torch.float32).cpu().numpy(), seqs.cpu().numpy(), pos.cpu().numpy()
        tok = [sampling.draw(x[r], temperature, top_k, top_p, int(seed), int(s[r]), int(p[r])) for r in range(len(x))]
        return torch.tensor(tok, dtype=torch.int32, device=logits.device)
    x = logits.to(torch.float32)
    if temperature <= 0:
        return torch.where(torch.isnan(x), float("-inf"), x).argmax(1).to(torch.int32)  # the first of equal maxima
    z = div(x, torch.tensor(temperature, dtype=torch.float32))
    u = torch.from_numpy(sampling.uniform(int(seed), seqs.cpu().numpy()[:, None], pos.cpu().numpy()[:, None],
                                          np.arange(x.shape[1])[None, :]))
    score = torch.where(torch.isnan(z), float("-inf"), z + (-log(-log(u))))
    return score.argmax(1).to(torch.int32)


def residual(a, b, out_dtype):
    """round_dt(a ⊕ b) (§8)."""
    return round_dt(a + b, out_dtype)


def swiglu(gate, up, out_dtype):
    """round_dt(round_dt(SiLU(gate)) ⊗ up) with SiLU(x) = x ⊘ (1 ⊕ Exp(−x)) (§2.3, §8)."""
    s = div(gate, 1.0 + exp(-gate))
    return round_dt(round_dt(s, out_dtype) * up, out_dtype)


def finish(y, bias, out_dtype):
    """MatmulFinish (§4): round_dt(y ⊕ bias) (bias (N) or None)."""
    if bias is not None:
        y = y + bias
    return round_dt(y, out_dtype)


# --- the sharded log-softmax stages (§9, kernels/softmax.go) --------------------------------------------------------


def log_softmax_max(x):
    """(T) the ascending scan's max of each row of x (T, V): NaN anywhere gives NaN. No +0 fix (the caller does
    it after the ranks' max is combined)."""
    m = x.max(1).values  # a max is order-free but for NaN and the sign of zero
    # the scan keeps the first of equal values: a row whose max is zero keeps the sign of the first zero; the
    # ⊕-free +0 fix below makes that moot, so only NaN needs the scan's rule
    return torch.where(torch.isnan(x).any(1), _f32_bits(torch.full_like(m, _NAN, dtype=torch.int64)), m)


def max_tree(ms):
    """The ranks' maxima ms (tp, T) combined by §12's tree with max(a, b) = NaN if either is NaN, else
    (b > a ? b : a); then a zero max becomes +0 (its sign must not depend on which rank held it)."""
    n = ms.shape[0]
    if n < 1 or n & (n - 1):
        raise ValueError(f"bitalign: the tree combines a power of two of ranks, not {n}")
    while ms.shape[0] > 1:
        a, b = ms[0::2], ms[1::2]
        ms = torch.where(torch.isnan(a) | torch.isnan(b), a + b, torch.where(b > a, b, a))
    m = ms[0]
    return torch.where(m == 0, torch.zeros_like(m), m)


def log_softmax_sum(x, m, tp, profile):
    """(T) this rank's subtree of Σ Exp(x_j ⊖ m) over its columns (8/tp local segments, each a ⊕ chain in
    ascending j; standard: one chain)."""
    T, V = x.shape
    G = _launch.SEGMENTS // tp if tp in (1, 2, 4, 8) else None
    if G is None:
        raise ValueError(f"bitalign: tensor-parallel degree {tp} not in {{1, 2, 4, 8}} (8-segment rule)")
    bounds = [0, V] if profile == "standard" else _launch.seg_bounds(V, G)
    e = exp(x - m[:, None]).T.contiguous()  # (V, T)
    S = len(bounds) - 1
    lens = [bounds[s + 1] - bounds[s] for s in range(S)]
    parts = torch.zeros((S, T), dtype=torch.float32)
    for i in range(max(lens, default=0)):  # every segment's chain one column further, in ascending j
        act = [s for s in range(S) if i < lens[s]]
        cols = e[torch.tensor([bounds[s] + i for s in act])]
        if len(act) == S:
            parts = parts + cols
        else:
            sel = torch.tensor(act)
            parts[sel] = parts[sel] + cols
    return parts[0] if profile == "standard" else tree(parts)


def logprob_target(x, targets, m, off):
    """(T) d = (x[t, target − off] ⊖ m) ⊕ 0 where this rank holds the target (columns [off, off + V)), else +0."""
    T, V = x.shape
    j = targets.to(torch.int64) - off
    own = (j >= 0) & (j < V)
    xv = x[torch.arange(T), j.clamp(0, max(V - 1, 0))]
    d = (xv - m) + 0.0
    return torch.where(own, d, torch.zeros_like(d))


def logprob_finish(d, S):
    """(T) round_f32(d ⊖ Log(S))."""
    return round_dt(d - log(S), "f32")


def log_softmax_finish(x, m, S):
    """(T, V) round_f32(((x ⊖ m) ⊕ 0) ⊖ Log(S))."""
    return round_dt(((x - m[:, None]) + 0.0) - log(S)[:, None], "f32")


def log_softmax(x, profile):
    """LogSoftmaxForward on one rank (the twin of bitalign.ops.log_softmax)."""
    m = max_tree(log_softmax_max(x)[None])
    return log_softmax_finish(x, m, log_softmax_sum(x, m, 1, profile))


def logprobs(x, targets, profile):
    """LogProbs on one rank (the twin of bitalign.ops.logprobs)."""
    m = max_tree(log_softmax_max(x)[None])
    return logprob_finish(logprob_target(x, targets, m, 0), log_softmax_sum(x, m, 1, profile))
