package heatmap

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"bitalign/ui/state"
	"bitalign/ui/theme"
)

// pair4x6 is a 4×6 bf16 pair of ones whose B side is off by ulps[i] at element i.
func pair4x6(ulps map[int]uint16) *state.Pair {
	p := &state.Pair{DType: "bf16", Rows: 4, Cols: 6, A: make([]byte, 48), B: make([]byte, 48)}
	for i := 0; i < 24; i++ {
		binary.LittleEndian.PutUint16(p.A[2*i:], 0x3F80)
		binary.LittleEndian.PutUint16(p.B[2*i:], 0x3F80+ulps[i])
	}
	return p
}

func TestPrepareAndDownsample(t *testing.T) {
	// element 7 = (1,1): 3 ulp; element 10 = (1,4): 40 ulp; element 20 = (3,2): 1 ulp
	d, err := Prepare(pair4x6(map[int]uint16{7: 3, 10: 40, 20: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxULP != 40 || d.MaxAt != 10 || d.Diff != 3 || d.Hist[0] != 21 || d.Hist[2] != 1 || d.Hist[6] != 1 || d.Hist[1] != 1 {
		t.Fatalf("Prepare: max %d at %d, diff %d, hist %v", d.MaxULP, d.MaxAt, d.Diff, d.Hist[:8])
	}
	g := Downsample(d, 2, 3) // cells of 2 rows × 2 columns
	want := []uint8{2, 0, 6, 0, 1, 0}
	for i, b := range want {
		if g.Bucket[i] != b {
			t.Errorf("cell %d bucket %d, want %d", i, g.Bucket[i], b)
		}
	}
	if g.Arg[0] != 7 || g.Arg[2] != 10 || g.Arg[4] != 20 || g.Arg[1] != 2 {
		t.Errorf("Arg = %v: worst elements 7, 10, 20; an equal cell points at its first element", g.Arg)
	}
	if r0, r1 := g.RowSpan(1); r0 != 2 || r1 != 4 {
		t.Errorf("RowSpan(1) = %d, %d", r0, r1)
	}
	// never more cells than elements
	if g := Downsample(d, 100, 100); g.CR != 4 || g.CC != 6 {
		t.Errorf("upsampled to %d×%d", g.CR, g.CC)
	}
}

func TestPrepareRejectsShortData(t *testing.T) {
	p := pair4x6(nil)
	p.B = p.B[:10]
	if _, err := Prepare(p); err == nil || !strings.Contains(err.Error(), "needs 48 bytes") {
		t.Errorf("short data: %v", err)
	}
	p.DType = "q4"
	if _, err := Prepare(p); err == nil {
		t.Error("unknown dtype accepted")
	}
}

func TestMissingRows(t *testing.T) {
	p := pair4x6(map[int]uint16{20: 9})
	p.HasB = []bool{true, true, true, false}
	d, err := Prepare(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.Missing != 1 || d.Diff != 0 {
		t.Errorf("a row B lacks is not compared: missing %d, diff %d", d.Missing, d.Diff)
	}
}

func TestCursorAndView(t *testing.T) {
	d, _ := Prepare(pair4x6(map[int]uint16{7: 3, 10: 40, 20: 1}))
	m := New(theme.Default())
	m.SetSize(30, 4) // ruler + 3 char rows (6 half-rows): magnified
	m.SetData(d, -1, -1)
	if r, c, ok := m.Cursor(); !ok || r != 1 || c != 4 {
		t.Fatalf("new data puts the cursor on the worst element (1,4), got (%d,%d)", r, c)
	}
	m.Move(1, 0)
	if m.Pinned() {
		t.Error("moving the cursor unpins the element")
	}
	if r, c, _ := m.Cursor(); r != 2 || c != 4 {
		t.Errorf("down from (1,4): (%d,%d)", r, c)
	}
	m.Move(100, -100)
	if cr, cc, _, _, _, _ := m.CursorCell(); cr != 3 || cc != 0 {
		t.Errorf("cursor not clamped: (%d,%d)", cr, cc)
	}
	for i, l := range strings.Split(m.View(), "\n") {
		if w := ansi.StringWidth(l); w != 30 {
			t.Errorf("line %d is %d wide", i, w)
		}
	}
	// click mapping inverts the magnification
	cr, cc, ok := m.CellAt(axisW+m.sx*5, 1)
	if !ok || cr != 0 || cc != 5 {
		t.Errorf("CellAt: (%d,%d,%v), scale %d×%d", cr, cc, ok, m.sx, m.sy)
	}
	if _, _, ok := m.CellAt(0, 0); ok {
		t.Error("the ruler and axis are not cells")
	}
	// keep a token across new data
	m.SetData(d, 3, 5)
	if r, c, _ := m.Cursor(); r != 3 || c != 5 {
		t.Errorf("SetData keep (3,5): (%d,%d)", r, c)
	}
}

func TestHistogram(t *testing.T) {
	var h [65]uint64
	h[0], h[1], h[5], h[9], h[12], h[20] = 100, 10, 5, 3, 2, 1
	out := ansi.Strip(Histogram(theme.Default(), h, 50, 4))
	lines := strings.Split(out, "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "equal") || !strings.Contains(lines[3], "≥") {
		t.Errorf("histogram with more buckets than rows merges the tail:\n%s", out)
	}
	if one := ansi.Strip(Histogram(theme.Default(), h, 50, 1)); !strings.Contains(one, "differ") || !strings.Contains(one, " 21 ") {
		t.Errorf("a one-row histogram counts the 21 differing elements: %q", one)
	}
	if !strings.Contains(lines[2], "16–31") {
		t.Errorf("bucket 5 is 16–31:\n%s", out)
	}
}
