package ui

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"bitalign/internal/fp"
	"bitalign/session/view"
	"bitalign/ui/bits"
	"bitalign/ui/heatmap"
	"bitalign/ui/help"
	"bitalign/ui/keys"
	"bitalign/ui/oplist"
	"bitalign/ui/overview"
	"bitalign/ui/replay"
	"bitalign/ui/theme"
)

// MinWidth and MinHeight are the smallest supported terminal; smaller ones get a notice instead of a garbled
// screen.
const MinWidth, MinHeight = 80, 24

type rect struct{ x, y, w, h int }

func (r rect) contains(x, y int) bool { return x >= r.x && x < r.x+r.w && y >= r.y && y < r.y+r.h }

// screenLayout is where everything goes for the current size; View and mouse hit-testing share it.
type screenLayout struct {
	body rect
	// overview
	meta, verdict, listPanel, detail rect
	list, spark                      rect
	metaRows                         int
	sparkOps                         []int
	// tensor view
	heatPanel, heat, right, bitsPanel rect
	// routing view
	gridPanel, detailPanel rect
}

func panelInner(r rect) rect { return rect{r.x + 1, r.y + 1, max(r.w-2, 0), max(r.h-2, 0)} }

func (m *Model) bitsHeight() int {
	rows := 2
	if s := m.replays[m.curKey()]; s != nil && s.Result != nil {
		rows = 4
	}
	return 2 + 1 + 2*rows + 1
}

func (m *Model) layout() screenLayout {
	w, h := max(m.w, 1), max(m.h, 1)
	l := screenLayout{body: rect{0, 1, w, max(h-3, 0)}}
	b := l.body
	if m.screen == overviewScreen {
		rest := b.h - 5
		l.metaRows = overview.MetaRows(0)
		if rest-(overview.MetaRows(99)+2) >= 12 {
			l.metaRows = overview.MetaRows(99)
		}
		l.meta = rect{0, b.y, w, l.metaRows + 2}
		l.verdict = rect{0, l.meta.y + l.meta.h, w, 5}
		l.spark = rect{1, l.verdict.y + 2, w - 2, 2}
		y := l.verdict.y + l.verdict.h
		lw := w
		if w >= 120 {
			lw = w - 46
			l.detail = rect{lw, y, w - lw, max(b.y+b.h-y, 0)}
		}
		l.listPanel = rect{0, y, lw, max(b.y+b.h-y, 0)}
		l.list = panelInner(l.listPanel)
		if m.rep != nil {
			_, l.sparkOps = overview.Sparkline(m.st, m.rep.Ops, m.sel, l.spark.w)
		}
		return l
	}
	if m.screen == routingScreen {
		rows := 0
		if m.rep != nil && m.rep.Routing != nil {
			rows = len(m.rep.Routing.Layers)
		}
		gh := min(rows+4, max(b.h-1-12, 6)) // header row, layers, the layer line, borders; the detail keeps 12
		l.gridPanel = rect{0, b.y + 1, w, gh}
		l.detailPanel = rect{0, b.y + 1 + gh, w, max(b.h-1-gh, 0)}
		return l
	}
	if m.screen == sequencesScreen {
		l.verdict = rect{0, b.y, w, 3}
		l.listPanel = rect{0, b.y + 3, w, max(b.h-3, 0)}
		l.list = panelInner(l.listPanel)
		return l
	}
	bh := min(m.bitsHeight(), max(b.h/2, 4))
	mainH := b.h - 1 - bh
	rw := 0
	switch {
	case w >= 110:
		rw = 44
	case w >= 70:
		rw = 36
	}
	l.heatPanel = rect{0, b.y + 1, w - rw, mainH}
	in := panelInner(l.heatPanel)
	l.heat = rect{in.x, in.y, in.w, max(in.h-1, 0)} // the last inner row is the legend
	l.right = rect{w - rw, b.y + 1, rw, mainH}
	l.bitsPanel = rect{0, b.y + 1 + mainH, w, bh}
	return l
}

