"""The tc matmul beside cuBLAS bf16 and tc attention beside FlashAttention (scripts/gpu.sh tc, tcattn): reads the
Go benchmark log of BenchmarkMatmulTC (kernels/cuda/tc_test.go), times torch.mm in bf16 at the same shapes in the
same call (median of CUDA-event-timed runs after warm-up, weights rotated over 4 copies when they fit, as the Go
benchmark does) and prints one table: the tc kernel's µs, cuBLAS's µs, speed as a fraction of cuBLAS (cuBLAS
time / tc time: ≥ 1 is faster), TFLOP/s, and the fraction of copy bandwidth (bf16 x and w read once, the output
written: float32 for tc, bf16 for cuBLAS). The log's BenchmarkAttentionTC lines (kernels/cuda/tc_attention_test.go)
get a second table: torch.nn.functional.scaled_dot_product_attention with the flash backend only
(sdpa_kernel(SDPBackend.FLASH_ATTENTION)), bf16, GQA through enable_gqa, causal for prefill, at the same shapes
(a decode batch of B sequences is one SDPA call of batch B; tc runs one launch per sequence, as the engine does).
With TCREPS=R (> 1; the Go benchmark's -tc-reps=R) cuBLAS's time is one of R torch.mm launches captured back to
back in a CUDA graph (no launch gaps, the fairest anchor for decode sizes), and the table adds the Go side's
host time per launch (host-us/op).
Usage: [TCREPS=R] python3 scripts/tc_bench.py GO_BENCH_LOG"""
import os
import re
import sys

import torch

ATT = re.compile(r"^BenchmarkAttentionTC/(\w+)/nh=(\d+)/nkv=(\d+)/hd=(\d+)/T=(\d+)/S=(\d+)/B=(\d+)(?:-\d+)?\s+\d+\s+(.*)$")
LINE = re.compile(r"^BenchmarkMatmulTC/([\w-]+)/([\w-]+)/M=(\d+)/K=(\d+)/N=(\d+)(?:-\d+)?\s+\d+\s+(.*)$")


