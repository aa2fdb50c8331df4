// tc_attention.cu: twin of kernels.AttentionTC (docs/arithmetic.md §18 tc.3 on §7), causal grouped-query
// attention with both products on the tensor cores (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32).
// q is (T, nh·hd), k and v are the caches (S, nkv·hd) at positions 0..S-1, pos is (T) int32, out is (T, nh·hd):
// float32 buffers holding bf16 values (the argument list and cache layout of attention.cu; a value's bf16 is the
// high half of its bits). Query head h reads kv head h/(nh/nkv).
//
// A block serves kv head g = blockIdx.y and TC_ATT_WARPS·16 consecutive rows of the T·grp (query, head) pairs
// that read it (row R: query t = R / grp, head g·grp + R % grp), so a decode step's grp heads share one tile and
// GQA reads each K/V block once for all of them. Each warp owns 16 rows, the M of its MMAs. Per 64-key block
// (fixed, from position 0, in order), for every row independently, exactly tc.3:
//   scores: S = Q·Kᵀ as m16n8k16 tiles, each element a chain of hd/16 k-steps from +0 over dims ascending,
//           then ⊗ scale; keys past the row's position are computed and never used;
//   bm: the block's first maximum (a scan with `>` from the first key): the larger value, between equal values
//       the smaller key, NaNs never candidates, and the first key's value when it is NaN (attention.cu's rule);
//   mn, alpha, l ⊗ alpha, acc ⊗ alpha, e_j = Exp(s_j ⊖ mn), l ⊕= e_j in ascending key order (one lane per row
//       runs the chain over the e_j the row's quad wrote to shared memory);
//   p_j = round_bf16(e_j), +0 past the row's end, and acc = step(p[j0…j0+15], v[j0…j0+15], acc) for the four
//       16-key steps j0 = blk, blk+16, blk+32, blk+48, all four always run.
// The keys fall into tc.3's chunks of TC_ATT_CH (four key blocks): each chunk's state starts from scratch and
// the states are folded in chunk order (tc_att_factors, tc_att_fold). tc_attn_hd<HD> folds at the end of each
// chunk as it walks the keys, keeping the folded A in the row's out (float32; only the lane that wrote it
// reads it back) and M, L in registers; tc_attn_dec_hd<HD> gives each chunk its own block and tc_attn_merge
// folds the states it leaves in scratch.
// A row whose position is before the block takes no part in it (its acc is kept as it was). Keys past a row's
// end must be +0 in v too (0·NaN is NaN): v is zeroed in registers past the last key any row of the warp takes in
// that step; where rows of the warp end at different keys of the block and its v holds a NaN or an Inf, each
// row's steps run with v zeroed past its own end (16 passes, one row kept from each); otherwise p's zeros
// already make those products zero, which the k-step drops (tc.1). So a row's bits depend only on its query,
// its position and the cache: the tile it shares, T, and prefill versus chunked prefill versus decode never
// change them.
//
// Built by `make ptx` (committed beside it; scripts/gpu.sh tc); the Go launcher is kernels/cuda/tc_attention.go. Entries:
// tc_attn_hd<HD>(out, q, k, v, pos, T, S, nh, nkv, scale, dt), grid (ceil(T·grp / (16·TC_ATT_WARPS)), nkv),
// TC_ATT_WARPS·32 threads, TC_ATT_SMEM(HD) bytes of dynamic shared memory, for HD = 16, 32, 64, 80, 96, 128;
// tc_attn_dec_hd<HD>(…, dt, part) (HD = 64, 128) below for decode, grid (⌈S/TC_ATT_CH⌉, nkv), then
// tc_attn_merge when that is more than one chunk. tc_attn_batch_hd<HD>(seqs, nh, nkv, scale, dt) and
// tc_attn_dec_batch_hd<HD>(…, part) with tc_attn_merge_batch run many sequences of one layer in one launch
// (grid z: the sequence, a TcAttSeq each; grid x: the most blocks or chunks any sequence needs, the others'
// extra blocks leave at once): every block does what it does in its sequence's own launch, so the bits are
// those of one launch a sequence.
#include "tc_common.cuh"

#define TC_ATT_WARPS 8
#define TC_ATT_KB 64       // keys per block (§7's fixed block)
#define TC_ATT_ELD 72      // the e scratch's row stride (floats)
#define TC_ATT_CH 256      // tc.3's chunk of keys (kernels.AttentionTCChunk): a state from scratch, folded in order
#define TC_ATT_MG 16       // tc_attn_merge: chunk states loaded ahead of their folds
#define TC_NEG_INF __uint_as_float(0xFF800000u)

#ifndef BITALIGN_TC_SIM
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}
#endif

// bf16_hi: the bf16 bits of a float32 holding a bf16 value.
__device__ __forceinline__ uint32_t bf16_hi(float f) { return __float_as_uint(f) >> 16; }
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) { return bf16_hi(lo) | (bf16_hi(hi) << 16); }

// mask_keys: the pair of bf16 in v (keys k0, k0+1 of a step) with the keys ≥ E zeroed.
__device__ __forceinline__ uint32_t mask_keys(uint32_t v, int k0, int E) {
    return (k0 < E ? (v & 0xFFFFu) : 0u) | (k0 + 1 < E ? (v & 0xFFFF0000u) : 0u);
}

// better: (v, i) replaces (bv, bi) in the first-maximum reduction (bi < 0: no candidate yet; i < 0: none).
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return i >= 0 && (bi < 0 || v > bv || (!(bv > v) && i < bi));
}

// tc_att_factors: tc.3's fold of a chunk whose maximum is m into the running state whose maximum is M: the new
// maximum mn and the two scales a (of the running state) and b (of the chunk's), as kernels.FoldTCChunk.
__device__ __forceinline__ void tc_att_factors(float M, float m, float& mn, float& a, float& b) {
    mn = m > M ? m : M;
    a = bt_exp(__fsub_rn(M, mn));
    b = bt_exp(__fsub_rn(m, mn));
}
// tc_att_fold: (A ⊗ a) ⊕ (x ⊗ b), each product and the sum rounded (tc.3: no FMA).
__device__ __forceinline__ float tc_att_fold(float A, float a, float x, float b) {
    return __fadd_rn(__fmul_rn(A, a), __fmul_rn(x, b));
}

// The dynamic shared memory of tc_attn_hd<HD>: two stages of the raw K and V blocks (64 keys × HD float32, as
// cp.async copies them), the K and V blocks as bf16 (rows of HD+8), the e scratch (per warp 16 rows ×
// TC_ATT_ELD floats) and alpha (per warp 16 floats).
#define TC_ATT_SMEM(HD) \
    (2 * 2 * TC_ATT_KB * (HD) * 4 + 2 * TC_ATT_KB * ((HD) + 8) * 2 + TC_ATT_WARPS * 16 * (TC_ATT_ELD + 1) * 4)

