"""kernels/testdata/op_vectors.tsv (written by the Go reference's TestOpVectors): the inputs, the same integer
formula as kernels.vectorValue, and the table's rows."""

import hashlib
import os

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FILE = os.path.join(REPO, "kernels", "testdata", "op_vectors.tsv")


def stream(s, n, shift):
    """Element i of input stream s (kernels.vectorValue): (h % 255 - 127) / 2^(shift + (h >> 8) % 9), float32."""
    with np.errstate(over="ignore"):
        h = np.arange(n, dtype=np.uint64).astype(np.uint32) * np.uint32(2654435761) + np.uint32((s * 40503) & 0xFFFFFFFF)
    h ^= h >> np.uint32(15)
    v = (h % np.uint32(255)).astype(np.int64) - 127
    e = shift + ((h >> np.uint32(8)) % np.uint32(9)).astype(np.int64)
    return (v.astype(np.float64) / np.exp2(e)).astype(np.float32)


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest()


def rows():
    out = []
    with open(FILE) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            op, params, h = line.rstrip("\n").split("\t")
            kv = dict(p.split("=", 1) for p in params.split())
            out.append((op, params, kv, h))
    return out
