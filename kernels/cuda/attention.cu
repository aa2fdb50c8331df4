// attention.cu: twin of kernels.AttentionForward (docs/arithmetic.md §7, §13): causal grouped-query attention
// for one sequence. q is (T, nh·hd); k and v are the caches (S, nkv·hd) at positions 0..S-1; pos is (T), the
// position of each query row; out is (T, nh·hd). Query head h reads kv head h/(nh/nkv).
//
// One warp per (query row, head). A key's score is one FMA chain over i = 0..hd-1 computed by one lane; the
// softmax bookkeeping (block max, l) is a sequential scan that every lane repeats identically; lane L owns the
// output dims i = L, L+32, ... and runs their FMA chains over the keys in ascending order. So the result for a
// query depends only on its position and the cache: prefill, chunked prefill and decode give the same bits.
#include "common.cuh"

#define HD_MAX 256
#define NEG_INF __uint_as_float(0xFF800000u)

#define MODE_CANONICAL 0  // 64-key blocks, online softmax
#define MODE_TWO_PASS 1   // standard prefill: global max, then 128-key tiles
#define MODE_SPLIT_KV 2   // standard decode: 256-key splits merged left to right
#define MODE_FAST_EXP 3   // canonical with the fast-exp fault's exponential (engine.fastExp)

// fast_exp: the fast-exp fault's approximation, twin of engine's fastExp (2^(x·log2 e), cubic fraction).
__device__ __forceinline__ float fast_exp(float x) {
    if (x != x) return x;
    if (x < -87.0f) return 0.0f;
    if (x > 88.0f) return __uint_as_float(0x7F800000u);
    const float t = __fmul_rn(x, 1.442695f);
    const float n = floorf(t);
    const float f = __fsub_rn(t, n);  // [0, 1)
    const float p = __fmaf_rn(__fmaf_rn(__fmaf_rn(0.0790f, f, 0.2249f), f, 0.6963f), f, 1.0f);
    return __fmul_rn(p, __uint_as_float((uint32_t)((int)n + 127) << 23));
}

__device__ __forceinline__ float att_exp(float x, bool fast) { return fast ? fast_exp(x) : bt_exp(x); }

// go_max is Go's built-in max for float32: NaN if either is NaN, +0 over -0, else the larger.
__device__ __forceinline__ float go_max(float a, float b) {
    if (a != a || b != b) return __uint_as_float(BT_CANONICAL_NAN);
    if (a == 0.0f && b == 0.0f) return (__float_as_uint(a) & 0x80000000u) ? b : a;
    return a > b ? a : b;
}

// score: dot(q, k_j) as one FMA chain from +0 over i ascending, times scale.
__device__ __forceinline__ float score(const float* qs, const float* kj, int hd, float scale) {
    float d = 0.0f;
    if ((hd & 3) == 0) {
        for (int i = 0; i < hd; i += 4) {
            const float4 k4 = __ldg(reinterpret_cast<const float4*>(kj + i));
            d = __fmaf_rn(qs[i], k4.x, d);
            d = __fmaf_rn(qs[i + 1], k4.y, d);
            d = __fmaf_rn(qs[i + 2], k4.z, d);
            d = __fmaf_rn(qs[i + 3], k4.w, d);
        }
    } else {
        for (int i = 0; i < hd; i++) d = __fmaf_rn(qs[i], __ldg(kj + i), d);
    }
    return __fmul_rn(d, scale);
}

// Per warp: the query (hd), a block's scores (up to 256) and their exps.
struct WarpSmem {
    float q[HD_MAX];
    float s[256];
    float e[256];
};

// scores_into computes s[jj] for keys j = j0 + jj, jj < n (n ≤ 256), lanes striding over jj.
__device__ __forceinline__ void scores_into(WarpSmem& ws, const float* k, long long kvStride, int g, int hd, int j0,
                                            int n, float scale, int lane) {
    for (int jj = lane; jj < n; jj += 32) ws.s[jj] = score(ws.q, k + (long long)(j0 + jj) * kvStride + g * hd, hd, scale);
    __syncwarp();
}

