// weights.cuh: weights in their stored dtype (kernels.Weights, kernels.WeightDTypes), for the kernels that read
// them (matmul.cu, rmsnorm.cu, elementwise.cu's embedding). Device code only (the tc simulation compiles
// common.cuh on the host; this file stays out of it).
#pragma once
#include "common.cuh"

// Weights in their stored dtype (kernels.Weights): float32, bf16 bits (unsigned short, the _bf16w entries) or
// IEEE half bits (f16bits, the _f16w entries: a type of its own so that a kernel template picks its widening).
// Both 16-bit widenings are exact (every bf16 and f16 value is a float32), so a kernel reading a 16-bit weight
// gives the float32 kernel's bits on the widened values.
struct f16bits {
    unsigned short b;
};

// widen_f16: the f16 bits b as float32 (kernels.FromF16Bits). cvt.f32.f16 is exact, subnormal halves included
// (they are normal float32); a weight's NaN is the canonical one (the loader checks), which widens to
// BT_CANONICAL_NAN.
__device__ __forceinline__ float widen_f16(unsigned short b) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
}

// wld4 / wld1: 4 (16-byte aligned for float32, 8-byte for 16-bit) or 1 weight(s) at p, widened exactly to float32.
__device__ __forceinline__ float4 wld4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float wld1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float4 wld4(const unsigned short* p) {  // 4 bf16, 8-byte aligned
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));  // little-endian: element 0 is v.x's low half
    return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                       __uint_as_float(v.y & 0xffff0000u));
}
__device__ __forceinline__ float wld1(const unsigned short* p) { return __uint_as_float((unsigned)__ldg(p) << 16); }
__device__ __forceinline__ float4 wld4(const f16bits* p) {  // 4 f16, 8-byte aligned
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));  // little-endian: element 0 is v.x's low half
    return make_float4(widen_f16((unsigned short)(v.x & 0xffffu)), widen_f16((unsigned short)(v.x >> 16)),
                       widen_f16((unsigned short)(v.y & 0xffffu)), widen_f16((unsigned short)(v.y >> 16)));
}
__device__ __forceinline__ float wld1(const f16bits* p) {
    return widen_f16(__ldg(reinterpret_cast<const unsigned short*>(p)));
}
