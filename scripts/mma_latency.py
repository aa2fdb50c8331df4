#!/usr/bin/env python3
"""scripts/mma_latency.py — how long one k-step of a dependent chain takes on this GPU (issue 14's decode floor).

A column-parallel decode chain is K/16 dependent tensor-core k-steps (docs/arithmetic.md tc.2), so its floor is
K/16 times the latency of one k-step whose accumulator is the previous one's result. This measures that latency,
with clock64 around straight-line chains in one block (no memory traffic: operands in registers or in shared
memory that stays put), for:

  mma.sync m16n8k16 bf16 → f32 (tc_tmd's instruction): 1, 2 and 4 independent chains interleaved in one warp
  mbarrier try_wait on a completed phase and ldmatrix .x4, each depending on the one before (tmd's other waits)
  wgmma m64nNk16 bf16 → f32, A and B from shared memory through 128-byte-swizzled descriptors (tc_tma's big-M
  instruction; a decode kernel would put 64 rows of w in A and N = 8…64 rows of x in B): N = 8, 16, 64, L wgmmas
  issued back to back on one accumulator, then one commit and one wait

Run on the GPU machine (CuPy compiles the kernels with NVRTC): python3 scripts/mma_latency.py [--json FILE].
"""
import argparse
import json
import sys

L = 256  # k-steps per chain (straight-line, unrolled)

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

#define MMA(d, a, b) asm volatile( \
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

template <int C>
__device__ void mma_chain(long long* out, float* sink, u32 seed) {
    u32 a[4] = {0x3f803f80u ^ (seed & 1), 0x3f803f80u, 0x3f803f80u, 0x3f803f80u}, b[2] = {seed & 0x00010001u, 0};
    float d[C][4];
    for (int c = 0; c < C; c++) for (int e = 0; e < 4; e++) d[c][e] = (float)(4 * c + e + (int)(seed & 7));  // distinct: ptxas merges identical chains
    __syncwarp();
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < @L@; i++) {
#pragma unroll
        for (int c = 0; c < C; c++) MMA(d[c], a, b);
    }
    const long long t1 = clock64();
    float s = 0.0f;
    for (int c = 0; c < C; c++) for (int e = 0; e < 4; e++) s += d[c][e];
    sink[threadIdx.x] = s;
    if (threadIdx.x == 0) out[0] = t1 - t0;
}
extern "C" __global__ void mma1(long long* out, float* sink, u32 seed) { mma_chain<1>(out, sink, seed); }
extern "C" __global__ void mma2(long long* out, float* sink, u32 seed) { mma_chain<2>(out, sink, seed); }
extern "C" __global__ void mma4(long long* out, float* sink, u32 seed) { mma_chain<4>(out, sink, seed); }

// trywait: L mbarrier try_waits on a completed phase, each address depending on the one before's result (tmd's
// consumer waits once a stage); ldsm: L ldmatrix .x4, each address depending on the one before's data (mask = 0)
extern "C" __global__ void trywait(long long* out, float* sink, u32 seed) {
    __shared__ __align__(8) u64 bar[2];
    const u32 base = (u32)__cvta_generic_to_shared(bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(base) : "memory");
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(base) : "memory");  // phase 0 completes
    }
    __syncthreads();
    u32 a = base, n = 0;
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < @L@; i++) {
        u32 ok;
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok) : "r"(a) : "memory");
        a = base + ((ok ^ 1u) << 3);
        n += ok;
    }
    const long long t1 = clock64();
    sink[threadIdx.x] = (float)n;
    if (threadIdx.x == 0) out[0] = t1 - t0;
}
extern "C" __global__ void ldsm(long long* out, float* sink, u32 seed) {
    __shared__ __align__(128) unsigned short tile[16 * 64];
    for (int i = threadIdx.x; i < 16 * 64; i += blockDim.x) tile[i] = (unsigned short)(i * seed);
    __syncwarp();
    const u32 base = (u32)__cvta_generic_to_shared(tile) + (threadIdx.x & 15) * 128, mask = seed >> 31;  // 0
    u32 r[4] = {0, 0, 0, 0}, acc = 0;
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < @L@; i++) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(base + (r[0] & mask)));
        acc ^= r[1];
    }
    const long long t1 = clock64();
    sink[threadIdx.x] = (float)acc;
    if (threadIdx.x == 0) out[0] = t1 - t0;
}

