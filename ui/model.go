// Package ui is bitalign's interactive terminal debugger (Bubble Tea v2). The root Model routes messages to
// one component per sub-package (oplist, heatmap, bits, overview, replay, help) and reads the session only
// through the view.Source interface, so the whole UI is tested against a fake source.
package ui

import (
	"context"
	"sync"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"bitalign/session/view"
	"bitalign/ui/heatmap"
	"bitalign/ui/oplist"
	"bitalign/ui/replay"
	"bitalign/ui/routing"
	"bitalign/ui/sequences"
	"bitalign/ui/theme"
)

type screen int

const (
	overviewScreen screen = iota
	tensorScreen
	routingScreen // MoE pairs: layers × tokens (routes.go)
	sequencesScreen
)

type promptKind int

const (
	noPrompt promptKind = iota
	filterPrompt
	exportPrompt
	confirmPrompt
)

type statusKind int

const (
	statusInfo statusKind = iota
	statusOK
	statusErr
)

// Model is the root model.
type Model struct {
	ctx   context.Context
	st    theme.Styles
	load  view.Loader
	title string

	w, h int

	loading bool
	prog    view.Progress
	loadErr error
	loadCh  chan tea.Msg

	src view.Source
	rep *view.Report

	screen   screen
	showHelp bool
	helpOff  int // help screen scroll
	list     oplist.Model
	heat     heatmap.Model
	seqs     sequences.Model
	sel      int         // selected op (index into rep.Ops), -1 before loading
	seq      view.SeqKey // the (step, seq) slice shown

	want         view.Key // the pair the tensor view wants
	data         *heatmap.Data
	pairErr      error
	pairLoading  bool
	cache        map[view.Key]*heatmap.Data
	cacheOrder   []view.Key
	keepRow      int // token (data row) to keep when the next pair arrives; -1: go to the worst element
	keepCol      int
	target       *view.Coord // the element to put the cursor on when the next pair arrives (a suspect's)
	audit        *view.Audit // the audit's result, once it has run (nil before, or without a checkpoint)
	auditing     bool
	bgProg       view.Progress // the complete report's progress while the report is the verdict's (view.Completer)
	suspect      int           // the suspect s/S last went to (index into audit.Suspects), -1 before
	replays      map[view.Key]*replay.Status
	route        routing.Model // the routing view's grid
	routes       routeState    // and its token's detail
	fromRouting  bool          // the tensor view was opened from the routing view: esc goes back there
	prompt       promptKind
	input        textinput.Model
	exportPath   string
	exportFormat string
	status       string
	statusKind   statusKind
	inflight     sync.WaitGroup // background commands (pairs, replays, exports) still running
}

// New returns the root model; Init starts load in the background. title names what is being opened.
func New(ctx context.Context, load view.Loader, title string) *Model {
	st := theme.Default()
	m := &Model{ctx: ctx, st: st, load: load, title: title, w: 80, h: 24, loading: true, sel: -1,
		list: oplist.New(st), heat: heatmap.New(st), route: routing.New(st), seqs: sequences.New(st),
		cache:   map[view.Key]*heatmap.Data{},
		replays: map[view.Key]*replay.Status{}, keepRow: -1, keepCol: -1, suspect: -1}
	m.input = textinput.New()
	m.input.Prompt = ""
	is := textinput.DefaultDarkStyles()
	is.Cursor.Blink = false // a steady cursor: no timer messages while typing
	is.Focused.Text = st.Text
	m.input.SetStyles(is)
	m.resize()
	return m
}

// Init starts loading.
func (m *Model) Init() tea.Cmd {
	m.loadCh = make(chan tea.Msg, 64)
	ch, ctx, load := m.loadCh, m.ctx, m.load
	go func() {
		src, err := load(ctx, func(p view.Progress) {
			select {
			case ch <- progressMsg(p):
			default: // drop: the UI only needs the latest
			}
		})
		ch <- loadedMsg{src: src, err: err}
	}()
	return waitLoad(ch)
}

func waitLoad(ch chan tea.Msg) tea.Cmd { return func() tea.Msg { return <-ch } }

// setStyles switches styles, e.g. when the terminal turns out to have no colour.
func (m *Model) setStyles(st theme.Styles) {
	m.st = st
	m.list = oplist.New(st)
	if m.rep != nil {
		m.list.SetOps(m.rep.Ops)
		if m.sel >= 0 {
			m.list.Select(m.sel)
		}
	}
	m.heat.SetStyles(st)
	m.route.SetStyles(st)
	m.seqs.SetStyles(st)
	m.resize()
}

