// Package routing draws the routing view of a mixture-of-experts capture pair: a grid of MoE layers × tokens
// with each token's routing marked (same experts, other weights, other order, another set: a flip), a cursor
// over it, and the detail of the token under the cursor: its experts, weights and best router logits on both
// sides. The core computes the grid (view.Routing) and each token's routing (view.Router); this package only
// draws and moves.
package routing

import (
	"fmt"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/keys"
	"bitalign/ui/theme"
)

// labelW is the width of a grid row's layer label ("L12 ").
const labelW = 5

// Model is the grid and its cursor.
type Model struct {
	st        theme.Styles
	r         *view.Routing
	w, h      int // the grid's area (inside its panel)
	row, col  int // cursor: index into r.Layers and r.Tokens
	top, left int // scroll: first layer row and first token column shown
}

// New returns an empty grid.
func New(st theme.Styles) Model { return Model{st: st} }

// SetStyles switches styles.
func (m *Model) SetStyles(st theme.Styles) { m.st = st }

// SetData shows r with the cursor on the first flip (the earliest token whose expert set differs in some
// layer), else on the first token of the first layer.
func (m *Model) SetData(r *view.Routing) {
	m.r, m.row, m.col, m.top, m.left = r, 0, 0, 0, 0
	if r == nil {
		return
	}
	best := -1
	for i, l := range r.Layers {
		if l.FirstFlip >= 0 && (best < 0 || l.FirstFlip < m.col) {
			best, m.col = i, l.FirstFlip
		}
	}
	if best >= 0 {
		m.row = best
	}
	m.scroll()
}

// SetSize sets the grid's area: a header row, the layer rows, the cursor's layer line.
func (m *Model) SetSize(w, h int) {
	if w != m.w || h != m.h { // a new size: scroll from the start again, as little as the cursor needs
		m.top, m.left = 0, 0
	}
	m.w, m.h = w, h
	m.scroll()
}

// Cursor is the layer (index into Layers) and token (index into Tokens) under the cursor; ok is false without
// data.
func (m Model) Cursor() (row, col int, ok bool) {
	if m.r == nil || len(m.r.Layers) == 0 || len(m.r.Tokens) == 0 {
		return 0, 0, false
	}
	return m.row, m.col, true
}

// Target is the cursor's layer and token.
func (m Model) Target() (layer view.RoutingLayer, at view.Coord, ok bool) {
	r, c, ok := m.Cursor()
	if !ok {
		return view.RoutingLayer{}, view.Coord{}, false
	}
	return m.r.Layers[r], m.r.Tokens[c], true
}

// Locate moves the cursor to layer's row and the token at, reporting whether both are in the grid.
func (m *Model) Locate(layer int, at view.Coord) bool {
	if m.r == nil {
		return false
	}
	row, col := -1, -1
	for i, l := range m.r.Layers {
		if l.Layer == layer {
			row = i
		}
	}
	for i, t := range m.r.Tokens {
		if t.Step == at.Step && t.Seq == at.Seq && t.Pos == at.Pos {
			col = i
		}
	}
	if row < 0 || col < 0 {
		return false
	}
	m.SetCursor(row, col)
	return true
}

// SetCursor moves the cursor (clamped).
func (m *Model) SetCursor(row, col int) {
	if m.r == nil {
		return
	}
	m.row = min(max(row, 0), max(len(m.r.Layers)-1, 0))
	m.col = min(max(col, 0), max(len(m.r.Tokens)-1, 0))
	m.scroll()
}

func (m Model) rows() int { return max(m.h-2, 1) }
func (m Model) cols() int { return max(m.w-labelW, 1) }

// scroll keeps the cursor in view, and the grid filled as far as it goes.
func (m *Model) scroll() {
	if m.r != nil {
		m.top = min(m.top, max(len(m.r.Layers)-m.rows(), 0))
		m.left = min(m.left, max(len(m.r.Tokens)-m.cols(), 0))
	}
	if m.row < m.top {
		m.top = m.row
	}
	if m.row >= m.top+m.rows() {
		m.top = m.row - m.rows() + 1
	}
	if m.col < m.left {
		m.left = m.col
	}
	if m.col >= m.left+m.cols() {
		m.left = m.col - m.cols() + 1
	}
}

