import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import bitalign_capture as bc
from bitalign_capture import writer as wmod


def meta(**kw):
    return bc.make_meta("trainer", created="2026-11-29T19:00:00Z", **kw)


def test_schema_matches_go_capture_schema():
    s = bc.schema("{}")
    assert [f.name for f in s] == [
        "data",
        "step",
        "seq",
        "pos",
        "ntok",
        "op",
        "index",
        "role",
        "dtype",
        "shape",
        "rank",
        "shard_dim",
        "shard_start",
        "full_shape",
    ]
    types = {f.name: f.type for f in s}
    assert types["data"] == pa.large_binary()
    assert types["index"] == pa.int32() and types["rank"] == pa.int32() and types["shard_dim"] == pa.int32()
    for n in ("step", "seq", "pos", "ntok", "shard_start"):
        assert types[n] == pa.int64()
    assert types["shape"] == pa.list_(pa.int64()) and types["full_shape"] == pa.list_(pa.int64())
    md = s.metadata
    assert md[b"bitalign.format"] == b"bitalign-capture" and md[b"bitalign.version"] == b"1"


def test_roundtrip_every_kind_of_tensor(tmp_path, rng):
    p = tmp_path / "t.arrow"
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    bf16 = rng.integers(0, 1 << 16, size=(2, 4), dtype=np.uint16)
    toks = np.array([5, 9, 1], dtype=np.int32)
    with bc.Writer(p, meta(tp=2, rank=1, seed=(1 << 64) - 1, step=3)) as w:
        w.write("embed", f32, step=3, seq=2, pos=4, ntok=3, index=1, rank=1)
        w.write("layers.0.attn.q_proj", bf16, dtype="bf16", seq=1, pos=7, ntok=2, index=3, rank=1, shard=(1, 4, [2, 8]))
        w.write("tokens", toks, ntok=3)
        w.write("weight", bytes(range(6)), dtype="u8", shape=[2, 3], role="weight")
        w.write("scalar", np.float64(2.5).reshape(()))
    m, ts = bc.read(p)
    assert m["side"] == "trainer" and m["tp"] == 2 and m["rank"] == 1 and m["step"] == 3
    assert m["seed"] == (1 << 64) - 1 and m["format_version"] == 1 and m["created"] == "2026-11-29T19:00:00Z"
    assert [t["op"] for t in ts] == ["embed", "layers.0.attn.q_proj", "tokens", "weight", "scalar"]
    e, q, tk, wt, sc = ts
    assert (e["step"], e["seq"], e["pos"], e["ntok"], e["index"], e["role"], e["rank"]) == (3, 2, 4, 3, 1, "out", 1)
    assert e["dtype"] == "f32" and e["shape"] == [3, 5] and np.array_equal(e["array"], f32)
    assert e["shard_dim"] == -1 and e["shard_start"] == 0 and e["full_shape"] == []
    assert q["dtype"] == "bf16" and q["data"] == bf16.astype("<u2").tobytes()
    assert (q["shard_dim"], q["shard_start"], q["full_shape"]) == (1, 4, [2, 8])
    assert tk["dtype"] == "i32" and tk["array"].tolist() == [5, 9, 1]
    assert wt["role"] == "weight" and wt["ntok"] == 0 and wt["data"] == bytes(range(6))
    assert sc["shape"] == [] and sc["array"] == 2.5


def test_data_is_64_byte_aligned_in_the_file(tmp_path, rng):
    p = tmp_path / "a.arrow"
    blobs = []
    with bc.Writer(p, meta()) as w:
        for i in range(40):
            n = int(rng.integers(1, 50))
            a = rng.standard_normal(n).astype(np.float32)
            # ops and shapes of varied lengths move the message sizes around
            w.write("op" + "x" * (i % 7), a, seq=i, pos=i * 3, ntok=n, shard=(0, i, [n + i]) if i % 3 == 0 else None)
            blobs.append(a.tobytes())
    raw = p.read_bytes()
    for b in blobs:
        off = raw.find(b)
        assert off >= 0 and off % wmod.ALIGNMENT == 0, off
    # and pyarrow's own reader agrees on the bytes
    with pa.memory_map(str(p)) as src:
        r = ipc.open_file(src)
        assert r.num_record_batches == 40
        assert r.get_batch(5).column("data")[0].as_py() == blobs[5]


