// mma_probe.cu: how does the Hopper tensor core sum one bf16 k-step? (issue 14, the `tc` profile)
//
// Runs D = A·B + C through
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   (HMMA.16816.F32.BF16, sm_80+, here on sm_90a)
//   wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16   (HGMMA, sm_90a; A from registers, B from shared)
// on inputs made by a counter-based generator that kernels/cuda/experiments/mmacheck regenerates bit for bit
// in Go, so the Go emulation (kernels.MMABF16Dot16) can check every output without the inputs travelling.
//
// One "block" t is 64 rows × 8 columns of dot products of length 16: A is (64, 16) bf16 (row m), B is (8, 16)
// bf16 (column n, k contiguous), C and D are (64, 8) float32. The mma path runs it as 4 m16n8k16 MMAs (rows
// 16i..16i+15, the same B), the wgmma path as one m64n8k16, so both compute the same 512 dot products.
// Block t's inputs come from regime t % NREG (gen_bf, gen_c: the Go twin is mmacheck/gen.go).
//
// Build (CUDA 13.0): nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o mma_probe mma_probe.cu
// Usage:
//   mma_probe rand SEED T OUTDIR [BULK]   generate T blocks; write OUTDIR/dump.bin (inputs and the mma, wgmma
//                                         and mma-again outputs of the first DUMP blocks); with BULK, every
//                                         output to BULK.mma, BULK.wg (one k-step per block) and BULK.mma4,
//                                         BULK.wg4 (T/4 chains of 4 k-steps: blocks 4u..4u+3, C of block 4u),
//                                         BULK.wg256 (wgmma m64n256k16: T/32 units of 64×256, see wg256_kernel)
//   mma_probe file IN OUT                 blocks read from IN (A, B, C of each block in turn), D to OUT (mma,
//                                         wgmma, mma again: T·512 float32 each)
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREG 8
#define DUMP 1024 // blocks whose inputs are written too (6.3 MiB)

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

// ---------------------------------------------------------------------------------------------------------
// The generator (twin: mmacheck/gen.go). splitmix64 keyed by (seed, block, role/row/position).
__host__ __device__ inline uint64_t sm64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
__host__ __device__ inline uint64_t hkey(uint64_t seed, uint64_t t, uint64_t s) { return sm64(sm64(seed + t) ^ s); }

// bfexp: a bf16 with sign bit 63 of u, biased exponent e, mantissa bits 56..62 of u.
__host__ __device__ inline uint16_t bfexp(uint64_t u, uint32_t e) {
    return (uint16_t)(((u >> 63) << 15) | ((e & 0xFFu) << 7) | ((u >> 56) & 0x7Fu));
}

__host__ __device__ inline uint16_t bf_special(uint32_t i) {
    switch (i & 7) {
        case 0: return 0x7F80;  // +Inf
        case 1: return 0xFF80;  // -Inf
        case 2: return 0x7FC0;  // qNaN
        case 3: return 0xFFC1;  // -qNaN with payload
        case 4: return 0x7F81;  // sNaN
        case 5: return 0x0000;  // +0
        case 6: return 0x8000;  // -0
        default: return 0x7F7F; // max finite
    }
}

__host__ __device__ inline uint32_t f32_special(uint32_t i) {
    switch (i & 7) {
        case 0: return 0x7F800000u;
        case 1: return 0xFF800000u;
        case 2: return 0x7FC00000u;
        case 3: return 0x80000000u;
        case 4: return 0x00000000u;
        case 5: return 0x7F7FFFFFu;
        case 6: return 0xFF7FFFFFu;
        default: return 0x7FA00001u;  // sNaN with payload
    }
}