__device__ __forceinline__ u64 sw128_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
@WGMMA@
"""

WG_TEMPLATE = r"""
extern "C" __global__ void wgmma@N@(long long* out, float* sink, u32 seed) {
    __shared__ __align__(1024) unsigned char sm[64 * 128 + @N@ * 128 + 1024];
    for (int i = threadIdx.x; i < (int)sizeof(sm); i += blockDim.x) sm[i] = (i * 7 + seed) % 3 == 0 ? 0x3f : 0;
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const u32 base = (u32)__cvta_generic_to_shared(sm);
    const u64 ad = sw128_desc(base), bd = sw128_desc(base + 64 * 128);
    float d[@R@];
    for (int i = 0; i < @R@; i++) d[i] = 0.0f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < @L@; i++)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, @P@, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n@N@k16.f32.bf16.bf16 {@OUTS@}, @IA@, @IB@, p, 1, 1, 0, 0;\n}\n"
                     : @CONS@
                     : "l"(ad), "l"(bd), "r"(1));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    const long long t1 = clock64();
    float s = 0.0f;
    for (int i = 0; i < @R@; i++) s += d[i];
    sink[threadIdx.x] = s;
    if (threadIdx.x == 0) out[0] = t1 - t0;
}
"""


def wgmma_src(n):
    r = n // 2  # accumulator floats per thread: 64·n / 128
    outs = ",".join("%%%d" % i for i in range(r))
    cons = ", ".join('"+f"(d[%d])' % i for i in range(r))
    sub = {"@N@": n, "@R@": r, "@L@": L, "@OUTS@": outs, "@CONS@": cons, "@IA@": "%%%d" % r, "@IB@": "%%%d" % (r + 1),
           "@P@": "%%%d" % (r + 2)}
    t = WG_TEMPLATE
    for k, v in sub.items():
        t = t.replace(k, str(v))
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--source", action="store_true", help="print the CUDA source and exit (no GPU needed)")
    args = ap.parse_args()
    ns = [8, 16, 64]
    src = SRC.replace("@L@", str(L)).replace("@WGMMA@", "\n".join(wgmma_src(n) for n in ns))
    if args.source:
        print(src)
        return 0
    import cupy as cp
    mod = cp.RawModule(code=src, options=("-arch=sm_90a", "-std=c++17"), backend="nvrtc")
    clock = cp.cuda.Device().attributes["ClockRate"] / 1e6  # GHz (the attribute is kHz)
    out, sink = cp.zeros(1, dtype=cp.int64), cp.zeros(128, dtype=cp.float32)
    res = {}
    for name, threads, chains in [("mma1", 32, 1), ("mma2", 32, 2), ("mma4", 32, 4), ("trywait", 32, 1), ("ldsm", 32, 1)] + \
            [("wgmma%d" % n, 128, 1) for n in ns]:
        f = mod.get_function(name)
        best = None
        for rep in range(6):  # the first launches warm up; the smallest count of the rest
            f((1,), (threads,), (out, sink, cp.uint32(rep)))
            cp.cuda.Device().synchronize()
            if rep >= 2:
                c = int(out.get()[0])
                best = c if best is None else min(best, c)
        per = best / L
        res[name] = {"cycles_per_step": per, "chains": chains, "ns_per_step_at_boost": per / clock}
        print("%-8s %d chain(s) of %d k-steps: %6.1f cycles a k-step of a chain (%5.1f ns at %.2f GHz)"
              % (name, chains, L, per, per / clock, clock))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