// tc_att_issue: cp.async of keys blk … blk+63 (the float32 k and v rows of kv head gh) into raw stage st, zeros
// past pmax (the last key any row of the block reads), then one commit group.
template <int HD>
__device__ __forceinline__ void tc_att_issue(float* raw, const float* __restrict__ k, const float* __restrict__ v,
                                             int blk, int st, int pmax, long long kvStride, int gh) {
    float* const kr = raw + st * 2 * TC_ATT_KB * HD;
    float* const vr = kr + TC_ATT_KB * HD;
    for (int e = threadIdx.x; e < TC_ATT_KB * HD / 4; e += TC_ATT_WARPS * 32) {
        const int j = e / (HD / 4), i = 4 * (e % (HD / 4));
        const bool ok = blk + j <= pmax;
        const long long off = ok ? (long long)(blk + j) * kvStride + (long long)gh * HD + i : 0;
        cp_async16(kr + j * HD + i, k + off, ok ? 16 : 0);
        cp_async16(vr + j * HD + i, v + off, ok ? 16 : 0);
    }
    cp_async_commit();
}

// tc_att_convert: raw stage st as the bf16 K and V blocks (rows of HD+8); returns whether this thread saw a NaN or
// an Inf in v.
template <int HD>
__device__ __forceinline__ int tc_att_convert(uint16_t* Ks, uint16_t* Vs, const float* raw, int st) {
    int special = 0;
    const float* const krs = raw + st * 2 * TC_ATT_KB * HD;
    const float* const vrs = krs + TC_ATT_KB * HD;
    for (int e = threadIdx.x; e < TC_ATT_KB * HD / 4; e += TC_ATT_WARPS * 32) {
        const int j = e / (HD / 4), i = 4 * (e % (HD / 4));
        const float4 kr = *reinterpret_cast<const float4*>(krs + j * HD + i);
        const float4 vr = *reinterpret_cast<const float4*>(vrs + j * HD + i);
        uint2 kb, vb;
        kb.x = pack_bf16(kr.x, kr.y), kb.y = pack_bf16(kr.z, kr.w);
        vb.x = pack_bf16(vr.x, vr.y), vb.y = pack_bf16(vr.z, vr.w);
        special |= ((vb.x & 0x7F80u) == 0x7F80u) | ((vb.x & 0x7F800000u) == 0x7F800000u) |
                   ((vb.y & 0x7F80u) == 0x7F80u) | ((vb.y & 0x7F800000u) == 0x7F800000u);
        *reinterpret_cast<uint2*>(Ks + j * (HD + 8) + i) = kb;
        *reinterpret_cast<uint2*>(Vs + j * (HD + 8) + i) = vb;
    }
    return special;
}

// The kv16 entries (tc_attn_kv16_*) read bf16 caches (the bits of the same bf16 values): cp.async copies each
// 64-key block straight into one of two stages of the bf16 tiles, so there is no float32 staging and no
// conversion, and the block needs a bf16 stage's bytes, half of them. The operands, so the bits, are the same.
#define TC_ATT_SMEM16(HD) (2 * 2 * TC_ATT_KB * ((HD) + 8) * 2 + TC_ATT_WARPS * 16 * (TC_ATT_ELD + 1) * 4)

// TcAttKV: the shared-memory layout of the K/V staging for cache element KV (float: two float32 stages, then
// one pair of bf16 tiles converted from them; uint16_t: two stages of bf16 tiles), in uint16 units: END is where
// the kernel's other shared memory starts.
template <int HD, typename KV>
struct TcAttKV {
    static constexpr bool BF16 = sizeof(KV) == 2;
    static constexpr int RAW = BF16 ? 0 : 2 * 2 * TC_ATT_KB * HD * 2;
    static constexpr int STAGE = 2 * TC_ATT_KB * (HD + 8);  // a K and a V tile
    static constexpr int END = RAW + (BF16 ? 2 : 1) * STAGE;
};

// tc_att_issue_kv: the block of keys blk … blk+63 on its way into stage st (tc_att_issue for a float32 cache;
// straight into the bf16 tiles of stage st for a bf16 one), zeros past pmax, one commit group.
template <int HD, typename KV>
__device__ __forceinline__ void tc_att_issue_kv(uint16_t* smem, const KV* __restrict__ k, const KV* __restrict__ v,
                                                int blk, int st, int pmax, long long kvStride, int gh) {
    if constexpr (!TcAttKV<HD, KV>::BF16) {
        tc_att_issue<HD>(reinterpret_cast<float*>(smem), k, v, blk, st, pmax, kvStride, gh);
    } else {
        uint16_t* const kt = smem + st * TcAttKV<HD, KV>::STAGE;
        uint16_t* const vt = kt + TC_ATT_KB * (HD + 8);
        for (int e = threadIdx.x; e < TC_ATT_KB * HD / 8; e += TC_ATT_WARPS * 32) {
            const int j = e / (HD / 8), i = 8 * (e % (HD / 8));
            const bool ok = blk + j <= pmax;
            const long long off = ok ? (long long)(blk + j) * kvStride + (long long)gh * HD + i : 0;
            cp_async16(kt + j * (HD + 8) + i, k + off, ok ? 16 : 0);
            cp_async16(vt + j * (HD + 8) + i, v + off, ok ? 16 : 0);
        }
        cp_async_commit();
    }
}

// tc_att_ready: after stage st's copies are visible, the bf16 K and V tiles of the block (Ks, Vs): converted from
// the float32 stage, or the bf16 stage itself; returns whether this thread saw a NaN or an Inf in v (its own
// copies: cp.async's writes are visible to the thread that issued them once it waited).
template <int HD, typename KV>
__device__ __forceinline__ int tc_att_ready(uint16_t* smem, int st, uint16_t*& Ks, uint16_t*& Vs) {
    if constexpr (!TcAttKV<HD, KV>::BF16) {
        Ks = smem + TcAttKV<HD, KV>::RAW, Vs = Ks + TC_ATT_KB * (HD + 8);
        return tc_att_convert<HD>(Ks, Vs, reinterpret_cast<const float*>(smem), st);
    } else {
        Ks = smem + st * TcAttKV<HD, KV>::STAGE, Vs = Ks + TC_ATT_KB * (HD + 8);
        uint32_t special = 0;
        for (int e = threadIdx.x; e < TC_ATT_KB * HD / 8; e += TC_ATT_WARPS * 32) {
            const int j = e / (HD / 8), i = 8 * (e % (HD / 8));
            const uint4 w = *reinterpret_cast<const uint4*>(Vs + j * (HD + 8) + i);
            const uint32_t x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int c = 0; c < 4; c++) special |= ((x[c] & 0x7F80u) == 0x7F80u) | ((x[c] & 0x7F800000u) == 0x7F800000u);
        }
        return (int)special;
    }
}

