// logsoftmax.cu: twin of kernels.LogSoftmaxForward and kernels.LogProbs (docs/arithmetic.md §9), in stages so
// that a vocabulary-sharded run can all-reduce between them (max, then the sum's subtree):
//   ls_max     m[t] = max of the row (NaN if any NaN); the order does not matter for a max (ties are equal
//              bits except ±0, which the finish step maps to +0)
//   ls_sum     S[t] = this rank's G-segment subtree of Σ Exp(x_j ⊖ m) (§3), or one chain (standard)
//   ls_finish  out[t,j] = round_f32(((x_j ⊖ m) ⊕ 0) ⊖ Log(S))
//   logprobs   out[t] = round_f32(((x_tok ⊖ m) ⊕ 0) ⊖ Log(S)) for this rank's targets
// logits is (T, V) with V the local columns.
#include "common.cuh"

#define NEG_INF __uint_as_float(0xFF800000u)

// ls_max: one block of 256 threads per row. zero_fix: map a zero max to +0 now (tp = 1; with tp > 1 the
// caller does it after the AllReduceMax).
extern "C" __global__ void __launch_bounds__(256) ls_max(float* m, const float* __restrict__ x, int T, int V,
                                                         int zero_fix) {
    __shared__ float sv[256];
    __shared__ int sn[256];
    const int t = blockIdx.x;
    const float* row = x + (long long)t * V;
    float mx = NEG_INF;
    int nan = 0;
    for (int j = threadIdx.x; j < V; j += 256) {
        const float v = row[j];
        if (v != v) nan = 1;
        else if (v > mx) mx = v;
    }
    sv[threadIdx.x] = mx;
    sn[threadIdx.x] = nan;
    __syncthreads();
    for (int d = 128; d > 0; d >>= 1) {
        if (threadIdx.x < d) {
            const float o = sv[threadIdx.x + d];
            if (o > sv[threadIdx.x]) sv[threadIdx.x] = o;
            sn[threadIdx.x] |= sn[threadIdx.x + d];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float r = sn[0] ? __uint_as_float(BT_CANONICAL_NAN) : sv[0];
        if (zero_fix && r == 0.0f) r = 0.0f;  // +0
        m[t] = r;
    }
}

// ls_sum: one block of 8 warps per row; warp s runs segment s's chain acc = acc ⊕ Exp(x_j ⊖ m): its lanes
// compute 256 exps at a time into shared memory and lane 0 adds them in ascending j. G segments (1, 2, 4, 8)
// with floor(s·V/G) boundaries, combined by the tree; seq = 1 (standard): one chain over the row.
extern "C" __global__ void __launch_bounds__(256) ls_sum(float* S, const float* __restrict__ x,
                                                         const float* __restrict__ m, int T, int V, int G, int seq) {
    __shared__ float e[8][256];
    __shared__ float part[8];
    const int t = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nseg = seq ? 1 : G;
    const float* row = x + (long long)t * V;
    const float mt = m[t];
    float acc = 0.0f;
    if (warp < nseg) {
        const int b0 = (int)((long long)warp * V / nseg), b1 = (int)((long long)(warp + 1) * V / nseg);
        for (int c = b0; c < b1; c += 256) {
            const int n = min(256, b1 - c);
            for (int jj = lane; jj < n; jj += 32) e[warp][jj] = bt_exp(__fsub_rn(row[c + jj], mt));
            __syncwarp();
            if (lane == 0)
                for (int jj = 0; jj < n; jj++) acc = __fadd_rn(acc, e[warp][jj]);
            __syncwarp();
        }
    }
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float p[8];
#pragma unroll
        for (int s = 0; s < 8; s++) p[s] = part[s];
        S[t] = tree8(p, nseg);
    }
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
