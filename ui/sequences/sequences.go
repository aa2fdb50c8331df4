// Package sequences is the sequences view: every compared sequence's logprob figures, worst first (the
// core's order), with a sparkline of |Δ| along its positions and a cursor. enter on a sequence asks the root
// model to go to its first divergent op.
package sequences

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/keys"
	"bitalign/ui/theme"
)

// Model is the sequences list.
type Model struct {
	st     theme.Styles
	rl     *view.RL
	cursor int
	offset int
	w, h   int
}

// New returns an empty view.
func New(st theme.Styles) Model { return Model{st: st} }

// SetRL sets the sequences (kept, not copied) and puts the cursor on the worst.
func (m *Model) SetRL(rl *view.RL) {
	m.rl, m.cursor, m.offset = rl, 0, 0
}

// SetStyles switches styles.
func (m *Model) SetStyles(st theme.Styles) { m.st = st }

// SetSize sets the size in cells: one header row and h−1 sequence rows.
func (m *Model) SetSize(w, h int) {
	m.w, m.h = w, h
	m.clamp()
}

func (m *Model) len() int {
	if m.rl == nil {
		return 0
	}
	return len(m.rl.Seqs)
}

func (m *Model) rows() int { return max(m.h-1, 1) }

func (m *Model) clamp() {
	m.cursor = max(0, min(m.cursor, m.len()-1))
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+m.rows() {
		m.offset = m.cursor - m.rows() + 1
	}
	m.offset = max(0, min(m.offset, m.len()-m.rows()))
}

// Selected is the sequence under the cursor, nil when there is none.
func (m Model) Selected() *view.RLSeq {
	if m.cursor < 0 || m.cursor >= m.len() {
		return nil
	}
	return &m.rl.Seqs[m.cursor]
}

// Update moves the cursor (up, down, page up/down, first, last).
func (m Model) Update(msg tea.Msg) (Model, tea.Cmd) {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return m, nil
	}
	switch keys.Lookup(k.String()) {
	case keys.Up:
		m.cursor--
	case keys.Down:
		m.cursor++
	case keys.PageUp:
		m.cursor -= m.rows()
	case keys.PageDown:
		m.cursor += m.rows()
	case keys.Top:
		m.cursor = 0
	case keys.Bottom:
		m.cursor = m.len() - 1
	}
	m.clamp()
	return m, nil
}

// SelectRow selects the sequence drawn at row y of the view (a mouse click); false when none is there.
func (m *Model) SelectRow(y int) bool {
	i := m.offset + y - 1
	if y < 1 || i >= m.len() {
		return false
	}
	m.cursor = i
	return true
}

// sparks are the sparkline's levels: |Δ| by decade from 1e-9 (▁) to ≥ 1 (█); a space is bitwise equal.
var sparks = []rune("▁▂▃▄▅▆▇█")

// decades[l] is 10^(l−9) as a float32: the lower bound of spark level l.
var decades = func() (d [8]float32) {
	for l := range d {
		d[l] = float32(math.Pow(10, float64(l-9)))
	}
	return d
}()

// Spark draws a profile of |Δ| in w cells: each cell the largest |Δ| of the buckets it covers, by decade
// (10^-9 or less ▁ … 1 or more █), a space where every position is equal, ! for a NaN or ±Inf.
func Spark(st theme.Styles, profile []float32, w int) string {
	if w <= 0 {
		return ""
	}
	var b strings.Builder
	n := len(profile)
	for x := range w {
		if n == 0 {
			b.WriteByte(' ')
			continue
		}
		lo, hi := x*n/w, max((x+1)*n/w, x*n/w+1)
		if w > n { // stretch: every cell shows its one bucket
			lo, hi = x*n/w, x*n/w+1
		}
		v, nan := float32(0), false
		for _, p := range profile[lo:min(hi, n)] {
			if p != p {
				nan = true
			}
			v = max(v, p)
		}
		switch {
		case nan:
			b.WriteString(st.Bad.Render("!"))
		case v == 0:
			b.WriteByte(' ')
		default:
			l := 0 // 1e-9 or less → 0 … 1e-2 or more → 7, against the float32 decades
			for l < len(sparks)-1 && v >= decades[l+1] {
				l++
			}
			b.WriteString(st.Heat[1+l*(theme.Levels-1)/(len(sparks)-1)].Render(string(sparks[l])))
		}
	}
	return b.String()
}

func sci(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func pct(n, d int64) string {
	if d == 0 || n == d {
		return "100%"
	}
	f := 100 * float64(n) / float64(d)
	if f > 99.9 {
		return ">99.9%"
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + "%"
}

// View draws the header and the visible rows.
func (m Model) View() string {
	if m.w <= 0 || m.h <= 0 {
		return ""
	}
	const fixed = 2 + 8 + 7 + 7 + 6 + 9 + 9 + 2 // mark, seq, tokens, equal, first, max|Δ|, k3, gaps
	spark := max(m.w-fixed, 0)
	note := 0
	if spark > 40 {
		note = min(spark/3, 28)
		spark -= note + 1
	}
	head := fmt.Sprintf("  %7s %6s %6s %5s %8s %8s  %s", "seq", "tokens", "equal", "first", "max |Δ|", "k3 KL",
		theme.Fit("|Δ| along positions", spark))
	if note > 0 {
		head += " " + "note"
	}
	var b strings.Builder
	b.WriteString(m.st.Faint.Render(theme.Fit(head, m.w)))
	if m.len() == 0 {
		b.WriteString("\n" + m.st.Muted.Render(theme.Fit("  no sequence was compared", m.w)))
	}
	for r := 0; r < m.rows() && m.offset+r < m.len(); r++ {
		i := m.offset + r
		q := &m.rl.Seqs[i]
		mark := "  "
		if i == m.cursor {
			mark = "▌ "
		}
		first := "-"
		if q.FirstDiff >= 0 {
			first = strconv.FormatInt(q.FirstDiff, 10)
		}
		style := m.st.Faint
		if q.Differs {
			style = m.st.Text
		}
		cells := fmt.Sprintf("%s%7d %6d %6s %5s %8s %8s  ", mark, q.Seq, q.Tokens, pct(q.Equal, q.Tokens), first, sci(q.MaxAbs), sci(q.K3))
		line := style.Render(cells) + Spark(m.st, q.Profile, spark)
		if note > 0 {
			line += " " + m.st.Warn.Render(theme.Fit(q.Note, note))
		}
		if i == m.cursor {
			line = m.st.SelectedMark.Render(mark) + m.st.Selected.Render(cells[len(mark):]) + Spark(m.st, q.Profile, spark)
			if note > 0 {
				line += " " + m.st.Warn.Render(theme.Fit(q.Note, note))
			}
		}
		b.WriteString("\n" + theme.Fit(line, m.w))
	}
	return strings.Join(theme.FitLines(b.String(), m.w, m.h), "\n")
}