// resize lays the components out for the current size.
func (m *Model) resize() {
	l := m.layout()
	if m.screen == sequencesScreen {
		m.seqs.SetSize(l.list.w, l.list.h)
		return
	}
	m.list.SetSize(l.list.w, l.list.h)
	if m.screen == tensorScreen {
		m.heat.SetSize(l.heat.w, l.heat.h)
	}
	if m.screen == routingScreen {
		in := panelInner(l.gridPanel)
		m.route.SetSize(in.w, in.h)
	}
}

// View renders the screen.
func (m *Model) View() tea.View {
	v := tea.NewView(m.Render())
	v.AltScreen = true
	v.MouseMode = tea.MouseModeCellMotion
	v.WindowTitle = "bitalign · " + m.title
	return v
}

// Render is the screen's content, exactly w×h cells.
func (m *Model) Render() string {
	if m.w < MinWidth || m.h < MinHeight {
		return m.tooSmall()
	}
	l := m.layout()
	var body string
	switch {
	case m.showHelp:
		body = m.st.Panel("keys", help.View(m.st, l.body.w-2, l.body.h-2, m.helpOff), l.body.w, l.body.h, true)
	case m.rep == nil:
		body = m.loadingView(l.body)
	case m.screen == overviewScreen:
		body = m.overviewView(l)
	case m.screen == routingScreen:
		body = m.routingView(l)
	case m.screen == sequencesScreen:
		body = m.sequencesView(l)
	default:
		body = m.tensorView(l)
	}
	lines := []string{m.headerView()}
	lines = append(lines, theme.FitLines(body, m.w, l.body.h)...)
	ctx := keys.Overview
	switch {
	case m.rep == nil || m.showHelp:
		ctx = keys.Loading
	case m.screen == tensorScreen:
		ctx = keys.Tensor
	case m.screen == routingScreen:
		ctx = keys.Routes
	case m.screen == sequencesScreen:
		ctx = keys.Seqs
	}
	lines = append(lines, m.statusView(), theme.Fit(" "+help.Short(m.st, ctx, m.w-1), m.w))
	return strings.Join(lines, "\n")
}

// tooSmall is the whole screen when the terminal is smaller than the layout needs: what it needs and has,
// wrapped to the width and centred, instead of a garbled layout.
func (m *Model) tooSmall() string {
	msg := fmt.Sprintf("terminal too small: need at least %d×%d, have %d×%d", MinWidth, MinHeight, m.w, m.h)
	lines := strings.Split(wrapText(msg, m.w), "\n")
	lines = append(lines, "enlarge it, or q quits")
	var out []string
	for range max((m.h-len(lines))/2, 0) {
		out = append(out, "")
	}
	for i, l := range lines {
		style := m.st.Warn
		if i == len(lines)-1 {
			style = m.st.Muted
		}
		out = append(out, strings.Repeat(" ", max((m.w-theme.Width(l))/2, 0))+style.Render(l))
	}
	return strings.Join(theme.FitLines(strings.Join(out, "\n"), m.w, m.h), "\n")
}

func (m *Model) headerView() string {
	left := m.st.HeaderTitle.Render(" bitalign ")
	mid := " " + m.title
	if m.rep != nil {
		mid = fmt.Sprintf(" %s ⇄ %s", m.rep.A.Side, m.rep.B.Side)
	}
	right := ""
	switch {
	case m.showHelp:
		right = "help"
	case m.rep == nil:
		right = "loading"
	case m.screen == overviewScreen:
		right = fmt.Sprintf("overview · %d ops", len(m.rep.Ops))
	case m.screen == routingScreen:
		right = "routing view"
	case m.screen == sequencesScreen:
		right = fmt.Sprintf("sequences · %d", len(m.rep.RL.Seqs))
	default:
		right = "tensor view"
	}
	right += " "
	fill := m.w - theme.Width(left) - theme.Width(mid) - theme.Width(right)
	if fill < 1 {
		return theme.Fit(left+m.st.Header.Render(theme.Fit(mid, max(m.w-theme.Width(left), 0))), m.w)
	}
	return left + m.st.Header.Render(mid+strings.Repeat(" ", fill)+right)
}

