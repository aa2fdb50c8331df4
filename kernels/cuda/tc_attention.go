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

// tcAttSmem16 and tcAttDecSmem16 are the kv16 entries' (TC_ATT_SMEM16, TC_ATT_DEC_SMEM16): two stages of the
// bf16 K and V tiles in place of the float32 stages and their one converted pair.
func tcAttSmem16(hd int) int {
	return tcAttSmem(hd) - 2*2*kernels.AttentionBlock*hd*4 + 2*kernels.AttentionBlock*(hd+8)*2
}
func tcAttDecSmem16(hd int) int {
	return tcAttDecSmem(hd) - 2*2*kernels.AttentionBlock*hd*4 + 2*kernels.AttentionBlock*(hd+8)*2
}

// tcAttKV is the infix of the entries for a cache of bf16 values in bf16 (kv16) or in float32 ("").
func tcAttKV(kv16 bool) string {
	if kv16 {
		return "kv16_"
	}
	return ""
}

// tcAttDecSmem is tc_attn_dec_hd<hd>'s (TC_ATT_DEC_SMEM): the same K/V stages and blocks, then the scores
// (16 × 64 floats), e (16 × TC_ATT_ELD), p (16 × 72 bf16), alpha and l (16 floats each).
func tcAttDecSmem(hd int) int {
	kb := kernels.AttentionBlock
	return 2*2*kb*hd*4 + 2*kb*(hd+8)*2 + 16*kb*4 + 16*tcAttELD*4 + 16*(kb+8)*2 + 2*16*4
}

// tcAttPlan is a tc attention's launches: the attention kernel, and for a decode kernel whose rows may have more
// than one chunk of keys (tc.3) the merge that folds the chunk states it left in scratch (PartFloats floats).
type tcAttPlan struct {
	Launch            // tc_attn[_batch]_hd<hd> or tc_attn_dec[_batch]_hd<hd>
	Merge      Launch // tc_attn_merge[_batch] (Kernel "": none)
	PartFloats int64  // the chunk states' scratch (tc_attention.cu's TC_ATT_PART_AT)
	Dec        bool   // the decode kernel (its last argument: the scratch)
}

// tcAttChunks is the decode kernel's grid x for a cache of S positions: a block per chunk of keys (tc.3).
func tcAttChunks(S int) int { return ceilDiv(int64(max(S, 1)), kernels.AttentionTCChunk) }

// tcAttDecode is the decode kernel's launch for z sequences whose longest cache holds S positions and whose
// most queries are T: ⌈S/256⌉ chunks × nkv × z blocks, and the merge over ⌈T·nh·hd/256⌉ × z blocks when there
// is more than one chunk (a row with one chunk is written by the decode kernel itself).
func tcAttDecode(kernel, merge string, T, S, nh, nkv, hd, z int, kv16 bool) tcAttPlan {
	nch := tcAttChunks(S)
	smem := tcAttDecSmem(hd)
	if kv16 {
		smem = tcAttDecSmem16(hd)
	}
	p := tcAttPlan{Launch: Launch{Kernel: kernel, Grid: cuda.Dim3{X: nch, Y: nkv, Z: z},
		Block: cuda.Dim3{X: 32 * tcAttWarps}, Smem: smem}, Dec: true}
	// always a scratch, also for one chunk: a position past the cache (bad input) must not write through null
	p.PartFloats = int64(z) * int64(nch) * int64(nkv) * 16 * int64(hd+2)
	if nch > 1 {
		p.Merge = Launch{Kernel: merge, Grid: cuda.Dim3{X: ceilDiv(int64(T)*int64(nh)*int64(hd), tcAttMergeThreads), Y: 1, Z: z},
			Block: cuda.Dim3{X: tcAttMergeThreads}}
	}
	return p
}

// tcAttMergeThreads is tc_attn_merge's block (__launch_bounds__(256)).
const tcAttMergeThreads = 256

