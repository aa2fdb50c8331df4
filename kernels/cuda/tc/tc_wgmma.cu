// tc_wgmma.cu: the tc matmul for M > 64 through Hopper's warpgroup MMA, wgmma.mma_async.m64nNk16.f32.bf16.bf16
// (sm_90a: built by `make ptx` with -arch=sm_90a), the same order as tc_matmul.cu (docs/arithmetic.md tc.2;
// tc.1: wgmma sums a k-step exactly as mma.sync, measured), the same entry signature, Segs and tc_finish.
// x is (M, K) bf16, w is (N, K) bf16, bias (N) float32 or null, out (M, N) float32, part the split's subtrees.
//
// A block is WGM warpgroups; warpgroup i owns rows 64i…64i+63 of the block's BM = 64·WGM rows and all BN
// columns: one wgmma m64nBNk16 per k-step on its accumulators (A from registers, loaded by ldmatrix from a
// padded row-major tile; B from shared memory in the no-swizzle K-major core-matrix layout that mma_probe.cu
// measured: k-step s at s·BN·16 elements, 8-column group n/8 at 128, k half at 64, column n%8 at 8, k%8).
// Loads: the cp.async pipeline of tc_matmul.cu. Each stage's wgmmas are waited for before the stage is refilled
// (wait_group 0), and ptxas serialises every wgmma here (SASS: a WARPGROUP.DEPBAR after each HGMMA;
// docs/benchmarks.md): tc_tma.cu is the fast path, this one the fallback where TMA cannot load the operands.
#include "tc_common.cuh"

// tile_load_kmajor: the ROWS×BK slice [k0, k0+BK) of rows r0… of src into the K-major core-matrix layout,
// +0 past the rows and past the segment's end hi (VEC: 16-byte chunks, a chunk being one core-matrix row).
template <int ROWS, int BK, int NT, bool VEC>
__device__ __forceinline__ void tile_load_kmajor(uint16_t* __restrict__ s, const uint16_t* __restrict__ src, int rows,
                                                 int K, int r0, int k0, int hi) {
    const int tid = threadIdx.x;
    if constexpr (VEC) {
        constexpr int CH = BK / 8;
#pragma unroll
        for (int c = tid; c < ROWS * CH; c += NT) {
            const int r = c / CH, kc = c % CH, k = k0 + 8 * kc;
            const bool ok = r0 + r < rows && k < hi;
            const uint16_t* p = ok ? src + (size_t)(r0 + r) * K + k : src;
            cp_async16(s + (kc >> 1) * ROWS * 16 + (r >> 3) * 128 + (kc & 1) * 64 + (r & 7) * 8, p, ok ? 16 : 0);
        }
    } else {
        for (int e = tid; e < ROWS * BK; e += NT) {
            const int r = e / BK, kk = e % BK, k = k0 + kk;
            s[(kk >> 4) * ROWS * 16 + (r >> 3) * 128 + ((kk >> 3) & 1) * 64 + (r & 7) * 8 + (kk & 7)] =
                (r0 + r < rows && k < hi) ? src[(size_t)(r0 + r) * K + k] : (uint16_t)0;
        }
    }
}

// wg_desc: the shared-memory matrix descriptor of one k-step's B tile at p (no swizzle): start address >> 4,
// leading byte offset 128 (between the two k halves), stride byte offset 256 (between 8-column groups).
__device__ __forceinline__ uint64_t wg_desc(const uint16_t* p) {
    const uint32_t addr = smem_addr(p);
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}

template <int BN>
__device__ __forceinline__ void wgmma_step(float (&d)[BN / 8][4], const uint32_t (&a)[4], uint64_t desc) {
    if constexpr (BN == 128) {
        wgmma_m64n128(d, a, desc);
    } else {
        static_assert(BN == 64, "wgmma variants: BN 64 or 128");
        wgmma_m64n64(d, a, desc);
    }
}

