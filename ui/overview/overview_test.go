package overview

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"bitalign/session/view"
	"bitalign/ui/theme"
)

func TestMetaMarksDifferences(t *testing.T) {
	st := theme.Default()
	r := &view.Report{A: view.CaptureInfo{Side: "trainer", KernelProfile: "canonical", TP: 2},
		B: view.CaptureInfo{Side: "sampler", KernelProfile: "standard", TP: 1}}
	out := Meta(st, r, 80, MetaRows(99))
	if !strings.Contains(out, st.Warn.Render(theme.Fit("canonical", 34))) {
		t.Error("a field that differs between the sides is drawn in the warning colour")
	}
	if strings.Contains(out, st.Warn.Render(theme.Fit("0 · seed 0", 34))) {
		t.Error("equal fields are not")
	}
	if n := strings.Count(Meta(st, r, 80, MetaRows(5)), "\n") + 1; n != MetaRows(5) {
		t.Errorf("compact meta has %d rows, want %d", n, MetaRows(5))
	}
}

func TestSparkline(t *testing.T) {
	st := theme.Default()
	var ops []view.OpStat
	for i := 0; i < 10; i++ {
		o := view.OpStat{Op: "op", Layer: i / 5, Elements: 10}
		if i >= 6 {
			o.Status, o.Mismatched, o.MaxULP = view.Divergent, int64(i), uint64(1)<<i
		}
		ops = append(ops, o)
	}
	ops[3].Status = view.MissingB
	out, cells := Sparkline(st, ops, 6, 20)
	lines := strings.Split(ansi.Strip(out), "\n")
	if len(cells) != 20 || cells[0] != 0 || cells[19] != 9 || cells[13] != 6 {
		t.Errorf("10 ops in 20 cells: two cells each, got %v", cells)
	}
	if !strings.HasPrefix(lines[0], "······∅∅") || strings.Count(lines[1], "▲") != 1 || !strings.Contains(lines[1], "L1") {
		t.Errorf("sparkline:\n%s", strings.Join(lines, "\n"))
	}
	if []rune(lines[0])[19] != '█' {
		t.Errorf("90%% of elements differ in the last op: full bar, got %q", lines[0])
	}
	if v := ansi.Strip(Verdict(st, &view.Report{Identical: true, Ops: ops})); !strings.Contains(v, "bitwise identical") {
		t.Errorf("verdict: %q", v)
	}
}

// TestIntegerFirstDivergence: a first divergence in sampled tokens counts the values that differ, in the
// verdict and in the sparkline's colour, never ULPs.
func TestIntegerFirstDivergence(t *testing.T) {
	st := theme.Default()
	ops := []view.OpStat{
		{Op: "logits", Role: "out", DType: "f32", Status: view.Identical, Elements: 10},
		{Op: "sample", Role: "out", DType: "i32", Status: view.Divergent, Elements: 53, Mismatched: 1, MaxULP: 1},
	}
	r := &view.Report{Ops: ops, First: &view.Divergence{Op: "sample", Role: "out", At: view.Coord{Seq: 4, Pos: 3}, MaxULP: 67}}
	if v := ansi.Strip(Verdict(st, r)); v != "✗ first divergence: sample, seq 4, pos 3, 1 value differs" || strings.Contains(v, "ulp") {
		t.Errorf("integer verdict: %q", v)
	}
	ops[1].DType, r.First.Op = "bf16", "sample"
	if v := ansi.Strip(Verdict(st, r)); !strings.HasSuffix(v, "max 67 ulp") {
		t.Errorf("float verdict: %q", v)
	}
	ops[1].DType = "i32"
	line, _ := Sparkline(st, ops, 0, 2)
	if !strings.Contains(line, st.Heat[theme.IntLevel].Render("▁")) {
		t.Errorf("a differing integer op is drawn at theme.IntLevel, whatever its |Δ|: %q", line)
	}
}
