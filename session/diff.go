package session

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"bitalign/capture"
	"bitalign/engine"
)

// Option configures Diff.
type Option func(*config)

type config struct {
	progress      func(done, total int64)
	producers     func(op string) []string
	workers       int
	mapRows       int
	mapCols       int
	ops           []string // glob patterns; empty: every op
	ignoreMissing bool
	tolerance     *Tolerance
}

// WithProgress calls fn with the bytes compared so far and the total (both captures' tensor bytes). It is
// called from the goroutine that called Diff.
func WithProgress(fn func(done, total int64)) Option { return func(c *config) { c.progress = fn } }

// WithProducers names the ops whose outputs an op reads (engine.Producers), so that a divergence can be called
// local or propagated when the op's inputs were not captured.
func WithProducers(fn func(op string) []string) Option { return func(c *config) { c.producers = fn } }

// WithWorkers sets how many goroutines compare (default GOMAXPROCS).
func WithWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithMapSize sets the largest size of each op's mismatch map (OpStat.Map; default 64 positions × 256 features).
func WithMapSize(rows, cols int) Option { return func(c *config) { c.mapRows, c.mapCols = rows, cols } }

// WithOps compares only the ops whose names match one of the glob patterns (path.Match syntax: `*`, `?`,
// `[...]`; e.g. "layers.1*.mlp.*"); the others are neither compared nor reported. Diff fails when a pattern
// is malformed or matches no op of either capture. Several calls add patterns.
func WithOps(patterns ...string) Option {
	return func(c *config) { c.ops = append(c.ops, patterns...) }
}

// WithIgnoreMissing makes tensors and positions that one side lacks no reason for the report not to be
// identical (Report.IgnoreMissing; they are still listed in Report.Missing and counted by the reports). A
// tensor that could not be aligned (incomplete shards, ...) still counts (Report.MissingProblems).
func WithIgnoreMissing() Option { return func(c *config) { c.ignoreMissing = true } }

// WithTolerance checks the report against t (Report.Check).
func WithTolerance(t Tolerance) Option { return func(c *config) { c.tolerance = &t } }

// matchOps returns which op names of names (sorted, unique) match one of patterns, or an error naming a
// malformed pattern or one that matches nothing (of where: "either capture", a capture's path). diff --ops,
// replay --ops and fingerprint --full-ops parse their patterns here.
func matchOps(patterns []string, names []string, where string) (map[string]bool, error) {
	keep := map[string]bool{}
	for _, pat := range patterns {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("session: op pattern %q: %v", pat, err)
		}
		n := 0
		for _, name := range names {
			if ok, _ := path.Match(pat, name); ok {
				keep[name] = true
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("session: op pattern %q matches no op of %s", pat, where)
		}
	}
	return keep, nil
}

// rowSets records, per (op, role) and (step, seq), which positions were compared and which mismatched.
type rowSets struct {
	compared, mismatched map[seqKey]*bitset
}

// Diff aligns a and b by (step, seq, position, op, role), compares every aligned element and returns the
// report. Tensors present on one side only are reported missing; ops whose shapes disagree are reported, not
// compared. It stops with ctx's error when ctx is cancelled.
func Diff(ctx context.Context, a, b *capture.Capture, opts ...Option) (*Report, error) {
	d, err := newDiffer(a, b, opts)
	if err != nil {
		return nil, err
	}
	rep, cfg := d.rep, &d.cfg
	var done int64
	report := func() {
		if cfg.progress != nil {
			cfg.progress(done, d.total)
		}
	}
	report()
	rows := map[opKey]*rowSets{}
	for _, kk := range d.keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := kk.k
		st := OpStat{Op: k.op, Index: kk.index, Role: k.role}
		opBytes := d.ia.bytes(k) + d.ib.bytes(k)
		rs, err := diffOp(ctx, cfg, d.ia, d.ib, k, &st, rep, d.accs, func(n int64) {
			if cfg.progress != nil {
				cfg.progress(done+min(n, opBytes), d.total)
			}
		})
		if err != nil {
			return nil, err
		}
		if rs != nil {
			rows[k] = rs
		}
		for _, side := range []*sideIndex{d.ia, d.ib} { // this op's pages are read: out of the resident set
			if side.c != nil {
				side.c.DropPages(side.byOp[k])
				side.c.DropPages(side.fps[k])
			}
		}
		done += opBytes
		report()
		rep.Ops = append(rep.Ops, st)
	}
	if err := d.finish(rows); err != nil {
		return nil, err
	}
	if cfg.tolerance != nil {
		c := rep.Within(*cfg.tolerance)
		rep.Check = &c
	}
	return rep, nil
}