// Update moves the cursor: ↑/↓ layers, ←/→ tokens (shifted: 8), g/G first and last layer, n/N the next and
// previous flip (in token order, then layers), f the first flip.
func (m Model) Update(msg tea.Msg) (Model, tea.Cmd) {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok || m.r == nil {
		return m, nil
	}
	switch keys.Lookup(k.String()) {
	case keys.Up:
		m.SetCursor(m.row-1, m.col)
	case keys.Down:
		m.SetCursor(m.row+1, m.col)
	case keys.Left:
		m.SetCursor(m.row, m.col-1)
	case keys.Right:
		m.SetCursor(m.row, m.col+1)
	case keys.FastUp:
		m.SetCursor(m.row-8, m.col)
	case keys.FastDown:
		m.SetCursor(m.row+8, m.col)
	case keys.FastLeft:
		m.SetCursor(m.row, m.col-8)
	case keys.FastRight:
		m.SetCursor(m.row, m.col+8)
	case keys.Top:
		m.SetCursor(0, m.col)
	case keys.Bottom:
		m.SetCursor(len(m.r.Layers)-1, m.col)
	case keys.First:
		m.SetData(m.r)
	case keys.NextDiv:
		m.NextFlip(1)
	case keys.PrevDiv:
		m.NextFlip(-1)
	}
	return m, nil
}

// NextFlip moves the cursor to the next (d = 1) or previous (d = −1) flip in reading order (the cursor's
// layer first, along the tokens, then the next layers); false when there is none.
func (m *Model) NextFlip(d int) bool {
	if m.r == nil {
		return false
	}
	nt := len(m.r.Tokens)
	for i := m.row*nt + m.col + d; i >= 0 && i < len(m.r.Layers)*nt; i += d {
		if m.r.Layers[i/nt].Marks[i%nt] == view.RouteSet {
			m.SetCursor(i/nt, i%nt)
			return true
		}
	}
	return false
}

// glyph is a mark's cell: what it shows and in which style.
func (m Model) glyph(k view.RouteMark) (string, func(...string) string) {
	switch k {
	case view.RouteSame:
		return "·", m.st.Faint.Render
	case view.RouteWeights:
		return "w", m.st.Info.Render
	case view.RouteOrder:
		return "o", m.st.Warn.Render
	case view.RouteSet:
		return "X", m.st.Bad.Bold(true).Render
	}
	return " ", m.st.Faint.Render
}

// View draws the grid in its w×h area: a header naming where each sequence starts, one row per layer, and the
// cursor layer's counts.
func (m Model) View() string {
	if m.r == nil || len(m.r.Layers) == 0 {
		return strings.Join(theme.FitLines(m.st.Muted.Render("no MoE layer in these captures"), m.w, m.h), "\n")
	}
	lastCol := min(m.left+m.cols(), len(m.r.Tokens))
	var head strings.Builder
	head.WriteString(m.st.Muted.Render(fmt.Sprintf("%-*s", labelW, "seq")))
	for c := m.left; c < lastCol; c++ {
		t := m.r.Tokens[c]
		switch {
		case c == m.col:
			head.WriteString(m.st.Accent.Render("▾"))
		case c == 0 || m.r.Tokens[c-1].Seq != t.Seq || m.r.Tokens[c-1].Step != t.Step:
			head.WriteString(m.st.Muted.Render(strconv.FormatInt(t.Seq%10, 10)))
		default:
			head.WriteString(" ")
		}
	}
	lines := []string{head.String()}
	for r := m.top; r < min(m.top+m.rows(), len(m.r.Layers)); r++ {
		l := m.r.Layers[r]
		label := fmt.Sprintf("L%-*d", labelW-1, l.Layer)
		var b strings.Builder
		if r == m.row {
			b.WriteString(m.st.Accent.Render(label))
		} else {
			b.WriteString(m.st.Muted.Render(label))
		}
		for c := m.left; c < lastCol; c++ {
			g, render := m.glyph(l.Marks[c])
			if r == m.row && c == m.col {
				b.WriteString(m.st.Selected.Render(g))
				continue
			}
			b.WriteString(render(g))
		}
		lines = append(lines, b.String())
	}
	for len(lines) < m.h-1 {
		lines = append(lines, "")
	}
	l := m.r.Layers[m.row]
	t := m.r.Tokens[m.col]
	info := fmt.Sprintf("L%d seq %d pos %d · %d tokens, %d flipped, %d order only, %d weights only", l.Layer, t.Seq, t.Pos,
		l.Tokens, l.Flipped, l.OrderOnly, l.WeightsOnly)
	if l.Detail != "" {
		info = fmt.Sprintf("L%d: %s", l.Layer, l.Detail)
	}
	lines = append(lines, m.st.Muted.Render(info))
	return strings.Join(theme.FitLines(strings.Join(lines, "\n"), m.w, m.h), "\n")
}

