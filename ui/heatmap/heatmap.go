package heatmap

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"bitalign/ui/keys"
	"bitalign/ui/theme"
)

// axisW is the width of the token-position axis left of the map.
const axisW = 6

// Model is the heatmap with its cursor. Its size is the map area: a ruler row on top, an axis on the left.
type Model struct {
	st     theme.Styles
	data   *Data
	grid   *Grid
	w, h   int
	cr, cc int // cursor cell
	sx, sy int // display scale: each cell is sx characters wide and sy half-rows tall (small tensors)
	pin    int // element the cursor is pinned to inside its cell (-1: the cell's worst element)

	// cells[top][bottom] is "▀" coloured top/bottom, built once from the styles
	cells      [theme.Levels + 1][theme.Levels + 1]string
	cursorT    [theme.Levels + 1]string // cursor in the top half, bottom level given
	cursorB    [theme.Levels + 1]string // cursor in the bottom half, top level given
	cursorFull string                   // cursor in both halves (magnified cells)

	pending *regrid        // a background re-bin for the current size, not yet applied
	gen     *atomic.Uint64 // re-bin requests so far (shared with their commands)
}

// asyncElements: from this many elements on, a resize re-bins in the background (Downsample of a 4096×4096
// tensor takes 18–50 ms, too long for the UI thread while a window is dragged); smaller tensors at once.
const asyncElements = 1 << 20

// debounce: how long a background re-bin waits for the size to settle before it starts.
const debounce = 25 * time.Millisecond

// regrid is a background re-bin asked for: the size it is for and its request number.
type regrid struct {
	w, h    int
	gen     uint64
	started bool
}

// GridMsg carries a grid binned in the background (Regrid's command) to ApplyGrid.
type GridMsg struct {
	data *Data
	gen  uint64
	grid *Grid
}

// New returns an empty heatmap.
func New(st theme.Styles) Model {
	m := Model{st: st, pin: -1}
	m.buildCells()
	return m
}

func (m *Model) buildCells() {
	st := m.st
	white := st.Cursor.GetForeground()
	for t := 0; t <= theme.Levels; t++ {
		for b := 0; b <= theme.Levels; b++ {
			if st.Color {
				m.cells[t][b] = lipgloss.NewStyle().Foreground(st.HeatColor(t)).Background(st.HeatColor(b)).Render("▀")
			} else {
				m.cells[t][b] = theme.Shade(max(t, b))
			}
		}
		if st.Color {
			m.cursorT[t] = lipgloss.NewStyle().Foreground(white).Background(st.HeatColor(t)).Render("▀")
			m.cursorB[t] = lipgloss.NewStyle().Foreground(st.HeatColor(t)).Background(white).Render("▀")
		} else {
			m.cursorT[t], m.cursorB[t] = "◘", "◘"
		}
	}
	m.cursorFull = "◘"
	if st.Color {
		m.cursorFull = lipgloss.NewStyle().Foreground(white).Render("█")
	}
}

// SetStyles swaps the styles (the colour profile changed).
func (m *Model) SetStyles(st theme.Styles) {
	m.st = st
	m.buildCells()
}

// Data is the data shown, nil before the first SetData.
func (m Model) Data() *Data { return m.data }

// Grid is the current downsampled grid, nil when there is no data.
func (m Model) Grid() *Grid { return m.grid }

// SetData shows d, putting the cursor on data row keepRow (the same token as before a step) and column
// keepCol when they exist; negative values put the cursor on the worst element.
func (m *Model) SetData(d *Data, keepRow, keepCol int) {
	m.data, m.pin, m.grid, m.pending = d, -1, nil, nil
	m.setGrid(m.binned())
	if m.grid == nil {
		return
	}
	if keepRow < 0 || keepCol < 0 {
		m.MoveToElement(d.MaxAt)
		return
	}
	r, c := min(keepRow, m.grid.Rows-1), min(keepCol, m.grid.Cols-1)
	m.MoveToElement(r*m.grid.Cols + c)
}