// gen_plain: element (role, row, j) of block t in regime r, before regime 3's pairing.
__host__ __device__ inline uint16_t gen_plain(uint64_t seed, uint64_t t, uint32_t role, uint32_t row, uint32_t j,
                                              uint32_t r) {
    const uint64_t u = hkey(seed, t, ((uint64_t)role << 32) | (row << 8) | j);
    const uint32_t x = (uint32_t)u;
    switch (r) {
        case 0: return bfexp(u, 124 + x % 8);                            // narrow exponents
        case 1: return bfexp(u, 107 + x % 41);                           // spread ±20
        case 2: return role == 0 ? bfexp(u, 96 + x % 32) : bfexp(u, 125 + x % 3);  // alignment depth
        case 3: return bfexp(u, 120 + x % 15);                           // (pairs made in gen_bf)
        case 4:                                                          // subnormal products and inputs
            if (role == 0) return x % 4 == 0 ? (uint16_t)(((u >> 63) << 15) | ((u >> 56) & 0x7F)) : bfexp(u, 40 + (x >> 2) % 50);
            return x % 4 == 0 ? bfexp(u, 150 + (x >> 2) % 51) : bfexp(u, 40 + (x >> 2) % 50);
        case 5: return x % 16 == 0 ? bf_special(x >> 4) : bfexp(u, 124 + (x >> 8) % 8);  // NaN, Inf, ±0
        case 6: return bfexp(u, 180 + x % 12);                           // overflow
        default: return (uint16_t)(u >> 48);                             // raw bits
    }
}

// gen_bf: element j of A row `row` (role 0) or B column `row` (role 1) of block t.
__host__ __device__ inline uint16_t gen_bf(uint64_t seed, uint64_t t, uint32_t role, uint32_t row, uint32_t j) {
    const uint32_t r = (uint32_t)(t % NREG);
    if (r == 3 && (j & 1)) {  // cancellation: a[2k+1] ≈ a[2k], b[2k+1] = -b[2k]
        const uint16_t p = gen_plain(seed, t, role, row, j - 1, r);
        const uint32_t x = (uint32_t)hkey(seed, t, ((uint64_t)role << 32) | (row << 8) | j);
        return role == 0 ? (uint16_t)(p ^ (x % 4)) : (uint16_t)(p ^ 0x8000);
    }
    return gen_plain(seed, t, role, row, j, r);
}

__host__ __device__ inline float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// gen_c: C[m][n] of block t (float32 bits).
__host__ __device__ inline uint32_t gen_c(uint64_t seed, uint64_t t, uint32_t m, uint32_t n) {
    const uint32_t r = (uint32_t)(t % NREG);
    const uint64_t u = hkey(seed, t, (2ull << 32) | (m << 8) | n);
    const uint32_t x = (uint32_t)u;
    const uint32_t s = (uint32_t)(u >> 63) << 31;
    const uint32_t mant = (uint32_t)(u >> 32) & 0x7FFFFFu;
    const uint32_t sel = (x >> 24) % 4;
    switch (r) {
        case 0: return sel == 0 ? 0u : s | ((120 + x % 16) << 23) | mant;
        case 1: return sel == 0 ? 0u : s | ((87 + x % 81) << 23) | mant;
        case 2: return sel == 0 ? 0u : sel == 1 ? s | ((128 + x % 3) << 23) | mant : s | ((87 + x % 41) << 23) | mant;
        case 3: {
            if (sel == 0) return 0u;
            if (sel == 1) return s | ((100 + x % 20) << 23) | mant;
            const float p = bf2f(gen_bf(seed, t, 0, m, 0)) * bf2f(gen_bf(seed, t, 1, n, 0));  // exact
            uint32_t pb;
            memcpy(&pb, &p, 4);
            pb ^= 0x80000000u;                         // c = -(a0·b0)
            return sel == 3 ? pb ^ (x % 8) : pb;       // or nearly
        }
        case 4: return sel == 0 ? s : sel == 1 ? s | mant : s | ((1 + x % 24) << 23) | mant;
        case 5: return x % 8 == 0 ? f32_special(x >> 3) : s | ((120 + (x >> 3) % 16) << 23) | mant;
        case 6: return sel == 0 ? 0u : s | ((240 + x % 15) << 23) | mant;
        default: return (uint32_t)(u >> 32);
    }
}

