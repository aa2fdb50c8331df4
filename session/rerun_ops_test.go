package session

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"bitalign/capture"
	"bitalign/engine"
)

// TestReplayOps: replay --ops of the demo's faulted sampler gives, for the ops it asks, the per-op verdicts of
// the full replay (status, counts, distances, where; the cause wherever the op's producers are asked too), its
// capture holds the asked ops only, bit for bit the full replay's, and nothing after the last asked layer
// was computed; a pattern matching nothing is an error naming it and the capture.
func TestReplayOps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine's demo and three replays (several seconds)")
	}
	dir := t.TempDir()
	if err := engine.Demo(dir, engine.DemoOptions{Fault: "fusion", Layer: 1}); err != nil {
		t.Fatal(err)
	}
	ckpt, sampler := filepath.Join(dir, "checkpoint"), filepath.Join(dir, "sampler")
	ctx := context.Background()
	full, _, err := ReplayStep(ctx, ckpt, sampler, StepOptions{Device: "cpu", Save: filepath.Join(dir, "full")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		patterns []string
		lastOp   string // the last op of the forward the replay may hold (nothing after it is computed)
	}{
		{"one layer", []string{"layers.1.*"}, "layers.1.mlp_residual"},
		{"globs", []string{"layers.[01].mlp*", "embed"}, "layers.1.mlp_residual"},
		{"logits", []string{"layers.2.attn.q_proj", "logits"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "replay")
			part, _, err := ReplayStep(ctx, ckpt, sampler, StepOptions{Device: "cpu", Save: save, Ops: tc.patterns})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(part.Filter, tc.patterns) || !strings.Contains(part.Verdict(), "ops matching "+strings.Join(tc.patterns, ", ")) {
				t.Errorf("the verdict does not say which ops were compared: %q (filter %v)", part.Verdict(), part.Filter)
			}
			asked := map[string]bool{}
			for _, o := range part.Ops {
				asked[o.Op] = true
			}
			n := 0
			for i := range full.Ops {
				w := &full.Ops[i]
				if !asked[w.Op] {
					continue
				}
				n++
				g := &part.Ops[part.FindOp(w.Op, w.Role)]
				if g.Status != w.Status || g.Elements != w.Elements || g.Mismatched != w.Mismatched || g.MaxULP != w.MaxULP ||
					g.Hist != w.Hist || !sameCoord(g.MaxAt, w.MaxAt) || !sameCoord(g.FirstAt, w.FirstAt) {
					t.Errorf("%s: %s %d/%d mismatched, max %d ULP at %v; the full replay: %s %d/%d, %d ULP at %v", w.Op,
						g.Status, g.Mismatched, g.Elements, g.MaxULP, g.MaxAt, w.Status, w.Mismatched, w.Elements, w.MaxULP, w.MaxAt)
				}
				prods := engine.Producers(engine.DemoConfig(), w.Op)
				all := len(prods) > 0
				for _, p := range prods {
					all = all && asked[p]
				}
				if all && (g.Cause != w.Cause || g.CauseDetail != w.CauseDetail) {
					t.Errorf("%s: cause %s (%s), the full replay's %s (%s)", w.Op, g.Cause, g.CauseDetail, w.Cause, w.CauseDetail)
				}
			}
			if n == 0 || n != len(part.Ops) {
				t.Fatalf("%d ops compared, %d of them in the full replay", len(part.Ops), n)
			}
			// the replay capture: the asked ops only, the full replay's bytes, nothing computed after lastOp
			pc, err := capture.Open(save)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			fc, err := capture.Open(filepath.Join(dir, "full"))
			if err != nil {
				t.Fatal(err)
			}
			defer fc.Close()
			byKey := map[string]int{}
			for i := 0; i < fc.Len(); i++ {
				e := fc.Entry(i)
				byKey[entryKey(e)] = i
			}
			last := int32(-1)
			if tc.lastOp != "" {
				last = int32(slices.Index(engine.OpNames(engine.DemoConfig()), tc.lastOp))
			}
			for i := 0; i < pc.Len(); i++ {
				e := pc.Entry(i)
				if !asked[e.Op] {
					t.Fatalf("the replay capture holds %s, which no pattern asks", e.Op)
				}
				if last >= 0 && e.Index > last {
					t.Fatalf("the replay computed %s, after the last asked layer", e.Op)
				}
				j, ok := byKey[entryKey(e)]
				if !ok {
					t.Fatalf("%s: not in the full replay", entryKey(e))
				}
				a, _ := pc.Data(i)
				b, _ := fc.Data(j)
				if !bytes.Equal(a, b) {
					t.Fatalf("%s: other bytes than the full replay's", entryKey(e))
				}
			}
		})
	}
	_, _, err = ReplayStep(ctx, ckpt, sampler, StepOptions{Device: "cpu", Ops: []string{"layers.1.*", "layers.9*"}})
	if err == nil || !strings.Contains(err.Error(), `"layers.9*" matches no op of `+sampler) {
		t.Errorf("a pattern matching nothing: %v", err)
	}
}

func entryKey(e capture.Entry) string {
	return strings.Join([]string{e.Op, e.Role, itoa(e.Step), itoa(e.Seq), itoa(e.Pos), itoa(e.NTok), itoa(int64(e.Rank)), itoa(e.Shard.Start)}, "/")
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func sameCoord(a, b *Coord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Step == b.Step && a.Seq == b.Seq && a.Pos == b.Pos && a.Col == b.Col
}
