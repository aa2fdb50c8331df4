// Package oplist is the list of ops in execution order with their diff status, a cursor and a name filter.
package oplist

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"bitalign/ui/fp"
	"bitalign/ui/keys"
	"bitalign/ui/state"
	"bitalign/ui/theme"
)

// Model is the op list. Indexes given to and returned by its methods are indexes into the report's Ops.
type Model struct {
	st      theme.Styles
	ops     []state.OpStat
	first   int   // index of the first divergent op, -1
	visible []int // ops passing the filter
	filter  string
	cursor  int // into visible
	offset  int // first visible row shown
	w, h    int
}

// New returns an empty list.
func New(st theme.Styles) Model { return Model{st: st, first: -1} }

// SetOps sets the report's ops (kept, not copied) and resets the filter.
func (m *Model) SetOps(ops []state.OpStat) {
	m.ops = ops
	m.first = -1
	for i := range ops {
		if ops[i].Status == state.Divergent {
			m.first = i
			break
		}
	}
	m.SetFilter("")
}

// SetSize sets the list's size in cells: one header row and h-1 op rows.
func (m *Model) SetSize(w, h int) {
	m.w, m.h = w, h
	m.clamp()
}

// SetFilter keeps only ops whose name contains every space-separated word of f; the selection is kept when
// it still passes.
func (m *Model) SetFilter(f string) {
	sel := m.Selected()
	m.filter = f
	m.visible = m.visible[:0]
	words := strings.Fields(strings.ToLower(f))
outer:
	for i := range m.ops {
		name := strings.ToLower(m.ops[i].Op)
		for _, w := range words {
			if !strings.Contains(name, w) {
				continue outer
			}
		}
		m.visible = append(m.visible, i)
	}
	m.cursor = 0
	if sel >= 0 {
		m.Select(sel)
	}
	m.clamp()
}

// Filter is the current filter text.
func (m Model) Filter() string { return m.filter }

// Visible is the number of ops passing the filter.
func (m Model) Visible() int { return len(m.visible) }

// Selected is the selected op's index, -1 when none is visible.
func (m Model) Selected() int {
	if m.cursor < 0 || m.cursor >= len(m.visible) {
		return -1
	}
	return m.visible[m.cursor]
}

// Select moves the cursor to op i when it passes the filter, and reports whether it does.
func (m *Model) Select(i int) bool {
	for c, v := range m.visible {
		if v == i {
			m.cursor = c
			m.clamp()
			return true
		}
	}
	return false
}

// Move moves the cursor by d rows.
func (m *Model) Move(d int) {
	m.cursor += d
	m.clamp()
}

func (m *Model) rows() int { return max(m.h-1, 1) }

func (m *Model) clamp() {
	m.cursor = max(0, min(m.cursor, len(m.visible)-1))
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+m.rows() {
		m.offset = m.cursor - m.rows() + 1
	}
	m.offset = max(0, min(m.offset, len(m.visible)-m.rows()))
}

// RowAt returns the op index drawn at row y of the list (0 is the header), or -1.
func (m Model) RowAt(y int) int {
	c := m.offset + y - 1
	if y < 1 || c < 0 || c >= len(m.visible) {
		return -1
	}
	return m.visible[c]
}

// Update handles the list's own navigation keys and the mouse wheel.
func (m Model) Update(msg tea.Msg) (Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		switch keys.Lookup(msg.String()) {
		case keys.Up:
			m.Move(-1)
		case keys.Down:
			m.Move(1)
		case keys.PageUp:
			m.Move(-m.rows())
		case keys.PageDown:
			m.Move(m.rows())
		case keys.Top:
			m.cursor = 0
			m.clamp()
		case keys.Bottom:
			m.cursor = len(m.visible) - 1
			m.clamp()
		}
	case tea.MouseWheelMsg:
		switch msg.Button {
		case tea.MouseWheelUp:
			m.Move(-3)
		case tea.MouseWheelDown:
			m.Move(3)
		}
	}
	return m, nil
}

