package sequences

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"bitalign/internal/golden"
	"bitalign/session/view"
	"bitalign/ui/theme"
)

func testRL() *view.RL {
	return &view.RL{Headline: "logprobs: 2 of 3 sequences differ", Captures: true, Seqs: []view.RLSeq{
		{Seq: 5, Tokens: 17, Equal: 3, FirstDiff: 1, MaxAbs: 0.0293, MeanAbs: 0.0101, K3: 7.7e-5, Differs: true, Note: "4 draws differ",
			PosLo: 1, PosHi: 18, Profile: []float32{0, 1e-8, 1e-6, 1e-4, 0.0293, float32(math.NaN())}},
		{Seq: 1, Tokens: 14, Equal: 13, FirstDiff: 9, MaxAbs: 3e-8, MeanAbs: 2e-9, K3: 1e-17, Differs: true,
			PosLo: 1, PosHi: 15, Profile: []float32{0, 0, 0, 3e-8}},
		{Seq: 0, Tokens: 6, Equal: 6, FirstDiff: -1, PosLo: 1, PosHi: 7, Profile: []float32{0, 0}},
	}}
}

// TestViewGolden: the header, the worst sequence first with its sparkline (decades of |Δ|, ! for a NaN), the
// note column at 100 cells and the cursor; colour stripped.
func TestViewGolden(t *testing.T) {
	m := New(theme.Default())
	m.SetRL(testRL())
	m.SetSize(100, 6)
	m, _ = m.Update(tea.KeyPressMsg{Code: tea.KeyDown})
	lines := strings.Split(ansi.Strip(m.View()), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	golden.Check(t, filepath.Join("..", "..", "testdata", "ui", "sequences-100.golden"), []byte(strings.Join(lines, "\n")+"\n"), "go test ./ui/sequences -update")
	if q := m.Selected(); q == nil || q.Seq != 1 {
		t.Errorf("selected %+v after one down, want seq 1", q)
	}
}

// TestSpark: one cell per bucket when there is room, the largest |Δ| of a cell's buckets otherwise.
func TestSpark(t *testing.T) {
	st := theme.Default()
	tests := []struct {
		profile []float32
		w       int
		want    string
	}{
		{[]float32{0, 1e-9, 1e-5, 0.5, 2}, 5, " ▁▅██"},
		{[]float32{0, 1e-9, 1e-5, 0.5}, 2, "▁█"},
		{[]float32{0, float32(math.NaN())}, 2, " !"},
		{nil, 3, "   "},
	}
	for _, tt := range tests {
		if got := ansi.Strip(Spark(st, tt.profile, tt.w)); got != tt.want {
			t.Errorf("Spark(%v, %d) = %q, want %q", tt.profile, tt.w, got, tt.want)
		}
	}
}
