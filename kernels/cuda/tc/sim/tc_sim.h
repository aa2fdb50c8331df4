// tc_sim.h: runs tc_matmul.cu's kernels on the CPU, unchanged but for its PTX wrappers (compiled with
// -DBITALIGN_TC_SIM), so that the kernels' index arithmetic, pipeline, segment tree and epilogue are checked
// bitwise against kernels.MatmulTC without a GPU (TestTCSimulated in kernels/cuda). Every CUDA thread of a block
// is a std::thread; __syncthreads is a barrier over the block; ldmatrix and mma.sync exchange their operands
// through a per-warp board between two barriers, as the hardware's lanes do; the MMA's k-step is tc.1's model
// (the C++ twin of kernels.HopperMMA, which matched the H200); cp.async copies at once (a valid schedule of
// it: this checks what is copied where, not the timing). Host-only: none of this is in the PTX.
#pragma once
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

struct dim3s {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3s threadIdx, blockIdx;
inline dim3s blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__

inline float __uint_as_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
// compiled with -ffp-contract=off: each is one IEEE operation, round to nearest even; a NaN result is the GPU's
// 0x7FFFFFFF (its float32 units never pass a payload on; x86 gives 0xFFC00000 for Inf − Inf, or the input NaN)
inline float gpu_nan(float r) { return r != r ? __uint_as_float(0x7FFFFFFFu) : r; }
inline float __fadd_rn(float a, float b) { return gpu_nan(a + b); }
inline float __fsub_rn(float a, float b) { return gpu_nan(a - b); }
inline float __fmul_rn(float a, float b) { return gpu_nan(a * b); }
inline float __fdiv_rn(float a, float b) { return gpu_nan(a / b); }
inline float __fmaf_rn(float a, float b, float c) { return gpu_nan(std::fma(a, b, c)); }
inline float __fsqrt_rn(float a) { return gpu_nan(std::sqrt(a)); }
inline float __int2float_rn(int i) { return (float)i; }
using std::max;
using std::min;
using std::rintf;

struct float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    uint32_t x, y;
};
struct alignas(16) uint4 {
    uint32_t x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// The simulated block: its barrier, its dynamic shared memory, and one exchange board per warp.
struct SimWarp {
    std::barrier<>* bar;
    const void* addr[32];
    uint32_t a[32][4], b[32][2];
    float d[32][4];
    uint32_t x[32];  // the shuffles' board
};
struct SimWarpgroup {  // wgmma's board: the 128 threads' A fragments and accumulators
    std::barrier<>* bar;
    uint32_t a[128][4];
    float d[128][128];
};
struct SimBlock {
    std::barrier<>* bar;
    uint16_t* smem;
    SimWarp* warps;
    SimWarpgroup* groups;
    int* orv;  // __syncthreads_or's accumulator
};
inline SimBlock sim_block;

inline void __syncthreads() { sim_block.bar->arrive_and_wait(); }
inline std::mutex sim_or_mu;
// __syncthreads_or: a barrier that returns whether any thread's p was non-zero (thread 0 clears the
// accumulator between the last read and the next call's first write: three barriers).
inline int __syncthreads_or(int p) {
    if (p) {
        std::lock_guard<std::mutex> g(sim_or_mu);
        *sim_block.orv = 1;
    }
    sim_block.bar->arrive_and_wait();
    int r;
    {
        std::lock_guard<std::mutex> g(sim_or_mu);
        r = *sim_block.orv;
    }
    sim_block.bar->arrive_and_wait();
    if (threadIdx.x == 0) *sim_block.orv = 0;
    sim_block.bar->arrive_and_wait();
    return r;
}
inline uint16_t* tc_sim_smem() { return sim_block.smem; }
#define TC_SMEM(name) uint16_t* const name = tc_sim_smem()

inline SimWarp& sim_warp() { return sim_block.warps[threadIdx.x / 32]; }

inline void cp_async16(void* dst, const void* src, int src_bytes) {
    if (src_bytes == 16) {
        std::memcpy(dst, src, 16);
    } else {
        std::memset(dst, 0, 16);
    }
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

// ldmatrix .x(N): lanes 8i..8i+7 give the row addresses of matrix i; lane T receives (row T/4, cols 2(T%4), +1).
template <int N>
inline void sim_ldmatrix(uint32_t (&r)[N], const void* p) {
    SimWarp& w = sim_warp();
    const int lane = threadIdx.x & 31;
    w.addr[lane] = p;
    w.bar->arrive_and_wait();
    for (int i = 0; i < N; i++) {
        const uint16_t* row = static_cast<const uint16_t*>(w.addr[8 * i + lane / 4]);
        r[i] = (uint32_t)row[2 * (lane % 4)] | ((uint32_t)row[2 * (lane % 4) + 1] << 16);
    }
    w.bar->arrive_and_wait();
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) { sim_ldmatrix<4>(r, p); }
// ldmatrix .x(N).trans: lane T receives (rows 2(T%4), 2(T%4)+1; column T/4) of each matrix.
template <int N>
inline void sim_ldmatrix_trans(uint32_t (&r)[N], const void* p) {
    SimWarp& w = sim_warp();
    const int lane = threadIdx.x & 31;
    w.addr[lane] = p;
    w.bar->arrive_and_wait();
    for (int i = 0; i < N; i++) {
        const uint16_t* r0 = static_cast<const uint16_t*>(w.addr[8 * i + 2 * (lane % 4)]);
        const uint16_t* r1 = static_cast<const uint16_t*>(w.addr[8 * i + 2 * (lane % 4) + 1]);
        r[i] = (uint32_t)r0[lane / 4] | ((uint32_t)r1[lane / 4] << 16);
    }
    w.bar->arrive_and_wait();
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) { sim_ldmatrix_trans<4>(r, p); }
inline void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) { sim_ldmatrix_trans<2>(r, p); }

// warp shuffles (full mask only) and __syncwarp: every lane posts its value, then reads its source's
inline void __syncwarp(unsigned = 0xffffffffu) { sim_warp().bar->arrive_and_wait(); }
template <typename T>
inline T sim_shfl(T v, int src) {
    static_assert(sizeof(T) == 4);
    SimWarp& w = sim_warp();
    const int lane = threadIdx.x & 31;
    std::memcpy(&w.x[lane], &v, 4);
    w.bar->arrive_and_wait();
    T r;
    std::memcpy(&r, &w.x[src & 31], 4);
    w.bar->arrive_and_wait();
    return r;
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) { return sim_shfl(v, src); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int d) { return sim_shfl(v, (int)(threadIdx.x & 31) ^ d); }
inline void ldmatrix_x2(uint32_t (&r)[2], const void* p) { sim_ldmatrix<2>(r, p); }
// the shared-address forms: a is smem_addr's offset in the block's dynamic shared memory
inline void* sim_smem_at(uint32_t a) { return reinterpret_cast<char*>(sim_block.smem) + a; }
inline void ldmatrix_x4_a(uint32_t (&r)[4], uint32_t a) { sim_ldmatrix<4>(r, sim_smem_at(a)); }
inline void ldmatrix_x2_a(uint32_t (&r)[2], uint32_t a) { sim_ldmatrix<2>(r, sim_smem_at(a)); }

// mma_dot16: one k-step of tc.1 (kernels.HopperMMA): c + Σ a[j]·b[j], bf16 bits in, float32 out.
inline float mma_dot16(const uint16_t* a, const uint16_t* b, float c) {
    const uint32_t cu = __float_as_uint(c);
    bool nan = false, pinf = false, ninf = false;
    if ((cu & 0x7FFFFFFFu) > 0x7F800000u) nan = true;
    if (cu == 0x7F800000u) pinf = true;
    if (cu == 0xFF800000u) ninf = true;
    for (int j = 0; j < 16; j++) {
        const uint16_t xa = a[j] & 0x7FFF, xb = b[j] & 0x7FFF;
        if (xa > 0x7F80 || xb > 0x7F80) {
            nan = true;
        } else if (xa == 0x7F80 || xb == 0x7F80) {
            if (xa == 0 || xb == 0) {
                nan = true;
            } else if ((a[j] ^ b[j]) & 0x8000) {
                ninf = true;
            } else {
                pinf = true;
            }
        }
    }
    if (nan || (pinf && ninf)) return __uint_as_float(0x7FFFFFFFu);
    if (pinf) return __uint_as_float(0x7F800000u);
    if (ninf) return __uint_as_float(0xFF800000u);
    struct T {
        bool neg;
        uint64_t m;
        int e, x;
    } ts[17];
    int n = 0;
    {
        int e = (int)(cu >> 23 & 0xFF);
        uint64_t m = cu & 0x7FFFFF;
        if (e != 0 || m != 0) {
            if (e == 0) {
                e = 1;
            } else {
                m |= 1u << 23;
            }
            ts[n++] = {(cu >> 31) != 0, m, e - 150, e - 127};
        }
    }
    for (int j = 0; j < 16; j++) {
        int ea = a[j] >> 7 & 0xFF, eb = b[j] >> 7 & 0xFF;
        uint64_t ma = a[j] & 0x7F, mb = b[j] & 0x7F;
        if (ea == 0) ea = 1; else ma |= 0x80;
        if (eb == 0) eb = 1; else mb |= 0x80;
        if (ma == 0 || mb == 0) continue;
        ts[n++] = {((a[j] ^ b[j]) & 0x8000) != 0, ma * mb, ea + eb - 254 - 14, ea + eb - 254};
    }
    if (n == 0) return 0.0f;
    int emax = ts[0].x;
    for (int i = 1; i < n; i++) emax = max(emax, ts[i].x);
    const int q = emax - 25;
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const int sh = ts[i].e - q;
        uint64_t v = sh >= 0 ? ts[i].m << sh : sh > -64 ? ts[i].m >> -sh : 0;
        sum += ts[i].neg ? -(int64_t)v : (int64_t)v;
    }
    if (sum == 0) return 0.0f;  // +0, whatever the signs
    const bool neg = sum < 0;
    uint64_t mag = neg ? (uint64_t)(-sum) : (uint64_t)sum;
    const int nb = 64 - __builtin_clzll(mag);
    if (q + nb - 1 >= 128) return __uint_as_float(neg ? 0xFF800000u : 0x7F800000u);
    int sh = nb - 24;
    if (q + nb - 1 < -126) sh = -149 - q;  // subnormal: bits down to 2^−149
    uint64_t kept = sh <= 0 ? mag << -sh : sh < 64 ? mag >> sh : 0;  // toward zero
    if (kept == 0) return 0.0f;
    int e = q + sh;
    uint32_t u;
    if (kept < (1u << 23)) {
        u = (uint32_t)kept;
    } else {
        const int be = e + 23 + 127;
        if (be >= 255) return __uint_as_float(neg ? 0xFF800000u : 0x7F800000u);
        u = (uint32_t)be << 23 | ((uint32_t)kept & 0x7FFFFF);
    }
    return __uint_as_float(u | (neg ? 0x80000000u : 0));
}