// columns: mark(2) idx(5) name(flex) space(1) status(13) mismatch(8) maxulp(12)
const fixedCols = 2 + 5 + 1 + 13 + 8 + 12

// View draws the header and the visible rows, exactly w×h.
func (m Model) View() string {
	if m.w <= 0 || m.h <= 0 {
		return ""
	}
	var b strings.Builder
	nameW := max(m.w-fixedCols, 8)
	wide := m.w >= fixedCols+16
	head := fmt.Sprintf("  %4s %-*s %-13s", "#", nameW, "op", "status")
	if wide {
		head += fmt.Sprintf("%8s%12s", "differ", "max ULP")
	}
	b.WriteString(m.st.Faint.Render(theme.Fit(head, m.w)))
	if len(m.visible) == 0 {
		b.WriteString("\n" + m.st.Muted.Render(theme.Fit(fmt.Sprintf("  no op matches %q", m.filter), m.w)))
	}
	for r := 0; r < m.rows(); r++ {
		c := m.offset + r
		if c >= len(m.visible) {
			break
		}
		b.WriteString("\n")
		b.WriteString(m.row(m.visible[c], c == m.cursor, nameW, wide))
	}
	return strings.Join(theme.FitLines(b.String(), m.w, m.h), "\n")
}

func (m Model) row(i int, selected bool, nameW int, wide bool) string {
	o := &m.ops[i]
	mark := "  "
	if selected {
		mark = "▌ "
	}
	name := o.Op
	if o.Role != "" && o.Role != "out" {
		name += " [" + o.Role + "]"
	}
	if len(name) > nameW {
		name = "…" + name[len(name)-nameW+1:]
	}
	status, pct, ulp := "✓ identical", "", ""
	stStyle := m.st.Faint
	switch o.Status {
	case state.Divergent:
		status = "✗ divergent"
		if i == m.first {
			status = "✗ first"
		}
		pct = fmtPct(o.MismatchFrac())
		ulp = FormatULP(o.MaxULP)
		stStyle = m.st.Bad
	case state.MissingA, state.MissingB:
		status = "∅ " + o.Status.String()
		stStyle = m.st.Warn
	}
	nameStyle := m.st.Text
	if o.Status == state.Identical {
		nameStyle = m.st.Muted
	}
	if selected {
		bg := m.st.Selected
		line := fmt.Sprintf("%s%4d %-*s %-13s", mark, o.Index, nameW, name, status)
		if wide {
			line += fmt.Sprintf("%8s%12s", pct, ulp)
		}
		return m.st.SelectedMark.Render(mark) + bg.Render(theme.Fit(line[len(mark):], m.w-2))
	}
	s := mark + m.st.Faint.Render(fmt.Sprintf("%4d ", o.Index)) + nameStyle.Render(fmt.Sprintf("%-*s", nameW, name)) +
		" " + stStyle.Render(fmt.Sprintf("%-13s", status))
	if wide {
		s += stStyle.Render(fmt.Sprintf("%8s", pct)) + heatULP(m.st, o.MaxULP).Render(fmt.Sprintf("%12s", ulp))
	}
	return theme.Fit(s, m.w)
}

func fmtPct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.0001:
		return "<0.01%"
	}
	return fmt.Sprintf("%.2f%%", 100*f)
}

// FormatULP writes a ULP count compactly: 12, 3.4k, 1.2M.
func FormatULP(u uint64) string {
	switch {
	case u < 10000:
		return fmt.Sprintf("%d ulp", u)
	case u < 10_000_000:
		return fmt.Sprintf("%.1fk ulp", float64(u)/1e3)
	}
	return fmt.Sprintf("%.1fM ulp", float64(u)/1e6)
}

func heatULP(st theme.Styles, u uint64) lipgloss.Style {
	return st.Heat[theme.Level(fp.Bucket(u))]
}
