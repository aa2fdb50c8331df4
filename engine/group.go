package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"bitalign/capture"
	"bitalign/nvls"
)

// BackendFactory makes the backend of one TP rank. NewCPU is the default.
type BackendFactory func(rank int) (Backend, error)

// CollectivesFactory makes the communicators of a TP group of tp ranks and the function that frees them.
type CollectivesFactory func(tp int) ([]nvls.Comm, func() error, error)

// group is a TP group: one rank per goroutine, joined by nvls communicators.
type group struct {
	cfg        Config
	ranks      []*rank
	closeComms func() error // frees the communicators (GPU collectives); nil for the CPU group
	phases     *Phases
}

// groupOptions are what the trainer and the sampler share.
type groupOptions struct {
	tp          int
	v           variant
	backend     BackendFactory
	collectives CollectivesFactory
	maxPos      int
	captureDir  string
	meta        capture.Meta
	routing     *Routing
	ops         func(op string) bool // which ops the capture records; nil: all
	fps         func(op string) bool // which of them as fingerprints only; nil: none
	stopLayer   int                  // > 0: the forward runs this many layers only
	phases      *Phases              // nil: not timed
}

func newGroup(m *Model, o groupOptions) (*group, error) {
	cfg := m.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTP(cfg, o.tp); err != nil {
		return nil, err
	}
	var comms []nvls.Comm
	var closeComms func() error
	var err error
	if o.collectives != nil && o.tp > 1 {
		comms, closeComms, err = o.collectives(o.tp)
	} else {
		comms, err = nvls.NewCPUGroup(o.tp)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	var rings []nvls.Comm
	if o.tp > 1 && (o.v.ring || o.v.ringLayer >= 0) {
		if rings, err = nvls.NewCPUGroup(o.tp, nvls.WithOrder(nvls.Ring)); err != nil {
			return nil, fmt.Errorf("engine: %v", err)
		}
	}
	defer o.phases.Since("upload weights and tables", time.Now())
	factory := o.backend
	if factory == nil {
		factory = func(int) (Backend, error) { return NewCPU(), nil }
	}
	g := &group{cfg: cfg, closeComms: closeComms, phases: o.phases}
	if o.captureDir != "" {
		if err := os.MkdirAll(o.captureDir, 0o755); err != nil {
			return nil, fmt.Errorf("engine: %v", err)
		}
	}
	for i := 0; i < o.tp; i++ {
		be, err := factory(i)
		if err != nil {
			g.abort()
			return nil, err
		}
		if err := checkBackend(be, o.v); err != nil {
			g.abort()
			return nil, err
		}
		var ring nvls.Comm
		if rings != nil {
			ring = rings[i]
		}
		r := newRank(m, newLayout(cfg, o.tp, i), be, comms[i], ring, o.v, o.maxPos, o.stopLayer)
		r.step, r.routing = o.meta.Step, o.routing
		if err := be.Err(); err != nil {
			g.abort()
			return nil, err
		}
		if o.captureDir != "" {
			meta := o.meta
			meta.TP, meta.PP, meta.DP = o.tp, 1, 1
			meta.Model = cfg.ModelJSON()
			if r.rec, err = newRecorder(o.captureDir, cfg, i, meta, o.ops, o.fps, o.phases); err != nil {
				g.abort()
				return nil, err
			}
		}
		g.ranks = append(g.ranks, r)
	}
	onDevice := true
	for _, r := range g.ranks {
		_, cuda := r.be.(*CUDA)
		onDevice = onDevice && cuda
	}
	if onDevice { // every weight is in GPU memory now: the mapped checkpoint need not stay resident
		m.dropMappedPages()
	}
	return g, nil
}

// forward runs the segments on every rank concurrently and returns rank 0's full logits (T, V).
func (g *group) forward(segs []segment) (*fwdResult, error) {
	if len(g.ranks) == 1 {
		return g.ranks[0].forward(segs)
	}
	return onEveryRank(g, func(r *rank) (*fwdResult, error) { return r.forward(segs) })
}

// logprobs runs the sharded log-probabilities of the last forward's rows on every rank; rank 0's result.
func (g *group) logprobs(targets []int32) ([]float32, error) {
	return onEveryRank(g, func(r *rank) ([]float32, error) { return r.logprobs(targets) })
}

// onEveryRank runs f on every rank concurrently and returns rank 0's result and the first error. A rank that
// fails leaves the group, so ranks waiting at a collective for it get an error, not a hang.
func onEveryRank[T any](g *group, f func(r *rank) (T, error)) (T, error) {
	out := make([]T, len(g.ranks))
	errs := make([]error, len(g.ranks))
	var wg sync.WaitGroup
	for i, r := range g.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = f(r)
			if errs[i] != nil {
				r.leave()
			}
		}()
	}
	wg.Wait()
	return out[0], firstErr(errs)
}

// recordF32 writes a per-token scalar op (logprobs) to every rank's capture.
func (g *group) recordF32(op string, seq int64, pos int, vals []float32) error {
	return g.eachRecorder(func(rec *recorder, rank int) error { return rec.writeF32(rank, op, seq, pos, vals) })
}

// recordI32 writes a per-token integer op (sample) to every rank's capture.
func (g *group) recordI32(op string, seq int64, pos int, vals []int32) error {
	return g.eachRecorder(func(rec *recorder, rank int) error { return rec.writeI32(rank, op, seq, pos, vals) })
}

// eachRecorder calls write for every rank that records, in rank order, and stops at the first error.
func (g *group) eachRecorder(write func(rec *recorder, rank int) error) error {
	for _, r := range g.ranks {
		if r.rec != nil {
			if err := write(r.rec, r.lay.rank); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *group) dropCache(seq int64) {
	for _, r := range g.ranks {
		r.dropCache(seq)
	}
}

// close finishes every capture file (or removes them all if any failed) and frees the caches.
func (g *group) close(failed bool) error {
	var first error
	for _, r := range g.ranks { // every writer drained first: one rank's failed write removes every file
		if r.rec != nil {
			if err := r.rec.finish(); err != nil && first == nil && !failed {
				first = err
			}
		}
	}
	start := time.Now()
	for _, r := range g.ranks {
		for seq := range r.caches {
			r.dropCache(seq)
		}
		r.be.Free(r.logits)
		r.logits = nil
		r.freeWeights()
		if rs, ok := r.be.(interface{ releaseScratch() }); ok {
			rs.releaseScratch()
		}
		r.leave()
		if r.rec == nil {
			continue
		}
		if failed || first != nil {
			r.rec.w.Abort()
			continue
		}
		if err := r.rec.w.Close(); err != nil {
			first = err
		}
	}
	g.phases.Since("free, close the capture (fsync, rename)", start)
	if g.closeComms != nil {
		if err := g.closeComms(); err != nil && first == nil {
			first = err
		}
		g.closeComms = nil
	}
	return first
}

func (g *group) abort() {
	for _, r := range g.ranks {
		if r.rec != nil {
			r.rec.finish() //nolint:errcheck // already failing
			r.rec.w.Abort()
		}
	}
	if g.closeComms != nil {
		g.closeComms() //nolint:errcheck // already failing
		g.closeComms = nil
	}
}

// leave closes this rank's communicators.
func (r *rank) leave() {
	for _, c := range []nvls.Comm{r.comm, r.ring} {
		if cl, ok := c.(io.Closer); ok {
			cl.Close()
		}
	}
}

// firstErr prefers a rank's own failure over the errors other ranks got because it left.
func firstErr(errs []error) error {
	var closed error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, nvls.ErrClosed) {
			closed = err
			continue
		}
		return err
	}
	return closed
}