// tc_attn_body: block bx of the nbx that serve kv head blockIdx.y (tc_attn_hd<HD>: blockIdx.x of gridDim.x;
// tc_attn_batch_hd<HD>: the same within the sequence blockIdx.z).
template <int HD, typename KV>
__device__ __forceinline__ void tc_attn_body(float* __restrict__ out, const float* __restrict__ q,
                                             const KV* __restrict__ k, const KV* __restrict__ v,
                                             const int* __restrict__ pos, int T, int S, int nh, int nkv, float scale,
                                             int dt, unsigned bx, unsigned nbx) {
    constexpr int LD = HD + 8;    // bf16 row stride of the K and V blocks: ldmatrix rows spread over the banks
    constexpr int KS = HD / 16;   // k-steps of a score
    constexpr int NO = HD / 8;    // output n-fragments (8 dims each)
    TC_SMEM(smem);  // the K/V staging (TcAttKV), then:
    float* const es = reinterpret_cast<float*>(smem + TcAttKV<HD, KV>::END);  // [warps][16][ELD]
    float* const al = es + TC_ATT_WARPS * 16 * TC_ATT_ELD;            // [warps][16]

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, qd = lane & 3;
    const int grp = nh / nkv, gh = blockIdx.y;
    const long long rows = (long long)T * grp;
    // the last rows (the most keys under the causal mask) first, so that the long blocks do not form the tail
    const long long row0 = (long long)(nbx - 1 - bx) * (16 * TC_ATT_WARPS);
    const long long kvStride = (long long)nkv * HD;

    // position of row R of this kv head, -1 past the rows
    auto row_pos = [&](long long R) { return R < rows ? pos[R / grp] : -1; };
    const long long wr0 = row0 + 16 * warp;       // the warp's first row
    const int P0 = row_pos(wr0 + g), P1 = row_pos(wr0 + g + 8);  // the lane's two rows (g, g+8)
    const int PL = lane < 16 ? row_pos(wr0 + lane) : -1;         // the row whose l this lane keeps
    int pmax = -1;  // the block's last key
    for (int i = 0; i < 16 * TC_ATT_WARPS; i++) pmax = max(pmax, row_pos(row0 + i));
    pmax = min(pmax, S - 1);  // never read past the cache (positions are < S; a bad one reads zeros)
    int pw = max(P0, P1);      // the warp's last key
    for (int d = 4; d < 32; d <<= 1) pw = max(pw, __shfl_xor_sync(0xffffffffu, pw, d));

    // the warp's queries as A fragments: a[kk] for dims 16kk…16kk+15 (zeros past the rows)
    uint32_t qa[KS][4];
    {
        const float* q0 = P0 >= 0 ? q + (((wr0 + g) / grp) * nh + gh * grp + (wr0 + g) % grp) * HD : nullptr;
        const float* q1 = P1 >= 0 ? q + (((wr0 + g + 8) / grp) * nh + gh * grp + (wr0 + g + 8) % grp) * HD : nullptr;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int c = 16 * kk + 2 * qd;
            qa[kk][0] = q0 ? pack_bf16(q0[c], q0[c + 1]) : 0u;
            qa[kk][1] = q1 ? pack_bf16(q1[c], q1[c + 1]) : 0u;
            qa[kk][2] = q0 ? pack_bf16(q0[c + 8], q0[c + 9]) : 0u;
            qa[kk][3] = q1 ? pack_bf16(q1[c + 8], q1[c + 9]) : 0u;
        }
    }
    float acc[NO][4];
