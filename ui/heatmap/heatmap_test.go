package heatmap

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"bitalign/session/view"
	"bitalign/ui/theme"
)

// pair4x6 is a 4×6 bf16 pair of ones whose B side is off by ulps[i] at element i.
func pair4x6(ulps map[int]uint16) *view.Pair {
	p := &view.Pair{DType: "bf16", Rows: 4, Cols: 6, A: make([]byte, 48), B: make([]byte, 48)}
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
	out := ansi.Strip(Histogram(theme.Default(), h, false, 50, 4))
	lines := strings.Split(out, "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "equal") || !strings.Contains(lines[3], "≥") {
		t.Errorf("histogram with more buckets than rows merges the tail:\n%s", out)
	}
	if one := ansi.Strip(Histogram(theme.Default(), h, false, 50, 1)); !strings.Contains(one, "differ") || !strings.Contains(one, " 21 ") {
		t.Errorf("a one-row histogram counts the 21 differing elements: %q", one)
	}
	if !strings.Contains(lines[2], "16–31") {
		t.Errorf("bucket 5 is 16–31:\n%s", out)
	}
}

// TestHistogramNeverCutsPercentages: at every width from 6 cells on, each row ends in its whole percentage
// (and its whole count, from the width that holds one); the bar and then the labels give way first.
func TestHistogramNeverCutsPercentages(t *testing.T) {
	var h [65]uint64
	h[0], h[1], h[5], h[40] = 4, 1_234_567, 12, 3 // 100.0%-wide percentages need 6 cells, the count 7
	var all [65]uint64
	all[0] = 4 // every element equal: "100.0%"
	for _, hist := range [][65]uint64{h, all} {
		total := uint64(0)
		for _, n := range hist {
			total += n
		}
		for w := 6; w <= 60; w++ {
			out := ansi.Strip(Histogram(theme.Default(), hist, false, w, 5))
			lines := strings.Split(out, "\n")
			row := 0
			for b, n := range hist {
				if n == 0 {
					continue
				}
				pct := fmt.Sprintf("%.1f%%", 100*float64(n)/float64(total))
				l := strings.TrimRight(lines[row], " ")
				if !strings.HasSuffix(l, pct) || ansi.StringWidth(lines[row]) != w {
					t.Fatalf("width %d, bucket %d: row %q does not end in %q (or is not %d wide)", w, b, lines[row], pct, w)
				}
				if f := strings.Fields(l); w >= 1+7+1+pctW && (len(f) < 2 || f[len(f)-2] != fmt.Sprint(n)) {
					t.Fatalf("width %d, bucket %d: row %q lacks its count %d", w, b, l, n)
				}
				row++
			}
		}
	}
	if out := ansi.Strip(Histogram(theme.Default(), h, false, 34, 5)); !strings.Contains(out, "512G–1023G") {
		t.Errorf("bucket 40 is 2^39 ulp and up, written in G:\n%s", out)
	}
}

// TestIntegerHistogram: an integer tensor's histogram counts equal and differing values, without ULP buckets.
func TestIntegerHistogram(t *testing.T) {
	var h [65]uint64
	h[0], h[1], h[7] = 50, 2, 1 // |Δ| of 1 and of 67: both just differ
	out := ansi.Strip(Histogram(theme.Default(), h, true, 34, 4))
	lines := strings.Split(out, "\n")
	row := func(i int) string { return strings.Join(strings.Fields(lines[i]), " ") }
	if !strings.HasPrefix(row(0), "equal") || !strings.HasSuffix(row(0), "50 94.3%") ||
		!strings.HasPrefix(row(1), "differ") || !strings.HasSuffix(row(1), " 3 5.7%") || row(2) != "" {
		t.Errorf("integer histogram: want an equal row and one differ row of 3:\n%s", out)
	}
	if l := ansi.Strip(Legend(theme.Default(), true, "")); strings.Contains(l, "ULP") || !strings.Contains(l, "equal") || !strings.Contains(l, "differ") {
		t.Errorf("integer legend: %q", l)
	}
	if l := ansi.Strip(Legend(theme.Default(), false, "bf16")); !strings.HasPrefix(l, "bf16 ULP ") {
		t.Errorf("a narrowed pair's legend: %q", l)
	}
	if l := ansi.Strip(Legend(theme.Default(), false, "")); !strings.HasPrefix(l, "ULP ") {
		t.Errorf("float legend: %q", l)
	}
}

