package ui

import (
	"fmt"
	"os"
	"strings"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/keys"
	"bitalign/ui/oplist"
)

// handleKey: ctrl+c always quits; an open prompt takes every other key; then global actions, then the
// focused screen's navigation.
func (m *Model) handleKey(msg tea.KeyPressMsg) tea.Cmd {
	k := msg.String()
	if k == "ctrl+c" {
		return tea.Quit
	}
	if m.prompt != noPrompt {
		return m.promptKey(msg)
	}
	a := keys.Lookup(k)
	if m.showHelp {
		switch a {
		case keys.Quit:
			return tea.Quit
		case keys.Help, keys.Back:
			m.showHelp = false
		case keys.Down:
			m.helpOff++
		case keys.Up:
			m.helpOff = max(m.helpOff-1, 0)
		case keys.PageDown:
			m.helpOff += 10
		case keys.PageUp:
			m.helpOff = max(m.helpOff-10, 0)
		case keys.Top:
			m.helpOff = 0
		}
		return nil
	}
	switch a {
	case keys.Quit:
		return tea.Quit
	case keys.Help:
		m.showHelp, m.helpOff = true, 0
		return nil
	}
	if m.rep == nil {
		if a != keys.None {
			if m.loadErr != nil {
				m.setStatus(statusErr, m.loadErr.Error())
			} else {
				m.setStatus(statusInfo, "still loading…")
			}
		}
		return nil
	}
	if m.screen == routingScreen {
		if cmd, ok := m.routingKey(a, msg); ok {
			return cmd
		}
	}
	if m.screen == sequencesScreen {
		switch a {
		case keys.Sequences, keys.Back, keys.Focus:
			if len(m.rep.Ops) == 0 {
				m.setStatus(statusInfo, "a logprob table has no ops: the sequences are all there is")
				return nil
			}
			return m.setScreen(overviewScreen)
		case keys.Open:
			return m.openSeqFirst()
		case keys.Export:
		default:
			m.seqs, _ = m.seqs.Update(msg)
			return nil
		}
	}
	switch a {
	case keys.Routing:
		return m.openRouting()
	case keys.Sequences:
		if m.rep.RL == nil {
			m.setStatus(statusInfo, "no sequences view: the sides do not both hold per-token logprobs")
			return nil
		}
		return m.setScreen(sequencesScreen)
	case keys.Filter:
		m.screen = overviewScreen
		m.prompt = filterPrompt
		m.input.SetValue(m.list.Filter())
		m.input.CursorEnd()
		return m.input.Focus()
	case keys.Export:
		m.prompt = exportPrompt
		m.input.SetValue(defaultExportPath())
		m.input.CursorEnd()
		return m.input.Focus()
	case keys.Replay:
		return m.startReplay()
	case keys.Focus, keys.Open:
		switch {
		case m.screen == overviewScreen && m.list.Selected() < 0: // the filter hides every op: nothing to open
			m.setStatus(statusInfo, fmt.Sprintf("no op matches %q: esc clears the filter", m.list.Filter()))
		case a == keys.Focus && m.screen == tensorScreen:
			return m.setScreen(overviewScreen)
		case a == keys.Focus:
			return m.setScreen(tensorScreen)
		case m.screen == overviewScreen:
			return m.setScreen(tensorScreen)
		}
		return nil
	case keys.Back:
		switch {
		case m.screen == tensorScreen && m.fromRouting:
			m.fromRouting = false
			return m.setScreen(routingScreen)
		case m.screen == tensorScreen:
			return m.setScreen(overviewScreen)
		case m.list.Filter() != "":
			m.list.SetFilter("")
			m.setStatus(statusInfo, "filter cleared")
		}
		return nil
	case keys.First:
		i := m.rep.FirstDivergent()
		if i < 0 {
			m.setStatus(statusOK, "no divergent op: the captures agree")
			return nil
		}
		return m.jump(i, false)
	case keys.NextDiv, keys.PrevDiv:
		d := 1
		if a == keys.PrevDiv {
			d = -1
		}
		for i := m.sel + d; i >= 0 && i < len(m.rep.Ops); i += d {
			if m.rep.Ops[i].Status == view.Divergent {
				return m.jump(i, false)
			}
		}
		m.setStatus(statusInfo, map[int]string{1: "no divergent op after this one", -1: "no divergent op before this one"}[d])
		return nil
	case keys.NextSuspect:
		return m.gotoSuspect(1)
	case keys.PrevSuspect:
		return m.gotoSuspect(-1)
	case keys.Top:
		return m.jump(0, true)
	case keys.Bottom:
		return m.jump(len(m.rep.Ops)-1, true)
	case keys.StepNext, keys.StepPrev:
		d := 1
		if a == keys.StepPrev {
			d = -1
		}
		if i := m.sel + d; i >= 0 && i < len(m.rep.Ops) {
			return m.jump(i, true)
		}
		return nil
	case keys.LayerNext, keys.LayerPrev:
		d := 1
		if a == keys.LayerPrev {
			d = -1
		}
		if i := m.layerStep(d); i >= 0 {
			return m.jump(i, true)
		}
		m.setStatus(statusInfo, "no further layer")
		return nil
	}
	if m.screen == tensorScreen {
		switch a {
		case keys.MaxCell:
			// first the slice's largest ULP; pressed there again, the op's, in whichever slice holds it
			if m.data != nil {
				if r, c, ok := m.heat.Cursor(); !ok || r*m.data.Pair.Cols+c != m.data.MaxAt {
					m.heat.MoveToElement(m.data.MaxAt)
					return nil
				}
			}
			if o := m.selected(); o != nil && o.MaxAt != nil && (o.MaxAt.Step != m.seq.Step || o.MaxAt.Seq != m.seq.Seq) {
				return m.jump(m.sel, false)
			}
			return nil
		case keys.NextSeq, keys.PrevSeq:
			return m.stepSeq(map[keys.Action]int{keys.NextSeq: 1, keys.PrevSeq: -1}[a])
		}
		m.heat, _ = m.heat.Update(msg)
		return nil
	}
	m.list, _ = m.list.Update(msg)
	return m.syncSelection()
}