#pragma unroll
    for (int f = 0; f < NO; f++) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
    float m0 = TC_NEG_INF, m1 = TC_NEG_INF;  // the chunk's running max of rows g, g+8 (every lane of the quad alike)
    float l = 0.0f;                          // lane r < 16: row r's running sum in the chunk
    float M0 = 0.0f, M1 = 0.0f, LM = 0.0f;   // the folded chunks' max (rows g, g+8) and sum (lane r: row r)
    float* const ew = es + warp * 16 * TC_ATT_ELD;
    float* const aw = al + warp * 16;

    if (pmax >= 0) tc_att_issue_kv<HD>(smem, k, v, 0, 0, pmax, kvStride, gh);
    for (int blk = 0, st = 0; blk <= pmax; blk += TC_ATT_KB, st ^= 1) {  // fixed 64-key blocks from position 0
        if constexpr (TcAttKV<HD, KV>::BF16) __syncthreads();  // every warp is done with the tiles of stage st^1
        if (blk + TC_ATT_KB <= pmax) {
            tc_att_issue_kv<HD>(smem, k, v, blk + TC_ATT_KB, st ^ 1, pmax, kvStride, gh);  // under this block's work
        } else {
            cp_async_commit();  // an empty group, so that wait_group 1 always means "this block's copy"
        }
        cp_async_wait<1>();
        __syncthreads();  // this block's copies are visible; the previous block's bf16 K and V are no longer read
        uint16_t *Ks, *Vs;
        const int special = tc_att_ready<HD, KV>(smem, st, Ks, Vs);
        const bool vspecial = __syncthreads_or(special) != 0;
        if (pw < blk) continue;  // none of the warp's rows reaches this block (warp-uniform)

        // scores: s[f] is keys blk+8f … blk+8f+7 of the warp's 16 rows, chains over the dims from +0
        float s[8][4];
#pragma unroll
        for (int f = 0; f < 8; f++) s[f][0] = s[f][1] = s[f][2] = s[f][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
#pragma unroll
            for (int f = 0; f < 8; f += 2) {  // keys 8f + lane%8 + 8·(lane/16), dims 16kk + 8·((lane/8)%2)
                uint32_t r[4];
                ldmatrix_x4(r, Ks + (8 * f + (lane & 7) + 8 * (lane >> 4)) * LD + 16 * kk + 8 * ((lane >> 3) & 1));
                const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma_bf16(s[f], qa[kk], b0);
                mma_bf16(s[f + 1], qa[kk], b1);
            }
        }
        // the lane's rows: n keys of this block (0: the row takes no part)
        const int n0 = P0 < blk ? 0 : min(TC_ATT_KB, P0 + 1 - blk);
        const int n1 = P1 < blk ? 0 : min(TC_ATT_KB, P1 + 1 - blk);
        // bm, mn, alpha per row (the quad alike), then e into the scratch and p into A fragments
        uint32_t pa[4][4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = h ? n1 : n0;
            float bv = 0.0f;
            int bi = -1;
#pragma unroll
            for (int f = 0; f < 8; f++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const float x = s[f][2 * h + c] = __fmul_rn(s[f][2 * h + c], scale);
                    const int jj = 8 * f + 2 * qd + c;
                    if (jj < n && x == x && (bi < 0 || x > bv)) bv = x, bi = jj;  // keys ascending in the lane
                }
#pragma unroll
            for (int d = 1; d < 4; d <<= 1) {  // the quad: keys of other lanes
                const float ov = __shfl_xor_sync(0xffffffffu, bv, d);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, d);
                if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
            }
            const float first = __shfl_sync(0xffffffffu, s[0][2 * h], lane & ~3);  // key blk: lane 4g, column 0
            const float m = h ? m1 : m0;
            float mn = m;
            if (n > 0) {
                const float bm = (first != first || bi < 0) ? first : bv;
                mn = bm > m ? bm : m;
                const float alpha = bt_exp(__fsub_rn(m, mn));
                if (qd == 0) aw[g + 8 * h] = alpha;
#pragma unroll
                for (int f = 0; f < NO; f++) {
                    acc[f][2 * h] = __fmul_rn(acc[f][2 * h], alpha);
                    acc[f][2 * h + 1] = __fmul_rn(acc[f][2 * h + 1], alpha);
                }
            }
#pragma unroll
            for (int f = 0; f < 8; f++) {
                float e[2];
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int jj = 8 * f + 2 * qd + c;
                    e[c] = jj < n ? bt_exp(__fsub_rn(s[f][2 * h + c], mn)) : 0.0f;
                }
                *reinterpret_cast<float2*>(ew + (g + 8 * h) * TC_ATT_ELD + 8 * f + 2 * qd) = make_float2(e[0], e[1]);
                // p = round_bf16(e), +0 past the row's end (e is +0 there); A fragment of step f/2: a0/a1 keys
                // 2q, 2q+1 of the step (f even), a2/a3 keys 2q+8, 2q+9 (f odd); a0/a2 row g, a1/a3 row g+8
                pa[f >> 1][2 * (f & 1) + h] = pack_bf16(round_bf16(e[0]), round_bf16(e[1]));
            }
            if (h) m1 = mn;
            else m0 = mn;
        }
        __syncwarp();
        // l: lane r runs row r's chain, keys ascending
        if (lane < 16 && PL >= blk) {
            const int n = min(TC_ATT_KB, PL + 1 - blk);
            l = __fmul_rn(l, aw[lane]);
            const float* er = ew + lane * TC_ATT_ELD;
            for (int jj = 0; jj < n; jj++) l = __fadd_rn(l, er[jj]);
        }
        __syncwarp();  // the scratch is rewritten by the next block

        // the warp's rows taking part: nmin (least keys), nmax (most keys) of this block
        int nlo = min(n0 > 0 ? n0 : TC_ATT_KB + 1, n1 > 0 ? n1 : TC_ATT_KB + 1), nhi = max(n0, n1);
        for (int d = 4; d < 32; d <<= 1) {
            nlo = min(nlo, __shfl_xor_sync(0xffffffffu, nlo, d));
            nhi = max(nhi, __shfl_xor_sync(0xffffffffu, nhi, d));
        }
        // p·V: output fragments f, f+1 (dims 8f … 8f+15); per fragment the four steps in order
        if (!(vspecial && nlo < nhi)) {  // (warp-uniform) one MMA a step: v +0 past the warp's last key in it
#pragma unroll
            for (int f = 0; f < NO; f += 2) {
                float t0[4], t1[4];
#pragma unroll
                for (int e = 0; e < 4; e++) t0[e] = acc[f][e], t1[e] = acc[f + 1][e];
#pragma unroll
                for (int st = 0; st < 4; st++) {
                    uint32_t r[4];  // keys 16st + lane%8 + 8·((lane/8)%2), dims 8f + 8·(lane/16), transposed
                    ldmatrix_x4_trans(r, Vs + (16 * st + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * f + 8 * (lane >> 4));
                    const int ehi = min(16, max(0, nhi - 16 * st));
                    const uint32_t b0[2] = {mask_keys(r[0], 2 * qd, ehi), mask_keys(r[1], 2 * qd + 8, ehi)};
                    const uint32_t b1[2] = {mask_keys(r[2], 2 * qd, ehi), mask_keys(r[3], 2 * qd + 8, ehi)};
                    mma_bf16(t0, pa[st], b0);
                    mma_bf16(t1, pa[st], b1);
                }
                // rows taking no part in this block keep their acc
                if (n0 > 0) acc[f][0] = t0[0], acc[f][1] = t0[1], acc[f + 1][0] = t1[0], acc[f + 1][1] = t1[1];
                if (n1 > 0) acc[f][2] = t0[2], acc[f][3] = t0[3], acc[f + 1][2] = t1[2], acc[f + 1][3] = t1[3];
            }
        } else {  // rows end at different keys and v holds a NaN or an Inf: each row's steps with v +0 past its end
#pragma unroll 1
            for (int rr = 0; rr < 16; rr++) {
                const int Pr = row_pos(wr0 + rr);
                if (Pr < blk) continue;  // warp-uniform: the row takes no part in this block
                const int nr = min(TC_ATT_KB, Pr + 1 - blk);
                const bool lo = g == rr && rr < 8, hi = g + 8 == rr;  // the lane holds row rr as d0,d1 / d2,d3
#pragma unroll
                for (int f = 0; f < NO; f += 2) {
                    float u0[4], u1[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) u0[e] = acc[f][e], u1[e] = acc[f + 1][e];
#pragma unroll
                    for (int st = 0; st < 4; st++) {
                        uint32_t r[4];
                        ldmatrix_x4_trans(r, Vs + (16 * st + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * f + 8 * (lane >> 4));
                        const int E = min(16, max(0, nr - 16 * st));
                        const uint32_t b0[2] = {mask_keys(r[0], 2 * qd, E), mask_keys(r[1], 2 * qd + 8, E)};
                        const uint32_t b1[2] = {mask_keys(r[2], 2 * qd, E), mask_keys(r[3], 2 * qd + 8, E)};
                        mma_bf16(u0, pa[st], b0);
                        mma_bf16(u1, pa[st], b1);
                    }
                    if (lo) acc[f][0] = u0[0], acc[f][1] = u0[1], acc[f + 1][0] = u1[0], acc[f + 1][1] = u1[1];
                    if (hi) acc[f][2] = u0[2], acc[f][3] = u0[3], acc[f + 1][2] = u1[2], acc[f + 1][3] = u1[3];
                }
            }
        }
        // the end of a chunk (or of the warp's keys): every row that took part in the chunk folds its state into
        // (M, L, A) (the first chunk as it is); a row with keys past the chunk keeps A in its out row (float32,
        // read back by the same lane at the next fold) and starts the next chunk from scratch, the others keep
        // the folded state in acc and l for the output
        if ((blk + TC_ATT_KB) % TC_ATT_CH == 0 || blk + TC_ATT_KB > pw) {  // warp-uniform
            const int cs = blk - blk % TC_ATT_CH;
            float fa[2] = {0.0f, 0.0f}, fb[2] = {0.0f, 0.0f};
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int P = h ? P1 : P0;
                if (P < cs) continue;  // no part in this chunk
                float& M = h ? M1 : M0;
                float& m = h ? m1 : m0;
                const long long R = wr0 + g + 8 * h;
                float* o = out + ((R / grp) * nh + gh * grp + R % grp) * HD + 2 * qd;
                if (cs > 0) {
                    float mn;
                    tc_att_factors(M, m, mn, fa[h], fb[h]);
#pragma unroll
                    for (int f = 0; f < NO; f++) {
                        const float2 A = *reinterpret_cast<const float2*>(o + 8 * f);
                        acc[f][2 * h] = tc_att_fold(A.x, fa[h], acc[f][2 * h], fb[h]);
                        acc[f][2 * h + 1] = tc_att_fold(A.y, fa[h], acc[f][2 * h + 1], fb[h]);
                    }
                    M = mn;
                } else {
                    M = m;
                }
                if (P >= cs + TC_ATT_CH) {  // more chunks: A to the out row, the next chunk from scratch
#pragma unroll
                    for (int f = 0; f < NO; f++) {
                        *reinterpret_cast<float2*>(o + 8 * f) = make_float2(acc[f][2 * h], acc[f][2 * h + 1]);
                        acc[f][2 * h] = acc[f][2 * h + 1] = 0.0f;
                    }
                    m = TC_NEG_INF;
                }
            }
            // L: lane r < 16 (row r) with its row's scales, from the quad that computed them (lane 4·(r mod 8))
            const float a0 = __shfl_sync(0xffffffffu, fa[0], 4 * (lane & 7)), a1 = __shfl_sync(0xffffffffu, fa[1], 4 * (lane & 7));
            const float b0 = __shfl_sync(0xffffffffu, fb[0], 4 * (lane & 7)), b1 = __shfl_sync(0xffffffffu, fb[1], 4 * (lane & 7));
            if (lane < 16 && PL >= cs) {
                LM = cs > 0 ? tc_att_fold(LM, lane < 8 ? a0 : a1, l, lane < 8 ? b0 : b1) : l;
                l = PL >= cs + TC_ATT_CH ? 0.0f : LM;
            }
        }
    }
    cp_async_wait<0>();
    // out = round_dt(acc ⊘ l), l from the lane that kept it (the folded state)
    const float l0 = __shfl_sync(0xffffffffu, l, g), l1 = __shfl_sync(0xffffffffu, l, g + 8);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const long long R = wr0 + g + 8 * h;
        if ((h ? P1 : P0) < 0) continue;
        const float lr = h ? l1 : l0;
        float* o = out + ((R / grp) * nh + gh * grp + R % grp) * HD;