// keyed is an aligned (op, role) and its execution index.
type keyed struct {
	k     opKey
	index int32
}

// differ is one diff of two captures: what Diff and DiffVerdict share (the ops in order, the report's
// header, the workers' accumulators) before the ops are compared, and the causes, routing and verdict after.
type differ struct {
	cfg      config
	ia, ib   *sideIndex
	keys     []keyed         // execution order, WithOps applied
	filtered map[string]bool // ops left out by WithOps
	rep      *Report
	total    int64 // both captures' bytes of the kept ops
	accs     []*acc
}

func newDiffer(a, b *capture.Capture, opts []Option) (*differ, error) {
	d := &differ{cfg: config{workers: runtime.GOMAXPROCS(0), mapRows: 64, mapCols: 256}}
	cfg := &d.cfg
	for _, o := range opts {
		o(cfg)
	}
	cfg.workers = max(cfg.workers, 1)
	d.ia, d.ib = indexSide(a), indexSide(b)
	ia, ib := d.ia, d.ib
	var keys []keyed
	for k, ix := range ia.index {
		keys = append(keys, keyed{k, ix})
	}
	for k, ix := range ib.index {
		if _, ok := ia.index[k]; !ok {
			keys = append(keys, keyed{k, ix})
		}
	}
	slices.SortFunc(keys, func(x, y keyed) int { return opOrder(x.index, y.index, x.k, y.k) })
	if len(cfg.ops) > 0 {
		var names []string
		for _, kk := range keys {
			names = append(names, kk.k.op)
		}
		slices.Sort(names)
		keep, err := matchOps(cfg.ops, slices.Compact(names), "either capture")
		if err != nil {
			return nil, err
		}
		d.filtered = map[string]bool{}
		keys = slices.DeleteFunc(keys, func(kk keyed) bool {
			d.filtered[kk.k.op] = !keep[kk.k.op]
			return !keep[kk.k.op]
		})
	}
	d.keys = keys
	rep := &Report{A: captureInfo(a), B: captureInfo(b), Filter: slices.Clone(cfg.ops), IgnoreMissing: cfg.ignoreMissing}
	rep.Warnings = append(append(rep.Warnings, a.ImportWarnings()...), b.ImportWarnings()...)
	if h := capture.PrefixHint(a, b); h != "" {
		rep.Warnings = append(rep.Warnings, h)
	}
	d.rep = rep
	for _, kk := range keys {
		d.total += ia.bytes(kk.k) + ib.bytes(kk.k)
	}
	d.accs = make([]*acc, cfg.workers)
	for i := range d.accs {
		d.accs[i] = &acc{}
	}
	return d, nil
}

