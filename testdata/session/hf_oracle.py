#!/usr/bin/env python3
"""Builds tiny random bfloat16 Llama, Qwen2 and Qwen3 models with transformers, saves them with save_pretrained,
and records them with bitalign_capture as a trainer (one forward of right-padded full sequences, with the final
tokens) and as a sampler (greedy generate from left-padded prompts: prefill, then decode), for session's
TestHFOracle (the local error of every op transformers exposes, against the oracle of its own inputs):

    python3 testdata/session/hf_oracle.py OUT && BITALIGN_HF_ORACLE=OUT go test -count=1 -run HFOracle -v ./session

OUT/<name>/ holds checkpoint/, trainer.arrow and sampler.arrow. Needs torch and transformers (no network:
configs only); runs on the CPU.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "capture", "python"))
sys.path.insert(0, os.path.join(ROOT, "capture", "python", "tests"))

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model, padded  # noqa: E402

SIZES = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=2)
PROMPTS = [[5, 17, 33, 2, 71, 9, 40, 8, 60, 12, 201, 99], [11, 64, 3, 3, 58], [90, 1, 2, 44, 45, 46, 47, 48]]
NEW = 6
VARIANTS = {  # name: (architecture, attention implementation)
    "llama_sdpa": ("llama", "sdpa"),
    "llama_eager": ("llama", "eager"),
    "qwen2_sdpa": ("qwen2", "sdpa"),
    "qwen3_sdpa": ("qwen3", "sdpa"),
}


def set_attention(m, impl):
    if impl == "eager":
        return
    if hasattr(m, "set_attn_implementation"):
        m.set_attn_implementation(impl)
    else:
        m.config._attn_implementation = impl


def record(m, d):
    kw = dict(overwrite=True, seed=0, batch_size=len(PROMPTS))
    ids, mask, _ = padded(PROMPTS, "left")
    with torch.no_grad(), bc.record(m, os.path.join(d, "sampler.arrow"), "sampler", record_samples=True, **kw) as rec:
        out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
        rec.sampled(range(len(PROMPTS)), out[:, -1])
    full = [out[b, ids.shape[1] - len(p):].tolist() for b, p in enumerate(PROMPTS)]
    tids, tmask, tpos = padded([f[:-1] for f in full], "right")
    final = {b: f[-1] for b, f in enumerate(full)}
    with torch.no_grad(), bc.record(m, os.path.join(d, "trainer.arrow"), "trainer", final_tokens=final, **kw):
        m(input_ids=tids, attention_mask=tmask, position_ids=tpos)


def main():
    out = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    for i, (name, (arch, impl)) in enumerate(VARIANTS.items()):
        m = hf_model(arch, dtype=torch.bfloat16, seed=10 + i, **SIZES)
        set_attention(m, impl)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        m.save_pretrained(os.path.join(d, "checkpoint"), safe_serialization=True)
        record(m, d)
        print(name, "saved", sorted(os.listdir(d)))


if __name__ == "__main__":
    main()
