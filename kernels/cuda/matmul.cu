// matmul.cu: twin of kernels.MatmulForward and kernels.MatmulPartial (docs/arithmetic.md, "Matmul").
// x is (M, K), w is (N, K), out is (M, N): out = x·wᵀ in float32, not rounded.
//
// Canonical order: K is cut into fixed segments (Segs, computed on the host by kernels.MatmulBounds or
// kernels.PartialBounds, the Go reference's own functions); each output's segment partial is ONE sequential
// FMA chain over its k in ascending order, starting from +0; the partials are then added in a fixed pairwise
// tree. So the kernels parallelise across outputs and segments only, never inside a segment's chain, and the
// order never depends on M, the tile or the launch.
#include "weights.cuh"

// Weight loads. Every kernel here is instantiated for float32 weights, for bf16 weights (the _bf16w entries:
// w holds the bf16 bits of the checkpoint, as the host mapped them) and for f16 weights (the _f16w entries, the
// IEEE half bits). A 16-bit weight is widened exactly as it is loaded (bf16: its bits are the top half of the
// float32; f16: cvt.f32.f16, widen_f16), so the chains see the same values as with float32 weights and the
// results are the same bits; x, bias and out are float32 either way.
// (wld4 and wld1, the loads for each weight type, are in weights.cuh: rmsnorm.cu reads weights too.)

// ---------------------------------------------------------------------------------------------------------
// Large M: BM×128 output tiles (BM = 128 or 64), 16-deep K tiles double-buffered in shared memory, (BM/16)×8
// outputs per thread, 256 threads. Grid (ceil(N/128), ceil(M/BM), nseg/G): block z runs the G segments
// z·G … z·G+G-1 one after the other (the K-tile pipeline runs on across a segment's end) and adds their
// partials in the tree's own order as each segment ends, holding the subtrees still open in a thread-private
// stack in global memory (at most log2 G of them: written and read back by the same thread, through L2).
//   G = nseg: the block finishes the tree and writes round(tree + bias) itself: no second kernel.
//   G < nseg: the block writes the subtree of its G segments to part[z]; matmul_reduce adds the nseg/G
//             subtrees (the tree's upper levels) and finishes.
// Either way every output is the same tree of the same chains: G, BM and the grid change speed only.
#define TBN 128
#define TBK 16
#define TPAD 4