// bigPair is a rows×cols bf16 pair of ones whose B side is off by 5 ulp at element worst.
func bigPair(rows, cols, worst int) *view.Pair {
	n := rows * cols
	p := &view.Pair{DType: "bf16", Rows: rows, Cols: cols, A: make([]byte, 2*n), B: make([]byte, 2*n)}
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(p.A[2*i:], 0x3F80)
		binary.LittleEndian.PutUint16(p.B[2*i:], 0x3F80)
	}
	binary.LittleEndian.PutUint16(p.B[2*worst:], 0x3F85)
	return p
}

// A big tensor re-bins in the background on resize: the map says so until the grid comes back, the grid
// is then binned for the new size, the cursor keeps its element, and a result for a size since replaced is
// dropped.
func TestResizeRebinsInBackground(t *testing.T) {
	const rows, cols = 1024, 1024 // asyncElements
	worst := 700*cols + 300
	d, err := Prepare(bigPair(rows, cols, worst))
	if err != nil {
		t.Fatal(err)
	}
	m := New(theme.Default())
	m.SetSize(100, 30)
	m.SetData(d, -1, -1)
	if r, c, ok := m.Cursor(); !ok || r != 700 || c != 300 {
		t.Fatalf("cursor on (%d, %d, %v), want the worst element (700, 300)", r, c, ok)
	}
	m.MoveToElement(5*cols + 9) // pin the cursor to another element
	m.SetSize(80, 20)
	if !m.Rebinning() || !strings.Contains(ansi.Strip(m.View()), "re-binning 1024×1024") {
		t.Fatalf("a 1M-element tensor should re-bin in the background:\n%s", ansi.Strip(m.View()))
	}
	if r, c, ok := m.Cursor(); !ok || r != 5 || c != 9 {
		t.Errorf("while re-binning the cursor is on (%d, %d, %v), want (5, 9)", r, c, ok)
	}
	first := m.Regrid()
	if first == nil || m.Regrid() != nil {
		t.Fatal("Regrid: one command per pending size")
	}
	m.SetSize(90, 25) // the window moved again before the first result
	second := m.Regrid()
	if msg := first(); msg != nil {
		t.Errorf("a re-bin for a replaced size should give up, got %T", msg)
	}
	msg := second()
	g, ok := msg.(GridMsg)
	if !ok {
		t.Fatalf("Regrid's command returned %T", msg)
	}
	m.ApplyGrid(g)
	if m.Rebinning() || m.Grid().CR != 2*(25-1) || m.Grid().CC != 90-axisW {
		t.Fatalf("grid %d×%d after the re-bin, want %d×%d", m.Grid().CR, m.Grid().CC, 2*(25-1), 90-axisW)
	}
	if r, c, ok := m.Cursor(); !ok || r != 5 || c != 9 {
		t.Errorf("after the re-bin the cursor is on (%d, %d, %v), want (5, 9)", r, c, ok)
	}
	if v := ansi.Strip(m.View()); strings.Contains(v, "re-binning") || len(strings.Split(v, "\n")) != 25 {
		t.Errorf("the map is not back:\n%s", v)
	}
	m.ApplyGrid(g) // a second delivery changes nothing
	// small tensors re-bin at once
	small, _ := Prepare(pair4x6(nil))
	m.SetData(small, -1, -1)
	m.SetSize(60, 12)
	if m.Rebinning() || m.Regrid() != nil {
		t.Error("a small tensor should re-bin on the spot")
	}
}

func TestBucketLabels(t *testing.T) {
	// two bounds of a bucket never read the same
	for b, want := range map[int]string{0: "equal", 1: "1", 2: "2–3", 10: "512–1023", 11: "1024–2047", 14: "8192–15k",
		15: "16k–31k", 21: "1024k–2047k", 22: "2048k–4095k", 24: "8192k–15M", 40: "512G–1023G", 64: "8192P–15E"} {
		if got := bucketLabel(b); got != want {
			t.Errorf("bucketLabel(%d) = %q, want %q", b, got, want)
		}
	}
}