// planTCAttention is the launch of tc attention for T queries over S cached positions: one block per
// 16·tcAttWarps consecutive (query, head) rows of a kv head (grid y), so a block's rows share each K and V block
// it stages (tc_attn_hd<hd>, which folds tc.3's chunks as it walks them); when all of a kv head's rows fit in 16
// (T·grp ≤ 16: decode), tc_attn_dec_hd<hd>, a block per chunk of keys whose 8 warps share each key block's work,
// and tc_attn_merge (the same bits: main forces tc_attn_hd<hd>, for the tests). kv16: the entries that read bf16
// caches (tc_attn_kv16_*: the same bits from the same values).
func planTCAttention(T, S, nh, nkv, hd int, main, kv16 bool) tcAttPlan {
	rows := int64(T) * int64(nh/nkv)
	kv := tcAttKV(kv16)
	if rows <= 16 && !main && slices.Contains(tcAttDecHeadDims, hd) {
		return tcAttDecode(fmt.Sprintf("tc_attn_%sdec_hd%d", kv, hd), "tc_attn_merge", T, S, nh, nkv, hd, 1, kv16)
	}
	smem := tcAttSmem(hd)
	if kv16 {
		smem = tcAttSmem16(hd)
	}
	return tcAttPlan{Launch: Launch{Kernel: fmt.Sprintf("tc_attn_%shd%d", kv, hd), Grid: cuda.Dim3{X: ceilDiv(rows, 16*tcAttWarps), Y: nkv},
		Block: cuda.Dim3{X: 32 * tcAttWarps}, Smem: smem}}
}

// HasTCAttention returns nil when tc_attention's kernels are loaded, else why not.
func (k *Kernels) HasTCAttention() error { return k.tcAttErr }

// attentionTC runs tc.3 (kernels.AttentionTC's bits): q, kc, vc float32 holding bf16 values (the caller's
// rounding; a value's bf16 is the high half of its bits), the argument list of AttentionForward.
func (k *Kernels) attentionTC(c *cuda.Ctx, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32) error {
	return k.attentionTCKV(c, dt, out, q, kc, vc, pos, T, S, nh, nkv, hd, scale, false)
}

// AttentionTCKV16 is tc attention (AttentionForward with kernels.TC) over bf16 caches: kc and vc hold the bf16
// bits (S × nkv·hd uint16 each, 16-byte aligned) of the values a float32 cache would hold, q and out are as
// AttentionForward's. The bits are those of the float32 cache's; it reads half the bytes.
func (k *Kernels) AttentionTCKV16(c *cuda.Ctx, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32) error {
	if nkv <= 0 || nh%nkv != 0 {
		return fmt.Errorf("cudakernels: AttentionTCKV16: %d query heads not a multiple of %d kv heads", nh, nkv)
	}
	return k.attentionTCKV(c, dt, out, q, kc, vc, pos, T, S, nh, nkv, hd, scale, true)
}

func (k *Kernels) attentionTCKV(c *cuda.Ctx, dt kernels.DType, out, q, kc, vc, pos cuda.Ptr, T, S, nh, nkv, hd int, scale float32, kv16 bool) error {
	if k.tcAttErr != nil {
		return k.tcAttErr
	}
	if !slices.Contains(tcAttHeadDims, hd) {
		return fmt.Errorf("cudakernels: AttentionForward: the tc profile's attention serves head dims %v, not %d", tcAttHeadDims, hd)
	}
	if (uint64(q)|uint64(kc)|uint64(vc))%16 != 0 {
		return fmt.Errorf("cudakernels: AttentionForward: tc attention needs 16-byte aligned q, k and v")
	}
	pl := planTCAttention(T, S, nh, nkv, hd, k.tcAttMain, kv16)
	if !pl.Dec {
		return k.launch(c, pl.Launch, out, q, kc, vc, pos, T, S, nh, nkv, scale, DTCode(dt))
	}
	part, err := k.tcAttPart(c, pl)
	if err != nil {
		return err
	}
	if err := k.launch(c, pl.Launch, out, q, kc, vc, pos, T, S, nh, nkv, scale, DTCode(dt), part); err != nil {
		return err
	}
	if pl.Merge.Kernel == "" {
		return nil
	}
	return k.launch(c, pl.Merge, out, pos, part, T, nh, nkv, hd, DTCode(dt), pl.Grid.X)
}

