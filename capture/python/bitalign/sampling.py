"""The sampling noise's keys (docs/arithmetic.md §10), in numpy: the same words the engine and sample.ptx use.

The canonical rule draws the token after position pos of sequence seq by Gumbel-max over the vocabulary, with a
uniform per vocabulary index i from Philox4x32-10:

    key     = (lo32(seed), hi32(seed))
    counter = (i >> 2, lo32(pos), lo32(seq), hi32(seq))
    word    = output[i & 3]
    u       = (2 * (word >> 9) + 1) * 2^-24              an odd multiple of 2^-24, in (0, 1)

so a sequence samples the same tokens whatever its batch slot, batch size or step: the key is the sequence's own
id and position, never the row it happens to occupy. uniform() is exact (integer arithmetic and one exact
conversion); gumbel() is -Log(-Log(u)) with the engine's own Log (bitalign.mathf, the port of kernels.Log; bt_log
in the PTX). kernels/testdata/sampling_vectors.tsv, which the Go reference writes, pins both, and
kernels/testdata/mathf_vectors.tsv pins the Gumbel noise of every one of the 2^23 uniforms.

Top-k and top-p (§10): the order is (z desc, index asc) with z = x ⊘ T; top-k keeps its first k; top-p walks the
kept set in that order summing e_j = Exp(z_j ⊖ mx) sequentially in float32 (nucleus(): the host step of
bitalign.ops.sample, numpy's add.accumulate being a sequential float32 sum). draw() is the whole rule for one row,
a transcription of kernels.Sample: the CPU reference that kernels/testdata/topkp_vectors.tsv pins.
"""

import numpy as np

from . import mathf

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint32(0x9E3779B9)
_W1 = np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def philox4x32(ctr, key):
    """Philox4x32-10 over arrays: ctr is four uint32 arrays (broadcastable), key two; returns four uint32 arrays."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in ctr)
    k0, k1 = (np.array(k, dtype=np.uint32) for k in key)
    with np.errstate(over="ignore"):
        for r in range(10):
            if r:
                k0 = k0 + _W0
                k1 = k1 + _W1
            p0 = _M0 * c0.astype(np.uint64)
            p1 = _M1 * c2.astype(np.uint64)
            c0, c1, c2, c3 = (
                (p1 >> _S32).astype(np.uint32) ^ c1 ^ k0,
                (p1 & _LO).astype(np.uint32),
                (p0 >> _S32).astype(np.uint32) ^ c3 ^ k1,
                (p0 & _LO).astype(np.uint32),
            )
    return c0, c1, c2, c3


def key_words(seed, seq, pos):
    """The Philox key and the counter's sequence/position words of (seed, seq, pos): ((k0, k1), (pos, seq_lo, seq_hi)).

    seed is an unsigned 64-bit integer; seq and pos are signed 64-bit (two's complement, as the engine's int64)."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    s = np.asarray(seq, dtype=np.int64).astype(np.uint64)
    p = np.asarray(pos, dtype=np.int64).astype(np.uint64)
    k = (np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32))
    return k, ((p & _LO).astype(np.uint32), (s & _LO).astype(np.uint32), (s >> _S32).astype(np.uint32))


def uniform_bits(seed, seq, pos, index):
    """The float32 bit patterns (uint32) of the uniforms for vocabulary indexes index of (seed, seq, pos); the
    arguments broadcast against each other."""
    k, (pw, slo, shi) = key_words(seed, seq, pos)
    i = np.asarray(index, dtype=np.int64)
    if (i < 0).any() or (i >= 1 << 31).any():
        raise ValueError("bitalign: sampling: vocabulary indexes must be in [0, 2^31)")
    i = i.astype(np.uint32)
    shape = np.broadcast(pw, slo, i).shape
    out = philox4x32((np.broadcast_to(i >> np.uint32(2), shape), pw, slo, shi), k)
    words = np.choose((i & np.uint32(3)).astype(np.intp), out)
    # (2 * (w >> 9) + 1) * 2^-24 is exact in float32 (24 significant bits at most)
    u = ((words >> np.uint32(9)).astype(np.float64) * 2 + 1) * 2.0**-24
    return u.astype(np.float32).view(np.uint32)


def uniform(seed, seq, pos, index):
    """The uniforms themselves (float32); see uniform_bits."""
    return uniform_bits(seed, seq, pos, index).view(np.float32)


def gumbel(seed, seq, pos, index):
    """The Gumbel noises -Log(-Log(u)) (float32) of the uniforms of (seed, seq, pos, index) (kernels.Gumbel)."""
    return -mathf.log(-mathf.log(uniform(seed, seq, pos, index)))


