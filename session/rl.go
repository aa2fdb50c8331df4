package session

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"bitalign/capture"
	"bitalign/internal/fp"
	"bitalign/logprobs"
	"bitalign/session/view"
)

// RLOptions say how logprob tables are read and compared (bitalign diff's --seq-col ... --positions,
// --is-low/--is-high, --sequences).
type RLOptions struct {
	Columns   logprobs.Columns
	Positions logprobs.Numbering
	// PositionsSet: --positions was given, so it overrides what a table's metadata says.
	PositionsSet bool
	Thresholds   logprobs.Thresholds // zero fields: logprobs.DefaultThresholds
	// Sequences is how many of the worst sequences the reports list in full (0: DefaultSequences); the
	// first divergent op is found for those.
	Sequences int
}

// DefaultSequences is how many of the worst sequences a report lists unless --sequences says otherwise.
const DefaultSequences = 10

func (o RLOptions) shown() int {
	if o.Sequences <= 0 {
		return DefaultSequences
	}
	return o.Sequences
}

func (o RLOptions) thresholds() logprobs.Thresholds {
	t, d := o.Thresholds, logprobs.DefaultThresholds
	if t.ISLow == 0 && t.ISHigh == 0 {
		t.ISLow, t.ISHigh = d.ISLow, d.ISHigh
	}
	if t.TopK == 0 {
		t.TopK = d.TopK
	}
	if t.Detail == 0 {
		t.Detail = d.Detail
	}
	return t
}

// RLReport is the logprob section of a report: both sides' per-token log-probabilities compared with the
// metrics of docs/rl-metrics.md, sequence by sequence (Summary.Seqs, worst first).
type RLReport struct {
	*logprobs.Summary
	Step  int64 // the captures' step whose logprobs were compared (0 for tables)
	Shown int   // how many of the worst sequences the reports list
	// Captures: both sides are captures, so each listed sequence's first divergent op is known (First).
	Captures bool
	First    map[int64]*SeqDivergence
}

// SeqDivergence is one sequence's first divergent op: the earliest position where any op the report found
// divergent differs for that sequence, then the first such op in execution order.
type SeqDivergence struct {
	Op    string
	Role  string
	Index int32
	Step  int64
	Seq   int64
	Pos   int64
}

// Shown returns the listed (worst) sequences.
func (r *RLReport) ShownSeqs() []logprobs.SeqStats {
	return r.Seqs[:min(r.Shown, len(r.Seqs))]
}

// logprobsOp and the ops a capture's logprob table is read from (docs/design.md).
const (
	opTokens   = "tokens"
	opLogprobs = "logprobs"
	opLogits   = "logits"
	opSample   = "sample"
)

// TableOf reads a capture's per-token log-probabilities as a table: its `logprobs` op at position p is the
// table's position p+1 (the token it scores), whose id is the `tokens` op at p+1 when captured. Logits come
// along when the capture holds them at every logprob position, and each sequence's prompt length is one past
// its first `sample` position. Only the lowest step is read (the step returned); warn says what was left out.
// The table is nil when the capture has no `logprobs` op.
func TableOf(c *capture.Capture) (t *logprobs.Table, step int64, warn []string, err error) {
	return tableOf(indexSide(c))
}

