// rmsnorm.cu: twin of kernels.RMSNormForward (docs/arithmetic.md §5, §13).
// x is (rows, C), w is (C), out is (rows, C); out may alias x. Canonical rows longer than launch.json's
// rmsnorm.warp_max_c that fit in shared memory: rmsnorm_row (a block per row); else, and for the standard profile,
// rmsnorm (one warp per row, 8 per block).
// Each kernel has a twin per 16-bit weight dtype (_bf16w, _f16w: w holds the checkpoint's bits, widened exactly
// as they are loaded, wld1/wld4): the same plan, the same bits.
#include "weights.cuh"

// Canonical: lanes 0..7 each run one segment's FMA chain (floor(s·C/8) boundaries, §3), combined by the fixed
// tree (shuffles xor 1, 2, 4). Standard: rows < 16: lanes 0..3 run the 4 interleaved accumulators a[k%4],
// combined (a0⊕a1)⊕(a2⊕a3); rows ≥ 16: lane 0 runs one chain. The row count picks the standard blocking, as
// in a vendor library; the canonical order never looks at it.
template <typename WT>
__device__ __forceinline__ void rmsnorm_body(float* out, const float* x, const WT* __restrict__ w, int rows, int C,
                                             float eps, int prof, int dt) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warps leave together
    const float* xr = x + (long long)r * C;
    int nch, k0, k1, stride;
    if (prof == PROF_STANDARD && rows < 16) {
        nch = 4, k0 = lane, k1 = C, stride = 4;
    } else if (prof == PROF_STANDARD) {
        nch = 1, k0 = 0, k1 = C, stride = 1;
    } else {
        nch = 8;
        k0 = (int)((long long)lane * C / 8);
        k1 = (int)((long long)(lane + 1) * C / 8);
        stride = 1;
    }
    float acc = 0.0f;  // every chain starts from +0
    if (lane < nch)
        for (int k = k0; k < k1; k += stride) acc = __fmaf_rn(xr[k], xr[k], acc);
    // lanes ≥ nch hold +0 and are never added into lanes < nch (xor d < nch stays inside the group)
    for (int d = 1; d < nch; d *= 2) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, d));
    const float ss = __shfl_sync(0xffffffffu, acc, 0);
    const float mean = __fdiv_rn(ss, __int2float_rn(C));
    const float rs = bt_rsqrt(__fadd_rn(mean, eps));
    float* orow = out + (long long)r * C;
    for (int k = lane; k < C; k += 32) {
        const float h = round_dt(__fmul_rn(xr[k], rs), dt);
        orow[k] = round_dt(__fmul_rn(wld1(w + k), h), dt);
    }
}
#define RMSNORM(NAME, WT)                                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                                            \
        NAME(float* out, const float* x, const WT* __restrict__ w, int rows, int C, float eps, int prof, int dt) { \
        rmsnorm_body<WT>(out, x, w, rows, C, eps, prof, dt);                                                     \
    }
RMSNORM(rmsnorm, float)
RMSNORM(rmsnorm_bf16w, unsigned short)
RMSNORM(rmsnorm_f16w, f16bits)

// rmsnorm_row: the canonical op, one block of 128 threads per row (used when the row fits in shared memory).
// The row is read once into shared memory, each segment at its own offset s·stride with stride ≡ 1 (mod 32), so
// the 8 chain threads (0..7), which step through their segments together, read 8 different banks whatever C
// is; thread 0 adds their partials in the tree, and every thread writes its share, reading x again (from L2).
// Each output element is read, then written, by the same thread after the chains are done, so out = x is safe.
// vec: C is a multiple of 4 and x, w and out are 16-byte aligned (the host checks).
template <typename WT>
__device__ __forceinline__ void rmsnorm_row_body(float* out, const float* x, const WT* __restrict__ w, int rows, int C,
                                                 float eps, int dt, int vec) {
    extern __shared__ __align__(16) float xs[];
    __shared__ float part[8];
    __shared__ float rs_sh;
    const int tid = threadIdx.x;
    const float* xr = x + (long long)blockIdx.x * C;
    const int lmax = (C + 7) / 8;                 // the longest segment
    const int stride = (lmax + 31) / 32 * 32 + 1;  // ≡ 1 (mod 32)
#pragma unroll
    for (int s = 0; s < 8; s++) {  // (a scatter of 16-byte loads by s(k) = floor((8k+7)/C) measured slower)
        const int b0 = (int)((long long)s * C / 8), b1 = (int)((long long)(s + 1) * C / 8);
        for (int j = tid; j < b1 - b0; j += 128) xs[s * stride + j] = xr[b0 + j];
    }
    __syncthreads();

    if (tid < 8) {
        const int b0 = (int)((long long)tid * C / 8), n = (int)((long long)(tid + 1) * C / 8) - b0;
        const float* seg = xs + tid * stride;
        float acc = 0.0f;  // every chain starts from +0
        int j = 0;
#pragma unroll 2
        for (; j + 8 <= n; j += 8) {
            float v[8];
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = seg[j + i];
#pragma unroll
            for (int i = 0; i < 8; i++) acc = __fmaf_rn(v[i], v[i], acc);
        }
        for (; j < n; j++) acc = __fmaf_rn(seg[j], seg[j], acc);
        part[tid] = acc;
        __syncwarp(0xffu);
        if (tid == 0) {
            float p[8];
#pragma unroll
            for (int s = 0; s < 8; s++) p[s] = part[s];
            const float mean = __fdiv_rn(tree8(p, 8), __int2float_rn(C));
            rs_sh = bt_rsqrt(__fadd_rn(mean, eps));
        }
    }
    __syncthreads();
    const float rs = rs_sh;
    float* orow = out + (long long)blockIdx.x * C;
    if (vec) {
        for (int i = tid; i < C / 4; i += 128) {
            const float4 xv = reinterpret_cast<const float4*>(xr)[i];
            const float4 wv = wld4(w + 4 * i);
            float4 o;
            o.x = round_dt(__fmul_rn(wv.x, round_dt(__fmul_rn(xv.x, rs), dt)), dt);
            o.y = round_dt(__fmul_rn(wv.y, round_dt(__fmul_rn(xv.y, rs), dt)), dt);
            o.z = round_dt(__fmul_rn(wv.z, round_dt(__fmul_rn(xv.z, rs), dt)), dt);
            o.w = round_dt(__fmul_rn(wv.w, round_dt(__fmul_rn(xv.w, rs), dt)), dt);
            reinterpret_cast<float4*>(orow)[i] = o;
        }
    } else {
        for (int k = tid; k < C; k += 128) orow[k] = round_dt(__fmul_rn(wld1(w + k), round_dt(__fmul_rn(xr[k], rs), dt)), dt);
    }
}
#define RMSNORM_ROW(NAME, WT)                                                                                    \
    extern "C" __global__ void __launch_bounds__(128)                                                            \
        NAME(float* out, const float* x, const WT* __restrict__ w, int rows, int C, float eps, int dt, int vec) {  \
        rmsnorm_row_body<WT>(out, x, w, rows, C, eps, dt, vec);                                                  \
    }
RMSNORM_ROW(rmsnorm_row, float)
RMSNORM_ROW(rmsnorm_row_bf16w, unsigned short)
RMSNORM_ROW(rmsnorm_row_f16w, f16bits)
