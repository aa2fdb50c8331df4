package session

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/kernels"
)

// localErrorsOf loads dir/checkpoint and measures the captures dir/trainer.arrow and dir/sampler.arrow (as
// transformers' captures are laid out) against its oracle.
func localErrorsOf(t testing.TB, dir string) (*engine.Model, []LocalErr) {
	t.Helper()
	m, err := engine.Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	s := openSides(t, filepath.Join(dir, "trainer.arrow"), filepath.Join(dir, "sampler.arrow"))
	res, err := LocalErrors(context.Background(), s, m, LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m, res
}

// openSides opens two captures as a session (no diff report: the local error needs none), closed when the test
// ends.
func openSides(t testing.TB, pathA, pathB string) *Session {
	t.Helper()
	a, err := capture.Open(pathA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := capture.Open(pathB)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	s := NewSession(a, b, nil)
	t.Cleanup(func() { s.Close() })
	return s
}

func openDemo(t *testing.T, fault string, layer int) (*Session, *engine.Model) {
	t.Helper()
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{Fault: fault, Layer: layer}); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	s := openSides(t, filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler"))
	return s, m
}

// TestLocalErrorsStaleWeights: the demo sampler's layer 2 runs on other weights. Measured against the oracle
// of each side's own inputs, only the sampler's layer-2 ops that read those weights are far off; every other
// op of both sides, and the engine's re-execution everywhere, is within a correct kernel's bounds, although the
// sampler's inputs differ from the trainer's after layer 2.
func TestLocalErrorsStaleWeights(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo")
	}
	const layer = 2
	s, m := openDemo(t, "stale-weights", layer)
	start := time.Now()
	calls, last := 0, 0
	res, err := LocalErrors(context.Background(), s, m, LocalOptions{Progress: func(done, total int) {
		calls++
		if done != last+1 || done > total {
			t.Errorf("progress %d/%d after %d", done, total, last)
		}
		last = done
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d (op, step, seq) measured in %v", len(res), time.Since(start))
	if calls != len(res) || len(res) == 0 {
		t.Fatalf("%d progress calls for %d results", calls, len(res))
	}
	weighted := map[string]bool{"attn_norm": true, "attn.q_proj": true, "attn.k_proj": true, "attn.v_proj": true,
		"attn.o_proj": true, "mlp_norm": true, "mlp.gate_proj": true, "mlp.up_proj": true, "mlp.down_proj": true}
	var worstOK ErrStats
	for _, r := range res {
		for i, side := range []LocalSide{r.A, r.B} {
			if side.Err != "" || side.EngineErr != "" {
				t.Fatalf("%s seq %d side %d: %s %s", r.Op, r.Seq, i, side.Err, side.EngineErr)
			}
			if !side.Engine.OK() {
				t.Errorf("%s seq %d side %d: the engine is off its oracle: %+v", r.Op, r.Seq, i, side.Engine)
			}
			l, suffix, _ := engine.SplitLayerOp(r.Op)
			faulty := i == 1 && l == layer && weighted[suffix] && strings.HasPrefix(r.Op, "layers.")
			switch ok := side.Captured.OK(); {
			case faulty && ok:
				t.Errorf("%s seq %d: the stale sampler looks correct: %+v", r.Op, r.Seq, side.Captured)
			case !faulty && !ok:
				t.Errorf("%s seq %d side %d: a correct kernel is off its oracle: %+v", r.Op, r.Seq, i, side.Captured)
			case faulty && side.Captured.Scale < 0x1p-10:
				t.Errorf("%s seq %d: the stale weights are only %.3g of the RMS off", r.Op, r.Seq, side.Captured.Scale)
			case !faulty && side.Captured.DType != capture.F32:
				worstOK.MaxULP = max(worstOK.MaxULP, side.Captured.MaxULP)
			case !faulty:
				worstOK.Scale = max(worstOK.Scale, side.Captured.Scale)
			}
		}
	}
	t.Logf("correct ops: max %d ulp (bf16), %.3g of the row's RMS (float32)", worstOK.MaxULP, worstOK.Scale)
	one, err := LocalError(context.Background(), s, m, engine.LayerOp(layer, "attn.q_proj"), engine.DemoStep, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stale %s seq 0: trainer %d ulp, sampler %d ulp (%d of %d elements inexact, %.3g of the RMS at %+v)",
		one.Op, one.A.Captured.MaxULP, one.B.Captured.MaxULP, one.B.Captured.Inexact, one.B.Captured.Elements,
		one.B.Captured.Scale, *one.B.Captured.WorstScale)
	if _, err := LocalError(context.Background(), s, m, engine.OpSample, engine.DemoStep, 0); err == nil {
		t.Error("LocalError of sample succeeded")
	}
	if _, err := LocalError(context.Background(), s, m, "layers.9.attn_norm", engine.DemoStep, 0); err == nil {
		t.Error("LocalError of a layer the model lacks succeeded")
	}
}

// TestLocalErrorPlanted plants a bug in the sampler's model: one q_proj weight row scaled by 1.25, or
// rms_norm_eps 0.1 instead of 1e-6. Measured with the true model, the sampler's faulty ops are far from their
// oracle (the row: in that column only); the trainer is within tolerance everywhere, and so is every other op
// of the sampler (measured from its own, already different, inputs).
func TestLocalErrorPlanted(t *testing.T) {
	cfg := engine.Config{Architecture: engine.ArchQwen2, Vocab: 64, Hidden: 64, Intermediate: 128, Layers: 2,
		Heads: 4, KVHeads: 2, HeadDim: 16, RopeTheta: 10000, Eps: 1e-6, MaxPositions: 64, DType: capture.BF16,
		QKVBias: true}
	m := engine.NewRandom(cfg, 4)
	const row = 5
	scaledRow := func() *engine.Model {
		bad := *m
		bad.Layers = append([]engine.Layer(nil), m.Layers...)
		q := append([]float32(nil), m.Layers[1].Q.Float32()...)
		for k := row * cfg.Hidden; k < (row+1)*cfg.Hidden; k++ {
			q[k] = kernels.BF16.Round(q[k] * 1.25)
		}
		bad.Layers[1].Q = kernels.RoundWeights(kernels.BF16, q)
		return &bad
	}
	bigEps := func() *engine.Model {
		bad := *m
		bad.Config.Eps = 0.1
		return &bad
	}
	for _, c := range []struct {
		name   string
		bad    *engine.Model
		faulty func(op string) bool
		col    int64 // the column of the worst element, -1: any
	}{
		{"q_proj row", scaledRow(), func(op string) bool { return op == engine.LayerOp(1, "attn.q_proj") }, row},
		{"eps", bigEps(), func(op string) bool { return strings.HasSuffix(op, "norm") }, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			prompts := [][]int32{{1, 2, 3, 4, 5}, {9, 8, 7}}
			out, err := c.bad.Sample(context.Background(), prompts, engine.SampleOptions{RunOptions: engine.RunOptions{TP: 1,
				Seed: 3, CaptureDir: filepath.Join(root, "sampler")}, Slots: 2, MaxNew: []int{6, 6}})
			if err != nil {
				t.Fatal(err)
			}
			var seqs [][]int32
			var plen []int
			for _, s := range out.Seqs {
				seqs, plen = append(seqs, s.Tokens), append(plen, s.Prompt)
			}
			if _, err := m.Train(context.Background(), seqs, engine.TrainOptions{RunOptions: engine.RunOptions{TP: 2, Seed: 3,
				CaptureDir: filepath.Join(root, "trainer")}, PromptLens: plen}); err != nil {
				t.Fatal(err)
			}
			s := openSides(t, filepath.Join(root, "trainer"), filepath.Join(root, "sampler"))
			res, err := LocalErrors(context.Background(), s, m, LocalOptions{Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, r := range res {
				if r.A.Err != "" || r.B.Err != "" {
					t.Fatalf("%s seq %d: %q %q", r.Op, r.Seq, r.A.Err, r.B.Err)
				}
				if !r.A.Captured.OK() {
					t.Errorf("trainer %s seq %d off its oracle: %+v", r.Op, r.Seq, r.A.Captured)
				}
				if !c.faulty(r.Op) {
					if !r.B.Captured.OK() {
						t.Errorf("sampler %s seq %d off its oracle: %+v", r.Op, r.Seq, r.B.Captured)
					}
					continue
				}
				seen++
				b := r.B.Captured
				if b.OK() || b.WorstULP == nil || (c.col >= 0 && b.WorstULP.Col != c.col) || b.Scale < 0.01 {
					t.Errorf("sampler %s seq %d: %+v, want a large error (column %d)", r.Op, r.Seq, b, c.col)
					continue
				}
				t.Logf("sampler %s seq %d: %d ulp, %.3g of the RMS, worst at %+v", r.Op, r.Seq, b.MaxULP, b.Scale, *b.WorstULP)
				if c.col >= 0 && b.Inexact > int64(r.B.Positions) { // one column per position at most
					t.Errorf("sampler %s seq %d: %d inexact elements over %d positions", r.Op, r.Seq, b.Inexact, r.B.Positions)
				}
			}
			if seen == 0 {
				t.Fatal("no faulty op measured")
			}
		})
	}
}

// BenchmarkLocalErrors measures every op of the demo (4 layers, hidden 256, 8 sequences of 7..24 tokens) on
// both sides: the audit's workload.
func BenchmarkLocalErrors(b *testing.B) {
	dir := b.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{}); err != nil {
		b.Fatal(err)
	}
	m, err := engine.Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		b.Fatal(err)
	}
	s := openSides(b, filepath.Join(dir, "trainer"), filepath.Join(dir, "sampler"))
	b.ResetTimer()
	for range b.N {
		if _, err := LocalErrors(context.Background(), s, m, LocalOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLocalErrorsTransformers measures the committed transformers captures (testdata/python: a float32 Qwen3,
// eager attention; a trainer forward and a generate loop) against the oracle: every op of both sides, the
// attention from q_norm/k_norm with the checkpoint's RoPE (transformers captures no q_rope/k_rope) and the last
// log-probability from the trainer's final token, is within a correct kernel's tolerance, and so is the engine
// from the same inputs, though neither is bitwise the other.
func TestLocalErrorsTransformers(t *testing.T) {
	dir := filepath.Join("..", "testdata", "python")
	m, res := localErrorsOf(t, dir)
	count := map[string]int{}
	var worst ErrStats
	for _, r := range res {
		count[r.Op]++
		for i, side := range []LocalSide{r.A, r.B} {
			if side.Err != "" || side.EngineErr != "" || side.Positions == 0 {
				t.Fatalf("%s seq %d side %d: %d positions, %q %q", r.Op, r.Seq, i, side.Positions, side.Err, side.EngineErr)
			}
			if !side.Captured.OK() || !side.Engine.OK() {
				t.Errorf("%s seq %d side %d: transformers %+v, engine %+v", r.Op, r.Seq, i, side.Captured, side.Engine)
			}
			worst.MaxULP = max(worst.MaxULP, side.Captured.MaxULP)
			worst.Scale = max(worst.Scale, side.Captured.Scale)
		}
		if l, suffix, _ := engine.SplitLayerOp(r.Op); suffix == "attn.sdpa" && !slices.Equal(r.B.Inputs, engine.AltProducers(m.Config, r.Op)) {
			t.Errorf("layer %d attention read %v, want the q/k norms and v_proj", l, r.B.Inputs)
		}
		if r.Op == engine.OpLogprobs && r.A.Positions != [...]int{4, 3}[r.Seq] {
			t.Errorf("trainer logprobs of seq %d at %d positions: the final token's is missing", r.Seq, r.A.Positions)
		}
	}
	for _, op := range engine.OpNames(m.Config) {
		want := 2
		if strings.HasSuffix(op, "_rope") || !hasOracle(op) {
			want = 0 // RoPE is a function in transformers: not captured
		}
		if count[op] != want {
			t.Errorf("%s measured for %d sequences, want %d", op, count[op], want)
		}
	}
	t.Logf("transformers float32: at most %d ulp, %.3g of the row's RMS from the oracle", worst.MaxULP, worst.Scale)
}

func TestNarrowedDType(t *testing.T) {
	mk := func(vals []float32) capture.Tensor {
		tn := capture.Tensor{Op: engine.OpLogits, DType: capture.F32, Shape: []int64{1, int64(len(vals))}, NTok: 1}
		for _, v := range vals {
			tn.Data = binary.LittleEndian.AppendUint32(tn.Data, math.Float32bits(v))
		}
		return tn
	}
	bf := make([]float32, narrowMin)
	for i := range bf {
		bf[i] = kernels.BF16.Round(float32(i)*0.37 - 5)
	}
	if dt := narrowedDType([]capture.Tensor{mk(bf)}, capture.BF16); dt != capture.BF16 {
		t.Errorf("bf16 values in float32: %s, want bf16", dt)
	}
	if dt := narrowedDType([]capture.Tensor{mk(bf)}, capture.F32); dt != capture.F32 {
		t.Errorf("a float32 model's logits: %s, want f32", dt)
	}
	if dt := narrowedDType([]capture.Tensor{mk(bf[:narrowMin-1])}, capture.BF16); dt != capture.F32 {
		t.Errorf("%d values: %s, want f32 (too few to tell)", narrowMin-1, dt)
	}
	if dt := narrowedDType([]capture.Tensor{mk(bf[:narrowMin/2]), mk(bf[narrowMin/2:])}, capture.BF16); dt != capture.BF16 {
		t.Errorf("two runs of %d bf16 values: %s, want bf16", narrowMin/2, dt)
	}
	other := append([]float32(nil), bf...)
	other[7] = 1.0000001
	if dt := narrowedDType([]capture.Tensor{mk(other)}, capture.BF16); dt != capture.F32 {
		t.Errorf("one float32 value among bf16 ones: %s, want f32", dt)
	}
	// measured in bf16: the oracle one bf16 ulp away in one element
	oracle := capture.Tensor{Op: engine.OpLogits, DType: capture.BF16, Shape: []int64{1, int64(len(bf))}, NTok: 1}
	for i, v := range bf {
		b := kernels.ToBF16Bits(v)
		if i == 3 {
			b++
		}
		oracle.Data = binary.LittleEndian.AppendUint16(oracle.Data, b)
	}
	var acc statsAcc
	if err := acc.add(mk(bf), oracle); err != nil {
		t.Fatal(err)
	}
	if acc.DType != capture.BF16 || acc.MaxULP != 1 || acc.Inexact != 1 || acc.WorstULP.Col != 3 || !acc.OK() {
		t.Errorf("stats %+v", acc.ErrStats)
	}
}