// mma.sync m16n8k16 row.col bf16 → f32 over the warp: every lane posts its fragments, then computes its own
// four outputs from the whole tile (layouts as in tc_matmul.cu's comment).
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    SimWarp& w = sim_warp();
    const int lane = threadIdx.x & 31;
    for (int i = 0; i < 4; i++) w.a[lane][i] = a[i], w.d[lane][i] = d[i];
    w.b[lane][0] = b[0], w.b[lane][1] = b[1];
    w.bar->arrive_and_wait();
    uint16_t A[16][16], B[8][16];
    float C[16][8];
    for (int L = 0; L < 32; L++) {
        const int g = L / 4, q = L % 4;
        auto put = [](uint16_t* p, uint32_t v) { p[0] = (uint16_t)v, p[1] = (uint16_t)(v >> 16); };
        put(&A[g][2 * q], w.a[L][0]);
        put(&A[g + 8][2 * q], w.a[L][1]);
        put(&A[g][2 * q + 8], w.a[L][2]);
        put(&A[g + 8][2 * q + 8], w.a[L][3]);
        put(&B[g][2 * q], w.b[L][0]);
        put(&B[g][2 * q + 8], w.b[L][1]);
        C[g][2 * q] = w.d[L][0], C[g][2 * q + 1] = w.d[L][1];
        C[g + 8][2 * q] = w.d[L][2], C[g + 8][2 * q + 1] = w.d[L][3];
    }
    w.bar->arrive_and_wait();
    const int g = lane / 4, q = lane % 4;
    d[0] = mma_dot16(A[g], B[2 * q], C[g][2 * q]);
    d[1] = mma_dot16(A[g], B[2 * q + 1], C[g][2 * q + 1]);
    d[2] = mma_dot16(A[g + 8], B[2 * q], C[g + 8][2 * q]);
    d[3] = mma_dot16(A[g + 8], B[2 * q + 1], C[g + 8][2 * q + 1]);
}

