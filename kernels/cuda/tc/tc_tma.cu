// tc_tma.cu: the tc matmul for M > 64 with TMA loads, an mbarrier pipeline and warp specialisation (sm_90a:
// wgmma, setmaxnreg; built by `make ptx` with -arch=sm_90a). The order is tc_matmul.cu's (docs/arithmetic.md
// tc.2): each output's chain over [lo, hi) is acc = +0, then one k-step per 16 consecutive k from lo, ascending,
// one wgmma m64nBNk16 each (tc.1: wgmma sums a k-step exactly as mma.sync, measured; A from shared memory here);
// row-parallel: the 8 segments of §3 (Segs, from kernels.TCBounds / TCPartialBounds), added by the fixed tree
// (tree_push, float32 RN) as they end; a block runs G consecutive segments (grid z = nseg/G) and finishes
// (bias, round_dt) or writes its subtree to part[z] for tc_finish (tc_matmul.cu).
// x is (M, K) bf16, w is (N, K) bf16 (k contiguous), bias (N) float32 or null, out (M, N) float32.
//
// A block is 3 warpgroups (384 threads): warpgroup 0 is the producer (one thread issues every TMA load),
// warpgroups 1 and 2 the consumers, each owning 64 of the tile's BM = 128 rows and all BN columns. K is streamed
// in BK = 64 stages through STAGES shared-memory slots: x's 128×64 box and w's BN×64 box, each row 128 bytes,
// 128-byte swizzled by the TMA unit (16-byte chunk c of row r at chunk c ^ (r % 8), 1024-byte atoms of 8 rows),
// which is the layout the wgmma descriptors name (layout type 1, stride byte offset 1024; k-step j of a stage
// starts 32·j bytes into each row). Slot s has two mbarriers: full[s] (the producer's arrive.expect_tx, completed
// by the TMA's bytes) and empty[s] (one arrival per consumer warp once the wgmmas reading the slot are done).
// A consumer issues a stage's k-steps (wgmma, one commit group), waits for the previous group only
// (wgmma.wait_group 1: one stage of wgmmas stays in flight while the next stage's wait and issue proceed),
// then frees the previous slot. wgmmas on one accumulator run in issue order, so the chain stays in K order.
//
// The launcher (kernels/cuda/tc.go, planTC) takes this path only when TMA can give the contract's operands:
// K % 8 == 0 (16-byte row strides), x and w 16-byte aligned, and every segment bound but the last a multiple of
// 16. Then a k-step never straddles an interior bound (a stage past a segment's end issues fewer k-steps; what
// the slot holds past hi is never read), and the one that may straddle K reads the TMA's zero fill past the
// matrix in both operands (positions ≥ hi are +0 in BOTH, tc.2). Rows past M and columns past N are zero-filled
// too and their outputs are not stored: the tile shape never changes a bit.
//
// Every mbarrier wait is bounded: after about 10 s of spinning (a pipeline bug, never a slow GPU) the kernel
// traps, so that the launch fails loudly instead of hanging.
#include "tc_common.cuh"

#ifndef BITALIGN_TC_SIM
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// fence_mbar_init: the initialised barriers visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// mbar_arrive_a, mbar_try_wait_a: at a shared address (smem_addr's; ldmatrix_x4_a says why)
__device__ __forceinline__ void mbar_arrive_a(uint32_t a) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(a) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) { mbar_arrive_a(smem_addr(bar)); }
__device__ __forceinline__ bool mbar_try_wait_a(uint32_t a, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(a), "r"(parity)
        : "memory");
    return ok != 0;
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) { return mbar_try_wait_a(smem_addr(bar), parity); }
// tma_load_2d: the box at (c0 = k, c1 = row) of the tensor map into shared memory dst, completing on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, uint64_t* bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
        : "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
__device__ __forceinline__ long long tma_clock() { return clock64(); }

// wgmma_ss_m64n256: d = step(A(adesc), B(bdesc), d) for the warpgroup's 64×256 tile, A and B from shared memory
// (K-major, 128-byte swizzle; scale-d 1: d is the accumulator; no transpose).
__device__ __forceinline__ void wgmma_ss_m64n256(float (&d)[32][4], uint64_t adesc, uint64_t bdesc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
        : "l"(adesc), "l"(bdesc), "r"(1));
}

// wgmma_ss_m64n128: d = step(A(adesc), B(bdesc), d) for the warpgroup's 64×128 tile, A and B from shared memory
// (K-major, 128-byte swizzle; scale-d 1: d is the accumulator; no transpose).
__device__ __forceinline__ void wgmma_ss_m64n128(float (&d)[16][4], uint64_t adesc, uint64_t bdesc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "l"(adesc), "l"(bdesc), "r"(1));
}
#endif  // BITALIGN_TC_SIM

