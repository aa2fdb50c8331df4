package capture

import (
	"slices"
	"testing"
)

// TestOpNamesMoE: a MoE layer's four ops take the dense MLP's four places (every layer has as many ops), in the
// documented order, and OpIndex agrees with OpNames for every layer pattern.
func TestOpNamesMoE(t *testing.T) {
	per := MoELayerOps(true)
	want := []string{LayerMLPNorm, LayerRouter, LayerExperts, LayerExpertWeights, LayerCombine, LayerMLPResidual}
	if !slices.Equal(per[len(per)-6:], want) || len(per) != len(LayerOps(true)) {
		t.Fatalf("MoELayerOps %v", per)
	}
	for _, moe := range []func(int) bool{nil, func(int) bool { return true }, func(l int) bool { return l%2 == 1 }} {
		ops := OpNames(3, true, moe)
		if len(ops) != len(OpNames(3, true, nil)) {
			t.Fatalf("%d ops", len(ops))
		}
		for i, op := range ops {
			if OpIndex(op, 3, true, moe) != i {
				t.Fatalf("OpIndex(%s) = %d, want %d", op, OpIndex(op, 3, true, moe), i)
			}
		}
		l1 := OpIndex(LayerOp(1, LayerRouter), 3, true, moe)
		if dense := moe == nil; dense != (l1 < 0) {
			t.Fatalf("router of layer 1: index %d with moe %v", l1, !dense)
		}
	}
	if OpIndex(LayerOp(0, LayerRouter), 3, true, func(l int) bool { return l == 1 }) >= 0 {
		t.Fatal("a dense layer's router accepted")
	}
	if OpIndex(LayerOp(1, LayerGateProj), 3, true, func(l int) bool { return l == 1 }) >= 0 {
		t.Fatal("a MoE layer's gate_proj accepted")
	}
}
