package ui

import (
	"errors"
	"fmt"
	"time"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/heatmap"
	"bitalign/ui/replay"
)

type (
	progressMsg view.Progress
	loadedMsg   struct {
		src view.Source
		err error
	}
	pairMsg struct {
		key  view.Key
		data *heatmap.Data
		err  error
	}
	replayMsg struct {
		key view.Key
		res *view.Replay
		err error
	}
	auditMsg struct {
		res *view.Audit
		err error
	}
	// completeMsg: a view.Completer's complete report replaced its verdict (or err says why not)
	completeMsg struct{ err error }
	// pendingTickMsg: time to read the background's progress again while the report is the verdict's
	pendingTickMsg struct{}
	exportMsg      struct {
		path  string
		bytes int64
		err   error
	}
	seqFirstMsg struct {
		seq int64
		key view.Key
		pos int64
		ok  bool
		err error
	}
)

// cacheSize is how many prepared pairs are kept: enough to step back and forth around a divergence.
const cacheSize = 8

// ensurePair starts loading the pair the tensor view needs, unless it is shown, cached or on its way.
func (m *Model) ensurePair() tea.Cmd {
	k := m.curKey()
	if m.src == nil || k.Op == "" || m.screen != tensorScreen {
		return nil
	}
	if k == m.want && (m.data != nil || m.pairLoading || m.pairErr != nil) {
		return nil
	}
	m.want, m.pairErr = k, nil
	if d, ok := m.cache[k]; ok {
		m.show(d)
		return nil
	}
	m.pairLoading = true
	src, ctx := m.src, m.ctx
	load := func() tea.Msg {
		p, err := src.Pair(ctx, k)
		if err != nil {
			return pairMsg{key: k, err: err}
		}
		d, err := heatmap.Prepare(p)
		return pairMsg{key: k, data: d, err: err}
	}
	// small slices load at once, so stepping through ops never flashes a "loading" frame; big ones load in
	// the background while the keys keep working
	if o := m.selected(); o != nil && o.Elements <= syncElements*int64(max(len(o.Seqs), 1)) {
		return m.pairLoaded(load().(pairMsg))
	}
	return m.track(load)
}

// syncElements is the largest slice (elements) loaded inside Update.
const syncElements = 1 << 18

func (m *Model) pairLoaded(msg pairMsg) tea.Cmd {
	if _, seen := m.cache[msg.key]; msg.err == nil && !seen {
		m.cache[msg.key] = msg.data
		m.cacheOrder = append(m.cacheOrder, msg.key)
		if len(m.cacheOrder) > cacheSize {
			delete(m.cache, m.cacheOrder[0])
			m.cacheOrder = m.cacheOrder[1:]
		}
	}
	if msg.key != m.want {
		return m.ensurePair() // stale: the user moved on
	}
	m.pairLoading = false
	if msg.err != nil {
		m.pairErr = msg.err
		m.data = nil
		m.setStatus(statusErr, msg.err.Error())
		return nil
	}
	m.show(msg.data)
	return nil
}

func (m *Model) show(d *heatmap.Data) {
	m.data = d
	m.pairLoading = false
	if t := m.target; t != nil && d.Pair.Key.Step == t.Step && d.Pair.Key.Seq == t.Seq {
		m.keepRow, m.keepCol = int(t.Pos-d.Pair.Pos0), int(t.Feature)
		m.target = nil
	}
	m.heat.SetData(d, m.keepRow, m.keepCol)
	m.keepRow, m.keepCol = -1, -1
}

// startReplay re-executes the selected op in the background.
func (m *Model) startReplay() tea.Cmd {
	k := m.curKey()
	if m.src == nil || k.Op == "" {
		return nil
	}
	if s := m.replays[k]; s != nil && s.Running {
		m.setStatus(statusInfo, "replay of "+k.Op+" is already running")
		return nil
	}
	backend := ""
	if b, ok := m.src.(interface{ ReplayBackend() string }); ok {
		backend = b.ReplayBackend()
	}
	m.replays[k] = &replay.Status{Running: true, Backend: backend, Since: time.Now()}
	on := ""
	if backend != "" {
		on = " on " + backend
	}
	m.setStatus(statusInfo, fmt.Sprintf("replaying %s%s…", k.Op, on))
	src, ctx := m.src, m.ctx
	return m.track(func() tea.Msg {
		res, err := src.Replay(ctx, k)
		return replayMsg{key: k, res: res, err: err}
	})
}

func (m *Model) replayDone(msg replayMsg) {
	s := m.replays[msg.key]
	if s == nil {
		s = &replay.Status{}
		m.replays[msg.key] = s
	}
	s.Running, s.Result, s.Err = false, msg.res, msg.err
	switch {
	case errors.Is(msg.err, view.ErrNoReplay):
		m.setStatus(statusErr, "replay: "+msg.err.Error())
	case msg.err != nil:
		m.setStatus(statusErr, "replay "+msg.key.Op+": "+msg.err.Error())
	default:
		m.setStatus(statusOK, fmt.Sprintf("replay (%s): %s", msg.res.Backend, msg.res.Verdict))
	}
}

func (m *Model) startExport(path, format string, overwrite bool) tea.Cmd {
	src := m.src
	m.setStatus(statusInfo, "exporting "+path+"…")
	return m.track(func() tea.Msg {
		n, err := writeAtomic(path, overwrite, func(w *countingWriter) error { return src.WriteReport(w, format) })
		return exportMsg{path: path, bytes: n, err: err}
	})
}