def parse(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            vals = dict((u, float(v)) for v, u in re.findall(r"([-\d.e+]+) ([\w%/-]+)", m.group(6)))
            rows.append(dict(shape=m.group(1), layout=m.group(2), M=int(m.group(3)), K=int(m.group(4)),
                             N=int(m.group(5)), us=vals.get("gpu-us/op"), bw=vals.get("%copy-BW"),
                             host=vals.get("host-us/op")))
    return rows


def parse_attention(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ATT.match(line.strip())
            if not m:
                continue
            vals = dict((u, float(v)) for v, u in re.findall(r"([-\d.e+]+) ([\w%/-]+)", m.group(8)))
            nh, nkv, hd, T, S, B = (int(m.group(i)) for i in range(2, 8))
            rows.append(dict(kind=m.group(1), nh=nh, nkv=nkv, hd=hd, T=T, S=S, B=B, us=vals.get("gpu-us/op")))
    return rows


def attention_table(rows):
    """tc attention beside SDPA's flash backend; prefill goal ≥ 0.9×, decode ≥ 1.0× (issue 14)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    dev = "cuda:0"
    g = torch.Generator(device=dev).manual_seed(2)
    hdr = (f"{'kind':8} {'nh/nkv':>6} {'hd':>4} {'T':>5} {'S':>6} {'B':>3} {'tc us':>10} {'flash us':>10} "
           f"{'x flash':>7} {'goal':>5} {'tc TFLOP/s':>10} {'flash TFLOP/s':>13}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        nh, nkv, hd, T, S, B = r["nh"], r["nkv"], r["hd"], r["T"], r["S"], r["B"]
        q = torch.randn(B, nh, T, hd, device=dev, generator=g).to(torch.bfloat16)
        k = torch.randn(B, nkv, S, hd, device=dev, generator=g).to(torch.bfloat16)
        v = torch.randn(B, nkv, S, hd, device=dev, generator=g).to(torch.bfloat16)
        causal = r["kind"].startswith("prefill")  # prefill16, decode16: tc over bf16 caches
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            try:
                ms = median_ms(lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True), 20)
                how = ""
            except RuntimeError as e:  # a torch whose flash backend refuses enable_gqa: the heads expanded first
                ke, ve = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
                ms = median_ms(lambda i: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal), 20)
                how = f" (kv heads expanded: {str(e).splitlines()[0][:60]})"
                del ke, ve
        flops = B * 4 * nh * hd * (T * (T + 1) / 2 if causal else S)
        tc = r["us"] or float("nan")
        goal = 0.9 if causal else 1.0
        print(f"{r['kind']:8} {f'{nh}/{nkv}':>6} {hd:4d} {T:5d} {S:6d} {B:3d} {tc:10.1f} {ms * 1e3:10.1f} "
              f"{ms * 1e3 / tc:7.2f} {goal:5.1f} {flops / (tc * 1e-6) / 1e12:10.1f} {flops / (ms * 1e-3) / 1e12:13.1f}{how}")
        del q, k, v
        torch.cuda.empty_cache()


def median_ms(f, n):
    for i in range(3):
        f(i)
    torch.cuda.synchronize()
    ts = []
    for i in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f(i)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def graph_median_ms(f, reps, n):
    """The median over n replays of a CUDA graph of reps calls f(0) … f(reps - 1), per call."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            f(i)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            f(i)
    return median_ms(lambda i: graph.replay(), n) / reps


def main():
    rows = parse(sys.argv[1]) if len(sys.argv) > 1 else []
    att = parse_attention(sys.argv[1]) if len(sys.argv) > 1 else []
    if not rows and not att:
        print("tc_bench: no BenchmarkMatmulTC or BenchmarkAttentionTC lines in the Go log (did the tc kernels load?)")
        return 1
    if att:
        print("-- tc attention beside scaled_dot_product_attention (flash backend), bf16; x flash = flash us / tc us")
        attention_table(att)
    if not rows:
        return 0
    dev = "cuda:0"
    g = torch.Generator(device=dev).manual_seed(1)
    src = torch.empty(2 << 30, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty_like(src)
    ceiling = 2 * src.numel() / (median_ms(lambda i: dst.copy_(src), 10) * 1e-3)
    del src, dst
    print(f"copy ceiling (torch, read+write): {ceiling / 1e9:.0f} GB/s")
    reps = int(os.environ.get("TCREPS", "1"))
    if reps > 1:
        print(f"cuBLAS: one of {reps} torch.mm in a CUDA graph (TCREPS); tc: one of {reps} launches back to back")
    weights = {}
    hdr = (f"{'shape':15} {'layout':16} {'M':>5} {'K':>6} {'N':>6} {'tc us':>9} {'cuBLAS us':>9} {'x cuBLAS':>8} "
           f"{'tc TFLOP/s':>10} {'tc %BW':>6} {'cuBLAS %BW':>10}" + (f" {'host us':>7}" if reps > 1 else ""))
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        K, N, M = r["K"], r["N"], r["M"]
        key = (K, N)
        if key not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            copies = 1 if K * N > 64 << 20 else 4
            weights[key] = [torch.randn(N, K, device=dev, generator=g).to(torch.bfloat16) for _ in range(copies)]
        ws = weights[key]
        x = torch.randn(M, K, device=dev, generator=g).to(torch.bfloat16)
        out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        if reps > 1:
            ms = graph_median_ms(lambda i: torch.mm(x, ws[i % len(ws)].t(), out=out), reps, 20)
        else:
            ms = median_ms(lambda i: torch.mm(x, ws[i % len(ws)].t(), out=out), 20)
        cub_bw = 100 * (2 * M * K + 2 * N * K + 2 * M * N) / (ms * 1e-3) / ceiling
        tc = r["us"]
        ratio = (ms * 1e3) / tc if tc else float("nan")
        tflops = 2 * M * K * N / (tc * 1e-6) / 1e12 if tc else float("nan")
        bw = r["bw"] if r["bw"] is not None else float("nan")
        print(f"{r['shape']:15} {r['layout']:16} {M:5d} {K:6d} {N:6d} {tc or float('nan'):9.1f} {ms * 1e3:9.1f} "
              f"{ratio:8.2f} {tflops:10.1f} {bw:6.1f} {cub_bw:10.1f}" +
              (f" {r['host'] if r['host'] is not None else float('nan'):7.1f}" if reps > 1 else ""))
        del x, out
    return 0


if __name__ == "__main__":
    sys.exit(main())