#pragma unroll
        for (int f = 0; f < NO; f++) {
            const int c = 8 * f + 2 * qd;
            o[c] = round_dt(__fdiv_rn(acc[f][2 * h], lr), dt);
            o[c + 1] = round_dt(__fdiv_rn(acc[f][2 * h + 1], lr), dt);
        }
    }
}


// ---------------------------------------------------------------------------------------------------------
// tc_attn_dec_hd<HD>: the same operations for a block of 16 rows (a decode step's grp heads, T·grp ≤ 16), with
// each 64-key block's work spread over the 8 warps instead of one: warp w computes the scores of keys 8w … 8w+7
// (its m16n8 tile, the same chains), the softmax bookkeeping of rows 2w and 2w+1 (16 lanes a row, 4 keys a lane;
// the first maximum by the same reduction; lane 0 of the half runs the row's l chain), and p·V for its output
// dims HD/8·w … (the four steps, the same masking). Scores, e, p and alpha pass through shared memory. Every
// element sees the operations of tc_attn_hd<HD> in the same order, so the bits are the same.
// A block serves one chunk of keys (tc.3: blockIdx.x = c, keys [256c, 256c+256)) of its kv head: the chunk's
// state from scratch. A row with one chunk (position < 256) is done in block 0, which writes its output; every
// other row's block writes the chunk's state (m, l, acc: HD+2 floats, TC_ATT_PART) to part, and tc_attn_merge
// folds the states in chunk order. So a decode step of S keys is ⌈S/256⌉ blocks per kv head and sequence.
// TC_ATT_PART_AT: the float offset in part of the state of chunk c (of nch) of row R (of the 16 of a decode
// block) of kv head gh (of nkv), sequence z: [z][c][gh][R][m, l, acc[HD]] (Go's tcAttPartFloats sizes it).
#define TC_ATT_PART_AT(z, c, nch, gh, nkv, R, HD) \
    (((((long long)(z) * (nch) + (c)) * (nkv) + (gh)) * 16 + (R)) * ((HD) + 2))
#define TC_ATT_DEC_SMEM(HD)                                                                            \
    (2 * 2 * TC_ATT_KB * (HD) * 4 + 2 * TC_ATT_KB * ((HD) + 8) * 2 + 16 * TC_ATT_KB * 4 + 16 * TC_ATT_ELD * 4 + \
     16 * (TC_ATT_KB + 8) * 2 + 2 * 16 * 4)
#define TC_ATT_DEC_SMEM16(HD)                                                                                   \
    (2 * 2 * TC_ATT_KB * ((HD) + 8) * 2 + 16 * TC_ATT_KB * 4 + 16 * TC_ATT_ELD * 4 + 16 * (TC_ATT_KB + 8) * 2 + \
     2 * 16 * 4)

