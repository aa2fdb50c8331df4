// sample.cu: twin of kernels.Sample (docs/arithmetic.md §10) for the rules without a sort: greedy
// (temperature ≤ 0) and temperature + Gumbel-max over the whole vocabulary (no top-k, no top-p; those sort the
// row and run on the host). One block per row; the winner is the largest (score, −index), a total order, so
// the parallel reduction picks exactly the token of the sequential scan.
#include "common.cuh"

#define NEG_INF __uint_as_float(0xFF800000u)

// philox4x32_10: Random123's Philox4x32-10, twin of kernels.Philox4x32.
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k.x += 0x9E3779B9u;
            k.y += 0xBB67AE85u;
        }
        const uint32_t lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
        const uint32_t lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

// bt_uniform: kernels.Uniform — an odd multiple of 2^-24 in (0, 1), exact.
__device__ __forceinline__ float bt_uniform(unsigned long long seed, long long seq, long long pos, int i) {
    const uint4 r = philox4x32_10(make_uint4((uint32_t)(i >> 2), (uint32_t)pos, (uint32_t)seq,
                                             (uint32_t)((unsigned long long)seq >> 32)),
                                  make_uint2((uint32_t)seed, (uint32_t)(seed >> 32)));
    const uint32_t w = (i & 3) == 0 ? r.x : (i & 3) == 1 ? r.y : (i & 3) == 2 ? r.z : r.w;
    return __fmul_rn(__uint2float_rn(((w >> 9) << 1) | 1u), 0x1p-24f);
}

// bt_gumbel: kernels.Gumbel = -Log(-Log(u)).
__device__ __forceinline__ float bt_gumbel(unsigned long long seed, long long seq, long long pos, int i) {
    return -bt_log(-bt_log(bt_uniform(seed, seq, pos, i)));
}

// better: (s, i) beats (bs, bi): larger score, ties to the smaller index; bi < 0 is "none yet".
__device__ __forceinline__ bool better(float s, int i, float bs, int bi) {
    return bi < 0 || s > bs || (s == bs && i < bi);
}

// sample: logits is (T, V); seqs and poss are (T) (int64); out is (T) token ids (−1 when every logit is NaN).
extern "C" __global__ void __launch_bounds__(256) sample(int* out, const float* __restrict__ x, int T, int V,
                                                         float temperature, unsigned long long seed,
                                                         const long long* __restrict__ seqs,
                                                         const long long* __restrict__ poss) {
    __shared__ float ss[256];
    __shared__ int si[256];
    const int t = blockIdx.x;
    const float* row = x + (long long)t * V;
    const long long seq = seqs[t], pos = poss[t];
    float bs = NEG_INF;
    int bi = -1;
    for (int j = threadIdx.x; j < V; j += 256) {  // ascending j per thread
        const float v = row[j];
        if (v != v) continue;  // NaN logits are never drawn
        float s;
        if (temperature <= 0.0f) {
            s = v;  // greedy: the first largest logit
        } else {
            const float z = __fdiv_rn(v, temperature);
            s = __fadd_rn(z, bt_gumbel(seed, seq, pos, j));
        }
        if (better(s, j, bs, bi)) bs = s, bi = j;
    }
    ss[threadIdx.x] = bs;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int d = 128; d > 0; d >>= 1) {
        if (threadIdx.x < d) {
            const int oi = si[threadIdx.x + d];
            if (oi >= 0 && better(ss[threadIdx.x + d], oi, ss[threadIdx.x], si[threadIdx.x])) {
                ss[threadIdx.x] = ss[threadIdx.x + d];
                si[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[t] = si[0];
}