extern "C" __global__ void __launch_bounds__(128) attention(float* out, const float* __restrict__ q,
                                                            const float* __restrict__ k, const float* __restrict__ v,
                                                            const int* __restrict__ pos, int T, int S, int nh, int nkv,
                                                            int hd, float scale, int mode, int dt) {
    __shared__ WarpSmem smem[4];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long task = (long long)blockIdx.x * 4 + warp;  // t·nh + h
    if (task >= (long long)T * nh) return;
    WarpSmem& ws = smem[warp];
    const int t = (int)(task / nh), h = (int)(task % nh);
    const int g = h / (nh / nkv);
    const long long kvStride = (long long)nkv * hd;
    const int P = pos[t];
    const float* qv = q + task * hd;
    for (int i = lane; i < hd; i += 32) ws.q[i] = qv[i];
    __syncwarp();

    const int U = (hd + 31) / 32;  // dims per lane
    float acc[HD_MAX / 32], part[HD_MAX / 32];
#pragma unroll
    for (int u = 0; u < HD_MAX / 32; u++) acc[u] = 0.0f, part[u] = 0.0f;
    float l = 0.0f;
    const float* vg = v + g * hd;

    if (mode == MODE_CANONICAL || mode == MODE_FAST_EXP) {
        const bool fast = mode == MODE_FAST_EXP;
        float m = NEG_INF;
        for (int blk = 0; blk <= P; blk += 64) {  // fixed 64-key blocks from position 0
            const int n = min(64, P + 1 - blk);
            scores_into(ws, k, kvStride, g, hd, blk, n, scale, lane);
            float bm = ws.s[0];
            for (int jj = 1; jj < n; jj++)
                if (ws.s[jj] > bm) bm = ws.s[jj];
            const float mn = bm > m ? bm : m;
            const float alpha = att_exp(__fsub_rn(m, mn), fast);
            l = __fmul_rn(l, alpha);
#pragma unroll
            for (int u = 0; u < HD_MAX / 32; u++) acc[u] = __fmul_rn(acc[u], alpha);
            for (int jj = lane; jj < n; jj += 32) ws.e[jj] = att_exp(__fsub_rn(ws.s[jj], mn), fast);
            __syncwarp();
            for (int jj = 0; jj < n; jj++) {
                const float e = ws.e[jj];
                l = __fadd_rn(l, e);
                const float* vj = vg + (long long)(blk + jj) * kvStride;
#pragma unroll
                for (int u = 0; u < HD_MAX / 32; u++)
                    if (u < U && lane + 32 * u < hd) acc[u] = __fmaf_rn(e, vj[lane + 32 * u], acc[u]);
            }
            __syncwarp();
            m = mn;
        }
    } else if (mode == MODE_TWO_PASS) {
        float m = NEG_INF;  // pass 1: the global max, scanned in ascending key order
        for (int j0 = 0; j0 <= P; j0 += 256) {
            const int n = min(256, P + 1 - j0);
            scores_into(ws, k, kvStride, g, hd, j0, n, scale, lane);
            for (int jj = 0; jj < n; jj++)
                if (ws.s[jj] > m) m = ws.s[jj];
            __syncwarp();
        }
        for (int blk = 0; blk <= P; blk += 128) {  // pass 2: 128-key tiles, each summed then added
            const int n = min(128, P + 1 - blk);
            scores_into(ws, k, kvStride, g, hd, blk, n, scale, lane);  // the same bits as in pass 1
            for (int jj = lane; jj < n; jj += 32) ws.e[jj] = bt_exp(__fsub_rn(ws.s[jj], m));
            __syncwarp();
            float lt = 0.0f;
#pragma unroll
            for (int u = 0; u < HD_MAX / 32; u++) part[u] = 0.0f;
            for (int jj = 0; jj < n; jj++) {
                const float e = ws.e[jj];
                lt = __fadd_rn(lt, e);
                const float* vj = vg + (long long)(blk + jj) * kvStride;
#pragma unroll
                for (int u = 0; u < HD_MAX / 32; u++)
                    if (u < U && lane + 32 * u < hd) part[u] = __fmaf_rn(e, vj[lane + 32 * u], part[u]);
            }
            __syncwarp();
            l = __fadd_rn(l, lt);
#pragma unroll
            for (int u = 0; u < HD_MAX / 32; u++) acc[u] = __fadd_rn(acc[u], part[u]);
        }
    } else {  // MODE_SPLIT_KV
        float m = NEG_INF;
        for (int blk = 0; blk <= P; blk += 256) {
            const int n = min(256, P + 1 - blk);
            scores_into(ws, k, kvStride, g, hd, blk, n, scale, lane);
            float sm = NEG_INF;
            for (int jj = 0; jj < n; jj++)
                if (ws.s[jj] > sm) sm = ws.s[jj];
            for (int jj = lane; jj < n; jj += 32) ws.e[jj] = bt_exp(__fsub_rn(ws.s[jj], sm));
            __syncwarp();
            float ls = 0.0f;
#pragma unroll
            for (int u = 0; u < HD_MAX / 32; u++) part[u] = 0.0f;
            for (int jj = 0; jj < n; jj++) {
                const float e = ws.e[jj];
                ls = __fadd_rn(ls, e);
                const float* vj = vg + (long long)(blk + jj) * kvStride;
#pragma unroll
                for (int u = 0; u < HD_MAX / 32; u++)
                    if (u < U && lane + 32 * u < hd) part[u] = __fmaf_rn(e, vj[lane + 32 * u], part[u]);
            }
            __syncwarp();
            const float mn = go_max(m, sm);
            const float a = bt_exp(__fsub_rn(m, mn));
            const float b = bt_exp(__fsub_rn(sm, mn));
            l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(ls, b));
#pragma unroll
            for (int u = 0; u < HD_MAX / 32; u++) acc[u] = __fadd_rn(__fmul_rn(acc[u], a), __fmul_rn(part[u], b));
            m = mn;
        }
    }
    float* o = out + task * hd;
#pragma unroll
    for (int u = 0; u < HD_MAX / 32; u++)
        if (u < U && lane + 32 * u < hd) o[lane + 32 * u] = round_dt(__fdiv_rn(acc[u], l), dt);
}
