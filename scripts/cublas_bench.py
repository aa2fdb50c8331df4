"""cuBLAS SGEMM (TF32 off) and copy-bandwidth reference for kernels/cuda's BenchmarkMatmul, same shapes:
x (M, 4096) times w (4096, 4096)ᵀ, 4 weight copies rotated, CUDA events, mean of n runs after 3 warm-ups."""
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda:0"
K = N = 4096
g = torch.Generator(device=dev).manual_seed(1)
ws = [torch.randn(N, K, device=dev, generator=g) for _ in range(4)]
x = torch.randn(4096, K, device=dev, generator=g)
out = torch.empty(4096, N, device=dev)


def timed(f, n):
    for i in range(3):
        f(i)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(n):
        f(i)
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / n


src = torch.empty(2 << 30, dtype=torch.uint8, device=dev).fill_(1)
dst = torch.empty_like(src)
ms = timed(lambda i: dst.copy_(src), 10)
bw = 2 * src.numel() / (ms * 1e-3)
print(f"torch copy: {ms*1e3:.0f} us, {bw/1e9:.0f} GB/s (read+write)")
del src, dst
for M in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]:
    a, o = x[:M], out[:M]
    ms = timed(lambda i: torch.mm(a, ws[i % 4].t(), out=o), 50 if M <= 256 else 10)
    by = 4 * (M * K + N * K + M * N)
    print(f"cublas M={M:5d} K={K} N={N}: {ms*1e3:9.1f} us {2*M*K*N/(ms*1e-3)/1e12:7.2f} TFLOP/s "
          f"{by/(ms*1e-3)/1e9:7.0f} GB/s {100*by/(ms*1e-3)/bw:5.1f} %copy-BW")