// tcAttPart is the decode plan's chunk-state scratch (Scratch: the merge that reads it is the next launch), and
// an error naming the stale PTX where the loaded tc_attention has no merge (its decode kernels take no scratch).
func (k *Kernels) tcAttPart(c *cuda.Ctx, pl tcAttPlan) (cuda.Ptr, error) {
	if k.fn["tc_attn_merge"] == nil || k.fn["tc_attn_merge_batch"] == nil {
		return 0, fmt.Errorf("cudakernels: the loaded tc_attention PTX has no tc_attn_merge (stale PTX? run make ptx)")
	}
	return k.Scratch(c, 4*pl.PartFloats)
}

// tcAttSmemOf is the dynamic shared memory a tc_attention entry needs (0: not one): the batched entries
// (tc_attn[_dec]_batch_hd<HD>) need their one-sequence twin's.
func tcAttSmemOf(name string) int {
	var hd int
	for _, e := range []struct {
		prefix string
		smem   func(int) int
	}{{"tc_attn_dec_hd", tcAttDecSmem}, {"tc_attn_dec_batch_hd", tcAttDecSmem}, {"tc_attn_hd", tcAttSmem},
		{"tc_attn_batch_hd", tcAttSmem}, {"tc_attn_kv16_dec_hd", tcAttDecSmem16}, {"tc_attn_kv16_dec_batch_hd", tcAttDecSmem16},
		{"tc_attn_kv16_hd", tcAttSmem16}, {"tc_attn_kv16_batch_hd", tcAttSmem16}} {
		if rest, ok := strings.CutPrefix(name, e.prefix); ok {
			if _, err := fmt.Sscanf(rest, "%d", &hd); err == nil {
				return e.smem(hd)
			}
		}
	}
	return 0
}

// TCAttSeq is one sequence of AttentionTCBatch: the arguments of a one-sequence tc attention that differ between
// sequences (out, q, the k and v caches, pos: device pointers; T queries, S cached positions). TCAttSeqWords
// lays a table of them out as tc_attention.cu's TcAttSeq (48 bytes each) for the device.
type TCAttSeq struct {
	Out, Q, K, V, Pos cuda.Ptr
	T, S              int
}

// TCAttSeqWords is the device table of seqs: six little-endian 64-bit words a sequence (five pointers, then T
// and S as two int32).
func TCAttSeqWords(seqs []TCAttSeq) []uint64 {
	w := make([]uint64, 0, 6*len(seqs))
	for _, s := range seqs {
		w = append(w, uint64(s.Out), uint64(s.Q), uint64(s.K), uint64(s.V), uint64(s.Pos),
			uint64(uint32(int32(s.T)))|uint64(uint32(int32(s.S)))<<32)
	}
	return w
}

// planTCAttentionBatch is the launch of tc attention over sequences of Ts queries over Ss cached positions
// (every T ≥ 1): grid z the sequence, and tc_attn_dec_batch_hd<hd> (grid x the chunks of the longest cache, then
// tc_attn_merge_batch) when every sequence would take tc_attn_dec_hd<hd> (decode), else tc_attn_batch_hd<hd>
// (grid x the most blocks planTCAttention gives any sequence). The same bits: each sequence's blocks do what
// they do in its own launch.
func planTCAttentionBatch(Ts, Ss []int, nh, nkv, hd int, main, kv16 bool) tcAttPlan {
	dec, gx, smax, tmax := true, 1, 1, 1
	for i, T := range Ts {
		dec = dec && planTCAttention(T, Ss[i], nh, nkv, hd, main, kv16).Dec
		gx = max(gx, planTCAttention(T, Ss[i], nh, nkv, hd, true, kv16).Grid.X) // tc_attn_hd<hd>'s blocks of the sequence
		smax, tmax = max(smax, Ss[i]), max(tmax, T)
	}
	kv := tcAttKV(kv16)
	if dec {
		return tcAttDecode(fmt.Sprintf("tc_attn_%sdec_batch_hd%d", kv, hd), "tc_attn_merge_batch", tmax, smax, nh, nkv, hd, len(Ts), kv16)
	}
	smem := tcAttSmem(hd)
	if kv16 {
		smem = tcAttSmem16(hd)
	}
	return tcAttPlan{Launch: Launch{Kernel: fmt.Sprintf("tc_attn_%sbatch_hd%d", kv, hd), Grid: cuda.Dim3{X: gx, Y: nkv, Z: len(Ts)},
		Block: cuda.Dim3{X: 32 * tcAttWarps}, Smem: smem}}
}