func (m *Model) statusView() string {
	switch m.prompt {
	case filterPrompt:
		return theme.Fit(m.st.Key.Render(" / ")+m.input.View()+m.st.Muted.Render(fmt.Sprintf("   %d ops · enter keeps · esc clears", m.list.Visible())), m.w)
	case exportPrompt:
		return theme.Fit(m.st.Key.Render(" export to ")+m.input.View()+m.st.Muted.Render("   .md .json .html · enter writes · esc cancels"), m.w)
	case confirmPrompt:
		return theme.Fit(m.st.Warn.Render(fmt.Sprintf(" %s exists: overwrite? ", m.exportPath))+m.st.Key.Render("y")+m.st.Muted.Render("/N"), m.w)
	}
	s := m.st.StatusInfo
	switch m.statusKind {
	case statusOK:
		s = m.st.StatusOK
	case statusErr:
		s = m.st.StatusErr
	}
	right := ""
	running := 0
	for _, r := range m.replays {
		if r.Running {
			running++
		}
	}
	switch {
	case running == 1:
		right = m.st.Info.Render("⟳ replay running ")
	case running > 1:
		right = m.st.Info.Render(fmt.Sprintf("⟳ %d replays running ", running))
	}
	if right == "" && m.rep != nil && m.rep.Pending != "" {
		pct := ""
		if p := m.bgProg; p.Total > 0 && p.Stage == "diffing" {
			pct = fmt.Sprintf(" %d%%", min(100*p.Done/p.Total, 100))
		}
		right = m.st.Info.Render("⟳" + pct + " ")
	}
	if m.loading {
		right = m.st.Info.Render(m.progressText(24) + " ")
	}
	lw := m.w - theme.Width(right)
	return theme.Fit(s.Render(" "+m.status), lw) + right
}

func (m *Model) progressText(barW int) string {
	p := m.prog
	stage := p.Stage
	if stage == "" {
		stage = "starting"
	}
	if p.Total <= 0 {
		return stage + "…"
	}
	frac := min(float64(p.Done)/float64(p.Total), 1)
	n := int(frac * float64(barW))
	return fmt.Sprintf("%s %s%s %3.0f%%", stage, strings.Repeat("█", n), strings.Repeat("░", barW-n), 100*frac)
}

func (m *Model) loadingView(b rect) string {
	var lines []string
	if m.loadErr != nil {
		lines = append(lines, m.st.StatusErr.Render("could not open the session"), "")
		for _, l := range strings.Split(wrapText(m.loadErr.Error(), b.w-8), "\n") {
			lines = append(lines, m.st.Text.Render(l))
		}
		lines = append(lines, "", m.st.Muted.Render("press q to quit"))
	} else {
		lines = append(lines, m.st.Title.Render("opening "+m.title), "", m.st.Info.Render(m.progressText(min(40, b.w-30))), "",
			m.st.Muted.Render("keys work meanwhile: ? help · q quit"))
	}
	panel := m.st.Panel("bitalign", strings.Join(lines, "\n"), min(b.w, 90), min(b.h, len(lines)+2), true)
	pad := (b.w - min(b.w, 90)) / 2
	top := max((b.h-len(lines)-2)/3, 0)
	var out []string
	for i := 0; i < top; i++ {
		out = append(out, "")
	}
	for _, l := range strings.Split(panel, "\n") {
		out = append(out, strings.Repeat(" ", pad)+l)
	}
	return strings.Join(out, "\n")
}