// colourProfile adapts to the terminal: shade glyphs instead of colour when it has none.
func (m *Model) colourProfile(p colorprofile.Profile) {
	noColour := p == colorprofile.Ascii || p == colorprofile.NoTTY
	if noColour == !m.st.Color {
		return
	}
	st := m.st
	st.Color = !noColour
	m.setStyles(st)
}

// Update routes a message to its owner, then re-lays out (panel sizes depend on what is shown).
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	cmd := m.update(msg)
	m.resize()
	if c := m.heat.Regrid(); c != nil { // a big tensor re-bins for the new size in the background
		cmd = tea.Batch(cmd, c)
	}
	return m, cmd
}

func (m *Model) update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		m.resize()
		return nil
	case tea.ColorProfileMsg:
		m.colourProfile(msg.Profile)
		return nil
	case heatmap.GridMsg:
		m.heat.ApplyGrid(msg)
		return nil
	case progressMsg:
		m.prog = view.Progress(msg)
		return waitLoad(m.loadCh)
	case loadedMsg:
		return m.loaded(msg)
	case pairMsg:
		return m.pairLoaded(msg)
	case replayMsg:
		m.replayDone(msg)
		return nil
	case auditMsg:
		m.auditDone(msg)
		return nil
	case completeMsg:
		return m.completed(msg)
	case pendingTickMsg:
		return m.pendingTicked()
	case routeMsg:
		return m.routeLoaded(msg)
	case exportMsg:
		m.exportDone(msg)
		return nil
	case seqFirstMsg:
		return m.seqFirstDone(msg)
	case tea.KeyPressMsg:
		return m.handleKey(msg)
	case tea.MouseClickMsg:
		return m.click(msg.Mouse())
	case tea.MouseWheelMsg:
		m.wheel(msg)
		return nil
	}
	if m.prompt != noPrompt {
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return cmd
	}
	return nil
}

func (m *Model) setStatus(k statusKind, s string) { m.status, m.statusKind = s, k }

func (m *Model) loaded(msg loadedMsg) tea.Cmd {
	m.loading = false
	if msg.err != nil {
		m.loadErr = msg.err
		m.setStatus(statusErr, msg.err.Error())
		return nil
	}
	m.src = msg.src
	m.rep = msg.src.Report()
	m.list.SetOps(m.rep.Ops)
	m.route.SetData(m.rep.Routing)
	if m.rep.RL != nil {
		m.seqs.SetRL(m.rep.RL)
		if len(m.rep.Ops) == 0 { // a logprob table on a side: the sequences are all there is
			m.screen = sequencesScreen
			m.setStatus(statusInfo, "loaded: "+m.rep.RL.Verdict)
			m.resize()
			return nil
		}
	}
	m.sel = m.list.Selected()
	if first := m.rep.FirstDivergent(); first >= 0 {
		m.list.Select(first)
		m.sel = first
		if m.rep.RL != nil {
			m.setStatus(statusInfo, "loaded: first divergence selected (enter opens it; t: the sequences, worst first)")
		} else {
			m.setStatus(statusInfo, "loaded: first divergence selected (enter opens it)")
		}
	} else if m.rep.Identical {
		m.setStatus(statusOK, "loaded: the captures are bitwise identical")
	} else {
		m.setStatus(statusInfo, "loaded")
	}
	if m.sel >= 0 {
		m.seq = seqOf(&m.rep.Ops[m.sel], view.SeqKey{Step: -1})
	}
	if m.rep.Pending != "" {
		m.status += " · still computing: " + m.rep.Pending
	}
	m.resize()
	return tea.Batch(m.ensurePair(), m.startAudit(), m.awaitComplete())
}

// seqOf picks the slice to show for op o: keep (when o has it), else o's worst slice.
func seqOf(o *view.OpStat, keep view.SeqKey) view.SeqKey {
	for _, s := range o.Seqs {
		if s == keep {
			return s
		}
	}
	k := o.Key()
	return view.SeqKey{Step: k.Step, Seq: k.Seq}
}

// selected is the selected op, nil when none.
func (m *Model) selected() *view.OpStat {
	if m.rep == nil || m.sel < 0 || m.sel >= len(m.rep.Ops) {
		return nil
	}
	return &m.rep.Ops[m.sel]
}

// curKey is the selected op's current slice.
func (m *Model) curKey() view.Key {
	o := m.selected()
	if o == nil {
		return view.Key{}
	}
	return view.Key{Op: o.Op, Role: o.Role, Step: m.seq.Step, Seq: m.seq.Seq}
}