// HasTCAttentionBatch returns nil when the loaded tc_attention PTX has the batched entries for head dim hd
// (older PTX does not: the caller then launches one sequence at a time, with the same bits).
func (k *Kernels) HasTCAttentionBatch(hd int) error {
	if k.tcAttErr != nil {
		return k.tcAttErr
	}
	names := []string{fmt.Sprintf("tc_attn_batch_hd%d", hd)}
	if slices.Contains(tcAttDecHeadDims, hd) {
		names = append(names, fmt.Sprintf("tc_attn_dec_batch_hd%d", hd))
	}
	for _, n := range names {
		if k.fn[n] == nil {
			return fmt.Errorf("cudakernels: the loaded tc_attention PTX has no %s (stale PTX? run make ptx)", n)
		}
	}
	return nil
}

// AttentionTCBatch runs tc attention (AttentionForward with kernels.TC) over many sequences of one layer in one
// launch: seqs as TCAttSeqWords laid them out at desc on the device (the caller stages the table, ordered
// before the launch), seqs itself for the plan and the checks. The bits of each sequence are those of its own
// AttentionForward call.
func (k *Kernels) AttentionTCBatch(c *cuda.Ctx, dt kernels.DType, desc cuda.Ptr, seqs []TCAttSeq, nh, nkv, hd int, scale float32) error {
	return k.attentionTCBatch(c, dt, desc, seqs, nh, nkv, hd, scale, false)
}

// AttentionTCBatchKV16 is AttentionTCBatch over bf16 caches (every sequence's K and V hold bf16 bits, as
// AttentionTCKV16's).
func (k *Kernels) AttentionTCBatchKV16(c *cuda.Ctx, dt kernels.DType, desc cuda.Ptr, seqs []TCAttSeq, nh, nkv, hd int, scale float32) error {
	return k.attentionTCBatch(c, dt, desc, seqs, nh, nkv, hd, scale, true)
}

func (k *Kernels) attentionTCBatch(c *cuda.Ctx, dt kernels.DType, desc cuda.Ptr, seqs []TCAttSeq, nh, nkv, hd int, scale float32, kv16 bool) error {
	if nkv <= 0 || nh%nkv != 0 {
		return fmt.Errorf("cudakernels: AttentionForward: %d query heads not a multiple of %d kv heads", nh, nkv)
	}
	if !slices.Contains(tcAttHeadDims, hd) {
		return fmt.Errorf("cudakernels: AttentionForward: the tc profile's attention serves head dims %v, not %d", tcAttHeadDims, hd)
	}
	if err := k.HasTCAttentionBatch(hd); err != nil {
		return err
	}
	if len(seqs) == 0 {
		return nil
	}
	if len(seqs) > 65535 {
		return fmt.Errorf("cudakernels: AttentionTCBatch: %d sequences in one launch (at most 65535)", len(seqs))
	}
	Ts, Ss := make([]int, len(seqs)), make([]int, len(seqs))
	for i, s := range seqs {
		if s.T <= 0 || s.S < s.T {
			return fmt.Errorf("cudakernels: AttentionTCBatch: sequence %d has %d queries over %d cached positions", i, s.T, s.S)
		}
		if (uint64(s.Q)|uint64(s.K)|uint64(s.V))%16 != 0 {
			return fmt.Errorf("cudakernels: AttentionForward: tc attention needs 16-byte aligned q, k and v")
		}
		Ts[i], Ss[i] = s.T, s.S
	}
	pl := planTCAttentionBatch(Ts, Ss, nh, nkv, hd, k.tcAttMain, kv16)
	if !pl.Dec {
		return k.launch(c, pl.Launch, desc, nh, nkv, scale, DTCode(dt))
	}
	part, err := k.tcAttPart(c, pl)
	if err != nil {
		return err
	}
	if err := k.launch(c, pl.Launch, desc, nh, nkv, scale, DTCode(dt), part); err != nil {
		return err
	}
	if pl.Merge.Kernel == "" {
		return nil
	}
	return k.launch(c, pl.Merge, desc, part, nh, nkv, hd, DTCode(dt), pl.Grid.X)
}