// SetSize sets the map area (ruler and axis included) and re-bins the data, keeping the cursor's element.
// A big tensor is re-binned in the background: until Regrid's command comes back, the map shows that it is
// being re-binned and the cursor stays on the old grid.
func (m *Model) SetSize(w, h int) {
	if w == m.w && h == m.h {
		return
	}
	m.w, m.h = w, h
	if m.grid != nil && m.data.Pair.Rows*m.data.Pair.Cols >= asyncElements && w > axisW && h >= 2 {
		if m.gen == nil {
			m.gen = new(atomic.Uint64)
		}
		m.pending = &regrid{w: w, h: h, gen: m.gen.Add(1)}
		return
	}
	m.pending = nil
	m.setGrid(m.binned())
}

// Regrid returns the command that bins the data for the size SetSize left pending (nil when nothing is
// pending or its command is already out). It waits debounce first and gives up if the size changed again.
func (m *Model) Regrid() tea.Cmd {
	p := m.pending
	if p == nil || p.started {
		return nil
	}
	p.started = true
	d, gen, latest := m.data, p.gen, m.gen
	maxR, maxC := 2*(p.h-1), p.w-axisW
	return func() tea.Msg {
		time.Sleep(debounce)
		if latest.Load() != gen {
			return nil // a newer size has its own command
		}
		return GridMsg{data: d, gen: gen, grid: Downsample(d, maxR, maxC)}
	}
}

// ApplyGrid shows a grid that Regrid's command binned, if it is still for the current data and size.
func (m *Model) ApplyGrid(g GridMsg) {
	if m.pending == nil || g.gen != m.pending.gen || g.data != m.data {
		return
	}
	m.pending = nil
	m.setGrid(g.grid)
}

// Rebinning reports whether a background re-bin is pending.
func (m Model) Rebinning() bool { return m.pending != nil }

// binned is the data binned for the current size (nil without data or room).
func (m *Model) binned() *Grid {
	if m.data == nil || m.w <= axisW || m.h < 2 {
		return nil
	}
	return Downsample(m.data, 2*(m.h-1), m.w-axisW)
}

// setGrid shows g, keeping the cursor's element.
func (m *Model) setGrid(g *Grid) {
	r, c, ok := m.Cursor()
	pinned := m.pin >= 0
	m.grid = g
	if g == nil {
		return
	}
	m.cr = min(m.cr, m.grid.CR-1)
	m.cc = min(m.cc, m.grid.CC-1)
	// small tensors are magnified by whole factors (at most 4) so they fill the panel
	m.sx = max(1, min(4, (m.w-axisW)/m.grid.CC))
	m.sy = max(1, min(4, 2*(m.h-1)/m.grid.CR))
	if ok {
		m.MoveToElement(r*m.grid.Cols + c)
		if !pinned {
			m.pin = -1
		}
	}
}

// Cursor returns the data row and column of the selected element: the one the cursor was put on (a step
// keeps the token and feature; m goes to the largest ULP), else the cursor cell's worst element.
func (m Model) Cursor() (row, col int, ok bool) {
	if m.grid == nil {
		return 0, 0, false
	}
	i := m.grid.Arg[m.cr*m.grid.CC+m.cc]
	if m.pin >= 0 {
		i = m.pin
	}
	return i / m.grid.Cols, i % m.grid.Cols, true
}

// Pinned reports whether the selected element was chosen exactly (not as its cell's worst).
func (m Model) Pinned() bool { return m.pin >= 0 }

// CursorCell is the cursor's cell and the data block it covers.
func (m Model) CursorCell() (cr, cc, r0, r1, c0, c1 int) {
	if m.grid == nil {
		return
	}
	r0, r1 = m.grid.RowSpan(m.cr)
	c0, c1 = m.grid.ColSpan(m.cc)
	return m.cr, m.cc, r0, r1, c0, c1
}