def test_atomic_publish_and_abort(tmp_path):
    p = tmp_path / "c.arrow"
    w = bc.Writer(p, meta())
    w.write("x", np.zeros(4, np.float32))
    assert not p.exists()
    tmps = [n for n in os.listdir(tmp_path) if n.startswith(".c.arrow.tmp-")]
    assert len(tmps) == 1
    w.close()
    assert p.exists() and os.listdir(tmp_path) == ["c.arrow"]
    w.close()  # twice is fine

    q = tmp_path / "d.arrow"
    with pytest.raises(RuntimeError):
        with bc.Writer(q, meta()) as w2:
            w2.write("x", np.zeros(4, np.float32))
            raise RuntimeError("boom")
    assert sorted(os.listdir(tmp_path)) == ["c.arrow"]
    with pytest.raises(ValueError, match="after close or abort"):
        w2.write("x", np.zeros(4, np.float32))


def test_streams_tensors_to_disk_before_close(tmp_path):
    p = tmp_path / "s.arrow"
    w = bc.Writer(p, meta())
    tmp = tmp_path / [n for n in os.listdir(tmp_path) if n.startswith(".")][0]
    sizes = []
    for i in range(8):
        w.write("big", np.full((1024, 256), i, np.float32), seq=i)  # 1 MiB each
        sizes.append(tmp.stat().st_size)
    w.close()
    # the file grows with every tensor (pyarrow writes through): memory holds one tensor, not the capture
    assert sizes[-1] >= 7 * (1 << 20), sizes
    assert all(b > a for a, b in zip(sizes, sizes[1:])), sizes


def test_never_overwrites_without_permission(tmp_path):
    p = tmp_path / "e.arrow"
    p.write_bytes(b"user data")
    with pytest.raises(FileExistsError, match="file exists"):
        bc.Writer(p, meta())
    assert p.read_bytes() == b"user data"
    # a file that appears while writing is not clobbered either
    q = tmp_path / "f.arrow"
    w = bc.Writer(q, meta())
    q.write_bytes(b"raced")
    with pytest.raises(FileExistsError):
        w.close()
    assert q.read_bytes() == b"raced" and sorted(os.listdir(tmp_path)) == ["e.arrow", "f.arrow"]
    with bc.Writer(p, meta(), overwrite=True) as w:
        w.write("x", np.ones(2, np.float32))
    assert bc.read(p)[1][0]["op"] == "x"


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda w: w.write("x", b"\0" * 6, dtype="f32", shape=[2]), "needs 8 bytes, has 6"),
        (lambda w: w.write("x", np.zeros(2, np.float32), dtype="bf16"), "cannot hold bf16"),
        (lambda w: w.write("x", np.zeros(2, np.float32), dtype="f7"), "unknown dtype"),
        (lambda w: w.write("", np.zeros(2, np.float32)), "without an op name"),
        (lambda w: w.write("x", np.zeros((2, 3), np.float32), shard=(1, 2, [2, 4])), "does not fit"),
        (lambda w: w.write("x", np.zeros((2, 3), np.float32), shard=(1, 0, [3, 6])), "does not fit"),
        (lambda w: w.write("x", np.zeros(2, np.float32), ntok=-1), "negative ntok"),
        (lambda w: w.write("x", np.zeros(2, np.complex64)), "no bitalign dtype"),
        (lambda w: w.write("x", np.zeros([1] * 33, np.float32)), "at most 32"),
    ],
)
def test_bad_tensors_are_refused_with_the_file_named(tmp_path, call, msg):
    p = tmp_path / "g.arrow"
    w = bc.Writer(p, meta())
    with pytest.raises(ValueError, match=msg) as e:
        call(w)
    assert "bitalign_capture" in str(e.value)
    w.write("ok", np.zeros(1, np.float32))  # the writer stays usable
    w.close()
    assert [t["op"] for t in bc.read(p)[1]] == ["ok"]