// Legend is the grid's key in one line.
func Legend(st theme.Styles) string {
	return st.Faint.Render("·") + st.Muted.Render(" same  ") + st.Info.Render("w") + st.Muted.Render(" weights  ") +
		st.Warn.Render("o") + st.Muted.Render(" order  ") + st.Bad.Bold(true).Render("X") + st.Muted.Render(" expert set (flip)")
}

// Detail draws one token's routing on both sides in w×h: the core's line, then per side its experts in order
// with their weights, and the router's best experts with their logits (● selected). sides names A and B.
func Detail(st theme.Styles, tr *view.TokenRoute, err error, loading bool, sides [2]string, w, h int) string {
	var lines []string
	switch {
	case err != nil:
		lines = append(lines, st.StatusErr.Render("cannot read the token's routing"), theme.Wrap(err.Error(), w))
	case loading || tr == nil:
		lines = append(lines, st.Muted.Render("reading the token's routing…"))
	default:
		style := st.Good
		switch tr.Mark {
		case view.RouteSet:
			style = st.Bad
		case view.RouteOrder, view.RouteWeights:
			style = st.Warn
		}
		lines = append(lines, strings.Split(theme.Wrap(tr.Text, w), "\n")...)
		lines[0] = style.Render(lines[0])
		cw := max((w-2)/2, 10)
		cols := [2][]string{side(st, "A "+sides[0], tr.A, cw), side(st, "B "+sides[1], tr.B, cw)}
		for i := 0; i < max(len(cols[0]), len(cols[1])); i++ {
			var a, b string
			if i < len(cols[0]) {
				a = cols[0][i]
			}
			if i < len(cols[1]) {
				b = cols[1][i]
			}
			lines = append(lines, theme.Fit(a, cw)+"  "+b)
		}
		if tr.Margin != "" {
			lines = append(lines, st.Muted.Render("router "+tr.Margin+" (k-th − (k+1)-th logit)"))
		}
	}
	return strings.Join(theme.FitLines(strings.Join(lines, "\n"), w, h), "\n")
}

// side is one side's column of the detail: experts and weights, then the router's best experts.
func side(st theme.Styles, title string, s view.RouteSide, w int) []string {
	out := []string{st.Title.Render(title)}
	ex := make([]string, len(s.Experts))
	for i, e := range s.Experts {
		ex[i] = strconv.Itoa(e)
	}
	out = append(out, st.Text.Render("experts ["+strings.Join(ex, ", ")+"]"))
	if s.Weights != nil {
		ws := make([]string, len(s.Weights))
		for i, x := range s.Weights {
			ws[i] = strconv.FormatFloat(x, 'g', 4, 64)
		}
		out = append(out, st.Muted.Render("weights ["+strings.Join(ws, ", ")+"]"))
	}
	if s.Top != nil {
		out = append(out, st.Muted.Render("router  expert  logit"))
		for i, e := range s.Top {
			mark, style := " ", st.Muted
			if e.Selected {
				mark, style = "●", st.Text
			}
			out = append(out, style.Render(theme.Fit(fmt.Sprintf("%s %-5d %-7d %s", mark, i+1, e.ID, e.Logit), w)))
		}
	}
	return out
}