func wrapText(s string, w int) string {
	if w < 10 {
		return s
	}
	var out []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			if line != "" && len([]rune(line))+1+len([]rune(word)) > w {
				out = append(out, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += word
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func (m *Model) overviewView(l screenLayout) string {
	r := m.rep
	meta := m.st.Panel("captures", overview.Meta(m.st, r, l.meta.w-2, l.metaRows), l.meta.w, l.meta.h, false)
	spark, _ := overview.Sparkline(m.st, r.Ops, m.sel, l.spark.w)
	verdict := m.st.Panel("verdict", overview.Verdict(m.st, r)+"\n"+spark, l.verdict.w, l.verdict.h, false)
	title := "ops"
	if f := m.list.Filter(); f != "" {
		title = fmt.Sprintf("ops · filter %q · %d of %d", f, m.list.Visible(), len(r.Ops))
	}
	list := m.st.Panel(title, m.list.View(), l.listPanel.w, l.listPanel.h, true)
	if l.detail.w > 0 {
		list = theme.JoinColumns(list, m.detailPanel(l.detail))
	}
	return meta + "\n" + verdict + "\n" + list
}

// detailPanel is the selected op's numbers and histogram, beside the op list on wide screens.
func (m *Model) detailPanel(r rect) string {
	o := m.selected()
	if o == nil {
		return m.st.Panel("op", "", r.w, r.h, false)
	}
	sum := m.summary(o, nil)
	integer := oplist.Integer(o.DType)
	hist := heatmap.Histogram(m.st, o.Hist, integer, r.w-2, max(r.h-2-len(sum)-2, 0))
	body := strings.Join(sum, "\n") + "\n\n" + m.st.Muted.Render(histLabel(integer, "all slices")) + "\n" + hist
	return m.st.Panel(o.Op, body, r.w, r.h, false)
}

// summary is an op's numbers (and the shown slice's, when d is given).
func (m *Model) summary(o *view.OpStat, d *heatmap.Data) []string {
	kv := func(k, v string) string { return m.st.Muted.Render(fmt.Sprintf("%-10s", k)) + m.st.Text.Render(v) }
	shape := make([]string, len(o.Shape))
	for i, s := range o.Shape {
		shape[i] = fmt.Sprint(s)
	}
	per := "[" + strings.Join(shape, ", ") + "]" // per token
	if len(shape) == 0 {
		per = "scalar"
	}
	lines := []string{
		kv("type", fmt.Sprintf("%s %s · %s", o.DType, per, o.Role)),
		kv("status", o.Status.String()),
		kv("elements", fmt.Sprintf("%d in %d slice%s", o.Elements, len(o.Seqs), plural(len(o.Seqs)))),
	}
	integer := oplist.Integer(o.DType)
	if o.Status == view.Divergent || o.Mismatched > 0 {
		at := ""
		if o.MaxAt != nil {
			at = fmt.Sprintf("seq %d pos %d f %d", o.MaxAt.Seq, o.MaxAt.Pos, o.MaxAt.Feature)
		}
		if integer { // tokens and ids differ or not: counted, never measured
			lines = append(lines, kv("differ", fmt.Sprintf("%d of %d values (%.2f%%)", o.Mismatched, o.Elements, 100*o.MismatchFrac())))
			if at != "" {
				lines = append(lines, kv("e.g. at", at))
			}
		} else {
			if at != "" {
				at = " @ " + at
			}
			lines = append(lines,
				kv("differ", fmt.Sprintf("%d (%.2f%%)", o.Mismatched, 100*o.MismatchFrac())),
				kv("max ULP", oplist.FormatULP(o.MaxULP)+at),
				kv("max abs", fmt.Sprintf("%.3g · mean %.3g", o.MaxAbs, o.MeanAbs)),
				kv("max rel", fmt.Sprintf("%.3g", o.MaxRel)))
		}
		if o.Cause != "" {
			cs := m.st.Warn
			if o.Cause == "local" {
				cs = m.st.Bad
			}
			lines = append(lines, m.st.Muted.Render(fmt.Sprintf("%-10s", "cause"))+cs.Render(o.Cause))
		}
	}
	if o.NaNA+o.NaNB+o.InfA+o.InfB > 0 {
		lines = append(lines, kv("NaN/Inf", fmt.Sprintf("A %d/%d · B %d/%d", o.NaNA, o.InfA, o.NaNB, o.InfB)))
	}
	switch {
	case d != nil && integer:
		lines = append(lines, kv("slice", fmt.Sprintf("%d of %d values differ", d.Diff, d.Pair.Rows*d.Pair.Cols)))
	case d != nil:
		lines = append(lines, kv("slice", fmt.Sprintf("%d differ · max %s", d.Diff, oplist.FormatULP(d.MaxULP))))
	}
	return lines
}

// histLabel titles a difference histogram of what ("slice", "all slices").
func histLabel(integer bool, what string) string {
	if integer {
		return "values (" + what + ")"
	}
	return "ULP histogram (" + what + ")"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (m *Model) tensorView(l screenLayout) string {
	o := m.selected()
	if o == nil {
		return m.st.Muted.Render("no op selected")
	}
	k := m.curKey()
	integer := oplist.Integer(o.DType) // tokens, ids: values that differ, never ULPs
	seqPos := ""
	for i, s := range o.Seqs {
		if s == m.seq {
			seqPos = fmt.Sprintf(" (%d/%d)", i+1, len(o.Seqs))
		}
	}
	stStyle := m.st.Faint
	switch {
	case o.Status == view.Divergent:
		stStyle = m.st.Bad
	case o.Status != view.Identical:
		stStyle = m.st.Warn
	}
	// the op's number is its execution index in the capture, as in the op list's # column
	title := m.st.Faint.Render(fmt.Sprintf(" #%d ", o.Index)) + m.st.Title.Render(o.Op) +
		m.st.Muted.Render(fmt.Sprintf(" · %s · step %d · seq %d%s · ", o.Role, k.Step, k.Seq, seqPos)) + stStyle.Render(o.Status.String())
	if o.Status == view.Divergent {
		if integer {
			title += stStyle.Render(fmt.Sprintf(" %.2f%% · %s", 100*o.MismatchFrac(), oplist.Differ(o.Mismatched)))
		} else {
			title += stStyle.Render(fmt.Sprintf(" %.2f%% · max %s", 100*o.MismatchFrac(), oplist.FormatULP(o.MaxULP)))
		}
	}

	// heatmap panel
	var heatBody string
	switch {
	case m.pairErr != nil:
		heatBody = m.st.StatusErr.Render("cannot show this tensor") + "\n\n" + m.st.Text.Render(wrapText(m.pairErr.Error(), l.heat.w-2))
	case m.data == nil:
		heatBody = m.st.Muted.Render("loading " + k.Op + "…")
	default:
		heatBody = m.heat.View() + "\n" + heatmap.Legend(m.st, m.data.Format.IsInt(), narrowedName(m.data.Pair))
	}
	heatTitle := "mismatch map · tokens × features"
	if g := m.heat.Grid(); g != nil && m.data != nil {
		_, _, r0, r1, c0, c1 := m.heat.CursorCell()
		heatTitle = fmt.Sprintf("tokens %d × features %d · cell %s×%s", g.Rows, g.Cols, span(r0, r1), span(c0, c1))
	}
	heat := m.st.Panel(heatTitle, heatBody, l.heatPanel.w, l.heatPanel.h, true)

	// right column: summary, replay, histogram
	main := heat
	if l.right.w > 0 {
		sum := m.summary(o, m.data)
		rs := m.replays[k]
		sumH := min(len(sum)+2, l.right.h)
		col := []string{m.st.Panel("summary", strings.Join(sum, "\n"), l.right.w, sumH, false)}
		left := l.right.h - sumH
		if rs != nil && left >= 4 {
			sides := [2]string{m.rep.A.Side, m.rep.B.Side}
			rh := min(replay.Height(m.st, *rs, sides, integer, l.right.w-2)+2, left)
			col = append(col, m.st.Panel("replay", replay.View(m.st, *rs, sides, integer, l.right.w-2, rh-2), l.right.w, rh, false))
			left -= rh
		}
		if left >= 3 {
			hist, label := o.Hist, histLabel(integer, "op")
			if m.data != nil {
				hist, label = m.data.Hist, histLabel(integer, "slice")
			}
			col = append(col, m.st.Panel(label, heatmap.Histogram(m.st, hist, integer, l.right.w-2, left-2), l.right.w, left, false))
		} else if left > 0 {
			col = append(col, strings.Join(theme.FitLines("", l.right.w, left), "\n"))
		}
		main = theme.JoinColumns(heat, strings.Join(col, "\n"))
	}
	return theme.Fit(title, m.w) + "\n" + main + "\n" + m.bitsView(l.bitsPanel)
}

func span(lo, hi int) string {
	if hi-lo <= 1 {
		return "1"
	}
	return fmt.Sprint(hi - lo)
}

// bitsView is the bit view of the element under the heatmap cursor.
func (m *Model) bitsView(r rect) string {
	if m.data == nil {
		return m.st.Panel("bits", m.st.Muted.Render("no element selected"), r.w, r.h, false)
	}
	row, col, ok := m.heat.Cursor()
	if !ok {
		return m.st.Panel("bits", "", r.w, r.h, false)
	}
	d := m.data
	p, f := d.Pair, d.Format
	i := row*p.Cols + col
	e := bits.Element{Format: f, Where: fmt.Sprintf("pos %d · feature %d", p.Pos0+int64(row), col)}
	if n := narrowedName(p); n != "" {
		if uf, err := fp.Parse(n); err == nil {
			e.ULPIn = &uf
		}
	}
	if _, _, r0, r1, c0, c1 := m.heat.CursorCell(); !m.heat.Pinned() && (r1-r0 > 1 || c1-c0 > 1) {
		e.Where += " · worst of its cell"
	}
	var missing []string
	if p.Has(0, row) {
		e.Rows = append(e.Rows, bits.Value{Label: "A " + m.rep.A.Side, Bits: f.Bits(p.A, i), Ref: -1})
	} else {
		missing = append(missing, "A")
	}
	if p.Has(1, row) {
		ref := 0
		if !p.Has(0, row) {
			ref = -1
		}
		e.Rows = append(e.Rows, bits.Value{Label: "B " + m.rep.B.Side, Bits: f.Bits(p.B, i), Ref: ref})
	} else {
		missing = append(missing, "B")
	}
	if rs := m.replays[m.curKey()]; rs != nil && rs.Result != nil && len(e.Rows) == 2 {
		for si, s := range []view.ReplaySide{rs.Result.FromA, rs.Result.FromB} {
			if b, ok := s.Bits(f.Size, p.Cols, row, col); ok {
				e.Rows = append(e.Rows, bits.Value{Label: "replay ← " + "AB"[si:si+1], Bits: f.Bits(b, 0), Ref: si})
			}
		}
	}
	body := bits.View(m.st, e, r.w-2)
	if len(missing) > 0 {
		body += "\n" + m.st.Warn.Render(fmt.Sprintf("side %s did not capture position %d", strings.Join(missing, ", "), p.Pos0+int64(row)))
	}
	return m.st.Panel("element bits", body, r.w, r.h, false)
}

// narrowedName is the dtype a pair's ULPs are counted in when it is not the pair's own (bf16 values widened to
// float32), else "".
func narrowedName(p *view.Pair) string {
	if p == nil || p.ULPDType == "" || p.ULPDType == p.DType {
		return ""
	}
	return p.ULPDType
}

// sequencesView is the sequences screen: the logprob verdict, then every sequence worst first.
func (m *Model) sequencesView(l screenLayout) string {
	rl := m.rep.RL
	line := rl.Headline
	if rl.Verdict != "" {
		line = rl.Verdict
	}
	style := m.st.Bad
	if !strings.Contains(line, "differ") {
		style = m.st.Good
	}
	verdict := m.st.Panel("logprobs", style.Render(line), l.verdict.w, l.verdict.h, false)
	title := fmt.Sprintf("sequences · %d · worst first", len(rl.Seqs))
	if rl.Captures {
		title += " · enter: first divergent op"
	}
	list := m.st.Panel(title, m.seqs.View(), l.listPanel.w, l.listPanel.h, true)
	return verdict + "\n" + list
}