def test_bad_meta_is_refused(tmp_path):
    with pytest.raises(ValueError, match="rank 2 outside"):
        bc.Writer(tmp_path / "h.arrow", meta(tp=2, rank=2))
    with pytest.raises(ValueError, match="negative tp"):
        bc.Writer(tmp_path / "h.arrow", meta(tp=-1))
    assert os.listdir(tmp_path) == []


def test_big_endian_arrays_are_written_little_endian(tmp_path):
    a = np.array([1.5, -2.0], dtype=">f4")
    p = tmp_path / "b.arrow"
    with bc.Writer(p, meta()) as w:
        w.write("x", a)
    t = bc.read(p)[1][0]
    assert t["data"] == np.array([1.5, -2.0], dtype="<f4").tobytes()


def test_rank_files_form_a_directory(tmp_path):
    d = tmp_path / "cap"
    d.mkdir()
    for r in range(2):
        with bc.Writer(bc.rank_path(d, r), meta(tp=2, rank=r)) as w:
            w.write("x", np.full(2, r, np.float32), rank=r)
    assert sorted(os.listdir(d)) == ["rank0.arrow", "rank1.arrow"]
    assert bc.read(d / "rank1.arrow")[0]["rank"] == 1


def test_meta_json_is_compact_and_has_go_keys():
    m = bc.make_meta("sampler", model={"architecture": "llama"}, extra={"k": 1})
    assert set(m) >= {
        "format_version",
        "side",
        "model",
        "tp",
        "pp",
        "dp",
        "rank",
        "kernel_profile",
        "batch_size",
        "seed",
        "step",
        "producer",
        "created",
        "extra",
    }
    assert m["created"].endswith("Z")
    json.dumps(m)


def test_a_position_written_twice_is_refused(tmp_path):
    """Two tensors at one (step, seq, pos, op, role) are refused at write time, naming them; runs that only
    touch (a decode loop), other roles, seqs, steps and shards are fine."""
    p = tmp_path / "dup.arrow"
    x = np.zeros((3, 2), dtype=np.float32)
    one = x[:1]
    with bc.Writer(p, meta()) as w:
        w.write("embed", x, seq=1, pos=0, ntok=3)
        for pos in (3, 4, 6, 5):  # decode steps (and a gap filled later) touch, never overlap
            w.write("embed", one, seq=1, pos=pos, ntok=1)
        w.write("embed", x, seq=2, pos=0, ntok=3)
        w.write("embed", x, seq=1, pos=0, ntok=3, role="in")
        w.write("embed", x, seq=1, pos=0, ntok=3, step=1)
        w.write("embed", x, seq=1, pos=0, ntok=3, shard=(1, 2, [3, 4]))
        w.write("weight", x, ntok=0, role="weight")
        with pytest.raises(ValueError, match=r"dup\.arrow: embed \[out\] step 0 seq 1 pos 2 written twice \(positions 0\.\.6"):
            w.write("embed", x, seq=1, pos=2, ntok=3)
        with pytest.raises(ValueError, match=r"embed \[out\] step 0 seq 1 pos 6 written twice"):
            w.write("embed", one, seq=1, pos=6, ntok=1)
    # a refused write leaves the writer as it was (a recorder's error ends its with block, which aborts)
    assert len(bc.read(p)[1]) == 10
    with bc.Writer(tmp_path / "w.arrow", meta()) as w:
        w.write("weight", x, ntok=0, role="weight")
        with pytest.raises(ValueError, match=r"weight \[weight\] step 0 seq 0 pos 0 written twice"):
            w.write("weight", x, ntok=0, role="weight")


