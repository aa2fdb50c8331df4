"""bitalign.rope makes the Go engine's RoPE tables bit for bit (kernels/testdata/rope_vectors.tsv)."""

import hashlib
import math
import os
from decimal import Decimal, localcontext

import numpy as np
import pytest

from bitalign import rope
from opvectors import REPO, digest

_FILE = os.path.join(REPO, "kernels", "testdata", "rope_vectors.tsv")


def _rows():
    with open(_FILE) as f:
        return [line.rstrip("\n").split("\t") for line in f if not line.startswith("#") and line.strip()]


def test_tables_match_the_go_reference():
    rows = _rows()
    assert len(rows) >= 30
    for theta, hd, max_pos, dt, h_inv, h_cos, h_sin in rows:
        inv = rope.inv_freq(float(theta), int(hd))
        assert hashlib.sha256(inv.astype("<f8").tobytes()).hexdigest() == h_inv, f"ω for θ={theta} hd={hd}"
        cos, sin = rope.tables(float(theta), int(hd), int(max_pos), dt)
        assert digest(cos) == h_cos, f"cos for θ={theta} hd={hd} {dt}"
        assert digest(sin) == h_sin, f"sin for θ={theta} hd={hd} {dt}"


def test_inv_freq_is_correctly_rounded():
    # against an independent evaluation: θ^(−2j/hd) at 120 digits, and the two float64 neighbours of the result
    for theta, hd in [(10000.0, 128), (1e6, 64), (1234.5, 80)]:
        inv = rope.inv_freq(theta, hd)
        with localcontext() as ctx:
            ctx.prec = 120
            for j, w in enumerate(inv):
                exact = (Decimal(theta).ln() * Decimal(-2 * j) / Decimal(hd)).exp()
                for n in (math.nextafter(w, 0), math.nextafter(w, 2)):
                    assert abs(Decimal(w) - exact) <= abs(Decimal(n) - exact), (theta, hd, j)


def test_sin_cos_is_gos_math():
    # values Go's math.Sin/math.Cos return (printed with %x of the bits by the Go test's algorithm)
    s, c = rope.sin_cos(np.array([0.0, 1.0, math.pi / 4, 1000.0, 12345.678]))
    assert s[0] == 0.0 and c[0] == 1.0
    assert abs(s[1] - math.sin(1.0)) <= 1e-16 and abs(c[3] - math.cos(1000.0)) <= 1e-15
    with pytest.raises(ValueError, match="angles"):
        rope.sin_cos(np.array([2.0**29]))


def test_round_dt():
    x = np.array([1.0, 1.00390625, 1.005859375, np.nan, -0.0], dtype=np.float32)
    b = rope.round_dt(x, "bf16")
    assert b[0] == 1.0 and b[1] == 1.0 and b[2] == np.float32(1.0078125)
    assert b.view(np.uint32)[3] == 0x7FC00000 and b.view(np.uint32)[4] == 0x80000000