// sw128_desc: the wgmma shared-memory descriptor of a K-major operand at shared address addr whose rows are 128
// bytes, 128-byte swizzled in 1024-byte atoms of 8 rows (as the TMA unit writes them): start address >> 4 (bits
// 0-13), leading byte offset 16 (bits 16-29; not used by a swizzled K-major operand), stride byte offset 1024
// (bits 32-45: from 8 rows to the next 8), base offset 0 (bits 49-51: every slot is 1024-byte aligned), layout
// type 1 = 128-byte swizzle (bits 62-63). k-step j of a 64-wide stage is the same tile at addr + 32·j.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

template <int BN>
__device__ __forceinline__ void wgmma_ss(float (&d)[BN / 8][4], uint64_t a, uint64_t b) {
    if constexpr (BN == 256) {
        wgmma_ss_m64n256(d, a, b);
    } else {
        static_assert(BN == 128, "tc_tma variants: BN 128 or 256");
        wgmma_ss_m64n128(d, a, b);
    }
}

// mbar_wait: until the phase of parity `parity` of bar has completed (try_wait suspends a while in hardware
// between polls); bounded: about 10 s of cycles without completion is a pipeline bug, and the kernel traps, so that
// the launch fails (the launcher's error names the kernel) instead of hanging. No printf: a function call anywhere
// in the kernel makes ptxas serialise every wgmma (C7510, seen with nvcc 13.0).
template <typename Try>
__device__ __forceinline__ void mbar_spin(Try done) {
    if (done()) return;
    const long long t0 = tma_clock();
    while (!done())
        if (tma_clock() - t0 > 20000000000LL) __trap();
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    mbar_spin([&] { return mbar_try_wait(bar, parity); });
}
__device__ __forceinline__ void mbar_wait_a(uint32_t a, uint32_t parity) {
    mbar_spin([&] { return mbar_try_wait_a(a, parity); });
}

// tree_push_s: tree_push (tc_common.cuh), the same additions in the same order, with the second and third open
// subtrees (segments j−1 … j and j−3 … j) in this thread's own shared-memory words st[i·256] and st[(64+i)·256]
// for its i-th value instead of registers (no other thread touches them: no barrier), so that the consumers
// hold a 64×128 accumulator and one open subtree in registers without spilling.
template <int P>
__device__ __forceinline__ void tree_push_s(float (&v)[P][4], float (&st0)[P][4], float* __restrict__ st, int j) {
    static_assert(P * 4 == 64, "tree_push_s: 64 values per thread");
    if (!(j & 1)) return keep(st0, v);
    add_left(v, st0);
#pragma unroll
    for (int lvl = 0; lvl < 2; lvl++) {  // st1, then st2
        float* const sl = st + lvl * 64 * 256;
        if (!(j & (2 << lvl))) {
#pragma unroll
            for (int f = 0; f < P; f++)
#pragma unroll
                for (int e = 0; e < 4; e++) sl[(4 * f + e) * 256] = v[f][e];
            return;
        }
#pragma unroll
        for (int f = 0; f < P; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) v[f][e] = __fadd_rn(sl[(4 * f + e) * 256], v[f][e]);  // the earlier subtree left
    }
}

// TC_TMA_BM, TC_TMA_BK: every tc_tma variant's tile rows (2 consumer warpgroups × 64) and k per stage (one
// 128-byte swizzled row of bf16); TC_TMA_GROUP_N: column tiles per raster group.
#define TC_TMA_BM 128
#define TC_TMA_BK 64
#define TC_TMA_GROUP_N 8

// bf16_pair: the bf16 bits of v0 (low half) and v1 (high half), two round_dt(·, DT_BF16) values: a bf16 value's
// bits are its float32 bits' upper half (NaN 0x7FC00000 included), as fp.F32ToBF16 gives them.
__device__ __forceinline__ uint32_t bf16_pair(float v0, float v1) {
    return (__float_as_uint(v0) >> 16) | (__float_as_uint(v1) & 0xFFFF0000u);
}

// TmaTile: a work item's tile and segments: rows m0…, columns n0…, segments [s0, s1) of the K-split.
struct TmaTile {
    int m0, n0, s0, s1;
};

// tma_tile: the tile of work item t (of the tn·tm tiles) and segment group z (G segments from z·G): column tiles
// in groups of TC_TMA_GROUP_N, within a group the rows fastest, so that a wave of blocks shares both its x rows
// and its w rows through L2 (speed only: tiles are independent, the mapping never changes a bit).
template <int BN>
__device__ __forceinline__ TmaTile tma_tile(int t, int z, int M, int N, int G) {
    const int tn = (N + BN - 1) / BN, tm = (M + TC_TMA_BM - 1) / TC_TMA_BM;
    const int grp = t / (TC_TMA_GROUP_N * tm), nf = grp * TC_TMA_GROUP_N;
    const int gn = min(TC_TMA_GROUP_N, tn - nf), local = t - grp * TC_TMA_GROUP_N * tm;
    return {(local / gn) * TC_TMA_BM, (nf + local % gn) * BN, z * G, z * G + G};
}

