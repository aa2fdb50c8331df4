package session

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"bitalign/capture"
)

// opKey names an aligned tensor stream: an op and a role.
type opKey struct{ op, role string }

// roleRank orders the roles of one op: weights and other roles, then inputs, then the output.
func roleRank(role string) int {
	switch {
	case role == "out":
		return 2
	case role == "in" || strings.HasPrefix(role, "in."):
		return 1
	}
	return 0
}

// opOrder is the execution order of aligned ops: index, then role rank, then names.
func opOrder(ia, ib int32, a, b opKey) int {
	return cmp.Or(cmp.Compare(ia, ib), cmp.Compare(roleRank(a.role), roleRank(b.role)),
		cmp.Compare(a.op, b.op), cmp.Compare(a.role, b.role))
}

// sideIndex groups one capture's entries by (op, role). Fingerprint tensors (role fp.<role>) are grouped
// under the role they fingerprint, apart from the full tensors (fps).
type sideIndex struct {
	c     *capture.Capture
	byOp  map[opKey][]int
	fps   map[opKey][]int
	index map[opKey]int32
}

func indexSide(c *capture.Capture) *sideIndex {
	s := &sideIndex{c: c, byOp: map[opKey][]int{}, fps: map[opKey][]int{}, index: map[opKey]int32{}}
	if c == nil {
		return s
	}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		k, m := opKey{e.Op, e.Role}, s.byOp
		if base, ok := capture.FingerprintRole(e.Role); ok {
			k, m = opKey{e.Op, base}, s.fps
		}
		if _, ok := s.index[k]; !ok {
			s.index[k] = e.Index
		}
		m[k] = append(m[k], i)
	}
	return s
}

// bytes is the size of k's tensors and fingerprints on this side.
func (s *sideIndex) bytes(k opKey) int64 {
	var n int64
	for _, m := range []map[opKey][]int{s.byOp, s.fps} {
		for _, i := range m[k] {
			n += s.c.Entry(i).NBytes
		}
	}
	return n
}

// unit is one full tensor of one side after shard reassembly, seen as rows (token positions) of rowLen
// elements: row r is position pos+r. A tensor that is not per token (NTok = 0) is one row at Pos.
type unit struct {
	step, seq, pos int64
	rows, rowLen   int64
	dt             capture.DType
	feat           []int64 // per-row feature shape
	data           []byte
	whole          bool // the tensor is not per token (NTok 0): one row, feat its whole shape
}

// problem is a tensor that could not be turned into a unit.
type problem struct {
	step, seq, pos, ntok int64
	reason               string
}

// buildUnits reassembles one side's entries of one (op, role) into units sorted by (step, seq, pos). Entries
// of several ranks with the same coordinates are either shards (Shard.Dim ≥ 0: concatenated along Dim) or
// replicas (the lowest rank's is used).
func buildUnits(c *capture.Capture, idxs []int) ([]unit, []problem, error) {
	es := make([]capture.Entry, len(idxs))
	order := make([]int, len(idxs))
	for i, ix := range idxs {
		es[i] = c.Entry(ix)
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		a, b := &es[x], &es[y]
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Pos, b.Pos),
			cmp.Compare(a.NTok, b.NTok), cmp.Compare(a.Rank, b.Rank))
	})
	var units []unit
	var probs []problem
	for g := 0; g < len(order); {
		h := g + 1
		e0 := &es[order[g]]
		for h < len(order) {
			e := &es[order[h]]
			if e.Step != e0.Step || e.Seq != e0.Seq || e.Pos != e0.Pos || e.NTok != e0.NTok {
				break
			}
			h++
		}
		group := make([]int, 0, h-g)
		for _, o := range order[g:h] {
			group = append(group, o)
		}
		g = h
		u, reason, err := assemble(c, es, idxs, group)
		if err != nil {
			return nil, nil, err
		}
		if reason != "" {
			probs = append(probs, problem{e0.Step, e0.Seq, e0.Pos, e0.NTok, reason})
			continue
		}
		units = append(units, u)
	}
	return units, probs, nil
}

