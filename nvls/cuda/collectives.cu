// Deterministic collectives over NVLink peer memory: plain loads and stores to the other GPUs' buffers (no
// NVLink multicast, no `multimem`).
//
// One process drives every GPU. Rank r owns a scratch buffer and a flag array in its own device memory; with
// peer access enabled, every rank's kernel reads (push: writes) its peers' memory directly (UVA pointers).
//
//   all-reduce, one-shot   copy in -> barrier 0 -> out[i] = tree(scratch_0[i], ..., scratch_{n-1}[i])
//   all-reduce, push       write in into every peer's scratch -> barrier 0 -> out[i] = tree(local copies)
//   all-reduce, two-phase  barrier 0 (input pointers exchanged) -> reduce own chunk of every rank's input
//                          into scratch -> barrier 1 -> copy every rank's reduced chunk into out
//   reduce-scatter         copy in -> barrier 0 -> out = tree over ranks of chunk `rank`
//   all-gather             copy in to chunk `rank` -> barrier 0 -> out[chunk c] = scratch_c[chunk c]
//
// Every output element is the same fixed pairwise tree over ranks (docs/arithmetic.md §12), computed from the same
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

// Must match kernelArgs in nvls/gpu_launch.go byte for byte (192 bytes; TestKernelArgsLayout).
struct Args {
    uint64_t scratch[NVLS_MAX_RANKS];  // every rank's scratch half for this call (device pointers, UVA)
    uint64_t flags[NVLS_MAX_RANKS];    // every rank's flag array: [phase 2][source rank 8][block 256] u64
    uint64_t in;                       // this rank's input (may equal its scratch: the copy is then skipped)
    uint64_t out;                      // this rank's output (never its scratch)
    uint64_t err;                      // this rank's error word (u32), 0 while all is well
    uint64_t n;                        // elements in the whole message (all-reduce), or per rank times nranks
    uint64_t chunk;                    // elements per chunk; chunk c is [c*chunk, min((c+1)*chunk, n))
    uint64_t timeout_ns;               // how long a block waits for a peer before giving up
    uint32_t rank, nranks, epoch;      // epoch: this call's number, the same on every rank, counting from 1
    uint32_t sig;                      // hash of (kernel, n, chunk): ranks that disagree stop with an error
};

// Error word: code | phase << 8 | the peer concerned.
#define NVLS_ERR_TIMEOUT 0x4E560000u   // the peer did not arrive in time
#define NVLS_ERR_MISMATCH 0x4E570000u  // the peer arrived at this call with another collective or length