def test_claims_are_kept_for_the_last_steps_only(tmp_path):
    """A long recording's claims stay bounded: the writer keeps the coordinates of its last CLAIM_STEPS + 1
    steps (a 28-layer fingerprint capture's grew by about 60 MB every 1000 steps before); a tensor written twice
    within them is still refused, by both write and prepare_rows; a step older than them is refused with a
    message naming it and the highest step, while steps within the window may come in any order."""
    n = wmod.CLAIM_STEPS
    k = [("embed", "fp.out", 0)]
    x = np.zeros(2, dtype=np.float32)
    with bc.Writer(tmp_path / "long.arrow", meta()) as w:
        for step in range(10 * n):
            w.write("embed", x, step=step, ntok=2)
            w.emit(w.prepare_rows([(k, [0], [0], [2])], step=step), np.zeros(2, np.int64).view(np.uint8))
            assert len(w._claims) <= n + 1
        top = 10 * n - 1
        assert sorted(w._claims) == list(range(top - n, top + 1))
        with pytest.raises(ValueError, match=rf"embed \[out\] step {top - n} seq 0 pos 1 written twice"):
            w.write("embed", x[:1], step=top - n, pos=1, ntok=1)
        with pytest.raises(ValueError, match=rf"embed \[fp\.out\] step {top - n} seq 0 pos 0 written twice"):
            w.prepare_rows([(k, [0], [0], [1])], step=top - n)
        w.write("embed", x, step=top - n, seq=1, ntok=2)  # an older step of the window, another sequence: fine
        old = rf"long\.arrow: step {top - n - 1} after step {top}: a writer keeps the coordinates of its last {n + 1} steps"
        with pytest.raises(ValueError, match=old):
            w.write("embed", x, step=top - n - 1, seq=1, ntok=2)
        with pytest.raises(ValueError, match=old):
            w.prepare_rows([(k, [1], [0], [1])], step=top - n - 1)
    assert len(bc.read(tmp_path / "long.arrow")[1]) == 2 * 10 * n + 1


def _rows_parts(rng):
    """Two parts of fingerprint-like tensors: three ops over four segments, one op over one."""
    seq, pos, ntok = np.array([0, 1, 2, 3]), np.array([0, 0, 5, 0]), np.array([3, 1, 4, 2])
    keys = [("embed", "fp.out", 1), ("layers.0.attn_norm", "fp.out", 2), ("layers.0.attn.q_proj", "fp.in", 3)]
    return [(keys, seq, pos, ntok), ([("logits", "fp.out", 9)], np.array([7]), np.array([2]), np.array([5]))]


def test_many_tensors_in_one_record_batch(tmp_path, rng):
    """prepare_rows + emit: one record batch holding many 1-D tensors, read back as the tensors (pyarrow and
    read()), the batch's first tensor 64-byte aligned, the others 8-byte aligned, whatever came before."""
    p = tmp_path / "rows.arrow"
    parts = _rows_parts(rng)
    n = 3 * 10 + 5
    vals = rng.integers(-(1 << 62), 1 << 62, size=n, dtype=np.int64)
    with bc.Writer(p, meta()) as w:
        w.write("tokens", np.arange(3, dtype=np.int32), ntok=3)  # moves the batch's start around
        h = w.prepare_rows(parts, step=4)
        assert h.n == 13
        w.emit(h, vals.view(np.uint8))
        w.write("logprobs", np.zeros(2, dtype=np.float32), ntok=2, pos=1)
        assert w.n == 15
    _, ts = bc.read(p)
    assert [t["op"] for t in ts[1:5]] == ["embed"] * 4 and ts[-2]["op"] == "logits" and ts[-1]["op"] == "logprobs"
    off = 0
    raw = p.read_bytes()
    for t, (op, role, idx, q, pos, k) in zip(ts[1:-1], [
        (op, role, idx, q, pos, k) for keys, seq, poss, ntok in parts for op, role, idx in keys
        for q, pos, k in zip(seq.tolist(), poss.tolist(), ntok.tolist())
    ]):
        assert (t["op"], t["role"], t["index"], t["step"], t["seq"], t["pos"], t["ntok"]) == (op, role, idx, 4, q, pos, k)
        assert t["dtype"] == "i64" and t["shape"] == [k] and t["shard_dim"] == -1 and t["full_shape"] == []
        assert np.array_equal(t["array"], vals[off : off + k])
        off += k
    with pa.memory_map(str(p)) as src:
        r = ipc.open_file(src)
        assert r.num_record_batches == 3 and r.get_batch(1).num_rows == 13
    first = raw.find(vals[:3].tobytes())
    assert first % wmod.ALIGNMENT == 0 and raw.find(vals.tobytes()) == first