// wgmma: no-op fences and waits (a simulated wgmma completes when it returns); smem_addr is the byte offset in the
// block's shared memory, which the descriptors carry.
inline void wgmma_fence() {}
inline void wgmma_commit() {}
inline void wgmma_wait0() {}
inline void fence_proxy_async() {}
template <int P>
inline void fence_operand(float (&)[P][4]) {}
inline uint32_t smem_addr(const void* p) {
    return (uint32_t)(static_cast<const char*>(p) - reinterpret_cast<const char*>(sim_block.smem));
}

// wgmma.mma_async m64nNk16 .bf16 → .f32, A from registers (warp w of the warpgroup: rows 16w… in the mma A
// layout), B through a no-swizzle K-major descriptor: element (n, k) at start + (n/8)·SBO + (k/8)·LBO +
// (n%8)·16 + (k%8)·2 bytes; accumulator d[j][e] = (row 16w + g + 8·(e/2), column 8j + 2q + e%2).
template <int N>
inline void sim_wgmma(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc) {
    SimWarpgroup& wg = sim_block.groups[threadIdx.x / 128];
    const int t = threadIdx.x % 128;
    for (int i = 0; i < 4; i++) wg.a[t][i] = a[i];
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) wg.d[t][4 * j + e] = d[j][e];
    wg.bar->arrive_and_wait();
    uint16_t A[64][16], Bt[N][16];
    float C[64][N];
    for (int T = 0; T < 128; T++) {
        const int w = T / 32, L = T % 32, g = L / 4, q = L % 4, r = 16 * w + g;
        auto put = [](uint16_t* p, uint32_t v) { p[0] = (uint16_t)v, p[1] = (uint16_t)(v >> 16); };
        put(&A[r][2 * q], wg.a[T][0]);
        put(&A[r + 8][2 * q], wg.a[T][1]);
        put(&A[r][2 * q + 8], wg.a[T][2]);
        put(&A[r + 8][2 * q + 8], wg.a[T][3]);
        for (int j = 0; j < N / 8; j++) {
            C[r][8 * j + 2 * q] = wg.d[T][4 * j], C[r][8 * j + 2 * q + 1] = wg.d[T][4 * j + 1];
            C[r + 8][8 * j + 2 * q] = wg.d[T][4 * j + 2], C[r + 8][8 * j + 2 * q + 1] = wg.d[T][4 * j + 3];
        }
    }
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)(desc >> 16 & 0x3FFF) << 4,
                   sbo = (uint32_t)(desc >> 32 & 0x3FFF) << 4;
    const char* base = reinterpret_cast<const char*>(sim_block.smem);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < 16; k++)
            std::memcpy(&Bt[n][k], base + start + (n / 8) * sbo + (k / 8) * lbo + (n % 8) * 16 + (k % 8) * 2, 2);
    wg.bar->arrive_and_wait();
    const int w = t / 32, L = t % 32, g = L / 4, q = L % 4;
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) {
            const int row = 16 * w + g + 8 * (e >> 1), col = 8 * j + 2 * q + (e & 1);
            d[j][e] = mma_dot16(A[row], Bt[col], C[row][col]);
        }
}
inline void wgmma_m64n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc) { sim_wgmma<128>(d, a, desc); }
inline void wgmma_m64n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc) { sim_wgmma<64>(d, a, desc); }