// tc_tma_body: BM×BN tiles (the BN×64 and 128×64 boxes per stage), G consecutive segments each.
// PERSIST false: one tile per block, tile blockIdx.x, segment group blockIdx.z (grid: tiles × 1 × nseg/G).
// PERSIST true: a persistent grid (about one block per SM): block b runs work items b, b + gridDim.x, …  of the
// tiles·(nseg/G) items (item i: tile i % tiles, segment group i / tiles), a static schedule; the producer runs on
// into the next item's stages while the consumers store the last one (the slots and their phases continue from
// item to item), so that the next tile's MMAs start on full slots. Each output is still one item's chain or tree,
// computed as with one tile per block: which block runs an item never changes a bit. Its epilogue stores two
// adjacent columns at once (float2 when N is even) and, with ob = 1 (the finished tree, dt = DT_BF16 only), the
// bf16 bits of the rounded value (its upper half: round_dt made it a bf16 value) instead of float32.
// Dynamic shared memory (kernels/cuda/tc.go, tcVariant.smemFor): 1024 bytes of alignment slack, STAGES x slots
// then STAGES w slots, and for TREE without PERSIST the second and third open subtrees (2·BM·BN floats). With
// PERSIST those two live in global memory instead, stash[blockIdx.x] (2·BM·BN floats a block, each thread's own
// words, coalesced: written at most once a segment, read back by the same thread, through L2), so that the tree
// has the shared memory of 6 slots instead of 3.
template <int BN, int STAGES, bool TREE, bool PERSIST>
__device__ __forceinline__ void tc_tma_body(const TmaMap* tx, const TmaMap* tw, void* __restrict__ outv,
                                            float* __restrict__ part, const float* __restrict__ bias, int M, int K,
                                            int N, const Segs& segs, int G, int dt, int ob,
                                            float* __restrict__ stash) {
    constexpr int BM = TC_TMA_BM, BK = TC_TMA_BK, NJ = BN / 8;
    constexpr uint32_t ABYTES = BM * BK * 2, BBYTES = BN * BK * 2;
    static_assert(BK * 2 == 128, "a stage's row is one 128-byte swizzle span");
    TC_SMEM(smem16);
    uint8_t* const raw = reinterpret_cast<uint8_t*>(smem16);
    uint8_t* const base = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);  // 1024-byte atoms: base offset 0
    uint8_t* const As = base;
    uint8_t* const Bs = base + STAGES * ABYTES;
    float* const st2s = PERSIST ? stash + (size_t)blockIdx.x * 2 * BM * BN
                                : reinterpret_cast<float*>(base + STAGES * (ABYTES + BBYTES));
    __shared__ uint64_t full[STAGES], empty[STAGES];  // 8-byte words, as mbarriers need
    __shared__ int sb[9];
    const int nseg = segs.n;
    if (threadIdx.x < 9) sb[threadIdx.x] = segs.b[min((int)threadIdx.x, nseg)];
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);   // the producer's arrive.expect_tx (+ the TMA's bytes)
            mbar_init(&empty[s], 8);  // one arrival per consumer warp
        }
        fence_mbar_init();
    }
    __syncthreads();  // the last block-wide barrier: the roles part here

    // the block's work items (PERSIST: a static schedule over a persistent grid; else the block's one tile)
    const int tiles = ((N + BN - 1) / BN) * ((M + BM - 1) / BM);
    const int nwork = PERSIST ? tiles * (nseg / G) : 1, w0 = PERSIST ? (int)blockIdx.x : 0,
              wstep = PERSIST ? (int)gridDim.x : 1;
    auto item = [&](int wi) {
        return PERSIST ? tma_tile<BN>(wi % tiles, wi / tiles, M, N, G) : tma_tile<BN>(blockIdx.x, blockIdx.z, M, N, G);
    };

    if (threadIdx.x < 128) {  // warpgroup 0: the producer (one role per branch of one if/else: setmaxnreg)
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            int slot = 0;
            uint32_t phase = 0;
            for (int wi = w0; wi < nwork; wi += wstep) {
                const TmaTile tl = item(wi);
                for (int s = tl.s0; s < tl.s1; s++)
                    for (int k0 = sb[s]; k0 < sb[s + 1]; k0 += BK) {  // the consumers' stage sequence, exactly
                        mbar_wait(&empty[slot], phase ^ 1);  // first round: free at once
                        mbar_arrive_expect_tx(&full[slot], ABYTES + BBYTES);  // whole boxes, zero fill included
                        tma_load_2d(As + slot * ABYTES, tx, &full[slot], k0, tl.m0);
                        tma_load_2d(Bs + slot * BBYTES, tw, &full[slot], k0, tl.n0);
                        if (++slot == STAGES) slot = 0, phase ^= 1;
                    }
            }
        }
    } else {  // warpgroups 1, 2: the consumers
        setmaxnreg_inc<232>();
        const int ct = threadIdx.x - 128, cw = ct >> 7, lane = ct & 31, wq = (ct >> 5) & 3;
        float acc[NJ][4];
        float st0[TREE ? NJ : 1][4];  // the first open subtree in registers (TREE; the others in st2s)
        int slot = 0, held = -1;  // held: the slot whose wgmmas may still be in flight
        uint32_t phase = 0;
        const uint32_t aoff = (uint32_t)cw * 64 * 128;  // this warpgroup's 64 rows of the x box (8 atoms)
        for (int wi = w0; wi < nwork; wi += wstep) {
            const TmaTile tl = item(wi);
#pragma unroll
            for (int j = 0; j < NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;  // every chain starts from +0
            for (int s = tl.s0; s < tl.s1; s++) {
                const int lo = sb[s], hi = sb[s + 1];
                for (int k0 = lo; k0 < hi; k0 += BK) {
                    mbar_wait(&full[slot], phase);
                    const uint32_t a = smem_addr(As + slot * ABYTES) + aoff, b = smem_addr(Bs + slot * BBYTES);
                    fence_operand(acc);
                    wgmma_fence();
                    if (k0 + BK <= hi) {  // a whole stage: its 4 k-steps straight, no branch between them (ptxas
                                          // serialises wgmmas across control flow)
#pragma unroll
                        for (int j = 0; j < BK / 16; j++)
                            wgmma_ss<BN>(acc, sw128_desc(a + 32 * j), sw128_desc(b + 32 * j));
                    } else {  // a segment's last, partial stage: only the k-steps before hi (warpgroup-uniform)
                        const int nk = (hi - k0 + 15) / 16;
                        wgmma_ss<BN>(acc, sw128_desc(a), sw128_desc(b));
                        if (nk > 1) wgmma_ss<BN>(acc, sw128_desc(a + 32), sw128_desc(b + 32));
                        if (nk > 2) wgmma_ss<BN>(acc, sw128_desc(a + 64), sw128_desc(b + 64));
                    }
                    wgmma_commit();
                    wgmma_wait<1>();  // the previous stage's group is done; this one may still run
                    fence_operand(acc);
                    if (held >= 0 && lane == 0) mbar_arrive(&empty[held]);
                    held = slot;
                    if (++slot == STAGES) slot = 0, phase ^= 1;
                }
                wgmma_wait<0>();  // the segment's chain is complete
                fence_operand(acc);
                if (held >= 0 && lane == 0) mbar_arrive(&empty[held]);
                held = -1;
                if constexpr (TREE) {
                    tree_push_s<NJ>(acc, st0, st2s + ct, s - tl.s0);
                    if (s + 1 < tl.s1) {
#pragma unroll
                        for (int j = 0; j < NJ; j++)
#pragma unroll
                            for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;  // the next segment's chain starts from +0
                    }
                }
            }

            // epilogue: acc[j][e] is output (row 64·cw + 16·wq + g + 8·(e/2), column 8j + 2q + e%2) of the tile
            const int g = lane >> 2, q = lane & 3;
            const bool finish = G == nseg;
            const int z = tl.s0 / G;
            if constexpr (!PERSIST) {
                float* const dst = finish ? (float*)outv : part + (size_t)z * M * N;
#pragma unroll
                for (int j = 0; j < NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = tl.m0 + 64 * cw + 16 * wq + g + 8 * (e >> 1);
                        const int col = tl.n0 + 8 * j + 2 * q + (e & 1);
                        if (row < M && col < N) {
                            dst[(size_t)row * N + col] = tc_out(acc[j][e], finish, bias, col, dt);
                        }
                    }
            } else {
                // two adjacent columns (col even) per store where N is even: one 8-byte float2 or, bf, one 4-byte
                // pair of bf16 bits (then every row starts aligned and col + 1 < N whenever col < N); else one by
                // one. One loop per case (a branch per store puts acc in local memory: ptxas, seen).
                const bool bf = ob != 0 && finish;
                float* const dst = finish ? (float*)outv : part + (size_t)z * M * N;
                uint16_t* const dsth = (uint16_t*)outv;
                const int row0 = tl.m0 + 64 * cw + 16 * wq + g, col0 = tl.n0 + 2 * q;
                if ((N & 1) == 0 && bf) {
#pragma unroll
                    for (int j = 0; j < NJ; j++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int row = row0 + 8 * h, col = col0 + 8 * j;
                            if (row < M && col < N)
                                *reinterpret_cast<uint32_t*>(dsth + (size_t)row * N + col) =
                                    bf16_pair(tc_out(acc[j][2 * h], true, bias, col, dt),
                                              tc_out(acc[j][2 * h + 1], true, bias, col + 1, dt));
                        }
                } else if ((N & 1) == 0) {
#pragma unroll
                    for (int j = 0; j < NJ; j++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int row = row0 + 8 * h, col = col0 + 8 * j;
                            if (row < M && col < N)
                                *reinterpret_cast<float2*>(dst + (size_t)row * N + col) =
                                    make_float2(tc_out(acc[j][2 * h], finish, bias, col, dt),
                                                tc_out(acc[j][2 * h + 1], finish, bias, col + 1, dt));
                        }
                } else {
#pragma unroll
                    for (int j = 0; j < NJ; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int row = row0 + 8 * (e >> 1), col = col0 + 8 * j + (e & 1);
                            if (row < M && col < N) {
                                const float v = tc_out(acc[j][e], finish, bias, col, dt);
                                if (bf) {
                                    dsth[(size_t)row * N + col] = (uint16_t)(__float_as_uint(v) >> 16);
                                } else {
                                    dst[(size_t)row * N + col] = v;
                                }
                            }
                        }
                }
            }
        }
    }
}

