package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
)

// The fast index reads the footer's block list and each record batch's message flatbuffer directly, then
// decodes the small columns from the mapped body. It touches only metadata and small-column bytes, and costs
// no allocation per column. Anything it does not handle (dictionaries, column types outside the capture
// schema's families) goes to the generic arrow-go decoder; anything inconsistent is an error.
//
// Flatbuffer layouts used (format/File.fbs, Message.fbs, Schema.fbs of Apache Arrow):
//   Footer        { version: short; schema: Schema; dictionaries: [Block]; recordBatches: [Block]; ... }
//   struct Block  { offset: long; metaDataLength: int; (pad 4) bodyLength: long }          24 bytes
//   Message       { version: short; header_type: ubyte; header: table; bodyLength: long; custom_metadata }
//   RecordBatch   { length: long; nodes: [FieldNode]; buffers: [Buffer]; compression: BodyCompression; ... }
//   struct FieldNode { length: long; null_count: long }                                      16 bytes
//   struct Buffer    { offset: long; length: long }                                          16 bytes

// errNoFastPath sends indexArrow to the generic arrow-go decoder.
var errNoFastPath = errors.New("no fast path")

const messageHeaderRecordBatch = 3

// colPlan says where a column's nodes and buffers are in a record batch of the file's schema.
type colPlan struct {
	node, buf int // first node and first buffer of the column
	kind      columnKind
	present   bool // the schema has the column
	width     int  // byte width of the integers (values or list elements)
	signed    bool // integers are signed
	off64     bool // string/binary/list offsets are int64
}

// planColumns lays out the schema's nodes and buffers; ok = false when a type is outside what we decode.
func planColumns(s *arrow.Schema, cols columns) (plan [len(columns{})]colPlan, nodes, bufs int, ok bool) {
	at := make(map[int]int, len(cols)) // field index → position in cols
	for k, fi := range cols {
		if fi >= 0 {
			at[fi] = k
		}
	}
	for fi, f := range s.Fields() {
		p := colPlan{node: nodes, buf: bufs}
		switch t := f.Type.(type) {
		case *arrow.BinaryType, *arrow.StringType:
			nodes, bufs = nodes+1, bufs+3
		case *arrow.LargeBinaryType, *arrow.LargeStringType:
			p.off64 = true
			nodes, bufs = nodes+1, bufs+3
		case *arrow.ListType:
			p.width, p.signed, ok = intWidth(t.Elem())
			if !ok {
				return plan, 0, 0, false
			}
			nodes, bufs = nodes+2, bufs+4
		case *arrow.LargeListType:
			p.width, p.signed, ok = intWidth(t.Elem())
			if !ok {
				return plan, 0, 0, false
			}
			p.off64 = true
			nodes, bufs = nodes+2, bufs+4
		default:
			p.width, p.signed, ok = intWidth(t)
			if !ok {
				return plan, 0, 0, false
			}
			nodes, bufs = nodes+1, bufs+2
		}
		if k, isCol := at[fi]; isCol {
			p.kind, p.present = columnKinds[k].kind, true
			plan[k] = p
		}
	}
	return plan, nodes, bufs, true
}

func intWidth(t arrow.DataType) (width int, signed, ok bool) {
	switch t.ID() {
	case arrow.INT8:
		return 1, true, true
	case arrow.INT16:
		return 2, true, true
	case arrow.INT32:
		return 4, true, true
	case arrow.INT64:
		return 8, true, true
	case arrow.UINT8:
		return 1, false, true
	case arrow.UINT16:
		return 2, false, true
	case arrow.UINT32:
		return 4, false, true
	}
	return 0, false, false
}

// fbReader reads a flatbuffer with bounds checks; the first failure sticks in err and reads return 0.
type fbReader struct {
	b   []byte
	err error
}

func (f *fbReader) fail(p int64, n int64) {
	if f.err == nil {
		f.err = fmt.Errorf("flatbuffer read of %d bytes at %d outside %d", n, p, len(f.b))
	}
}