// syncSelection follows the list's cursor, and the status line with it.
func (m *Model) syncSelection() tea.Cmd {
	if i := m.list.Selected(); i >= 0 && i != m.sel {
		m.sel = i
		m.seq = seqOf(&m.rep.Ops[i], m.seq)
		m.setStatus(statusInfo, oplist.Describe(&m.rep.Ops[i]))
	}
	return nil
}

// jump selects op i; keepToken keeps the heatmap cursor on the same token (debugger stepping), otherwise the
// cursor goes to the op's worst element.
func (m *Model) jump(i int, keepToken bool) tea.Cmd {
	if i < 0 || i >= len(m.rep.Ops) {
		return nil
	}
	if !m.list.Select(i) {
		m.list.SetFilter("") // the target is filtered out: show everything
		m.list.Select(i)
	}
	m.keepRow, m.keepCol = -1, -1
	if keepToken {
		if r, c, ok := m.heat.Cursor(); ok {
			m.keepRow, m.keepCol = r, c
		}
		m.seq = seqOf(&m.rep.Ops[i], m.seq)
	} else {
		m.seq = seqOf(&m.rep.Ops[i], view.SeqKey{Step: -1})
	}
	m.sel = i
	o := &m.rep.Ops[i]
	m.setStatus(statusInfo, oplist.Describe(o))
	m.data = nil
	return m.ensurePair()
}