// The variants (launch.json "tc"; kernels/cuda/tc.go picks them by M, by G and by what TMA can load, none
// changes a bit): tma256 one chain per block (column-parallel, or G = 1), 128×256 tiles (m64n256k16 per
// consumer); tma128t several segments per block (row-parallel), 128×128 tiles, 3 stages (the open subtrees take
// 128 KB of shared memory); tma256p and tma128tp the same tiles on a persistent grid (PERSIST, the tmap path),
// and tma128p a 128-wide chain with 6 stages there (more tiles where 256-wide ones leave SMs idle).
// Entry: tc_mm_<variant>_<chain|tree>(tx, tw, out, part, bias, M, K, N, segs, G, dt), tx and tw the tensor maps
// of x (box 64 × 128) and w (box 64 × BN), 128-byte swizzle, zero fill; grid (tiles, 1, nseg/G), 384 threads.
// The persistent entries take two more parameters, ob (1: out is bf16 bits; only for a finished dt = DT_BF16
// output) and stash (TREE: gridDim.x · 2·BM·BN floats for the open subtrees; else unused, may be null), and a
// grid (min(tiles·nseg/G, blocks), 1, 1). tma128tp has 6 slots (its open subtrees in stash).
#define TC_TMA_ENTRY(NAME, BN, STAGES, TREE)                                                                      \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                          \
        NAME(const __grid_constant__ TmaMap tx, const __grid_constant__ TmaMap tw, float* __restrict__ out,       \
             float* __restrict__ part, const float* __restrict__ bias, int M, int K, int N, Segs segs, int G,     \
             int dt) {                                                                                            \
        tc_tma_body<BN, STAGES, TREE, false>(&tx, &tw, out, part, bias, M, K, N, segs, G, dt, 0, nullptr);        \
    }
