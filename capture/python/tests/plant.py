#!/usr/bin/env python3
"""A realistic trainer/sampler pair of a random Hugging Face model with one bug planted on one side.

    python3 capture/python/tests/plant.py OUT --arch qwen2 --bug weight [--side sampler] [--layer 1] [--layers 4] [--hidden 256]
                         [--seqs 6] [--tokens 16] [--dtype bf16]

Writes OUT/checkpoint (the clean model, save_pretrained), OUT/trainer.arrow, OUT/sampler.arrow and
OUT/plant.json ({"op": ..., "side": ..., "bug": ...}: what the audit must find).

The two sides differ the way they always do without batch-invariant kernels: the trainer runs one right-padded
forward over every sequence (batch = --seqs), the sampler prefills each prompt alone and then decodes one token per
forward from its KV cache. On top of that one side carries the bug:

  eps     layer L's post-attention RMSNorm uses eps x 10^4           -> layers.L.mlp_norm
  weight  one element of layer L's down_proj weight is perturbed     -> layers.L.mlp.down_proj
  fp16    layer L's o_proj runs its matmul in float16, in a model whose   -> layers.L.attn.o_proj
          o_proj outputs leave float16's range (bf16 outlier activations)
  rope    the side's RoPE frequencies use theta x 2 (every layer)    -> layers.0.attn.sdpa
  none    no bug: the audit must find no suspect
"""
import argparse
import copy
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bitalign_capture, from the checkout

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model  # noqa: E402

CREATED = "2026-12-01T00:00:00Z"