template <int HD, typename KV>
__device__ __forceinline__ void tc_attn_dec_body(float* __restrict__ out, const float* __restrict__ q,
                                                 const KV* __restrict__ k, const KV* __restrict__ v,
                                                 const int* __restrict__ pos, int T, int S, int nh, int nkv,
                                                 float scale, int dt, float* __restrict__ part, unsigned z) {
    constexpr int LD = HD + 8;
    constexpr int KS = HD / 16;
    constexpr int PLD = TC_ATT_KB + 8;   // bf16 row stride of p
    constexpr int DW = HD / TC_ATT_WARPS;  // output dims of a warp: 16 (hd 128) or 8 (hd 64)
    static_assert(DW == 16 || DW == 8, "tc_attn_dec: HD / 8 warps must be 8 or 16 dims");
    TC_SMEM(smem);  // the K/V staging (TcAttKV), then:
    float* const ss = reinterpret_cast<float*>(smem + TcAttKV<HD, KV>::END);  // [16][64] scaled scores
    float* const es = ss + 16 * TC_ATT_KB;                             // [16][ELD] e
    uint16_t* const ps = reinterpret_cast<uint16_t*>(es + 16 * TC_ATT_ELD);  // [16][PLD] p (bf16)
    float* const as = reinterpret_cast<float*>(ps + 16 * PLD);         // [16] alpha
    float* const ls = as + 16;                                          // [16] l at the end

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, qd = lane & 3;
    const int grp = nh / nkv, gh = blockIdx.y;
    const long long rows = (long long)T * grp;
    const long long row0 = 0;
    const long long kvStride = (long long)nkv * HD;
    const int cs = blockIdx.x * TC_ATT_CH;  // the chunk's first key
    auto row_pos = [&](long long R) { return R < rows ? pos[R / grp] : -1; };
    const int P0 = row_pos(row0 + g), P1 = row_pos(row0 + g + 8);  // the fragments' rows
    const int sr = 2 * warp + (lane >> 4), sl = lane & 15;          // the softmax's row and lane
    const int PS = row_pos(row0 + sr);
    int pmax = -1;
    for (int i = 0; i < 16; i++) pmax = max(pmax, row_pos(row0 + i));
    pmax = min(pmax, S - 1);
    if (pmax < cs) return;  // no row reaches the chunk (block-uniform)
    const int cend = min(pmax, cs + TC_ATT_CH - 1);  // the chunk's last key any row reads

    uint32_t qa[KS][4];
    {
        const float* q0 = P0 >= 0 ? q + (((row0 + g) / grp) * nh + gh * grp + (row0 + g) % grp) * HD : nullptr;
        const float* q1 = P1 >= 0 ? q + (((row0 + g + 8) / grp) * nh + gh * grp + (row0 + g + 8) % grp) * HD : nullptr;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int c = 16 * kk + 2 * qd;
            qa[kk][0] = q0 ? pack_bf16(q0[c], q0[c + 1]) : 0u;
            qa[kk][1] = q1 ? pack_bf16(q1[c], q1[c + 1]) : 0u;
            qa[kk][2] = q0 ? pack_bf16(q0[c + 8], q0[c + 9]) : 0u;
            qa[kk][3] = q1 ? pack_bf16(q1[c + 8], q1[c + 9]) : 0u;
        }
    }
    float acc[DW / 8][4];
#pragma unroll
    for (int f = 0; f < DW / 8; f++) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
    float m = TC_NEG_INF, l = 0.0f;  // row sr's running max (its 16 lanes alike) and sum (lane sl = 0)
    const int d0 = warp * DW;         // the warp's first output dim

    tc_att_issue_kv<HD>(smem, k, v, cs, 0, cend, kvStride, gh);
    for (int blk = cs, st = 0; blk <= cend; blk += TC_ATT_KB, st ^= 1) {  // the chunk's 64-key blocks in order
        if constexpr (TcAttKV<HD, KV>::BF16) __syncthreads();  // every warp is done with the tiles of stage st^1
        if (blk + TC_ATT_KB <= cend) {
            tc_att_issue_kv<HD>(smem, k, v, blk + TC_ATT_KB, st ^ 1, cend, kvStride, gh);
        } else {
            cp_async_commit();
        }
        cp_async_wait<1>();
        __syncthreads();  // this block's copies are visible; the previous block's p·V no longer reads Ks, Vs, ps
        uint16_t *Ks, *Vs;
        const int special = tc_att_ready<HD, KV>(smem, st, Ks, Vs);
        const bool vspecial = __syncthreads_or(special) != 0;

        // scores of keys blk+8w … blk+8w+7 (warp w), chains over the dims from +0, then ⊗ scale
        {
            float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {  // lanes 0..15: keys 8w + lane%8, dims 16kk + 8·((lane/8)%2)
                uint32_t r[2];
                ldmatrix_x2(r, Ks + (8 * warp + (lane & 7)) * LD + 16 * kk + 8 * ((lane >> 3) & 1));
                mma_bf16(sc, qa[kk], r);
            }
            *reinterpret_cast<float2*>(ss + g * TC_ATT_KB + 8 * warp + 2 * qd) =
                make_float2(__fmul_rn(sc[0], scale), __fmul_rn(sc[1], scale));
            *reinterpret_cast<float2*>(ss + (g + 8) * TC_ATT_KB + 8 * warp + 2 * qd) =
                make_float2(__fmul_rn(sc[2], scale), __fmul_rn(sc[3], scale));
        }
        __syncthreads();
        // row sr: keys 4sl … 4sl+3 of the block; bm, mn, alpha; e and p into shared memory
        {
            const int n = PS < blk ? 0 : min(TC_ATT_KB, PS + 1 - blk);
            const float4 x4 = *reinterpret_cast<const float4*>(ss + sr * TC_ATT_KB + 4 * sl);
            const float x[4] = {x4.x, x4.y, x4.z, x4.w};
            float bv = 0.0f;
            int bi = -1;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int jj = 4 * sl + c;
                if (jj < n && x[c] == x[c] && (bi < 0 || x[c] > bv)) bv = x[c], bi = jj;
            }
#pragma unroll
            for (int d = 1; d < 16; d <<= 1) {  // the row's 16 lanes
                const float ov = __shfl_xor_sync(0xffffffffu, bv, d);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, d);
                if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
            }
            float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (n > 0) {
                const float first = ss[sr * TC_ATT_KB];
                const float bm = (first != first || bi < 0) ? first : bv;
                const float mn = bm > m ? bm : m;
                if (sl == 0) as[sr] = bt_exp(__fsub_rn(m, mn));
#pragma unroll
                for (int c = 0; c < 4; c++)
                    if (4 * sl + c < n) e[c] = bt_exp(__fsub_rn(x[c], mn));
                m = mn;
            }
            *reinterpret_cast<float4*>(es + sr * TC_ATT_ELD + 4 * sl) = make_float4(e[0], e[1], e[2], e[3]);
            uint2 pb;  // p = round_bf16(e), +0 past the row's end (e is +0 there)
            pb.x = pack_bf16(round_bf16(e[0]), round_bf16(e[1])), pb.y = pack_bf16(round_bf16(e[2]), round_bf16(e[3]));
            *reinterpret_cast<uint2*>(ps + sr * PLD + 4 * sl) = pb;
            __syncwarp();
            if (sl == 0 && n > 0) {  // l: the row's chain, keys ascending
                l = __fmul_rn(l, as[sr]);
                const float* er = es + sr * TC_ATT_ELD;
                for (int jj = 0; jj < n; jj++) l = __fadd_rn(l, er[jj]);
            }
        }
        __syncthreads();  // p and alpha of every row are in shared memory
        // p·V for dims d0 … d0+DW-1 of the 16 rows
        const int n0 = P0 < blk ? 0 : min(TC_ATT_KB, P0 + 1 - blk);
        const int n1 = P1 < blk ? 0 : min(TC_ATT_KB, P1 + 1 - blk);
        if (n0 > 0) {
            const float a = as[g];
#pragma unroll
            for (int f = 0; f < DW / 8; f++) acc[f][0] = __fmul_rn(acc[f][0], a), acc[f][1] = __fmul_rn(acc[f][1], a);
        }
        if (n1 > 0) {
            const float a = as[g + 8];
#pragma unroll
            for (int f = 0; f < DW / 8; f++) acc[f][2] = __fmul_rn(acc[f][2], a), acc[f][3] = __fmul_rn(acc[f][3], a);
        }
        int nlo = min(n0 > 0 ? n0 : TC_ATT_KB + 1, n1 > 0 ? n1 : TC_ATT_KB + 1), nhi = max(n0, n1);
        for (int d = 4; d < 32; d <<= 1) {
            nlo = min(nlo, __shfl_xor_sync(0xffffffffu, nlo, d));
            nhi = max(nhi, __shfl_xor_sync(0xffffffffu, nhi, d));
        }
        if (nhi == 0) continue;  // no row takes part in this block (block-uniform: a row's position is before it)
        uint32_t pa[4][4];  // A fragments of the four steps: rows lane%16, keys 16st + 8·(lane/16)
