// tc_matmul.cu: twin of kernels.MatmulTC and kernels.MatmulTCPartial (docs/arithmetic.md §18, tc.2), on Hopper
// tensor cores through mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80+; sm_90 here).
// x is (M, K) bf16, w is (N, K) bf16 (PyTorch layout, k contiguous), bias (N) float32 or null, out (M, N) float32
// (= round_dt(y), or the unrounded subtree for DT_NONE), part the subtrees of a K-split row-parallel matmul.
//
// The order (tc.2): each output's chain over [lo, hi) is acc = +0, then one k-step per 16 consecutive k from lo
// (positions ≥ hi are +0 in BOTH operands), in ascending order, each k-step one mma (the MMA sums its 16 products
// and acc as tc.1 says; kernels.MMABF16Dot16 is the same step on the CPU). The chains' ranges are Segs, computed
// on the host by kernels.TCBounds / kernels.TCPartialBounds: one range [0, K) for a column-parallel matmul,
// never split; the 8 segments of §3 for a row-parallel one, added by the fixed tree (float32 RN, __fadd_rn).
// A block owns a BM×BN output tile and G consecutive segments (grid z = nseg/G): it runs their chains one after
// the other, adds the finished segment partials in the tree's order as they end (the open subtrees in
// registers: st0, st1, st2), and either finishes (G = nseg: bias, round_dt) or writes its subtree to part[z]
// for tc_finish (the tree's upper levels). Rows of a tile are independent dot products: the tile shape, the
// padded rows (zero-filled, their outputs never stored) and G change speed only, never a bit.
//
// Built by `make ptx` (committed beside it: tc_matmul.ptx, tc/MANIFEST.sha256; scripts/gpu.sh tc); the Go launcher
// (kernels/cuda/tc.go) uses these entries only when the loaded PTX has them. tc_wgmma.cu is the wgmma path for
// M > 64 beside it, tc_tma.cu the TMA + warp-specialised one (tensor maps instead of x and w, the same Segs); a
// Blackwell (tcgen05) path is another file.
#include "tc_common.cuh"

// tc_body: one BM×BN tile, WM×WN warps, each warp (16·MI)×(8·NI) outputs as MI×NI m16n8 fragments; K streamed
// in BK-wide stages (BK/16 k-steps each) through a STAGES-deep cp.async pipeline. TREE: the block runs G > 1
// segments and adds them by tree_push; otherwise G = 1 (one chain: column-parallel, or one segment per block).
template <int WM, int WN, int MI, int NI, int BK, int STAGES, bool TREE, bool VEC>
__device__ __forceinline__ void tc_body(float* __restrict__ out, float* __restrict__ part, const uint16_t* __restrict__ x,
                                        const uint16_t* __restrict__ w, const float* __restrict__ bias, int M, int K,
                                        int N, const Segs& segs, int G, int dt) {
    constexpr int BM = WM * 16 * MI, BN = WN * 8 * NI, NT = WM * WN * 32;
    constexpr int LD = BK + 8;  // row stride in shared memory (elements): 16-byte rows, ldmatrix without bank conflicts
    constexpr int NF = MI * NI;  // m16n8 fragments per warp
    TC_SMEM(smem);
    uint16_t* const As = smem;                     // [STAGES][BM][LD]
    uint16_t* const Bs = smem + STAGES * BM * LD;  // [STAGES][BN][LD]
    __shared__ int sb[9];
    const int nseg = segs.n;
    if (threadIdx.x < 9) sb[threadIdx.x] = segs.b[min((int)threadIdx.x, nseg)];
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int s0 = blockIdx.z * G, s1 = s0 + G;

    // the producer's cursor over the block's stages: segment ls, stage start lk (empty segments have none)
    int ls = s0, lk = sb[s0];
    auto advance = [&]() {
        lk += BK;
        while (ls < s1 && lk >= sb[ls + 1]) {
            ls++;
            if (ls < s1) lk = sb[ls];
        }
    };
    while (ls < s1 && lk >= sb[ls + 1]) {  // skip leading empty segments
        ls++;
        if (ls < s1) lk = sb[ls];
    }
    auto load = [&](int stage) {
        if (ls < s1) {
            tile_load<BM, BK, LD, NT, VEC>(As + stage * BM * LD, x, M, K, m0, lk, sb[ls + 1]);
            tile_load<BN, BK, LD, NT, VEC>(Bs + stage * BN * LD, w, N, K, n0, lk, sb[ls + 1]);
            advance();
        }
        cp_async_commit();  // one group per stage, empty or not, so that wait_group counts stages
    };
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) load(i);

    float acc[NF][4];
    float st0[TREE ? NF : 1][4], st1[TREE ? NF : 1][4], st2[TREE ? NF : 1][4];  // the open subtrees (TREE)
