// Deterministic collectives over NVLink peer loads (no NVLink multicast, no `multimem`).
//
// One process drives every GPU. Rank r owns a scratch buffer and a flag array in its own device memory; with
// peer access enabled, every rank's kernel reads its peers' scratch directly (UVA pointers in Args).
//
//   all-reduce, one-shot   copy in -> barrier 0 -> out[i] = tree(scratch_0[i], ..., scratch_{n-1}[i])
//   all-reduce, two-phase  copy in -> barrier 0 -> reduce own chunk into scratch and out -> barrier 1 ->
//                          copy every peer's reduced chunk into out
//   reduce-scatter         copy in -> barrier 0 -> out = tree over ranks of chunk `rank`
//   all-gather             copy in to chunk `rank` -> barrier 0 -> out[chunk c] = scratch_c[chunk c]
//
// Every output element is the same fixed pairwise tree over ranks (docs/arithmetic.md), computed from the same
// inputs whichever kernel runs, so every rank gets identical bits and the one-shot/two-phase switch changes none.
//
// Synchronisation is per block: block b of rank r only ever reads, on a peer, the elements that block b of that
// peer wrote (the same partition of the same sizes on every rank), so a barrier between the two blocks b suffices;
// no grid-wide barrier is needed. Scratch is double-buffered by call parity, which makes one barrier per phase
// enough: a rank that passed call e's barrier knows every peer finished call e-1, the last reader of the half it
// writes at call e+1. A peer that never arrives makes the waiting thread give up after timeout_ns of
// %globaltimer and write an error word, so the kernel ends and the host reports a timeout instead of hanging.

#include <stdint.h>

#define NVLS_MAX_RANKS 8
#define NVLS_MAX_BLOCKS 256
#define NVLS_THREADS 512

// Must match nvls/gpu_args.go byte for byte (192 bytes).
struct Args {
    uint64_t scratch[NVLS_MAX_RANKS];  // every rank's scratch half for this call (device pointers, UVA)
    uint64_t flags[NVLS_MAX_RANKS];    // every rank's flag array: [phase 2][source rank 8][block 256] u32
    uint64_t in;                       // this rank's input (may equal its scratch: the copy is then skipped)
    uint64_t out;                      // this rank's output (never its scratch)
    uint64_t err;                      // this rank's error word (u32), 0 while all is well
    uint64_t n;                        // elements in the whole message (all-reduce), or per rank times nranks
    uint64_t chunk;                    // elements per chunk; chunk c is [c*chunk, min((c+1)*chunk, n))
    uint64_t timeout_ns;               // how long a block waits for a peer before giving up
    uint32_t rank, nranks, epoch, pad; // epoch: this call's number, the same on every rank, counting from 1
};

// Error word: 0x4E560000 | phase << 8 | peer that did not arrive.
#define NVLS_ERR_TIMEOUT 0x4E560000u

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint32_t* flag_slot(uint64_t base, uint32_t phase, uint32_t src, uint32_t block) {
    return (uint32_t*)base + ((phase * NVLS_MAX_RANKS + src) * NVLS_MAX_BLOCKS + block);
}

// Block-level barrier with every peer's block of the same index. Returns false when a peer did not arrive in
// time (the error word is then set and the block must stop).
__device__ bool block_barrier(const Args& a, uint32_t phase) {
    int bad = 0;
    const uint32_t t = threadIdx.x;
    __syncthreads();  // this block's writes happen before the releases below (release is cumulative)
    if (t < a.nranks && t != a.rank) {
        st_release_sys(flag_slot(a.flags[t], phase, a.rank, blockIdx.x), a.epoch);
        const uint32_t* mine = flag_slot(a.flags[a.rank], phase, t, blockIdx.x);
        const uint64_t start = globaltimer();
        uint64_t spins = 0;
        // epochs are compared modulo 2^32: a peer may already be one call ahead
        while ((int32_t)(ld_acquire_sys(mine) - a.epoch) < 0) {
            if ((++spins & 255) == 0 &&
                (globaltimer() - start > a.timeout_ns || spins > (1ull << 40))) {  // bounded even if the timer stalls
                atomicCAS((uint32_t*)a.err, 0u, NVLS_ERR_TIMEOUT | (phase << 8) | t);
                bad = 1;
                break;
            }
        }
    }
    return !__syncthreads_or(bad);  // the acquires above happen before every thread's later peer loads
}