// MoveToElement puts the cursor on the cell holding element i.
func (m *Model) MoveToElement(i int) {
	if m.grid == nil {
		return
	}
	i = max(0, min(i, m.grid.Rows*m.grid.Cols-1))
	m.cr, m.cc = m.grid.RowOf(i/m.grid.Cols), m.grid.ColOf(i%m.grid.Cols)
	m.pin = i
}

// Move moves the cursor by (dr, dc) cells.
func (m *Model) Move(dr, dc int) {
	if m.grid == nil {
		return
	}
	m.cr = max(0, min(m.cr+dr, m.grid.CR-1))
	m.cc = max(0, min(m.cc+dc, m.grid.CC-1))
	if dr != 0 || dc != 0 {
		m.pin = -1
	}
}

// CellAt maps a point of the map area (as drawn by View) to a cell.
func (m Model) CellAt(x, y int) (cr, cc int, ok bool) {
	if m.grid == nil || x < axisW || y < 1 {
		return 0, 0, false
	}
	cc, cr = (x-axisW)/m.sx, 2*(y-1)/m.sy
	if cc >= m.grid.CC || cr >= m.grid.CR {
		return 0, 0, false
	}
	return cr, cc, true
}

// SetCursorCell moves the cursor to a cell (from CellAt).
func (m *Model) SetCursorCell(cr, cc int) {
	m.cr, m.cc, m.pin = cr, cc, -1
	m.Move(0, 0)
}

// keySteps and wheelSteps are the cursor moves (rows, columns) of the navigation keys and the wheel.
var (
	keySteps = map[keys.Action][2]int{keys.Up: {-1, 0}, keys.Down: {1, 0}, keys.Left: {0, -1}, keys.Right: {0, 1},
		keys.FastUp: {-8, 0}, keys.FastDown: {8, 0}, keys.FastLeft: {0, -8}, keys.FastRight: {0, 8}}
	wheelSteps = map[tea.MouseButton][2]int{tea.MouseWheelUp: {-1, 0}, tea.MouseWheelDown: {1, 0},
		tea.MouseWheelLeft: {0, -1}, tea.MouseWheelRight: {0, 1}}
)

// Update moves the cursor on navigation keys and the wheel.
func (m Model) Update(msg tea.Msg) (Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		if d, ok := keySteps[keys.Lookup(msg.String())]; ok {
			m.Move(d[0], d[1])
		}
	case tea.MouseWheelMsg:
		if d, ok := wheelSteps[msg.Button]; ok {
			m.Move(d[0], d[1])
		}
	}
	return m, nil
}

