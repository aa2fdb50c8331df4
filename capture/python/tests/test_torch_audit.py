"""The audit finds the bug under the noise: a realistic trainer/sampler pair of a random Hugging Face model (the
trainer one padded batch, the sampler a decode loop with SDPA attention and TP-2 style bf16 all-reduces) with one
bug planted on one side. `bitalign diff`'s first divergence is the sampler's noise in layer 0; `bitalign audit`'s
first suspect must be the planted op on the planted side (plant.py says which)."""

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import plant  # noqa: E402

BIN = os.environ.get("BITALIGN_BIN", "bin/bitalign")

CASES = [  # (bug, arch, side)
    ("weight", "qwen2", "sampler"),
    ("eps", "qwen2", "sampler"),
    ("fp16", "llama", "sampler"),
    ("rope", "qwen3", "sampler"),
    ("weight", "qwen3", "trainer"),
    ("none", "llama", "sampler"),
]


@pytest.mark.parametrize("bug,arch,side", CASES)
def test_audit_names_the_planted_bug(tmp_path, bug, arch, side):
    import sys

    subprocess.run([sys.executable, plant.__file__, str(tmp_path), "--bug", bug, "--arch", arch, "--side", side],
                   check=True, capture_output=True, text=True)
    want = json.load(open(tmp_path / "plant.json"))
    t, s, ck = str(tmp_path / "trainer.arrow"), str(tmp_path / "sampler.arrow"), str(tmp_path / "checkpoint")

    # the diff's first divergence is the noise, not the bug (the sampler's kernels differ from layer 0 on)
    d = subprocess.run([BIN, "diff", t, s, "--format", "json"], capture_output=True, text=True)
    assert d.returncode == 1, d.stderr
    first = json.loads(d.stdout)["first_divergence"]["op"]

    a = subprocess.run([BIN, "audit", t, s, "--checkpoint", ck, "--format", "json"], capture_output=True, text=True)
    assert a.returncode in (0, 1), a.stderr
    rep = json.loads(a.stdout)
    sus = rep["suspects"]
    print(f"{bug} {arch} {side}: diff's first divergence {first}; audit: {rep['headline']}")
    if want["op"] is None:
        assert a.returncode == 0 and sus == [], rep["headline"]
        return
    assert a.returncode == 1, rep["headline"]
    assert first != want["op"] or bug == "rope", "the noise should come first in the diff"
    top = sus[0]
    assert (top["op"], top["side_name"]) == (want["op"], want["side"]), rep["headline"]
    assert top["local_ulp"] > top["noise_floor_ulp"] * rep["margin"]
    assert top["side"] == ("a" if side == "trainer" else "b")
    # every suspect is on the planted side
    assert {x["side_name"] for x in sus} == {want["side"]}, [x["evidence"] for x in sus]
