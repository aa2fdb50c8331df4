package oplist

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"bitalign/session/view"
	"bitalign/ui/theme"
)

func ops() []view.OpStat {
	names := []string{"embed", "layers.0.attn.q_proj", "layers.0.mlp.down_proj", "layers.1.attn.q_proj", "layers.1.mlp.down_proj", "logits"}
	var out []view.OpStat
	for i, n := range names {
		o := view.OpStat{Op: n, Index: int32(i), Role: "out", Elements: 100}
		if i >= 2 {
			o.Status, o.Mismatched, o.MaxULP = view.Divergent, int64(10*i), uint64(i)
		}
		out = append(out, o)
	}
	out[5].Status = view.MissingB
	out[0].Status = view.ShapeMismatch
	out[1].Status = view.Incomplete
	return out
}

func TestFilterAndSelect(t *testing.T) {
	m := New(theme.Default())
	m.SetOps(ops())
	m.SetSize(80, 4)
	if m.Selected() != 0 {
		t.Fatalf("selected %d", m.Selected())
	}
	m.Select(4)
	m.SetFilter("down 1")
	if m.Visible() != 1 || m.Selected() != 4 {
		t.Errorf("filter words are ANDed and the selection kept: %d visible, selected %d", m.Visible(), m.Selected())
	}
	m.SetFilter("Q_PROJ")
	if m.Visible() != 2 || m.Selected() != 1 || m.Select(4) {
		t.Errorf("case-insensitive filter; a hidden op cannot be selected: visible %d selected %d", m.Visible(), m.Selected())
	}
	m.SetFilter("")
	m.Select(5)
	// 3 op rows: the last one is at row 3
	if got := m.RowAt(3); got != 5 {
		t.Errorf("RowAt(3) = %d after scrolling to the end", got)
	}
	if m.RowAt(0) != -1 {
		t.Error("row 0 is the header")
	}
	out := ansi.Strip(m.View())
	for _, want := range []string{"∅ missing B", "✗ divergent", "layers.1.mlp.down_proj"} {
		if !strings.Contains(out, want) {
			t.Errorf("view lacks %q:\n%s", want, out)
		}
	}
	m.Select(0)
	out = ansi.Strip(m.View())
	for _, want := range []string{"≠ shapes", "~ incomplete"} {
		if !strings.Contains(out, want) {
			t.Errorf("view lacks %q:\n%s", want, out)
		}
	}
	for i, l := range strings.Split(m.View(), "\n") {
		if w := ansi.StringWidth(l); w != 80 {
			t.Errorf("line %d is %d wide", i, w)
		}
	}
}

func TestFormatULP(t *testing.T) {
	for u, want := range map[uint64]string{3: "3 ulp", 12345: "12.3k ulp", 45_000_000: "45.0M ulp"} {
		if got := FormatULP(u); got != want {
			t.Errorf("FormatULP(%d) = %q, want %q", u, got, want)
		}
	}
}

func TestWideColumns(t *testing.T) {
	m := New(theme.Default())
	m.SetOps(ops())
	m.SetSize(160, 8)
	out := ansi.Strip(m.View())
	if !strings.Contains(out, "elements differing") || !strings.Contains(out, "■") {
		t.Errorf("a wide list shows the type and a mismatch bar:\n%s", out)
	}
	for i, l := range strings.Split(m.View(), "\n") {
		if w := ansi.StringWidth(l); w != 160 {
			t.Errorf("line %d is %d wide", i, w)
		}
	}
}

func TestIntegerOpsCountValues(t *testing.T) {
	o := ops()
	o[4].DType, o[4].Mismatched, o[4].MaxULP = "i32", 3, 41 // a sampled token: 3 of 100 ids differ
	o[3].DType = "bf16"
	m := New(theme.Default())
	m.SetOps(o)
	m.SetSize(80, 7)
	lines := strings.Split(ansi.Strip(m.View()), "\n")
	if !strings.Contains(lines[0], "max diff") || strings.Contains(lines[0], "ULP") {
		t.Errorf("the header names a column that holds ULPs and value counts: %q", lines[0])
	}
	var intRow, floatRow string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "layers.1.mlp.down_proj"):
			intRow = l
		case strings.Contains(l, "layers.1.attn.q_proj"):
			floatRow = l
		}
	}
	if !strings.HasSuffix(intRow, "3 values") || strings.Contains(strings.ToLower(intRow), "ulp") {
		t.Errorf("an integer op counts the values that differ, without ULPs: %q", intRow)
	}
	if !strings.HasSuffix(floatRow, "3 ulp") {
		t.Errorf("a float op shows its max ULP: %q", floatRow)
	}
	if d := Describe(&o[4]); d != "#4 layers.1.mlp.down_proj · divergent · 3 of 100 values differ (3.00%)" {
		t.Errorf("Describe(integer op) = %q", d)
	}
	if d := Describe(&o[3]); d != "#3 layers.1.attn.q_proj · divergent · 30.00% differ · max 3 ulp" {
		t.Errorf("Describe(float op) = %q", d)
	}
	if Differ(1) != "1 value differs" || Differ(2) != "2 values differ" {
		t.Errorf("Differ(1) = %q, Differ(2) = %q", Differ(1), Differ(2))
	}
	for n, want := range map[int64]string{1: "1 value", 999: "999 values", 1234: "1.2k values", 999_999: "999k values",
		1_234_567: "1.2M values", 123_456_789: "123M values"} {
		if got := Values(n); got != want || len(got) > 11 {
			t.Errorf("Values(%d) = %q, want %q (at most 11 cells)", n, got, want)
		}
	}
}
