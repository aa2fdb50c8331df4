// logsoftmax.cu: twin of kernels.LogSoftmaxForward and kernels.LogProbs (docs/arithmetic.md §9), in stages so
// that a vocabulary-sharded run can all-reduce between them (max, then the sum's subtree):
//   ls_max_part, ls_max_fin
//              m[t] = max of the row (NaN if any NaN); the order does not matter for a max (ties are equal
//              bits except ±0, which the finish step maps to +0)
//   ls_sum_seg, ls_tree
//              S[t] = this rank's G-segment subtree of Σ Exp(x_j ⊖ m) (§3), or one chain (standard)
//   ls_finish  out[t,j] = round_f32(((x_j ⊖ m) ⊕ 0) ⊖ Log(S))
//   logprobs   out[t] = round_f32(((x_tok ⊖ m) ⊕ 0) ⊖ Log(S)) for this rank's targets
// logits is (T, V) with V the local columns.
#include "common.cuh"

#define NEG_INF __uint_as_float(0xFF800000u)

// warp_max: every lane gets the warp's max of mx (NaNs excluded) and the OR of the NaN flags.
__device__ __forceinline__ void warp_max(float& mx, int& nan) {
    for (int d = 16; d > 0; d >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, mx, d);
        if (o > mx) mx = o;
        nan |= __shfl_xor_sync(0xffffffffu, nan, d);
    }
}

// ls_max_part: the max of a row, spread over many blocks: block (b, t) takes columns [b·LSC, (b+1)·LSC) of row
// t and writes its max (canonical NaN if any NaN) to pm[t·nb + b]; ls_max_fin combines a row's nb partials.
#define LSC 4096
extern "C" __global__ void __launch_bounds__(256) ls_max_part(float* pm, const float* __restrict__ x, int T, int V) {
    __shared__ float sv[8];
    __shared__ int sn[8];
    const int t = blockIdx.y, b = blockIdx.x;
    const float* row = x + (long long)t * V;
    const int j1 = min(V, (b + 1) * LSC);
    float mx = NEG_INF;
    int nan = 0;
#pragma unroll 4
    for (int j = b * LSC + threadIdx.x; j < j1; j += 256) {
        const float v = __ldg(row + j);
        if (v != v) nan = 1;
        else if (v > mx) mx = v;
    }
    warp_max(mx, nan);
    if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = mx, sn[threadIdx.x >> 5] = nan;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < 8; i++) {
            if (sv[i] > mx) mx = sv[i];
            nan |= sn[i];
        }
        pm[(long long)t * gridDim.x + b] = nan ? __uint_as_float(BT_CANONICAL_NAN) : mx;
    }
}

// ls_max_fin: one warp per row: m[t] = the max of the nb partials, NaN if any is NaN. zero_fix: map a zero
// max to +0 now (tp = 1; with tp > 1 the caller does it after the AllReduceMax).
extern "C" __global__ void ls_max_fin(float* m, const float* __restrict__ pm, int T, int nb, int zero_fix) {
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;
    float mx = NEG_INF;
    int nan = 0;
    for (int b = lane; b < nb; b += 32) {
        const float v = pm[(long long)t * nb + b];
        if (v != v) nan = 1;
        else if (v > mx) mx = v;
    }
    warp_max(mx, nan);
    if (lane == 0) {
        float r = nan ? __uint_as_float(BT_CANONICAL_NAN) : mx;
        if (zero_fix && r == 0.0f) r = 0.0f;  // +0
        m[t] = r;
    }
}

