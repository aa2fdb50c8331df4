#!/usr/bin/env python3
"""Routing flips of a random Hugging Face Qwen3-MoE model, batch 8 against batch 1 (issue #16's proof).

    python3 capture/python/tests/moe_proof.py OUT [--device auto|cpu|cuda] [--sampler batch1|decode]
        [--sampler-attn eager|sdpa] [--layers 4] [--hidden 256] [--experts 16] [--k 4] [--seqs 8] [--tokens 32]
        [--bin bin/bitalign]

Builds a random Qwen3MoeForCausalLM in bf16 (on CUDA when there is one, else the CPU) and writes:

  OUT/checkpoint      the model (save_pretrained)
  OUT/batch8.arrow    side "trainer": one forward over all --seqs sequences (batch 8, no padding)
  OUT/batch1.arrow    side "sampler": each sequence alone (batch 1); with --sampler decode, its prompt
                      (--prompt tokens) and then one token per forward from the KV cache
  OUT/report.json     `bitalign diff` of the two (schema version 3: its "routing" section)
  OUT/report.txt      the same report as text: the routing-agreement table and the first flip
  OUT/replay.txt      `bitalign replay --routing-from`: batch 1's step replayed with batch 8's routing (only
                      when the binary has --routing-from: the moe-engine branch adds it)

and prints the report's verdict, its routing table and what replay said. cuBLAS's bf16 GEMMs differ between
M = 8 x tokens and M = tokens (docs: NOTES), so on a GPU the router logits differ in their last bits and the
tokens whose k-th and (k+1)-th experts are that close flip. On the CPU a batch-1 forward and the batched one can
agree bitwise (measured: hidden 256, 4 layers, decode loop too); --sampler-attn sdpa (another attention kernel on the
batch-1 side) gives the noise there.
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bitalign_capture, from the checkout
sys.path.insert(0, HERE)

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model  # noqa: E402

CREATED = "2026-12-01T00:00:00Z"


def build(layers, hidden, experts, k, seed=0):
    """A random Qwen3-MoE in bf16: hidden // 64 heads (2 at least), every layer a MoE layer, norm_topk_prob."""
    heads = max(hidden // 64, 2)
    return hf_model("qwen3_moe", torch.bfloat16, seed, vocab=512, hidden=hidden, intermediate=hidden * 3, layers=layers,
                    heads=heads, kv_heads=max(heads // 2, 1), head_dim=64, positions=256, num_experts=experts,
                    num_experts_per_tok=k, moe_intermediate_size=max(hidden // 2, 16), norm_topk_prob=True)


def sequences(n, tokens, vocab, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (tokens + 1,), generator=g).tolist() for _ in range(n)]


def batch8(m, path, seqs):
    """One forward over t0..t(N-2) of every sequence (all of one length: no padding); t(N-1) is a target."""
    dev = next(m.parameters()).device
    ids = torch.tensor([s[:-1] for s in seqs], device=dev)
    final = {b: s[-1] for b, s in enumerate(seqs)}
    with torch.no_grad(), bc.record(m, path, "trainer", final_tokens=final, created=CREATED, batch_size=len(seqs),
                                    overwrite=True):
        m(input_ids=ids)


def batch1(m, path, seqs, decode, prompt):
    """Each sequence alone: one forward over its tokens, or (decode) its prompt and then one token per forward
    from the KV cache, teacher-forced to the same tokens."""
    from transformers import DynamicCache  # noqa: I001

    dev = next(m.parameters()).device
    with torch.no_grad(), bc.record(m, path, "sampler", created=CREATED, batch_size=1, overwrite=True) as rec:
        for b, s in enumerate(seqs):
            rec.batch(seq_ids=[b])
            if not decode:
                m(input_ids=torch.tensor([s[:-1]], device=dev))
                rec.sampled([b], [s[-1]])
                continue
            cache = DynamicCache()
            m(input_ids=torch.tensor([s[:prompt]], device=dev), position_ids=torch.arange(prompt, device=dev)[None],
              past_key_values=cache, use_cache=True)
            for p in range(prompt, len(s) - 1):
                rec.batch(seq_ids=[b])
                m(input_ids=torch.tensor([[s[p]]], device=dev), position_ids=torch.tensor([[p]], device=dev),
                  past_key_values=cache, use_cache=True)
            rec.sampled([b], [s[-1]])


def run(cmd, ok=(0,)):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in ok:
        raise SystemExit(f"moe_proof.py: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--sampler", default="batch1", choices=["batch1", "decode"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=4)
    ap.add_argument("--sampler-attn", default="eager", choices=["eager", "sdpa"],
                    help="the batch-1 side's attention kernel: eager (the same as batch 8's) or sdpa (other kernels: "
                         "noise on a CPU, where the batch shape alone may change no bit)")
    ap.add_argument("--bin", default=os.environ.get("BITALIGN_BIN", "bin/bitalign"))
    a = ap.parse_args()
    dev = a.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if shutil.which(a.bin) is None and not os.path.exists(a.bin):
        raise SystemExit(f"moe_proof.py: {a.bin}: no bitalign binary (make build, or --bin)")
    os.makedirs(a.out, exist_ok=True)
    m = build(a.layers, a.hidden, a.experts, a.k)
    ckpt = os.path.join(a.out, "checkpoint")
    m.save_pretrained(ckpt, safe_serialization=True)
    m = m.to(dev)
    seqs = sequences(a.seqs, a.tokens, m.config.vocab_size)
    p8, p1 = os.path.join(a.out, "batch8.arrow"), os.path.join(a.out, "batch1.arrow")
    batch8(m, p8, seqs)
    samp = m
    if a.sampler_attn != "eager":
        samp = copy.deepcopy(m)
        samp.config._attn_implementation = a.sampler_attn
    batch1(samp, p1, seqs, a.sampler == "decode", a.prompt)

    rep_json, rep_txt = os.path.join(a.out, "report.json"), os.path.join(a.out, "report.txt")
    run([a.bin, "diff", p8, p1, "-o", rep_json, "--overwrite"], ok=(0, 1))
    run([a.bin, "diff", p8, p1, "-o", rep_txt, "--overwrite"], ok=(0, 1))
    rep = json.load(open(rep_json))
    text = open(rep_txt).read()
    print(f"device {dev} ({torch.cuda.get_device_name() if dev == 'cuda' else 'CPU'}), batch-1 side: {a.sampler}, "
          f"{a.sampler_attn} attention")
    print(text.splitlines()[0])
    i = text.find("\nRouting")
    print(text[i + 1 : text.index("\n\n", i + 1)] if i >= 0 else "no routing section in the report")

    replay = {"ran": False}
    h = run([a.bin, "replay", "--help"], ok=(0, 1, 2))
    help_ = h.stdout + h.stderr
    if "--routing-from" in help_:
        out = os.path.join(a.out, "replay.txt")
        p = run([a.bin, "replay", "--checkpoint", ckpt, "--capture", p1, "--routing-from", p8, "-o", out,
                 "--overwrite"], ok=(0, 1, 2))
        replay = {"ran": True, "exit": p.returncode, "report": out if p.returncode != 2 else None}
        print(f"replay with batch 8's routing (exit {p.returncode}):")
        if p.returncode == 2:  # bad usage or input: say why, keep the diff's results
            replay["error"] = p.stderr.strip()
            print(p.stderr.strip())
        else:
            print(open(out).read().splitlines()[0])
    else:
        print("replay --routing-from: not in this binary (the moe-engine branch adds it); skipped")
    flipped = sum(r["flipped"] for r in rep["routing"])
    tokens = sum(r["tokens"] for r in rep["routing"])
    summary = {"device": dev, "sampler": a.sampler, "identical": rep["identical"], "flipped": flipped,
               "token_layers": tokens, "layers": len(rep["routing"]), "replay": replay}
    with open(os.path.join(a.out, "proof.json"), "w") as f:
        json.dump(summary, f)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