#pragma unroll
    for (int f = 0; f < NF; f++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;  // every chain starts from +0
    int stage = 0, lstage = STAGES - 1;
    for (int s = s0; s < s1; s++) {
        const int lo = sb[s], hi = sb[s + 1];
        for (int k0 = lo; k0 < hi; k0 += BK) {
            cp_async_wait<STAGES - 2>();
            __syncthreads();  // stage `stage` is in shared memory; stage `lstage` is no longer read
            load(lstage);
            lstage = lstage + 1 == STAGES ? 0 : lstage + 1;
            const uint16_t* A = As + stage * BM * LD + (wm * 16 * MI) * LD;
            const uint16_t* B = Bs + stage * BN * LD + (wn * 8 * NI) * LD;
#pragma unroll
            for (int j = 0; j < BK / 16; j++) {
                if (k0 + 16 * j >= hi) break;  // the chain has no step there (block-uniform)
                uint32_t a[MI][4], b[NI][2];
#pragma unroll
                for (int i = 0; i < MI; i++)  // rows 16i + lane%16, k 16j + 8·(lane/16)
                    ldmatrix_x4(a[i], A + (16 * i + (lane & 15)) * LD + 16 * j + 8 * (lane >> 4));
#pragma unroll
                for (int n = 0; n + 1 < NI; n += 2) {  // columns 8n + lane%8 + 8·(lane/16), k 16j + 8·((lane/8)%2)
                    uint32_t r[4];
                    ldmatrix_x4(r, B + (8 * n + (lane & 7) + 8 * (lane >> 4)) * LD + 16 * j + 8 * ((lane >> 3) & 1));
                    b[n][0] = r[0], b[n][1] = r[1], b[n + 1][0] = r[2], b[n + 1][1] = r[3];
                }
                if (NI & 1) {  // the last (odd) column fragment: lanes 0..15 give its rows
                    uint32_t r[2];
                    ldmatrix_x2(r, B + (8 * (NI - 1) + (lane & 7)) * LD + 16 * j + 8 * ((lane >> 3) & 1));
                    b[NI - 1][0] = r[0], b[NI - 1][1] = r[1];
                }
#pragma unroll
                for (int i = 0; i < MI; i++)
#pragma unroll
                    for (int n = 0; n < NI; n++) mma_bf16(acc[i * NI + n], a[i], b[n]);  // the chain's next k-step
            }
            stage = stage + 1 == STAGES ? 0 : stage + 1;
        }
        if constexpr (TREE) {
            tree_push<NF>(acc, st0, st1, st2, s - s0);
            if (s + 1 < s1) {
#pragma unroll
                for (int f = 0; f < NF; f++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[f][e] = 0.0f;  // the next segment's chain starts from +0
            }
        }
    }
    cp_async_wait<0>();

    // epilogue: fragment (i, n) element e is output (row 16i + g + 8·(e/2), column 8n + 2q + e%2) of the warp's tile
    const int g = lane >> 2, q = lane & 3;
    const bool finish = G == nseg;
    float* const dst = finish ? out : part + (size_t)blockIdx.z * M * N;
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int n = 0; n < NI; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = m0 + wm * 16 * MI + 16 * i + g + 8 * (e >> 1);
                const int col = n0 + wn * 8 * NI + 8 * n + 2 * q + (e & 1);
                if (row < M && col < N) {
                    dst[(size_t)row * N + col] = tc_out(acc[i * NI + n][e], finish, bias, col, dt);
                }
            }
}

// The variants (launch.json "tc"; kernels/cuda/tc.go picks one by M and by G, none changes a bit):
//   dec16  M ≤ 16:  16×32 tiles, 4 warps, BK 128, 6 stages: the weights streamed once, N/32 blocks over the SMs
//   dec64  M ≤ 64:  64×32 tiles, 4 warps, BK 128, 4 stages
//   big    M > 64, one chain per block (column-parallel, or G = 1): 128×128 tiles, 8 warps, BK 32, 4 stages
//   big64  M > 64, G > 1 segments per block (row-parallel): 64×128 tiles (registers for the open subtrees)
// Entry: tc_mm_<variant>_<chain|tree>[_vec](out, part, x, w, bias, M, K, N, segs, G, dt).
#define TC_ENTRY(NAME, WM, WN, MI, NI, BK, STAGES, TREE, VEC)                                                       \
    extern "C" __global__ void __launch_bounds__(WM * WN * 32) NAME(                                                \
        float* __restrict__ out, float* __restrict__ part, const uint16_t* __restrict__ x,                          \
        const uint16_t* __restrict__ w, const float* __restrict__ bias, int M, int K, int N, Segs segs, int G,      \
        int dt) {                                                                                                   \
        tc_body<WM, WN, MI, NI, BK, STAGES, TREE, VEC>(out, part, x, w, bias, M, K, N, segs, G, dt);                \
    }
#define TC_VARIANT(V, WM, WN, MI, NI, BK, STAGES, TREE, KIND)             \
    TC_ENTRY(tc_mm_##V##_##KIND, WM, WN, MI, NI, BK, STAGES, TREE, false) \
    TC_ENTRY(tc_mm_##V##_##KIND##_vec, WM, WN, MI, NI, BK, STAGES, TREE, true)

TC_VARIANT(dec16, 1, 4, 1, 1, 128, 6, false, chain)
TC_VARIANT(dec16, 1, 4, 1, 1, 128, 6, true, tree)
TC_VARIANT(dec64, 1, 4, 4, 1, 128, 4, false, chain)
TC_VARIANT(dec64, 1, 4, 4, 1, 128, 4, true, tree)
TC_VARIANT(big, 2, 4, 4, 4, 32, 4, false, chain)
TC_VARIANT(big64, 2, 4, 2, 4, 32, 4, true, tree)

// tc_finish: out[m,n] = round_dt(T(part[0..nparts)[m,n]) ⊕ bias[n]), T the fixed pairwise tree over the
// nparts = nseg/G subtrees (nparts a power of two ≤ 8): the tree's upper levels, as kernels.TreeSum.
extern "C" __global__ void tc_finish(float* __restrict__ out, const float* __restrict__ part,
                                     const float* __restrict__ bias, int M, int N, int nparts, int dt) {
    const long long count = (long long)M * N;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float v[8];
#pragma unroll
    for (int s = 0; s < 8; s++) v[s] = s < nparts ? part[s * count + i] : 0.0f;
    for (int n = nparts; n > 1; n >>= 1)
#pragma unroll
        for (int s = 0; s < 4; s++)
            if (s < n / 2) v[s] = __fadd_rn(v[2 * s], v[2 * s + 1]);  // adjacent pairs, level by level
    out[i] = tc_out(v[0], true, bias, (int)(i % N), dt);
}
