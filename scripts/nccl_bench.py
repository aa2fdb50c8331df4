#!/usr/bin/env python3
"""NCCL all-reduce baseline for nvls: torch.distributed, one process per GPU, NVLink multicast (NVLS) off.

Times each all-reduce with CUDA events (calls back to back, as nvls's Go benchmark times its kernels), reports the
median per size and dtype, and the bus bandwidth 2(n-1)/n * bytes / time. Usage (on the GPU machine):

    NCCL_NVLS_ENABLE=0 python3 scripts/nccl_bench.py [--json out.json] [--iters 50]
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [512 << i for i in range(18)]  # 512 B .. 64 MiB


def worker(rank, world, args, q):
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # never NVLink multicast on these machines
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, init_method="tcp://127.0.0.1:29533")
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for size in SIZES:
            n = size // torch.tensor([], dtype=dtype).element_size()
            x = torch.randn(n, device="cuda").to(dtype)
            for _ in range(args.warmup):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
            for a, b in ev:
                a.record()
                dist.all_reduce(x)
                b.record()
            torch.cuda.synchronize()
            t = [a.elapsed_time(b) * 1e3 for a, b in ev]  # µs
            # the slower rank decides: gather medians on rank 0
            med = torch.tensor([statistics.median(t)], device="cuda")
            dist.all_reduce(med, op=dist.ReduceOp.MAX)
            us = med.item()
            busbw = 2 * (world - 1) / world * size / (us * 1e-6) / 1e9
            rows.append({"impl": "nccl", "dtype": str(dtype).split(".")[-1], "bytes": size, "median_us": us, "busbw_GBs": busbw})
    if rank == 0:
        q.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    world = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, args, q)) for r in range(world)]
    for p in procs:
        p.start()
    rows = q.get()
    for p in procs:
        p.join()
    print(f"NCCL {torch.cuda.nccl.version()} all-reduce, {world} GPUs, NVLS off, median of {args.iters}")
    print(f"{'dtype':>8} {'bytes':>10} {'median µs':>10} {'busbw GB/s':>11}")
    for r in rows:
        print(f"{r['dtype']:>8} {r['bytes']:>10} {r['median_us']:>10.1f} {r['busbw_GBs']:>11.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
