package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"bitalign/capture"
)

// The verdict first (issue 15): a multi-GB pair whose every float tensor differs takes seconds to diff in
// full, but the first screen needs only the first divergence and its cause. DiffVerdict finds them with a
// cheap pass over every op's rows (bytes.Equal per row, on every core: memcmp speed) and compares in full
// only the first divergent op (and the MoE router ops, whose dtype the routing margins are measured in);
// Diff's complete report then follows in the background (LoadVerdict).

// DiffVerdict is Diff's report with the verdict first: every op's status, first mismatch and cause, the
// first divergence (with its op's statistics), the routing comparison and Identical are the ones Diff
// gives; the other ops' statistics are not computed (Report.Pending, OpStat.Pending), nor is Check
// (WithTolerance is checked only when nothing is pending). It takes Diff's options and fails where Diff fails on the inputs.
func DiffVerdict(ctx context.Context, a, b *capture.Capture, opts ...Option) (*Report, error) {
	d, err := newDiffer(a, b, opts)
	if err != nil {
		return nil, err
	}
	rep := d.rep
	rows := map[opKey]*rowSets{}
	work := make([]*opWork, len(d.keys)) // nil: nothing to scan (one side only, shapes differ, fingerprints)
	for i, kk := range d.keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st := OpStat{Op: kk.k.op, Index: kk.index, Role: kk.k.role}
		o, rs, err := prepareOp(ctx, &d.cfg, d.ia, d.ib, kk.k, &st, rep, d.accs, nil)
		if err != nil {
			return nil, err
		}
		if rs != nil {
			rows[kk.k] = rs
		}
		work[i] = o
		rep.Ops = append(rep.Ops, st)
	}
	firsts, err := scanRows(ctx, work, d.cfg.workers, d.cfg.progress, d.total)
	if err != nil {
		return nil, err
	}
	for i, o := range work {
		if o == nil {
			continue
		}
		st := &rep.Ops[i]
		st.pending = true
		if h := firsts[i]; h.ok {
			st.Status = StatusDivergent
			c := o.coord(h, st.Shape)
			st.FirstAt, st.firstCoord = &c, c
		} else {
			st.Status = compared(st)
		}
		rows[d.keys[i].k] = o.rowSets()
	}
	// the ops compared in full now: the first divergent one (firstOrder, as causes picks it) and the routers
	first := -1
	for i := range rep.Ops {
		if o := &rep.Ops[i]; o.Divergent() && (first < 0 || firstOrder(o, &rep.Ops[first]) < 0) {
			first = i
		}
	}
	for i, o := range work {
		if o == nil || i != first && !strings.HasSuffix(d.keys[i].k.op, "."+capture.LayerRouter) {
			continue
		}
		st := &rep.Ops[i]
		*st = OpStat{Op: st.Op, Index: st.Index, Role: st.Role, DType: st.DType, Shape: st.Shape,
			Elements: st.Elements, MissingRowsA: st.MissingRowsA, MissingRowsB: st.MissingRowsB}
		rs, err := compareOp(ctx, o, st, d.accs, nil)
		if err != nil {
			return nil, err
		}
		rows[d.keys[i].k] = rs
	}
	if err := d.finish(rows); err != nil {
		return nil, err
	}
	rep.pending = slices.ContainsFunc(rep.Ops, func(o OpStat) bool { return o.pending })
	if !rep.pending && d.cfg.tolerance != nil { // every op compared in full: the report is Diff's
		c := rep.Within(*d.cfg.tolerance)
		rep.Check = &c
	}
	return rep, nil
}

// scanRows is DiffVerdict's cheap pass: it compares every job of every op row by row (bytes.Equal over the
// part of each row the job holds) on workers goroutines, sets the pieces' row mismatch bits and returns
// each op's earliest mismatching element (in piece, then element order: Diff's first hit, without its
// values). progress hears the bytes compared (both sides) of total.
func scanRows(ctx context.Context, work []*opWork, workers int, progress func(done, total int64), total int64) ([]hit, error) {
	type ref struct{ op, job int32 }
	var refs []ref
	for i, o := range work {
		if o != nil {
			for j := range o.jobs {
				refs = append(refs, ref{int32(i), int32(j)})
			}
		}
	}
	found := make([][]hit, len(work)) // per op, per job: the job's first mismatch
	for i, o := range work {
		if o != nil {
			found[i] = make([]hit, len(o.jobs))
		}
	}
	var next, done atomic.Int64
	var stop atomic.Bool
	scan := func(main bool) {
		for n := 0; ; n++ {
			ri := int(next.Add(1) - 1)
			if ri >= len(refs) || stop.Load() {
				return
			}
			if n%16 == 0 && ctx.Err() != nil {
				stop.Store(true)
				return
			}
			r := refs[ri]
			o := work[r.op]
			j := o.jobs[r.job]
			found[r.op][r.job] = scanJob(o, j)
			nb := done.Add(2 * (j.hi - j.lo) * int64(o.f.size))
			if main && progress != nil && n%64 == 63 {
				progress(nb, total)
			}
		}
	}
	var wg sync.WaitGroup
	for range max(min(workers, len(refs)), 1) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scan(false)
		}()
	}
	scan(true)
	wg.Wait()
	if stop.Load() {
		return nil, ctx.Err()
	}
	if progress != nil {
		progress(done.Load(), total)
	}
	out := make([]hit, len(work))
	for i, fs := range found {
		for _, h := range fs { // jobs are in piece, then element order
			if h.ok {
				out[i] = h
				break
			}
		}
	}
	return out, nil
}

// scanJob compares one job's elements row by row and returns its first mismatching element (only piece
// and elem set), marking every row that holds a mismatch.
func scanJob(o *opWork, j job) hit {
	p := &o.pieces[j.piece]
	sz := int64(o.f.size)
	var first hit
	for e := j.lo; e < j.hi; {
		row := e / p.rowLen
		end := min((row+1)*p.rowLen, j.hi)
		a, b := p.a[e*sz:end*sz], p.b[e*sz:end*sz]
		if !bytes.Equal(a, b) {
			bit := uint64(1) << (row % 64)
			if m := &p.rowMism[row/64]; atomic.LoadUint64(m)&bit == 0 {
				atomic.OrUint64(m, bit)
			}
			if !first.ok {
				first = hit{ok: true, piece: j.piece, elem: e + int64(firstDiff(a, b))/sz}
			}
		}
		e = end
	}
	return first
}

// firstDiff is the index of the first byte where a and b (of one length, known to differ) differ.
func firstDiff(a, b []byte) int {
	i := 0
	for ; i+8 <= len(a); i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for ; i < len(a) && a[i] == b[i]; i++ {
	}
	return i
}
