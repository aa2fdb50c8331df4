"""bitalign.mathf (the numpy port of kernels.FMA32, Exp and Log) against the hashes the Go reference writes
(kernels/testdata/mathf_vectors.tsv): about 9 million exponentials, 5 million logarithms, every one of the 2^23
Gumbel noises of §10 (both logarithms of every uniform) and 5 million FMAs (halfway and subnormal cases among them), bit for bit."""

import hashlib
import os

import numpy as np
import pytest

from bitalign import mathf

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_FILE = os.path.join(_REPO, "kernels", "testdata", "mathf_vectors.tsv")
_CHUNK = 1 << 20


def _rows():
    out = []
    with open(_FILE) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fn, spec, n, h = line.rstrip("\n").split("\t")
            out.append((fn, spec, int(n), h))
    return out


def lowbias32(x):
    """kernels.lowbias32 over uint32 arrays (wrapping products)."""
    x = np.asarray(x, dtype=np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def hash_words(seed, i):
    """kernels.hashWord: word i of hash stream seed."""
    return lowbias32(np.asarray(i, dtype=np.uint32) ^ np.uint32((seed * 0x9E3779B9) & 0xFFFFFFFF))


def _ctl(h, lo, span):
    e = (np.uint32(lo) + ((h >> np.uint32(23)) & np.uint32(0xFF)) % np.uint32(span)) << np.uint32(23)
    return ((h & np.uint32(0x807FFFFF)) | e).view(np.float32)


def _signed(h, mag):
    return np.where(h >> np.uint32(31) == 1, -mag, mag)


def inputs(spec, lo, hi):
    """Inputs lo…hi-1 of the set spec (kernels.mathInputs)."""
    i = np.arange(lo, hi, dtype=np.int64)
    if spec == "odd24":
        return ((2 * i + 1).astype(np.float64) * 2.0**-24).astype(np.float32)
    kind, arg = spec.split("=", 1)
    if kind == "bits":
        b0, _, stride = (int(v, 16) for v in arg.split(":"))
        return (b0 + i * stride).astype(np.uint32).view(np.float32)
    if kind == "hash":
        seed, _ = (int(v) for v in arg.split(":"))
        return hash_words(seed, i.astype(np.uint32)).view(np.float32)
    raise AssertionError(spec)


def count(spec):
    if spec == "odd24":
        return 1 << 23
    kind, arg = spec.split("=", 1)
    if kind == "bits":
        b0, b1, stride = (int(v, 16) for v in arg.split(":"))
        return (b1 - b0) // stride + 1
    return int(arg.split(":")[1])


def fma_triples(family, seed, lo, hi):
    """Triples lo…hi-1 of a family (kernels.fmaTriples)."""
    i = np.arange(lo, hi, dtype=np.int64).astype(np.uint32)
    with np.errstate(over="ignore"):
        h0, h1, h2 = (hash_words(seed, np.uint32(3) * i + np.uint32(j)) for j in range(3))
    f64 = lambda h: h.astype(np.float64)  # noqa: E731
    if family == "rand":
        return _ctl(h0, 87, 81), _ctl(h1, 87, 81), _ctl(h2, 47, 161)
    if family == "half":
        ea = (f64((h0 >> np.uint32(12)) & np.uint32(63)) - 44).astype(np.int64)
        eb = (f64((h1 >> np.uint32(12)) & np.uint32(63)) - 44).astype(np.int64)
        a = _signed(h0, np.ldexp(f64(h0 & np.uint32(0xFFF)) + 4096, ea))
        b = np.ldexp(f64(h1 & np.uint32(0xFFF)) + 4096, eb)
        ec = ea + eb - ((h2 >> np.uint32(7)) % np.uint32(48)).astype(np.int64)
        c = _signed(h2, np.ldexp(f64(h2 & np.uint32(0x7F)) + 1, ec))
        return a.astype(np.float32), b.astype(np.float32), c.astype(np.float32)
    if family == "tiny":
        return _ctl(h0, 52, 26), _ctl(h1, 52, 26), (h2 & np.uint32(0x80FFFFFF)).view(np.float32)
    if family == "subhalf":
        k = f64(h0 & np.uint32(0xFF)) + 1
        ea = ((h0 >> np.uint32(8)) % np.uint32(51)).astype(np.int64) - 100
        a = _signed(h0, np.ldexp(1 + k * 2.0**-23, ea))
        b = np.ldexp(1 - k * 2.0**-23, -150 - ea)
        return a.astype(np.float32), b.astype(np.float32), (h2 & np.uint32(0x807FFFFF)).view(np.float32)
    if family == "cancel":
        a, b = _ctl(h0, 107, 41), _ctl(h1, 107, 41)
        c = ((-(a * b)).view(np.uint32) + (h2 & np.uint32(0xFF)) - np.uint32(128)).view(np.float32)
        return a, b, c
    raise AssertionError(family)


_GUMBEL = lambda u: -mathf.log(-mathf.log(u))  # noqa: E731
_FN = {"exp": mathf.exp, "log": mathf.log, "gumbel": _GUMBEL}


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r[0]} {r[1]}")
def test_port_matches_the_go_reference(row):
    fn, spec, n, want = row
    h = hashlib.sha256()
    if fn == "fma":
        family, seed, _ = spec.split("=", 1)[1].split(":")
        for lo in range(0, n, _CHUNK):
            a, b, c = fma_triples(family, int(seed), lo, min(n, lo + _CHUNK))
            h.update(mathf.fma32(a, b, c).astype("<f4").tobytes())
    else:
        assert count(spec) == n, f"{spec}: {count(spec)} inputs here, {n} in the Go reference's table"
        for lo in range(0, n, _CHUNK):
            h.update(_FN[fn](inputs(spec, lo, min(n, lo + _CHUNK))).astype("<f4").tobytes())
    assert h.hexdigest() == want, f"{fn} over {spec}: the port's bits differ from the Go reference's"


def test_fma32_halfway_example():
    # docs/arithmetic.md: a·b = 1+2^-11+2^-24 lies halfway; c = 2^-100 decides; float32(float64 FMA) rounds twice
    a = np.float32(1 + 2.0**-12)
    got = mathf.fma32(a, a, np.float32(2.0**-100))
    assert got.view(np.uint32) == 0x3F801001
    assert mathf.fma32(a, a, np.float32(-(2.0**-100))).view(np.uint32) == 0x3F801000
    assert mathf.fma32(a, a, np.float32(0)).view(np.uint32) == 0x3F801000  # the tie, to even


def test_specials():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -105.0], dtype=np.float32)
    e = mathf.exp(x)
    assert np.isnan(e[0]) and e[1] == np.inf and e[2] == 0 and e[3] == 1 and e[4] == 1 and e[5] == np.inf
    assert e[6] == 0 and not np.signbit(e[6])
    lg = mathf.log(np.array([np.nan, -1.0, 0.0, -0.0, np.inf, 1.0], dtype=np.float32))
    assert lg[1].view(np.uint32) == 0x7FC00000 and lg[2] == -np.inf and lg[3] == -np.inf and lg[4] == np.inf
    assert lg[5] == 0 and not np.signbit(lg[5])