// View draws the ruler, the axis and the map, exactly w×h.
func (m Model) View() string {
	if m.pending != nil {
		p := m.data.Pair
		return strings.Join(theme.FitLines(m.st.Muted.Render(fmt.Sprintf("re-binning %d×%d…", p.Rows, p.Cols)), m.w, m.h), "\n")
	}
	if m.grid == nil {
		msg := "no data"
		if m.data != nil {
			msg = "too small"
		}
		return strings.Join(theme.FitLines(m.st.Muted.Render(msg), m.w, m.h), "\n")
	}
	g := m.grid
	var b strings.Builder
	b.Grow((m.h + 1) * (m.w*20 + 8))
	b.WriteString(m.ruler())
	pos0 := m.data.Pair.Pos0
	sx, sy := m.sx, m.sy
	for y := 0; y < m.h-1; y++ {
		b.WriteByte('\n')
		t, bo := 2*y/sy, (2*y+1)/sy // cell rows of the top and bottom halves
		if t >= g.CR {
			b.WriteString(strings.Repeat(" ", m.w))
			continue
		}
		// axis: the token position where a cell row starts (every other row at most), and a marker on the
		// cursor's row
		label := ""
		onCursor := y == m.cr*sy/2 // the character row holding the cursor cell's first half-row
		if (2*y)%sy == 0 || onCursor {
			r0, _ := g.RowSpan(t)
			if onCursor {
				r0, _ = g.RowSpan(m.cr)
			}
			label = fmt.Sprint(pos0 + int64(r0))
		}
		if onCursor {
			b.WriteString(m.st.Accent.Render(fmt.Sprintf("%*s▶", axisW-2, label)) + " ")
		} else {
			b.WriteString(m.st.Faint.Render(fmt.Sprintf("%*s ", axisW-1, label)))
		}
		top := g.Bucket[t*g.CC : (t+1)*g.CC]
		var bot []uint8
		if bo < g.CR {
			bot = g.Bucket[bo*g.CC : (bo+1)*g.CC]
		}
		// runs of equal cells share one escape sequence: fewer bytes to measure and to send
		run, runLen := "", 0
		flush := func() {
			if runLen == 0 {
				return
			}
			pre, glyph, suf := split(run)
			b.WriteString(pre)
			for i := 0; i < runLen; i++ {
				b.WriteString(glyph)
			}
			b.WriteString(suf)
			runLen = 0
		}
		integer := m.data.Format.IsInt()
		for x := 0; x < g.CC*sx; x++ {
			c := x / sx
			lt, lb := theme.ValueLevel(top[c], integer), 0
			if bot != nil {
				lb = theme.ValueLevel(bot[c], integer)
			}
			var cell string
			switch {
			case c == m.cc && t == m.cr && bo == m.cr:
				cell = m.cursorFull
			case c == m.cc && t == m.cr:
				cell = m.cursorT[lb]
			case c == m.cc && bo == m.cr:
				cell = m.cursorB[lt]
			default:
				cell = m.cells[lt][lb]
			}
			if cell != run {
				flush()
				run = cell
			}
			runLen++
		}
		flush()
		if pad := m.w - axisW - g.CC*sx; pad > 0 {
			b.WriteString(strings.Repeat(" ", pad))
		}
	}
	return b.String()
}

// ruler is the feature axis: labels every 16 characters and a ▼ over the cursor column.
func (m Model) ruler() string {
	g := m.grid
	line := []rune(strings.Repeat(" ", m.w-axisW))
	step := 16
	for x := 0; x < g.CC*m.sx; x += step {
		lo, _ := g.ColSpan(x / m.sx)
		l := []rune(fmt.Sprint(lo))
		if x+len(l) < len(line) {
			copy(line[x:], l)
		}
	}
	cur := m.cc * m.sx
	head := m.st.Faint.Render(theme.Fit("feat", axisW))
	if cur < len(line) {
		return head + m.st.Faint.Render(string(line[:cur])) + m.st.Accent.Render("▼") + m.st.Faint.Render(string(line[cur+1:]))
	}
	return head + m.st.Faint.Render(string(line))
}

// Legend is a one-line key to the heat colours: ULP levels, or for an integer tensor (integer) equal and
// differ (theme.ValueLevel).
func Legend(st theme.Styles, integer bool, ulpDType string) string {
	swatch := func(l int) string {
		if !st.Color {
			return theme.Shade(l)
		}
		return st.Heat[l].Render("■")
	}
	if integer {
		return st.Muted.Render("values ") + swatch(0) + st.Faint.Render("equal ") + swatch(theme.IntLevel) + st.Faint.Render("differ")
	}
	var b strings.Builder
	if ulpDType != "" {
		b.WriteString(st.Muted.Render(ulpDType + " "))
	}
	b.WriteString(st.Muted.Render("ULP "))
	for l := 0; l <= theme.Levels; l++ {
		b.WriteString(swatch(l) + st.Faint.Render(theme.LevelLabel(l)) + " ")
	}
	return strings.TrimRight(b.String(), " ")
}

// split cuts a one-glyph styled cell into its escape prefix, the glyph and its escape suffix.
func split(s string) (pre, glyph, suf string) {
	for _, g := range []string{"▀", "█", "◘", "░", "▒", "▓", "·"} {
		if i := strings.Index(s, g); i >= 0 {
			return s[:i], g, s[i+len(g):]
		}
	}
	return "", s, ""
}