// assemble builds the unit of one group of entries (same step, seq, pos, ntok; sorted by rank).
func assemble(c *capture.Capture, es []capture.Entry, idxs []int, group []int) (unit, string, error) {
	e0 := &es[group[0]]
	var shards []int
	for _, g := range group {
		if es[g].Shard.Dim >= 0 {
			shards = append(shards, g)
		}
	}
	var shape []int64
	var data []byte
	if len(shards) == 0 {
		d, err := c.Data(idxs[group[0]]) // replicas: the lowest rank's
		if err != nil {
			return unit{}, "", err
		}
		shape, data = e0.Shape, d
	} else {
		var reason string
		var err error
		shape, data, reason, err = joinShards(c, es, idxs, shards)
		if err != nil || reason != "" {
			return unit{}, reason, err
		}
	}
	u := unit{step: e0.Step, seq: e0.Seq, pos: e0.Pos, dt: e0.DType, data: data}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	switch {
	case e0.NTok == 0:
		u.rows, u.rowLen, u.feat, u.whole = 1, n, shape, true
	case len(shape) > 0 && shape[0] == e0.NTok:
		u.rows, u.rowLen, u.feat = e0.NTok, n/max(e0.NTok, 1), shape[1:]
	case n%e0.NTok == 0:
		u.rows, u.rowLen, u.feat = e0.NTok, n/e0.NTok, []int64{n / e0.NTok}
	default:
		return unit{}, fmt.Sprintf("shape %v does not split into %d token rows", shape, e0.NTok), nil
	}
	if u.rowLen == 0 {
		return unit{}, fmt.Sprintf("empty tensor (shape %v)", shape), nil
	}
	return u, "", nil
}

// joinShards concatenates TP shards along their shard dim into the full tensor. A single shard that covers
// the full tensor is used in place.
func joinShards(c *capture.Capture, es []capture.Entry, idxs []int, shards []int) ([]int64, []byte, string, error) {
	s0 := es[shards[0]].Shard
	full := s0.FullShape
	dim := s0.Dim
	slices.SortStableFunc(shards, func(x, y int) int { return cmp.Compare(es[x].Shard.Start, es[y].Shard.Start) })
	var parts []int
	next := int64(0)
	for _, s := range shards {
		e := &es[s]
		if e.Shard.Dim != dim || !slices.Equal(e.Shard.FullShape, full) || e.DType != es[shards[0]].DType {
			return nil, nil, fmt.Sprintf("ranks disagree on the shard layout (rank %d: dim %d of %v)", e.Rank, e.Shard.Dim, e.Shard.FullShape), nil
		}
		switch {
		case e.Shard.Start < next && e.Shard.Start+e.Shape[dim] <= next:
			continue // a replica of a slice we have (e.g. another data-parallel rank)
		case e.Shard.Start != next:
			return nil, nil, fmt.Sprintf("shards of dim %d cover [0, %d) then start at %d (full %d)", dim, next, e.Shard.Start, full[dim]), nil
		}
		parts = append(parts, s)
		next += e.Shape[dim]
	}
	if next != full[dim] {
		return nil, nil, fmt.Sprintf("shards of dim %d cover [0, %d) of %d", dim, next, full[dim]), nil
	}
	if len(parts) == 1 {
		d, err := c.Data(idxs[parts[0]])
		return full, d, "", err
	}
	size := int64(es[parts[0]].DType.Size())
	outer, inner := int64(1), size
	for d := 0; d < dim; d++ {
		outer *= full[d]
	}
	for d := dim + 1; d < len(full); d++ {
		inner *= full[d]
	}
	out := make([]byte, outer*full[dim]*inner)
	for _, s := range parts {
		e := &es[s]
		d, err := c.Data(idxs[s])
		if err != nil {
			return nil, nil, "", err
		}
		blk := e.Shape[dim] * inner
		for o := int64(0); o < outer; o++ {
			copy(out[(o*full[dim]+e.Shard.Start)*inner:], d[o*blk:(o+1)*blk])
		}
	}
	return full, out, "", nil
}

