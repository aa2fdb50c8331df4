// rope.cu: twin of kernels.RoPEForward (docs/arithmetic.md §6), HF rotate_half.
// x and out are (T, heads·hd) (out may alias x), pos is (T), cos and sin are (maxPos, hd/2) from
// kernels.RoPETables, uploaded as data. One thread per pair (i, i+hd/2): it reads both before writing both.
#include "common.cuh"

extern "C" __global__ void rope(float* out, const float* x, const int* __restrict__ pos, int T, int heads, int hd,
                                const float* __restrict__ cs, const float* __restrict__ sn, int dt) {
    const int h = hd / 2;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * heads * h) return;
    const int j = (int)(i % h);
    const long long row = i / h;  // t·heads + head
    const int t = (int)(row / heads);
    const long long p = pos[t];
    const float c = cs[p * h + j], s = sn[p * h + j];
    const float* xv = x + row * hd;
    const float x0 = xv[j], x1 = xv[j + h];
    const float lo = round_dt(__fsub_rn(round_dt(__fmul_rn(x0, c), dt), round_dt(__fmul_rn(x1, s), dt)), dt);
    const float hi = round_dt(__fadd_rn(round_dt(__fmul_rn(x1, c), dt), round_dt(__fmul_rn(x0, s), dt)), dt);
    out[row * hd + j] = lo;
    out[row * hd + j + h] = hi;
}