template <int WGM, int BN, int BK, int STAGES, bool TREE, bool VEC>
__device__ __forceinline__ void tc_wg_body(float* __restrict__ out, float* __restrict__ part,
                                           const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                                           const float* __restrict__ bias, int M, int K, int N, const Segs& segs,
                                           int G, int dt) {
    constexpr int BM = 64 * WGM, NT = 128 * WGM, LDA = BK + 8, NJ = BN / 8;
    TC_SMEM(smem);
    uint16_t* const As = smem;                      // [STAGES][BM][LDA]
    uint16_t* const Bs = smem + STAGES * BM * LDA;  // [STAGES][BK/16][BN·16], core-matrix layout
    __shared__ int sb[9];
    const int nseg = segs.n;
    if (threadIdx.x < 9) sb[threadIdx.x] = segs.b[min((int)threadIdx.x, nseg)];
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wgi = warp >> 2, wq = warp & 3;  // warpgroup, warp within it
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int s0 = blockIdx.z * G, s1 = s0 + G;

    int ls = s0, lk = sb[s0];
    auto skip = [&]() {
        while (ls < s1 && lk >= sb[ls + 1]) {
            ls++;
            if (ls < s1) lk = sb[ls];
        }
    };
    skip();
    auto load = [&](int stage) {
        if (ls < s1) {
            tile_load<BM, BK, LDA, NT, VEC>(As + stage * BM * LDA, x, M, K, m0, lk, sb[ls + 1]);
            tile_load_kmajor<BN, BK, NT, VEC>(Bs + stage * BN * BK, w, N, K, n0, lk, sb[ls + 1]);
            lk += BK;
            skip();
        }
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) load(i);

    float acc[NJ][4];
    float st0[TREE ? NJ : 1][4], st1[TREE ? NJ : 1][4], st2[TREE ? NJ : 1][4];  // the open subtrees (TREE)
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;  // every chain starts from +0
    int stage = 0, lstage = STAGES - 1;
    for (int s = s0; s < s1; s++) {
        const int lo = sb[s], hi = sb[s + 1];
        for (int k0 = lo; k0 < hi; k0 += BK) {
            cp_async_wait<STAGES - 2>();
            fence_proxy_async();  // the stage's shared memory, written by cp.async, read by wgmma's async proxy
            __syncthreads();
            load(lstage);
            lstage = lstage + 1 == STAGES ? 0 : lstage + 1;
            const uint16_t* A = As + stage * BM * LDA + (wgi * 64 + wq * 16) * LDA;
            uint32_t a[BK / 16][4];
#pragma unroll
            for (int j = 0; j < BK / 16; j++)
                if (k0 + 16 * j < hi) ldmatrix_x4(a[j], A + (lane & 15) * LDA + 16 * j + 8 * (lane >> 4));
            fence_operand(acc);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < BK / 16; j++)
                if (k0 + 16 * j < hi)  // the chain's next k-step (none past the segment's end; warpgroup-uniform)
                    wgmma_step<BN>(acc, a[j], wg_desc(Bs + stage * BN * BK + j * BN * 16));
            wgmma_commit();
            wgmma_wait0();
            fence_operand(acc);
            stage = stage + 1 == STAGES ? 0 : stage + 1;
        }
        if constexpr (TREE) {
            tree_push<NJ>(acc, st0, st1, st2, s - s0);
            if (s + 1 < s1) {
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
            }
        }
    }
    cp_async_wait<0>();

    const int g = lane >> 2, q = lane & 3;
    const bool finish = G == nseg;
    float* const dst = finish ? out : part + (size_t)blockIdx.z * M * N;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = m0 + wgi * 64 + wq * 16 + g + 8 * (e >> 1);
            const int col = n0 + 8 * j + 2 * q + (e & 1);
            if (row < M && col < N) {
                dst[(size_t)row * N + col] = tc_out(acc[j][e], finish, bias, col, dt);
            }
        }
}

// The variants (launch.json "tc"): wg128 one chain per block, 128×128 tiles (2 warpgroups, m64n128k16);
// wg64t several segments per block (row-parallel), 128×64 tiles (registers for the open subtrees).
// Entry: tc_mm_<variant>_<chain|tree>[_vec](out, part, x, w, bias, M, K, N, segs, G, dt), as tc_matmul.cu's.
#define TC_WG_ENTRY(NAME, WGM, BN, BK, STAGES, TREE, VEC)                                                           \
    extern "C" __global__ void __launch_bounds__(WGM * 128) NAME(                                                   \
        float* __restrict__ out, float* __restrict__ part, const uint16_t* __restrict__ x,                          \
        const uint16_t* __restrict__ w, const float* __restrict__ bias, int M, int K, int N, Segs segs, int G,      \
        int dt) {                                                                                                   \
        tc_wg_body<WGM, BN, BK, STAGES, TREE, VEC>(out, part, x, w, bias, M, K, N, segs, G, dt);                    \
    }
#define TC_WG_VARIANT(V, WGM, BN, BK, STAGES, TREE, KIND)             \
    TC_WG_ENTRY(tc_mm_##V##_##KIND, WGM, BN, BK, STAGES, TREE, false) \
    TC_WG_ENTRY(tc_mm_##V##_##KIND##_vec, WGM, BN, BK, STAGES, TREE, true)

TC_WG_VARIANT(wg128, 2, 128, 64, 4, false, chain)
TC_WG_VARIANT(wg64t, 2, 64, 64, 4, true, tree)