func (m *Model) exportDone(msg exportMsg) {
	if msg.err != nil {
		m.setStatus(statusErr, msg.err.Error())
		return
	}
	m.setStatus(statusOK, fmt.Sprintf("✓ report written to %s (%s)", msg.path, byteCount(msg.bytes)))
}

// track counts a background command in flight, so that Run can wait for it before closing the captures
// it may be reading.
func (m *Model) track(f func() tea.Msg) tea.Cmd {
	m.inflight.Add(1)
	return func() tea.Msg {
		defer m.inflight.Done()
		return f()
	}
}

// Wait waits up to d for background commands to finish and reports whether they did.
func (m *Model) Wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		m.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// awaitComplete waits in the background for the complete report of a source that showed its verdict first
// (view.Completer); nil when the report is complete already.
func (m *Model) awaitComplete() tea.Cmd {
	c, ok := m.src.(view.Completer)
	if !ok || m.rep.Pending == "" {
		return nil
	}
	ctx := m.ctx
	return tea.Batch(m.track(func() tea.Msg { return completeMsg{err: c.Wait(ctx)} }), pendingTick())
}

// pendingTick asks for the background's progress in a quarter of a second.
func pendingTick() tea.Cmd {
	return tea.Tick(250*time.Millisecond, func(time.Time) tea.Msg { return pendingTickMsg{} })
}

// pendingTicked reads the background's progress for the status line, and asks again while it runs.
func (m *Model) pendingTicked() tea.Cmd {
	c, ok := m.src.(view.Completer)
	if !ok || m.rep == nil || m.rep.Pending == "" || m.ctx.Err() != nil {
		return nil
	}
	m.bgProg = c.Progress()
	return pendingTick()
}

// completed shows the complete report in place of the verdict: the op list's statistics, the sparkline, the
// routing grid and the logprob section, keeping the selected op and the op list's filter.
func (m *Model) completed(msg completeMsg) tea.Cmd {
	if msg.err != nil {
		if m.ctx.Err() == nil {
			m.setStatus(statusErr, "the complete report failed: "+msg.err.Error())
		}
		return nil
	}
	m.rep = m.src.Report()
	filter := m.list.Filter()
	m.list.SetOps(m.rep.Ops)
	m.list.SetFilter(filter)
	if m.sel >= 0 && m.sel < len(m.rep.Ops) {
		m.list.Select(m.sel)
	}
	if m.audit != nil {
		m.list.SetAudit(m.audit)
	}
	m.route.SetData(m.rep.Routing)
	if m.rep.RL != nil {
		m.seqs.SetRL(m.rep.RL)
	}
	if m.status == "" || m.statusKind == statusInfo {
		m.setStatus(statusInfo, "complete: every op's statistics are in")
	}
	m.resize()
	return nil
}

// startAudit runs the audit in the background once the captures are loaded, when the source can (a
// checkpoint was given): the op list then shows each side's local error and s/S go to the suspects.
func (m *Model) startAudit() tea.Cmd {
	a, ok := m.src.(view.Auditor)
	if !ok || m.audit != nil || m.auditing {
		return nil
	}
	m.auditing = true
	ctx := m.ctx
	return m.track(func() tea.Msg {
		res, err := a.Audit(ctx, nil)
		return auditMsg{res: res, err: err}
	})
}

func (m *Model) auditDone(msg auditMsg) {
	m.auditing = false
	if errors.Is(msg.err, view.ErrNoReplay) {
		return // no checkpoint: nothing to say, the op list stays as it is
	}
	if msg.err != nil {
		if m.ctx.Err() == nil {
			m.setStatus(statusErr, "audit: "+msg.err.Error())
		}
		return
	}
	m.audit = msg.res
	m.list.SetAudit(msg.res)
	kind := statusOK
	if len(msg.res.Suspects) > 0 {
		kind = statusErr
	}
	m.setStatus(kind, "audit: "+msg.res.Headline+suspectHint(msg.res))
}

func suspectHint(a *view.Audit) string {
	if len(a.Suspects) == 0 {
		return ""
	}
	return " (s goes to it)"
}

// gotoSuspect goes to the next (d = 1) or previous (d = -1) suspect, in rank order, with the tensor view's
// cursor on the element where its error is largest.
func (m *Model) gotoSuspect(d int) tea.Cmd {
	switch {
	case m.audit == nil && m.auditing:
		m.setStatus(statusInfo, "the audit is still running")
		return nil
	case m.audit == nil:
		m.setStatus(statusInfo, "no audit: open with --checkpoint DIR to audit every op against the oracle")
		return nil
	case len(m.audit.Suspects) == 0:
		m.setStatus(statusOK, "audit: no suspects")
		return nil
	}
	n := len(m.audit.Suspects)
	m.suspect = ((m.suspect+d)%n + n) % n
	if m.suspect < 0 {
		m.suspect = 0
	}
	s := m.audit.Suspects[m.suspect]
	i := m.rep.FindOp(s.Op, "out")
	if i < 0 {
		m.setStatus(statusErr, "suspect "+s.Op+" is not in the report")
		return nil
	}
	if !m.list.Select(i) {
		m.list.SetFilter("") // the suspect is filtered out: show everything
		m.list.Select(i)
	}
	at := s.At
	m.sel, m.seq, m.target, m.data = i, view.SeqKey{Step: at.Step, Seq: at.Seq}, &at, nil
	m.keepRow, m.keepCol = -1, -1
	m.setStatus(statusErr, fmt.Sprintf("suspect %d/%d: %s", m.suspect+1, n, s.Evidence))
	return m.ensurePair()
}