#define TC_TMA_PERSIST_ENTRY(NAME, BN, STAGES, TREE)                                                              \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                          \
        NAME(const __grid_constant__ TmaMap tx, const __grid_constant__ TmaMap tw, void* __restrict__ out,        \
             float* __restrict__ part, const float* __restrict__ bias, int M, int K, int N, Segs segs, int G,     \
             int dt, int ob, float* __restrict__ stash) {                                                         \
        tc_tma_body<BN, STAGES, TREE, true>(&tx, &tw, out, part, bias, M, K, N, segs, G, dt, ob, stash);          \
    }
#define TC_TMA_VARIANT(V, BN, STAGES, TREE, PERSIST, KIND) TC_TMA_VARIANT_##PERSIST(tc_mm_##V##_##KIND, BN, STAGES, TREE)
#define TC_TMA_VARIANT_false(NAME, BN, STAGES, TREE) TC_TMA_ENTRY(NAME, BN, STAGES, TREE)
#define TC_TMA_VARIANT_true(NAME, BN, STAGES, TREE) TC_TMA_PERSIST_ENTRY(NAME, BN, STAGES, TREE)

TC_TMA_VARIANT(tma256, 256, 4, false, false, chain)
TC_TMA_VARIANT(tma128t, 128, 3, true, false, tree)
TC_TMA_VARIANT(tma256p, 256, 4, false, true, chain)
TC_TMA_VARIANT(tma128p, 128, 6, false, true, chain)
TC_TMA_VARIANT(tma128tp, 128, 6, true, true, tree)

