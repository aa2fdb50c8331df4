package engine

import (
	"fmt"
	"math"
	"sort"

	"bitalign/capture"
	"bitalign/internal/fp"
)

// seqTensor is one op's output for one sequence, assembled from capture tensors (any chunking over positions,
// any sharding over dim 1): row p holds position p's full feature vector as little-endian bytes.
type seqTensor struct {
	dtype capture.DType
	width int            // features per position (1 for per-token scalars)
	rows  map[int][]byte // position → width·size bytes
	have  map[int][]bool // position → which columns were written (sharded inputs)
}

// tensorKey addresses an op's output for one sequence of one step.
type tensorKey struct {
	step int64
	seq  int64
	op   string
}

// assembly gathers a capture's "out" tensors by (step, seq, op).
type assembly map[tensorKey]*seqTensor

// add merges one tensor (its Data must be valid) into the assembly.
func (a assembly) add(t capture.Tensor) error {
	if t.Role != "" && t.Role != "out" {
		return nil
	}
	if t.NTok <= 0 || len(t.Shape) == 0 || t.Shape[0] != t.NTok {
		return fmt.Errorf("tensor %s seq %d pos %d: shape %v does not start with its %d positions", t.Op, t.Seq, t.Pos, t.Shape, t.NTok)
	}
	local := int64(1)
	for _, d := range t.Shape[1:] {
		local *= d
	}
	full, start := local, int64(0)
	if t.Shard.Sharded() {
		if t.Shard.Dim != 1 || len(t.Shape) != 2 || len(t.Shard.FullShape) != 2 {
			return fmt.Errorf("tensor %s seq %d pos %d: only dim-1 shards of 2-d tensors are supported", t.Op, t.Seq, t.Pos)
		}
		full, start = t.Shard.FullShape[1], t.Shard.Start
		if start < 0 || start+local > full {
			return fmt.Errorf("tensor %s seq %d pos %d: shard [%d, %d) outside width %d", t.Op, t.Seq, t.Pos, start, start+local, full)
		}
	}
	if full > 1<<26 {
		return fmt.Errorf("tensor %s: width %d too large", t.Op, full)
	}
	k := tensorKey{t.Step, t.Seq, t.Op}
	st := a[k]
	if st == nil {
		st = &seqTensor{dtype: t.DType, width: int(full), rows: map[int][]byte{}, have: map[int][]bool{}}
		a[k] = st
	}
	if st.dtype != t.DType || st.width != int(full) {
		return fmt.Errorf("tensor %s seq %d: dtype/width %s/%d disagree with an earlier chunk's %s/%d", t.Op, t.Seq, t.DType, full, st.dtype, st.width)
	}
	sz := t.DType.Size()
	if int64(len(t.Data)) != t.NTok*local*int64(sz) {
		return fmt.Errorf("tensor %s seq %d pos %d: %d bytes for shape %v", t.Op, t.Seq, t.Pos, len(t.Data), t.Shape)
	}
	for i := int64(0); i < t.NTok; i++ {
		p := int(t.Pos + i)
		row := st.rows[p]
		if row == nil {
			row = make([]byte, st.width*sz)
			st.rows[p] = row
			st.have[p] = make([]bool, st.width)
		}
		copy(row[int(start)*sz:], t.Data[i*local*int64(sz):(i+1)*local*int64(sz)])
		have := st.have[p]
		for c := start; c < start+local; c++ {
			have[c] = true
		}
	}
	return nil
}

// assembleCapture reads every "out" tensor of c.
func assembleCapture(c *capture.Capture) (assembly, error) {
	a := assembly{}
	for i := 0; i < c.Len(); i++ {
		t, err := c.Tensor(i)
		if err != nil {
			return nil, err
		}
		if err := a.add(t); err != nil {
			return nil, fmt.Errorf("engine: %s: %v", c.Path(), err)
		}
	}
	return a, nil
}

