// fingerprint.cu: row fingerprints (docs/capture-format.md, "Fingerprint tensors"; twin of capture.Fingerprint)
// on the device, so that a fingerprint capture moves 8 bytes a row to the host instead of the row. Integer
// arithmetic only: h = Σ w_i·K_i mod 2^64 is order-free (a wrapping sum), so the warp's split of a row and the
// shuffle tree that adds the lanes' partial sums give exactly the host's h; fp = mix64(h + L·γ).
//
// One launch fingerprints many tensors: a table of descriptors, each a set of equally long rows at a fixed
// stride (a contiguous [rows, ...] tensor, or a strided view of one), numbered consecutively from the
// descriptor's `first`; out[first + r] is the fingerprint of its row r. One warp per row.
#include <stdint.h>

#define FP_GAMMA 0x9E3779B97F4A7C15ull

struct FpDesc {
    unsigned long long ptr;  // the first row's first byte (device address)
    long long stride;        // bytes from one row's start to the next
    long long rows;          // rows of this descriptor
    long long first;         // index in out of its row 0; descriptors sorted by first, contiguous from 0
    long long row_bytes;     // L
};

__device__ __forceinline__ unsigned long long fp_mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// fingerprint_consts: K[i] = mix64((i+1)·γ) | 1 for i < n (capture.FingerprintConst), the table the row kernel
// reads (one launch per process per size: the caller keeps it).
extern "C" __global__ void fingerprint_consts(unsigned long long* K, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) K[i] = fp_mix64((unsigned long long)(i + 1) * FP_GAMMA) | 1ull;
}

// word i of a row of L bytes at p (little-endian, the last word zero-padded), by bytes: any alignment.
__device__ __forceinline__ uint32_t fp_word_bytes(const unsigned char* p, long long i, long long L) {
    uint32_t w = 0;
    const long long b = 4 * i;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (b + j < L) w |= (uint32_t)p[b + j] << (8 * j);
    return w;
}

// fingerprint_rows: nd descriptors holding total rows; K holds at least ceil(L/4) constants for every
// descriptor's L (the caller checks). Blocks of whole warps; warp w of the grid takes rows w, w + warps, ...
extern "C" __global__ void fingerprint_rows(unsigned long long* out, const FpDesc* d, int nd, long long total,
                                            const unsigned long long* K) {
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < total; row += warps) {
        int lo = 0, hi = nd - 1;  // the last descriptor whose first ≤ row
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (d[mid].first <= row) lo = mid; else hi = mid - 1;
        }
        const FpDesc e = d[lo];
        const long long r = row - e.first, L = e.row_bytes, nw = (L + 3) >> 2;
        const unsigned char* p = (const unsigned char*)(e.ptr + (unsigned long long)(r * e.stride));
        unsigned long long h = 0;
        long long i0 = 0;
        if (((unsigned long long)p & 15) == 0) {  // 16-byte loads over the whole 16-byte groups
            const long long n4 = L >> 4;
            const uint4* q = (const uint4*)p;
            for (long long g = lane; g < n4; g += 32) {
                const uint4 v = q[g];
                const unsigned long long* k = K + 4 * g;
                h += (unsigned long long)v.x * k[0] + (unsigned long long)v.y * k[1] +
                     (unsigned long long)v.z * k[2] + (unsigned long long)v.w * k[3];
            }
            i0 = 4 * n4;
        } else if (((unsigned long long)p & 3) == 0) {  // 4-byte loads over the whole words
            const long long n1 = L >> 2;
            const uint32_t* q = (const uint32_t*)p;
            for (long long i = lane; i < n1; i += 32) h += (unsigned long long)q[i] * K[i];
            i0 = n1;
        }
        for (long long i = i0 + lane; i < nw; i += 32) h += (unsigned long long)fp_word_bytes(p, i, L) * K[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xFFFFFFFFu, h, o);
        if (lane == 0) out[row] = fp_mix64(h + (unsigned long long)L * FP_GAMMA);
    }
}
