"""kernels/testdata/topkp_vectors.tsv (written by the Go reference's TestTopKPVectors): the logits rows, the same
integer formulas as kernels.topkpLogits, and the table's rows (the tokens kernels.Sample draws)."""

import os

import numpy as np

from bitalign import sampling
from opvectors import stream

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FILE = os.path.join(REPO, "kernels", "testdata", "topkp_vectors.tsv")


def logits(spec, T, V):
    """Rows 0…T-1 (T, V) float32 of a logits spec (kernels.topkpLogits)."""
    if spec.startswith("hex="):
        row = np.array([int(h, 16) for h in spec[4:].split(",")], dtype=np.uint32).view(np.float32)
        return np.tile(row, (T, 1))
    f = spec[len("stream="):].split(":")
    s, shift = int(f[0]), int(f[1])
    mod = {k: int(v) for k, v in (kv.split("=") for kv in f[2:])}
    x = stream(s, T * V, shift)
    g = np.arange(T * V)
    done = np.zeros(T * V, dtype=bool)
    for k, v in (("nan", np.nan), ("ninf", -np.inf), ("pinf", np.inf)):
        if mod.get(k, 0) > 0:
            hit = (g % mod[k] == 0) & ~done
            x[hit] = v
            done |= hit
    return x.reshape(T, V)


def f32(bits):
    return float(np.array(int(bits, 16), dtype=np.uint32).view(np.float32))


def rows():
    """(spec, V, T, temperature, top_k, top_p, seed, tokens, kept) per line; temperature and top_p are the float32
    values (as Python floats: exact), tokens a list of T ints, kept how many tokens each row keeps (None: greedy)."""
    out = []
    with open(FILE) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            spec, V, T, temp, k, p, seed, tok, kept = line.rstrip("\n").split("\t")
            out.append((spec, int(V), int(T), f32(temp), int(k), f32(p), int(seed), [int(t) for t in tok.split(",")],
                        [None if n == "-" else int(n) for n in kept.split(",")]))
    return out


def keys(T):
    """(seq, pos) of rows 0…T-1: (1000 + r, 5r)."""
    r = np.arange(T, dtype=np.int64)
    return 1000 + r, 5 * r


def expected(x, temp, k, p):
    """The row bitalign.ops.restrict must make of row x: x where sampling.kept keeps the token or x is NaN, −Inf
    elsewhere."""
    keep = np.zeros(x.size, dtype=bool)
    keep[sampling.kept(x, temp, k, p)[1]] = True
    return np.where(keep | np.isnan(x), x, np.float32(-np.inf))