// ---------------------------------------------------------------------------------------------------------
// tc_tmd_body: the decode matmul (M ≤ 8·MT ≤ 64 rows of x) on TMA loads, the weights streamed once at the HBM's
// rate. The same chains as every tc kernel (tc.2: acc = +0, one k-step per 16 consecutive k from lo, ascending;
// row-parallel: the segments added by tree_push), but with the operands swapped: the MMA's A is 16 rows of w (16
// output columns), its B is x (8 rows of x per n8 fragment), so that an m16n8k16 k-step serves up to 8 rows of
// x instead of wasting 15 of 16 A rows on one token. tc.1's k-step is one fused sum of the 16 exact products
// a[j]·b[j] and c, symmetric in a and b: D[n][m] = step(w[n], x[m], D[n][m]) is the same step, bit for bit.
// A block is one producer warp (lane 0 issues every TMA load) and C consumer warps, C a launch parameter (1…16):
// consumer warp c owns columns n0 + 16c … n0 + 16c + 15 of the block's tile of 16·C columns, each a chain per row
// of x. K is streamed in stages of 64 through S slots (S a launch parameter ≤ TC_TMD_MAXS): w's box of 16·C rows
// and x's box of 8·MT rows (zero past M, N and K, as the TMA gives them), 128-byte swizzled; full[s] completes on
// the bytes, empty[s] on one arrival per consumer warp once its ldmatrix reads of the slot are done (they are:
// the mma that consumes them has issued). The grid is persistent: block b runs work items b, b + gridDim.x, …
// of tiles·(nseg/G) (item i: tile i % tiles, segment group i / tiles), the producer running on into the next item.
// Which block or warp computes a chain never changes a bit. Entry: tc_mm_tmd<8·MT>_<chain|tree>(tx, tw, out,
// part, bias, M, K, N, segs, G, dt, C, S); tx box 64 × 8·MT, tw box 64 × 16·C; 32·(C + 1) threads; dynamic shared
// memory 1024 + S·((16·C + 8·MT)·128 + 16) bytes: the slots, then each slot's two mbarriers (kernels/cuda/tc.go,
// planTMD; S ≥ 2: a consumer waits for the next slot before it releases its own).
#define TC_TMD_MAXS 32
template <int MT, bool TREE>
__device__ __forceinline__ void tc_tmd_body(const TmaMap* tx, const TmaMap* tw, float* __restrict__ out,
                                            float* __restrict__ part, const float* __restrict__ bias, int M, int K,
                                            int N, const Segs& segs, int G, int dt, int C, int S) {
    constexpr int BK = TC_TMA_BK;
    const uint32_t WB = (uint32_t)C * 16 * 128, XB = MT * 8 * 128, SB = WB + XB;
    TC_SMEM(smem16);
    uint8_t* const raw = reinterpret_cast<uint8_t*>(smem16);
    uint8_t* const base = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);  // 1024-byte atoms: base offset 0
    // the barriers after the slots, in dynamic shared memory: full[s] at S·SB + 8s, empty[s] at S·SB + 8(S + s)
    uint64_t* const full = reinterpret_cast<uint64_t*>(base + (size_t)S * SB);
    uint64_t* const empty = full + S;
    __shared__ int sb[9];
    const int nseg = segs.n;
    if (threadIdx.x < 9) sb[threadIdx.x] = segs.b[min((int)threadIdx.x, nseg)];
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1);   // the producer's arrive.expect_tx (+ the TMA's bytes)
            mbar_init(&empty[s], C);  // one arrival per consumer warp
        }
        fence_mbar_init();
    }
    __syncthreads();  // the last block-wide barrier: the roles part here

    const int tiles = (N + 16 * C - 1) / (16 * C), nwork = tiles * (nseg / G);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp == 0) {  // the producer: the consumers' stage sequence, exactly
        if (lane == 0) {
            int slot = 0;
            uint32_t phase = 0;
            for (int wi = blockIdx.x; wi < nwork; wi += gridDim.x) {
                const int n0 = (wi % tiles) * 16 * C, z = wi / tiles;
                for (int s = z * G; s < z * G + G; s++)
                    for (int k0 = sb[s]; k0 < sb[s + 1]; k0 += BK) {
                        mbar_wait(&empty[slot], phase ^ 1);  // first round: free at once
                        mbar_arrive_expect_tx(&full[slot], SB);
                        tma_load_2d(base + slot * SB, tw, &full[slot], k0, n0);
                        tma_load_2d(base + slot * SB + WB, tx, &full[slot], k0, 0);
                        if (++slot == S) slot = 0, phase ^= 1;
                    }
            }
        }
        return;
    }
    const int cw = warp - 1, g = lane >> 2, q = lane & 3, li = lane >> 3, lr = lane & 7;
    // Shared addresses, once (ldmatrix_x4_a says why): the slots from s0, the barriers from fullA and emptyA.
    // ldmatrix rows: A (w) matrix li = rows 8·(li & 1) + lr of the warp's 16, k chunk (li >> 1) of the k-step;
    // B (x) matrices for fragment pair (t, t + 1): rows 8·t + 8·(li >> 1) + lr (MT = 1: rows lr), k chunk (li & 1).
    // Chunk c of a row r sits at (c ^ (r & 7))·16 (128-byte swizzle), and every row here has r & 7 = lr; k-step j of
    // a stage reads chunks 2j and 2j + 1. ao[j], bo[j]: this lane's offsets in a slot for k-step j (fragment pair
    // t of x at bo[j] + 1024·t: 8 rows further).
    const uint32_t s0 = smem_addr(base), fullA = smem_addr(full), emptyA = smem_addr(empty);
    const uint32_t arow = (uint32_t)(16 * cw + 8 * (li & 1) + lr), achk = (uint32_t)(li >> 1);
    const uint32_t brow = MT == 1 ? (uint32_t)lr : (uint32_t)(8 * (li >> 1) + lr), bchk = (uint32_t)(li & 1);
    uint32_t ao[BK / 16], bo[BK / 16];