// span is rows [lo, hi) of positions taken from a unit (row lo is the unit's row lo−u.pos).
type span struct {
	u      *unit
	lo, hi int64
}

type seqKey struct{ step, seq int64 }

// alignment is the result of lining up two sides' units of one (op, role).
type alignment struct {
	pieces  []piece
	missing []MissingTensor // Op/Index/Role filled by the caller
	rowsA   int64           // rows missing in A
	rowsB   int64
}

// align pairs the units of A and B by (step, seq) and position. Rows present on one side only are reported
// missing; rows that two units of one side both cover are taken from the first.
func align(ua, ub []unit) alignment {
	var al alignment
	spansA, spansB := spansBySeq(ua), spansBySeq(ub)
	keys := make([]seqKey, 0, len(spansA)+len(spansB))
	for k := range spansA {
		keys = append(keys, k)
	}
	for k := range spansB {
		if _, ok := spansA[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y seqKey) int { return cmp.Or(cmp.Compare(x.step, y.step), cmp.Compare(x.seq, y.seq)) })
	miss := func(in string, k seqKey, lo, hi int64) {
		al.missing = append(al.missing, MissingTensor{MissingIn: in, Step: k.step, Seq: k.seq, Pos: lo, NTok: hi - lo})
		if in == "A" {
			al.rowsA += hi - lo
		} else {
			al.rowsB += hi - lo
		}
	}
	for _, k := range keys {
		as, bs := spansA[k], spansB[k]
		i, j := 0, 0
		for i < len(as) && j < len(bs) {
			a, b := &as[i], &bs[j]
			switch {
			case a.hi <= b.lo:
				miss("B", k, a.lo, a.hi)
				i++
				continue
			case b.hi <= a.lo:
				miss("A", k, b.lo, b.hi)
				j++
				continue
			case a.lo < b.lo:
				miss("B", k, a.lo, b.lo)
				a.lo = b.lo
			case b.lo < a.lo:
				miss("A", k, b.lo, a.lo)
				b.lo = a.lo
			}
			hi := min(a.hi, b.hi)
			n := hi - a.lo
			rl := a.u.rowLen
			sz := int64(a.u.dt.Size())
			oa, ob := (a.lo-a.u.pos)*rl*sz, (b.lo-b.u.pos)*rl*sz
			al.pieces = append(al.pieces, piece{step: k.step, seq: k.seq, pos: a.lo, rows: n, rowLen: rl,
				a: a.u.data[oa : oa+n*rl*sz], b: b.u.data[ob : ob+n*rl*sz]})
			a.lo, b.lo = hi, hi
			if a.lo == a.hi {
				i++
			}
			if b.lo == b.hi {
				j++
			}
		}
		for ; i < len(as); i++ {
			miss("B", k, as[i].lo, as[i].hi)
		}
		for ; j < len(bs); j++ {
			miss("A", k, bs[j].lo, bs[j].hi)
		}
	}
	return al
}

// spansBySeq turns sorted units into non-overlapping spans per (step, seq).
func spansBySeq(us []unit) map[seqKey][]span {
	m := map[seqKey][]span{}
	for i := range us {
		u := &us[i]
		k := seqKey{u.step, u.seq}
		lo, hi := u.pos, u.pos+u.rows
		if s := m[k]; len(s) > 0 && s[len(s)-1].hi > lo {
			lo = s[len(s)-1].hi // overlap with an earlier unit: keep the earlier rows
		}
		if lo < hi {
			m[k] = append(m[k], span{u, lo, hi})
		}
	}
	return m
}
