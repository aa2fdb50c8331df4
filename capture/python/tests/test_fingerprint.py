"""Row fingerprints (numpy): the Go-written test vectors, rows at once, every single-bit flip."""

import json
import os

import numpy as np

import bitalign_capture as bc
from bitalign_capture import fingerprints as F

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "testdata", "capture", "fingerprint_vectors.json")


def vectors():
    with open(VECTORS) as f:
        return json.load(f)["vectors"]


def test_go_vectors():
    vs = vectors()
    assert len(vs) >= 10
    for v in vs:
        row = bytes.fromhex(v["hex"])
        assert bc.fingerprint(row) == int(v["fp"]), v["name"]
        assert int(v["fp_int64"]) == F._signed(int(v["fp"])), v["name"]


def test_always_full_is_go_s():
    with open(VECTORS) as f:
        assert tuple(json.load(f)["always_full"]) == F.ALWAYS_FULL


def test_constants_are_splitmix64():
    # the first outputs of splitmix64 seeded with 0, made odd
    assert int(F.constants(1)[0]) == 0xE220A8397B1DCDAF
    assert all(int(k) & 1 for k in F.constants(1000))
    assert int(F.constants(3)[2]) == F.mix64(3 * F.GAMMA) | 1


def test_rows_at_once_equal_rows_one_by_one(rng):
    for L in (1, 2, 3, 6, 12, 3072):
        data = rng.integers(0, 256, size=5 * L, dtype=np.uint8)
        got = bc.fingerprint_rows(data, 5)
        want = [bc.fingerprint(data[r * L : (r + 1) * L].tobytes()) for r in range(5)]
        assert [int(x) for x in got] == want, L


def test_every_single_bit_flip_changes_it(rng):
    for L in (1, 3, 8, 13, 64):
        row = bytearray(rng.integers(0, 256, size=L, dtype=np.uint8).tobytes())
        fp = bc.fingerprint(bytes(row))
        for bit in range(8 * L):
            row[bit // 8] ^= 1 << (bit % 8)
            assert bc.fingerprint(bytes(row)) != fp, (L, bit)
            row[bit // 8] ^= 1 << (bit % 8)
        assert bc.fingerprint(bytes(row) + b"\0") != fp  # the length is mixed in


def test_bad_row_split():
    import pytest

    with pytest.raises(ValueError, match="do not split into 2 rows"):
        bc.fingerprint_rows(b"abc", 2)