// finish sums the ops up, labels the causes, picks the first divergence, compares the routing and decides
// whether the report is identical. rows are every compared op's row sets.
func (d *differ) finish(rows map[opKey]*rowSets) error {
	rep := d.rep
	for i := range rep.Ops {
		rep.Compared += rep.Ops[i].Elements
		rep.Mismatched += rep.Ops[i].Mismatched
	}
	causes(rep, rows, d.cfg.producers, d.filtered)
	for i := range rep.Ops {
		if o := &rep.Ops[i]; o.Located {
			rep.Located++
			if o.Divergent() && !slices.Contains(rep.LocatedOnly, o.Op) {
				rep.LocatedOnly = append(rep.LocatedOnly, o.Op)
			}
		}
	}
	routing, err := compareRouting(rep, d.ia, d.ib, rows, d.cfg.producers, d.filtered)
	if err != nil {
		return err
	}
	rep.Routing = routing
	nameFlip(rep)
	rep.Identical = rep.Compared > 0
	for i := range rep.Ops {
		switch rep.Ops[i].Status {
		case StatusIdentical:
		case StatusIncomplete, StatusMissingA, StatusMissingB:
			rep.Identical = rep.Identical && d.cfg.ignoreMissing
		default:
			rep.Identical = false
		}
	}
	if len(rep.MissingProblems()) > 0 {
		rep.Identical = false
	}
	return nil
}

// diffOp aligns and compares one (op, role), filling st and appending missing tensors (and the first
// divergence) to rep.
func diffOp(ctx context.Context, cfg *config, ia, ib *sideIndex, k opKey, st *OpStat, rep *Report, accs []*acc,
	progress func(int64)) (*rowSets, error) {
	o, rs, err := prepareOp(ctx, cfg, ia, ib, k, st, rep, accs, progress)
	if err != nil || o == nil {
		return rs, err
	}
	return compareOp(ctx, o, st, accs, progress)
}

// prepareOp aligns one (op, role): it sets st's dtype, shape, element count and missing rows, appends the
// missing tensors to rep, and returns the aligned work to compare (nil when there is nothing to compare:
// one side only, shapes that differ). An op a side holds as fingerprints is compared here, whole (its rows
// are returned, o is nil).
func prepareOp(ctx context.Context, cfg *config, ia, ib *sideIndex, k opKey, st *OpStat, rep *Report, accs []*acc,
	progress func(int64)) (o *opWork, rs *rowSets, err error) {
	addMissing := func(m MissingTensor) {
		m.Op, m.Index, m.Role = k.op, st.Index, k.role
		rep.Missing = append(rep.Missing, m)
	}
	if fingerprintMode(ia, ib, k) {
		rs, err := diffFingerprints(ctx, cfg, ia, ib, k, st, accs, addMissing, progress)
		return nil, rs, err
	}
	ua, pa, err := buildUnits(ia.c, ia.byOp[k])
	if err != nil {
		return nil, nil, err
	}
	ub, pb, err := buildUnits(ib.c, ib.byOp[k])
	if err != nil {
		return nil, nil, err
	}
	unassembled(pa, pb, addMissing)
	if len(ua) == 0 || len(ub) == 0 {
		for _, us := range [][]unit{ua, ub} {
			if len(us) > 0 {
				st.DType, st.Shape = us[0].dt.String(), us[0].feat
			}
		}
		oneSided(st, ua, ub, addMissing)
		return nil, nil, nil
	}
	st.DType, st.Shape = ua[0].dt.String(), ua[0].feat
	if d := shapeProblem(ua, ub); d != "" {
		st.Status = StatusShapeMismatch
		st.Detail = d
		st.ShapeB = ub[0].feat
		return nil, nil, nil
	}
	f, err := formatOf(ua[0].dt)
	if err != nil {
		return nil, nil, err
	}
	al := align(ua, ub)
	for _, m := range al.missing {
		addMissing(m)
	}
	st.MissingRowsA, st.MissingRowsB = al.rowsA, al.rowsB
	o = newOpWork(f, al.pieces, cfg.mapRows, cfg.mapCols)
	for i := range o.pieces {
		st.Elements += o.pieces[i].rows * o.pieces[i].rowLen
	}
	return o, nil, nil
}

// compareOp compares every element of a prepared op and fills st with its statistics.
func compareOp(ctx context.Context, o *opWork, st *OpStat, accs []*acc, progress func(int64)) (*rowSets, error) {
	f := o.f
	w, err := o.run(ctx, accs, progress)
	if err != nil {
		return nil, err
	}
	fill(st, o, w, f)
	if st.Mismatched > 0 && f.kind == kindFloat {
		if st.MaxRMSRel, err = o.maxRMSRel(ctx, len(accs)); err != nil {
			return nil, err
		}
		if w.first.class == ClassNumeric {
			st.firstRMSRel = o.hitRMSRel(w.first)
		}
	}
	st.Status = compared(st)
	st.pending = false
	return o.rowSets(), nil
}