// ---------------------------------------------------------------------------------------------------------
// tc_tma.cu: TMA loads, mbarriers and wgmma with both operands from shared memory.

// sim_sw128: the 128-byte swizzle of a shared-memory byte offset (1024-byte atoms from offset 0): the 16-byte
// chunk bits 4-6 XOR the row-in-atom bits 7-9. The TMA unit writes and wgmma reads through the same map.
inline uint32_t sim_sw128(uint32_t off) { return off ^ (((off >> 7) & 7u) << 4); }

// A simulated TmaMap: v[0] the matrix's base (host pointer to uint16_t), v[1] rows, v[2] cols (= row stride in
// elements), v[3] box rows, v[4] box cols, v[5] 1 (the 128-byte swizzle, the only one simulated).
inline TmaMap sim_tma_map(const uint16_t* base, long long rows, long long cols, int box_rows, int box_cols) {
    TmaMap m{};
    m.v[0] = (unsigned long long)(uintptr_t)base;
    m.v[1] = (unsigned long long)rows, m.v[2] = (unsigned long long)cols;
    m.v[3] = (unsigned long long)box_rows, m.v[4] = (unsigned long long)box_cols, m.v[5] = 1;
    return m;
}

// The simulated mbarrier, in the kernel's 8-byte word: phase (bit 63), pending arrivals (bits 32-47), expected
// arrivals (bits 16-31), outstanding transaction bytes (bits 0-15, in units of 16 bytes), under one lock.
inline std::mutex sim_mbar_mu;
inline void sim_mbar_step(uint64_t* bar, int arrivals, long long tx_bytes) {
    std::lock_guard<std::mutex> g(sim_mbar_mu);
    uint64_t v = *bar;
    long long pending = (long long)(v >> 32 & 0xFFFF) - arrivals, expected = (long long)(v >> 16 & 0xFFFF);
    long long tx = (long long)(v & 0xFFFF) + tx_bytes / 16;
    if (pending < 0 || tx < 0 || tx > 0xFFFF || tx_bytes % 16 != 0) {
        fprintf(stderr, "tc_sim: mbarrier misuse (pending %lld, tx %lld)\n", pending, tx);
        abort();
    }
    uint64_t phase = v >> 63;
    if (pending == 0 && tx == 0) phase ^= 1, pending = expected;  // the phase completes
    *bar = phase << 63 | (uint64_t)pending << 32 | (uint64_t)expected << 16 | (uint64_t)tx;
}
inline void mbar_init(uint64_t* bar, int count) {
    std::lock_guard<std::mutex> g(sim_mbar_mu);
    *bar = (uint64_t)count << 32 | (uint64_t)count << 16;
}
inline void fence_mbar_init() {}
inline void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) { sim_mbar_step(bar, 1, bytes); }
inline void mbar_arrive(uint64_t* bar) { sim_mbar_step(bar, 1, 0); }
inline bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
    uint64_t v;
    {
        std::lock_guard<std::mutex> g(sim_mbar_mu);
        v = *bar;
    }
    if ((v >> 63) != parity) return true;  // the phase of that parity has completed
    std::this_thread::yield();
    return false;
}
inline bool mbar_try_wait_a(uint32_t a, uint32_t parity) { return mbar_try_wait(static_cast<uint64_t*>(sim_smem_at(a)), parity); }
inline void mbar_arrive_a(uint32_t a) { mbar_arrive(static_cast<uint64_t*>(sim_smem_at(a))); }
// tma_load_2d: the box at (c0, c1) copied at once (a valid schedule of the copy), zero outside the matrix,
// 128-byte swizzled, then its bytes completed on bar.
inline void tma_load_2d(void* dst, const TmaMap* map, uint64_t* bar, int c0, int c1) {
    const uint16_t* src = reinterpret_cast<const uint16_t*>((uintptr_t)map->v[0]);
    const long long rows = (long long)map->v[1], cols = (long long)map->v[2];
    const int br = (int)map->v[3], bc = (int)map->v[4];
    if (map->v[5] != 1 || bc * 2 != 128) {
        fprintf(stderr, "tc_sim: only 128-byte-swizzled boxes of 128-byte rows are simulated\n");
        abort();
    }
    const uint32_t d0 = smem_addr(dst);
    char* const sm = reinterpret_cast<char*>(sim_block.smem);
    for (int r = 0; r < br; r++)
        for (int c = 0; c < bc; c++) {
            const long long gr = (long long)c1 + r, gc = (long long)c0 + c;
            const uint16_t v = (gr >= 0 && gr < rows && gc >= 0 && gc < cols) ? src[gr * cols + gc] : (uint16_t)0;
            std::memcpy(sm + sim_sw128(d0 + (uint32_t)(r * 128 + 2 * c)), &v, 2);
        }
    sim_mbar_step(bar, 0, -(long long)br * bc * 2);
}
template <int N>
inline void wgmma_wait() {}
template <int R>
inline void setmaxnreg_dec() {}
template <int R>
inline void setmaxnreg_inc() {}
// tma_clock: nanoseconds, so that a simulated deadlock traps after about 20 s
inline long long tma_clock() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline void __trap() {
    fprintf(stderr, "tc_sim: __trap (an mbarrier wait timed out: the pipeline deadlocks)\n");
    abort();
}

