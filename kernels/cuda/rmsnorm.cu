// rmsnorm.cu: twin of kernels.RMSNormForward (docs/arithmetic.md §5, §13).
// x is (rows, C), w is (C), out is (rows, C); out may alias x. One warp per row, 8 rows per block.
#include "common.cuh"

// Canonical: lanes 0..7 each run one segment's FMA chain (floor(s·C/8) boundaries, §3), combined by the fixed
// tree (shuffles xor 1, 2, 4). Standard: rows < 16: lanes 0..3 run the 4 interleaved accumulators a[k%4],
// combined (a0⊕a1)⊕(a2⊕a3); rows ≥ 16: lane 0 runs one chain. The row count picks the standard blocking, as
// in a vendor library; the canonical order never looks at it.
extern "C" __global__ void __launch_bounds__(256) rmsnorm(float* out, const float* x, const float* __restrict__ w,
                                                          int rows, int C, float eps, int prof, int dt) {
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
        orow[k] = round_dt(__fmul_rn(w[k], h), dt);
    }
}