__device__ __forceinline__ void st_release_sys(uint64_t* p, uint64_t v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint64_t globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A flag holds (sig << 32 | epoch) of the last call at which its source block arrived.
__device__ __forceinline__ uint64_t* flag_slot(uint64_t base, uint32_t phase, uint32_t src, uint32_t block) {
    return (uint64_t*)base + ((phase * NVLS_MAX_RANKS + src) * NVLS_MAX_BLOCKS + block);
}

// Where rank src publishes its input pointer to the rank owning base (two-phase all-reduce), by call parity.
// The control block is [flags][error word, padding to 128 bytes][pointer slots 2 × NVLS_MAX_RANKS].
#define NVLS_FLAG_BYTES (2 * NVLS_MAX_RANKS * NVLS_MAX_BLOCKS * 8)
__device__ __forceinline__ uint64_t* ptr_slot(uint64_t base, uint32_t epoch, uint32_t src) {
    return (uint64_t*)(base + NVLS_FLAG_BYTES + 128) + (epoch & 1) * NVLS_MAX_RANKS + src;
}

// Block-level barrier with every peer's block of the same index. Returns false when a peer did not arrive in
// time, arrived with another call, or another block of this kernel failed (the error word is then set and the
// block must stop).
// With peer_in (shared memory), each rank also publishes a.in, and peer_in[j] gets rank j's input pointer.
__device__ bool block_barrier(const Args& a, uint32_t phase, uint64_t* peer_in = nullptr) {
    int bad = 0;
    const uint32_t t = threadIdx.x;
    __syncthreads();  // this block's writes happen before the releases below (release is cumulative)
    if (peer_in && t == a.rank) peer_in[t] = a.in;
    if (t < a.nranks && t != a.rank) {
        if (peer_in) {  // the same value from every block: ordered before the flag by the release below
            asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(ptr_slot(a.flags[t], a.epoch, a.rank)), "l"(a.in)
                         : "memory");
        }
        st_release_sys(flag_slot(a.flags[t], phase, a.rank, blockIdx.x), ((uint64_t)a.sig << 32) | a.epoch);
        const uint64_t* mine = flag_slot(a.flags[a.rank], phase, t, blockIdx.x);
        const volatile uint32_t* err = (const volatile uint32_t*)a.err;
        const uint64_t start = globaltimer();
        uint64_t spins = 0;
        for (;;) {
            const uint64_t f = ld_acquire_sys(mine);
            const int32_t ahead = (int32_t)((uint32_t)f - a.epoch);  // modulo 2^32: a peer may be a call ahead
            if (ahead == 0 && (uint32_t)(f >> 32) != a.sig) {
                atomicCAS((uint32_t*)a.err, 0u, NVLS_ERR_MISMATCH | (phase << 8) | t);
                bad = 1;
                break;
            }
            if (ahead >= 0) {
                if (peer_in) peer_in[t] = *(volatile const uint64_t*)ptr_slot(a.flags[a.rank], a.epoch, t);
                break;
            }
            if ((++spins & 255) == 0) {
                if (*err != 0) {  // another block gave up: stop too, so the kernel ends now
                    bad = 1;
                    break;
                }
                // a spin takes well over 1 ns, so spins > timeout_ns bounds the wait even if the timer stalled
                if (globaltimer() - start > a.timeout_ns || spins > a.timeout_ns) {
                    atomicCAS((uint32_t*)a.err, 0u, NVLS_ERR_TIMEOUT | (phase << 8) | t);
                    bad = 1;
                    break;
                }
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

// How a range is split and accessed. The partition (packs or elements) must be the same on every rank, so it
// depends only on the sizes; the alignment of this rank's own in/out pointers only picks the access width.
#define MODE_ELEM 0    // partition by elements (a chunk size that is not a whole number of 16-byte packs)
#define MODE_PACK 1    // partition by 16-byte packs; this rank's in and out are 16-byte aligned
#define MODE_PACK_U 2  // partition by 16-byte packs; in or out is not aligned: element-wise access to them

template <class T, int MODE>
__device__ __forceinline__ typename T::Vec load_pack(const typename T::E* p, uint64_t i) {
    typedef typename T::Vec Vec;
    if constexpr (MODE == MODE_PACK) {
        return ((const Vec*)p)[i];
    } else {
        union { Vec v; typename T::E e[T::V]; } u;
#pragma unroll
        for (int k = 0; k < T::V; k++) u.e[k] = p[i * T::V + k];
        return u.v;
    }
}

template <class T, int MODE>
__device__ __forceinline__ void store_pack(typename T::E* p, uint64_t i, const typename T::Vec& v) {
    typedef typename T::Vec Vec;
    if constexpr (MODE == MODE_PACK) {
        ((Vec*)p)[i] = v;
    } else {
        union { Vec v; typename T::E e[T::V]; } u;
        u.v = v;
#pragma unroll
        for (int k = 0; k < T::V; k++) p[i * T::V + k] = u.e[k];
    }
}

// dst[begin+i] = src[begin+i] for this block's share of [begin, begin+len).
template <class T, int MODE>
__device__ void copy_range(uint64_t dst, uint64_t src, uint64_t begin, uint64_t len) {
    typedef typename T::E E;
    typedef typename T::Vec Vec;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (MODE != MODE_ELEM) {
        const E* s = (const E*)src + begin;
        E* d = (E*)dst + begin;
        const uint64_t packs = len / T::V;
        for (uint64_t p = first; p < packs; p += stride) store_pack<T, MODE>(d, p, load_pack<T, MODE>(s, p));
        const uint64_t tail = packs * T::V;  // the last len % V elements: block 0, one each
        if (first < len - tail) ((E*)dst + begin)[tail + first] = ((const E*)src + begin)[tail + first];
    } else {
        const E* s = (const E*)src + begin;
        E* d = (E*)dst + begin;
        for (uint64_t p = first; p < len; p += stride) d[p] = s[p];
    }
}

// out1[begin+i] (and out2 unless 0) = tree over ranks j of srcs[j][begin+i], for this block's share. srcs are
// the ranks' scratch (16-byte aligned) or their inputs (aligned says whether all of them are).
// U packs per thread per iteration: all U*NR peer loads are issued before the first add, to keep NVLink busy.
template <class T, int NR, int OP, int MODE>
__device__ void reduce_range(const uint64_t* srcs, bool aligned, uint64_t out1, uint64_t out2, uint64_t begin,
                             uint64_t len) {
    typedef typename T::E E;
    typedef typename T::Vec Vec;
    constexpr int U = NR <= 2 ? 4 : (NR <= 4 ? 2 : 1);
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const E* src[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) src[j] = (const E*)srcs[j] + begin;
    if (MODE != MODE_ELEM) {
        const uint64_t packs = len / T::V;
        E* d1 = (E*)out1 + begin;
        E* d2 = out2 ? (E*)out2 + begin : nullptr;
        for (uint64_t p0 = first; p0 < packs; p0 += stride * U) {
            Vec x[U][NR];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint64_t p = p0 + u * stride;
                if (p < packs) {
#pragma unroll
                    for (int j = 0; j < NR; j++) {
                        x[u][j] = aligned ? ((const Vec*)src[j])[p] : load_pack<T, MODE_PACK_U>(src[j], p);
                    }
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
                    store_pack<T, MODE>(d1, p, y);
                    if (d2) store_pack<T, MODE>(d2, p, y);
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
template <class T, int NR, int MODE>
__device__ void copy_in_chunks(const Args& a) {
    const uint64_t mine = a.scratch[a.rank];
    if (a.in == mine) return;
    for (uint32_t c = 0; c < NR; c++) copy_range<T, MODE>(mine, a.in, chunk_begin(a, c), chunk_len(a, c));
}

// ---- the collectives ----

template <class T, int NR, int OP, int MODE>
__device__ void allreduce_oneshot(const Args& a) {
    const uint64_t mine = a.scratch[a.rank];
    if (a.in != mine) copy_range<T, MODE>(mine, a.in, 0, a.n);
    if (!block_barrier(a, 0)) return;
    reduce_range<T, NR, OP, MODE>(a.scratch, true, a.out, 0, 0, a.n);
}

// One-shot by pushes: every rank writes its input into slot `rank` of every peer's scratch (slot c holds
// chunk elements at c*chunk, chunk = n rounded up to a pack), then the barrier, then each rank reduces from
// its own memory: its input and the peers' slots. Remote stores are posted (no round trip to wait for), and
// nothing is copied locally; in == out is safe since no peer reads this rank's in or out.
template <class T, int NR, int OP, int MODE>
__device__ void allreduce_push(const Args& a) {
    typedef typename T::E E;
    typedef typename T::Vec Vec;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const E* in = (const E*)a.in;
    E* out = (E*)a.out;
    const uint64_t n = a.n, packs = MODE == MODE_ELEM ? 0 : n / T::V, tail = packs * T::V;
    E* slot[NR];  // where this rank's values go on each peer; slot[rank]: where the peers' are read from
#pragma unroll
    for (int j = 0; j < NR; j++) slot[j] = (E*)a.scratch[j] + (uint64_t)a.rank * a.chunk;
    if constexpr (MODE != MODE_ELEM) {
        for (uint64_t p = first; p < packs; p += stride) {
            const Vec v = load_pack<T, MODE>(in, p);
#pragma unroll
            for (int j = 0; j < NR; j++) {
                if (j != (int)a.rank) ((Vec*)slot[j])[p] = v;  // slots are 16-byte aligned
            }
        }
    }
    for (uint64_t i = tail + first; i < n; i += stride) {  // elements past the packs (all of them in MODE_ELEM)
#pragma unroll
        for (int j = 0; j < NR; j++) {
            if (j != (int)a.rank) slot[j][i] = in[i];
        }
    }
    if (!block_barrier(a, 0)) return;
    const E* from[NR];  // rank j's values, all in this rank's memory
#pragma unroll
    for (int j = 0; j < NR; j++) from[j] = j == (int)a.rank ? in : (const E*)a.scratch[a.rank] + (uint64_t)j * a.chunk;
    if constexpr (MODE != MODE_ELEM) {
        for (uint64_t p = first; p < packs; p += stride) {
            Vec x[NR];
#pragma unroll
            for (int j = 0; j < NR; j++) x[j] = j == (int)a.rank ? load_pack<T, MODE>(in, p) : ((const Vec*)from[j])[p];
            float v[NR][T::V], r[T::V];
#pragma unroll
            for (int j = 0; j < NR; j++) T::unpack(x[j], v[j]);
#pragma unroll
            for (int k = 0; k < T::V; k++) {
                float col[NR];
#pragma unroll
                for (int j = 0; j < NR; j++) col[j] = v[j][k];
                r[k] = Tree<OP, 0, NR>::sum(col);
            }
            store_pack<T, MODE>(out, p, T::pack(r));
        }
    }
    for (uint64_t i = tail + first; i < n; i += stride) {
        float col[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) col[j] = T::get(from[j][i]);
        out[i] = T::put(Tree<OP, 0, NR>::sum(col));
    }
}

// Two-phase, without copying the input: barrier 0 exchanges the ranks' input pointers; each rank reduces its
// chunk reading every rank's input directly into its scratch; barrier 1 (every rank is done reading the inputs,
// so in == out is safe); each rank copies every reduced chunk into out.
template <class T, int NR, int OP, int MODE>
__device__ void allreduce_twophase(const Args& a) {
    __shared__ uint64_t peer_in[NVLS_MAX_RANKS];
    if (!block_barrier(a, 0, peer_in)) return;
    bool aligned = true;
#pragma unroll
    for (int j = 0; j < NR; j++) aligned = aligned && (peer_in[j] & 15) == 0;
    const uint64_t b = chunk_begin(a, a.rank), len = chunk_len(a, a.rank);
    reduce_range<T, NR, OP, MODE>(peer_in, aligned, a.scratch[a.rank], 0, b, len);  // peers read it in phase 2
    if (!block_barrier(a, 1)) return;
    for (uint32_t c = 0; c < NR; c++) copy_range<T, MODE>(a.out, a.scratch[c], chunk_begin(a, c), chunk_len(a, c));
}

// in holds n = NR*chunk elements; out (chunk elements) gets the tree over ranks of chunk `rank`.
template <class T, int NR, int OP, int MODE>
__device__ void reducescatter(const Args& a) {
    copy_in_chunks<T, NR, MODE>(a);
    if (!block_barrier(a, 0)) return;
    const uint64_t b = chunk_begin(a, a.rank);
    // reduce_range indexes its outputs from `begin`: shift out back by it (unsigned arithmetic, undone there)
    reduce_range<T, NR, OP, MODE>(a.scratch, true, a.out - b * sizeof(typename T::E), 0, b, chunk_len(a, a.rank));
}

// in holds chunk elements; out (n = NR*chunk) gets every rank's in, in rank order.
template <class T, int NR, int MODE>
__device__ void allgather(const Args& a) {
    const uint64_t mine = a.scratch[a.rank];
    const uint64_t b = chunk_begin(a, a.rank);
    typedef typename T::E E;
    if (a.in != mine + b * sizeof(E)) copy_range<T, MODE>(mine, a.in - b * sizeof(E), b, chunk_len(a, a.rank));
    if (!block_barrier(a, 0)) return;
    for (uint32_t c = 0; c < NR; c++) copy_range<T, MODE>(a.out, a.scratch[c], chunk_begin(a, c), chunk_len(a, c));
}

// ---- entry points: nvls_<collective>[_<op>]_<type>_<ranks>[_v|_vu] (MODE_ELEM, MODE_PACK, MODE_PACK_U) ----

#define NVLS_KERNEL(name, call) \
    extern "C" __global__ void __launch_bounds__(NVLS_THREADS) name(Args a) { call; }

#define NVLS_AR(T, t, NR, OP, op)                                                                      \
    NVLS_KERNEL(nvls_ar1_##op##_##t##_##NR, (allreduce_oneshot<T, NR, OP, MODE_ELEM>(a)))              \
    NVLS_KERNEL(nvls_ar1_##op##_##t##_##NR##_v, (allreduce_oneshot<T, NR, OP, MODE_PACK>(a)))          \
    NVLS_KERNEL(nvls_ar1_##op##_##t##_##NR##_vu, (allreduce_oneshot<T, NR, OP, MODE_PACK_U>(a)))       \
    NVLS_KERNEL(nvls_arp_##op##_##t##_##NR, (allreduce_push<T, NR, OP, MODE_ELEM>(a)))                 \
    NVLS_KERNEL(nvls_arp_##op##_##t##_##NR##_v, (allreduce_push<T, NR, OP, MODE_PACK>(a)))             \
    NVLS_KERNEL(nvls_arp_##op##_##t##_##NR##_vu, (allreduce_push<T, NR, OP, MODE_PACK_U>(a)))          \
    NVLS_KERNEL(nvls_ar2_##op##_##t##_##NR, (allreduce_twophase<T, NR, OP, MODE_ELEM>(a)))             \
    NVLS_KERNEL(nvls_ar2_##op##_##t##_##NR##_v, (allreduce_twophase<T, NR, OP, MODE_PACK>(a)))         \
    NVLS_KERNEL(nvls_ar2_##op##_##t##_##NR##_vu, (allreduce_twophase<T, NR, OP, MODE_PACK_U>(a)))      \
    NVLS_KERNEL(nvls_rs_##op##_##t##_##NR, (reducescatter<T, NR, OP, MODE_ELEM>(a)))                   \
    NVLS_KERNEL(nvls_rs_##op##_##t##_##NR##_v, (reducescatter<T, NR, OP, MODE_PACK>(a)))               \
    NVLS_KERNEL(nvls_rs_##op##_##t##_##NR##_vu, (reducescatter<T, NR, OP, MODE_PACK_U>(a)))

#define NVLS_AG(T, t, NR)                                                             \
    NVLS_KERNEL(nvls_ag_##t##_##NR, (allgather<T, NR, MODE_ELEM>(a)))                 \
    NVLS_KERNEL(nvls_ag_##t##_##NR##_v, (allgather<T, NR, MODE_PACK>(a)))             \
    NVLS_KERNEL(nvls_ag_##t##_##NR##_vu, (allgather<T, NR, MODE_PACK_U>(a)))

#define NVLS_RANKS(NR)              \
    NVLS_AR(F32, f32, NR, OP_SUM, sum) \
    NVLS_AR(F32, f32, NR, OP_MAX, max) \
    NVLS_AR(BF16, bf16, NR, OP_SUM, sum) \
    NVLS_AG(F32, f32, NR)           \
    NVLS_AG(BF16, bf16, NR)

// One PTX module per rank count (nvcc -DNVLS_NR=2 ...): a process loads only the one it needs, so the driver
// compiles 42 kernels at load, not 168.
#ifndef NVLS_NR
#error "compile with -DNVLS_NR=<number of ranks: 1, 2, 4 or 8>"
#endif
NVLS_RANKS(NVLS_NR)