func tableOf(ix *sideIndex) (*logprobs.Table, int64, []string, error) {
	c := ix.c
	lpIdx := ix.byOp[opKey{opLogprobs, "out"}]
	if len(lpIdx) == 0 {
		return nil, 0, nil, nil
	}
	var warn []string
	lps, _, err := buildUnits(c, lpIdx)
	if err != nil {
		return nil, 0, nil, err
	}
	if len(lps) == 0 {
		return nil, 0, nil, nil
	}
	step := lps[0].step
	for _, u := range lps {
		step = min(step, u.step)
	}
	keep := lps[:0]
	others := false
	for _, u := range lps {
		if u.step != step {
			others = true
			continue
		}
		if u.dt != capture.F32 || u.rowLen != 1 {
			return nil, 0, []string{fmt.Sprintf("%s: %s is %s with %d values per token, not one float32: no logprob comparison", c.Path(), opLogprobs, u.dt, u.rowLen)}, nil
		}
		keep = append(keep, u)
	}
	lps = keep
	if others {
		warn = append(warn, fmt.Sprintf("%s: logprobs of step %d only (the capture holds more steps)", c.Path(), step))
	}
	units := func(op string) []unit {
		us, _, err := buildUnits(c, ix.byOp[opKey{op, "out"}])
		if err != nil {
			return nil
		}
		out := us[:0]
		for _, u := range us {
			if u.step == step {
				out = append(out, u)
			}
		}
		return out
	}
	type rowKey struct{ seq, pos int64 }
	tokens := map[rowKey]int32{}
	for _, u := range units(opTokens) {
		if u.dt != capture.I32 || u.rowLen != 1 {
			continue
		}
		for r := range u.rows {
			tokens[rowKey{u.seq, u.pos + r}] = int32(binary.LittleEndian.Uint32(u.data[4*r:]))
		}
	}
	prompt := map[int64]int64{}
	samples := map[rowKey]int32{}
	for _, u := range units(opSample) {
		if p, ok := prompt[u.seq]; !ok || u.pos+1 < p {
			prompt[u.seq] = u.pos + 1
		}
		if u.dt != capture.I32 || u.rowLen != 1 {
			continue
		}
		for r := range u.rows {
			samples[rowKey{u.seq, u.pos + r}] = int32(binary.LittleEndian.Uint32(u.data[4*r:]))
		}
	}
	type logitRow struct {
		u *unit
		r int64
	}
	logits := map[rowKey]logitRow{}
	lg := units(opLogits)
	vocab := int64(0)
	for i := range lg {
		u := &lg[i]
		if u.dt != capture.F32 && u.dt != capture.BF16 || vocab != 0 && u.rowLen != vocab {
			logits = nil
			break
		}
		vocab = u.rowLen
		for r := range u.rows {
			logits[rowKey{u.seq, u.pos + r}] = logitRow{u, r}
		}
	}
	type row struct {
		seq, pos int64
		lp       float32
	}
	var rows []row
	for _, u := range lps {
		for r := range u.rows {
			rows = append(rows, row{u.seq, u.pos + r, math.Float32frombits(binary.LittleEndian.Uint32(u.data[4*r:]))})
		}
	}
	slices.SortStableFunc(rows, func(x, y row) int { return cmp.Or(cmp.Compare(x.seq, y.seq), cmp.Compare(x.pos, y.pos)) })
	rows = slices.CompactFunc(rows, func(x, y row) bool { return x.seq == y.seq && x.pos == y.pos }) // the first wins, as in Diff
	if len(rows) > logprobs.MaxTokens {
		return nil, 0, nil, fmt.Errorf("session: %s: more than %d logprobs", c.Path(), logprobs.MaxTokens)
	}
	for _, rw := range rows {
		if _, ok := logits[rowKey{rw.seq, rw.pos}]; !ok {
			logits = nil
			break
		}
	}
	t := &logprobs.Table{Path: c.Path(), Format: "capture", Side: c.Meta().Side, Layout: "capture", Positions: logprobs.Absolute,
		NTokens: len(rows)}
	if logits != nil && vocab > 0 {
		t.Vocab = int(vocab)
	}
	for lo := 0; lo < len(rows); {
		hi := lo + 1
		for hi < len(rows) && rows[hi].seq == rows[lo].seq {
			hi++
		}
		seq := rows[lo].seq
		q := logprobs.Seq{ID: seq, Prompt: -1, Token: make([]int32, hi-lo), Logprob: make([]float32, hi-lo), Pos: make([]int32, hi-lo)}
		if p, ok := prompt[seq]; ok {
			q.Prompt = p
		}
		if len(samples) > 0 {
			q.Sample = make([]int32, hi-lo)
		}
		if t.Vocab > 0 {
			q.Logits = seqLogits(hi-lo, func(k int) (*unit, int64) {
				lr := logits[rowKey{seq, rows[lo+k].pos}]
				return lr.u, lr.r
			}, vocab)
		}
		for k, rw := range rows[lo:hi] {
			if rw.pos+1 > logprobs.MaxTokens {
				return nil, 0, nil, fmt.Errorf("session: %s: sequence %d: position %d out of range", c.Path(), rw.seq, rw.pos)
			}
			q.Pos[k] = int32(rw.pos + 1)
			q.Token[k] = logprobs.NoToken
			if tok, ok := tokens[rowKey{seq, rw.pos + 1}]; ok {
				q.Token[k] = tok
			}
			q.Logprob[k] = rw.lp
			if q.Sample != nil {
				q.Sample[k] = logprobs.NoToken
				if tok, ok := samples[rowKey{seq, rw.pos}]; ok {
					q.Sample[k] = tok
				}
			}
		}
		t.Seqs = append(t.Seqs, q)
		lo = hi
	}
	return t, step, warn, nil
}