// shapeProblem describes the first unit whose dtype or per-token shape differs from A's first unit, or "".
func shapeProblem(ua, ub []unit) string {
	ref := &ua[0]
	for side, us := range [][]unit{ua, ub} {
		for i := range us {
			u := &us[i]
			if u.dt != ref.dt || !slices.Equal(u.feat, ref.feat) {
				name := [...]string{"A", "B"}[side]
				return fmt.Sprintf("A step %d seq %d pos %d: %s %v per token; %s step %d seq %d pos %d: %s %v",
					ref.step, ref.seq, ref.pos, ref.dt, ref.feat, name, u.step, u.seq, u.pos, u.dt, u.feat)
			}
		}
	}
	return ""
}

func newOpWork(f *format, pieces []piece, mapRows, mapCols int) *opWork {
	o := &opWork{f: f, pieces: pieces}
	if f.dt == capture.F32 {
		o.lowMask = f32Low16
	}
	maxJob := int64(blockBytes / f.size)
	var done int64
	lo, hi := int64(1)<<62, int64(-1)<<62
	for pi := range pieces {
		p := &pieces[pi]
		p.rowMism = make([]uint64, (p.rows+63)/64)
		n := p.rows * p.rowLen
		for s := int64(0); s < n; s += maxJob {
			o.jobs = append(o.jobs, job{piece: int32(pi), lo: s, hi: min(s+maxJob, n)})
			o.done = append(o.done, done)
			done += 2 * (min(s+maxJob, n) - s) * int64(f.size)
		}
		lo, hi = min(lo, p.pos), max(hi, p.pos+p.rows)
	}
	o.sums = make([]float64, len(o.jobs))
	if len(pieces) > 0 && mapRows > 0 && mapCols > 0 {
		o.posLo, o.posSpan, o.rowLen = lo, hi-lo, pieces[0].rowLen
		o.gridRows = int(min(int64(mapRows), o.posSpan))
		o.gridCols = int(min(int64(mapCols), o.rowLen))
		if o.rowLen <= 1<<20 { // a lookup table for ordinary rows; huge rows (a whole weight) divide instead
			o.colCell = make([]int32, o.rowLen)
			for c := range o.colCell {
				o.colCell[c] = int32(int64(c) * int64(o.gridCols) / o.rowLen)
			}
		}
	}
	return o
}

// doneBefore is the bytes (both sides) of the jobs before job ji: an estimate of the progress when ji starts.
func (o *opWork) doneBefore(ji int) int64 { return o.done[ji] }

// run compares every job on len(accs) goroutines (the caller's among them) and returns the merged
// accumulator. Workers take jobs in increasing order from a shared counter.
func (o *opWork) run(ctx context.Context, accs []*acc, progress func(int64)) (*acc, error) {
	cells := o.gridRows * o.gridCols
	nw := min(len(accs), max(len(o.jobs), 1))
	for _, w := range accs[:nw] {
		w.reset(cells, o.lowMask != 0)
	}
	var next atomic.Int64
	var stop atomic.Bool
	work := func(w *acc, main bool) {
		for n := 0; ; n++ {
			ji := int(next.Add(1) - 1)
			if ji >= len(o.jobs) || stop.Load() {
				return
			}
			if n%16 == 0 && ctx.Err() != nil {
				stop.Store(true)
				return
			}
			o.sums[ji] = w.run(o, ji)
			if main && n%64 == 63 && progress != nil {
				progress(o.doneBefore(ji))
			}
		}
	}
	var wg sync.WaitGroup
	for _, w := range accs[1:nw] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(w, false)
		}()
	}
	work(accs[0], true)
	wg.Wait()
	if stop.Load() {
		return nil, ctx.Err()
	}
	for _, w := range accs[:nw] {
		w.fold()
	}
	for _, w := range accs[1:nw] {
		accs[0].merge(w)
	}
	return accs[0], nil
}

