package engine

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"bitalign/capture"
	"bitalign/internal/hftest"
)

// TestHFParity compares the engine with transformers' eager float32 forward on checkpoints written by
// testdata/engine/hf_parity.py (run where torch and transformers exist; see that script). It needs
// BITALIGN_HF_PARITY=DIR and skips otherwise. Checked: the embedding and every layer's residual stream, the
// final norm and the logits to a relative error below 1e-5 (max |a-b| / max |b| per tensor), identical argmax;
// for Qwen3-MoE also each sparse layer's router logits and combine (1e-5), the selected experts (the same set per
// token; transformers' torch.topk gives no order among ties) and the combine weights.
func TestHFParity(t *testing.T) {
	const skip = "BITALIGN_HF_PARITY not set: needs checkpoints from testdata/engine/hf_parity.py (torch + transformers)"
	hftest.EachDir(t, "BITALIGN_HF_PARITY", skip, func(t *testing.T, dir string) {
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if m.Config.DType != capture.F32 {
			t.Fatalf("dtype %v, want f32", m.Config.DType)
		}
		var meta struct {
			Transformers string
			Seqs         []struct {
				Tokens []int32
				Logits string
				Hidden []string
				MoE    map[string]map[string]string
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, "parity.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		cfg := m.Config
		for i, s := range meta.Seqs {
			capDir := filepath.Join(t.TempDir(), "cap")
			// the engine processes positions 0..N-2 of N tokens: append a token so that all N are inputs
			toks := append(append([]int32(nil), s.Tokens...), 0)
			if _, err := m.Train(context.Background(), [][]int32{toks}, TrainOptions{RunOptions: RunOptions{TP: 2, CaptureDir: capDir}}); err != nil {
				t.Fatal(err)
			}
			c, err := capture.Open(capDir)
			if err != nil {
				t.Fatal(err)
			}
			asm, err := assembleCapture(c)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			T := len(s.Tokens)
			check := func(op, file string, width int) {
				want := readF32(t, filepath.Join(dir, file), T*width)
				st := asm[tensorKey{0, 0, op}]
				if st == nil {
					t.Fatalf("no %s in the capture", op)
				}
				got := st.floats(0, T)
				var maxDiff, maxRef float64
				for j := range want {
					maxDiff = math.Max(maxDiff, math.Abs(float64(got[j])-float64(want[j])))
					maxRef = math.Max(maxRef, math.Abs(float64(want[j])))
				}
				rel := maxDiff / maxRef
				if rel > 1e-5 || math.IsNaN(rel) {
					t.Errorf("seq %d %s: relative error %.3g (max |diff| %.3g, max |ref| %.3g)", i, op, rel, maxDiff, maxRef)
				} else {
					t.Logf("seq %d %-24s relative error %.3g", i, op, rel)
				}
				if op == OpLogits {
					for p := 0; p < T; p++ {
						if hftest.Argmax(got[p*width:(p+1)*width]) != hftest.Argmax(want[p*width:(p+1)*width]) {
							t.Errorf("seq %d position %d: argmax differs", i, p)
						}
					}
				}
			}
			check(OpEmbed, s.Hidden[0], cfg.Hidden)
			for l := 0; l+1 < cfg.Layers; l++ {
				check(LayerOp(l, opMLPResidual), s.Hidden[l+1], cfg.Hidden)
			}
			check(OpFinalNorm, s.Hidden[cfg.Layers], cfg.Hidden)
			check(OpLogits, s.Logits, cfg.Vocab)
			if cfg.Experts > 0 && len(s.MoE) == 0 {
				t.Fatal("a MoE model without MoE references in parity.json")
			}
			for _, ls := range slices.Sorted(maps.Keys(s.MoE)) {
				files := s.MoE[ls]
				l, err := strconv.Atoi(ls)
				if err != nil || !cfg.MoELayer(l) {
					t.Fatalf("parity.json: layer %q is not a MoE layer of the model", ls)
				}
				check(LayerOp(l, opRouter), files["router"], cfg.Experts)
				check(LayerOp(l, opCombine), files["combine"], cfg.Hidden)
				k := cfg.ExpertsPerTok
				b, err := os.ReadFile(filepath.Join(dir, files["experts"]))
				if err != nil || len(b) != 4*T*k {
					t.Fatalf("%s: %v, %d bytes", files["experts"], err, len(b))
				}
				want := make([]int32, T*k)
				decodeI32(b, want)
				got := asm[tensorKey{0, 0, LayerOp(l, opExperts)}].ints(0, T)
				wantW := readF32(t, filepath.Join(dir, files["weights"]), T*k)
				gotW := asm[tensorKey{0, 0, LayerOp(l, opExpertWeights)}].floats(0, T)
				for p := range T {
					for j := range k {
						found := -1
						for q := range k {
							if got[p*k+q] == want[p*k+j] {
								found = q
							}
						}
						if found < 0 {
							t.Fatalf("seq %d layer %d position %d: experts %v, transformers %v", i, l, p, got[p*k:(p+1)*k], want[p*k:(p+1)*k])
						}
						if d := math.Abs(float64(gotW[p*k+found] - wantW[p*k+j])); d > 1e-6 {
							t.Errorf("seq %d layer %d position %d: expert %d weight %v, transformers %v", i, l, p, want[p*k+j], gotW[p*k+found], wantW[p*k+j])
						}
					}
				}
				t.Logf("seq %d layers.%d.mlp.experts: every token's %d experts as transformers'", i, l, k)
			}
		}
	})
}

func readF32(t *testing.T, path string, n int) []float32 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 4*n {
		t.Fatalf("%s: %d bytes, want %d", path, len(b), 4*n)
	}
	out := make([]float32, n)
	decode(capture.F32, b, out)
	return out
}