__global__ void gen_kernel(uint64_t seed, uint64_t T, uint16_t* A, uint16_t* B, uint32_t* C) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * 512) return;
    const uint64_t t = i / 512;
    const uint32_t e = (uint32_t)(i % 512);
    C[i] = gen_c(seed, t, e / 8, e % 8);
    for (uint64_t a = i * 2; a < i * 2 + 2; a++) {  // A: 1024 per block, 2 per thread
        const uint32_t ea = (uint32_t)(a % 1024);
        A[a] = gen_bf(seed, t, 0, ea / 16, ea % 16);
    }
    if (e < 128) B[t * 128 + e] = gen_bf(seed, t, 1, e / 16, e % 16);
}

// ---------------------------------------------------------------------------------------------------------
__device__ inline uint32_t pack2(const uint16_t* p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 16); }

// mma_kernel: one warp per block t, 4 m16n8k16 MMAs (fragment layouts of the PTX ISA for .bf16 row.col).
__global__ void mma_kernel(uint64_t T, const uint16_t* A, const uint16_t* B, const uint32_t* C, uint32_t* D) {
    const uint64_t t = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (t >= T) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const uint16_t* a = A + t * 1024;
    const uint16_t* b = B + t * 128;
    const uint32_t b0 = pack2(b + g * 16 + 2 * q), b1 = pack2(b + g * 16 + 2 * q + 8);
    for (int i = 0; i < 4; i++) {
        const int r0 = 16 * i + g, r1 = r0 + 8;
        const uint32_t a0 = pack2(a + r0 * 16 + 2 * q), a1 = pack2(a + r1 * 16 + 2 * q);
        const uint32_t a2 = pack2(a + r0 * 16 + 2 * q + 8), a3 = pack2(a + r1 * 16 + 2 * q + 8);
        const uint32_t* c = C + t * 512;
        float d0 = __uint_as_float(c[r0 * 8 + 2 * q]), d1 = __uint_as_float(c[r0 * 8 + 2 * q + 1]);
        float d2 = __uint_as_float(c[r1 * 8 + 2 * q]), d3 = __uint_as_float(c[r1 * 8 + 2 * q + 1]);
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        uint32_t* d = D + t * 512;
        d[r0 * 8 + 2 * q] = __float_as_uint(d0);
        d[r0 * 8 + 2 * q + 1] = __float_as_uint(d1);
        d[r1 * 8 + 2 * q] = __float_as_uint(d2);
        d[r1 * 8 + 2 * q + 1] = __float_as_uint(d3);
    }
}

