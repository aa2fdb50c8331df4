"""Writes the committed Python-written fixtures of testdata/python/ (needs torch and transformers; CPU).

    python3 capture/python/tests/make_fixtures.py testdata/python

checkpoint/      a tiny random Qwen3 (float32) saved with save_pretrained
trainer.arrow    one forward over the full sequences t0..t(N-2), right-padded (side "trainer")
sampler.arrow    generate from left-padded prompts: prefill, then decode from the KV cache (side "sampler")

Both captures cover positions 0..N-2 of the same sequences. The Go tests (capture/pyfixture_test.go,
session/pyfixture_test.go) read them; test_torch_fixtures.py checks that this script still writes what is
committed.
"""

import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bitalign_capture as bc  # noqa: E402
from tinymodels import padded  # noqa: E402

CREATED = "2026-11-29T00:00:00Z"
PROMPTS = [[7, 21, 3], [40, 12]]
NEW = 2  # tokens generated per prompt


def model():
    import transformers as tf

    cfg = tf.Qwen3Config(
        vocab_size=48,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(1234)
    m = tf.Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    return m.eval()


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

    ids, mask, _ = padded(PROMPTS, "left")
    with (
        torch.no_grad(),
        bc.record(m, os.path.join(out_dir, "sampler.arrow"), "sampler", record_samples=True, **kw) as rec,
    ):
        out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
        rec.sampled(range(len(PROMPTS)), out[:, -1])
    full = [out[b, ids.shape[1] - len(p) :].tolist() for b, p in enumerate(PROMPTS)]

    tids, tmask, tpos = padded([f[:-1] for f in full], "right")
    final = {b: f[-1] for b, f in enumerate(full)}  # the targets of the last positions, known up front
    with torch.no_grad(), bc.record(m, os.path.join(out_dir, "trainer.arrow"), "trainer", final_tokens=final, **kw):
        m(input_ids=tids, attention_mask=tmask, position_ids=tpos)
    return full


if __name__ == "__main__":
    d = sys.argv[1] if len(sys.argv) > 1 else "testdata/python"
    os.makedirs(d, exist_ok=True)
    print(write(d, overwrite=True))
