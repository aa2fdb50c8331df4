// matmul.cu: twin of kernels.MatmulForward and kernels.MatmulPartial (docs/arithmetic.md, "Matmul").
// x is (M, K), w is (N, K), out is (M, N): out = x·wᵀ in float32, not rounded.
//
// Canonical order: K is cut into fixed segments (Segs, computed on the host exactly as the Go kernel cuts
// them); each output's segment partial is ONE sequential FMA chain over its k in ascending order, starting
// from +0; the partials are then added in a fixed pairwise tree. So the kernels parallelise across outputs and
// segments only, never inside a segment's chain, and the order never depends on M, the tile or the launch.
#include "common.cuh"

// ---------------------------------------------------------------------------------------------------------
// Large M: 128×128 output tiles, 16-deep K tiles double-buffered in shared memory, 8×8 outputs per thread.
// Grid (ceil(N/128), ceil(M/128), segs.n): block z computes segment z's partials into part (segs.n, M, N);
// matmul_reduce adds them in the tree.
#define TBM 128
#define TBN 128
#define TBK 16
#define TPAD 4

template <bool VEC>
__device__ __forceinline__ void tile_load(float4 (&r)[2], const float* __restrict__ src, int rows, int K, int r0,
                                          int k0, int ke) {
    const int tid = threadIdx.x;
    const int q = tid & 3;  // which 4 of the 16 k
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = r0 + (tid >> 2) + 64 * i;
        const int k = k0 + 4 * q;
        if (VEC && row < rows && k + 3 < ke) {
            r[i] = __ldg(reinterpret_cast<const float4*>(src + (size_t)row * K + k));
        } else {
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = (row < rows && k + j < ke) ? __ldg(src + (size_t)row * K + k + j) : 0.0f;
            r[i] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

__device__ __forceinline__ void tile_store(float (*s)[TBM + TPAD], const float4 (&r)[2]) {
    const int tid = threadIdx.x;
    const int q = tid & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = (tid >> 2) + 64 * i;
        s[4 * q + 0][row] = r[i].x;
        s[4 * q + 1][row] = r[i].y;
        s[4 * q + 2][row] = r[i].z;
        s[4 * q + 3][row] = r[i].w;
    }
}

__device__ __forceinline__ void tile_step(float (&acc)[8][8], const float (*As)[TBM + TPAD],
                                          const float (*Bs)[TBN + TPAD], int kk, int ty, int tx) {
    const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][ty * 4]);
    const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][64 + ty * 4]);
    const float4 b0 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
    const float4 b1 = *reinterpret_cast<const float4*>(&Bs[kk][64 + tx * 4]);
    const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);  // the chain's next k
}

template <bool VEC>
__device__ __forceinline__ void matmul_tiled_body(float* __restrict__ part, const float* __restrict__ x,
                                                  const float* __restrict__ w, int M, int K, int N, Segs segs) {
    __shared__ __align__(16) float As[2][TBK][TBM + TPAD];
    __shared__ __align__(16) float Bs[2][TBK][TBN + TPAD];
    const int s = blockIdx.z;
    const int kb = segs.b[s], ke = segs.b[s + 1];
    const int m0 = blockIdx.y * TBM, n0 = blockIdx.x * TBN;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;  // every chain starts from +0

    const int ntiles = (ke - kb + TBK - 1) / TBK;
    float4 ra[2], rb[2];
    if (ntiles > 0) {
        tile_load<VEC>(ra, x, M, K, m0, kb, ke);
        tile_load<VEC>(rb, w, N, K, n0, kb, ke);
        tile_store(As[0], ra);
        tile_store(Bs[0], rb);
    }
    __syncthreads();
    for (int t = 0; t < ntiles; t++) {
        const int cur = t & 1;
        const int k0 = kb + t * TBK;
        if (t + 1 < ntiles) {  // prefetch the next K tile into registers while this one is used
            tile_load<VEC>(ra, x, M, K, m0, k0 + TBK, ke);
            tile_load<VEC>(rb, w, N, K, n0, k0 + TBK, ke);
        }
        const int kn = min(TBK, ke - k0);
        if (kn == TBK) {
#pragma unroll
            for (int kk = 0; kk < TBK; kk++) tile_step(acc, As[cur], Bs[cur], kk, ty, tx);
        } else {
            // The segment's last, partial tile: stop at its end instead of adding zero products, so a chain
            // is exactly the Go chain even for signed zeros.
            for (int kk = 0; kk < kn; kk++) tile_step(acc, As[cur], Bs[cur], kk, ty, tx);
        }
        if (t + 1 < ntiles) {
            tile_store(As[cur ^ 1], ra);
            tile_store(Bs[cur ^ 1], rb);
        }
        __syncthreads();
    }

    float* p = part + (size_t)s * M * N;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int m = m0 + ty * 4 + (i & 3) + (i >> 2) * 64;
        if (m >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + tx * 4 + h * 64;
            if (VEC && n + 3 < N) {
                *reinterpret_cast<float4*>(p + (size_t)m * N + n) =
                    make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (n + j < N) p[(size_t)m * N + n + j] = acc[i][4 * h + j];
            }
        }
    }
}