// layerStep finds the same op (by name suffix and role) in the next or previous layer. Past the last (or
// before the first) layer it goes to the first op outside the stack; from outside the stack, to the nearest op
// inside it.
func (m *Model) layerStep(d int) int {
	o := m.selected()
	if o == nil {
		return -1
	}
	ops := m.rep.Ops
	if o.Layer < 0 {
		for i := m.sel + d; i >= 0 && i < len(ops); i += d {
			if ops[i].Layer >= 0 {
				return i
			}
		}
		return -1
	}
	suffix := strings.TrimPrefix(o.Op, fmt.Sprintf("layers.%d.", o.Layer))
	outside := -1
	for i := m.sel + d; i >= 0 && i < len(ops); i += d {
		c := &ops[i]
		if c.Layer < 0 {
			if outside < 0 {
				outside = i
			}
			continue
		}
		if c.Layer != o.Layer && c.Role == o.Role && strings.TrimPrefix(c.Op, fmt.Sprintf("layers.%d.", c.Layer)) == suffix {
			return i
		}
	}
	return outside
}

func (m *Model) stepSeq(d int) tea.Cmd {
	o := m.selected()
	if o == nil || len(o.Seqs) < 2 {
		m.setStatus(statusInfo, "this op has one captured sequence")
		return nil
	}
	at := 0
	for i, s := range o.Seqs {
		if s == m.seq {
			at = i
		}
	}
	at = (at + d + len(o.Seqs)) % len(o.Seqs)
	m.seq = o.Seqs[at]
	m.setStatus(statusInfo, fmt.Sprintf("step %d seq %d (%d of %d slices of %s)", m.seq.Step, m.seq.Seq, at+1, len(o.Seqs), o.Op))
	if r, c, ok := m.heat.Cursor(); ok {
		m.keepRow, m.keepCol = r, c
	}
	m.data = nil
	return m.ensurePair()
}

func (m *Model) setScreen(s screen) tea.Cmd {
	if s == overviewScreen {
		m.fromRouting = false
	}
	m.screen = s
	m.resize()
	return tea.Batch(m.ensurePair(), m.ensureRoute())
}

func defaultExportPath() string {
	for i := 0; ; i++ {
		p := "bitalign-report.md"
		if i > 0 {
			p = fmt.Sprintf("bitalign-report-%d.md", i)
		}
		if _, err := os.Stat(p); os.IsNotExist(err) {
			return p
		}
	}
}

// promptKey edits the filter or the export path, or answers the overwrite question.
func (m *Model) promptKey(msg tea.KeyPressMsg) tea.Cmd {
	k := msg.String()
	switch m.prompt {
	case confirmPrompt:
		m.prompt = noPrompt
		if k == "y" || k == "Y" {
			return m.startExport(m.exportPath, m.exportFormat, true)
		}
		m.setStatus(statusInfo, "export cancelled: "+m.exportPath+" left as it was")
		return nil
	case filterPrompt:
		switch k {
		case "esc":
			m.prompt = noPrompt
			m.input.Blur()
			m.list.SetFilter("")
			m.syncSelection()
			m.setStatus(statusInfo, "filter cleared")
			return nil
		case "enter":
			m.prompt = noPrompt
			m.input.Blur()
			m.setStatus(statusInfo, fmt.Sprintf("filter %q: %d ops", m.list.Filter(), m.list.Visible()))
			return m.syncSelection()
		}
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		m.list.SetFilter(m.input.Value())
		m.syncSelection()
		return cmd
	case exportPrompt:
		switch k {
		case "esc":
			m.prompt = noPrompt
			m.input.Blur()
			m.setStatus(statusInfo, "export cancelled")
			return nil
		case "enter":
			m.prompt = noPrompt
			m.input.Blur()
			path := strings.TrimSpace(m.input.Value())
			format, err := view.FormatOf(path)
			if err != nil {
				m.setStatus(statusErr, "export: "+err.Error())
				return nil
			}
			m.exportPath, m.exportFormat = path, format
			if _, err := os.Stat(path); err == nil {
				m.prompt = confirmPrompt
				m.setStatus(statusInfo, "")
				return nil
			}
			return m.startExport(path, format, false)
		}
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return cmd
	}
	return nil
}

