package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"bitalign/capture"
)

// TestRunOpReproducesCaptures re-executes every op of every sequence from a TP-2 trainer capture's and a
// continuous-batching sampler capture's own tensors (shards and decode steps assembled by RunOp) and checks the
// outputs bitwise against what was captured.
func TestRunOpReproducesCaptures(t *testing.T) {
	for _, cfg := range []Config{tinyConfig(ArchLlama, capture.BF16), tinyConfig(ArchQwen3, capture.F32),
		tinyConfig(ArchQwen3MoE, capture.BF16), tinyConfig(ArchQwen2MoE, capture.BF16)} {
		m := NewRandom(cfg, 8)
		root := t.TempDir()
		seqs := captureBoth(t, m, root)
		for _, side := range []string{"trainer", "sampler"} {
			byOp, asm := captured(t, filepath.Join(root, side))
			checked := 0
			for _, op := range OpNames(cfg)[1:] {
				for seq := int64(0); seq < int64(len(seqs)); seq++ {
					want := asm[tensorKey{3, seq, op}]
					ps := want.positions()
					// the whole range, and (for a sampler) also the last position alone: a decode step
					ranges := [][2]int{{ps[0], len(ps)}, {ps[len(ps)-1], 1}}
					for _, r := range ranges {
						in := OpInputs{Step: 3, Seq: seq, Pos: r[0], N: r[1], Tensors: byOp, Seed: 9}
						got, err := m.RunOp(op, in)
						if err != nil {
							t.Fatalf("%s %s seq %d: %v", side, op, seq, err)
						}
						var exp []byte
						for p := r[0]; p < r[0]+r[1]; p++ {
							exp = append(exp, want.rows[p]...)
						}
						if !bytes.Equal(got.Data, exp) || got.DType != want.dtype {
							t.Fatalf("%s: RunOp %s seq %d positions [%d, %d) differs from the capture", side, op, seq, r[0], r[0]+r[1])
						}
						checked++
					}
				}
			}
			t.Logf("%s %s: %d op replays bitwise equal", cfg.Architecture, side, checked)
		}
	}
}

func TestRunOpErrors(t *testing.T) {
	m := NewRandom(tinyConfig(ArchLlama, capture.BF16), 1)
	cases := []struct {
		op string
		in OpInputs
	}{
		{"layers.9.attn_norm", OpInputs{N: 1}},
		{"tokens", OpInputs{N: 1}},
		{"layers.0.attn_norm", OpInputs{N: 0}},
		{"layers.0.attn_norm", OpInputs{N: 2}}, // no inputs
		{"layers.0.attn.sdpa", OpInputs{Pos: 3, N: 1, Tensors: map[string][]capture.Tensor{
			"layers.0.attn.q_rope": {{Op: "layers.0.attn.q_rope", Pos: 3, NTok: 1, DType: capture.BF16, Shape: []int64{1, 64}, Data: make([]byte, 128)}},
		}}},
	}
	for _, c := range cases {
		if _, err := m.RunOp(c.op, c.in); err == nil {
			t.Errorf("RunOp(%s, %+v) succeeded", c.op, c.in)
		}
	}
}

// TestReplayMatchesCaptures replays the demo's trainer and sampler captures from their tokens: the replay
// is bitwise identical to both (canonical), and to the faulted side it shows the fault.
func TestReplayMatchesCaptures(t *testing.T) {
	dir := t.TempDir()
	if err := Demo(dir, DemoOptions{Fault: "fusion", Layer: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := Load(filepath.Join(dir, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{SideTrainer, SideSampler} {
		out := filepath.Join(t.TempDir(), "replay")
		if _, err := m.Replay(context.Background(), filepath.Join(dir, side), out, ReplayOptions{}); err != nil {
			t.Fatal(err)
		}
		d := compare(t, m.Config, filepath.Join(dir, side), out)
		switch side {
		case SideTrainer:
			if d != nil {
				t.Fatalf("replay of the trainer capture diverges: %v", d)
			}
		case SideSampler:
			if d == nil || d.Op != "layers.1.mlp_norm" {
				t.Fatalf("replay of the faulted sampler capture: %v, want layers.1.mlp_norm", d)
			}
		}
		c, err := capture.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if c.Meta().Side != SideReplay || c.Meta().Step != DemoStep || c.Meta().Seed != DemoSampSeed {
			t.Fatalf("replay meta %+v", c.Meta())
		}
		c.Close()
	}
}