// dropLogits forgets the logits of t's sequences (views of a capture's mapping: see seqLogits); t may be nil.
func dropLogits(t *logprobs.Table) {
	if t == nil {
		return
	}
	for i := range t.Seqs {
		t.Seqs[i].Logits = nil
	}
}

// seqLogits is a sequence's n logits rows of vocab values (row k is row r of unit u, at(k)) as float32: a view
// of the capture's mapping (valid until it is closed) when they are consecutive rows of one f32 unit, as when
// a tensor holds a sequence's prefill, else decoded into a new slice.
func seqLogits(n int, at func(k int) (*unit, int64), vocab int64) []float32 {
	u0, r0 := at(0)
	view := u0.dt == capture.F32
	for k := 1; k < n && view; k++ {
		u, r := at(k)
		view = u == u0 && r == r0+int64(k)
	}
	if view {
		if v, ok := fp.F32View(u0.data[r0*vocab*4 : (r0+int64(n))*vocab*4]); ok {
			return v
		}
	}
	out := make([]float32, int64(n)*vocab)
	for k := range n {
		u, r := at(k)
		dst := out[int64(k)*vocab : int64(k+1)*vocab]
		src := u.data[r*vocab*int64(u.dt.Size()):]
		if u.dt == capture.BF16 {
			for x := range dst {
				dst[x] = fp.BF16ToF32(binary.LittleEndian.Uint16(src[2*x:]))
			}
			continue
		}
		for x := range dst {
			dst[x] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*x:]))
		}
	}
	return out
}

// FirstDivergenceOf finds one sequence's first divergent op (SeqDivergence): over the ops the report found
// divergent, the earliest position where the sequence's tensors differ bit for bit, then execution order.
// nil when they agree for this sequence.
func (s *Session) FirstDivergenceOf(step, seq int64) (*SeqDivergence, error) {
	var best *SeqDivergence
	var bestOp *OpStat
	for i := range s.Report.Ops {
		o := &s.Report.Ops[i]
		if !o.Divergent() {
			continue
		}
		p, err := s.stackPair(o.Op, o.Role, step, seq)
		if err != nil {
			continue // the op has no tensor of this sequence
		}
		rb := p.Cols * p.f.size
		for r := 0; r < p.Rows; r++ {
			if !p.HasA[r] || !p.HasB[r] || bytes.Equal(p.A[r*rb:(r+1)*rb], p.B[r*rb:(r+1)*rb]) {
				continue
			}
			pos := p.Pos0 + int64(r)
			if best == nil || pos < best.Pos || pos == best.Pos && opOrder(o.Index, bestOp.Index, opKey{o.Op, o.Role}, opKey{bestOp.Op, bestOp.Role}) < 0 {
				best = &SeqDivergence{Op: o.Op, Role: o.Role, Index: o.Index, Step: step, Seq: seq, Pos: pos}
				bestOp = o
			}
			break
		}
	}
	return best, nil
}

// compareTables compares two sides' tables into the report's logprob section.
func compareTables(ctx context.Context, a, b *logprobs.Table, step int64, o RLOptions) (*RLReport, error) {
	sum, err := logprobs.Compare(ctx, a, b, o.thresholds())
	if err != nil {
		return nil, err
	}
	return &RLReport{Summary: sum, Step: step, Shown: o.shown()}, nil
}

