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
#define MODE_FAST_EXP 3   // canonical with the fast-exp fault's exponential (kernels.FastExp)

// fast_exp: the fast-exp fault's approximation, twin of kernels.FastExp (2^(x·log2 e), cubic fraction).
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

// ---------------------------------------------------------------------------------------------------------
// attention_blk: canonical (and fast-exp) attention, one block of 8 warps per (tile of tq query rows, kv head
// g). Its tasks are the tq·grp (query row, head) pairs that read kv head g; warp w owns tasks w, w+8, w+16,
// w+24 and keeps each one's m, l and its lanes' output dims in registers. Each 64-key block of K and V is
// staged in shared memory once for all the block's tasks, and a warp runs its tasks side by side, so each K
// and V value it reads from shared memory serves all of them. Per task and key block, exactly §7:
//   scores: lane L computes keys L and L+32 of the block, each one FMA chain over i ascending;
//   bm: the block's first maximum by a warp reduction over (value, key index) that keeps the larger value
//       and, between equal values, the smaller index: the element a scan with `>` keeps (a NaN counts only
//       as the block's first key, whose NaN the scan can never replace);
//   then alpha, l and acc rescaled, the exps, and l and the lanes' acc chains over the keys in ascending order.
#define ATT_WARPS 8
#define ATT_TPW 4
#define ATT_KB 64

// pv_run: keys 0..n-1 of the block for tasks 0..NT-1: l ⊕= e_j and acc = fma(e_j, v_j, acc), keys in ascending
// order, each V value read once for all the tasks. CHECK: task u takes only its first nu[u] keys (else every
// task takes all n, and the loop has no per-task test).
template <int NT, int DL, bool CHECK>
__device__ __forceinline__ void pv_run(float (&l)[ATT_TPW], float (&acc)[ATT_TPW][DL], const int (&nu)[ATT_TPW],
                                       const float* ew, const float* Vs, int hd, bool exact, int lane, int n) {
#pragma unroll 2
    for (int jj = 0; jj < n; jj++) {
        float vv[DL];
        const float* vr = Vs + jj * hd;
#pragma unroll
        for (int d = 0; d < DL; d++) vv[d] = exact || lane + 32 * d < hd ? vr[lane + 32 * d] : 0.0f;
#pragma unroll
        for (int u = 0; u < NT; u++) {
            if (CHECK && jj >= nu[u]) continue;  // warp-uniform
            const float e = ew[u * ATT_KB + jj];
            l[u] = __fadd_rn(l[u], e);
#pragma unroll
            for (int d = 0; d < DL; d++) acc[u][d] = __fmaf_rn(e, vv[d], acc[u][d]);
        }
    }
}

