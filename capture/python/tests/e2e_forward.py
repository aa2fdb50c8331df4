#!/usr/bin/env python3
"""Issue 14's end-to-end forward: the engine's forward on the GPU against transformers' bf16 forward with SDPA on
the same random model, in the same call (`bash scripts/gpu.sh e2e`).

    python3 capture/python/tests/e2e_forward.py OUT [--models 1.5b,8b] [--profiles canonical,tc]
        [--engine-test .gpu/engine.test] [--iters 20] [--blocking]

For each model (replay_size.py's: Qwen2-1.5B's shapes over 4 × 256 tokens, Qwen3-8B's over 8 × 512; random bf16
weights built on the GPU): transformers' forward to the logits, CUDA events around each of --iters forwards after
two warm-ups (median and mean); the model saved as safetensors; the transformers model freed; then the engine's
BenchmarkForwardSize (engine/forward_size_test.go) on that checkpoint at the same shape for each profile, which
prints ms/forward and the per-op device-time table. OUT/e2e.json holds the figures, OUT/<model>-engine.log the
benchmark's output. --blocking runs the benchmark a second time with BITALIGN_CUDA_LAUNCH_BLOCKING=1 (every op waits
for its launch on the device thread: the engine before its launch queue), reported as PROFILE-blocking.
Exit status 1 if a benchmark fails.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from replay_size import build  # noqa: E402


def hf_time(m, ids, iters):
    """Per-forward milliseconds of m(input_ids=ids): CUDA events around each forward after two warm-ups."""
    times = []
    with torch.no_grad():
        for _ in range(2):
            m(input_ids=ids)
        torch.cuda.synchronize()
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            m(input_ids=ids)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times), statistics.fmean(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="1.5b,8b")
    ap.add_argument("--profiles", default="canonical,tc")
    ap.add_argument("--engine-test", default=".gpu/engine.test")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--benchtime", default="10x")
    ap.add_argument("--blocking", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    binary = os.path.abspath(a.engine_test)
    results, rc = [], 0
    for name in a.models.split(","):
        m, (B, S) = build(name, False, "cuda")
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(1, m.config.vocab_size, (B, S), generator=g).to("cuda")
        med, mean = hf_time(m, ids, a.iters)
        ckpt = os.path.join(a.out, name + "-checkpoint")
        shutil.rmtree(ckpt, ignore_errors=True)
        m.save_pretrained(ckpt, safe_serialization=True)
        del m
        torch.cuda.empty_cache()
        engine, code = {}, 0
        for suffix, blocking in [("", "0")] + ([("-blocking", "1")] if a.blocking else []):
            env = dict(os.environ, BITALIGN_FWD_DIR=os.path.abspath(ckpt), BITALIGN_FWD_SHAPE=f"{B},{S}",
                       BITALIGN_FWD_PROFILES=a.profiles, BITALIGN_REQUIRE_GPU="1",
                       BITALIGN_CUDA_LAUNCH_BLOCKING=blocking)
            p = subprocess.run([binary, "-test.run", "^$", "-test.bench", "BenchmarkForwardSize", "-test.benchtime",
                                a.benchtime, "-test.timeout", "500s"], cwd="engine", env=env, capture_output=True,
                               text=True)
            log = p.stdout + p.stderr
            open(os.path.join(a.out, name + suffix + "-engine.log"), "w").write(log)
            # the per-op table prints between a sub-benchmark's name and its result line
            for prof, ms in re.findall(r"BenchmarkForwardSize/([a-z]+)[-0-9]*\s.*?\s([0-9.]+) ms/forward", log, re.S):
                engine[prof + suffix] = float(ms)
            code = code or p.returncode
            print(log)
        res = {"model": name, "batch": B, "tokens": S, "hf_bf16_sdpa_ms_median": round(med, 2),
               "hf_bf16_sdpa_ms_mean": round(mean, 2), "engine_ms": engine, "exit": code,
               "ratio_to_hf": {k: round(v / med, 3) for k, v in engine.items()}}
        results.append(res)
        rc = rc or (code != 0)
        print(json.dumps(res))
        shutil.rmtree(ckpt, ignore_errors=True)
    json.dump(results, open(os.path.join(a.out, "e2e.json"), "w"), indent=1)
    cols = [p + s for s in [""] + (["-blocking"] if a.blocking else []) for p in a.profiles.split(",")]
    print(f"{'model':6} {'shape':>9} {'transformers bf16':>18} " + " ".join(f"{p:>12}" for p in cols))
    for r in results:
        print(f"{r['model']:6} {r['batch']:>4}×{r['tokens']:<4} {r['hf_bf16_sdpa_ms_median']:15.2f} ms "
              + " ".join(f"{r['engine_ms'].get(p, float('nan')):9.2f} ms" for p in cols))
    return rc


if __name__ == "__main__":
    sys.exit(main())