#pragma unroll
    for (int j = 0; j < BK / 16; j++) {
        ao[j] = arow * 128 + (((2 * j + achk) ^ lr) << 4);
        bo[j] = WB + brow * 128 + (((2 * j + bchk) ^ lr) << 4);
    }
    // load: k-step j's fragments of the slot at shared address sl; step: the chains' k-step on them
    auto load = [&](uint32_t (&a)[4], uint32_t (&b)[MT][2], uint32_t sl, int j) {
        ldmatrix_x4_a(a, sl + ao[j]);
        if constexpr (MT == 1) {
            ldmatrix_x2_a(b[0], sl + bo[j]);
        } else {
#pragma unroll
            for (int t = 0; t < MT; t += 2) {
                uint32_t r[4];
                ldmatrix_x4_a(r, sl + bo[j] + 1024u * (uint32_t)t);
                b[t][0] = r[0], b[t][1] = r[1], b[t + 1][0] = r[2], b[t + 1][1] = r[3];
            }
        }
    };
    float acc[MT][4];
    float st0[TREE ? MT : 1][4], st1[TREE ? MT : 1][4], st2[TREE ? MT : 1][4];  // the open subtrees (TREE)
    auto step = [&](const uint32_t (&a)[4], const uint32_t (&b)[MT][2]) {
#pragma unroll
        for (int t = 0; t < MT; t++) mma_bf16(acc[t], a, b[t]);  // the chains' next k-step
    };
    // Two fragment sets: each k-step's ldmatrix is issued before the previous k-step's mma, and a stage's last mma
    // after the wait for the next stage and its first ldmatrix, so that the shared-memory and barrier latencies
    // overlap the mma chain's (the chains' order is unchanged: k-steps in order, one after the other).
    uint32_t fa0[4], fb0[MT][2], fa1[4], fb1[MT][2];
    int slot = 0;
    uint32_t phase = 0;
    // M ≤ 8 (MT = 1; at MT = 2 the entries of 16 warps spill): two sets of a whole stage's fragments (below)
    constexpr int DS = MT == 1 ? BK / 16 : 1;
    uint32_t da0[DS][4], db0[DS][MT][2], da1[DS][4], db1[DS][MT][2];
    // deep_stage: the stage at k0 of a segment ending at hi, its k-steps' fragments in (ca, cb); the next stage's
    // (if the segment has one) loaded into (na, nb) behind the mmas; then the slot released and the next one taken
    auto deep_stage = [&](uint32_t (&ca)[DS][4], uint32_t (&cb)[DS][MT][2], uint32_t (&na)[DS][4],
                          uint32_t (&nb)[DS][MT][2], int k0, int hi) {
        const int nslot = slot + 1 == S ? 0 : slot + 1;  // S ≥ 2 (planTMD): another slot than this one
        const uint32_t nphase = nslot == 0 ? phase ^ 1 : phase, nsl = s0 + nslot * SB;
        const bool more = k0 + BK < hi;
#pragma unroll
        for (int j = 0; j < DS; j++) {
            if (k0 + 16 * j < hi) step(ca[j], cb[j]);  // warp-uniform
            if (j == 0 && more) mbar_wait_a(fullA + 8u * nslot, nphase);
            if (more && k0 + BK + 16 * j < hi) load(na[j], nb[j], nsl, j);
        }
        __syncwarp();  // the slot's ldmatrix results fed mmas that have issued: its reads are done
        if (lane == 0) mbar_arrive_a(emptyA + 8u * slot);
        slot = nslot, phase = nphase;
    };
    for (int wi = blockIdx.x; wi < nwork; wi += gridDim.x) {
        const int n0 = (wi % tiles) * 16 * C, z = wi / tiles;
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;  // every chain starts from +0
        for (int s = z * G; s < z * G + G; s++) {
            const int lo = sb[s], hi = sb[s + 1];
            if constexpr (MT == 1) {
                // M ≤ 8: a whole stage ahead (an ldmatrix takes ~95 cycles, a dependent mma ~24: scripts/mma_latency.py).
                // The stage's four k-steps are in one register set; the next stage's load into the other set
                // k-step by k-step after the mma that frees an issue slot, so that each ldmatrix has four mmas to land.
                if (lo < hi) {
                    mbar_wait_a(fullA + 8u * slot, phase);
#pragma unroll
                    for (int j = 0; j < BK / 16; j++)
                        if (lo + 16 * j < hi) load(da0[j], db0[j], s0 + slot * SB, j);
                }
                for (int k0 = lo; k0 < hi; k0 += 2 * BK) {
                    deep_stage(da0, db0, da1, db1, k0, hi);
                    if (k0 + BK >= hi) break;
                    deep_stage(da1, db1, da0, db0, k0 + BK, hi);
                }
            } else {
                if (lo < hi) {  // the segment's first k-step, into set 0
                    mbar_wait_a(fullA + 8u * slot, phase);
                    load(fa0, fb0, s0 + slot * SB, 0);
                }
                for (int k0 = lo; k0 < hi; k0 += BK) {
                    // set 0 holds this stage's k-step 0; the stage has k-step j where k0 + 16·j < hi
                    const uint32_t sl = s0 + slot * SB;
                    const int nslot = slot + 1 == S ? 0 : slot + 1;  // S ≥ 2 (planTMD): another slot than this one
                    const uint32_t nphase = nslot == 0 ? phase ^ 1 : phase;
                    if (k0 + 3 * 16 < hi) {  // four k-steps
                        load(fa1, fb1, sl, 1);
                        step(fa0, fb0);
                        load(fa0, fb0, sl, 2);
                        step(fa1, fb1);
                        load(fa1, fb1, sl, 3);
                        step(fa0, fb0);
                        if (k0 + BK < hi) {  // the segment's next stage: its k-step 0 into set 0
                            mbar_wait_a(fullA + 8u * nslot, nphase);
                            load(fa0, fb0, s0 + nslot * SB, 0);
                        }
                        step(fa1, fb1);
                    } else {  // the segment's last stage, one to three k-steps (hi − k0 ≤ 48)
                        step(fa0, fb0);
    #pragma unroll
                        for (int j = 1; j < BK / 16 - 1; j++)
                            if (k0 + 16 * j < hi) {  // warp-uniform
                                load(fa0, fb0, sl, j);
                                step(fa0, fb0);
                            }
                    }
                    // the slot's last ldmatrix fed an mma that has issued: its reads are done
                    __syncwarp();
                    if (lane == 0) mbar_arrive_a(emptyA + 8u * slot);
                    slot = nslot, phase = nphase;
                }
            }
            if constexpr (TREE) {
                tree_push<MT>(acc, st0, st1, st2, s - z * G);
                if (s + 1 < z * G + G) {
#pragma unroll
                    for (int t = 0; t < MT; t++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;  // the next segment's chain starts from +0
                }
            }
        }
        // epilogue: acc[t][e] is output (row 8t + 2q + (e & 1) of x, column n0 + 16·cw + g + 8·(e >> 1))
        const bool finish = G == nseg;
        float* const dst = finish ? out : part + (size_t)z * M * N;
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = 8 * t + 2 * q + (e & 1), col = n0 + 16 * cw + g + 8 * (e >> 1);
                if (row < M && col < N) dst[(size_t)row * N + col] = tc_out(acc[t][e], finish, bias, col, dt);
            }
    }
}

