"""The RoPE tables of docs/arithmetic.md §6, bit for bit as the Go engine makes them (kernels.RoPETables).

ω_j = θ^(−2j/hd), the float64 nearest to the exact value (here by decimal arithmetic at 80 digits, in Go by
math/big at 256 bits); the angle p·ω_j one float64 product; its sine and cosine by Cephes' algorithm as Go's
math.Sin and math.Cos compute it (Cody–Waite reduction by π/4 in three parts, degree-6 polynomials), every
operation a separately rounded float64 operation (numpy never fuses them; the Go code rounds each explicitly);
then rounded to float32 and to the model dtype. kernels/testdata/rope_vectors.tsv, which the Go reference writes,
pins these tables for the common bases and head dims.
"""

from decimal import Decimal, localcontext

import numpy as np

TRIG_MAX = 1 << 29  # Cody–Waite reduction's range (kernels.trigMax)

_SIN = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
        -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_COS = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
        2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)
_PI4A = float.fromhex("0x1.921fb40000000p-1")
_PI4B = float.fromhex("0x1.4442d00000000p-25")
_PI4C = float.fromhex("0x1.8469898cc5170p-49")
_FOUR_BY_PI = float.fromhex("0x1.45f306dc9c883p+0")  # 4/π rounded once, as Go's constant 4 / math.Pi


def inv_freq(theta, head_dim):
    """ω_j = θ^(−2j/hd) for j < hd/2, each the float64 nearest to the exact value."""
    if not (theta > 0) or theta == float("inf"):
        raise ValueError(f"bitalign: RoPE base {theta} must be a positive finite number")
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"bitalign: RoPE head dim {head_dim} is not a positive even number")
    with localcontext() as ctx:
        ctx.prec = 80
        ln = Decimal(float(theta)).ln()
        out = [1.0] + [float((ln * Decimal(-2 * j) / Decimal(head_dim)).exp()) for j in range(1, head_dim // 2)]
    return np.array(out, dtype=np.float64)


def _poly6(c, z):
    p = c[0] * z
    for k in c[1:5]:
        p = (p + k) * z
    return p + c[5]


def sin_cos(x):
    """(sin x, cos x) of a float64 array, 0 ≤ x < 2^29, as kernels.sinCos64 (Go's math.Sin/math.Cos)."""
    x = np.asarray(x, dtype=np.float64)
    if (x < 0).any() or (x >= TRIG_MAX).any() or np.isnan(x).any():
        raise ValueError("bitalign: RoPE angles must be in [0, 2^29)")
    j = (x * _FOUR_BY_PI).astype(np.uint64)  # truncation, as Go's uint64(...)
    odd = (j & np.uint64(1)) == 1
    j = j + odd.astype(np.uint64)
    y = j.astype(np.float64)
    j = j & np.uint64(7)
    z = ((x - y * _PI4A) - y * _PI4B) - y * _PI4C
    zz = z * z
    sp = z + (z * zz) * _poly6(_SIN, zz)
    cp = (1.0 - 0.5 * zz) + (zz * zz) * _poly6(_COS, zz)
    sign = j > 3
    j = np.where(sign, j - np.uint64(4), j)
    swap = (j == 1) | (j == 2)
    s = np.where(swap, cp, sp)
    c = np.where(swap, sp, cp)
    s = np.where(sign, -s, s)
    c = np.where((j > 1) != sign, -c, c)
    return s, c


def round_dt(x, dt):
    """float32 x rounded to dt ("bf16", "f16", "f32") and widened back to float32 (round to nearest even)."""
    x = np.asarray(x, dtype=np.float32)
    if dt == "f32":
        return x
    if dt == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    if dt != "bf16":
        raise ValueError(f"bitalign: dtype {dt!r} (bf16, f16 or f32)")
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    r = np.where(np.isnan(x), np.uint32(0x7FC00000), r)
    return r.view(np.float32)


def tables(theta, head_dim, max_pos, dt):
    """(cos, sin), each float32 (max_pos, head_dim/2) holding dt values: kernels.RoPETables(theta, hd, max_pos, dt)."""
    if not 0 < max_pos < TRIG_MAX:
        raise ValueError(f"bitalign: RoPE tables of {max_pos} positions (1 to 2^29 - 1)")
    w = inv_freq(theta, head_dim)
    a = np.arange(max_pos, dtype=np.float64)[:, None] * w[None, :]
    s, c = sin_cos(a)
    return round_dt(c.astype(np.float32), dt), round_dt(s.astype(np.float32), dt)
