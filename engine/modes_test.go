package engine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
)

// TestSamplingRulesInvariant: greedy, top-k and top-p sampling, and sequences ending at an EOS at different
// steps, keep the sampler (continuous batching, TP 2) and the trainer (TP 4) bitwise identical.
func TestSamplingRulesInvariant(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	m := NewRandom(cfg, 21)
	ps, _ := tinyPrompts(cfg)
	for _, sp := range []SamplingParams{{Temperature: 0}, {Temperature: 0.7, TopK: 5}, {Temperature: 1.3, TopP: 0.8}, {Temperature: 1, TopK: 20, TopP: 0.5}} {
		root := t.TempDir()
		// pick as EOS a token some sequences draw early, so that they end at different steps
		probe, err := m.Sample(context.Background(), ps, SampleOptions{RunOptions: RunOptions{Seed: 4, Sampling: &sp}, MaxNew: []int{12}})
		if err != nil {
			t.Fatal(err)
		}
		eos := probe.Seqs[1].Tokens[probe.Seqs[1].Prompt+2]
		so := SampleOptions{RunOptions: RunOptions{TP: 2, Seed: 4, Sampling: &sp, CaptureDir: filepath.Join(root, "s")},
			Slots: 3, MaxNew: []int{12}, UseEOS: true, EOS: eos}
		out, err := m.Sample(context.Background(), ps, so)
		if err != nil {
			t.Fatal(err)
		}
		var seqs [][]int32
		var plen []int
		lengths := map[int]bool{}
		for _, s := range out.Seqs {
			for _, tok := range s.Tokens[s.Prompt : len(s.Tokens)-1] {
				if tok == eos {
					t.Fatalf("%+v: sequence %d continued after EOS", sp, s.ID)
				}
			}
			seqs = append(seqs, s.Tokens)
			plen = append(plen, s.Prompt)
			lengths[len(s.Tokens)-s.Prompt] = true
		}
		if len(lengths) < 2 {
			t.Fatalf("%+v: every sequence has the same length %v", sp, lengths)
		}
		tr, err := m.Train(context.Background(), seqs, TrainOptions{RunOptions: RunOptions{TP: 4, Seed: 4, Sampling: &sp,
			CaptureDir: filepath.Join(root, "t")}, Batch: 3, PromptLens: plen})
		if err != nil {
			t.Fatal(err)
		}
		if d := sameOutputs(out, tr); d != "" {
			t.Fatalf("%+v: %s", sp, d)
		}
		if d := compare(t, cfg, filepath.Join(root, "s"), filepath.Join(root, "t")); d != nil {
			t.Fatalf("%+v: %v", sp, d)
		}
		t.Logf("%+v: new-token counts %v", sp, lengths)
	}
}

func TestRunErrors(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	m := NewRandom(cfg, 1)
	ctx := context.Background()
	seq := [][]int32{{1, 2, 3}}
	cases := []struct {
		name string
		err  func() error
		want string
	}{
		{"tp 3", func() error { _, err := m.Train(ctx, seq, TrainOptions{RunOptions: RunOptions{TP: 3}}); return err }, "TP 3"},
		{"tp 16", func() error { _, err := m.Train(ctx, seq, TrainOptions{RunOptions: RunOptions{TP: 16}}); return err }, "TP 16"},
		{"token outside vocab", func() error { _, err := m.Train(ctx, [][]int32{{1, 64}}, TrainOptions{}); return err }, "outside the vocabulary"},
		{"one-token sequence", func() error { _, err := m.Train(ctx, [][]int32{{1}}, TrainOptions{}); return err }, "at least 2"},
		{"empty prompt", func() error {
			_, err := m.Sample(ctx, [][]int32{{}}, SampleOptions{MaxNew: []int{1}})
			return err
		}, "empty"},
		{"no max new", func() error { _, err := m.Sample(ctx, seq, SampleOptions{}); return err }, "max-new-token"},
		{"duplicate ids", func() error {
			_, err := m.Train(ctx, [][]int32{{1, 2}, {3, 4}}, TrainOptions{RunOptions: RunOptions{SeqIDs: []int64{5, 5}}})
			return err
		}, "used twice"},
		{"unknown fault", func() error {
			_, err := m.Sample(ctx, seq, SampleOptions{RunOptions: RunOptions{Fault: "gremlins"}, MaxNew: []int{1}})
			return err
		}, "unknown fault"},
		{"capture exists", func() error {
			dir := t.TempDir()
			if _, err := m.Train(ctx, seq, TrainOptions{RunOptions: RunOptions{CaptureDir: dir}}); err != nil {
				return nil
			}
			_, err := m.Train(ctx, seq, TrainOptions{RunOptions: RunOptions{CaptureDir: dir}})
			return err
		}, "exists"},
	}
	for _, c := range cases {
		err := c.err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error containing %q, got %v", c.name, c.want, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	dir := filepath.Join(t.TempDir(), "c")
	if _, err := m.Sample(cctx, seq, SampleOptions{RunOptions: RunOptions{CaptureDir: dir, TP: 2}, MaxNew: []int{3}}); err != context.Canceled {
		t.Fatalf("cancelled sample: %v", err)
	}
	if c, err := capture.Open(dir); err == nil {
		c.Close()
		t.Fatal("a cancelled run left a capture behind")
	}
}

// TestReplayOpenEnded replays a capture that holds only tokens (as a PyTorch trainer capture may): every position
// is processed, and the last one gets no log-probability since its target is unknown.
func TestReplayOpenEnded(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	m := NewRandom(cfg, 2)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.arrow")
	toks := []int32{5, 9, 1, 33, 2}
	err := capture.WriteAll(in, capture.Meta{Side: "trainer", TP: 1, PP: 1, DP: 1, Step: 4, Seed: 1}, []capture.Tensor{
		{Step: 4, Seq: 2, Pos: 0, NTok: 5, Op: OpTokens, DType: capture.I32, Shape: []int64{5}, Shard: capture.NoShard, Data: encodeI32(toks)},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Replay(context.Background(), in, filepath.Join(dir, "replay"), ReplayOptions{TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := out.Seqs[0]
	if s.ID != 2 || len(s.Logprobs) != 4 || len(s.Samples) != 0 {
		t.Fatalf("replay output %+v", s)
	}
	ref, err := m.Train(context.Background(), [][]int32{toks}, TrainOptions{RunOptions: RunOptions{SeqIDs: []int64{2}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, lp := range ref.Seqs[0].Logprobs {
		if lp != s.Logprobs[i] {
			t.Fatalf("logprob %d: %v vs %v", i, s.Logprobs[i], lp)
		}
	}
	c, err := capture.Open(filepath.Join(dir, "replay"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := assembleCapture(c)
	if err != nil {
		t.Fatal(err)
	}
	if st := a[tensorKey{4, 2, "layers.1.mlp_residual"}]; st == nil || len(st.rows) != 5 {
		t.Fatalf("replay does not cover the 5 positions")
	}
	if strings.Contains(string(c.Meta().Extra), "final_tokens") {
		t.Fatalf("the placeholder last token was recorded as known: %s", c.Meta().Extra)
	}
}
