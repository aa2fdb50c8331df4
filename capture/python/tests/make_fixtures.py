"""Writes the committed Python-written fixtures of testdata/python/ (needs torch and transformers; CPU).

    python3 capture/python/tests/make_fixtures.py testdata/python

checkpoint/      a tiny random Qwen3 (float32) saved with save_pretrained
trainer.arrow    one forward over the full sequences t0..t(N-2), right-padded (side "trainer")
sampler.arrow    generate from left-padded prompts: prefill, then decode from the KV cache (side "sampler")
trainer-fp.arrow, sampler-fp.arrow   the same runs recorded with mode="fingerprint" (each forward's fingerprint
                 tensors in one record batch of many rows)

Both captures cover positions 0..N-2 of the same sequences. The Go tests (capture/pyfixture_test.go,
session/pyfixture_test.go) read them; test_torch_fixtures.py checks that this script still writes what is
committed.
"""

import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # tinymodels; bitalign_capture, from the checkout

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model, padded  # noqa: E402

CREATED = "2026-11-29T00:00:00Z"
PROMPTS = [[7, 21, 3], [40, 12]]
NEW = 2  # tokens generated per prompt


def model():
    """The fixtures' tiny random float32 Qwen3."""
    return hf_model("qwen3", seed=1234, vocab=48, hidden=16, intermediate=32, layers=1, heads=2, kv_heads=1,
                    head_dim=8, positions=64)


def write(out_dir, m=None, overwrite=False):
    """Writes sampler.arrow and trainer.arrow of model m into out_dir; without m, makes the model and saves it
    as checkpoint/ first. Returns the full sequences."""
    if m is None:
        m = model()
        ck = os.path.join(out_dir, "checkpoint")
        if overwrite and os.path.isdir(ck):
            shutil.rmtree(ck)
        m.save_pretrained(ck, safe_serialization=True)
        gen = os.path.join(ck, "generation_config.json")  # not needed: keep the fixture small
        if os.path.exists(gen):
            os.unlink(gen)
    kw = dict(overwrite=overwrite, created=CREATED, seed=0, batch_size=len(PROMPTS))

    for mode, suffix in (("full", ""), ("fingerprint", "-fp")):
        ids, mask, _ = padded(PROMPTS, "left")
        with (
            torch.no_grad(),
            bc.record(m, os.path.join(out_dir, f"sampler{suffix}.arrow"), "sampler", record_samples=True, mode=mode,
                      **kw) as rec,
        ):
            out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
            rec.sampled(range(len(PROMPTS)), out[:, -1])
        full = [out[b, ids.shape[1] - len(p) :].tolist() for b, p in enumerate(PROMPTS)]

        tids, tmask, tpos = padded([f[:-1] for f in full], "right")
        final = {b: f[-1] for b, f in enumerate(full)}  # the targets of the last positions, known up front
        with torch.no_grad(), bc.record(m, os.path.join(out_dir, f"trainer{suffix}.arrow"), "trainer", mode=mode,
                                        final_tokens=final, **kw):
            m(input_ids=tids, attention_mask=tmask, position_ids=tpos)
    return full


if __name__ == "__main__":
    d = sys.argv[1] if len(sys.argv) > 1 else "testdata/python"
    os.makedirs(d, exist_ok=True)
    print(write(d, overwrite=True))
