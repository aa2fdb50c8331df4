"""Every tiled-matmul plan (tile rows bm, segments per block G) at a model's shapes, beside cuBLAS SGEMM.

Run by `bash scripts/gpu.sh sweep` on the GPU machine. Each variant of the canonical matmul gives the same bits
(docs/arithmetic.md §3: the K order is fixed per output element), which this script checks on every shape before it
times anything; only the speed differs, and the launch rules (kernels/cuda/launch.json, read by
kernels/cuda/launch.go and bitalign/launch.py) choose one. The table it prints is what those rules are fitted to
(docs/benchmarks.md). Timing: CUDA events, median of --iters runs after --warmup, cuBLAS SGEMM (TF32 off) through
torch.mm in the same process on the same inputs.

    python3 scripts/plan_sweep.py [--json out.json] [--iters 7]
"""

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "capture", "python"))
from bitalign import launch, ops  # noqa: E402

# (name, K, N): Qwen2-1.5B (hidden 1536, intermediate 8960, q/k/v 1536+256+256) and Qwen2.5-7B (3584, 18944,
# q/k/v 3584+512+512) projections, and the 1.5B LM head
SHAPES = {
    "1.5b": [("qkv", 1536, 2048), ("o", 1536, 1536), ("gate", 1536, 8960), ("down", 8960, 1536),
             ("lm_head", 1536, 151936)],
    "7b": [("qkv", 3584, 4608), ("o", 3584, 3584), ("gate", 3584, 18944), ("down", 18944, 3584)],
}
MS = {"1.5b": [1024, 8192], "7b": [512, 1024, 4096]}


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--models", default="1.5b,7b")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(1)
    rows = []
    print(f"{'shape':>24} {'plan (rules)':>14} {'cuBLAS us':>10} " + " ".join(f"{f'bm{bm} G{gg}':>11}" for bm in (64, 128)
                                                                        for gg in (1, 2, 4, 8)) + "  best  rules/best")
    for model in args.models.split(","):
        for M in MS[model]:
            for name, K, N in SHAPES[model]:
                x = torch.randn(M, K, device=dev, generator=g).bfloat16().float()
                w = (torch.randn(N, K, device=dev, generator=g) * K ** -0.5).bfloat16().float()
                bounds, tree = launch.matmul_bounds("canonical", M, K)
                vec = K % 4 == 0
                rule = ops._planner(dev).matmul(M, K, N, bounds, tree, vec)
                out = torch.empty(M, N, device=dev)

                def ours(bm=0, gg=0):
                    ops._matmul(dev, out, x, w, None, M, K, N, bounds, tree, ops._dt("linear", "bf16"), force_bm=bm,
                                force_g=gg)

                ours()
                ref = out.clone()
                cub = timed(lambda: torch.mm(x, w.t()), args.warmup, args.iters)
                t = {}
                for bm in (64, 128):
                    for gg in (1, 2, 4, 8):
                        ours(bm, gg)
                        if not torch.equal(out.view(torch.int32), ref.view(torch.int32)):
                            d = (out.view(torch.int32) != ref.view(torch.int32)).nonzero()[0].tolist()
                            sys.exit(f"plan_sweep: {model} M={M} {name}: bm {bm} G {gg} differs from the rules' plan "
                                     f"at {d}: the variants must give the same bits")
                        t[(bm, gg)] = timed(lambda: ours(bm, gg), args.warmup, args.iters)
                tr = timed(lambda: ours(), args.warmup, args.iters)
                best = min(t, key=t.get)
                label = f"{model} M={M} {name}"
                print(f"{label:>24} {f'bm{rule.bm} G{rule.g}':>14} {cub:10.1f} " +
                      " ".join(f"{t[(bm, gg)]:11.1f}" for bm in (64, 128) for gg in (1, 2, 4, 8)) +
                      f"  bm{best[0]} G{best[1]}  {tr / t[best]:.3f} (rules {tr:.1f} us, cuBLAS/rules {cub / tr:.3f})",
                      flush=True)
                rows.append({"model": model, "M": M, "name": name, "K": K, "N": N, "cublas_us": cub, "rules_us": tr,
                             "rules": [rule.bm, rule.g], "variants": {f"{bm},{gg}": v for (bm, gg), v in t.items()}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