def build(arch, layers, hidden, dtype, seed=0):
    """The clean random model: hidden // 64 heads (2 at least), half as many KV heads."""
    if arch not in ("llama", "qwen2", "qwen3"):
        raise SystemExit(f"plant.py: unknown --arch {arch!r} (llama, qwen2, qwen3)")
    heads = max(hidden // 64, 2)
    return hf_model(arch, dtype, seed, vocab=512, hidden=hidden, intermediate=hidden * 3, layers=layers, heads=heads,
                    kv_heads=max(heads // 2, 1), head_dim=64 if arch == "qwen3" else None, positions=256)


class _F16Linear(torch.nn.Module):
    """A linear layer whose matmul runs in float16 (the bug: one matmul in the wrong precision)."""

    def __init__(self, lin):
        super().__init__()
        self.lin = lin

    def forward(self, x):
        w = self.lin.weight
        y = torch.nn.functional.linear(x.to(torch.float16), w.to(torch.float16))
        if self.lin.bias is not None:
            y = y + self.lin.bias.to(torch.float16)
        return y.to(x.dtype)


class _RowParallel2(torch.nn.Module):
    """A row-parallel linear layer at TP 2 in one process, as a TP-2 sampler runs it: each rank's half of K in
    its own matmul, rounded to the model dtype, then the all-reduce adds the two halves in that dtype."""

    def __init__(self, lin):
        super().__init__()
        self.lin = lin

    def forward(self, x):
        w, k = self.lin.weight, self.lin.in_features // 2
        y = torch.nn.functional.linear(x[..., :k], w[:, :k]) + torch.nn.functional.linear(x[..., k:], w[:, k:])
        return y if self.lin.bias is None else y + self.lin.bias


def as_sampler(m):
    """The sampler's kernels: SDPA attention instead of eager and TP-2 row-parallel o_proj and down_proj (the
    noise every real trainer/sampler pair has without batch-invariant kernels)."""
    m = copy.deepcopy(m)
    m.config._attn_implementation = "sdpa"
    for blk in m.model.layers:
        blk.self_attn.o_proj = _RowParallel2(blk.self_attn.o_proj)
        blk.mlp.down_proj = _RowParallel2(blk.mlp.down_proj)
    return m


def plant(m, bug, layer):
    """A copy of m with the bug; returns (model, op the audit must name)."""
    m = copy.deepcopy(m)
    blk = m.model.layers[layer]
    with torch.no_grad():
        if bug == "eps":
            blk.post_attention_layernorm.variance_epsilon *= 1e4
            return m, f"layers.{layer}.mlp_norm"
        if bug == "weight":
            w = getattr(blk.mlp.down_proj, "lin", blk.mlp.down_proj).weight
            w[3, 5] += 8 * w.float().std().to(w.dtype)
            return m, f"layers.{layer}.mlp.down_proj"
        if bug == "fp16":
            # the wrapper keeps the module path (o_proj.lin is the Linear): hook the wrapper under o_proj's name
            blk.self_attn.o_proj = _F16Linear(getattr(blk.self_attn.o_proj, "lin", blk.self_attn.o_proj))
            return m, f"layers.{layer}.attn.o_proj"
        if bug == "rope":
            rot = m.model.rotary_emb
            n = rot.inv_freq.numel()
            rot.inv_freq.copy_(rot.inv_freq * 0.5 ** (torch.arange(n, device=rot.inv_freq.device) / n))
            rot.original_inv_freq = rot.inv_freq.clone()
            return m, "layers.0.attn.sdpa"
        if bug == "none":
            return m, None
    raise SystemExit(f"plant.py: unknown --bug {bug!r} (eps, weight, fp16, rope, none)")


def sequences(n, tokens, vocab, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (tokens + 1,), generator=g).tolist() for _ in range(n)]


def trainer(m, path, seqs):
    """One right-padded forward over t0..t(N-2) of every sequence; t(N-1) is only a target."""
    dev = next(m.parameters()).device
    S = max(len(s) for s in seqs) - 1
    ids = torch.zeros((len(seqs), S), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, : len(s) - 1] = torch.tensor(s[:-1])
        mask[b, : len(s) - 1] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    final = {b: s[-1] for b, s in enumerate(seqs)}
    with torch.no_grad(), bc.record(m, path, "trainer", final_tokens=final, created=CREATED, batch_size=len(seqs)) as rec:
        m(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev))


def sampler(m, path, seqs, prompt):
    """Each sequence alone: prefill its prompt, then one token per forward from the KV cache (teacher-forced to
    the same tokens, as a rollout's recomputation needs)."""
    from transformers import DynamicCache  # noqa: I001

    dev = next(m.parameters()).device
    with torch.no_grad(), bc.record(m, path, "sampler", record_samples=True, created=CREATED, batch_size=1) as rec:
        for b, s in enumerate(seqs):
            cache = DynamicCache()
            ids = torch.tensor([s[:prompt]], device=dev)
            rec.batch(seq_ids=[b])
            m(input_ids=ids, position_ids=torch.arange(prompt, device=dev)[None], past_key_values=cache, use_cache=True)
            for p in range(prompt, len(s) - 1):
                rec.batch(seq_ids=[b])
                m(input_ids=torch.tensor([[s[p]]], device=dev), position_ids=torch.tensor([[p]], device=dev),
                  past_key_values=cache, use_cache=True)
            rec.sampled([b], [s[-1]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="qwen2")
    ap.add_argument("--bug", default="weight")
    ap.add_argument("--side", default="sampler", choices=["trainer", "sampler"])
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seqs", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=4)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--device", default="cpu", help="where both sides run: cpu or cuda (the checkpoint is the same)")
    ap.add_argument("--native", action="store_true",
                    help="the sampler keeps the trainer's kernels (eager attention, whole row-parallel matmuls): its "
                         "only differences are the batch shape and the decode loop, as on a GPU, where cuBLAS varies with M")
    a = ap.parse_args()
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    clean = build(a.arch, a.layers, a.hidden, dtype)
    if a.bug == "fp16":  # outlier activations: layer L's o_proj outputs reach 10^5, beyond float16's 65504
        with torch.no_grad():
            clean.model.layers[a.layer].self_attn.o_proj.weight.mul_(2.0**20)
    os.makedirs(a.out, exist_ok=True)
    clean.save_pretrained(os.path.join(a.out, "checkpoint"), safe_serialization=True)
    clean = clean.to(a.device)
    samp = copy.deepcopy(clean) if a.native else as_sampler(clean)
    if a.side == "trainer":
        train, op = plant(clean, a.bug, a.layer)
    else:
        train, (samp, op) = clean, plant(samp, a.bug, a.layer)
    seqs = sequences(a.seqs, a.tokens, clean.config.vocab_size)
    trainer(train, os.path.join(a.out, "trainer.arrow"), seqs)
    sampler(samp, os.path.join(a.out, "sampler.arrow"), seqs, a.prompt)
    with open(os.path.join(a.out, "plant.json"), "w") as f:
        json.dump({"op": op, "side": a.side if op else None, "bug": a.bug, "arch": a.arch}, f)
    print(json.dumps({"op": op, "side": a.side, "bug": a.bug}))


if __name__ == "__main__":
    main()
