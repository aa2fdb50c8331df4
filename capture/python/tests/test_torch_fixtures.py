"""The committed fixtures of testdata/python are what make_fixtures.py writes from the committed checkpoint."""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
import make_fixtures  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "testdata", "python")


@pytest.mark.parametrize("name", ["trainer.arrow", "sampler.arrow", "trainer-fp.arrow", "sampler-fp.arrow"])
def test_fixture_is_reproducible(tmp_path, name):
    m = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(FIXTURES, "checkpoint"), attn_implementation="eager"
    ).eval()
    make_fixtures.write(str(tmp_path), m)
    meta_a, a = bc.read(os.path.join(FIXTURES, name))
    meta_b, b = bc.read(tmp_path / name)
    for k in ("side", "step", "batch_size", "created", "model"):
        if k == "model":
            assert meta_a[k]["architecture"] == meta_b[k]["architecture"]
        else:
            assert meta_a[k] == meta_b[k], k
    assert [(t["op"], t["index"], t["seq"], t["pos"], t["ntok"], t["dtype"], t["shape"]) for t in a] == [
        (t["op"], t["index"], t["seq"], t["pos"], t["ntok"], t["dtype"], t["shape"]) for t in b
    ]
    for ta, tb in zip(a, b):
        if ta["role"].startswith(bc.fingerprints.ROLE_PREFIX):
            continue  # fingerprints: checked against their full captures' rows below (the bits depend on the build)
        if ta["dtype"] == "i32":
            assert np.array_equal(ta["array"], tb["array"]), ta["op"]
        else:  # another torch build may round differently
            np.testing.assert_allclose(ta["array"], tb["array"], rtol=1e-5, atol=1e-6, err_msg=ta["op"])
    if name.endswith("-fp.arrow"):  # committed and regenerated alike: numpy's fingerprints of the full rows
        for d in (FIXTURES, str(tmp_path)):
            full = {(t["op"], t["role"], t["seq"], t["pos"]): t for t in bc.read(os.path.join(d, name.replace("-fp", "")))[1]}
            fps = [t for t in bc.read(os.path.join(d, name))[1] if t["role"].startswith(bc.fingerprints.ROLE_PREFIX)]
            assert len(fps) > 10
            for t in fps:
                f = full[(t["op"], t["role"][3:], t["seq"], t["pos"])]
                assert np.array_equal(t["array"].view(np.uint64), bc.fingerprint_rows(f["data"], f["ntok"])), t["op"]
