"""The sampling noise's keys (docs/arithmetic.md §10), in numpy: the same words the engine and sample.ptx use.

The canonical rule draws the token after position pos of sequence seq by Gumbel-max over the vocabulary, with a
uniform per vocabulary index i from Philox4x32-10:

    key     = (lo32(seed), hi32(seed))
    counter = (i >> 2, lo32(pos), lo32(seq), hi32(seq))
    word    = output[i & 3]
    u       = (2 * (word >> 9) + 1) * 2^-24              an odd multiple of 2^-24, in (0, 1)

so a sequence samples the same tokens whatever its batch slot, batch size or step: the key is the sequence's own
id and position, never the row it happens to occupy. uniform() is exact (integer arithmetic and one exact
conversion); the Gumbel transform -log(-log(u)) uses the engine's own log (kernels.Log, bt_log in the PTX) and is
left to the kernel. kernels/testdata/sampling_vectors.tsv, which the Go reference writes, pins both.
"""

import numpy as np

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