func (f *fbReader) bytes(p, n int64) []byte {
	if p < 0 || n < 0 || p > int64(len(f.b))-n {
		f.fail(p, n)
		return nil
	}
	return f.b[p : p+n]
}

func (f *fbReader) u16(p int64) uint16 {
	if b := f.bytes(p, 2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (f *fbReader) u32(p int64) uint32 {
	if b := f.bytes(p, 4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (f *fbReader) i64(p int64) int64 {
	if b := f.bytes(p, 8); b != nil {
		return int64(binary.LittleEndian.Uint64(b))
	}
	return 0
}

// table is a flatbuffer table at position pos with its vtable at vt.
type table struct {
	f       *fbReader
	pos, vt int64
	vtLen   int64
}

// root returns the root table of the flatbuffer.
func (f *fbReader) root() table { return f.tableAt(int64(f.u32(0))) }

func (f *fbReader) tableAt(pos int64) table {
	soff := int64(int32(f.u32(pos)))
	vt := pos - soff
	t := table{f: f, pos: pos, vt: vt, vtLen: int64(f.u16(vt))}
	if f.err == nil && (t.vtLen < 4 || t.vtLen%2 != 0) {
		f.err = fmt.Errorf("flatbuffer vtable length %d", t.vtLen)
	}
	return t
}

// field returns the absolute position of field i, or 0 when it is absent.
func (t table) field(i int64) int64 {
	o := 4 + 2*i
	if t.f.err != nil || o+2 > t.vtLen {
		return 0
	}
	off := int64(t.f.u16(t.vt + o))
	if off == 0 {
		return 0
	}
	return t.pos + off
}

func (t table) u8(i int64, def uint8) uint8 {
	p := t.field(i)
	if p == 0 {
		return def
	}
	if b := t.f.bytes(p, 1); b != nil {
		return b[0]
	}
	return def
}

func (t table) i64(i int64) int64 {
	if p := t.field(i); p != 0 {
		return t.f.i64(p)
	}
	return 0
}

// sub follows the offset in field i to a table; ok = false when the field is absent.
func (t table) sub(i int64) (table, bool) {
	p := t.field(i)
	if p == 0 {
		return table{}, false
	}
	return t.f.tableAt(p + int64(t.f.u32(p))), true
}

// vector follows field i to a vector of structs of elemSize bytes; it returns the first element's position
// and the element count (0, 0 when absent), checking that the elements lie in the buffer.
func (t table) vector(i, elemSize int64) (start, n int64) {
	p := t.field(i)
	if p == 0 {
		return 0, 0
	}
	v := p + int64(t.f.u32(p))
	n = int64(t.f.u32(v))
	start = v + 4
	if n > 0 {
		t.f.bytes(start, n*elemSize) // bounds check (n < 2^32, elemSize ≤ 24: no overflow)
	}
	if t.f.err != nil {
		return 0, 0
	}
	return start, n
}

// indexFast indexes the record batches of a mapped Arrow file whose schema arrow-go has already parsed.
func indexFast(data []byte, file int, s *arrow.Schema, cols columns) ([]Entry, error) {
	plan, nNodes, nBufs, ok := planColumns(s, cols)
	if !ok {
		return nil, errNoFastPath
	}
	size := int64(len(data))
	// trailer: footer flatbuffer, int32 footer length, "ARROW1"
	flen := int64(binary.LittleEndian.Uint32(data[size-10:]))
	if flen <= 0 || flen > size-10-8 {
		return nil, fmt.Errorf("bad footer length %d", flen)
	}
	footer := &fbReader{b: data[size-10-flen : size-10]}
	ft := footer.root()
	if _, nd := ft.vector(2, 24); nd > 0 {
		return nil, errNoFastPath // dictionaries: let arrow-go resolve them
	}
	bstart, nb := ft.vector(3, 24)
	if footer.err != nil {
		return nil, fmt.Errorf("footer: %v", footer.err)
	}
	if canPrefetch && nb > 64 {
		stop := prefetchBlocks(data, footer, bstart, nb)
		defer stop()
	}
	entries := make([]Entry, 0, nb)
	in := internTable{}
	d := batchDecoder{data: data, plan: &plan, nNodes: int64(nNodes), nBufs: int64(nBufs), in: in, file: file}
	for b := int64(0); b < nb; b++ {
		p := bstart + 24*b
		off := footer.i64(p)
		metaLen := int64(int32(footer.u32(p + 8)))
		bodyLen := footer.i64(p + 16)
		var err error
		entries, err = d.batch(entries, off, metaLen, bodyLen)
		if err != nil {
			return nil, fmt.Errorf("record batch %d: %v", b, err)
		}
	}
	return entries, nil
}

// prefetchBlocks reads ahead of the decoder: on a cold page cache the index pages of a large capture are
// scattered over the disk, and asking for them all at once (the kernel queues the reads) instead of one page
// fault at a time turns seconds into a fraction of one. Each request covers a block's message and the 4 KiB
// before it, where the previous batch's small columns end. The returned func stops it and waits.
func prefetchBlocks(data []byte, footer *fbReader, bstart, nb int64) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		f := &fbReader{b: footer.b}
		pf := newPrefetcher(data)
		for b := int64(0); b < nb; b++ {
			select {
			case <-quit:
				return
			default:
			}
			p := bstart + 24*b
			off, metaLen := f.i64(p), int64(int32(f.u32(p+8)))
			if f.err != nil || off < 0 || metaLen < 0 || metaLen > 1<<20 {
				return
			}
			pf.fetch(max(off-4096, 0), metaLen+4096)
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

type batchDecoder struct {
	data          []byte
	plan          *[len(columns{})]colPlan
	nNodes, nBufs int64
	in            internTable
	file          int
	dims          []int64 // arena for shapes

	// per batch
	msg   fbReader // the batch's message flatbuffer
	body  []byte   // the batch body
	nodes *fbReader
	nPos  int64 // position of the node vector in nodes.b
	bPos  int64 // position of the buffer vector
	err   error
}

// batch appends the entries of the record batch at off (metadata metaLen bytes, body bodyLen bytes).
func (d *batchDecoder) batch(out []Entry, off, metaLen, bodyLen int64) ([]Entry, error) {
	size := int64(len(d.data))
	if off < 8 || off%8 != 0 || metaLen < 8 || metaLen%8 != 0 || bodyLen < 0 || bodyLen%8 != 0 ||
		off > size || metaLen > size-off || bodyLen > size-off-metaLen {
		return out, fmt.Errorf("block (offset %d, metadata %d, body %d) outside the %d-byte file", off, metaLen, bodyLen, size)
	}
	msg := d.data[off : off+metaLen]
	fbLen, fbStart := int64(int32(binary.LittleEndian.Uint32(msg))), int64(4)
	if fbLen == -1 { // continuation marker 0xFFFFFFFF, then the length
		fbLen, fbStart = int64(int32(binary.LittleEndian.Uint32(msg[4:]))), 8
	}
	if fbLen <= 0 || fbLen > metaLen-fbStart {
		return out, fmt.Errorf("message length %d does not fit its %d-byte block", fbLen, metaLen)
	}
	d.msg = fbReader{b: msg[fbStart : fbStart+fbLen]}
	f := &d.msg
	m := f.root()
	if ht := m.u8(1, 0); ht != messageHeaderRecordBatch && f.err == nil {
		return out, fmt.Errorf("message type %d is not a record batch", ht)
	}
	rb, ok := m.sub(2)
	if !ok && f.err == nil {
		return out, errors.New("record batch message without a header")
	}
	rows := rb.i64(0)
	if _, compressed := rb.sub(3); compressed {
		return out, errors.New("compressed record batches are not supported")
	}
	nPos, nn := rb.vector(1, 16)
	bPos, nbuf := rb.vector(2, 16)
	if f.err != nil {
		return out, fmt.Errorf("message: %v", f.err)
	}
	if nn != d.nNodes || nbuf != d.nBufs {
		return out, fmt.Errorf("%d field nodes and %d buffers, schema needs %d and %d", nn, nbuf, d.nNodes, d.nBufs)
	}
	if rows < 0 || rows > bodyLen+1 {
		// every row has at least one offset in a binary column: more rows than body bytes is a lie
		return out, fmt.Errorf("bad row count %d", rows)
	}
	d.body = d.data[off+metaLen : off+metaLen+bodyLen]
	d.nodes, d.nPos, d.bPos, d.err = f, nPos, bPos, nil
	for i := int64(0); i < nn; i++ {
		if nulls := f.i64(nPos + 16*i + 8); nulls != 0 {
			return out, fmt.Errorf("field node %d has %d nulls", i, nulls)
		}
	}
	bodyStart := off + metaLen
	for row := int64(0); row < rows; row++ {
		e := Entry{File: d.file, Shard: NoShard}
		e.Step = d.intCol(ciStep, row)
		e.Seq = d.intCol(ciSeq, row)
		e.Pos = d.intCol(ciPos, row)
		e.NTok = d.intCol(ciNTok, row)
		e.Op = d.str(ciOp, row)
		idx := d.intCol(ciIndex, row)
		e.Role = d.str(ciRole, row)
		dt := d.bytesAt(ciDType, row)
		e.Shape = d.intList(ciShape, row)
		rank := d.intCol(ciRank, row)
		if d.plan[ciShardDim].present {
			e.Shard.Dim = int(d.intCol(ciShardDim, row))
		}
		if d.plan[ciShardStart].present {
			e.Shard.Start = d.intCol(ciShardStart, row)
		}
		if d.plan[ciFullShape].present {
			e.Shard.FullShape = d.intList(ciFullShape, row)
			if len(e.Shard.FullShape) == 0 {
				e.Shard.FullShape = nil
			}
		}
		dOff, dLen := d.span(ciData, row)
		if d.err == nil && f.err != nil {
			d.err = f.err
		}
		if d.err != nil {
			return out, fmt.Errorf("row %d: %v", row, d.err)
		}
		if idx < math.MinInt32 || idx > math.MaxInt32 || rank < math.MinInt32 || rank > math.MaxInt32 {
			return out, fmt.Errorf("row %d: index %d or rank %d out of int32 range", row, idx, rank)
		}
		if e.Shard.Dim < -1 || e.Shard.Dim > MaxDims {
			return out, fmt.Errorf("row %d: bad shard dim %d", row, e.Shard.Dim)
		}
		e.Index, e.Rank = int32(idx), int32(rank)
		var err error
		if e.DType, err = parseDTypeBytes(dt); err != nil {
			return out, fmt.Errorf("tensor %s: %v", truncate(e.Op, 80), err)
		}
		if dLen > 0 { // an empty tensor has no position (as in the generic decoder)
			e.Offset, e.NBytes = bodyStart+dOff, dLen
		}
		if err := e.check(); err != nil {
			return out, fmt.Errorf("row %d: %v", row, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// buffer returns buffer i of the batch (a slice of the body).
func (d *batchDecoder) buffer(i int) []byte {
	p := d.bPos + 16*int64(i)
	off, n := d.nodes.i64(p), d.nodes.i64(p+8)
	if d.nodes.err != nil {
		return nil
	}
	if off < 0 || n < 0 || off > int64(len(d.body)) || n > int64(len(d.body))-off {
		d.setErr(fmt.Errorf("buffer %d [%d, +%d) outside the %d-byte body", i, off, n, len(d.body)))
		return nil
	}
	return d.body[off : off+n]
}

func (d *batchDecoder) setErr(err error) {
	if d.err == nil {
		d.err = err
	}
}

// intVal reads element row of a little-endian integer buffer of the given width.
func (d *batchDecoder) intVal(buf []byte, row int64, width int, signed bool) int64 {
	if row < 0 || row > int64(len(buf))/int64(width)-1 {
		d.setErr(fmt.Errorf("integer buffer of %d bytes has no element %d", len(buf), row))
		return 0
	}
	b := buf[row*int64(width):]
	switch width {
	case 1:
		if signed {
			return int64(int8(b[0]))
		}
		return int64(b[0])
	case 2:
		if signed {
			return int64(int16(binary.LittleEndian.Uint16(b)))
		}
		return int64(binary.LittleEndian.Uint16(b))
	case 4:
		if signed {
			return int64(int32(binary.LittleEndian.Uint32(b)))
		}
		return int64(binary.LittleEndian.Uint32(b))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

func (d *batchDecoder) intCol(k int, row int64) int64 {
	p := &d.plan[k]
	return d.intVal(d.buffer(p.buf+1), row, p.width, p.signed)
}

// offsets returns [begin, end) of element row from an offsets buffer, bounded by limit.
func (d *batchDecoder) offsets(buf []byte, row int64, off64 bool, limit int64) (int64, int64) {
	w := 4
	if off64 {
		w = 8
	}
	b, e := d.intVal(buf, row, w, true), d.intVal(buf, row+1, w, true)
	if d.err == nil && (b < 0 || b > e || e > limit) {
		d.setErr(fmt.Errorf("offsets [%d, %d) outside [0, %d]", b, e, limit))
	}
	return b, e
}

// span returns the body-relative position and length of value row of a binary/string column.
func (d *batchDecoder) span(k int, row int64) (int64, int64) {
	p := &d.plan[k]
	vals := d.buffer(p.buf + 2)
	b, e := d.offsets(d.buffer(p.buf+1), row, p.off64, int64(len(vals)))
	if d.err != nil {
		return 0, 0
	}
	bp := d.bPos + 16*int64(p.buf+2)
	return d.nodes.i64(bp) + b, e - b
}

func (d *batchDecoder) bytesAt(k int, row int64) []byte {
	p := &d.plan[k]
	vals := d.buffer(p.buf + 2)
	b, e := d.offsets(d.buffer(p.buf+1), row, p.off64, int64(len(vals)))
	if d.err != nil {
		return nil
	}
	return vals[b:e]
}

func (d *batchDecoder) str(k int, row int64) string {
	b := d.bytesAt(k, row)
	if d.err != nil {
		return ""
	}
	return d.in.internBytes(b)
}

func (d *batchDecoder) intList(k int, row int64) []int64 {
	p := &d.plan[k]
	vals := d.buffer(p.buf + 3)
	childLen := d.nodes.i64(d.nPos + 16*int64(p.node+1))
	b, e := d.offsets(d.buffer(p.buf+1), row, p.off64, childLen)
	if d.err != nil {
		return nil
	}
	if e-b > MaxDims {
		d.setErr(fmt.Errorf("shape with %d dimensions (at most %d)", e-b, MaxDims))
		return nil
	}
	n := int(e - b)
	if len(d.dims)+n > cap(d.dims) {
		d.dims = make([]int64, 0, max(4096, n)) // shapes are carved from shared chunks: one allocation per 4096 dims
	}
	start := len(d.dims)
	for j := 0; j < n; j++ {
		d.dims = append(d.dims, d.intVal(vals, b+int64(j), p.width, p.signed))
	}
	return d.dims[start : start+n : start+n]
}

func parseDTypeBytes(b []byte) (DType, error) {
	for dt := BF16; dt < numDTypes; dt++ {
		if string(b) == dtypeNames[dt] {
			return dt, nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q", truncate(string(b), 40))
}