// wg_kernel: one warpgroup (128 threads) per chain of S k-steps, S wgmma m64n8k16 issued back to back on the
// same accumulators (one commit group), A from registers (warp w holds rows 16w..16w+15 in the mma A layout),
// B from shared memory, K-major, no swizzle: step s's core matrix h (k 8h..8h+7) at byte 256·s + 128·h, its
// row n at 16·n; the descriptor's leading byte offset (the K stride between core matrices) is 128.
// Chain u reads blocks S·u … S·u+S−1 (A, B of each) and C of block S·u; S = 1 is one k-step per block.
template <int S>
__global__ void wg_kernel(uint64_t T, const uint16_t* A, const uint16_t* B, const uint32_t* C, uint32_t* D) {
    __shared__ __align__(128) uint16_t sb[128 * S];
    const uint64_t u = blockIdx.x;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    for (int st = 0; st < S; st++) {
        const int n = tid >> 4, k = tid & 15;  // 128 threads, one element each
        sb[st * 128 + (k >> 3) * 64 + n * 8 + (k & 7)] = B[(u * S + st) * 128 + n * 16 + k];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int r0 = 16 * w + g, r1 = r0 + 8;
    const uint32_t* c = C + u * S * 512;
    float d0 = __uint_as_float(c[r0 * 8 + 2 * q]), d1 = __uint_as_float(c[r0 * 8 + 2 * q + 1]);
    float d2 = __uint_as_float(c[r1 * 8 + 2 * q]), d3 = __uint_as_float(c[r1 * 8 + 2 * q + 1]);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int st = 0; st < S; st++) {
        const uint16_t* a = A + (u * S + st) * 1024;
        const uint32_t a0 = pack2(a + r0 * 16 + 2 * q), a1 = pack2(a + r1 * 16 + 2 * q);
        const uint32_t a2 = pack2(a + r0 * 16 + 2 * q + 8), a3 = pack2(a + r1 * 16 + 2 * q + 8);
        const uint32_t addr = (uint32_t)__cvta_generic_to_shared(sb + st * 128);
        const uint64_t desc = (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    uint32_t* d = D + u * 512;
    d[r0 * 8 + 2 * q] = __float_as_uint(d0);
    d[r0 * 8 + 2 * q + 1] = __float_as_uint(d1);
    d[r1 * 8 + 2 * q] = __float_as_uint(d2);
    d[r1 * 8 + 2 * q + 1] = __float_as_uint(d3);
}

// wg256_kernel: one warpgroup per unit u, one wgmma m64n256k16: A of block 32u, column 8i+n of B is column
// n of block 32u+i, C[m][8i+n] is C[m][n] of block 32u+i; D is (64, 256) per unit. B in shared memory,
// K-major, no swizzle: core matrix (n-group G = n/8, k-half h) at byte 256·G + 128·h, its row n%8 at 16·(n%8);
// descriptor: leading byte offset (K stride) 128, stride byte offset (N stride between 8-row groups) 256.
// Accumulator layout (m64nNk16): d[4j+0..3] = (16w+g, 8j+2q), (16w+g, 8j+2q+1), (16w+g+8, 8j+2q), (…+1).
__global__ void wg256_kernel(const uint16_t* A, const uint16_t* B, const uint32_t* C, uint32_t* D) {
    __shared__ __align__(128) uint16_t sb[256 * 16];
    const uint64_t u = blockIdx.x;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    for (int e = tid; e < 256 * 16; e += 128) {
        const int n = e >> 4, k = e & 15;
        sb[(n >> 3) * 128 + (k >> 3) * 64 + (n & 7) * 8 + (k & 7)] = B[(u * 32 + (n >> 3)) * 128 + (n & 7) * 16 + k];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int r0 = 16 * w + g, r1 = r0 + 8;
    const uint16_t* a = A + u * 32 * 1024;
    const uint32_t a0 = pack2(a + r0 * 16 + 2 * q), a1 = pack2(a + r1 * 16 + 2 * q);
    const uint32_t a2 = pack2(a + r0 * 16 + 2 * q + 8), a3 = pack2(a + r1 * 16 + 2 * q + 8);
    float d[128];
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const uint32_t* c = C + (u * 32 + j) * 512;
        d[4 * j + 0] = __uint_as_float(c[r0 * 8 + 2 * q]);
        d[4 * j + 1] = __uint_as_float(c[r0 * 8 + 2 * q + 1]);
        d[4 * j + 2] = __uint_as_float(c[r1 * 8 + 2 * q]);
        d[4 * j + 3] = __uint_as_float(c[r1 * 8 + 2 * q + 1]);
    }
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(sb);
    const uint64_t desc = (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    uint32_t* o = D + u * 64 * 256;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        o[r0 * 256 + 8 * j + 2 * q] = __float_as_uint(d[4 * j + 0]);
        o[r0 * 256 + 8 * j + 2 * q + 1] = __float_as_uint(d[4 * j + 1]);
        o[r1 * 256 + 8 * j + 2 * q] = __float_as_uint(d[4 * j + 2]);
        o[r1 * 256 + 8 * j + 2 * q + 1] = __float_as_uint(d[4 * j + 3]);
    }
}

// mma_chain: as mma_kernel, but chain u runs S k-steps (blocks S·u … S·u+S−1) on the same accumulators.
template <int S>
__global__ void mma_chain(uint64_t U, const uint16_t* A, const uint16_t* B, const uint32_t* C, uint32_t* D) {
    const uint64_t u = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (u >= U) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int r0 = 16 * i + g, r1 = r0 + 8;
        const uint32_t* c = C + u * S * 512;
        float d0 = __uint_as_float(c[r0 * 8 + 2 * q]), d1 = __uint_as_float(c[r0 * 8 + 2 * q + 1]);
        float d2 = __uint_as_float(c[r1 * 8 + 2 * q]), d3 = __uint_as_float(c[r1 * 8 + 2 * q + 1]);
        for (int st = 0; st < S; st++) {
            const uint16_t* a = A + (u * S + st) * 1024;
            const uint16_t* b = B + (u * S + st) * 128;
            const uint32_t b0 = pack2(b + g * 16 + 2 * q), b1 = pack2(b + g * 16 + 2 * q + 8);
            const uint32_t a0 = pack2(a + r0 * 16 + 2 * q), a1 = pack2(a + r1 * 16 + 2 * q);
            const uint32_t a2 = pack2(a + r0 * 16 + 2 * q + 8), a3 = pack2(a + r1 * 16 + 2 * q + 8);
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
        uint32_t* d = D + u * 512;
        d[r0 * 8 + 2 * q] = __float_as_uint(d0);
        d[r0 * 8 + 2 * q + 1] = __float_as_uint(d1);
        d[r1 * 8 + 2 * q] = __float_as_uint(d2);
        d[r1 * 8 + 2 * q + 1] = __float_as_uint(d3);
    }
}

// ---------------------------------------------------------------------------------------------------------
static void put(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "mma_probe: %s: write failed\n", path);
        exit(1);
    }
}