// tile_load: the ROWS×16 block of src (rows r0…, k0…k0+15) into registers, 16-byte loads; past the rows or the
// segment's end ke it is zero (those values are loaded but never used in a chain: see the partial tile below).
// With VEC and every row of the tile inside the matrix (full, the same for the whole block), a quad is either
// wholly inside the segment or wholly past it, so the load needs no branch.
template <int ROWS, bool VEC, typename T>
__device__ __forceinline__ void tile_load(float4 (&r)[ROWS / 64], const T* __restrict__ src, int rows, int K,
                                          int r0, int k0, int ke, bool full) {
    const int tid = threadIdx.x;
    const int q = tid & 3;  // which 4 of the 16 k
#pragma unroll
    for (int i = 0; i < ROWS / 64; i++) {
        const int row = r0 + (tid >> 2) + 64 * i;
        const int k = k0 + 4 * q;
        if (VEC && full) {
            r[i] = k < ke ? wld4(src + (size_t)row * K + k) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else if (VEC && row < rows && k + 3 < ke) {
            r[i] = wld4(src + (size_t)row * K + k);
        } else {
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = (row < rows && k + j < ke) ? wld1(src + (size_t)row * K + k + j) : 0.0f;
            r[i] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

// tile_store: registers to shared memory, transposed to [k][row].
template <int ROWS>
__device__ __forceinline__ void tile_store(float (*s)[ROWS + TPAD], const float4 (&r)[ROWS / 64]) {
    const int tid = threadIdx.x;
    const int q = tid & 3;
#pragma unroll
    for (int i = 0; i < ROWS / 64; i++) {
        const int row = (tid >> 2) + 64 * i;
        s[4 * q + 0][row] = r[i].x;
        s[4 * q + 1][row] = r[i].y;
        s[4 * q + 2][row] = r[i].z;
        s[4 * q + 3][row] = r[i].w;
    }
}

// frag_load: row kk of both tiles, the values this thread's chains need: rows ty·4+(i&3)+64·(i>>2), columns
// tx·4+(j&3)+64·(j>>2). frag_fma: the next k of every chain the thread holds.
template <int RM>
__device__ __forceinline__ void frag_load(float (&a)[RM], float (&b)[8], const float (*As)[RM * 16 + TPAD],
                                          const float (*Bs)[TBN + TPAD], int kk, int ty, int tx) {
#pragma unroll
    for (int h = 0; h < RM / 4; h++) {
        const float4 t = *reinterpret_cast<const float4*>(&As[kk][64 * h + ty * 4]);
        a[4 * h] = t.x, a[4 * h + 1] = t.y, a[4 * h + 2] = t.z, a[4 * h + 3] = t.w;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float4 t = *reinterpret_cast<const float4*>(&Bs[kk][64 * h + tx * 4]);
        b[4 * h] = t.x, b[4 * h + 1] = t.y, b[4 * h + 2] = t.z, b[4 * h + 3] = t.w;
    }
}

template <int RM>
__device__ __forceinline__ void frag_fma(float (&acc)[RM][8], const float (&a)[RM], const float (&b)[8]) {
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);  // the chain's next k
}

template <int BM, bool VEC, typename WT>
__device__ __forceinline__ void matmul_tiled_body(float* __restrict__ out, float* __restrict__ part,
                                                  float* __restrict__ stack, const float* __restrict__ x,
                                                  const WT* __restrict__ w, const float* __restrict__ bias, int M,
                                                  int K, int N, Segs segs, int G, int seq, int dt) {
    constexpr int RM = BM / 16;  // rows per thread
    constexpr int Q = RM * 2;    // float4s per thread
    __shared__ __align__(16) float As[2][TBK][BM + TPAD];
    __shared__ __align__(16) float Bs[2][TBK][TBN + TPAD];
    __shared__ int sb[9];
    const int nseg = segs.n;
    if (threadIdx.x < 9) sb[threadIdx.x] = segs.b[min((int)threadIdx.x, nseg)];
    __syncthreads();

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * TBN;
    const bool fullA = m0 + BM <= M, fullB = n0 + TBN <= N;
    const int s0 = blockIdx.z * G, s1 = s0 + G;
    const int nslots = 31 - __clz(G);  // log2 G
    const size_t blk = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    float4* const my = reinterpret_cast<float4*>(stack) + blk * nslots * (Q * 256) + threadIdx.x;  // slot h: my + h·Q·256

    float acc[RM][8];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;  // every chain starts from +0

    auto nonempty = [&](int s) {  // the first segment from s on with at least one k (s1 if none)
        while (s < s1 && sb[s + 1] <= sb[s]) s++;
        return s;
    };
    float4 ra[BM / 64], rb[2];
    {
        const int s = nonempty(s0);
        if (s < s1) {
            tile_load<BM, VEC, float>(ra, x, M, K, m0, sb[s], sb[s + 1], fullA);
            tile_load<TBN, VEC, WT>(rb, w, N, K, n0, sb[s], sb[s + 1], fullB);
            tile_store<BM>(As[0], ra);
            tile_store<TBN>(Bs[0], rb);
        }
    }
    __syncthreads();

    int cur = 0;
    for (int s = s0; s < s1; s++) {
        const int kb = sb[s], ke = sb[s + 1];
        const int nt = (ke - kb + TBK - 1) / TBK;
        for (int t = 0; t < nt; t++) {
            const int k0 = kb + t * TBK;
            int nk0 = k0 + TBK, nke = ke;  // the next K tile: this segment's next, or the next segment's first
            bool more = t + 1 < nt;
            if (!more) {
                const int ns = nonempty(s + 1);
                more = ns < s1;
                if (more) nk0 = sb[ns], nke = sb[ns + 1];
            }
            if (more) {  // in flight while this tile is used
                tile_load<BM, VEC, float>(ra, x, M, K, m0, nk0, nke, fullA);
                tile_load<TBN, VEC, WT>(rb, w, N, K, n0, nk0, nke, fullB);
            }
            const int kn = min(TBK, ke - k0);
            if (kn == TBK) {  // row kk+1's values are loaded while row kk's are multiplied
                float a[2][RM], b[2][8];
                frag_load<RM>(a[0], b[0], As[cur], Bs[cur], 0, ty, tx);
#pragma unroll
                for (int kk = 0; kk < TBK; kk++) {
                    if (kk + 1 < TBK) frag_load<RM>(a[(kk + 1) & 1], b[(kk + 1) & 1], As[cur], Bs[cur], kk + 1, ty, tx);
                    frag_fma<RM>(acc, a[kk & 1], b[kk & 1]);
                }
            } else {
                // The segment's last, partial tile: stop at its end instead of adding zero products, so a chain
                // is exactly the Go chain even for signed zeros.
                for (int kk = 0; kk < kn; kk++) {
                    float a[RM], b[8];
                    frag_load<RM>(a, b, As[cur], Bs[cur], kk, ty, tx);
                    frag_fma<RM>(acc, a, b);
                }
            }
            if (more) {
                tile_store<BM>(As[cur ^ 1], ra);
                tile_store<TBN>(Bs[cur ^ 1], rb);
            }
            __syncthreads();
            cur ^= 1;
        }

        // Segment s is done: acc holds its partials. Leaf l of the block's subtree: the canonical tree closes
        // the subtrees a binary counter closes (trailing ones of l), each as left ⊕ right with the older, left
        // one from the stack; standard (seq) keeps one running left-to-right sum.
        const int l = s - s0;
        int h = seq ? (l > 0) : __popc(l);        // stack height
        const int closes = seq ? h : __ffs(~l) - 1;
        for (int c = 0; c < closes; c++) {
            h--;
            const float4* p = my + h * (Q * 256);
#pragma unroll
            for (int e = 0; e < Q; e++) {
                const float4 v = __ldcg(p + e * 256);  // this thread's own store, from L2
                const int i = e >> 1, j = 4 * (e & 1);
                acc[i][j] = __fadd_rn(v.x, acc[i][j]);
                acc[i][j + 1] = __fadd_rn(v.y, acc[i][j + 1]);
                acc[i][j + 2] = __fadd_rn(v.z, acc[i][j + 2]);
                acc[i][j + 3] = __fadd_rn(v.w, acc[i][j + 3]);
            }
        }
        if (l < G - 1) {
            float4* p = my + h * (Q * 256);
#pragma unroll
            for (int e = 0; e < Q; e++) {
                const int i = e >> 1, j = 4 * (e & 1);
                __stcg(p + e * 256, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
                acc[i][j] = acc[i][j + 1] = acc[i][j + 2] = acc[i][j + 3] = 0.0f;
            }
        }
    }

    // acc holds the subtree of segments s0…s1-1: the whole tree when G = nseg.
    const bool finish = G == nseg;
    float* const dst = finish ? out : part + (size_t)blockIdx.z * M * N;
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int m = m0 + ty * 4 + (i & 3) + (i >> 2) * 64;
        if (m >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + tx * 4 + h * 64;
            float y[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                y[j] = acc[i][4 * h + j];
                if (finish) {
                    if (bias && n + j < N) y[j] = __fadd_rn(y[j], bias[n + j]);
                    y[j] = round_dt(y[j], dt);
                }
            }
            if (VEC && n + 3 < N) {
                *reinterpret_cast<float4*>(dst + (size_t)m * N + n) = make_float4(y[0], y[1], y[2], y[3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (n + j < N) dst[(size_t)m * N + n + j] = y[j];
            }
        }
    }
}

// matmul_t<BM>[_vec]: two blocks per SM (at most 128 registers a thread: 1 block of 160 registers measured
// 12 % slower); _vec: K, N and every segment start are multiples of 4 (16-byte loads and stores).
#define TILED1(BM, NAME, VEC, WT)                                                                                \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(                                                   \
        float* out, float* part, float* stack, const float* __restrict__ x, const WT* __restrict__ w,             \
        const float* __restrict__ bias, int M, int K, int N, Segs segs, int G, int seq, int dt) {                 \
        matmul_tiled_body<BM, VEC, WT>(out, part, stack, x, w, bias, M, K, N, segs, G, seq, dt);                  \
    }
#define TILED(BM, NAME)                                                                                          \
    TILED1(BM, NAME##_vec, true, float) TILED1(BM, NAME, false, float)                                           \
    TILED1(BM, NAME##_vec_bf16w, true, unsigned short) TILED1(BM, NAME##_bf16w, false, unsigned short)           \
    TILED1(BM, NAME##_vec_f16w, true, f16bits) TILED1(BM, NAME##_f16w, false, f16bits)
TILED(128, matmul_t128)
TILED(64, matmul_t64)

// combine_finish: the partials' combination (tree: canonical; left to right: standard), then bias and the
// output rounding: y = tree(p); if bias: y = y ⊕ bias[n]; out = round_dt(y) (§4).
__device__ __forceinline__ float combine_finish(const float (&v)[8], int nseg, int seq, const float* bias, int n,
                                                int dt) {
    float y = seq ? seq8(v, nseg) : tree8(v, nseg);
    if (bias) y = __fadd_rn(y, bias[n]);
    return round_dt(y, dt);
}

// matmul_reduce: out[m,n] = combine_finish(part[0..nparts)[m,n]): the tree's levels above the tiled kernel's
// subtrees (nparts = nseg/G; for the standard profile G is 1 or nseg, so left to right stays left to right).
extern "C" __global__ void matmul_reduce(float* __restrict__ out, const float* __restrict__ part,
                                         const float* __restrict__ bias, int M, int N, int nparts, int seq, int dt) {
    const long long count = (long long)M * N;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float v[8];
#pragma unroll
    for (int s = 0; s < 8; s++) v[s] = s < nparts ? part[s * count + i] : 0.0f;
    out[i] = combine_finish(v, nparts, seq, bias, (int)(i % N), dt);
}

// ---------------------------------------------------------------------------------------------------------
// Small M, unaligned (M ≤ 16 where K or a segment start is not a multiple of 4, so matmul_dec cannot run): one
// thread per (output column n, segment s) holds the chains of all M rows; the 8 segment threads of one n are 8
// adjacent lanes, so the tree is three shuffle steps (xor 1, 2, 4), which add exactly the pairs of the tree
// (a+b and b+a are the same bits). Grid ceil(N/ROWS), block ROWS·8 threads. No shared memory and no block
// barrier: each thread reads its own slice of w and x through L1.
template <int MT, int ROWS, typename WT>
__device__ __forceinline__ void matmul_small_body(float* __restrict__ out, const float* __restrict__ x,
                                                  const WT* __restrict__ w, const float* __restrict__ bias,
                                                  int M, int K, int N, Segs segs, int seq, int dt) {
    const int lane_s = threadIdx.x & 7;
    const int n = blockIdx.x * ROWS + (threadIdx.x >> 3);
    const int nseg = segs.n;
    const bool active = lane_s < nseg && n < N;

    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) acc[m] = 0.0f;  // every chain starts from +0

    if (active) {
        const int kb = segs.b[lane_s], ke = segs.b[lane_s + 1];
        const WT* wr = w + (size_t)n * K;
        for (int k = kb; k < ke; k++) {  // exactly the segment's k, in order
            const float wk = wld1(wr + k);
#pragma unroll
            for (int m = 0; m < MT; m++)
                if (m < M) acc[m] = __fmaf_rn(__ldg(x + (size_t)m * K + k), wk, acc[m]);
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

#define SMALL1(MT, ROWS, NAME, WT)                                                                               \
    extern "C" __global__ void __launch_bounds__(ROWS * 8) NAME(                                                 \
        float* __restrict__ out, const float* __restrict__ x, const WT* __restrict__ w,                           \
        const float* __restrict__ bias, int M, int K, int N, Segs segs, int seq, int dt) {                        \
        matmul_small_body<MT, ROWS, WT>(out, x, w, bias, M, K, N, segs, seq, dt);                                 \
    }
#define SMALL(MT, ROWS)                                                                                          \
    SMALL1(MT, ROWS, matmul_small##MT, float) SMALL1(MT, ROWS, matmul_small##MT##_bf16w, unsigned short)         \
    SMALL1(MT, ROWS, matmul_small##MT##_f16w, f16bits)
SMALL(1, 8)
SMALL(2, 8)
SMALL(4, 8)
SMALL(8, 8)
SMALL(16, 8)

// ---------------------------------------------------------------------------------------------------------
// Decode, v4 (M ≤ 32, K and every segment start multiples of 4): one block per 32 output columns, one warp per
// segment, one lane per column. Each lane runs the M chains of its (column, segment) over ascending k. Both w
// and x are streamed through shared memory by cp.async, ST chunks deep: w as CH-float spans of each (column,
// segment) row (CH = 64: 256 contiguous bytes per row, so HBM sees long runs), x as the matching CH-float
// spans of its M rows, read by the whole warp at one address (broadcast). No load sits in an FMA chain's
// critical path. The 8 partials of a column meet in shared memory for the tree.
// (v3 read x straight from global memory and used 32-float spans: 37 µs at M = 1, 105 µs at M = 16.)

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Shared memory of one stage: w [8][32][CH+4] then x [8][MT][CH] floats.
template <int MT, int CH>
struct DecStage {
    static constexpr int ROW = CH + 4;  // padded: the lanes' 16-byte reads fall in distinct banks
    static constexpr int W = 8 * 32 * ROW;
    static constexpr int X = 8 * MT * CH;
    static constexpr int FLOATS = W + X;
};

template <int MT, int CH, int ST, typename WT>
__device__ __forceinline__ void matmul_dec_body(float* __restrict__ out, const float* __restrict__ x,
                                                const WT* __restrict__ w, const float* __restrict__ bias, int M,
                                                int K, int N, Segs segs, int seq, int dt) {
    using L = DecStage<MT, CH>;
    extern __shared__ __align__(16) float dsm[];  // [ST] stages, reused as part[8][MT][32] at the end
    __shared__ int sb[9];
    const int seg = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = blockIdx.x * 32;
    const int nseg = segs.n;
    if (threadIdx.x < 9) sb[threadIdx.x] = segs.b[min((int)threadIdx.x, nseg)];
    __syncthreads();
    int maxlen = 0;
    for (int s = 0; s < nseg; s++) maxlen = max(maxlen, sb[s + 1] - sb[s]);
    const int nch = (maxlen + CH - 1) / CH;
    constexpr int QR = CH / 4;  // 16-byte quads per span

    auto issue = [&](int c) {
        if (c < nch) {
            float* st = dsm + (c % ST) * L::FLOATS;
            // w: 8 segments × 32 columns × QR quads; consecutive threads take consecutive quads of one span
#pragma unroll
            for (int i = 0; i < QR; i++) {
                const int e = threadIdx.x + 256 * i;
                const int q = e % QR, col = (e / QR) % 32, s = e / (QR * 32);
                const WT* src = w;
                int bytes = 0;
                if (s < nseg && n0 + col < N) {
                    const int k = sb[s] + c * CH + 4 * q;
                    if (k < sb[s + 1]) src = w + (size_t)(n0 + col) * K + k, bytes = 16;
                }
                float* dst = st + (s * 32 + col) * L::ROW + 4 * q;
                if constexpr (sizeof(WT) == 4) {
                    cp_async16(dst, reinterpret_cast<const float*>(src), bytes);  // bytes 0: zero-fill, no read
                } else {
                    // bf16, f16: four weights (8 bytes) loaded and widened by this thread into the same float slots
                    // (a plain store: visible after the __syncthreads that precedes this stage's use)
                    *reinterpret_cast<float4*>(dst) = bytes ? wld4(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
            // x: 8 segments × MT rows × QR quads
            float* xs = st + L::W;
            for (int e = threadIdx.x; e < 8 * MT * QR; e += 256) {
                const int q = e % QR, m = (e / QR) % MT, s = e / (QR * MT);
                const float* src = x;
                int bytes = 0;
                if (s < nseg && m < M) {
                    const int k = sb[s] + c * CH + 4 * q;
                    if (k < sb[s + 1]) src = x + (size_t)m * K + k, bytes = 16;
                }
                cp_async16(xs + (s * MT + m) * CH + 4 * q, src, bytes);
            }
        }
        cp_async_commit();  // an empty group keeps the wait count uniform
    };

    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) acc[m] = 0.0f;  // every chain starts from +0
    const int len = seg < nseg ? sb[seg + 1] - sb[seg] : 0;

#pragma unroll
    for (int c = 0; c < ST - 1; c++) issue(c);
    for (int c = 0; c < nch; c++) {
        cp_async_wait<ST - 2>();
        __syncthreads();  // chunk c landed for everyone; everyone is done with chunk c-1's stage
        issue(c + ST - 1);
        const float* st = dsm + (c % ST) * L::FLOATS;
        const float* wrow = st + (seg * 32 + lane) * L::ROW;
        const float* xs = st + L::W + seg * MT * CH;
        const int kn = min(CH, len - c * CH);
        if (kn == CH) {
#pragma unroll
            for (int j = 0; j < CH; j += 4) {
                const float4 wv = *reinterpret_cast<const float4*>(wrow + j);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    const float4 xv = *reinterpret_cast<const float4*>(xs + m * CH + j);  // same address: broadcast
                    acc[m] = __fmaf_rn(xv.x, wv.x, acc[m]);
                    acc[m] = __fmaf_rn(xv.y, wv.y, acc[m]);
                    acc[m] = __fmaf_rn(xv.z, wv.z, acc[m]);
                    acc[m] = __fmaf_rn(xv.w, wv.w, acc[m]);
                }
            }
        } else {
            for (int j = 0; j < kn; j++) {  // the segment's last chunk: exactly its remaining k, in order
                const float wk = wrow[j];
#pragma unroll
                for (int m = 0; m < MT; m++) acc[m] = __fmaf_rn(xs[m * CH + j], wk, acc[m]);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    // the partials of column n0+lane: part[seg][m][lane]
    float* part = dsm;
#pragma unroll
    for (int m = 0; m < MT; m++) part[(seg * MT + m) * 32 + lane] = acc[m];
    __syncthreads();
    for (int e = threadIdx.x; e < MT * 32; e += 256) {
        const int m = e >> 5, col = e & 31, n = n0 + col;
        if (m >= M || n >= N) continue;
        float v[8];
#pragma unroll
        for (int s = 0; s < 8; s++) v[s] = s < nseg ? part[(s * MT + m) * 32 + col] : 0.0f;
        float y = seq ? seq8(v, nseg) : tree8(v, nseg);
        if (bias) y = __fadd_rn(y, bias[n]);
        out[(size_t)m * N + n] = round_dt(y, dt);
    }
}

// Chunk and depth per M: 64-float spans where the stages fit in 227 KB, else 32.
#define DEC1(MT, CH, ST, NAME, WT)                                                                              \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                                      \
        float* __restrict__ out, const float* __restrict__ x, const WT* __restrict__ w,                           \
        const float* __restrict__ bias, int M, int K, int N, Segs segs, int seq, int dt) {                        \
        matmul_dec_body<MT, CH, ST, WT>(out, x, w, bias, M, K, N, segs, seq, dt);                                 \
    }
#define DEC(MT, CH, ST)                                                                                          \
    DEC1(MT, CH, ST, matmul_dec##MT, float) DEC1(MT, CH, ST, matmul_dec##MT##_bf16w, unsigned short)             \
    DEC1(MT, CH, ST, matmul_dec##MT##_f16w, f16bits)
DEC(1, 64, 3)
DEC(2, 64, 3)
DEC(4, 64, 2)
DEC(8, 32, 3)
DEC(16, 32, 3)
DEC(32, 32, 3)