// ---- element types: f32, and bf16 held as uint16 (reduced in f32, rounded once as round_dt BF16, §1) ----

struct F32 {
    typedef float E;
    typedef float4 Vec;
    static constexpr int V = 4;
    __device__ static void unpack(const Vec& x, float* v) { v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w; }
    __device__ static Vec pack(const float* v) { return make_float4(v[0], v[1], v[2], v[3]); }
    __device__ static float get(E x) { return x; }
    __device__ static E put(float v) { return v; }
};

__device__ __forceinline__ uint32_t bf16_round(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // every NaN -> the canonical quiet NaN (round_dt, §1)
    u += 0x7fffu + ((u >> 16) & 1u);                       // round to nearest, ties to even
    return u >> 16;
}

struct BF16 {
    typedef uint16_t E;
    typedef uint4 Vec;  // 8 bf16 values
    static constexpr int V = 8;
    __device__ static void unpack(const Vec& x, float* v) {
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
    __device__ static Vec pack(const float* v) {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = bf16_round(v[2 * i]) | (bf16_round(v[2 * i + 1]) << 16);
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
    __device__ static float get(E x) { return __uint_as_float((uint32_t)x << 16); }
    __device__ static E put(float v) { return (E)bf16_round(v); }
};

// ---- the reduction: fixed pairwise tree over ranks (docs/arithmetic.md) ----

#define OP_SUM 0
#define OP_MAX 1

// docs/arithmetic.md §12: max(a, b) = NaN if either is NaN, else (b > a ? b : a). Not symmetric in the sign of
// zero (max(-0, +0) = -0), so it too follows the tree order exactly.
__device__ __forceinline__ float max_tree(float a, float b) {
    if (a != a) return a;
    if (b != b) return b;
    return b > a ? b : a;
}

template <int OP>
__device__ __forceinline__ float combine(float a, float b) {
    if (OP == OP_SUM) return __fadd_rn(a, b);  // never contracted into anything
    return max_tree(a, b);
}

// docs/arithmetic.md §12: T(lo, hi) = T(lo, mid) ⊕ T(mid, hi), mid = (lo + hi) / 2, over ranks [LO, LO+N), N a
// power of two: 2 -> (v0⊕v1), 4 -> ((v0⊕v1)⊕(v2⊕v3)), 8 -> ((v0⊕v1)⊕(v2⊕v3))⊕((v4⊕v5)⊕(v6⊕v7)).
template <int OP, int LO, int N>
struct Tree {
    static_assert((N & (N - 1)) == 0, "the rank count must be a power of two");
    __device__ static float sum(const float* v) {
        return combine<OP>(Tree<OP, LO, N / 2>::sum(v), Tree<OP, LO + N / 2, N / 2>::sum(v));
    }
};
template <int OP, int LO>
struct Tree<OP, LO, 1> {
    __device__ static float sum(const float* v) { return v[LO]; }
};

// ---- block-partitioned loops: pack p of a range goes to block p / T % G; every rank uses the same partition ----

// dst[begin+i] = src[begin+i] for this block's share of [begin, begin+len). VEC: 16-byte packs (begin, len and
// the pointers aligned) or single elements.
template <class T, bool VEC>
__device__ void copy_range(uint64_t dst, uint64_t src, uint64_t begin, uint64_t len) {
    typedef typename T::E E;
    typedef typename T::Vec Vec;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        const Vec* s = (const Vec*)((const E*)src + begin);
        Vec* d = (Vec*)((E*)dst + begin);
        const uint64_t packs = len / T::V;
        for (uint64_t p = first; p < packs; p += stride) d[p] = s[p];
        const uint64_t tail = packs * T::V;  // the last len % V elements: block 0, one each
        if (first < len - tail) ((E*)dst + begin)[tail + first] = ((const E*)src + begin)[tail + first];
    } else {
        const E* s = (const E*)src + begin;
        E* d = (E*)dst + begin;
        for (uint64_t p = first; p < len; p += stride) d[p] = s[p];
    }
}

// out1[begin+i] (and out2 unless 0) = tree over ranks of scratch_j[begin+i], for this block's share.
// U packs per thread per iteration: all U*NR peer loads are issued before the first add, to keep NVLink busy.
template <class T, int NR, int OP, bool VEC>
__device__ void reduce_range(const Args& a, uint64_t out1, uint64_t out2, uint64_t begin, uint64_t len) {
    typedef typename T::E E;
    typedef typename T::Vec Vec;
    constexpr int U = NR <= 2 ? 4 : (NR <= 4 ? 2 : 1);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const E* src[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) src[j] = (const E*)a.scratch[j] + begin;
    if (VEC) {
        const uint64_t packs = len / T::V;
        Vec* d1 = (Vec*)((E*)out1 + begin);
        Vec* d2 = out2 ? (Vec*)((E*)out2 + begin) : nullptr;
        for (uint64_t p0 = first; p0 < packs; p0 += stride * U) {
            Vec x[U][NR];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint64_t p = p0 + u * stride;
                if (p < packs) {
#pragma unroll
                    for (int j = 0; j < NR; j++) x[u][j] = ((const Vec*)src[j])[p];
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint64_t p = p0 + u * stride;
                if (p < packs) {
                    float v[NR][T::V], r[T::V];
#pragma unroll
                    for (int j = 0; j < NR; j++) T::unpack(x[u][j], v[j]);
#pragma unroll
                    for (int k = 0; k < T::V; k++) {
                        float col[NR];
#pragma unroll
                        for (int j = 0; j < NR; j++) col[j] = v[j][k];
                        r[k] = Tree<OP, 0, NR>::sum(col);
                    }
                    const Vec y = T::pack(r);
                    d1[p] = y;
                    if (d2) d2[p] = y;
                }
            }
        }
        const uint64_t tail = packs * T::V;  // the last len % V elements: block 0, one each
        if (first < len - tail) {
            const uint64_t p = tail + first;
            float col[NR];
#pragma unroll
            for (int j = 0; j < NR; j++) col[j] = T::get(src[j][p]);
            const E y = T::put(Tree<OP, 0, NR>::sum(col));
            ((E*)out1 + begin)[p] = y;
            if (out2) ((E*)out2 + begin)[p] = y;
        }
    } else {
        E* d1 = (E*)out1 + begin;
        E* d2 = out2 ? (E*)out2 + begin : nullptr;
        for (uint64_t p = first; p < len; p += stride) {
            float col[NR];
#pragma unroll
            for (int j = 0; j < NR; j++) col[j] = T::get(src[j][p]);
            const E y = T::put(Tree<OP, 0, NR>::sum(col));
            d1[p] = y;
            if (d2) d2[p] = y;
        }
    }
}

__device__ __forceinline__ uint64_t chunk_begin(const Args& a, uint32_t c) {
    const uint64_t b = (uint64_t)c * a.chunk;
    return b < a.n ? b : a.n;
}
__device__ __forceinline__ uint64_t chunk_len(const Args& a, uint32_t c) {
    const uint64_t b = chunk_begin(a, c), e = b + a.chunk;
    return (e < a.n ? e : a.n) - b;
}

// Copies each chunk separately so that a chunk's packs land on the same blocks that later read it.
template <class T, int NR, bool VEC>
__device__ void copy_in_chunks(const Args& a) {
    const uint64_t mine = a.scratch[a.rank];
    if (a.in == mine) return;
    for (uint32_t c = 0; c < NR; c++) copy_range<T, VEC>(mine, a.in, chunk_begin(a, c), chunk_len(a, c));
}

// ---- the collectives ----

template <class T, int NR, int OP, bool VEC>
__device__ void allreduce_oneshot(const Args& a) {
    const uint64_t mine = a.scratch[a.rank];
    if (a.in != mine) copy_range<T, VEC>(mine, a.in, 0, a.n);
    if (!block_barrier(a, 0)) return;
    reduce_range<T, NR, OP, VEC>(a, a.out, 0, 0, a.n);
}

template <class T, int NR, int OP, bool VEC>
__device__ void allreduce_twophase(const Args& a) {
    copy_in_chunks<T, NR, VEC>(a);
    if (!block_barrier(a, 0)) return;
    const uint64_t b = chunk_begin(a, a.rank), len = chunk_len(a, a.rank);
    reduce_range<T, NR, OP, VEC>(a, a.scratch[a.rank], a.out, b, len);  // peers read it from scratch in phase 2
    if (!block_barrier(a, 1)) return;
    for (uint32_t c = 0; c < NR; c++) {
        if (c != a.rank) copy_range<T, VEC>(a.out, a.scratch[c], chunk_begin(a, c), chunk_len(a, c));
    }
}

// in holds n = NR*chunk elements; out (chunk elements) gets the tree over ranks of chunk `rank`.
template <class T, int NR, int OP, bool VEC>
__device__ void reducescatter(const Args& a) {
    copy_in_chunks<T, NR, VEC>(a);
    if (!block_barrier(a, 0)) return;
    const uint64_t b = chunk_begin(a, a.rank);
    // reduce_range indexes its outputs from `begin`: shift out back by it (unsigned arithmetic, undone there)
    reduce_range<T, NR, OP, VEC>(a, a.out - b * sizeof(typename T::E), 0, b, chunk_len(a, a.rank));
}

// in holds chunk elements; out (n = NR*chunk) gets every rank's in, in rank order.
template <class T, int NR, bool VEC>
__device__ void allgather(const Args& a) {
    const uint64_t mine = a.scratch[a.rank];
    const uint64_t b = chunk_begin(a, a.rank);
    typedef typename T::E E;
    if (a.in != mine + b * sizeof(E)) copy_range<T, VEC>(mine, a.in - b * sizeof(E), b, chunk_len(a, a.rank));
    if (!block_barrier(a, 0)) return;
    for (uint32_t c = 0; c < NR; c++) copy_range<T, VEC>(a.out, a.scratch[c], chunk_begin(a, c), chunk_len(a, c));
}

// ---- entry points: nvls_<collective>_<type>_<ranks>[_v] (v: 16-byte packs) ----

#define NVLS_AR(T, t, NR, OP, op)                                                                                 \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_ar1_##op##_##t##_##NR(Args a) {             \
        allreduce_oneshot<T, NR, OP, false>(a);                                                                    \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_ar1_##op##_##t##_##NR##_v(Args a) {         \
        allreduce_oneshot<T, NR, OP, true>(a);                                                                     \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_ar2_##op##_##t##_##NR(Args a) {             \
        allreduce_twophase<T, NR, OP, false>(a);                                                                   \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_ar2_##op##_##t##_##NR##_v(Args a) {         \
        allreduce_twophase<T, NR, OP, true>(a);                                                                    \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_rs_##op##_##t##_##NR(Args a) {              \
        reducescatter<T, NR, OP, false>(a);                                                                        \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_rs_##op##_##t##_##NR##_v(Args a) {          \
        reducescatter<T, NR, OP, true>(a);                                                                         \
    }

#define NVLS_AG(T, t, NR)                                                                                         \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_ag_##t##_##NR(Args a) {                     \
        allgather<T, NR, false>(a);                                                                                \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) nvls_ag_##t##_##NR##_v(Args a) {                 \
        allgather<T, NR, true>(a);                                                                                 \
    }

#define NVLS_RANKS(NR)              \
    NVLS_AR(F32, f32, NR, OP_SUM, sum) \
    NVLS_AR(F32, f32, NR, OP_MAX, max) \
    NVLS_AR(BF16, bf16, NR, OP_SUM, sum) \
    NVLS_AG(F32, f32, NR)           \
    NVLS_AG(BF16, bf16, NR)

// One PTX module per rank count (nvcc -DNVLS_NR=2 ...): a process loads only the one it needs, so the driver
// compiles 22 kernels at load, not 88.
#ifndef NVLS_NR
#error "compile with -DNVLS_NR=<number of ranks: 1, 2, 4 or 8>"
#endif
NVLS_RANKS(NVLS_NR)