#pragma unroll
        for (int s4 = 0; s4 < 4; s4++) ldmatrix_x4(pa[s4], ps + (lane & 15) * PLD + 16 * s4 + 8 * (lane >> 4));
        // v of step s4 for the warp's dims (transposed): b[f] for dims d0 + 8f
        auto vfrag = [&](uint32_t (&b)[DW / 8][2], int s4, int E) {
            if constexpr (DW == 16) {
                uint32_t r[4];
                ldmatrix_x4_trans(r, Vs + (16 * s4 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + d0 + 8 * (lane >> 4));
                b[0][0] = mask_keys(r[0], 2 * qd, E), b[0][1] = mask_keys(r[1], 2 * qd + 8, E);
                b[1][0] = mask_keys(r[2], 2 * qd, E), b[1][1] = mask_keys(r[3], 2 * qd + 8, E);
            } else {
                uint32_t r[2];  // lanes 0..15 give the rows
                ldmatrix_x2_trans(r, Vs + (16 * s4 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + d0);
                b[0][0] = mask_keys(r[0], 2 * qd, E), b[0][1] = mask_keys(r[1], 2 * qd + 8, E);
            }
        };
        if (!(vspecial && nlo < nhi)) {  // one MMA a step and fragment: v +0 past the last key any row takes
            float t[DW / 8][4];
#pragma unroll
            for (int f = 0; f < DW / 8; f++)
#pragma unroll
                for (int e = 0; e < 4; e++) t[f][e] = acc[f][e];
#pragma unroll
            for (int s4 = 0; s4 < 4; s4++) {
                uint32_t b[DW / 8][2];
                vfrag(b, s4, min(16, max(0, nhi - 16 * s4)));
#pragma unroll
                for (int f = 0; f < DW / 8; f++) mma_bf16(t[f], pa[s4], b[f]);
            }
#pragma unroll
            for (int f = 0; f < DW / 8; f++) {  // rows taking no part in this block keep their acc
                if (n0 > 0) acc[f][0] = t[f][0], acc[f][1] = t[f][1];
                if (n1 > 0) acc[f][2] = t[f][2], acc[f][3] = t[f][3];
            }
        } else {  // each row's steps with v +0 past its own end
#pragma unroll 1
            for (int rr = 0; rr < 16; rr++) {
                const int Pr = row_pos(row0 + rr);
                if (Pr < blk) continue;
                const int nr = min(TC_ATT_KB, Pr + 1 - blk);
                const bool lo = g == rr && rr < 8, hi = g + 8 == rr;
                float u[DW / 8][4];
#pragma unroll
                for (int f = 0; f < DW / 8; f++)
#pragma unroll
                    for (int e = 0; e < 4; e++) u[f][e] = acc[f][e];
#pragma unroll
                for (int s4 = 0; s4 < 4; s4++) {
                    uint32_t b[DW / 8][2];
                    vfrag(b, s4, min(16, max(0, nr - 16 * s4)));
#pragma unroll
                    for (int f = 0; f < DW / 8; f++) mma_bf16(u[f], pa[s4], b[f]);
                }
#pragma unroll
                for (int f = 0; f < DW / 8; f++) {
                    if (lo) acc[f][0] = u[f][0], acc[f][1] = u[f][1];
                    if (hi) acc[f][2] = u[f][2], acc[f][3] = u[f][3];
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp's p·V has read alpha
    if (sl == 0) ls[sr] = l, as[sr] = m;
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const long long R = row0 + g + 8 * h;
        const int P = h ? P1 : P0;
        if (P < cs) continue;  // no part in this chunk (or past the rows)
        const float lr = ls[g + 8 * h];
        if (P < TC_ATT_CH) {  // one chunk: the row's output
            float* o = out + ((R / grp) * nh + gh * grp + R % grp) * HD + d0;
#pragma unroll
            for (int f = 0; f < DW / 8; f++) {
                const int c = 8 * f + 2 * qd;
                o[c] = round_dt(__fdiv_rn(acc[f][2 * h], lr), dt);
                o[c + 1] = round_dt(__fdiv_rn(acc[f][2 * h + 1], lr), dt);
            }
            continue;
        }
        float* e = part + TC_ATT_PART_AT(z, blockIdx.x, gridDim.x, gh, nkv, R, HD);  // the chunk's state
        if (warp == 0 && qd == 0) e[0] = as[g + 8 * h], e[1] = lr;
#pragma unroll
        for (int f = 0; f < DW / 8; f++)
            *reinterpret_cast<float2*>(e + 2 + d0 + 8 * f + 2 * qd) = make_float2(acc[f][2 * h], acc[f][2 * h + 1]);
    }
}

// tc_attn_merge_body: tc.3's fold of the chunk states tc_attn_dec_body wrote to part, one thread per output
// element of the rows with more than one chunk (the decode kernel wrote the others), in chunk order; out =
// round_dt(A ⊘ L). nch is the decode launch's grid x (the chunks of its longest sequence).
__device__ __forceinline__ void tc_attn_merge_body(float* __restrict__ out, const int* __restrict__ pos,
                                                   const float* __restrict__ part, int T, int nh, int nkv, int hd,
                                                   int dt, unsigned nch, unsigned z) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)T * nh * hd) return;
    const int i = (int)(idx % hd), th = (int)(idx / hd), t = th / nh, h = th % nh;
    const int grp = nh / nkv, gh = h / grp;
    const long long R = (long long)t * grp + h % grp;
    const int n = min(pos[t] / TC_ATT_CH + 1, (int)nch);  // the row's chunks (a bad position reads no more)
    if (n <= 1) return;
    const float* e = part + TC_ATT_PART_AT(z, 0, nch, gh, nkv, R, hd);
    const long long cstride = TC_ATT_PART_AT(0, 1, nch, 0, nkv, 0, hd);  // one chunk further
    float M = e[0], L = e[1], A = e[2 + i];
    // the states' loads in groups of TC_ATT_MG, all issued before the group's folds (the fold is a chain; the
    // loads are not: one at a time, a long cache's 128 chunks were 128 memory latencies in a row)
    for (int c0 = 1; c0 < n; c0 += TC_ATT_MG) {
        float xm[TC_ATT_MG], xl[TC_ATT_MG], xv[TC_ATT_MG];
#pragma unroll
        for (int j = 0; j < TC_ATT_MG; j++) {
            const float* ej = e + (c0 + j < n ? (long long)(c0 + j) * cstride : 0);
            xm[j] = ej[0], xl[j] = ej[1], xv[j] = ej[2 + i];
        }
#pragma unroll
        for (int j = 0; j < TC_ATT_MG; j++) {
            if (c0 + j >= n) break;
            float mn, a, b;
            tc_att_factors(M, xm[j], mn, a, b);
            L = tc_att_fold(L, a, xl[j], b);
            A = tc_att_fold(A, a, xv[j], b);
            M = mn;
        }
    }
    out[idx] = round_dt(__fdiv_rn(A, L), dt);
}

