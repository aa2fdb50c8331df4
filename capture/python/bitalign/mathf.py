"""The engine's float32 FMA, Exp and Log (docs/arithmetic.md §2.1, §2.2) in numpy, bit for bit kernels/mathf.go.

numpy has no float32 fused multiply-add, so fma32 does what kernels.FMA32 does: the product of two float32 is
exact in float64 (24 + 24 bits), the float64 sum is rounded once, and rounding that to float32 is correct unless
the float64 sum lies exactly halfway between two float32 values or below 2^-126 (fewer float32 bits); those lanes
are rounded to odd at 53 bits with the exact TwoSum error, and 53 >= 24 + 2 makes the final rounding correct.
Every other step is one numpy float32 operation (IEEE, round to nearest even; numpy never fuses two ufuncs), in
the order of §2. kernels/testdata/mathf_vectors.tsv, which the Go reference writes, pins all three (about
5 million exponentials, 5 million logarithms, every one of the 2^23 Gumbel noises and 5 million FMAs).
"""

import numpy as np

_F32 = np.float32


def _c(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


# docs/arithmetic.md §2.1 (kernels/mathf.go)
_L2E, _LN2_HI, _LN2_LO = _c(0x3FB8AA3B), _c(0x3F317218), _c(0xB102E308)
_EXP_POLY = tuple(_c(b) for b in (0x3AB6A192, 0x3C088870, 0x3D2AAA75, 0x3E2AAAAB, 0x3F000000)) + (_F32(1), _F32(1))
_E7, _HI_X, _LO_X = _c(0x39509279), _c(0x42B17217), _c(0xC2D00000)
# §2.2
_LN2_HI_L, _LN2_LO_L = _c(0x3F317200), _c(0x35BFBE8E)
_LOG_POLY = tuple(_c(b) for b in (0x3D8AA107, 0xBDECB35B, 0x3DF1EAA4, 0xBDFE60A7, 0x3E11BD19, 0xBE2AACF3,
                                  0x3E4CD098, 0xBE800004, 0x3EAAAAA7, 0xBF000000))  # L11 down to L2
CANONICAL_NAN = _c(0x7FC00000)

LO_X = _LO_X  # Exp(x) = +0 for every x < LO_X (−104)


def fma32(a, b, c):
    """a·b + c rounded once to float32 (IEEE fusedMultiplyAdd, CUDA __fmaf_rn, kernels.FMA32); broadcasts."""
    a64, b64, c64 = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64  # exact
        s = np.asarray(p + c64)
        u = s.view(np.uint64)
        out = s.astype(np.float32)
        slow = ((u & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)) | (
            (u & np.uint64(0x7FF0000000000000)) < np.uint64(0x3810000000000000))
        if slow.any():
            ss, pp, cc = s[slow], np.broadcast_to(p, s.shape)[slow], np.broadcast_to(c64, s.shape)[slow]
            bp = ss - cc  # TwoSum: ss + e == pp + cc exactly
            bc = ss - bp
            e = (pp - bp) + (cc - bc)
            us = ss.view(np.uint64).copy()
            odd = (e != 0) & np.isfinite(ss) & ((us & np.uint64(1)) == np.uint64(0))
            away = (e > 0) == (ss > 0)  # towards the exact sum: away from zero or towards it
            us[odd & away] += np.uint64(1)
            us[odd & ~away] -= np.uint64(1)
            out[slow] = us.view(np.float64).astype(np.float32)
    return out


def exp(x):
    """e^x by docs/arithmetic.md §2.1 (kernels.Exp, CUDA bt_exp), element-wise over float32."""
    x = np.asarray(x, dtype=np.float32)
    nan, big, small = x != x, x > _HI_X, x < _LO_X
    xs = np.where(nan | big | small, _F32(0), x)
    n = np.rint(xs * _L2E)  # float32 product, then ties to even
    r = fma32(-n, _LN2_HI, xs)
    r = fma32(-n, _LN2_LO, r)
    p = np.full(xs.shape, _E7, dtype=np.float32)
    for c in _EXP_POLY:
        p = fma32(p, r, c)
    k = n.astype(np.int32)
    k1 = k >> 1  # arithmetic shift: floor(k/2)
    k2 = k - k1
    s1 = ((k1 + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)
    s2 = ((k2 + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)
    with np.errstate(over="ignore"):
        y = (p * s1) * s2  # the first product exact, one rounding
    return np.where(nan, x, np.where(big, _F32(np.inf), np.where(small, _F32(0), y)))


def log(x):
    """The natural logarithm by docs/arithmetic.md §2.2 (kernels.Log, CUDA bt_log), element-wise over float32."""
    x = np.asarray(x, dtype=np.float32)
    nan, neg, zero, inf = x != x, x < 0, x == 0, x == np.inf
    special = nan | neg | zero | inf
    xs = np.where(special, _F32(1), x)
    u = xs.view(np.uint32)
    sub = u < np.uint32(0x00800000)
    with np.errstate(over="ignore"):
        xs = np.where(sub, xs * _F32(2.0**23), xs)  # exact on the subnormal lanes
    u = xs.view(np.uint32)
    e = np.where(sub, np.int32(-23), np.int32(0)) + (u >> np.uint32(23)).astype(np.int32) - np.int32(127)
    frac = u & np.uint32(0x007FFFFF)
    m = (frac | np.uint32(0x3F800000)).view(np.float32)
    up = frac > np.uint32(0x003504F3)
    m = np.where(up, m * _F32(0.5), m)  # exact: m in (√½, √2]
    e = e + up.astype(np.int32)
    g = m - _F32(1)  # exact (Sterbenz)
    q = np.full(xs.shape, _LOG_POLY[0], dtype=np.float32)
    for c in _LOG_POLY[1:]:
        q = fma32(q, g, c)
    g2 = g * g
    y = fma32(g2, q, g)
    fe = e.astype(np.float32)  # exact
    y = fma32(fe, _LN2_LO_L, y)
    y = fma32(fe, _LN2_HI_L, y)
    return np.where(nan, x, np.where(neg, CANONICAL_NAN, np.where(zero, _F32(-np.inf), np.where(inf, x, y))))