template <bool FAST, int DL>
__device__ __forceinline__ void attention_blk_body(float* out, const float* __restrict__ q,
                                                   const float* __restrict__ k, const float* __restrict__ v,
                                                   const int* __restrict__ pos, int T, int nh, int nkv, int hd,
                                                   float scale, int dt, int tq) {
    extern __shared__ __align__(16) float sm[];
    const int KS = hd + 4;  // padded key rows: the lanes' 16-byte reads of 32 keys spread over the banks
    float* Ks = sm;                                  // [ATT_KB][KS]
    float* Vs = Ks + ATT_KB * KS;                    // [ATT_KB][hd]
    float* es = Vs + ATT_KB * hd;                    // [ATT_WARPS][ATT_TPW][ATT_KB]
    float* qs = es + ATT_WARPS * ATT_TPW * ATT_KB;   // [ATT_WARPS·ATT_TPW][hd], zero past the tasks
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int grp = nh / nkv, g = blockIdx.y;
    const int t0 = blockIdx.x * tq;
    const int ntask = tq * grp;
    const long long kvStride = (long long)nkv * hd;
    const bool v4 = (hd & 3) == 0;

    int pmax = -1;  // the last key any of the block's queries reads
    for (int i = 0; i < tq; i++)
        if (t0 + i < T) pmax = max(pmax, pos[t0 + i]);
    for (int e = threadIdx.x; e < ATT_WARPS * ATT_TPW * hd; e += blockDim.x) {
        const int task = e / hd, i = e % hd;
        const int t = t0 + task / grp, h = g * grp + task % grp;
        qs[e] = task < ntask && t < T ? q[((long long)t * nh + h) * hd + i] : 0.0f;
    }

    float m[ATT_TPW], l[ATT_TPW], acc[ATT_TPW][DL];
    int P[ATT_TPW];
#pragma unroll
    for (int u = 0; u < ATT_TPW; u++) {
        const int task = warp + ATT_WARPS * u;
        const int t = t0 + task / grp;
        P[u] = task < ntask && t < T ? pos[t] : -1;  // -1: no task
        m[u] = NEG_INF, l[u] = 0.0f;
#pragma unroll
        for (int d = 0; d < DL; d++) acc[u][d] = 0.0f;
    }
    int pw = -1;  // the warp's last key
#pragma unroll
    for (int u = 0; u < ATT_TPW; u++) pw = max(pw, P[u]);
    int nt = 0;  // the warp's tasks: 0..nt-1 (tasks are numbered so that the absent ones come last)
#pragma unroll
    for (int u = 0; u < ATT_TPW; u++) nt += P[u] >= 0;
    float* ew = es + warp * ATT_TPW * ATT_KB;
    const float* qw = qs + warp * hd;  // task u's query at qw + u·ATT_WARPS·hd

    for (int blk = 0; blk <= pmax; blk += ATT_KB) {  // fixed 64-key blocks from position 0
        const int n = min(ATT_KB, pmax + 1 - blk);
        __syncthreads();  // the previous block's keys are no longer read (and, the first time, qs is written)
        if (v4) {  // 4 + 4 loads in flight per thread
            const int q4 = hd / 4, total = n * q4;
            for (int e0 = threadIdx.x; e0 < total; e0 += 4 * 32 * ATT_WARPS) {
                float4 kr[4], vr[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int e = e0 + r * 32 * ATT_WARPS;
                    if (e < total) {
                        const long long off = (long long)(blk + e / q4) * kvStride + (long long)g * hd + 4 * (e % q4);
                        kr[r] = __ldg(reinterpret_cast<const float4*>(k + off));
                        vr[r] = __ldg(reinterpret_cast<const float4*>(v + off));
                    }
                }
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int e = e0 + r * 32 * ATT_WARPS;
                    if (e < total) {
                        const int j = e / q4, i = 4 * (e % q4);
                        *reinterpret_cast<float4*>(Ks + j * KS + i) = kr[r];
                        *reinterpret_cast<float4*>(Vs + j * hd + i) = vr[r];
                    }
                }
            }
        } else {
            for (int e = threadIdx.x; e < n * hd; e += blockDim.x) {
                const int j = e / hd, i = e % hd;
                const long long off = (long long)(blk + j) * kvStride + (long long)g * hd + i;
                Ks[j * KS + i] = __ldg(k + off);
                Vs[j * hd + i] = __ldg(v + off);
            }
        }
        __syncthreads();
        if (pw < blk) continue;  // none of this warp's queries reaches this block (warp-uniform)

        // scores of keys lane and lane+32 for every task (keys past a task's last are computed, never used)
        float s[ATT_TPW][2];
#pragma unroll
        for (int u = 0; u < ATT_TPW; u++) s[u][0] = s[u][1] = 0.0f;
        const float* k0 = Ks + lane * KS;
        const float* k1 = Ks + (lane + 32) * KS;
        if (v4) {
            for (int i = 0; i < hd; i += 4) {
                const float4 ka = *reinterpret_cast<const float4*>(k0 + i);
                const float4 kb = *reinterpret_cast<const float4*>(k1 + i);
#pragma unroll
                for (int u = 0; u < ATT_TPW; u++) {
                    if (u >= nt) break;  // warp-uniform
                    const float4 qq = *reinterpret_cast<const float4*>(qw + u * ATT_WARPS * hd + i);
                    s[u][0] = __fmaf_rn(qq.x, ka.x, s[u][0]);
                    s[u][1] = __fmaf_rn(qq.x, kb.x, s[u][1]);
                    s[u][0] = __fmaf_rn(qq.y, ka.y, s[u][0]);
                    s[u][1] = __fmaf_rn(qq.y, kb.y, s[u][1]);
                    s[u][0] = __fmaf_rn(qq.z, ka.z, s[u][0]);
                    s[u][1] = __fmaf_rn(qq.z, kb.z, s[u][1]);
                    s[u][0] = __fmaf_rn(qq.w, ka.w, s[u][0]);
                    s[u][1] = __fmaf_rn(qq.w, kb.w, s[u][1]);
                }
            }
        } else {
            for (int i = 0; i < hd; i++) {
                const float ka = k0[i], kb = k1[i];
#pragma unroll
                for (int u = 0; u < ATT_TPW; u++) {
                    if (u >= nt) break;  // warp-uniform
                    const float qq = qw[u * ATT_WARPS * hd + i];
                    s[u][0] = __fmaf_rn(qq, ka, s[u][0]);
                    s[u][1] = __fmaf_rn(qq, kb, s[u][1]);
                }
            }
        }

        int nu[ATT_TPW], nmax = 0;
#pragma unroll
        for (int u = 0; u < ATT_TPW; u++) {
            nu[u] = P[u] < blk ? 0 : min(ATT_KB, P[u] + 1 - blk);  // 0: no task, or no key of this block
            nmax = max(nmax, nu[u]);
            if (nu[u] == 0) continue;  // warp-uniform
            s[u][0] = __fmul_rn(s[u][0], scale);
            s[u][1] = __fmul_rn(s[u][1], scale);
            // bm: the first maximum (see above)
            const float s0 = __shfl_sync(0xffffffffu, s[u][0], 0);
            float bv = 0.0f;
            int bi = -1;  // -1: no candidate
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int jj = lane + 32 * c;
                if (jj < nu[u] && s[u][c] == s[u][c] && (bi < 0 || s[u][c] > bv)) bv = s[u][c], bi = jj;
            }
            for (int d = 16; d > 0; d >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, d);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, d);
                if (oi >= 0 && (bi < 0 || ov > bv || (!(bv > ov) && oi < bi))) bv = ov, bi = oi;
            }
            const float bm = (s0 != s0 || bi < 0) ? s0 : bv;
            const float mn = bm > m[u] ? bm : m[u];
            const float alpha = att_exp(__fsub_rn(m[u], mn), FAST);
            l[u] = __fmul_rn(l[u], alpha);
