package capture

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"bitalign/internal/atomicfile"
)

// WriterOption configures Create.
type WriterOption func(*writerConfig)

type writerConfig struct {
	overwrite bool
	mem       memory.Allocator
}

// WithOverwrite lets Create replace an existing file at the target path (atomically, on Close).
func WithOverwrite() WriterOption { return func(c *writerConfig) { c.overwrite = true } }

// WithAllocator sets the allocator arrow-go uses for message metadata (tests pass a checked allocator).
func WithAllocator(mem memory.Allocator) WriterOption { return func(c *writerConfig) { c.mem = mem } }

// Writer streams tensors into a capture file. Tensors go to a temporary file next to the target; Close makes
// the file appear under its final name in one step, Abort removes it. A Writer is not safe for concurrent use.
type Writer struct {
	path   string
	cfg    writerConfig
	f      *atomicfile.File
	bw     *bufio.Writer
	cw     atomicfile.Counter // the file position, which arrow-go's file writer also counts from 0
	fw     *ipc.FileWriter
	schema *arrow.Schema
	msgLen map[int]int64 // pad length → encoded record-batch message length (see alignPad)
	n      int
	err    error // first error; the writer refuses further work after it
	done   bool
}

// Create starts a capture file at path (conventionally *.arrow). It fails if path exists, unless
// WithOverwrite is given. meta.FormatVersion is set to FormatVersion, a zero meta.Created to now.
func Create(path string, meta Meta, opts ...WriterOption) (*Writer, error) {
	w := &Writer{path: path, msgLen: map[int]int64{}}
	for _, o := range opts {
		o(&w.cfg)
	}
	if w.cfg.mem == nil {
		w.cfg.mem = memory.DefaultAllocator
	}
	if err := checkMeta(meta); err != nil {
		return nil, fmt.Errorf("capture: %s: %v", path, err)
	}
	meta.FormatVersion = FormatVersion
	if meta.Created.IsZero() {
		meta.Created = time.Now().UTC()
	}
	mj, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("capture: %s: meta: %v", path, err)
	}
	f, err := atomicfile.Create(path, w.cfg.overwrite)
	if errors.Is(err, atomicfile.ErrExist) {
		return nil, fmt.Errorf("capture: %s: file exists (use WithOverwrite to replace it)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("capture: %s: %v", path, err)
	}
	w.f = f
	w.bw = bufio.NewWriterSize(f, 1<<20)
	w.cw = atomicfile.Counter{W: w.bw}
	w.schema = Schema(mj)
	w.fw, err = ipc.NewFileWriter(&w.cw, ipc.WithSchema(w.schema), ipc.WithAllocator(w.cfg.mem))
	if err != nil {
		w.Abort()
		return nil, fmt.Errorf("capture: %s: %v", path, err)
	}
	return w, nil
}

func checkMeta(m Meta) error {
	for _, v := range []struct {
		name string
		n    int
	}{{"tp", m.TP}, {"pp", m.PP}, {"dp", m.DP}, {"rank", m.Rank}, {"batch_size", m.BatchSize}} {
		if v.n < 0 {
			return fmt.Errorf("meta: negative %s %d", v.name, v.n)
		}
	}
	if m.Rank >= m.World() {
		return fmt.Errorf("meta: rank %d outside tp×pp×dp = %d", m.Rank, m.World())
	}
	for _, raw := range []json.RawMessage{m.Model, m.Extra} {
		if len(raw) > 0 && !json.Valid(raw) {
			return errors.New("meta: model or extra is not valid JSON")
		}
	}
	return nil
}

// Path is the final path of the file being written.
func (w *Writer) Path() string { return w.path }

// Len is the number of tensors written so far.
func (w *Writer) Len() int { return w.n }

// Write appends one tensor. It validates the tensor first (known dtype, len(Data) == product(Shape)·size,
// consistent shard spec); an invalid tensor is refused and leaves the writer usable. An empty Role is written
// as "out" and the zero Shard (Dim 0 without a FullShape) as NoShard. t.Data is not retained after Write
// returns.
func (w *Writer) Write(t Tensor) error {
	if w.done {
		return fmt.Errorf("capture: %s: write after Close or Abort", w.path)
	}
	if w.err != nil {
		return w.err
	}
	if t.Role == "" {
		t.Role = "out"
	}
	if t.Shard.Dim == 0 && t.Shard.Start == 0 && t.Shard.FullShape == nil {
		t.Shard = NoShard // the zero Shard: not sharded
	}
	if err := t.check(); err != nil {
		return fmt.Errorf("capture: %s: %v", w.path, err)
	}
	if err := w.write(t); err != nil {
		w.err = fmt.Errorf("capture: %s: %v", w.path, err)
		return w.err
	}
	w.n++
	return nil
}

func (w *Writer) write(t Tensor) error {
	cols := tensorColumns(t)
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	pad, err := w.alignPad(cols)
	if err != nil {
		return err
	}
	md := arrow.NewMetadata([]string{KeyPad}, []string{strings.Repeat(" ", pad)})
	rec := array.NewRecordBatchWithMetadata(w.schema, cols, 1, md)
	defer rec.Release()
	return w.fw.Write(rec)
}

// dataOffsetInBody is where the data column's value bytes start in a record batch body: the data column is
// the first column, its validity bitmap is omitted (no nulls) and its int64 offsets [0, n] take 16 bytes.
const dataOffsetInBody = 16

