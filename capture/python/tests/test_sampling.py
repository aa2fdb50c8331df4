"""The Python sampling keys against the table the Go reference writes (kernels/testdata/sampling_vectors.tsv)."""

import os

import numpy as np
import pytest

from bitalign import sampling

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