// fill turns the merged accumulator into st. An f32 op whose every compared value (both sides) is a bf16
// value gets its distances in bf16 ULPs; an integer or bool op gets none (only the count of differing values).
func fill(st *OpStat, o *opWork, w *acc, f *format) {
	hist, mx, grid, first := w.hist, w.max, w.grid, w.first
	switch {
	case f.kind != kindFloat:
		hist, mx = [65]uint64{}, hit{}
	case o.lowMask != 0 && w.low == 0 && st.Elements > 0:
		st.ULPDType = capture.BF16.String()
		hist, mx, grid = w.hist16, w.max16, w.grid16
		first.ulp = bf16ULP(first.ulp)
	default:
		st.ULPDType = f.dt.String()
	}
	st.Mismatched = w.mismatched
	st.Hist = hist
	st.Hist[0] = uint64(st.Elements - st.Mismatched)
	st.NaNA, st.NaNB, st.InfA, st.InfB = w.nanA, w.nanB, w.infA, w.infB
	st.NaNNumber, st.NaNPayload, st.InfMismatched = w.nanNumber, w.nanPayload, w.infMismatched
	if f.kind == kindFloat {
		st.MaxAbs, st.MaxRel = w.maxAbs, w.maxRel
		var sum float64
		for _, s := range o.sums {
			sum += s
		}
		if st.Elements > 0 {
			st.MeanAbs = sum / float64(st.Elements)
		}
	}
	if mx.ok {
		st.MaxULP = mx.ulp
		c := o.coord(mx, st.Shape)
		st.MaxAt = &c
		va, vb := valueOf(f, mx.a), valueOf(f, mx.b)
		st.MaxA, st.MaxB = &va, &vb
	}
	if first.ok {
		c := o.coord(first, st.Shape)
		st.FirstAt = &c
		st.first = first
		st.firstCoord = c
	}
	if o.gridRows > 0 && st.Mismatched > 0 {
		cells := slices.Clone(grid)
		if f.kind != kindFloat { // integers: level 1 marks a differing value
			for i, c := range cells {
				cells[i] = min(c, 1)
			}
		}
		st.Map = &Map{Rows: o.gridRows, Cols: o.gridCols, PosLo: o.posLo, PosHi: o.posLo + o.posSpan,
			Features: o.rowLen, Cells: cells}
	}
}

// coord locates a hit.
func (o *opWork) coord(h hit, feat []int64) Coord {
	p := &o.pieces[h.piece]
	row, col := h.elem/p.rowLen, h.elem%p.rowLen
	return Coord{Step: p.step, Seq: p.seq, Pos: p.pos + row, Col: col, Element: unravel(col, feat)}
}

// unravel turns a flat index into coordinates of shape (row-major).
func unravel(i int64, shape []int64) []int64 {
	out := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			out[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return out
}

// rowSets turns the pieces' row bits into per-(step, seq) position sets.
func (o *opWork) rowSets() *rowSets {
	rs := &rowSets{compared: map[seqKey]*bitset{}, mismatched: map[seqKey]*bitset{}}
	for i := range o.pieces {
		p := &o.pieces[i]
		k := seqKey{p.step, p.seq}
		c := rs.compared[k]
		if c == nil {
			c = &bitset{}
			rs.compared[k] = c
		}
		c.setRange(p.pos, p.pos+p.rows)
		for r := int64(0); r < p.rows; r++ {
			if p.rowMism[r/64]&(1<<(r%64)) != 0 {
				m := rs.mismatched[k]
				if m == nil {
					m = &bitset{}
					rs.mismatched[k] = m
				}
				m.set(p.pos + r)
			}
		}
	}
	return rs
}

// firstOrder orders divergent ops for the report's first divergence (docs/report-schema.md): by the
// (step, seq, pos) of the op's earliest mismatch, then in execution order (index, role, name). A token at pos
// p+1 is chosen by "sample" and the logits at pos p, so it comes after them; an activation that differs at an
// earlier position comes before the tokens it changed.
func firstOrder(x, y *OpStat) int {
	a, b := &x.firstCoord, &y.firstCoord
	return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Pos, b.Pos),
		opOrder(x.Index, y.Index, opKey{x.Op, x.Role}, opKey{y.Op, y.Role}))
}

