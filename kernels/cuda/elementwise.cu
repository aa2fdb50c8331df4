// elementwise.cu: twins of kernels.ResidualForward, SwiGLUForward, EmbeddingForward, DType.RoundSlice, the
// engine's AddBias (docs/arithmetic.md §1, §8) and fp.F32ToBF16 (narrow_bf16). One thread per element: no reduction, so no order to keep.
#include "weights.cuh"

// residual: out[i] = round_dt(a[i] ⊕ b[i]); dt = DT_NONE gives the engine's unrounded Add. out may alias a or b.
extern "C" __global__ void residual(float* out, const float* a, const float* b, long long n, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = round_dt(__fadd_rn(a[i], b[i]), dt);
}

// swiglu: out[i] = round_dt(round_dt(SiLU(gate[i])) ⊗ up[i]). out may alias gate or up.
extern "C" __global__ void swiglu(float* out, const float* gate, const float* up, long long n, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float s = round_dt(bt_silu(gate[i]), dt);
        out[i] = round_dt(__fmul_rn(s, up[i]), dt);
    }
}

// swiglu4: swiglu four elements a thread through 16-byte loads and stores (n a multiple of 4, every pointer
// 16-byte aligned; the plan chooses it, planSwiGLU): the same bits, element by element, in fewer instructions and
// wider memory transactions. out may alias gate or up.
extern "C" __global__ void swiglu4(float* out, const float* gate, const float* up, long long n, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 4) {
        const float4 g = reinterpret_cast<const float4*>(gate)[i], u = reinterpret_cast<const float4*>(up)[i];
        float4 o;
        o.x = round_dt(__fmul_rn(round_dt(bt_silu(g.x), dt), u.x), dt);
        o.y = round_dt(__fmul_rn(round_dt(bt_silu(g.y), dt), u.y), dt);
        o.z = round_dt(__fmul_rn(round_dt(bt_silu(g.z), dt), u.z), dt);
        o.w = round_dt(__fmul_rn(round_dt(bt_silu(g.w), dt), u.w), dt);
        reinterpret_cast<float4*>(out)[i] = o;
    }
}

// round_buf: x[i] = round_dt(x[i]) in place (the op-boundary rounding).
extern "C" __global__ void round_buf(float* x, long long n, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = round_dt(x[i], dt);
}

// narrow_bf16: out[i] = the bf16 bits of x[i] by fp.F32ToBF16's rule (round to nearest even; a NaN keeps its sign
// and top payload bits, made quiet), the bits the engine's recorder writes: narrowed on the device so that half
// the bytes cross to the host. No arithmetic on floats: integer ops on the bits only.
extern "C" __global__ void narrow_bf16(unsigned short* out, const float* x, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint32_t u = __float_as_uint(x[i]);
    out[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (unsigned short)((u >> 16) | 0x40u)
                                              : (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// add_bias: out is (M, N), bias is (N): out[m,n] = out[m,n] ⊕ bias[n], not rounded.
extern "C" __global__ void add_bias(float* out, const float* bias, int M, int N) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)M * N) out[i] = __fadd_rn(out[i], bias[i % N]);
}

// embedding: table is (V, C), tokens is (T), out is (T, C): out[t, :] = round_dt(table[tokens[t], :]).
// Tokens are checked on the host (kernels.EmbeddingForward's error); an out-of-range one writes NaN here.
extern "C" __global__ void embedding(float* out, const float* table, const int* tokens, int T, int V, int C, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * C) return;
    const int t = (int)(i / C), c = (int)(i % C);
    const int id = tokens[t];
    out[i] = (id >= 0 && id < V) ? round_dt(table[(long long)id * C + c], dt) : __uint_as_float(BT_CANONICAL_NAN);
}

// embedding_bf16w: embedding on a table of bf16 bits (the checkpoint's, uploaded as stored), widened exactly.
extern "C" __global__ void embedding_bf16w(float* out, const unsigned short* table, const int* tokens, int T, int V,
                                           int C, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * C) return;
    const int t = (int)(i / C), c = (int)(i % C);
    const int id = tokens[t];
    out[i] = (id >= 0 && id < V) ? round_dt(__uint_as_float((unsigned)table[(long long)id * C + c] << 16), dt)
                                 : __uint_as_float(BT_CANONICAL_NAN);
}

// embedding_f16w: embedding on a table of f16 bits (the checkpoint's, uploaded as stored), widened exactly.
extern "C" __global__ void embedding_f16w(float* out, const unsigned short* table, const int* tokens, int T, int V,
                                          int C, int dt) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)T * C) return;
    const int t = (int)(i / C), c = (int)(i % C);
    const int id = tokens[t];
    out[i] = (id >= 0 && id < V) ? round_dt(widen_f16(table[(long long)id * C + c]), dt)
                                 : __uint_as_float(BT_CANONICAL_NAN);
}
