package ui

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	tea "charm.land/bubbletea/v2"

	"bitalign/session/view"
	"bitalign/ui/internal/fake"
)

// pendingSource is the fake session as a view.Completer: its report is a verdict (every op but the first
// divergent one Pending, without statistics) until release is closed and Wait has returned.
type pendingSource struct {
	*fake.Source
	early   view.Report
	release chan struct{}
	err     error
	done    atomic.Bool
}

func newPendingSource(err error) *pendingSource {
	src := fake.New(fake.Default())
	full := src.Report()
	early := *full
	early.Pending = "every op's statistics"
	early.Ops = append([]view.OpStat(nil), full.Ops...)
	first := full.FirstDivergent()
	for i := range early.Ops {
		if o := &early.Ops[i]; i != first {
			*o = view.OpStat{Op: o.Op, Index: o.Index, Role: o.Role, Layer: o.Layer, DType: o.DType, Shape: o.Shape,
				Status: o.Status, Elements: o.Elements, Cause: o.Cause, Seqs: o.Seqs, Pending: true}
		}
	}
	return &pendingSource{Source: src, early: early, release: make(chan struct{}), err: err}
}

func (s *pendingSource) Report() *view.Report {
	if s.done.Load() {
		return s.Source.Report()
	}
	return &s.early
}

func (s *pendingSource) Wait(ctx context.Context) error {
	select {
	case <-s.release:
		if s.err == nil {
			s.done.Store(true)
		}
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *pendingSource) Progress() view.Progress {
	return view.Progress{Stage: "diffing", Done: 1, Total: 4}
}

// loadPending loads src into a model up to the loaded message and returns the commands it started.
func loadPending(t *testing.T, src view.Source) (*Model, tea.Cmd) {
	t.Helper()
	m := New(context.Background(), fakeLoader(src, nil), "demo")
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	cmd := m.Init()
	for {
		switch msg := cmd().(type) {
		case loadedMsg:
			_, next := m.Update(msg)
			return m, next
		default:
			_, cmd = m.Update(msg)
		}
	}
}

// TestCompleterVerdictFirst: a Completer's verdict is shown at once (pending statistics as …, what still runs
// in the status line, ⟳ with the background's progress once a tick has read it), and its complete report
// replaces it when Wait returns, keeping the selection and the op list's filter.
func TestCompleterVerdictFirst(t *testing.T) {
	src := newPendingSource(nil)
	m, next := loadPending(t, src)
	first := selectedOp(m)
	if m.rep.Pending == "" || first != src.Source.Report().Ops[src.Source.Report().FirstDivergent()].Op {
		t.Fatalf("verdict: pending %q, selected %q", m.rep.Pending, first)
	}
	m.Update(pendingTickMsg{})
	before := text(m)
	for _, s := range []string{"still computing: every op's statistics", "…", "⟳ 25%"} {
		if !strings.Contains(before, s) {
			t.Errorf("the verdict's screen lacks %q:\n%s", s, before)
		}
	}
	m.list.SetFilter("layers.3")
	close(src.release)
	var complete *completeMsg
	for _, msg := range drive(m, next) {
		if c, ok := msg.(completeMsg); ok {
			complete = &c
		}
	}
	if complete == nil {
		t.Fatal("no completeMsg")
	}
	m.Update(*complete)
	after := text(m)
	if m.rep.Pending != "" || m.list.Filter() != "layers.3" || strings.Contains(after, "⟳") ||
		!strings.Contains(after, "complete: every op's statistics are in") || strings.Contains(after, "still computing") {
		t.Errorf("complete: pending %q, filter %q:\n%s", m.rep.Pending, m.list.Filter(), after)
	}
	if strings.Contains(after, " … ") {
		t.Errorf("pending marks left on the complete screen:\n%s", after)
	}
	if m.pendingTicked() != nil {
		t.Error("the progress tick goes on after completion")
	}
}

// TestCompleterFails: a background that fails leaves the verdict and says why in the status line.
func TestCompleterFails(t *testing.T) {
	src := newPendingSource(errors.New("session: boom"))
	m, next := loadPending(t, src)
	close(src.release)
	for _, msg := range drive(m, next) {
		if c, ok := msg.(completeMsg); ok {
			m.Update(c)
		}
	}
	if got := text(m); !strings.Contains(got, "the complete report failed: session: boom") || m.rep.Pending == "" {
		t.Errorf("failed background:\n%s", got)
	}
}
