package session

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"bitalign/capture"
)

// Session holds two open captures and their report (Load makes one), and answers the TUI's questions about
// them: which sequences an op has, and both sides' tensors of one op and sequence compared element by element
// (Pair). Its methods are safe for concurrent use.
type Session struct {
	A, B   *capture.Capture
	Report *Report

	ia, ib *sideIndex
	mu     sync.Mutex
	pairs  []*Pair // most recently used first
}

// pairCacheSize is how many pairs a Session keeps (each holds both tensors and a level per element).
const pairCacheSize = 4

// NewSession wraps two open captures and the report Diff gave for them. The session does not close them.
// Either capture may be nil (a logprob table's side: nothing to pair).
func NewSession(a, b *capture.Capture, r *Report) *Session {
	return &Session{A: a, B: b, Report: r, ia: indexSide(a), ib: indexSide(b)}
}

// Close closes both captures.
func (s *Session) Close() error {
	s.mu.Lock()
	s.pairs = nil
	s.mu.Unlock()
	var ea, eb error
	if s.A != nil {
		ea = s.A.Close()
	}
	if s.B != nil {
		eb = s.B.Close()
	}
	return cmp.Or(ea, eb)
}

// SeqID is one forward pass of one sequence.
type SeqID struct{ Step, Seq int64 }

// Seqs lists the (step, seq) pairs for which either side holds (op, role), in order.
func (s *Session) Seqs(op, role string) []SeqID {
	k := opKey{op, role}
	seen := map[SeqID]bool{}
	var out []SeqID
	for _, side := range []*sideIndex{s.ia, s.ib} {
		for _, i := range slices.Concat(side.byOp[k], side.fps[k]) {
			e := side.c.Entry(i)
			id := SeqID{e.Step, e.Seq}
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	slices.SortFunc(out, func(x, y SeqID) int { return cmp.Or(cmp.Compare(x.Step, y.Step), cmp.Compare(x.Seq, y.Seq)) })
	return out
}

// Pair returns both sides' tensors of (op, role) for one step and sequence as [tokens × features] matrices
// (shards reassembled, one-token tensors stacked, trailing dims flattened), with a comparison level per
// element computed once. Pairs are cached.
func (s *Session) Pair(op, role string, step, seq int64) (*Pair, error) {
	s.mu.Lock()
	for i, p := range s.pairs {
		if p.Op == op && p.Role == role && p.Step == step && p.Seq == seq {
			copy(s.pairs[1:i+1], s.pairs[:i])
			s.pairs[0] = p
			s.mu.Unlock()
			return p, nil
		}
	}
	s.mu.Unlock()
	p, err := s.buildPair(op, role, step, seq)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.pairs = append([]*Pair{p}, s.pairs...)
	if len(s.pairs) > pairCacheSize {
		s.pairs = s.pairs[:pairCacheSize]
	}
	s.mu.Unlock()
	return p, nil
}

func (s *Session) buildPair(op, role string, step, seq int64) (*Pair, error) {
	p, err := s.stackPair(op, role, step, seq)
	if err != nil {
		return nil, err
	}
	p.computeLevels()
	return p, nil
}

// stackPair is buildPair without the comparison (Levels, Hist, ...): both sides' rows, for callers that only
// look at their bytes.
func (s *Session) stackPair(op, role string, step, seq int64) (*Pair, error) {
	k := opKey{op, role}
	if fingerprintMode(s.ia, s.ib, k) {
		return nil, locatedError(s.ia, s.ib, k)
	}
	pick := func(side *sideIndex) ([]unit, error) {
		var idxs []int
		for _, i := range side.byOp[k] {
			if e := side.c.Entry(i); e.Step == step && e.Seq == seq {
				idxs = append(idxs, i)
			}
		}
		us, _, err := buildUnits(side.c, idxs)
		return us, err
	}
	ua, err := pick(s.ia)
	if err != nil {
		return nil, err
	}
	ub, err := pick(s.ib)
	if err != nil {
		return nil, err
	}
	if len(ua) == 0 && len(ub) == 0 {
		return nil, fmt.Errorf("session: no tensor of %s [%s] at step %d seq %d", op, role, step, seq)
	}
	ref := ua
	if len(ref) == 0 {
		ref = ub
	}
	if d := shapeProblem(ref, ub); len(ua) > 0 && len(ub) > 0 && d != "" {
		return nil, fmt.Errorf("session: %s [%s]: shapes differ: %s", op, role, d)
	}
	if d := shapeProblem(ref, ref); d != "" {
		return nil, fmt.Errorf("session: %s [%s]: shapes differ: %s", op, role, d)
	}
	u0 := &ref[0]
	f, err := formatOf(u0.dt)
	if err != nil {
		return nil, err
	}
	lo, hi := u0.pos, u0.pos
	for _, us := range [][]unit{ua, ub} {
		for _, u := range us {
			lo, hi = min(lo, u.pos), max(hi, u.pos+u.rows)
		}
	}
	p := &Pair{Op: op, Role: role, Step: step, Seq: seq, DType: u0.dt, Pos0: lo, Rows: int(hi - lo),
		Cols: int(u0.rowLen), Feat: u0.feat, f: f}
	if i := s.Report.FindOp(op, role); i >= 0 {
		p.Index = s.Report.Ops[i].Index
	}
	p.ULPDType, p.cmpf = u0.dt, f
	if i := s.Report.FindOp(op, role); i >= 0 && u0.dt == capture.F32 && s.Report.Ops[i].ULPDType == capture.BF16.String() {
		if p.cmpf, err = formatOf(capture.BF16); err != nil {
			return nil, err
		}
		p.ULPDType = capture.BF16
	}
	p.A, p.HasA = stack(ua, lo, p.Rows, u0.rowLen, f.size)
	p.B, p.HasB = stack(ub, lo, p.Rows, u0.rowLen, f.size)
	return p, nil
}

// stack lays units out as rows [lo, lo+rows): in place when one unit covers them all, else copied.
func stack(us []unit, lo int64, rows int, rowLen int64, size int) ([]byte, []bool) {
	has := make([]bool, rows)
	rb := rowLen * int64(size)
	if len(us) == 1 && us[0].pos == lo && us[0].rows == int64(rows) {
		for i := range has {
			has[i] = true
		}
		return us[0].data, has
	}
	out := make([]byte, int64(rows)*rb)
	for _, u := range us {
		for r := int64(0); r < u.rows; r++ {
			i := u.pos + r - lo
			if !has[i] { // rows two units hold: the first wins, as in Diff
				copy(out[i*rb:(i+1)*rb], u.data[r*rb:(r+1)*rb])
				has[i] = true
			}
		}
	}
	return out, has
}