@pytest.mark.parametrize("lead", range(0, 9))
def test_rows_batch_alignment_after_any_prefix(tmp_path, lead):
    p = tmp_path / "a.arrow"
    vals = np.arange(1, 1 + 7, dtype=np.int64) * 0x0101010101010101
    with bc.Writer(p, meta()) as w:
        for i in range(lead):
            w.write("op" + "x" * i, np.zeros(i + 1, dtype=np.float32), seq=i, ntok=i + 1)
        h = w.prepare_rows([([("a", "fp.out", 0), ("bb", "fp.out", 1)], [0, 1], [0, 4], [3, 1]),
                            ([("c" * (lead + 1), "fp.out", 2)], [2], [0], [0])], step=lead)
        w.emit(h, vals[:4].repeat(2)[:8].view(np.uint8)[: 8 * 8])
    raw = p.read_bytes()
    assert raw.find(vals[:4].repeat(2)[:8].tobytes()) % wmod.ALIGNMENT == 0
    assert len(bc.read(p)[1]) == lead + 5


def test_rows_positions_written_twice_are_refused(tmp_path):
    """prepare_rows claims positions as prepare does: within a batch (two segments of one seq id), across
    batches, and against tensors written one by one; touching runs (a decode loop) are fine."""
    p = tmp_path / "dup.arrow"
    k = [("embed", "fp.out", 0)]
    with bc.Writer(p, meta()) as w:
        with pytest.raises(ValueError, match=r"dup\.arrow: embed \[fp\.out\] step 0 seq 1 pos 2 written twice \(positions 0\.\.3"):
            w.prepare_rows([(k, [1, 1], [0, 2], [4, 2])])
        w.emit(w.prepare_rows([(k, [1, 2], [0, 0], [4, 2])]), np.zeros(6, np.int64).view(np.uint8))
        w.emit(w.prepare_rows([(k, [1, 2], [4, 2], [1, 1])]), np.zeros(2, np.int64).view(np.uint8))  # decode step
        with pytest.raises(ValueError, match=r"embed \[fp\.out\] step 0 seq 2 pos 2 written twice \(positions 0\.\.2 "):
            w.prepare_rows([(k, [2], [2], [1])])
        with pytest.raises(ValueError, match=r"embed \[fp\.out\] step 0 seq 1 pos 3 written twice"):
            w.write("embed", np.zeros(1, np.int64), dtype="i64", role="fp.out", seq=1, pos=3, ntok=1)
        w.write("embed", np.zeros(1, np.int64), dtype="i64", role="fp.out", seq=1, pos=5, ntok=1)
        with pytest.raises(ValueError, match=r"embed \[fp\.out\] step 0 seq 1 pos 5 written twice"):
            w.prepare_rows([(k, [1], [5], [1])])
        with pytest.raises(ValueError, match=r"embed \[fp\.out\] step 0 seq 3 pos 0 written twice"):
            w.prepare_rows([(k, [3], [0], [1]), ([("embed", "fp.out", 0)], [3], [0], [1])])
        w.emit(w.prepare_rows([(k, [3], [0], [1])]), np.zeros(1, np.int64).view(np.uint8))  # the refused call claimed nothing
        with pytest.raises(ValueError, match=r"1 tensors of 8 bytes, the payload has 6"):
            w.emit(w.prepare_rows([(k, [9], [0], [1])]), np.zeros(6, np.uint8))