// click selects what is under the pointer.
func (m *Model) click(p tea.Mouse) tea.Cmd {
	if m.rep == nil || m.showHelp || m.prompt != noPrompt || p.Button != tea.MouseLeft {
		return nil
	}
	l := m.layout()
	switch m.screen {
	case overviewScreen:
		if l.list.contains(p.X, p.Y) {
			i := m.list.RowAt(p.Y - l.list.y)
			if i < 0 {
				return nil
			}
			if i == m.sel {
				return m.setScreen(tensorScreen)
			}
			m.list.SelectRow(p.Y - l.list.y)
			return m.syncSelection()
		}
		if l.spark.contains(p.X, p.Y) && p.Y == l.spark.y {
			if c := p.X - l.spark.x; c < len(l.sparkOps) {
				return m.jump(l.sparkOps[c], false)
			}
		}
	case sequencesScreen:
		if l.list.contains(p.X, p.Y) {
			m.seqs.SelectRow(p.Y - l.list.y)
		}
	case tensorScreen:
		if l.heat.contains(p.X, p.Y) {
			if cr, cc, ok := m.heat.CellAt(p.X-l.heat.x, p.Y-l.heat.y); ok {
				m.heat.SetCursorCell(cr, cc)
			}
		}
	}
	return nil
}

func (m *Model) wheel(msg tea.MouseWheelMsg) {
	if m.rep == nil || m.showHelp {
		return
	}
	if m.screen == tensorScreen {
		m.heat, _ = m.heat.Update(msg)
		return
	}
	if m.screen == sequencesScreen {
		return
	}
	m.list, _ = m.list.Update(msg)
	m.syncSelection()
}

// openSeqFirst asks the core for the selected sequence's first divergent op (in the background).
func (m *Model) openSeqFirst() tea.Cmd {
	q := m.seqs.Selected()
	if q == nil {
		return nil
	}
	sf, ok := m.src.(view.SeqFirst)
	if !ok || !m.rep.RL.Captures {
		m.setStatus(statusInfo, fmt.Sprintf("seq %d: a logprob table has no ops; record it in full (bitalign diff --sequences prints the line)", q.Seq))
		return nil
	}
	if !q.Differs {
		m.setStatus(statusOK, fmt.Sprintf("seq %d: its logprobs agree bit for bit", q.Seq))
	}
	src, ctx, step, seq := sf, m.ctx, m.rep.RL.Step, q.Seq
	m.setStatus(statusInfo, fmt.Sprintf("seq %d: finding its first divergent op…", seq))
	m.inflight.Add(1)
	return func() tea.Msg {
		defer m.inflight.Done()
		k, pos, ok, err := src.FirstDivergenceOf(ctx, step, seq)
		return seqFirstMsg{seq: seq, key: k, pos: pos, ok: ok, err: err}
	}
}

// seqFirstDone opens the tensor view of a sequence's first divergent op, the cursor on its position.
func (m *Model) seqFirstDone(msg seqFirstMsg) tea.Cmd {
	switch {
	case msg.err != nil:
		m.setStatus(statusErr, msg.err.Error())
		return nil
	case !msg.ok:
		m.setStatus(statusOK, fmt.Sprintf("seq %d: no captured op differs for this sequence", msg.seq))
		return nil
	}
	i := m.rep.FindOp(msg.key.Op, msg.key.Role)
	if i < 0 {
		m.setStatus(statusErr, "op "+msg.key.Op+" is not in the report")
		return nil
	}
	if !m.list.Select(i) {
		m.list.SetFilter("")
		m.list.Select(i)
	}
	m.sel, m.seq, m.data = i, view.SeqKey{Step: msg.key.Step, Seq: msg.key.Seq}, nil
	m.target = &view.Coord{Step: msg.key.Step, Seq: msg.key.Seq, Pos: msg.pos}
	m.keepRow, m.keepCol = -1, -1
	m.setStatus(statusErr, fmt.Sprintf("seq %d: first divergent op %s at pos %d", msg.seq, msg.key.Op, msg.pos))
	return m.setScreen(tensorScreen)
}