// VEC: K and every segment start are multiples of 4 (16-byte loads), N too (16-byte stores).
extern "C" __global__ void __launch_bounds__(256) matmul_tiled_vec(float* __restrict__ part, const float* __restrict__ x,
                                                                   const float* __restrict__ w, int M, int K, int N,
                                                                   Segs segs) {
    matmul_tiled_body<true>(part, x, w, M, K, N, segs);
}
extern "C" __global__ void __launch_bounds__(256) matmul_tiled(float* __restrict__ part, const float* __restrict__ x,
                                                               const float* __restrict__ w, int M, int K, int N,
                                                               Segs segs) {
    matmul_tiled_body<false>(part, x, w, M, K, N, segs);
}

// combine_finish: the partials' combination (tree: canonical; left to right: standard), then bias and the
// output rounding: y = tree(p); if bias: y = y ⊕ bias[n]; out = round_dt(y) (§4).
__device__ __forceinline__ float combine_finish(const float (&v)[8], int nseg, int seq, const float* bias, int n,
                                                int dt) {
    float y = seq ? seq8(v, nseg) : tree8(v, nseg);
    if (bias) y = __fadd_rn(y, bias[n]);
    return round_dt(y, dt);
}

// matmul_reduce: out[m,n] = combine_finish(part[0..nseg)[m,n]) for the tiled kernel's partials.
extern "C" __global__ void matmul_reduce(float* __restrict__ out, const float* __restrict__ part,
                                         const float* __restrict__ bias, int M, int N, int nseg, int seq, int dt) {
    const long long count = (long long)M * N;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float v[8];
#pragma unroll
    for (int s = 0; s < 8; s++) v[s] = s < nseg ? part[s * count + i] : 0.0f;
    out[i] = combine_finish(v, nseg, seq, bias, (int)(i % N), dt);
}

// ---------------------------------------------------------------------------------------------------------
// Small M (decode, M ≤ 16): one thread per (output column n, segment s) holds the chains of all M rows; the 8
// segment threads of one n are 8 adjacent lanes, so the tree is three shuffle steps (xor 1, 2, 4), which add
// exactly the pairs of the tree (a+b and b+a are the same bits). Grid ceil(N/ROWS), block ROWS·8 threads.
// w streams once from HBM (16-byte loads, CH floats per thread per step); x's chunk is staged in shared memory.
#define SCH 64

