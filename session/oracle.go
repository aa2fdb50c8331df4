package session

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"

	"bitalign/capture"
	"bitalign/engine"
	"bitalign/internal/par"
	"bitalign/kernels"
)

// LocalErr is one op's local error at one (step, seq): for each side, the side's captured output and the
// canonical engine's re-execution (RunOp) measured against the oracle of that side's own captured inputs
// (engine.Oracle: the exact result of those inputs, rounded once). A correctly working kernel is a few ulps
// from its own oracle in bf16/f16 and a small fraction of the row's scale in float32; a bug is far more, on its
// side only, whatever the other side did.
type LocalErr struct {
	Op        string
	Index     int // the op's execution index (engine.OpIndex)
	Step, Seq int64
	A, B      LocalSide
}

// LocalSide is the local error of one side's computation of an op.
type LocalSide struct {
	Err string // why this side could not be measured ("" when it was): no output, missing inputs, ...
	// Positions measured: every position at which the side holds the op's output (in runs of consecutive
	// positions, each run one oracle call).
	Positions int
	// Inputs are the producers the oracle read: engine.Producers, or for the attention without captured
	// q_rope/k_rope, engine.AltProducers (the projections, rotated by the checkpoint's RoPE).
	Inputs []string
	// DType is the precision compared in: the captured dtype, or the model dtype when a float32 capture holds
	// only model-dtype values (narrowedDType).
	DType    capture.DType
	Captured ErrStats // the side's captured output vs the oracle
	Engine   ErrStats // the canonical engine's RunOp from the same inputs vs the oracle (in the engine's dtype)
	// EngineErr: why RunOp could not run from these inputs ("" when it ran).
	EngineErr string
}

// ErrStats measures an output against the oracle element by element.
type ErrStats struct {
	DType    capture.DType // the dtype the distances are counted in
	Elements int64
	Inexact  int64  // elements whose bits differ from the oracle's (> 0 ulp)
	NaN      int64  // elements where one of the two is NaN and the other is not
	MaxULP   uint64 // the largest distance in ulps of DType, NaN against a number left out
	// Scale is max |out − oracle| / RMS(oracle row) (for per-token scalars such as logprobs, RMS over the
	// measured positions): the error relative to the magnitude of the values around it. It is the measure for
	// float32 outputs, where a sum that cancels is many ulps off in any correct kernel.
	Scale float64
	// OutOfTolerance counts the elements no correct kernel gives: more than ToleranceULP ulps and more than
	// ToleranceScale of the row's RMS from the oracle (or NaN against a number). Either alone is not enough: a
	// sum that cancels is many ulps off in small elements, a one-ulp rounding of a large element is a sizeable
	// fraction of the RMS.
	OutOfTolerance int64
	WorstULP       *Coord // the element of MaxULP (nil when every element is exact)
	WorstScale     *Coord // the element of Scale
	// Local is the largest local error of one element, in ULPs: the smaller of its ULP distance and its
	// distance in ULPs at the row's scale (|out − oracle| / RMS / ε, ε the ULP of 1.0 in DType). Each measure
	// alone misleads: an element near zero whose sum cancels is thousands of ULPs off in any correct kernel
	// (but a tiny fraction of the row's scale), and one ULP of an outlier a hundred times the RMS is a hundred
	// ULPs at the row's scale. A correct kernel is within an ULP or two in the smaller of the two; a bug is
	// far off in both (docs/audit.md).
	Local      float64
	WorstLocal *Coord // the element of Local
}

// The tolerance of a correct kernel (ErrStats.OutOfTolerance; docs/arithmetic.md, "The oracle", has the measurements). The
// canonical engine is at most 2 ulps (bf16, f16) and 2^-20.3 of the row's RMS (float32 sums over 64..512 terms)
// from its oracle; a float32 accumulation over K terms grows as √K·2^-24, so 2^-16 leaves room for K in the
// ten thousands. The bugs measured are 10^-2 of the RMS and more (approximate exp, bf16 all-reduce partials,
// stale weights, a scaled weight row).
const (
	ToleranceULP   = 4
	ToleranceScale = 0x1p-16
)

// OK reports whether every element is within the tolerance of a correct kernel.
func (e ErrStats) OK() bool { return e.OutOfTolerance == 0 }

// LocalOptions select and drive LocalErrors.
type LocalOptions struct {
	Ops  []string // ops to measure (nil: every op of the model with an oracle: all but tokens and sample)
	Seqs []SeqID  // (step, seq) pairs (nil: every one either side holds the op for)
	// Workers is how many (op, step, seq) run at once (0: GOMAXPROCS).
	Workers int
	// Progress, if set, is called after each (op, step, seq), with how many are done of how many; calls are
	// serialised.
	Progress func(done, total int)
}

