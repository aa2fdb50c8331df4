// common.cuh: helpers shared by bitalign's CUDA kernels, twins of package kernels (docs/arithmetic.md).
// Every float operation the contract specifies is written with an explicit round-to-nearest intrinsic
// (__fmaf_rn, __fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn) and the sources are compiled with
// -fmad=false and without fast-math, so neither nvcc nor the driver's JIT may fuse or reorder them.
#pragma once
#include <stdint.h>

#define BT_CANONICAL_NAN 0x7FC00000u

// Output dtypes (kernels.DType): the rounding applied once, last, to every op output (§1).
#define DT_NONE (-1)  // no rounding at all (MatmulPartial's float32 subtree, Add before Round)
#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2

// Profiles (kernels.Profile).
#define PROF_CANONICAL 0
#define PROF_STANDARD 1

// Segs gives the K-segments of a reduction: segment s covers [b[s], b[s+1]); n segments (1..8). Passed by
// value (40 bytes). The host computes the boundaries exactly as the Go kernel does (floor(s·L/8), §3).
struct Segs {
    int n;
    int b[9];
};

// round_bf16: §1 BF16. Twin of kernels.RoundBF16 (not __float2bfloat16_rn: its NaN differs).
__device__ __forceinline__ float round_bf16(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return __uint_as_float(BT_CANONICAL_NAN);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xFFFF0000u);
}

// round_f16: §1 F16. Twin of kernels.RoundF16.
__device__ __forceinline__ float round_f16(float x) {
    if (x != x) return __uint_as_float(BT_CANONICAL_NAN);
    const uint32_t u = __float_as_uint(x);
    const uint32_t sign = u & 0x80000000u;
    const float a = __uint_as_float(u & 0x7FFFFFFFu);
    float r;
    if (a >= 65520.0f) {
        r = __uint_as_float(0x7F800000u);
    } else if (a < 0x1p-14f) {
        r = __fmul_rn(rintf(__fmul_rn(a, 0x1p24f)), 0x1p-24f);  // half subnormals: both products exact
    } else {
        uint32_t v = __float_as_uint(a);
        v = (v + 0x0FFFu + ((v >> 13) & 1u)) & 0xFFFFE000u;
        r = __uint_as_float(v);
    }
    return __uint_as_float(__float_as_uint(r) | sign);
}

// round_dt: §1, kernels.DType.Round.
__device__ __forceinline__ float round_dt(float x, int dt) {
    if (dt == DT_NONE) return x;
    if (dt == DT_BF16) return round_bf16(x);
    if (dt == DT_F16) return round_f16(x);
    if (x != x) return __uint_as_float(BT_CANONICAL_NAN);
    return x;
}

// bt_exp: §2.1, kernels.Exp.
__device__ __forceinline__ float bt_exp(float x) {
    if (x != x) return x;
    if (x > __uint_as_float(0x42B17217u)) return __uint_as_float(0x7F800000u);
    if (x < __uint_as_float(0xC2D00000u)) return 0.0f;
    const float t = __fmul_rn(x, __uint_as_float(0x3FB8AA3Bu));
    const float n = rintf(t);
    float r = __fmaf_rn(-n, __uint_as_float(0x3F317218u), x);
    r = __fmaf_rn(-n, __uint_as_float(0xB102E308u), r);
    float p = __uint_as_float(0x39509279u);
    p = __fmaf_rn(p, r, __uint_as_float(0x3AB6A192u));
    p = __fmaf_rn(p, r, __uint_as_float(0x3C088870u));
    p = __fmaf_rn(p, r, __uint_as_float(0x3D2AAA75u));
    p = __fmaf_rn(p, r, __uint_as_float(0x3E2AAAABu));
    p = __fmaf_rn(p, r, __uint_as_float(0x3F000000u));
    p = __fmaf_rn(p, r, 1.0f);
    p = __fmaf_rn(p, r, 1.0f);
    const int k = (int)n;
    const int k1 = k >> 1;  // arithmetic shift: floor(k/2)
    const int k2 = k - k1;
    const float s1 = __uint_as_float((uint32_t)(k1 + 127) << 23);
    const float s2 = __uint_as_float((uint32_t)(k2 + 127) << 23);
    return __fmul_rn(__fmul_rn(p, s1), s2);  // first product exact; one rounding
}

