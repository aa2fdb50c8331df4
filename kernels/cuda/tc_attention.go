package cudakernels

import (
	"fmt"
	"slices"
	"strings"

	"bitalign/cuda"
	"bitalign/kernels"
)

// The `tc` profile's attention on the tensor cores (docs/arithmetic.md §18, tc.3): tc/tc_attention.cu, the twin
// of kernels.AttentionTC, behind AttentionForward with p == kernels.TC. Like the tc matmul its PTX is committed
// beside its source (tc/tc_attention.ptx, `make ptx`) and loaded only when it loads; without it HasTCAttention says
// why and AttentionForward(kernels.TC, ...) returns that error.

// tcAttModule is tc_attention.cu's module.
const tcAttModule = "tc_attention"

// tcAttWarps and tcAttELD are tc_attention.cu's TC_ATT_WARPS (warps of a block, 16 (query, head) rows each) and
// TC_ATT_ELD (its e scratch's row stride in floats): TestTCAttentionMatchesSource reads them there.
const tcAttWarps, tcAttELD = 8, 72

// tcAttHeadDims are the head dims tc_attention.cu instantiates (tc_attn_hd<HD>), tcAttDecHeadDims those of
// tc_attn_dec_hd<HD> (its warps split hd into 8 slices of 8 or 16 dims).
var tcAttHeadDims, tcAttDecHeadDims = []int{16, 32, 64, 80, 96, 128}, []int{64, 128}

// tcAttSmem is tc_attn_hd<hd>'s dynamic shared memory (TC_ATT_SMEM; the simulation refuses less): two stages of
// the raw float32 K and V blocks, the K and V blocks as bf16 (64 keys × hd in rows of hd+8), the per-warp e
// scratch (16 × TC_ATT_ELD floats) and alpha (16 floats).
func tcAttSmem(hd int) int {
	kb := kernels.AttentionBlock
	return 2*2*kb*hd*4 + 2*kb*(hd+8)*2 + tcAttWarps*16*(tcAttELD+1)*4
}

// tcAttDecSmem is tc_attn_dec_hd<hd>'s (TC_ATT_DEC_SMEM): the same K/V stages and blocks, then the scores
// (16 × 64 floats), e (16 × TC_ATT_ELD), p (16 × 72 bf16), alpha and l (16 floats each).
func tcAttDecSmem(hd int) int {
	kb := kernels.AttentionBlock
	return 2*2*kb*hd*4 + 2*kb*(hd+8)*2 + 16*kb*4 + 16*tcAttELD*4 + 16*(kb+8)*2 + 2*16*4
}

// planTCAttention is the launch of tc attention for T queries: one block per 16·tcAttWarps consecutive (query,
// head) rows of a kv head (grid y), so a block's rows share each K and V block it stages (tc_attn_hd<hd>); when
// all of a kv head's rows fit in 16 (T·grp ≤ 16: decode), tc_attn_dec_hd<hd>, which spreads each key block's
// work over the block's warps (the same bits: main forces tc_attn_hd<hd>, for the tests).
func planTCAttention(T, nh, nkv, hd int, main bool) Launch {
	rows := int64(T) * int64(nh/nkv)
	if rows <= 16 && !main && slices.Contains(tcAttDecHeadDims, hd) {
		return Launch{Kernel: fmt.Sprintf("tc_attn_dec_hd%d", hd), Grid: cuda.Dim3{X: 1, Y: nkv},
			Block: cuda.Dim3{X: 32 * tcAttWarps}, Smem: tcAttDecSmem(hd)}
	}
	return Launch{Kernel: fmt.Sprintf("tc_attn_hd%d", hd), Grid: cuda.Dim3{X: ceilDiv(rows, 16*tcAttWarps), Y: nkv},
		Block: cuda.Dim3{X: 32 * tcAttWarps}, Smem: tcAttSmem(hd)}
}

// HasTCAttention returns nil when tc_attention's kernels are loaded, else why not.
func (k *Kernels) HasTCAttention() error { return k.tcAttErr }

// attentionTC runs tc.3 (kernels.AttentionTC's bits): q, kc, vc float32 holding bf16 values (the caller's
// rounding; a value's bf16 is the high half of its bits), the argument list of AttentionForward.
func (k *Kernels) attentionTC(c *cuda.Ctx, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32) error {
	if k.tcAttErr != nil {
		return k.tcAttErr
	}
	ok := false
	for _, d := range tcAttHeadDims {
		ok = ok || d == hd
	}
	if !ok {
		return fmt.Errorf("cudakernels: AttentionForward: the tc profile's attention serves head dims %v, not %d", tcAttHeadDims, hd)
	}
	if (uint64(q)|uint64(kc)|uint64(vc))%16 != 0 {
		return fmt.Errorf("cudakernels: AttentionForward: tc attention needs 16-byte aligned q, k and v")
	}
	l := planTCAttention(T, nh, nkv, hd, k.tcAttMain)
	return k.launch(c, l, out, q, kc, vc, pos, T, S, nh, nkv, scale, DTCode(dt))
}

// tcAttSmemOf is the dynamic shared memory a tc_attention entry needs (0: not one).
func tcAttSmemOf(name string) int {
	var hd int
	if rest, ok := strings.CutPrefix(name, "tc_attn_dec_hd"); ok {
		if _, err := fmt.Sscanf(rest, "%d", &hd); err == nil {
			return tcAttDecSmem(hd)
		}
	}
	if rest, ok := strings.CutPrefix(name, "tc_attn_hd"); ok {
		if _, err := fmt.Sscanf(rest, "%d", &hd); err == nil {
			return tcAttSmem(hd)
		}
	}
	return 0
}