// RecordLine is the bitalign_capture call that records only the listed sequences in full next time (for a
// logprob-only pair): ids are the forward's sequence ids, one per batch row.
func (r *RLReport) RecordLine() string {
	var ids []string
	for _, q := range r.ShownSeqs() {
		if q.Differs() {
			ids = append(ids, strconv.FormatInt(q.Seq, 10))
		}
	}
	if len(ids) == 0 {
		return ""
	}
	return fmt.Sprintf("rec.batch(seq_ids=ids, record_mask=np.isin(ids, [%s])[:, None].repeat(input_ids.shape[1], 1))", strings.Join(ids, ", "))
}

// Headline is the logprob section in one line (the verdict line's RL figures): how many tokens are bitwise
// equal, the largest |Δ|, the k3 KL estimate, how many sequences differ.
func (r *RLReport) Headline() string {
	o := &r.Overall
	n := int64(len(r.Seqs) + len(r.OnlyA) + len(r.OnlyB))
	if !o.Differs() && r.SeqsDiffer == 0 {
		return fmt.Sprintf("logprobs bitwise equal (%s in %s)", plural(int(o.Tokens), "token"), plural(int(n), "sequence"))
	}
	return fmt.Sprintf("logprobs: %s of %s sequences differ, %s of tokens bitwise equal, max |Δ| %s, k3 KL %s",
		strconv.FormatInt(r.SeqsDiffer, 10), strconv.FormatInt(n, 10), pctf(o.EqualFrac()), sci(o.MaxAbs), sci(o.K3))
}

// pctf formats a fraction as a percentage: "60.9%", "100%", "<0.1%".
func pctf(f float64) string {
	switch {
	case f == 1:
		return "100%"
	case f == 0:
		return "0%"
	case f < 0.001:
		return "<0.1%"
	case f > 0.999:
		return ">99.9%"
	}
	return strconv.FormatFloat(100*f, 'f', 1, 64) + "%"
}

// firstDiffString is a sequence's first differing position, "-" when none.
func firstDiffString(q *logprobs.SeqStats) string {
	if q.FirstDiff < 0 {
		return "-"
	}
	return strconv.FormatInt(q.FirstDiff, 10)
}

// rlSeqHeader and rlSeqRow are the worst sequences' table in the text and Markdown reports.
var rlSeqHeader = []string{"seq", "tokens", "equal", "first diff", "max |Δ|", "mean |Δ|", "k3 KL", "IS max", "outside IS", "first divergent op"}

func (r *RLReport) seqRow(q *logprobs.SeqStats) []string {
	first := ""
	if d := r.First[q.Seq]; d != nil {
		first = fmt.Sprintf("%s [%s] pos %d", d.Op, d.Role, d.Pos)
	} else if r.Captures && q.Differs() {
		first = "(none)"
	}
	extra := ""
	if n := seqNote(q); n != "" {
		extra = " (" + n + ")"
	}
	return []string{strconv.FormatInt(q.Seq, 10), strconv.FormatInt(q.Tokens, 10) + extra, pctf(q.EqualFrac()),
		firstDiffString(q), sci(q.MaxAbs), sci(q.MeanAbs), sci(q.K3), fmtG(q.ISMax), pctf(q.ISOutsideFrac()), first}
}

