package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// MaxDims bounds the number of dimensions of a tensor (in a capture and in a safetensors header).
const MaxDims = 32

// Shard says which slice of a full tensor a rank holds. Dim = -1: the tensor is not sharded (replicated or
// rank-local); Start and FullShape are then 0 and nil. Otherwise the tensor is FullShape[Dim] sliced to
// [Start, Start+Shape[Dim]) and equal to FullShape in every other dimension.
type Shard struct {
	Dim       int
	Start     int64
	FullShape []int64
}

// NoShard is the shard spec of an unsharded tensor (Writer.Write also takes the zero Shard to mean it).
var NoShard = Shard{Dim: -1}

// Sharded reports whether the spec describes a slice of a larger tensor.
func (s Shard) Sharded() bool { return s.Dim >= 0 }

// Tensor is one captured tensor: its coordinates, its layout and its little-endian bytes.
type Tensor struct {
	Step  int64  // training/sampling step
	Seq   int64  // sequence id within the step
	Pos   int64  // first token position covered
	NTok  int64  // number of token positions covered; 0: not per token (e.g. a weight)
	Op    string // canonical op name (docs/design.md), e.g. "layers.3.attn.q_proj"
	Index int32  // execution index of Op within one forward
	Role  string // "out", "in", "in.0", "weight", ...; the writer turns "" into "out"
	DType DType
	Shape []int64
	Rank  int32 // tensor-parallel rank that holds the tensor
	Shard Shard
	Data  []byte // little-endian; len == product(Shape)*DType.Size(); zero-copy from the mapping when read
}

// Entry is a tensor's index record: everything but its bytes. Reading entries never touches tensor data.
type Entry struct {
	Step, Seq, Pos, NTok int64
	Op                   string
	Index                int32
	Role                 string
	DType                DType
	Shape                []int64
	Rank                 int32
	Shard                Shard
	File                 int   // which file of the capture (index into Capture.Ranks())
	NBytes               int64 // len(Data)
	Offset               int64 // byte offset of the data within its file
}

// Elements is the product of the shape (1 for a scalar).
func (e Entry) Elements() int64 {
	n, _ := numElements(e.Shape)
	return n
}

// Meta describes a whole capture (one file; in a directory, each rank file has its own).
type Meta struct {
	FormatVersion int             `json:"format_version"`
	Side          string          `json:"side"`            // "trainer", "sampler", "replay", ...
	Model         json.RawMessage `json:"model,omitempty"` // {"architecture": ..., "config": {...}}
	TP            int             `json:"tp"`
	PP            int             `json:"pp"`
	DP            int             `json:"dp"`
	Rank          int             `json:"rank"` // this file's rank in [0, TP*PP*DP)
	KernelProfile string          `json:"kernel_profile"`
	BatchSize     int             `json:"batch_size"`
	Seed          uint64          `json:"seed"`
	Step          int64           `json:"step"`
	Producer      string          `json:"producer"`
	Created       time.Time       `json:"created"`
	Extra         json.RawMessage `json:"extra,omitempty"` // free-form JSON
}

// World is the number of ranks the layout describes (TP*PP*DP, each at least 1).
func (m Meta) World() int {
	w := 1
	for _, n := range []int{m.TP, m.PP, m.DP} {
		if n > 1 {
			w *= n
		}
	}
	return w
}

// numElements returns the product of shape, failing on a negative dimension or overflow of int64.
func numElements(shape []int64) (int64, error) {
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("%d dimensions (at most %d)", len(shape), MaxDims)
	}
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v overflows", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// byteLen returns product(shape)*dt.Size(), failing on a bad dtype, negative dimension or overflow.
func byteLen(dt DType, shape []int64) (int64, error) {
	if !dt.Valid() {
		return 0, fmt.Errorf("invalid dtype %d", uint8(dt))
	}
	n, err := numElements(shape)
	if err != nil {
		return 0, err
	}
	hi, lo := bits.Mul64(uint64(n), uint64(dt.Size()))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("shape %v × %s overflows", shape, dt)
	}
	return int64(lo), nil
}

// checkLayout validates dtype, shape, byte length and shard spec of one tensor.
func checkLayout(dt DType, shape []int64, nbytes int64, rank int32, s Shard) error {
	want, err := byteLen(dt, shape)
	if err != nil {
		return err
	}
	if want != nbytes {
		return fmt.Errorf("shape %v × %s needs %d bytes, has %d", shape, dt, want, nbytes)
	}
	if rank < 0 {
		return fmt.Errorf("negative rank %d", rank)
	}
	return checkShard(shape, s)
}

func checkShard(shape []int64, s Shard) error {
	if s.Dim < 0 {
		if s.Dim != -1 {
			return fmt.Errorf("shard dim %d (want -1 or a dimension)", s.Dim)
		}
		if s.Start != 0 || len(s.FullShape) != 0 {
			return errors.New("unsharded tensor with a shard start or full shape")
		}
		return nil
	}
	if s.Dim >= len(shape) {
		return fmt.Errorf("shard dim %d out of range for shape %v", s.Dim, shape)
	}
	if len(s.FullShape) != len(shape) {
		return fmt.Errorf("full shape %v does not match shape %v", s.FullShape, shape)
	}
	if _, err := numElements(s.FullShape); err != nil {
		return fmt.Errorf("full shape: %v", err)
	}
	for d := range shape {
		if d != s.Dim && s.FullShape[d] != shape[d] {
			return fmt.Errorf("full shape %v differs from shape %v outside shard dim %d", s.FullShape, shape, s.Dim)
		}
	}
	if s.Start < 0 || s.Start > s.FullShape[s.Dim]-shape[s.Dim] {
		return fmt.Errorf("shard [%d, %d+%d) outside full dim %d", s.Start, s.Start, shape[s.Dim], s.FullShape[s.Dim])
	}
	return nil
}

func (t Tensor) check() error {
	return checkRecord(t.Op, t.Role, t.NTok, t.DType, t.Shape, int64(len(t.Data)), t.Rank, t.Shard)
}

func (e Entry) check() error {
	return checkRecord(e.Op, e.Role, e.NTok, e.DType, e.Shape, e.NBytes, e.Rank, e.Shard)
}

// checkRecord checks one record's header (a Tensor's or an Entry's) against its nbytes of data.
func checkRecord(op, role string, ntok int64, dt DType, shape []int64, nbytes int64, rank int32, s Shard) error {
	if op == "" {
		return errors.New("tensor without an op name")
	}
	if ntok < 0 {
		return fmt.Errorf("%s: negative ntok %d", op, ntok)
	}
	if err := checkLayout(dt, shape, nbytes, rank, s); err != nil {
		return fmt.Errorf("%s: %v", op, err)
	}
	if err := checkFingerprint(role, ntok, dt, shape, s); err != nil {
		return fmt.Errorf("%s: %v", op, err)
	}
	return nil
}

// tensor builds a Tensor from the entry and its data.
func (e Entry) tensor(data []byte) Tensor {
	return Tensor{Step: e.Step, Seq: e.Seq, Pos: e.Pos, NTok: e.NTok, Op: e.Op, Index: e.Index, Role: e.Role,
		DType: e.DType, Shape: e.Shape, Rank: e.Rank, Shard: e.Shard, Data: data}
}