// ls_sum_seg: block (s, t) runs segment s of row t (nseg segments, floor(s·V/nseg) boundaries; standard:
// nseg = 1, the whole row): acc = acc ⊕ Exp(x_j ⊖ m) over j ascending, one chain, in thread 0. The exps are
// computed by warps 1..7 one LSCH-column chunk ahead into the other half of a double buffer, so the chain
// never waits on global memory or on an exp; its partial goes to part[t·nseg + s] (ls_tree adds them).
#define LSCH 1024
extern "C" __global__ void __launch_bounds__(256) ls_sum_seg(float* part, const float* __restrict__ x,
                                                             const float* __restrict__ m, int T, int V, int nseg) {
    __shared__ __align__(16) float e[2][LSCH];
    const int s = blockIdx.x, t = blockIdx.y;
    const float* row = x + (long long)t * V;
    const float mt = m[t];
    const int b0 = (int)((long long)s * V / nseg), b1 = (int)((long long)(s + 1) * V / nseg);
    const int nch = (b1 - b0 + LSCH - 1) / LSCH;
    auto produce = [&](int c, int first, int nthr) {  // chunk c's exps into e[c & 1]
        const int base = b0 + c * LSCH, n = min(LSCH, b1 - base);
        float* dst = e[c & 1];
        for (int jj = (int)threadIdx.x - first; jj < n; jj += nthr) dst[jj] = bt_exp(__fsub_rn(__ldg(row + base + jj), mt));
    };
    if (nch > 0) produce(0, 0, 256);
    __syncthreads();
    float acc = 0.0f;  // the chain starts from +0
    for (int c = 0; c < nch; c++) {
        if (threadIdx.x >= 32) {
            if (c + 1 < nch) produce(c + 1, 32, 224);
        } else if (threadIdx.x == 0) {
            const int n = min(LSCH, b1 - b0 - c * LSCH);
            const float* src = e[c & 1];
            // 8 values a step, the next 8 loaded while these are added (the shared-memory latency is then
            // hidden behind the chain's 8 dependent adds)
            const int n8 = n & ~7;
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
            if (n8 > 0) a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
#pragma unroll 2
            for (int jj = 0; jj < n8; jj += 8) {
                float4 na = a, nb = b;
                if (jj + 8 < n8) {
                    na = *reinterpret_cast<const float4*>(src + jj + 8);
                    nb = *reinterpret_cast<const float4*>(src + jj + 12);
                }
                acc = __fadd_rn(acc, a.x);
                acc = __fadd_rn(acc, a.y);
                acc = __fadd_rn(acc, a.z);
                acc = __fadd_rn(acc, a.w);
                acc = __fadd_rn(acc, b.x);
                acc = __fadd_rn(acc, b.y);
                acc = __fadd_rn(acc, b.z);
                acc = __fadd_rn(acc, b.w);
                a = na, b = nb;
            }
            for (int jj = n8; jj < n; jj++) acc = __fadd_rn(acc, src[jj]);
        }
        __syncthreads();  // chunk c consumed and chunk c+1 produced
    }
    if (threadIdx.x == 0) part[(long long)t * nseg + s] = acc;
}

// ls_tree: S[t] = the tree (§3) over row t's nseg segment partials (nseg = 1: the one chain).
extern "C" __global__ void ls_tree(float* S, const float* __restrict__ part, int T, int nseg) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float p[8];
#pragma unroll
    for (int i = 0; i < 8; i++) p[i] = i < nseg ? part[(long long)t * nseg + i] : 0.0f;
    S[t] = tree8(p, nseg);
}

// ls_finish: out[t, j] = round_f32(((x_j ⊖ m) ⊕ 0) ⊖ lse), lse = Log(S[t]).
extern "C" __global__ void ls_finish(float* out, const float* __restrict__ x, const float* __restrict__ m,
                                     const float* __restrict__ S, int T, int V) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * V) return;
    const int t = (int)(i / V);
    const float lse = bt_log(S[t]);
    const float d = __fadd_rn(__fsub_rn(x[i], m[t]), 0.0f);  // ⊕ 0 turns -0 into +0
    out[i] = round_dt(__fsub_rn(d, lse), DT_F32);
}

// logprobs: out[t] = round_f32(d ⊖ Log(S[t])), d = (x[t, tok−off] ⊖ m) ⊕ 0 when this rank holds the target
// (columns [off, off+V)), else +0 (the caller all-reduces d first when tp > 1: pass finish = 0 to get d).
extern "C" __global__ void logprobs(float* out, const float* __restrict__ x, const int* __restrict__ targets,
                                    const float* __restrict__ m, const float* __restrict__ S, int T, int V, int off,
                                    int finish) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int j = targets[t] - off;
    float d = 0.0f;
    if (j >= 0 && j < V) d = __fadd_rn(__fsub_rn(x[(long long)t * V + j], m[t]), 0.0f);
    out[t] = finish ? round_dt(__fsub_rn(d, bt_log(S[t])), DT_F32) : d;
}