func fmtG(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// rlLines are the overall figures, one "name: value" line each (text and Markdown reports).
func (r *RLReport) lines() []string {
	o := &r.Overall
	t := r.Thresholds
	out := []string{
		fmt.Sprintf("sides: A %s, B %s; positions %s", r.A.Format, r.B.Format, r.Positions),
		fmt.Sprintf("tokens compared: %d in %s (%d bitwise equal, %s; max %s float32 ULP)", o.Tokens, plural(len(r.Seqs), "sequence"), o.Equal,
			pctf(o.EqualFrac()), ulpString(o.MaxULP)),
		fmt.Sprintf("Δ = A − B: max |Δ| %s, mean |Δ| %s, mean Δ %s", sci(o.MaxAbs), sci(o.MeanAbs), sci(o.MeanDiff)),
		fmt.Sprintf("KL(B‖A) estimators: k1 %s, k2 %s, k3 %s", sci(o.K1), sci(o.K2), sci(o.K3)),
		fmt.Sprintf("importance ratio exp(Δ): min %s, max %s, mean %s; outside [%s, %s]: %s; χ² %s", fmtG(o.ISMin), fmtG(o.ISMax),
			fmtG(o.ISMean), fmtG(t.ISLow), fmtG(t.ISHigh), pctf(o.ISOutsideFrac()), sci(o.Chi2)),
		fmt.Sprintf("token_mult_prob_error %s, rollout_train_prob_diff %s, PPL A %s / B %s (ratio %s)", fmtG(o.MultProbErr),
			sci(o.ProbDiff), fmtG(o.PPLA), fmtG(o.PPLB), fmtG(o.PPLRatio)),
		fmt.Sprintf("sequences that differ: %d of %d", r.SeqsDiffer, len(r.Seqs)+len(r.OnlyA)+len(r.OnlyB)),
	}
	if o.Dist > 0 {
		out = append(out, fmt.Sprintf("full vocabulary (%d tokens with logits on both sides): KL %s, TV %s, top-1 agreement %s, top-%d overlap %s, greedy choice differs at %s",
			o.Dist, sci(o.KL), sci(o.TV), pctf(o.Top1()), t.TopK, pctf(o.TopKOverlap), pctf(o.GreedyDifferFrac())))
	}
	var probs []string
	if o.NonFinite > 0 {
		probs = append(probs, plural(int(o.NonFinite), "token")+" with a NaN or ±Inf on one side")
	}
	if o.TokenDiffers > 0 {
		probs = append(probs, plural(int(o.TokenDiffers), "position")+" whose token ids differ (not compared)")
	}
	if o.SampleDiffers > 0 {
		probs = append(probs, plural(int(o.SampleDiffers), "position")+" whose sampled tokens differ (the captures' sample op)")
	}
	if o.OnlyA+o.OnlyB > 0 {
		probs = append(probs, fmt.Sprintf("positions on one side only: %d in A, %d in B", o.OnlyA, o.OnlyB))
	}
	if len(r.OnlyA)+len(r.OnlyB) > 0 {
		probs = append(probs, fmt.Sprintf("sequences on one side only: %d in A, %d in B", len(r.OnlyA), len(r.OnlyB)))
	}
	for _, p := range probs {
		out = append(out, "problem: "+p)
	}
	return out
}

// TablePair reports whether the report compares logprobs only (a logprob table on a side: no ops).
func (r *Report) TablePair() bool { return r.RL != nil && len(r.Ops) == 0 }

// within checks a logprob-only pair against a tolerance: --max-ulp bounds the log-probabilities' float32
// ULPs, --max-rel their |Δ| (the log-probability is its own scale); a NaN or ±Inf against a number fails
// both; token ids that differ and (unless ignoreMissing) positions or sequences one side lacks are problems.
func (r *RLReport) within(c *Check, ignoreMissing bool) {
	o := &r.Overall
	const name = "logprobs"
	c.WorstULP, c.WorstULPOp, c.WorstRel, c.WorstRelOp = o.MaxULP, name, o.MaxAbs, name
	if o.NonFinite > 0 {
		c.NaNOp = name
	}
	c.ULPHeld = !c.HasULP || o.MaxULP <= c.MaxULP && o.NonFinite == 0
	c.RelHeld = !c.HasRel || o.MaxAbs <= c.MaxRel && o.NonFinite == 0
	if o.TokenDiffers > 0 {
		c.Problems = append(c.Problems, name+": "+plural(int(o.TokenDiffers), "token id")+" differ")
	}
	if !ignoreMissing {
		if n := o.OnlyA + o.OnlyB; n > 0 {
			c.Problems = append(c.Problems, plural(int(n), "position")+" on one side only")
		}
		if n := len(r.OnlyA) + len(r.OnlyB); n > 0 {
			c.Problems = append(c.Problems, plural(n, "sequence")+" on one side only")
		}
	}
}

// sniffInput tells a logprob table from a capture; a pickle is refused here, every other doubt is left to
// capture.Open, whose errors say what is wrong with a capture.
func sniffInput(path string) (logprobs.Kind, error) {
	k, err := logprobs.Sniff(path)
	if err != nil && strings.Contains(err.Error(), "pickle") {
		return k, err
	}
	if err != nil && errors.Is(err, logprobs.ErrNotTable) {
		return k, err // named as a table (.parquet, .jsonl): say what it is not, not that it is no capture
	}
	if err != nil {
		return logprobs.KindCapture, nil // capture.Open words the problem
	}
	return k, nil
}

// addRL compares the captures' logprobs (when both hold them) and finds the listed sequences' first
// divergent ops.
func (l *Loaded) addRL(ctx context.Context, o RLOptions, progress func(view.Progress)) error {
	ta, step, wa, err := tableOf(l.ia)
	if err != nil {
		return err
	}
	tb, stepB, wb, err := tableOf(l.ib)
	if err != nil {
		return err
	}
	if ta == nil || tb == nil {
		return nil
	}
	if step != stepB {
		l.Report.Warnings = append(l.Report.Warnings, fmt.Sprintf("logprobs: A's first step is %d, B's %d: not compared", step, stepB))
		return nil
	}
	l.Report.Warnings = append(l.Report.Warnings, append(wa, wb...)...)
	progress(view.Progress{Stage: "comparing the logprobs"})
	rr, err := compareTables(ctx, ta, tb, step, o)
	if err != nil {
		return err
	}
	dropLogits(ta) // compared: nothing may read the mapping through them once the captures are closed
	dropLogits(tb)
	rr.Captures = true
	rr.First = map[int64]*SeqDivergence{}
	if len(l.Report.Divergent()) > 0 {
		for _, q := range rr.ShownSeqs() {
			if !q.Differs() {
				continue
			}
			d, err := l.FirstDivergenceOf(step, q.Seq)
			if err != nil {
				return err
			}
			if d != nil {
				rr.First[q.Seq] = d
			}
		}
	}
	l.Report.RL = rr
	return nil
}

// loadTables loads a pair with a logprob table on at least one side: both sides become tables (a capture's
// through TableOf) and only their logprobs are compared.
func loadTables(ctx context.Context, in Inputs, l *Loaded, ka, kb logprobs.Kind, progress func(view.Progress)) (*Loaded, error) {
	if in.Checkpoint != "" {
		return nil, fmt.Errorf("session: --checkpoint %s: replay needs captures on both sides, and %s is a logprob table", in.Checkpoint,
			map[bool]string{true: in.A, false: in.B}[ka.IsTable()])
	}
	var warns []string
	var mu sync.Mutex
	side := func(path string, k logprobs.Kind, other string) (*logprobs.Table, CaptureInfo, error) {
		if k.IsTable() {
			progress(view.Progress{Stage: "reading " + path})
			t, err := logprobs.Read(ctx, path, logprobs.Options{Columns: in.RL.Columns, Positions: in.RL.Positions,
				PositionsSet: in.RL.PositionsSet})
			if err != nil {
				return nil, CaptureInfo{}, err
			}
			if t.Side == "" { // the file does not say: its name does
				t.Side = filepath.Base(path)
			}
			var size int64
			if st, err := os.Stat(path); err == nil {
				size = st.Size()
			}
			desc := fmt.Sprintf("%s logprob table, %s, %s, %s", t.Format, t.Layout, plural(len(t.Seqs), "sequence"), plural(t.Tokens(), "token"))
			return t, CaptureInfo{Path: path, Side: t.Side, Producer: "logprob table", Table: desc, Bytes: size}, nil
		}
		c, err := openCapture(path)
		if err != nil {
			return nil, CaptureInfo{}, err
		}
		defer c.Close()
		info := captureInfo(c)
		t, _, w, err := TableOf(c)
		if err != nil {
			return nil, CaptureInfo{}, err
		}
		dropLogits(t) // views of c's mapping, closed on return (and a file table has none to compare with)
		if t == nil {
			return nil, CaptureInfo{}, fmt.Errorf("session: %s: the capture has no %s op to compare with the logprob table %s", path, opLogprobs, other)
		}
		mu.Lock()
		warns = append(warns, w...)
		mu.Unlock()
		return t, info, nil
	}
	// Both sides are read at once (each Parquet reader also decodes its columns in parallel).
	var ta, tb *logprobs.Table
	var ia, ib CaptureInfo
	var errA, errB error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tb, ib, errB = side(in.B, kb, in.A)
	}()
	ta, ia, errA = side(in.A, ka, in.B)
	wg.Wait()
	if err := cmp.Or(errA, errB); err != nil {
		return nil, err
	}
	// A file that does not say what its positions count takes the other file's declared numbering.
	if ka.IsTable() && kb.IsTable() && ta.Declared != tb.Declared {
		if ta.Declared {
			tb.Positions = ta.Positions
		} else {
			ta.Positions = tb.Positions
		}
	}
	progress(view.Progress{Stage: "comparing the logprobs"})
	rr, err := compareTables(ctx, ta, tb, 0, in.RL)
	if err != nil {
		return nil, err
	}
	o := &rr.Overall
	r := &Report{A: ia, B: ib, RL: rr, Warnings: warns, Compared: o.Tokens, Mismatched: o.Tokens - o.Equal}
	var cfg config
	for _, opt := range in.Options {
		opt(&cfg)
	}
	if len(cfg.ops) > 0 {
		return nil, fmt.Errorf("session: --ops selects ops of captures, and a logprob table has none (%s)", map[bool]string{true: in.A, false: in.B}[ka.IsTable()])
	}
	r.IgnoreMissing = cfg.ignoreMissing
	missing := o.OnlyA + o.OnlyB + int64(len(rr.OnlyA)+len(rr.OnlyB))
	r.Identical = o.Tokens > 0 && o.Equal == o.Tokens && o.TokenDiffers == 0 && (missing == 0 || r.IgnoreMissing)
	if cfg.tolerance != nil {
		c := r.Within(*cfg.tolerance)
		r.Check = &c
	}
	l.Session = NewSession(nil, nil, r)
	return l, nil
}