template <int MT, int ROWS, bool VEC>
__device__ __forceinline__ void matmul_small_body(float* __restrict__ out, const float* __restrict__ x,
                                                  const float* __restrict__ w, const float* __restrict__ bias,
                                                  int M, int K, int N, Segs segs, int seq, int dt) {
    __shared__ __align__(16) float xs[MT][8][SCH + 4];  // +4: the 8 segments' rows start in different banks
    const int lane_s = threadIdx.x & 7;
    const int n = blockIdx.x * ROWS + (threadIdx.x >> 3);
    const int nseg = segs.n;
    const bool active = lane_s < nseg && n < N;
    const int kb = lane_s < nseg ? segs.b[lane_s] : 0;
    const int ke = lane_s < nseg ? segs.b[lane_s + 1] : 0;
    int maxlen = 0;
    for (int s = 0; s < nseg; s++) maxlen = max(maxlen, segs.b[s + 1] - segs.b[s]);

    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) acc[m] = 0.0f;  // every chain starts from +0

    const float* wr = w + (size_t)(n < N ? n : 0) * K;
    for (int c0 = 0; c0 < maxlen; c0 += SCH) {
        __syncthreads();
        // stage x[m][b_s + c0 + j] for every m < M, segment s, j < SCH (zeros past the segment: never used)
        for (int e = threadIdx.x; e < MT * 8 * SCH; e += ROWS * 8) {
            const int j = e % SCH, s = (e / SCH) & 7, m = e / (SCH * 8);
            float v = 0.0f;
            if (m < M && s < nseg) {
                const int k = segs.b[s] + c0 + j;
                if (k < segs.b[s + 1]) v = __ldg(x + (size_t)m * K + k);
            }
            xs[m][s][j] = v;
        }
        __syncthreads();
        if (!active) continue;
        const int k0 = kb + c0;
        const int kn = min(SCH, ke - k0);
        if (kn <= 0) continue;
        if (kn == SCH) {
            float wv[SCH];
            if (VEC) {
#pragma unroll
                for (int j = 0; j < SCH; j += 4) {
                    const float4 t = __ldg(reinterpret_cast<const float4*>(wr + k0 + j));
                    wv[j] = t.x, wv[j + 1] = t.y, wv[j + 2] = t.z, wv[j + 3] = t.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < SCH; j++) wv[j] = __ldg(wr + k0 + j);
            }
#pragma unroll
            for (int j = 0; j < SCH; j += 4) {
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const float4 xv = *reinterpret_cast<const float4*>(&xs[m][lane_s][j]);
                    acc[m] = __fmaf_rn(xv.x, wv[j], acc[m]);
                    acc[m] = __fmaf_rn(xv.y, wv[j + 1], acc[m]);
                    acc[m] = __fmaf_rn(xv.z, wv[j + 2], acc[m]);
                    acc[m] = __fmaf_rn(xv.w, wv[j + 3], acc[m]);
                }
            }
        } else {
            for (int j = 0; j < kn; j++) {  // the segment's tail: exactly its remaining k, in order
                const float wj = __ldg(wr + k0 + j);
#pragma unroll
                for (int m = 0; m < MT; m++) acc[m] = __fmaf_rn(xs[m][lane_s][j], wj, acc[m]);
            }
        }
    }
    // lanes 8r..8r+7 hold the partials p0..p7 of column n
#pragma unroll
    for (int m = 0; m < MT; m++) {
        float v = acc[m];
        if (!seq) {
            // the fixed tree: xor 1 adds (p0,p1), xor 2 the pairs, xor 4 the halves
            for (int d = 1; d < nseg; d *= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, d));
        } else {
            // standard: left to right in lane 8r
            const int base = threadIdx.x & ~7 & 31;
            for (int d = 1; d < nseg; d++) {
                const float t = __shfl_sync(0xffffffffu, v, base + d);
                if (lane_s == 0) v = __fadd_rn(v, t);
            }
        }
        acc[m] = v;
    }
    if (lane_s == 0 && n < N) {
        const float b = bias ? bias[n] : 0.0f;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            if (m >= M) continue;
            float y = acc[m];
            if (bias) y = __fadd_rn(y, b);
            out[(size_t)m * N + n] = round_dt(y, dt);
        }
    }
}

#define SMALL(MT, ROWS)                                                                                          \
    extern "C" __global__ void __launch_bounds__(ROWS * 8) matmul_small##MT##_vec(                               \
        float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ w,                        \
        const float* __restrict__ bias, int M, int K, int N, Segs segs, int seq, int dt) {                        \
        matmul_small_body<MT, ROWS, true>(out, x, w, bias, M, K, N, segs, seq, dt);                               \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(ROWS * 8) matmul_small##MT(                                     \
        float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ w,                        \
        const float* __restrict__ bias, int M, int K, int N, Segs segs, int seq, int dt) {                        \
        matmul_small_body<MT, ROWS, false>(out, x, w, bias, M, K, N, segs, seq, dt);                              \
    }
SMALL(1, 16)
SMALL(2, 16)
SMALL(4, 16)
SMALL(8, 32)
SMALL(16, 32)
