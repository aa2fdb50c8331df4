// tc_common.cuh: what tc_matmul.cu (mma.sync) and tc_wgmma.cu (wgmma) share: the PTX wrappers (or, compiled with
// -DBITALIGN_TC_SIM, their CPU simulation in sim/tc_sim.h), the row-major tile loads, the segment tree in
// registers. docs/arithmetic.md §18 tc.2 is the order both follow.
#pragma once

// TmaMap is a CUtensorMap (cuda.TensorMap on the host: 128 bytes, encoded by cuTensorMapEncodeTiled), passed by
// value as a __grid_constant__ kernel parameter so that the TMA unit reads it from the parameter space
// (tc_tma.cu; the CPU simulation keeps its own description of the matrix in the same 128 bytes).
struct alignas(64) TmaMap {
    unsigned long long v[16];
};

#ifdef BITALIGN_TC_SIM
#include "sim/tc_sim.h"  // the CPU simulation of the wrappers below (TestTCSimulated): not in the PTX
#endif
#include "common.cuh"

#ifndef BITALIGN_TC_SIM
// ---------------------------------------------------------------------------------------------------------
// PTX wrappers (fragment layouts of the PTX ISA, m16n8k16 .bf16 row.col; g = lane/4, q = lane%4):
//   A (16×16, row-major): a0 (row g, k 2q..2q+1), a1 (row g+8, k 2q..), a2 (row g, k 2q+8..), a3 (row g+8, k 2q+8..)
//   B (16×8, k contiguous per column n): b0 (n g, k 2q..2q+1), b1 (n g, k 2q+8..)
//   C/D: d0, d1 (row g, n 2q, 2q+1), d2, d3 (row g+8, n 2q, 2q+1)
// (kernels/cuda/experiments/mma_probe.cu, which matched the CPU emulation on the H200, uses the same layouts.)
// ldmatrix .x4 gives lane T of matrix i the elements (row T/4, cols 2(T%4), +1) of the 8×8 matrix whose row
// addresses lanes 8i..8i+7 supply: with row-major A tiles and k-contiguous B tiles in shared memory these are
// exactly the fragments above.

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// cp_async16: 16 bytes global → shared, bypassing L1; src_bytes 0 writes 16 zero bytes (reads nothing).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix_x4_a, ldmatrix_x2_a: ldmatrix .x4 and .x2 from a shared address (smem_addr's), for loops that keep
// their addresses in registers (a generic pointer is converted again at every use: ptxas rematerialises the shared
// window's base, an S2R of SR_CgaCtaId, inside the loop); ldmatrix_x4 and ldmatrix_x2 take a generic pointer.
__device__ __forceinline__ void ldmatrix_x4_a(uint32_t (&r)[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x2_a(uint32_t (&r)[2], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ldmatrix_x4_a(r, smem_addr(p)); }
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) { ldmatrix_x2_a(r, smem_addr(p)); }

// mma_bf16: d = step(a, b, d), one k-step of tc.1 for the 16×8 tile.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// wgmma (sm_90a, tc_wgmma.cu): fences, commit and wait; fence_proxy_async makes the generic-proxy writes of
// cp.async visible to wgmma's async-proxy reads of shared memory.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// fence_operand: the accumulators pass through an empty asm, so that the compiler neither reads them before
// wgmma_wait0 nor writes them (zeroing, the tree) after wgmma_fence (CUTLASS's warpgroup_fence_operand).
template <int P>
__device__ __forceinline__ void fence_operand(float (&d)[P][4]) {
#pragma unroll
    for (int j = 0; j < P; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
}

// wgmma m64nNk16 .bf16 → .f32, A from registers (each warp w of the warpgroup holds rows 16w…16w+15 in the
// mma.sync A layout), B from shared memory through a descriptor (wg_desc). Accumulator layout
// (mma_probe.cu, measured): d[j][e] is (row 16w + g + 8·(e/2), column 8j + 2q + e%2).
// wgmma_m64n128: d = step(a, B(desc), d) for the warpgroup's 64×128 tile (scale-d 1: d is the accumulator).
__device__ __forceinline__ void wgmma_m64n128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// wgmma_m64n64: d = step(a, B(desc), d) for the warpgroup's 64×64 tile (scale-d 1: d is the accumulator).
__device__ __forceinline__ void wgmma_m64n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// TC_SMEM: the dynamic shared memory of a block.
#define TC_SMEM(name) extern __shared__ __align__(128) uint16_t name[]
#endif  // BITALIGN_TC_SIM

// tc_out: an output element as it leaves a tc kernel (docs/arithmetic.md tc.4): the whole tree's value gets the
// bias added (when there is one) and is rounded to dt; a subtree for a later finish (finish false) is stored as it is.
__device__ __forceinline__ float tc_out(float y, bool finish, const float* bias, int col, int dt) {
    if (finish) {
        if (bias) y = __fadd_rn(y, bias[col]);
        y = round_dt(y, dt);
    }
    return y;
}

// ---------------------------------------------------------------------------------------------------------
// tile_load: the ROWS×BK slice [k0, k0+BK) of rows r0… of src (rows × K, bf16) into shared memory s (row stride
// LD), +0 past the matrix's rows and past the segment's end hi. VEC (K and every bound a multiple of 8, 16-byte
// aligned base): 16-byte cp.async chunks, each wholly inside or wholly past hi (hi % 8 == 0), zero-filled by
// src-size 0. Otherwise element by element (synchronous shared stores; the same barriers order them).
template <int ROWS, int BK, int LD, int NT, bool VEC>
__device__ __forceinline__ void tile_load(uint16_t* __restrict__ s, const uint16_t* __restrict__ src, int rows, int K,
                                          int r0, int k0, int hi) {
    const int tid = threadIdx.x;
    if constexpr (VEC) {
        constexpr int CH = BK / 8;  // 16-byte chunks per row
#pragma unroll
        for (int c = tid; c < ROWS * CH; c += NT) {
            const int r = c / CH, k = k0 + 8 * (c % CH);
            const bool ok = r0 + r < rows && k < hi;
            const uint16_t* p = ok ? src + (size_t)(r0 + r) * K + k : src;
            cp_async16(s + r * LD + 8 * (c % CH), p, ok ? 16 : 0);
        }
    } else {
        for (int e = tid; e < ROWS * BK; e += NT) {
            const int r = e / BK, k = k0 + e % BK;
            s[r * LD + e % BK] = (r0 + r < rows && k < hi) ? src[(size_t)(r0 + r) * K + k] : (uint16_t)0;
        }
    }
}

// add_left: v = l ⊕ v (the earlier subtree on the left); keep: d = v.
template <int P>
__device__ __forceinline__ void add_left(float (&v)[P][4], const float (&l)[P][4]) {
#pragma unroll
    for (int f = 0; f < P; f++)
#pragma unroll
        for (int e = 0; e < 4; e++) v[f][e] = __fadd_rn(l[f][e], v[f][e]);
}
template <int P>
__device__ __forceinline__ void keep(float (&d)[P][4], const float (&v)[P][4]) {
#pragma unroll
    for (int f = 0; f < P; f++)
#pragma unroll
        for (int e = 0; e < 4; e++) d[f][e] = v[f][e];
}

// tree_push: segment j's partial v (j counted from the block's first segment) enters the fixed tree
// ((p0⊕p1)⊕(p2⊕p3))⊕((p4⊕p5)⊕(p6⊕p7)): the subtree of segments j−2^i+1 … j closes at each level i where bit i
// of j is set (left operand: the earlier subtree, held in st_i); otherwise v waits in st_i. After the block's
// last segment (j = G−1, all low bits set) v is the subtree of its G segments.
template <int P>
__device__ __forceinline__ void tree_push(float (&v)[P][4], float (&st0)[P][4], float (&st1)[P][4], float (&st2)[P][4],
                                          int j) {
    if (!(j & 1)) return keep(st0, v);
    add_left(v, st0);
    if (!(j & 2)) return keep(st1, v);
    add_left(v, st1);
    if (!(j & 4)) return keep(st2, v);
    add_left(v, st2);
}