struct Dev {
    uint16_t *A, *B;
    uint32_t *C, *Dm, *Dw, *Dx, *Dc, *Dwc, *D256;
};

static Dev alloc(uint64_t T) {
    Dev d;
    CK(cudaMalloc(&d.A, T * 1024 * 2));
    CK(cudaMalloc(&d.B, T * 128 * 2));
    CK(cudaMalloc(&d.C, T * 512 * 4));
    CK(cudaMalloc(&d.Dm, T * 512 * 4));
    CK(cudaMalloc(&d.Dw, T * 512 * 4));
    CK(cudaMalloc(&d.Dx, T * 512 * 4));
    CK(cudaMalloc(&d.Dc, T * 512 * 4));
    CK(cudaMalloc(&d.Dwc, T * 512 * 4));
    CK(cudaMalloc(&d.D256, T * 512 * 4));
    return d;
}

static uint64_t same(const uint32_t* x, const uint32_t* y, uint64_t n) {
    uint32_t* hx = (uint32_t*)malloc(n * 4);
    uint32_t* hy = (uint32_t*)malloc(n * 4);
    CK(cudaMemcpy(hx, x, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hy, y, n * 4, cudaMemcpyDeviceToHost));
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) k += hx[i] == hy[i];
    free(hx);
    free(hy);
    return k;
}

// run: mma (Dm), mma again (Dx, must agree), one wgmma per block (Dw), and chains of 4 k-steps through mma
// (Dc) and through 4 back-to-back wgmmas (Dwc), T/4 chains.
static void run(uint64_t T, Dev& d) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const unsigned wb = (unsigned)((T * 32 + 255) / 256);
    CK(cudaEventRecord(e0));
    mma_kernel<<<wb, 256>>>(T, d.A, d.B, d.C, d.Dm);
    CK(cudaEventRecord(e1));
    mma_kernel<<<wb, 256>>>(T, d.A, d.B, d.C, d.Dx);
    wg_kernel<1><<<(unsigned)T, 128>>>(T, d.A, d.B, d.C, d.Dw);
    const uint64_t U = T / 4;
    if (U > 0) {
        mma_chain<4><<<(unsigned)((U * 32 + 255) / 256), 256>>>(U, d.A, d.B, d.C, d.Dc);
        wg_kernel<4><<<(unsigned)U, 128>>>(U, d.A, d.B, d.C, d.Dwc);
    }
    if (T >= 32) wg256_kernel<<<(unsigned)(T / 32), 128>>>(d.A, d.B, d.C, d.D256);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("%llu blocks (%llu dot products): mma %.3f ms\n", (unsigned long long)T, (unsigned long long)(T * 512), ms);
    printf("mma rerun identical: %llu/%llu\n", (unsigned long long)same(d.Dm, d.Dx, T * 512), (unsigned long long)(T * 512));
    printf("wgmma = mma: %llu/%llu\n", (unsigned long long)same(d.Dm, d.Dw, T * 512), (unsigned long long)(T * 512));
    printf("4-step chains, wgmma = mma: %llu/%llu\n", (unsigned long long)same(d.Dc, d.Dwc, U * 512), (unsigned long long)(U * 512));
}

