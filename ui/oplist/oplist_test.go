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