// MAXC: the consumer warps an entry takes at most; its thread bound 32·(MAXC + 1) gives each thread the registers
// it needs (65536 / 544 = 120 at 16 warps; the tree entries of 32 and 64 rows hold R/2 accumulators and 3R/2 floats of
// open subtrees, and spilled under 120 (tmd64_tree 1116 bytes): they take 8 warps and up to 224 registers).
// planTMD never plans more (tc.go's tmdMaxWarps, checked by TestTCVariantsMatchSource).
#define TC_TMD_ENTRY(MT, TREE, KIND, MAXC)                                                                        \
    extern "C" __global__ void __launch_bounds__(32 * ((MAXC) + 1), 1)                                            \
        tc_mm_tmd##MT##_##KIND(const __grid_constant__ TmaMap tx, const __grid_constant__ TmaMap tw,               \
                                float* __restrict__ out, float* __restrict__ part, const float* __restrict__ bias, \
                                int M, int K, int N, Segs segs, int G, int dt, int C, int S) {                    \
        tc_tmd_body<MT / 8, TREE>(&tx, &tw, out, part, bias, M, K, N, segs, G, dt, C, S);                          \
    }
TC_TMD_ENTRY(8, false, chain, 16)
TC_TMD_ENTRY(8, true, tree, 16)
TC_TMD_ENTRY(16, false, chain, 16)
TC_TMD_ENTRY(16, true, tree, 16)
TC_TMD_ENTRY(32, false, chain, 16)
TC_TMD_ENTRY(32, true, tree, 8)
TC_TMD_ENTRY(64, false, chain, 16)
TC_TMD_ENTRY(64, true, tree, 8)
