// Package oplist is the list of ops in execution order with their diff status, a cursor and a name filter.
package oplist

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"bitalign/internal/fp"
	"bitalign/session/view"
	"bitalign/ui/keys"
	"bitalign/ui/theme"
)

// Model is the op list. Indexes given to and returned by its methods are indexes into the report's Ops.
type Model struct {
	st      theme.Styles
	ops     []view.OpStat
	first   int   // index of the first divergent op, -1
	visible []int // ops passing the filter
	filter  string
	cursor  int // into visible
	offset  int // first visible row shown
	w, h    int
	audit   *view.Audit // nil until the audit has run: then the bar column shows each side's local error
}

// SetAudit shows the audit's local errors (ULPs at the row's scale, A / B) in place of the bar column, with
// suspects marked.
func (m *Model) SetAudit(a *view.Audit) { m.audit = a }

// New returns an empty list.
func New(st theme.Styles) Model { return Model{st: st, first: -1} }

// SetOps sets the report's ops (kept, not copied) and resets the filter.
func (m *Model) SetOps(ops []view.OpStat) {
	m.ops = ops
	m.first = -1
	for i := range ops {
		if ops[i].Status == view.Divergent {
			m.first = i
			break
		}
	}
	m.SetFilter("")
}

// SetSize sets the list's size in cells: one header row and h-1 op rows.
func (m *Model) SetSize(w, h int) {
	if w == m.w && h == m.h {
		return
	}
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
	so := m.rows() / 4 // keep a few ops of context around the cursor, as vim's scrolloff
	if m.cursor-so < m.offset {
		m.offset = m.cursor - so
	}
	if m.cursor+so >= m.offset+m.rows() {
		m.offset = m.cursor + so - m.rows() + 1
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

// SelectRow selects the op drawn at row y (a mouse click) without scrolling, so the op stays under the
// pointer; it returns the op's index or -1.
func (m *Model) SelectRow(y int) int {
	i := m.RowAt(y)
	if i >= 0 {
		m.cursor = m.offset + y - 1
	}
	return i
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

// columns: mark(2) idx(5: the op's execution index in the capture) name(flex) space(1) status(13) mismatch(8)
// max diff(12: ULPs, or for an integer op the number of values that differ); on wide lists also the type
// (typeW) and a bar of the fraction of elements that differ.
const (
	fixedCols = 2 + 5 + 1 + 13 + 8 + 12
	maxNameW  = 44
	typeW     = 16
)

type cols struct {
	name, typ, bar int
	local          int // the audit's local errors, A / B (once it has run), in place of the bar
	numbers        bool
}

// localW is the width of the local-error column: "   0.48  / 9.1!   ".
const localW = 19

func (m Model) columns() cols {
	c := cols{name: max(m.w-fixedCols, 8), numbers: m.w >= fixedCols+16}
	if m.audit != nil && c.numbers && m.w-fixedCols-localW-2 >= 20 {
		c.local = localW
		c.name = min(maxNameW, m.w-fixedCols-localW-2)
		if extra := m.w - fixedCols - c.name - localW - 2; extra >= typeW {
			c.typ = typeW
		}
		return c
	}
	if extra := m.w - fixedCols - maxNameW; extra >= typeW+8 {
		c.name = maxNameW
		c.typ = typeW
		c.bar = min(extra-typeW-2, 30)
	}
	return c
}

// View draws the header and the visible rows, exactly w×h.
func (m Model) View() string {
	if m.w <= 0 || m.h <= 0 {
		return ""
	}
	var b strings.Builder
	c := m.columns()
	head := fmt.Sprintf("  %4s %-*s ", "#", c.name, "op")
	if c.typ > 0 {
		head += fmt.Sprintf("%-*s", c.typ, "type")
	}
	head += fmt.Sprintf("%-13s", "status")
	if c.numbers {
		head += fmt.Sprintf("%8s%12s", "differ", "max diff")
	}
	if c.local > 0 {
		head += "  " + theme.Fit("local A / B (ulp)", c.local)
	} else if c.bar > 0 {
		head += "  " + "elements differing"
	}
	b.WriteString(m.st.Faint.Render(theme.Fit(head, m.w)))
	if len(m.visible) == 0 {
		b.WriteString("\n" + m.st.Muted.Render(theme.Fit(fmt.Sprintf("  no op matches %q", m.filter), m.w)))
	}
	for r := 0; r < m.rows(); r++ {
		i := m.offset + r
		if i >= len(m.visible) {
			break
		}
		b.WriteString("\n")
		b.WriteString(m.row(m.visible[i], i == m.cursor, c))
	}
	return strings.Join(theme.FitLines(b.String(), m.w, m.h), "\n")
}

// warnStatus is the status column of the ops that could not be compared.
var warnStatus = map[view.Status]string{view.MissingA: "∅ missing A", view.MissingB: "∅ missing B",
	view.Incomplete: "~ incomplete", view.ShapeMismatch: "≠ shapes"}

func (m Model) row(i int, selected bool, c cols) string {
	o := &m.ops[i]
	mark := "  "
	if selected {
		mark = "▌ "
	}
	name := o.Op
	if o.Role != "" && o.Role != "out" {
		name += " [" + o.Role + "]"
	}
	if len(name) > c.name {
		name = "…" + name[len(name)-c.name+1:]
	}
	status, pct, ulp := "✓ identical", "", ""
	stStyle := m.st.Faint
	switch o.Status {
	case view.Divergent:
		status = "✗ divergent"
		if i == m.first {
			status = "✗ first"
		}
		pct = fmtPct(o.MismatchFrac())
		ulp = Measure(o)
		if o.Pending { // the verdict first: the statistics come with the complete report
			pct, ulp = "…", "…"
		}
		stStyle = m.st.Bad
	case view.MissingA, view.MissingB, view.Incomplete, view.ShapeMismatch:
		status, stStyle = warnStatus[o.Status], m.st.Warn
	}
	typ := ""
	if c.typ > 0 {
		shape := make([]string, len(o.Shape))
		for k, d := range o.Shape {
			shape[k] = fmt.Sprint(d)
		}
		typ = theme.Fit(o.DType+" ["+strings.Join(shape, ",")+"]", c.typ-1) + " "
	}
	bar, barEmpty := "", ""
	local, suspect := "", false
	if c.local > 0 {
		if l, ok := m.audit.Local[o.Op]; ok && (o.Role == "" || o.Role == "out") {
			sa, sb := m.audit.SuspectOf(o.Op, 0), m.audit.SuspectOf(o.Op, 1)
			suspect = sa > 0 || sb > 0
			local = theme.Fit(fmt.Sprintf("%8s / %-8s", view.FormatULPs(l[0])+mark1(sa), view.FormatULPs(l[1])+mark1(sb)), c.local)
		}
	} else if c.bar > 0 {
		n := int(o.MismatchFrac()*float64(c.bar) + 0.5)
		if o.Mismatched > 0 && n == 0 {
			n = 1
		}
		bar, barEmpty = strings.Repeat("■", n), strings.Repeat("·", c.bar-n)
	}
	nameStyle := m.st.Text
	if o.Status == view.Identical {
		nameStyle = m.st.Muted
	}
	if selected {
		line := fmt.Sprintf("%4d %-*s %s%-13s", o.Index, c.name, name, typ, status)
		if c.numbers {
			line += fmt.Sprintf("%8s%12s", pct, ulp)
		}
		if c.bar > 0 || c.local > 0 {
			line += "  " + bar + barEmpty + local
		}
		return m.st.SelectedMark.Render(mark) + m.st.Selected.Render(theme.Fit(line, m.w-2))
	}
	s := mark + m.st.Faint.Render(fmt.Sprintf("%4d ", o.Index)) + nameStyle.Render(fmt.Sprintf("%-*s", c.name, name)) +
		" " + m.st.Faint.Render(typ) + stStyle.Render(fmt.Sprintf("%-13s", status))
	if c.numbers {
		s += stStyle.Render(fmt.Sprintf("%8s", pct)) + heat(m.st, o).Render(fmt.Sprintf("%12s", ulp))
	}
	switch {
	case local != "" && suspect:
		s += "  " + m.st.Bad.Render(local)
	case local != "":
		s += "  " + m.st.Faint.Render(local)
	case c.bar > 0:
		s += "  " + heat(m.st, o).Render(bar) + m.st.Faint.Render(barEmpty)
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

// heat is the colour of o's largest difference (theme.ValueLevel).
func heat(st theme.Styles, o *view.OpStat) lipgloss.Style {
	return st.Heat[theme.ValueLevel(fp.Bucket(o.MaxULP), Integer(o.DType))]
}

// Integer reports whether dtype holds integers (tokens, sampled ids, expert ids, masks): their differences are
// counted (values that differ), never measured in ULPs.
func Integer(dtype string) bool {
	f, err := fp.Parse(dtype)
	return err == nil && f.IsInt()
}

// Measure is o's largest difference as the op list and the tensor view write it: "30.5k ulp", or for an
// integer op the number of values that differ, "3 values".
func Measure(o *view.OpStat) string {
	if Integer(o.DType) {
		return Values(o.Mismatched)
	}
	return FormatULP(o.MaxULP)
}

// Values writes a count of integer values in at most 11 cells: 1 value, 12 values, 3.4k values, 56k values.
func Values(n int64) string {
	switch {
	case n == 1:
		return "1 value"
	case n < 1000:
		return fmt.Sprintf("%d values", n)
	case n < 10_000:
		return fmt.Sprintf("%.1fk values", float64(n)/1e3)
	case n < 1_000_000:
		return fmt.Sprintf("%dk values", n/1000)
	case n < 10_000_000:
		return fmt.Sprintf("%.1fM values", float64(n)/1e6)
	}
	return fmt.Sprintf("%dM values", n/1_000_000)
}

// Differ says how many integer values differ: "1 value differs", "3 values differ".
func Differ(n int64) string {
	if n == 1 {
		return Values(n) + " differs"
	}
	return Values(n) + " differ"
}

// Describe is one line about o for the status line: its execution index and name, its status and, when it
// differs, how much ("#41 layers.2.mlp_norm · divergent · 18.99% differ · max 2 ulp").
func Describe(o *view.OpStat) string {
	s := fmt.Sprintf("#%d %s", o.Index, o.Op)
	if o.Role != "" && o.Role != "out" {
		s += " [" + o.Role + "]"
	}
	s += " · " + o.Status.String()
	if o.Pending && o.Status == view.Divergent {
		s += " · statistics still being computed"
	}
	if o.Mismatched > 0 {
		if Integer(o.DType) {
			s += fmt.Sprintf(" · %d of %d values differ (%s)", o.Mismatched, o.Elements, fmtPct(o.MismatchFrac()))
		} else {
			s += fmt.Sprintf(" · %s differ · max %s", fmtPct(o.MismatchFrac()), FormatULP(o.MaxULP))
		}
	}
	return s
}

// mark1 marks a suspect's side: "!" for a suspect, "" otherwise.
func mark1(rank int) string {
	if rank > 0 {
		return "!"
	}
	return ""
}