// alignPad returns the length of the KeyPad value that puts the next tensor's bytes on an Alignment boundary.
// The encoded message length depends only on the pad (all other metadata fields are fixed-size for a one-row
// batch of our schema), so lengths are measured once per pad length and verified by construction in tests.
func (w *Writer) alignPad(cols []arrow.Array) (int, error) {
	start := w.cw.N
	if start == 0 {
		// arrow-go writes the magic and the schema message on the first record batch.
		start = w.headerLen()
	}
	for pad := 0; pad < 2*Alignment; pad++ {
		n, ok := w.msgLen[pad]
		if !ok {
			md := arrow.NewMetadata([]string{KeyPad}, []string{strings.Repeat(" ", pad)})
			rec := array.NewRecordBatchWithMetadata(w.schema, cols, 1, md)
			p, err := ipc.GetRecordBatchPayload(rec, ipc.WithAllocator(w.cfg.mem))
			rec.Release()
			if err != nil {
				return 0, err
			}
			meta := p.Meta()
			// the encapsulated message: 0xFFFFFFFF, int32 length, flatbuffer, padding to 8 bytes
			n = int64(meta.Len()+8+7) &^ 7
			meta.Release()
			p.Release()
			w.msgLen[pad] = n
		}
		if (start+n+dataOffsetInBody)%Alignment == 0 {
			return pad, nil
		}
	}
	return 0, errors.New("cannot align tensor data (unexpected Arrow message layout)")
}

// headerLen is the length of what arrow-go writes before the first record batch: "ARROW1\0\0" and the
// schema message.
func (w *Writer) headerLen() int64 {
	p := ipc.GetSchemaPayload(w.schema, w.cfg.mem)
	defer p.Release()
	meta := p.Meta()
	defer meta.Release()
	return 8 + int64(meta.Len()+8+7)&^7
}

// Close finishes the file: footer, flush, fsync, then the file appears under its final name (never replacing
// an existing file unless WithOverwrite was given). On error nothing is left under the final name.
func (w *Writer) Close() error {
	if w.done {
		if w.err != nil {
			return w.err
		}
		return nil
	}
	if w.err != nil {
		w.Abort()
		return w.err
	}
	fail := func(err error) error {
		w.Abort()
		w.err = fmt.Errorf("capture: %s: %v", w.path, err)
		return w.err
	}
	if err := w.fw.Close(); err != nil {
		return fail(err)
	}
	if err := w.bw.Flush(); err != nil {
		return fail(err)
	}
	err := w.f.Commit()
	w.f = nil
	if errors.Is(err, atomicfile.ErrExist) {
		err = errors.New("file exists (use WithOverwrite to replace it)")
	}
	if err != nil {
		return fail(err)
	}
	w.done = true
	return nil
}

// Abort discards the file being written. It is safe to call after Close (it then does nothing) and twice.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	if w.fw != nil {
		// release arrow-go's state; its footer goes into the temp file we are about to delete
		_ = w.fw.Close()
	}
	if w.f != nil {
		w.f.Abort()
		w.f = nil
	}
	if w.err == nil {
		w.err = fmt.Errorf("capture: %s: aborted", w.path)
	}
}

// WriteAll writes a whole capture in one call (for tests and small tools).
func WriteAll(path string, meta Meta, ts []Tensor, opts ...WriterOption) error {
	w, err := Create(path, meta, opts...)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if err := w.Write(t); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}

// tensorColumns builds the one-row columns of t in schema order without copying t.Data.
func tensorColumns(t Tensor) []arrow.Array {
	shardStart, fullShape := t.Shard.Start, t.Shard.FullShape
	return []arrow.Array{
		binaryArray(t.Data),
		int64Array(t.Step), int64Array(t.Seq), int64Array(t.Pos), int64Array(t.NTok),
		stringArray(t.Op),
		int32Array(t.Index),
		stringArray(t.Role),
		stringArray(t.DType.String()),
		int64ListArray(t.Shape),
		int32Array(t.Rank), int32Array(int32(t.Shard.Dim)), int64Array(shardStart),
		int64ListArray(fullShape),
	}
}

func int64Array(v int64) arrow.Array {
	b := binary.LittleEndian.AppendUint64(nil, uint64(v))
	d := array.NewData(arrow.PrimitiveTypes.Int64, 1, []*memory.Buffer{nil, memory.NewBufferBytes(b)}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func int32Array(v int32) arrow.Array {
	b := binary.LittleEndian.AppendUint32(nil, uint32(v))
	d := array.NewData(arrow.PrimitiveTypes.Int32, 1, []*memory.Buffer{nil, memory.NewBufferBytes(b)}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func stringArray(s string) arrow.Array {
	off := binary.LittleEndian.AppendUint32(make([]byte, 4, 8), uint32(len(s)))
	d := array.NewData(arrow.BinaryTypes.String, 1,
		[]*memory.Buffer{nil, memory.NewBufferBytes(off), memory.NewBufferBytes([]byte(s))}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func binaryArray(b []byte) arrow.Array {
	off := binary.LittleEndian.AppendUint64(make([]byte, 8, 16), uint64(len(b)))
	d := array.NewData(arrow.BinaryTypes.LargeBinary, 1,
		[]*memory.Buffer{nil, memory.NewBufferBytes(off), memory.NewBufferBytes(b)}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func int64ListArray(vs []int64) arrow.Array {
	vals := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		vals = binary.LittleEndian.AppendUint64(vals, uint64(v))
	}
	child := array.NewData(arrow.PrimitiveTypes.Int64, len(vs), []*memory.Buffer{nil, memory.NewBufferBytes(vals)}, nil, 0, 0)
	defer child.Release()
	off := binary.LittleEndian.AppendUint32(make([]byte, 4, 8), uint32(len(vs)))
	d := array.NewData(arrow.ListOf(arrow.PrimitiveTypes.Int64), 1,
		[]*memory.Buffer{nil, memory.NewBufferBytes(off)}, []arrow.ArrayData{child}, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}