// causes labels every divergent op local or propagated and picks the report's first divergence. filtered
// names the ops WithOps left out (their rows are unknown, not missing).
func causes(rep *Report, rows map[opKey]*rowSets, producers func(string) []string, filtered map[string]bool) {
	ins := map[string][]opKey{} // op → its captured input roles
	for i := range rep.Ops {
		o := &rep.Ops[i]
		if roleRank(o.Role) == 1 {
			ins[o.Op] = append(ins[o.Op], opKey{o.Op, o.Role})
		}
	}
	first := -1
	for i := range rep.Ops {
		o := &rep.Ops[i]
		if !o.Divergent() {
			continue
		}
		o.Cause, o.CauseDetail = CauseUnknown, "no inputs or producers captured"
		c := o.firstCoord
		k := seqKey{c.Step, c.Seq}
		lo := c.Pos
		if strings.HasSuffix(o.Op, ".attn.sdpa") { // causal attention reads every position ≤ pos
			lo = 0
		}
		// check looks at srcs over positions [lo, hi)
		check := func(noun string, srcs []opKey, lo, hi int64) (Cause, string) {
			var differ, unknown, left []string
			for _, s := range srcs {
				rs := rows[s]
				name := s.op
				if s.role != "out" {
					name += "[" + s.role + "]"
				}
				if filtered[s.op] {
					left = append(left, name)
					continue
				}
				if rs == nil || rs.compared[k] == nil {
					unknown = append(unknown, name)
					continue
				}
				if m := rs.mismatched[k]; m != nil && m.any(lo, hi) {
					differ = append(differ, name)
				} else if !rs.compared[k].all(lo, hi) {
					unknown = append(unknown, name)
				}
			}
			switch {
			case len(differ) > 0:
				return CausePropagated, noun + " differ: " + strings.Join(differ, ", ")
			case len(unknown) == 0 && len(left) == 0 && len(srcs) > 0:
				names := make([]string, len(srcs))
				for i, s := range srcs {
					names[i] = s.op
					if s.role != "out" {
						names[i] = s.role
					}
				}
				return CauseLocal, noun + " identical: " + strings.Join(names, ", ")
			case len(left) > 0 && len(unknown) == 0:
				return CauseUnknown, noun + " not compared (left out by the op patterns): " + strings.Join(left, ", ")
			case len(left) > 0:
				return CauseUnknown, noun + " not captured: " + strings.Join(unknown, ", ") + "; not compared: " + strings.Join(left, ", ")
			}
			return CauseUnknown, noun + " not captured: " + strings.Join(unknown, ", ")
		}
		if roleRank(o.Role) == 2 && len(ins[o.Op]) > 0 {
			o.Cause, o.CauseDetail = check("inputs", ins[o.Op], lo, c.Pos+1)
		}
		if o.Cause == CauseUnknown && producers != nil && roleRank(o.Role) == 2 {
			var srcs []opKey
			for _, p := range producers(o.Op) {
				srcs = append(srcs, opKey{p, "out"})
			}
			if len(srcs) > 0 {
				o.Cause, o.CauseDetail = check("producers", srcs, lo, c.Pos+1)
			}
		}
		if o.Op == engine.OpTokens && o.Cause == CauseUnknown && c.Pos > 0 {
			// the token at pos p is what sampling chose from the logits at pos p−1
			o.Cause, o.CauseDetail = check(fmt.Sprintf("pos %d's sample and logits", c.Pos-1),
				[]opKey{{engine.OpSample, "out"}, {engine.OpLogits, "out"}}, c.Pos-1, c.Pos)
		}
		if first < 0 || firstOrder(o, &rep.Ops[first]) < 0 {
			first = i
		}
	}
	if first < 0 {
		return
	}
	o := &rep.Ops[first]
	if o.Located { // fingerprints: where, not what
		rep.First = &Divergence{Op: o.Op, Index: o.Index, Role: o.Role, DType: o.DType, At: o.firstCoord,
			Cause: o.Cause, Detail: o.CauseDetail, Located: true}
		return
	}
	f, _ := formatOf(mustDType(o.DType))
	rep.First = &Divergence{Op: o.Op, Index: o.Index, Role: o.Role, DType: o.DType, ULPDType: o.ULPDType,
		At: o.firstCoord, A: valueOf(f, o.first.a), B: valueOf(f, o.first.b), Class: o.first.class,
		RMSRel: o.firstRMSRel, Cause: o.Cause, Detail: o.CauseDetail}
	if o.ULPDType != "" {
		rep.First.ULP = o.first.ulp
	}
}