// TcAttSeq: one sequence of a batched launch (tc_attn_batch_hd<HD>, tc_attn_dec_batch_hd<HD>: blockIdx.z is the
// sequence; the arguments of tc_attn_hd<HD> that differ between sequences). 48 bytes, the layout of Go's
// cudakernels.TCAttSeq.
struct TcAttSeq {
    float* out;
    const float* q;
    const float* k;
    const float* v;
    const int* pos;
    int T, S;
};

// The entries of head dim HD for cache element KV (float: tc_attn_*, uint16_t (bf16 bits): tc_attn_kv16_*).
#define TC_ATT_ENTRY_KV(HD, KV, NAME, BNAME)                                                                      \
    extern "C" __global__ void __launch_bounds__(TC_ATT_WARPS * 32) NAME(                                         \
        float* __restrict__ out, const float* __restrict__ q, const KV* __restrict__ k, const KV* __restrict__ v, \
        const int* __restrict__ pos, int T, int S, int nh, int nkv, float scale, int dt) {                        \
        tc_attn_body<HD, KV>(out, q, k, v, pos, T, S, nh, nkv, scale, dt, blockIdx.x, gridDim.x);                 \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(TC_ATT_WARPS * 32)                                               \
        BNAME(const TcAttSeq* __restrict__ seqs, int nh, int nkv, float scale, int dt) {                          \
        const TcAttSeq s = seqs[blockIdx.z];                                                                      \
        const unsigned nbx = (unsigned)(((long long)s.T * (nh / nkv) + 16 * TC_ATT_WARPS - 1) / (16 * TC_ATT_WARPS)); \
        if (blockIdx.x >= nbx) return; /* a shorter sequence: the whole block leaves */                           \
        tc_attn_body<HD, KV>(s.out, s.q, (const KV*)s.k, (const KV*)s.v, s.pos, s.T, s.S, nh, nkv, scale, dt,     \
                             blockIdx.x, nbx);                                                                    \
    }
#define TC_ATT_ENTRY(HD)                                                                        \
    TC_ATT_ENTRY_KV(HD, float, tc_attn_hd##HD, tc_attn_batch_hd##HD)                            \
    TC_ATT_ENTRY_KV(HD, uint16_t, tc_attn_kv16_hd##HD, tc_attn_kv16_batch_hd##HD)
#define TC_ATT_DEC_ENTRY_KV(HD, KV, NAME, BNAME)                                                                  \
    extern "C" __global__ void __launch_bounds__(TC_ATT_WARPS * 32) NAME(                                         \
        float* __restrict__ out, const float* __restrict__ q, const KV* __restrict__ k, const KV* __restrict__ v, \
        const int* __restrict__ pos, int T, int S, int nh, int nkv, float scale, int dt, float* __restrict__ part) { \
        tc_attn_dec_body<HD, KV>(out, q, k, v, pos, T, S, nh, nkv, scale, dt, part, 0);                           \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(TC_ATT_WARPS * 32) BNAME(                                        \
        const TcAttSeq* __restrict__ seqs, int nh, int nkv, float scale, int dt, float* __restrict__ part) {       \
        const TcAttSeq s = seqs[blockIdx.z];                                                                      \
        if ((int)blockIdx.x * TC_ATT_CH >= s.S) return; /* a shorter sequence's spare chunks */                   \
        tc_attn_dec_body<HD, KV>(s.out, s.q, (const KV*)s.k, (const KV*)s.v, s.pos, s.T, s.S, nh, nkv, scale, dt, \
                                 part, blockIdx.z);                                                               \
    }
#define TC_ATT_DEC_ENTRY(HD)                                                                    \
    TC_ATT_DEC_ENTRY_KV(HD, float, tc_attn_dec_hd##HD, tc_attn_dec_batch_hd##HD)                \
    TC_ATT_DEC_ENTRY_KV(HD, uint16_t, tc_attn_kv16_dec_hd##HD, tc_attn_kv16_dec_batch_hd##HD)
TC_ATT_ENTRY(16)
TC_ATT_ENTRY(32)
TC_ATT_ENTRY(64)
TC_ATT_ENTRY(80)
TC_ATT_ENTRY(96)
TC_ATT_ENTRY(128)
TC_ATT_DEC_ENTRY(64)
TC_ATT_DEC_ENTRY(128)

// tc_attn_merge(out, pos, part, T, nh, nkv, hd, dt, nch): after tc_attn_dec_hd<hd> with grid x nch > 1, grid
// ⌈T·nh·hd / 256⌉, 256 threads; tc_attn_merge_batch(seqs, part, nh, nkv, hd, dt, nch) after
// tc_attn_dec_batch_hd<hd>, grid (⌈max T·nh·hd / 256⌉, 1, sequences).
extern "C" __global__ void __launch_bounds__(256) tc_attn_merge(float* __restrict__ out, const int* __restrict__ pos,
                                                               const float* __restrict__ part, int T, int nh, int nkv,
                                                               int hd, int dt, int nch) {
    tc_attn_merge_body(out, pos, part, T, nh, nkv, hd, dt, (unsigned)nch, 0);
}
extern "C" __global__ void __launch_bounds__(256) tc_attn_merge_batch(const TcAttSeq* __restrict__ seqs,
                                                                     const float* __restrict__ part, int nh, int nkv,
                                                                     int hd, int dt, int nch) {
    const TcAttSeq s = seqs[blockIdx.z];
    tc_attn_merge_body(s.out, s.pos, part, s.T, nh, nkv, hd, dt, (unsigned)nch, blockIdx.z);
}