// positions returns the assembled positions in ascending order.
func (st *seqTensor) positions() []int {
	ps := make([]int, 0, len(st.rows))
	for p := range st.rows {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	return ps
}

// complete reports whether positions [pos, pos+n) are all present with every column.
func (st *seqTensor) complete(pos, n int) error {
	for p := pos; p < pos+n; p++ {
		h := st.have[p]
		if h == nil {
			return fmt.Errorf("position %d missing", p)
		}
		for c, ok := range h {
			if !ok {
				return fmt.Errorf("position %d: column %d missing (a rank's shard?)", p, c)
			}
		}
	}
	return nil
}

// floats decodes positions [pos, pos+n) as float32 rows (n × width).
func (st *seqTensor) floats(pos, n int) []float32 {
	out := make([]float32, n*st.width)
	for i := 0; i < n; i++ {
		decode(st.dtype, st.rows[pos+i], out[i*st.width:(i+1)*st.width])
	}
	return out
}

// ints decodes positions [pos, pos+n) of an i32 per-token tensor.
func (st *seqTensor) ints(pos, n int) []int32 {
	out := make([]int32, n*st.width)
	for i := 0; i < n; i++ {
		decodeI32(st.rows[pos+i], out[i*st.width:(i+1)*st.width])
	}
	return out
}

// Divergence is the first bitwise difference between two captures in execution order.
type Divergence struct {
	Op       string
	Index    int
	Seq, Pos int64
	Elem     int    // feature index within the position
	ULP      uint64 // distance of the differing elements (elemULP); MaxUint64 when dtypes or widths differ
}

func (d *Divergence) String() string {
	return fmt.Sprintf("%s (index %d) seq %d pos %d element %d, %d ULP", d.Op, d.Index, d.Seq, d.Pos, d.Elem, d.ULP)
}

// FirstDivergence compares two assembled captures bitwise, op by op in execution order, then by step,
// sequence and position, over the (step, seq, pos) present in both. It returns nil when they agree everywhere
// they overlap; missing counts coordinates present on only one side.
func firstDivergence(cfg Config, a, b assembly) (first *Divergence, missing int) {
	type sk struct {
		step, seq int64
	}
	var keys []sk
	seen := map[sk]bool{}
	for k := range a {
		if !seen[sk{k.step, k.seq}] {
			seen[sk{k.step, k.seq}] = true
			keys = append(keys, sk{k.step, k.seq})
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].step != keys[j].step {
			return keys[i].step < keys[j].step
		}
		return keys[i].seq < keys[j].seq
	})
	for idx, op := range OpNames(cfg) {
		for _, key := range keys {
			ta, tb := a[tensorKey{key.step, key.seq, op}], b[tensorKey{key.step, key.seq, op}]
			if ta == nil || tb == nil {
				if ta != tb {
					missing++
				}
				continue
			}
			for _, p := range ta.positions() {
				ra, rb := ta.rows[p], tb.rows[p]
				if rb == nil {
					missing++
					continue
				}
				if ta.dtype != tb.dtype || len(ra) != len(rb) {
					return &Divergence{Op: op, Index: idx, Seq: key.seq, Pos: int64(p), ULP: math.MaxUint64}, missing
				}
				for i := range ra {
					if ra[i] != rb[i] {
						sz := ta.dtype.Size()
						e := i / sz
						return &Divergence{Op: op, Index: idx, Seq: key.seq, Pos: int64(p), Elem: e,
							ULP: elemULP(ta.dtype, ra[e*sz:(e+1)*sz], rb[e*sz:(e+1)*sz])}, missing
					}
				}
			}
		}
	}
	return nil, missing
}

// elemULP is the distance of two encoded elements of dtype dt (internal/fp's rule: ordered-integer ULP of their
// own dtype for floats, +0 vs −0 is 1, NaN against a number fp.ULPNaNNumber; |a−b| for integers).
func elemULP(dt capture.DType, a, b []byte) uint64 {
	f := fp.FormatOf(dt)
	if f == nil {
		return fp.ULPNaNNumber
	}
	return f.ULP(f.Bits(a, 0), f.Bits(b, 0))
}