func mustDType(s string) capture.DType {
	d, _ := capture.ParseDType(s)
	return d
}

// bitset is a growable set of non-negative positions.
type bitset struct{ w []uint64 }

func (b *bitset) set(i int64) {
	if i < 0 {
		return
	}
	for int64(len(b.w)) <= i/64 {
		b.w = append(b.w, 0)
	}
	b.w[i/64] |= 1 << (i % 64)
}

func (b *bitset) setRange(lo, hi int64) {
	for i := max(lo, 0); i < hi; i++ {
		b.set(i)
	}
}

func (b *bitset) has(i int64) bool {
	return i >= 0 && i/64 < int64(len(b.w)) && b.w[i/64]&(1<<(i%64)) != 0
}

// any reports whether some position in [lo, hi) is set.
func (b *bitset) any(lo, hi int64) bool {
	for i := max(lo, 0); i < hi; i++ {
		if b.has(i) {
			return true
		}
	}
	return false
}

// all reports whether every position in [lo, hi) is set.
func (b *bitset) all(lo, hi int64) bool {
	for i := max(lo, 0); i < hi; i++ {
		if !b.has(i) {
			return false
		}
	}
	return true
}

// unassembled records the tensors a side could not assemble (pa: A's, pb: B's) as missing on the other side.
func unassembled(pa, pb []problem, addMissing func(MissingTensor)) {
	for _, p := range pa {
		addMissing(MissingTensor{MissingIn: "B", Step: p.step, Seq: p.seq, Pos: p.pos, NTok: p.ntok, Reason: "A: " + p.reason})
	}
	for _, p := range pb {
		addMissing(MissingTensor{MissingIn: "A", Step: p.step, Seq: p.seq, Pos: p.pos, NTok: p.ntok, Reason: "B: " + p.reason})
	}
}

// oneSided sets the status of an op that at most one side holds (ua or ub is empty): the other side's rows are
// missing, and an op neither side could align is a shape mismatch.
func oneSided(st *OpStat, ua, ub []unit, addMissing func(MissingTensor)) {
	in, us := "A", ub
	st.Status = StatusMissingA
	if len(ua) > 0 {
		in, us, st.Status = "B", ua, StatusMissingB
	}
	for _, u := range us {
		addMissing(MissingTensor{MissingIn: in, Step: u.step, Seq: u.seq, Pos: u.pos, NTok: u.rows})
		if in == "A" {
			st.MissingRowsA += u.rows
		} else {
			st.MissingRowsB += u.rows
		}
	}
	if len(ua) == 0 && len(ub) == 0 {
		st.Status = StatusShapeMismatch
		st.Detail = "no tensor of this op could be aligned on either side"
	}
}

// compared is the status of an op both sides hold, once its elements are compared.
func compared(st *OpStat) Status {
	switch {
	case st.Mismatched > 0:
		return StatusDivergent
	case st.MissingRowsA+st.MissingRowsB > 0:
		return StatusIncomplete
	}
	return StatusIdentical
}