static void get(const char* path, const uint32_t* p, uint64_t n) {
    uint32_t* h = (uint32_t*)malloc(n * 4);
    CK(cudaMemcpy(h, p, n * 4, cudaMemcpyDeviceToHost));
    put(path, h, n * 4);
    free(h);
}

int main(int argc, char** argv) {
    char path[4096];
    if (argc >= 5 && !strcmp(argv[1], "rand")) {
        const uint64_t seed = strtoull(argv[2], 0, 0), T = strtoull(argv[3], 0, 0);
        const char* dir = argv[4];
        Dev d = alloc(T);
        gen_kernel<<<(unsigned)((T * 512 + 255) / 256), 256>>>(seed, T, d.A, d.B, d.C);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        printf("rand: seed %llu\n", (unsigned long long)seed);
        run(T, d);
        const uint64_t K = T < DUMP ? T : DUMP;
        const size_t sz = K * (2048 + 256 + 2048 * 4);
        char* h = (char*)malloc(sz);
        size_t o = 0;
        CK(cudaMemcpy(h + o, d.A, K * 2048, cudaMemcpyDeviceToHost)); o += K * 2048;
        CK(cudaMemcpy(h + o, d.B, K * 256, cudaMemcpyDeviceToHost)); o += K * 256;
        CK(cudaMemcpy(h + o, d.C, K * 2048, cudaMemcpyDeviceToHost)); o += K * 2048;
        CK(cudaMemcpy(h + o, d.Dm, K * 2048, cudaMemcpyDeviceToHost)); o += K * 2048;
        CK(cudaMemcpy(h + o, d.Dw, K * 2048, cudaMemcpyDeviceToHost)); o += K * 2048;
        CK(cudaMemcpy(h + o, d.Dx, K * 2048, cudaMemcpyDeviceToHost)); o += K * 2048;
        snprintf(path, sizeof path, "%s/dump.bin", dir);
        put(path, h, sz);
        if (argc >= 6) {
            snprintf(path, sizeof path, "%s.mma", argv[5]), get(path, d.Dm, T * 512);
            snprintf(path, sizeof path, "%s.wg", argv[5]), get(path, d.Dw, T * 512);
            snprintf(path, sizeof path, "%s.mma4", argv[5]), get(path, d.Dc, T / 4 * 512);
            snprintf(path, sizeof path, "%s.wg4", argv[5]), get(path, d.Dwc, T / 4 * 512);
            snprintf(path, sizeof path, "%s.wg256", argv[5]), get(path, d.D256, T / 32 * 32 * 512);
        }
        return 0;
    }
    if (argc >= 4 && !strcmp(argv[1], "file")) {
        FILE* f = fopen(argv[2], "rb");
        if (!f) return fprintf(stderr, "mma_probe: %s: cannot open\n", argv[2]), 1;
        fseek(f, 0, SEEK_END);
        const long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        const uint64_t T = (uint64_t)n / (2048 + 256 + 2048);
        char* h = (char*)malloc(n);
        if (fread(h, 1, n, f) != (size_t)n) return fprintf(stderr, "mma_probe: %s: short read\n", argv[2]), 1;
        fclose(f);
        Dev d = alloc(T);
        for (uint64_t t = 0; t < T; t++) {
            const char* p = h + t * (2048 + 256 + 2048);
            CK(cudaMemcpy(d.A + t * 1024, p, 2048, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.B + t * 128, p + 2048, 256, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.C + t * 512, p + 2304, 2048, cudaMemcpyHostToDevice));
        }
        printf("file: %s\n", argv[2]);
        run(T, d);
        char* o = (char*)malloc(T * 2048 * 3);
        CK(cudaMemcpy(o, d.Dm, T * 2048, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(o + T * 2048, d.Dw, T * 2048, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(o + T * 4096, d.Dx, T * 2048, cudaMemcpyDeviceToHost));
        put(argv[3], o, T * 2048 * 3);
        return 0;
    }
    fprintf(stderr, "usage: mma_probe rand SEED T OUTDIR [BULK] | mma_probe file IN OUT\n");
    return 2;
}
