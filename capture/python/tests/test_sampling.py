"""The Python sampling keys against the table the Go reference writes (kernels/testdata/sampling_vectors.tsv)."""

import os

import numpy as np
import pytest

from bitalign import mathf, sampling

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_VECTORS = os.path.join(_REPO, "kernels", "testdata", "sampling_vectors.tsv")


def _vectors():
    rows = []
    with open(_VECTORS) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            seed, seq, pos, idx, ubits, gbits = line.split("\t")
            rows.append((int(seed), int(seq), int(pos), int(idx), int(ubits, 16), int(gbits, 16)))
    return rows


def test_philox_known_answers():
    # Random123's kat_vectors, as kernels.TestPhiloxKAT
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, key, want in cases:
        got = sampling.philox4x32(ctr, key)
        assert tuple(int(w) for w in got) == want


def test_uniforms_match_the_go_reference():
    rows = _vectors()
    assert len(rows) > 400
    bad = []
    for seed, seq, pos, idx, ubits, _ in rows:
        got = int(sampling.uniform_bits(seed, seq, pos, idx))
        if got != ubits:
            bad.append((seed, seq, pos, idx, hex(got), hex(ubits)))
    assert not bad, f"{len(bad)} of {len(rows)} differ from the Go reference, first {bad[0]}"


def test_vectorised_equals_scalar():
    rows = _vectors()
    seeds = {r[0] for r in rows}
    for seed in seeds:
        sub = [r for r in rows if r[0] == seed]
        seq = np.array([r[1] for r in sub], dtype=np.int64)
        pos = np.array([r[2] for r in sub], dtype=np.int64)
        idx = np.array([r[3] for r in sub], dtype=np.int64)
        got = sampling.uniform_bits(seed, seq, pos, idx)
        np.testing.assert_array_equal(got, np.array([r[4] for r in sub], dtype=np.uint32))


def test_key_is_the_sequence_not_the_slot():
    # a whole vocabulary row of (seed, seq, pos) is the same wherever the sequence sits: the call takes no slot, and
    # neighbouring sequences and positions give other rows
    v = np.arange(1000)
    a = sampling.uniform(42, 7, 100, v)
    assert not np.array_equal(a, sampling.uniform(42, 8, 100, v))
    assert not np.array_equal(a, sampling.uniform(42, 7, 101, v))
    assert not np.array_equal(a, sampling.uniform(43, 7, 100, v))
    np.testing.assert_array_equal(a, sampling.uniform(42, np.full(1000, 7), 100, v))
    assert ((a > 0) & (a < 1)).all()


def test_bad_index():
    with pytest.raises(ValueError, match="vocabulary indexes"):
        sampling.uniform(1, 0, 0, -1)


# --- the whole rule: temperature, top-k, top-p, Gumbel-max (kernels/testdata/topkp_vectors.tsv) ----------------

from topkpvectors import keys as _keys, logits as _logits, rows as _topkp_rows  # noqa: E402


def test_draw_reproduces_every_go_token():
    """sampling.draw, the numpy reference of §10, draws every token kernels.Sample drew and keeps as many tokens:
    Qwen2-sized rows (ties at the top, NaN, ±Inf), small rows of NaN, ±Inf, signed zeros and ties, greedy,
    subnormal temperatures, and tight top-p thresholds where another Exp or another order of the sum would keep
    another number of tokens (kernels.TestTightTopPDiscriminates)."""
    rows = _topkp_rows()
    assert len(rows) > 600
    cache, bad = {}, []
    for spec, V, T, temp, k, p, seed, want, want_kept in rows:
        if (spec, T, V) not in cache:
            cache = {(spec, T, V): _logits(spec, T, V)}  # consecutive lines share their logits
        x = cache[(spec, T, V)]
        seqs, poss = _keys(T)
        got = [sampling.draw(x[r], temp, k, p, seed, seqs[r], poss[r]) for r in range(T)]
        kept = [None if not temp > 0 else sampling.kept(x[r], temp, k, p)[1].size for r in range(T)]
        if got != want or kept != want_kept:
            bad.append((spec[:40], V, temp, k, p, got, want, kept, want_kept))
    assert not bad, f"{len(bad)} of {len(rows)} lines differ from the Go reference, first {bad[0]}"


def test_nucleus_is_the_sequential_walk():
    """nucleus() against a plain loop of float32 additions (the walk as §10 writes it) on rows where the order of
    the sum matters (a pairwise sum would give other bits)."""
    rng = np.random.default_rng(5)
    for top_p in (0.1, 0.5, 0.9, 0.999):
        z = np.sort(rng.normal(0, 3, (6, 3000)).astype(np.float32), axis=1)[:, ::-1].copy()
        got = sampling.nucleus(z, [3000] * 6, top_p)
        for r in range(6):
            e = mathf.exp(z[r] - z[r, 0])
            s = np.float32(0)
            for v in e:
                s = np.float32(s + v)
            thr, c = np.float32(top_p) * s, np.float32(0)
            for j, v in enumerate(e):
                c = np.float32(c + v)
                if c >= thr:
                    break
            assert got[r] == j + 1, (top_p, r)
    # the kept set after top-k bounds the walk; NaN sums (mx = +Inf) keep it all
    z = np.array([[np.inf, 1, 0, -1]], dtype=np.float32)
    assert sampling.nucleus(z, [3], 0.5).tolist() == [3]
    assert sampling.nucleus(np.array([[2, 1, 0, -50]], dtype=np.float32), [2], 0.999).tolist() == [2]
    assert sampling.nucleus(np.array([[2, 1, 0, -50]], dtype=np.float32), [4], 0.1).tolist() == [1]


def test_params_are_checked():
    assert sampling.params(0.7, 5, 0.9) == (np.float32(0.7), 5, np.float32(0.9))
    assert sampling.params(1, 0, 0.99999999)[2] == 1  # rounds to 1 in float32: no top-p, as in the engine
    for bad, msg in (((float("nan"),), "NaN"), ((1, -1), "top_k"), ((1, 2.5), "top_k"), ((1, 0, 0), "top_p"),
                     ((1, 0, 1.5), "top_p"), ((1, 0, float("nan")), "top_p")):
        with pytest.raises(ValueError, match=msg):
            sampling.params(*bad)
    assert sampling.draw(np.array([np.nan, np.nan], dtype=np.float32), 1, 0, 1, 0, 0, 0) == -1
