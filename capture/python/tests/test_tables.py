import json
import os
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import bitalign_capture as bc
import rl_reference as ref


def test_write_logprobs_parquet_round_trip(tmp_path):
    ids, tok, lp, _, _, _, mask2 = ref.pair()
    p = bc.write_logprobs(tmp_path / "s.parquet", "sampler", ids, tok, lp, mask=mask2, start=100)
    t = pq.read_table(p)
    md = t.schema.metadata
    assert md[b"bitalign.logprobs.side"] == b"sampler" and md[b"bitalign.logprobs.positions"] == b"absolute"
    assert t.column_names == ["seq", "start", "tokens", "logprobs"]
    rows = t.to_pylist()
    for i, r in enumerate(rows):
        assert r["seq"] == ids[i] and r["start"] == 100
        got = np.asarray(r["logprobs"], np.float32)
        assert np.array_equal(got.view(np.uint32), lp[i][mask2[i]].view(np.uint32))  # bit for bit
        assert r["tokens"] == tok[i][mask2[i]].tolist()
    assert oct(os.stat(p).st_mode & 0o777) != oct(0o600)


def test_write_logprobs_gaps_write_one_row_per_token(tmp_path):
    lp = np.array([[-1.0, -2.0, -3.0, -4.0]], np.float32)
    mask = np.array([[1, 0, 1, 1]], bool)
    p = bc.write_logprobs(tmp_path / "g.arrow", "trainer", [5], [[1, 2, 3, 4]], lp, mask=mask)
    t = feather.read_table(p)
    assert t.column_names == ["seq", "pos", "token", "logprob"]
    assert t.column("pos").to_pylist() == [0, 2, 3] and t.column("token").to_pylist() == [1, 3, 4]
    assert t.schema.metadata[b"bitalign.logprobs.positions"] == b"generated"


def test_write_logprobs_ragged_and_jsonl(tmp_path):
    lps = [np.array([-0.5, float("-inf")], np.float32), np.array([-1.25], np.float32)]
    p = bc.write_logprobs(tmp_path / "r.jsonl", "sampler", [1, 2], None, lps, start=[3, 7])
    rows = [json.loads(l) for l in open(p)]
    assert rows == [{"seq": 1, "start": 3, "logprobs": [-0.5, "-Infinity"]}, {"seq": 2, "start": 7, "logprobs": [-1.25]}]


def test_write_logprobs_refuses(tmp_path):
    with pytest.raises(ValueError, match="repeat"):
        bc.write_logprobs(tmp_path / "x.parquet", "s", [1, 1], None, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="2 tokens but 3 logprobs"):
        bc.write_logprobs(tmp_path / "x.parquet", "s", [1], [np.array([1, 2])], [np.zeros(3, np.float32)])
    with pytest.raises(ValueError, match="unknown extension"):
        bc.write_logprobs(tmp_path / "x.pt", "s", [1], None, np.zeros((1, 3), np.float32))
    p = bc.write_logprobs(tmp_path / "y.parquet", "s", [1], None, np.zeros((1, 3), np.float32))
    with pytest.raises(FileExistsError):
        bc.write_logprobs(p, "s", [1], None, np.zeros((1, 3), np.float32))
    assert [f for f in os.listdir(tmp_path) if f.startswith(".bitalign-")] == []


BIN = os.environ.get("BITALIGN_BIN")


@pytest.mark.skipif(not BIN, reason="BITALIGN_BIN is not set (make test sets it to the freshly built binary)")
@pytest.mark.parametrize("sampler_ext", ["parquet", "jsonl", "arrow"])
def test_bitalign_diff_matches_numpy(tmp_path, sampler_ext):
    """pyarrow writes the trainer's table (one row per token), write_logprobs the sampler's; `bitalign diff
    --format json` gives the NumPy reference's metrics to float64 rounding (relative 1e-12)."""
    ids, tok, lp, tok2, lp2, mask, mask2 = ref.pair(seed=11, n_seqs=12, length=33)
    n, L = tok.shape
    pq.write_table(pa.table({"seq": np.repeat(ids, L), "pos": np.tile(np.arange(L), n), "token": tok.reshape(-1),
                             "logprob": pa.array(lp.reshape(-1), pa.float32())}), tmp_path / "trainer.parquet")
    bc.write_logprobs(tmp_path / f"sampler.{sampler_ext}", "sampler", ids, tok2, lp2, mask=mask2, start=0)
    out = subprocess.run([BIN, "diff", str(tmp_path / "trainer.parquet"), str(tmp_path / f"sampler.{sampler_ext}"),
                          "--format", "json"], capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    a = {int(s): (np.arange(L), tok[i], lp[i]) for i, s in enumerate(ids)}
    b = {int(s): (np.arange(L)[mask2[i]], tok2[i][mask2[i]], lp2[i][mask2[i]]) for i, s in enumerate(ids)}
    overall, seqs = ref.compare(a, b)
    assert doc["version"] == 4
    for k, v in overall.items():
        assert doc["logprobs"][k] == pytest.approx(v, rel=1e-12, abs=1e-15), k
    assert len(doc["sequences"]) == len(seqs)
    for s in doc["sequences"]:
        want = seqs[s["seq"]]
        for k, v in want.items():
            assert s[k] == pytest.approx(v, rel=1e-12, abs=1e-15) if v is not None else s[k] is None, (s["seq"], k)
    # worst first: the token-id fault, then the 1.2 outlier
    assert [s["seq"] for s in doc["sequences"][:2]] == [int(ids[7]), int(ids[5])]