def params(temperature, top_k=0, top_p=1.0):
    """(temperature, top_k, top_p) as the engine holds them (kernels.SampleParams): float32 temperature and top-p,
    checked. temperature <= 0 is greedy; top_k 0 (or >= V) keeps every token; top_p 1 keeps every token (a value
    that rounds to 1 in float32 too). Raises ValueError for a NaN temperature, a negative top_k, a top_p outside
    (0, 1]."""
    t = np.float32(temperature)
    if t != t:
        raise ValueError("bitalign: sampling: temperature is NaN")
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 0:
        raise ValueError(f"bitalign: sampling: top_k must be an integer >= 0 (0: no top-k), not {top_k!r}")
    p = np.float32(top_p)
    if not 0 < p <= 1:
        raise ValueError(f"bitalign: sampling: top_p must be in (0, 1] (1: no top-p), not {top_p!r}")
    return t, int(top_k), p


def nucleus(zs, kept, top_p):
    """Top-p's walk (§10) for rows of z in the order (z desc, index asc): zs (R, n) float32, row r's first kept[r]
    entries the kept set after top-k (kept[r] may exceed n when the columns past n all have Exp(z ⊖ mx) = +0:
    they change no sum); returns how many of each row's kept set stay (R,) int64 — all kept[r] when the sums are
    NaN (mx = ±Inf), as in kernels.Sample.

    mx = z of the first; e_j = Exp(z_j ⊖ mx); c_j = e_0 ⊕ … ⊕ e_j in order (np.add.accumulate in float32 is that
    sequential sum); thr = top_p ⊗ c_last; the walk stops after the first j with c_j >= thr."""
    zs = np.atleast_2d(np.asarray(zs, dtype=np.float32))
    kept = np.asarray(kept, dtype=np.int64).reshape(-1)
    R, n = zs.shape
    if n == 0:
        return kept.copy()
    valid = np.arange(n)[None, :] < kept[:, None]
    with np.errstate(invalid="ignore"):
        d = zs - zs[:, :1]
    e = np.where(valid, mathf.exp(np.where(valid, d, np.float32(0))), np.float32(0))
    c = np.add.accumulate(e, axis=1, dtype=np.float32)
    thr = np.float32(top_p) * c[:, -1]
    with np.errstate(invalid="ignore"):
        hit = (c >= thr[:, None]) & valid
    return np.where(hit.any(1), hit.argmax(1) + 1, kept)


def kept(logits, temperature, top_k=0, top_p=1.0):
    """(z, keep) of one logits row (V) for a temperature > 0 (kernels.sampleKeep): z = logits ⊘ temperature and
    the tokens top-k and top-p keep (every non-NaN token in index order when neither applies, else in the
    order (z desc, index asc))."""
    x = np.asarray(logits, dtype=np.float32).reshape(-1)
    t, top_k, top_p = params(temperature, top_k, top_p)
    if not t > 0:
        raise ValueError("bitalign: sampling: kept() needs a temperature > 0 (greedy keeps no set)")
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        z = x / t
    keep = np.flatnonzero(z == z)
    if 0 < top_k < keep.size or top_p < 1:
        keep = keep[np.lexsort((keep, -z[keep]))]  # (z desc, index asc); -0 and +0 compare equal
        if 0 < top_k < keep.size:
            keep = keep[:top_k]
        if top_p < 1 and keep.size:
            keep = keep[: int(nucleus(z[keep][None, :], [keep.size], top_p)[0])]
    return z, keep


def draw(logits, temperature, top_k, top_p, seed, seq, pos):
    """The token the canonical rule (§10, kernels.Sample) draws after position pos of sequence seq from one
    logits row (V) float32: greedy when temperature <= 0, else temperature, top-k, top-p and Gumbel-max over the
    kept set (kept()); -1 when every logit is NaN. numpy only (the CPU reference of bitalign.ops.sample)."""
    x = np.asarray(logits, dtype=np.float32).reshape(-1)
    t, top_k, top_p = params(temperature, top_k, top_p)
    if not t > 0:
        keep = np.flatnonzero(x == x)
        return int(keep[np.argmax(x[keep])]) if keep.size else -1  # the first largest
    z, keep = kept(x, t, top_k, top_p)
    if keep.size == 0:
        return -1
    live = keep[z[keep] > -np.inf]  # z = −Inf scores −Inf whatever the (finite) noise: no noise needed
    if live.size == 0:
        return int(keep.min())  # every score −Inf: the smallest index
    s = z[live] + gumbel(seed, seq, pos, live)
    return int(live[s == s.max()].min())  # the largest score, ties to the smallest index