// LocalError measures op's local error at (step, seq) on both sides of s (LocalErr). m is the model both
// sides ran.
func LocalError(ctx context.Context, s *Session, m *engine.Model, op string, step, seq int64) (*LocalErr, error) {
	if engine.OpIndex(m.Config, op) < 0 || !hasOracle(op) {
		return nil, fmt.Errorf("session: local error: %s is not an op with an oracle in the %s model", op, m.Config.Architecture)
	}
	res, err := LocalErrors(ctx, s, m, LocalOptions{Ops: []string{op}, Seqs: []SeqID{{step, seq}}})
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("session: local error: no %s tensor at step %d seq %d on either side", op, step, seq)
	}
	return &res[0], nil
}

// LocalErrors measures the local error of every selected op at every selected (step, seq) either side holds,
// in parallel, and returns them in execution order, then by step and sequence. A side that cannot be measured
// has its reason in LocalSide.Err; only a cancelled ctx or an op the model lacks fails the call.
func LocalErrors(ctx context.Context, s *Session, m *engine.Model, opts LocalOptions) ([]LocalErr, error) {
	ops := opts.Ops
	if ops == nil {
		for _, op := range engine.OpNames(m.Config) {
			if hasOracle(op) {
				ops = append(ops, op)
			}
		}
	}
	for _, op := range ops {
		if engine.OpIndex(m.Config, op) < 0 || !hasOracle(op) {
			return nil, fmt.Errorf("session: local error: %s is not an op with an oracle in the %s model", op, m.Config.Architecture)
		}
	}
	sides := [2]*oracleSide{indexOracleSide(s.A), indexOracleSide(s.B)}
	var want map[SeqID]bool
	if opts.Seqs != nil {
		want = map[SeqID]bool{}
		for _, id := range opts.Seqs {
			want[id] = true
		}
	}
	var jobs []LocalErr
	for _, op := range ops {
		seen := map[SeqID]bool{}
		for _, side := range sides {
			for id := range side.seqs[op] {
				if !seen[id] && (want == nil || want[id]) {
					seen[id] = true
					jobs = append(jobs, LocalErr{Op: op, Index: engine.OpIndex(m.Config, op), Step: id.Step, Seq: id.Seq})
				}
			}
		}
	}
	slices.SortFunc(jobs, func(x, y LocalErr) int {
		return cmp.Or(cmp.Compare(x.Index, y.Index), cmp.Compare(x.Step, y.Step), cmp.Compare(x.Seq, y.Seq))
	})
	var (
		mu   sync.Mutex
		done int
	)
	par.Each(len(jobs), opts.Workers, func() bool { return ctx.Err() != nil }, func(i int) {
		j := &jobs[i]
		j.A = sides[0].measure(m, j.Op, j.Step, j.Seq)
		j.B = sides[1].measure(m, j.Op, j.Step, j.Seq)
		mu.Lock()
		done++
		if opts.Progress != nil {
			opts.Progress(done, len(jobs))
		}
		mu.Unlock()
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// hasOracle: tokens are an input and sample a rule; every other op is arithmetic.
func hasOracle(op string) bool { return engine.HasOracle(op) }

// oracleSide indexes one capture's output tensors by (step, seq, op) for building OpInputs.
type oracleSide struct {
	c     *capture.Capture
	at    map[oracleKey][]int       // (step, seq, op) → entry indices
	seqs  map[string]map[SeqID]bool // op → the (step, seq) it has
	final map[SeqID]int32           // Meta.Extra.final_tokens: the token after a sequence's last position
}

type oracleKey struct {
	id SeqID
	op string
}

func indexOracleSide(c *capture.Capture) *oracleSide {
	o := &oracleSide{c: c, at: map[oracleKey][]int{}, seqs: map[string]map[SeqID]bool{}, final: map[SeqID]int32{}}
	for i := 0; i < c.Len(); i++ {
		e := c.Entry(i)
		if e.Role != "" && e.Role != "out" {
			continue
		}
		id := SeqID{e.Step, e.Seq}
		k := oracleKey{id, e.Op}
		o.at[k] = append(o.at[k], i)
		if o.seqs[e.Op] == nil {
			o.seqs[e.Op] = map[SeqID]bool{}
		}
		o.seqs[e.Op][id] = true
	}
	// the engine and bitalign_capture write the last targets as [[step, seq, token], ...]
	var ex struct {
		FinalTokens [][3]int64 `json:"final_tokens"`
	}
	if meta := c.Meta(); len(meta.Extra) > 0 && json.Unmarshal(meta.Extra, &ex) == nil {
		for _, f := range ex.FinalTokens {
			o.final[SeqID{f[0], f[1]}] = int32(f[2])
		}
	}
	return o
}

// inputs gathers what Oracle and RunOp read for op at (step, seq): the producers (both attention input sets),
// the tokens and samples, the op's own output, and the final token as a `tokens` row after the last one.
func (o *oracleSide) inputs(m *engine.Model, op string, step, seq int64) (engine.OpInputs, error) {
	id := SeqID{step, seq}
	in := engine.OpInputs{Step: step, Seq: seq, Tensors: map[string][]capture.Tensor{}}
	need := append([]string{op, engine.OpTokens, engine.OpSample}, engine.Producers(m.Config, op)...)
	need = append(need, engine.AltProducers(m.Config, op)...)
	for _, name := range need {
		if _, done := in.Tensors[name]; done {
			continue
		}
		for _, i := range o.at[oracleKey{id, name}] {
			t, err := o.c.Tensor(i)
			if err != nil {
				return in, err
			}
			in.Tensors[name] = append(in.Tensors[name], t)
		}
	}
	if tok, ok := o.final[id]; ok && len(in.Tensors[engine.OpTokens]) > 0 {
		end := int64(0)
		for _, t := range in.Tensors[engine.OpTokens] {
			end = max(end, t.Pos+t.NTok)
		}
		in.Tensors[engine.OpTokens] = append(in.Tensors[engine.OpTokens], capture.Tensor{Step: step, Seq: seq,
			Pos: end, NTok: 1, Op: engine.OpTokens, Role: "out", DType: capture.I32, Shape: []int64{1},
			Shard: capture.NoShard, Data: binary.LittleEndian.AppendUint32(nil, uint32(tok))})
	}
	return in, nil
}

// measure runs the oracle of op from this side's inputs over every run of positions the side holds, and
// measures the side's output and the engine's against it.
func (o *oracleSide) measure(m *engine.Model, op string, step, seq int64) LocalSide {
	var ls LocalSide
	in, err := o.inputs(m, op, step, seq)
	if err != nil {
		ls.Err = err.Error()
		return ls
	}
	if len(in.Tensors[op]) == 0 {
		ls.Err = fmt.Sprintf("no %s output at step %d seq %d", op, step, seq)
		return ls
	}
	ls.Inputs = engine.Producers(m.Config, op)
	if alt := engine.AltProducers(m.Config, op); alt != nil && (len(in.Tensors[ls.Inputs[0]]) == 0 || len(in.Tensors[ls.Inputs[1]]) == 0) {
		ls.Inputs = alt
	}
	rows, err := m.Captured(op, in)
	if err != nil {
		ls.Err = err.Error()
		return ls
	}
	runs := rows.Runs()
	if len(runs) == 0 {
		ls.Err = fmt.Sprintf("no position of %s at step %d seq %d is complete (a rank's shard missing?)", op, step, seq)
		return ls
	}
	got := make([]capture.Tensor, len(runs))
	for i, run := range runs {
		if got[i], err = rows.Tensor(run[0], run[1]); err != nil {
			ls.Err = err.Error()
			return ls
		}
	}
	ls.DType = narrowedDType(got, m.Config.DType)
	var capAcc, engAcc statsAcc
	for i, run := range runs {
		in.Pos, in.N = run[0], run[1]
		oracle, err := m.Oracle(op, in, ls.DType)
		if err != nil {
			ls.Err = err.Error()
			return ls
		}
		if err := capAcc.add(got[i], oracle); err != nil {
			ls.Err = err.Error()
			return ls
		}
		ls.Positions += run[1]
		if ls.EngineErr != "" {
			continue
		}
		eng, err := m.RunOp(op, in)
		if err != nil {
			ls.EngineErr = err.Error()
			continue
		}
		eo := oracle
		if eng.DType != oracle.DType {
			if eo, err = m.Oracle(op, in, eng.DType); err != nil {
				ls.EngineErr = err.Error()
				continue
			}
		}
		if err := engAcc.add(eng, eo); err != nil {
			ls.EngineErr = err.Error()
		}
	}
	ls.Captured, ls.Engine = capAcc.ErrStats, engAcc.ErrStats
	return ls
}

// narrowedDType is the precision a side's output (its runs of positions) is compared in: its captured dtype,
// except float32 tensors of a bf16 or f16 model that hold at least narrowMin elements in all, every one a value
// of the model dtype: that side computed the op in the model dtype and widened it when recording (transformers'
// lm_head runs in the model dtype; bitalign_capture stores logits as float32). The chance that narrowMin float32
// values that were not rounded to bf16 all are bf16 values is 2^-1024.
func narrowedDType(ts []capture.Tensor, model capture.DType) capture.DType {
	if len(ts) == 0 {
		return capture.InvalidDType
	}
	if model != capture.BF16 && model != capture.F16 {
		return ts[0].DType
	}
	kd := kernels.BF16
	if model == capture.F16 {
		kd = kernels.F16
	}
	n := 0
	for _, t := range ts {
		if t.DType != capture.F32 {
			return t.DType
		}
		for i := 0; i+4 <= len(t.Data); i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(t.Data[i:]))
			if r := kd.Round(v); math.Float32bits(r) != math.Float32bits(v) && v == v {
				return capture.F32
			}
		}
		n += len(t.Data) / 4
	}
	if n < narrowMin {
		return capture.F32
	}
	return model
}

// narrowMin is the fewest elements narrowedDType narrows (64 random float32 values all bf16: 2^-1024).
const narrowMin = 64

// statsAcc accumulates ErrStats over runs of positions.
type statsAcc struct{ ErrStats }

// add measures out against the oracle (same positions and shape; out may be a float32 tensor of the oracle's
// narrower dtype, see narrowedDType).
func (a *statsAcc) add(out, oracle capture.Tensor) error {
	f, err := formatOf(oracle.DType)
	if err != nil {
		return err
	}
	data := out.Data
	if out.DType != oracle.DType {
		if data, err = narrowBytes(out, oracle.DType); err != nil {
			return err
		}
	}
	if len(data) != len(oracle.Data) {
		return fmt.Errorf("session: %s at pos %d: %d bytes of output against %d of oracle", out.Op, out.Pos, len(data), len(oracle.Data))
	}
	a.DType = oracle.DType
	n := len(data) / f.size
	// rows of features are scaled by their own RMS; per-token scalars (logprobs) by the RMS over the run
	scalar := len(oracle.Shape) < 2 || oracle.Shape[1] == 1
	width := n
	if !scalar {
		width = int(oracle.Shape[1])
	}
	at := func(i int) *Coord {
		if scalar {
			return &Coord{Step: out.Step, Seq: out.Seq, Pos: out.Pos + int64(i)}
		}
		col := int64(i % width)
		return &Coord{Step: out.Step, Seq: out.Seq, Pos: out.Pos + int64(i/width), Col: col, Element: []int64{col}}
	}
	for r := 0; r < n/width; r++ {
		var ss float64
		for i := r * width; i < (r+1)*width; i++ {
			v := f.value(f.load(oracle.Data, i))
			ss += v * v
		}
		rms := math.Sqrt(ss / float64(width))
		for i := r * width; i < (r+1)*width; i++ {
			x, y := f.load(data, i), f.load(oracle.Data, i)
			a.Elements++
			if x == y {
				continue
			}
			a.Inexact++
			switch cls, d := f.compare(x, y); cls {
			case ClassNaNNumber:
				a.NaN++
				a.OutOfTolerance++
			case ClassNumeric:
				if d > a.MaxULP {
					a.MaxULP, a.WorstULP = d, at(i)
				}
				// ±0 against each other: 1 ulp on the ordered line, no distance in value
				diff := math.Abs(f.value(x) - f.value(y))
				if diff > 0 && diff/rms > a.Scale {
					a.Scale, a.WorstScale = diff/rms, at(i)
				}
				if l := min(float64(d), diff/rms/Eps(oracle.DType)); l > a.Local || a.WorstLocal == nil && l > 0 {
					a.Local, a.WorstLocal = l, at(i)
				}
				if d > ToleranceULP && !(diff <= ToleranceScale*rms) {
					a.OutOfTolerance++
				}
			}
		}
	}
	return nil
}

// narrowBytes re-encodes a float32 tensor whose values are all of dtype dt (narrowedDType) as dt.
func narrowBytes(t capture.Tensor, dt capture.DType) ([]byte, error) {
	if t.DType != capture.F32 || (dt != capture.BF16 && dt != capture.F16) {
		return nil, fmt.Errorf("session: %s: cannot compare %s output in %s", t.Op, t.DType, dt)
	}
	out := make([]byte, 0, len(t.Data)/2)
	for i := 0; i+4 <= len(t.Data); i += 4 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(t.Data[i:]))
		var b uint16
		if dt == capture.BF16 {
			b = kernels.ToBF16Bits(v)
		} else {
			b = kernels.ToF16Bits(v)
		}
		out = binary.LittleEndian.AppendUint16(out, b)
	}
	return out, nil
}
