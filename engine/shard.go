package engine

import "fmt"

// layout is one TP rank's slice of the model (Megatron): column-parallel q/k/v and gate/up by heads and
// intermediate rows, row-parallel o_proj and down_proj by the same columns, vocab-parallel LM head. When tp exceeds
// the kv heads, each kv head is replicated over tp/nkv consecutive ranks.
type layout struct {
	tp, rank         int
	qHeads, qHead0   int  // local query heads
	kvHeads, kvHead0 int  // local kv heads
	kvWriter         bool // first rank of its kv replica group: it writes the k/v captures
	iLocal, i0       int  // intermediate columns
	mLocal, m0       int  // each expert's moe_intermediate columns (MoE models)
	sLocal, s0       int  // the shared expert's columns (Qwen2-MoE)
	vLocal, v0       int  // vocabulary rows
}

// checkTP reports whether cfg can be split over tp ranks.
func checkTP(cfg Config, tp int) error {
	if tp < 1 || tp > 8 || tp&(tp-1) != 0 {
		return fmt.Errorf("engine: TP %d: must be 1, 2, 4 or 8", tp)
	}
	switch {
	case cfg.Heads%tp != 0:
		return fmt.Errorf("engine: TP %d does not divide %d attention heads", tp, cfg.Heads)
	case cfg.KVHeads >= tp && cfg.KVHeads%tp != 0, cfg.KVHeads < tp && tp%cfg.KVHeads != 0:
		return fmt.Errorf("engine: TP %d and %d kv heads: one must divide the other", tp, cfg.KVHeads)
	case cfg.Intermediate%tp != 0:
		return fmt.Errorf("engine: TP %d does not divide intermediate size %d", tp, cfg.Intermediate)
	case cfg.Experts > 0 && cfg.MoEIntermediate%tp != 0:
		return fmt.Errorf("engine: TP %d does not divide moe_intermediate_size %d", tp, cfg.MoEIntermediate)
	case cfg.SharedIntermediate%tp != 0:
		return fmt.Errorf("engine: TP %d does not divide shared_expert_intermediate_size %d", tp, cfg.SharedIntermediate)
	case cfg.Vocab%tp != 0:
		return fmt.Errorf("engine: TP %d does not divide vocab size %d", tp, cfg.Vocab)
	}
	return nil
}

func newLayout(cfg Config, tp, rank int) layout {
	l := layout{tp: tp, rank: rank}
	l.qHeads = cfg.Heads / tp
	l.qHead0 = rank * l.qHeads
	if cfg.KVHeads >= tp {
		l.kvHeads = cfg.KVHeads / tp
		l.kvHead0 = rank * l.kvHeads
		l.kvWriter = true
	} else {
		rep := tp / cfg.KVHeads
		l.kvHeads, l.kvHead0 = 1, rank/rep
		l.kvWriter = rank%rep == 0
	}
	l.iLocal = cfg.Intermediate / tp
	l.i0 = rank * l.iLocal
	l.mLocal = cfg.MoEIntermediate / tp
	l.m0 = rank * l.mLocal
	l.sLocal = cfg.SharedIntermediate / tp
	l.s0 = rank * l.sLocal
	l.vLocal = cfg.Vocab / tp
	l.v0 = rank * l.vLocal
	return l
}

// A rank's weights are kernels.Weights views and copies of the model's, in the checkpoint's dtype: rows of a
// column-parallel weight are a view (Weights.Rows), columns of a row-parallel one a copy (Weights.Cols, the
// weight itself at TP 1).