// convertRL is the logprob section as the TUI's sequences view draws it.
func convertRL(r *Report) *view.RL {
	rl := r.RL
	out := &view.RL{Headline: rl.Headline(), Captures: rl.Captures, Step: rl.Step}
	if r.TablePair() {
		out.Verdict = r.Verdict()
	}
	for i := range rl.Seqs {
		q := &rl.Seqs[i]
		out.Seqs = append(out.Seqs, view.RLSeq{Seq: q.Seq, Tokens: q.Tokens, Equal: q.Equal, FirstDiff: q.FirstDiff,
			MaxAbs: q.MaxAbs, MeanAbs: q.MeanAbs, K3: q.K3, ISMax: q.ISMax, Note: seqNote(q), Differs: q.Differs(),
			PosLo: q.PosLo, PosHi: q.PosHi, Profile: q.Profile})
	}
	return out
}

// seqNote names what differs besides the log-probabilities' bits: token ids, draws, missing positions.
func seqNote(q *logprobs.SeqStats) string {
	var parts []string
	if q.TokenDiffers > 0 {
		parts = append(parts, differs(q.TokenDiffers, "token id"))
	}
	if q.SampleDiffers > 0 {
		parts = append(parts, differs(q.SampleDiffers, "draw"))
	}
	if q.NonFinite > 0 {
		parts = append(parts, plural(int(q.NonFinite), "NaN/Inf"))
	}
	if n := q.OnlyA + q.OnlyB; n > 0 {
		parts = append(parts, plural(int(n), "position")+" on one side")
	}
	return strings.Join(parts, ", ")
}

// differs is "1 token id differs", "3 draws differ".
func differs(n int64, what string) string {
	if n == 1 {
		return "1 " + what + " differs"
	}
	return plural(int(n), what) + " differ"
}