// bt_log: §2.2, kernels.Log.
__device__ __forceinline__ float bt_log(float x) {
    if (x != x) return x;
    if (x < 0.0f) return __uint_as_float(BT_CANONICAL_NAN);
    if (x == 0.0f) return __uint_as_float(0xFF800000u);
    if (x == __uint_as_float(0x7F800000u)) return x;
    int e = 0;
    uint32_t u = __float_as_uint(x);
    if (u < 0x00800000u) {  // subnormal input
        x = __fmul_rn(x, 0x1p23f);
        u = __float_as_uint(x);
        e = -23;
    }
    e += (int)(u >> 23) - 127;
    float m = __uint_as_float((u & 0x007FFFFFu) | 0x3F800000u);
    if ((u & 0x007FFFFFu) > 0x003504F3u) {
        m = __fmul_rn(m, 0.5f);
        e++;
    }
    const float g = __fsub_rn(m, 1.0f);
    float q = __uint_as_float(0x3D8AA107u);
    q = __fmaf_rn(q, g, __uint_as_float(0xBDECB35Bu));
    q = __fmaf_rn(q, g, __uint_as_float(0x3DF1EAA4u));
    q = __fmaf_rn(q, g, __uint_as_float(0xBDFE60A7u));
    q = __fmaf_rn(q, g, __uint_as_float(0x3E11BD19u));
    q = __fmaf_rn(q, g, __uint_as_float(0xBE2AACF3u));
    q = __fmaf_rn(q, g, __uint_as_float(0x3E4CD098u));
    q = __fmaf_rn(q, g, __uint_as_float(0xBE800004u));
    q = __fmaf_rn(q, g, __uint_as_float(0x3EAAAAA7u));
    q = __fmaf_rn(q, g, __uint_as_float(0xBF000000u));
    const float g2 = __fmul_rn(g, g);
    float y = __fmaf_rn(g2, q, g);
    const float fe = __int2float_rn(e);
    y = __fmaf_rn(fe, __uint_as_float(0x35BFBE8Eu), y);
    return __fmaf_rn(fe, __uint_as_float(0x3F317200u), y);
}

// bt_rsqrt: §2.3, kernels.Rsqrt: IEEE sqrt then IEEE division (never rsqrtf).
__device__ __forceinline__ float bt_rsqrt(float x) { return __fdiv_rn(1.0f, __fsqrt_rn(x)); }

// bt_silu: §2.3, kernels.SiLU.
__device__ __forceinline__ float bt_silu(float x) {
    const float e = bt_exp(-x);
    const float d = __fadd_rn(1.0f, e);
    return __fdiv_rn(x, d);
}

// tree8: the fixed pairwise tree over n partials (n in {1, 2, 4, 8}): ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)).
__device__ __forceinline__ float tree8(const float (&v)[8], int n) {
    if (n == 1) return v[0];
    const float s01 = __fadd_rn(v[0], v[1]);
    if (n == 2) return s01;
    const float s0123 = __fadd_rn(s01, __fadd_rn(v[2], v[3]));
    if (n == 4) return s0123;
    return __fadd_rn(s0123, __fadd_rn(__fadd_rn(v[4], v[5]), __fadd_rn(v[6], v[7])));
}

// seq8: partials added left to right (standard profile).
__device__ __forceinline__ float seq8(const float (&v)[8], int n) {
    float s = v[0];
    for (int i = 1; i < 8; i++)
        if (i < n) s = __fadd_rn(s, v[i]);
    return s;
}