// sim_wgmma_ss: wgmma m64nNk16 with A and B from shared memory through 128-byte-swizzled K-major descriptors
// (layout type 1): element (r, k) at start + (r/8)·SBO + (r%8)·128 + 2k bytes, swizzled; accumulators as sim_wgmma.
inline void sim_desc_read(uint16_t* out, uint64_t desc, int rows) {
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, sbo = (uint32_t)(desc >> 32 & 0x3FFF) << 4;
    if ((desc >> 62) != 1 || (desc >> 49 & 7) != 0) {
        fprintf(stderr, "tc_sim: descriptor %#llx: only the 128-byte swizzle with base offset 0 is simulated\n",
                (unsigned long long)desc);
        abort();
    }
    const char* base = reinterpret_cast<const char*>(sim_block.smem);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < 16; k++)
            std::memcpy(&out[r * 16 + k], base + sim_sw128(start + (r / 8) * sbo + (r % 8) * 128 + 2 * k), 2);
}
template <int N>
inline void sim_wgmma_ss(float (&d)[N / 8][4], uint64_t adesc, uint64_t bdesc) {
    SimWarpgroup& wg = sim_block.groups[threadIdx.x / 128];
    const int t = threadIdx.x % 128;
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) wg.d[t][4 * j + e] = d[j][e];
    wg.bar->arrive_and_wait();
    static thread_local uint16_t A[64 * 16], Bt[256 * 16];
    static thread_local float C[64][256];
    for (int T = 0; T < 128; T++) {
        const int w = T / 32, L = T % 32, g = L / 4, q = L % 4, r = 16 * w + g;
        for (int j = 0; j < N / 8; j++) {
            C[r][8 * j + 2 * q] = wg.d[T][4 * j], C[r][8 * j + 2 * q + 1] = wg.d[T][4 * j + 1];
            C[r + 8][8 * j + 2 * q] = wg.d[T][4 * j + 2], C[r + 8][8 * j + 2 * q + 1] = wg.d[T][4 * j + 3];
        }
    }
    sim_desc_read(A, adesc, 64);
    sim_desc_read(Bt, bdesc, N);
    wg.bar->arrive_and_wait();
    const int w = t / 32, L = t % 32, g = L / 4, q = L % 4;
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++) {
            const int row = 16 * w + g + 8 * (e >> 1), col = 8 * j + 2 * q + (e & 1);
            d[j][e] = mma_dot16(&A[row * 16], &Bt[col * 16], C[row][col]);
        }
}
inline void wgmma_ss_m64n256(float (&d)[32][4], uint64_t a, uint64_t b) { sim_wgmma_ss<256>(d, a, b); }
inline void wgmma_ss_m64n128(float (&d)[16][4], uint64_t a, uint64_t b) { sim_wgmma_ss<128>(d, a, b); }