#pragma unroll
            for (int d = 0; d < DL; d++) acc[u][d] = __fmul_rn(acc[u][d], alpha);
#pragma unroll
            for (int c = 0; c < 2; c++)
                if (lane + 32 * c < nu[u]) ew[u * ATT_KB + lane + 32 * c] = att_exp(__fsub_rn(s[u][c], mn), FAST);
            m[u] = mn;
        }
        __syncwarp();
        // l and the output chains, keys in ascending order; each V value read once for all the tasks. When
        // every task of the warp takes all nmax keys (all but the diagonal blocks of a prefill), a loop
        // without per-task checks does the same operations in the same order.
        bool same = true;
#pragma unroll
        for (int u = 0; u < ATT_TPW; u++) same = same && (u >= nt || nu[u] == nmax);
        const bool exact = hd == 32 * DL;
        if (same && nt == 4) {
            pv_run<4, DL, false>(l, acc, nu, ew, Vs, hd, exact, lane, nmax);
        } else if (same && nt == 3) {
            pv_run<3, DL, false>(l, acc, nu, ew, Vs, hd, exact, lane, nmax);
        } else if (same && nt == 2) {
            pv_run<2, DL, false>(l, acc, nu, ew, Vs, hd, exact, lane, nmax);
        } else if (same && nt == 1) {
            pv_run<1, DL, false>(l, acc, nu, ew, Vs, hd, exact, lane, nmax);
        } else {
            pv_run<ATT_TPW, DL, true>(l, acc, nu, ew, Vs, hd, exact, lane, nmax);
        }
        __syncwarp();
    }
#pragma unroll
    for (int u = 0; u < ATT_TPW; u++) {
        if (P[u] < 0) continue;
        const int task = warp + ATT_WARPS * u;
        const int t = t0 + task / grp, h = g * grp + task % grp;
        float* o = out + ((long long)t * nh + h) * hd;
#pragma unroll
        for (int d = 0; d < DL; d++)
            if (lane + 32 * d < hd) o[lane + 32 * d] = round_dt(__fdiv_rn(acc[u][d], l[u]), dt);
    }
}

// attention_blk<DL>[_fast]: DL = output dims per lane (hd ≤ 32·DL).
#define ATT_BLK(DL)                                                                                               \
    extern "C" __global__ void __launch_bounds__(256, 2) attention_blk##DL(                                      \
        float* out, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,         \
        const int* __restrict__ pos, int T, int nh, int nkv, int hd, float scale, int dt, int tq) {               \
        attention_blk_body<false, DL>(out, q, k, v, pos, T, nh, nkv, hd, scale, dt, tq);                          \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256, 2) attention_blk##DL##_fast(                               \
        float* out, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,         \
        const int* __restrict__ pos, int T, int nh, int nkv, int hd, float scale, int dt, int tq) {               \
        attention_blk_body<true, DL>(out, q, k, v, pos, T, nh, nkv, hd, scale, dt, tq);                           \
    }
ATT_BLK(1)
ATT_BLK(2)
ATT_BLK(4)
ATT_BLK(8)
