package session

import (
	"context"
	"sync"
	"sync/atomic"

	"bitalign/session/view"
)

// Progressive is a session whose report comes in two parts (LoadVerdict): first the verdict (DiffVerdict's
// report: the first divergence and its cause, every op's status), then Load's complete report, computed in
// the background. Close stops the background and closes the captures.
type Progressive struct {
	early  *Loaded // the verdict's session; its captures are the complete session's too
	cancel context.CancelFunc
	done   chan struct{} // closed once full or err is set
	full   *Loaded       // Load's session of the same captures, once complete
	// fullView is full's report converted for the TUI (Source), made in the background
	fullView *view.Report
	err      error // why the complete report could not be made (the context's error after Close)
	prog     atomic.Pointer[view.Progress]
	closed   sync.Once
}

// LoadVerdict is Load with the verdict first: every input check Load makes and DiffVerdict happen before it
// returns (a bad input is its error, as Load's), and Load's diff and logprob section continue in the
// background (Wait, Complete). A logprob-table pair is loaded whole. progress hears the foreground's stages.
func LoadVerdict(ctx context.Context, in Inputs, progress func(view.Progress)) (*Progressive, error) {
	if progress == nil {
		progress = func(view.Progress) {}
	}
	m, err := loadModel(in, progress)
	if err != nil {
		return nil, err
	}
	l, a, b, opts, err := openPair(ctx, in, m, progress)
	if err != nil {
		return nil, err
	}
	p := &Progressive{done: make(chan struct{})}
	if a == nil { // logprob tables: complete already
		p.early, p.full = l, l
		p.cancel = func() {}
		close(p.done)
		return p, nil
	}
	r, err := DiffVerdict(ctx, a, b, opts...)
	if err != nil {
		a.Close()
		b.Close()
		return nil, err
	}
	l.Session = NewSession(a, b, r)
	p.early = l
	if !r.Pending() && r.RL == nil && !hasLogprobs(l.Session) {
		p.full = l // nothing was left for later (every op compared in full, no logprob section)
		p.cancel = func() {}
		close(p.done)
		return p, nil
	}
	bctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	full := &Loaded{Model: l.Model, Profile: l.Profile, Backend: l.Backend, BackendName: l.BackendName}
	bg := append(opts[:len(opts):len(opts)], WithProgress(func(done, total int64) {
		p.prog.Store(&view.Progress{Stage: "diffing", Done: done, Total: total})
	}))
	go func() {
		defer close(p.done)
		fr, err := Diff(bctx, a, b, bg...)
		if err == nil {
			full.Session = NewSession(a, b, fr)
			err = full.addRL(bctx, in.RL, func(pr view.Progress) { p.prog.Store(&pr) })
		}
		if err != nil {
			p.err = err
			return
		}
		v := convertReport(full.Session)
		p.full, p.fullView = full, &v
	}()
	return p, nil
}

// hasLogprobs reports whether both sides capture per-token log-probabilities (the logprob section).
func hasLogprobs(s *Session) bool {
	return len(s.ia.byOp[opKey{opLogprobs, "out"}]) > 0 && len(s.ib.byOp[opKey{opLogprobs, "out"}]) > 0
}

// Verdict is the session with the verdict's report (Report.Pending while the rest runs).
func (p *Progressive) Verdict() *Loaded { return p.early }

// Wait waits until the complete report is there and returns its session, or the error that stopped it
// (ctx's error when ctx ends first).
func (p *Progressive) Wait(ctx context.Context) (*Loaded, error) {
	select {
	case <-p.done:
		return p.full, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Complete returns the complete session without waiting, nil while it is still being made or when it failed.
func (p *Progressive) Complete() *Loaded {
	select {
	case <-p.done:
		return p.full
	default:
		return nil
	}
}

// Progress is the background's latest progress (zero before it reports).
func (p *Progressive) Progress() view.Progress {
	if pr := p.prog.Load(); pr != nil {
		return *pr
	}
	return view.Progress{}
}

// Close stops the background, waits for it and closes the captures.
func (p *Progressive) Close() error {
	var err error
	p.closed.Do(func() {
		p.cancel()
		<-p.done
		err = p.early.Close()
	})
	return err
}
