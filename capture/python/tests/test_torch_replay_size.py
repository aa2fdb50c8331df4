"""replay_size.py (issue 15's replay at size, `bash scripts/gpu.sh replay`) at toy size on the CPU: every run
replays (exit 0 or 1, never 2), reports its phases and peak RSS, the fingerprint capture replays into
fingerprints (smaller than the full replay, the same first divergence), and --ops stops at the asked layer."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("transformers")

BIN = os.environ.get("BITALIGN_BIN", "")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)), reason="set BITALIGN_BIN to a built bitalign binary")
def test_replay_size_tiny_cpu(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(HERE, "replay_size.py"), str(tmp_path), "--device", "cpu", "--tiny",
                        "--bin", BIN, "--layer", "1"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = {r["model"]: r for r in json.load(open(tmp_path / "replay-size.json"))}
    assert set(res) == {"1.5b", "8b"}
    assert set(res["1.5b"]["runs"]) == {"full", "fingerprint", "ops"} and set(res["8b"]["runs"]) == {"fingerprint", "ops"}
    for r in res.values():
        for name, run in r["runs"].items():
            assert run["exit"] in (0, 1), (r["model"], name, run)
            assert run["peak_rss_gb"] > 0 and run["wall_s"] > 0
            assert run["phase_peak_rss_gb"].get("load the checkpoint (mapped)", 0) > 0, run["phase_peak_rss_gb"]
            for ph in ("load the checkpoint (mapped)", "upload weights and tables", "forward (with the recorder's copies)",
                       "diff the capture with the replay"):
                assert ph in run["phases"], (r["model"], name, sorted(run["phases"]))
        assert not os.path.exists(tmp_path / r["model"] / "checkpoint")  # big files deleted without --keep
    one = res["1.5b"]
    # transformers' bf16 forward is not the engine's: both replays diverge, at the same op
    assert one["runs"]["full"]["first_divergence"] == one["runs"]["fingerprint"]["first_divergence"]
    assert one["capture_bytes"]["fingerprint"] * 3 < one["capture_bytes"]["full"]
    for r in res.values():
        fd = r["runs"]["ops"]["first_divergence"]
        assert fd is None or fd.startswith("layers.1."), fd
    assert "1.5b   full" in p.stdout and "first divergence" in p.stdout
