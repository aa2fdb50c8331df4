package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// arrow-go trusts flatbuffer vector lengths when it allocates (a corrupted custom_metadata length asks for
// gigabytes) and recurses over schema children without a limit. Out-of-range reads merely panic, which Open
// recovers from; allocation failures and stack exhaustion are fatal. So before arrow-go sees a footer or a
// message we check every vector it sizes an allocation from and bound the schema's nesting.

const (
	maxSchemaDepth  = 32   // nesting of field children
	maxSchemaFields = 4096 // fields visited in total (children included)
)

// verifyFooter checks the footer flatbuffer of a mapped Arrow file (its trailer was checked already).
func verifyFooter(data []byte) error {
	size := int64(len(data))
	flen := int64(binary.LittleEndian.Uint32(data[size-10:]))
	if flen <= 0 || flen > size-10-8 {
		return fmt.Errorf("bad footer length %d", flen)
	}
	f := &fbReader{b: data[size-10-flen : size-10]}
	ft := f.root()
	schema, ok := ft.sub(1)
	if f.err != nil || !ok {
		return errors.New("footer without a schema")
	}
	// arrow-go byte-swaps a big-endian file's buffers in place, which the read-only mapping forbids.
	if p := schema.field(0); p != 0 && f.u16(p) != 0 {
		return errors.New("big-endian Arrow files are not supported")
	}
	visited := 0
	if err := verifyFields(schema, 1, 0, &visited); err != nil {
		return err
	}
	verifyKeyValues(schema, 2)
	dstart, nd := ft.vector(2, 24) // dictionaries: arrow-go decodes them while opening
	ft.vector(3, 24)               // record batches
	if f.err != nil {
		return fmt.Errorf("footer: %v", f.err)
	}
	for d := int64(0); d < nd; d++ {
		p := dstart + 24*d
		if err := verifyMessage(data, f.i64(p), int64(int32(f.u32(p+8)))); err != nil {
			return fmt.Errorf("dictionary %d: %v", d, err)
		}
	}
	return nil
}

// verifyFields checks the vector of Field tables in field i of t (Schema.fields or Field.children).
func verifyFields(t table, i int64, depth int, visited *int) error {
	if depth > maxSchemaDepth {
		return errors.New("schema nested too deeply")
	}
	start, n := t.vector(i, 4)
	for k := int64(0); k < n && t.f.err == nil; k++ {
		*visited++
		if *visited > maxSchemaFields {
			return errors.New("schema has too many fields")
		}
		p := start + 4*k
		field := t.f.tableAt(p + int64(t.f.u32(p)))
		t.f.vectorAt(field, 0, 1) // name
		field.sub(3)              // type
		if dict, ok := field.sub(4); ok {
			dict.sub(1) // indexType
		}
		if err := verifyFields(field, 5, depth+1, visited); err != nil {
			return err
		}
		verifyKeyValues(field, 6)
	}
	if t.f.err != nil {
		return fmt.Errorf("schema: %v", t.f.err)
	}
	return nil
}

// verifyKeyValues checks a custom_metadata vector of KeyValue tables in field i of t.
func verifyKeyValues(t table, i int64) {
	start, n := t.vector(i, 4)
	for k := int64(0); k < n && t.f.err == nil; k++ {
		p := start + 4*k
		kv := t.f.tableAt(p + int64(t.f.u32(p)))
		t.f.vectorAt(kv, 0, 1)
		t.f.vectorAt(kv, 1, 1)
	}
}

// vectorAt is table.vector for a table obtained from f.
func (f *fbReader) vectorAt(t table, i, elemSize int64) { t.vector(i, elemSize) }

const messageHeaderDictionaryBatch = 2

// verifyMessage checks the record batch or dictionary message of a block before arrow-go decodes it. It
// refuses compressed bodies: arrow-go allocates a compressed buffer's declared uncompressed size unchecked.
func verifyMessage(data []byte, off, metaLen int64) error {
	size := int64(len(data))
	if off < 0 || metaLen < 8 || off > size || metaLen > size-off {
		return fmt.Errorf("block (offset %d, metadata %d) outside the %d-byte file", off, metaLen, size)
	}
	msg := data[off : off+metaLen]
	fbLen, fbStart := int64(int32(binary.LittleEndian.Uint32(msg))), int64(4)
	if fbLen == -1 {
		fbLen, fbStart = int64(int32(binary.LittleEndian.Uint32(msg[4:]))), 8
	}
	if fbLen <= 0 || fbLen > metaLen-fbStart {
		return fmt.Errorf("message length %d does not fit its %d-byte block", fbLen, metaLen)
	}
	f := &fbReader{b: msg[fbStart : fbStart+fbLen]}
	m := f.root()
	verifyKeyValues(m, 4)
	rb, ok := m.sub(2)
	if ok && m.u8(1, 0) == messageHeaderDictionaryBatch {
		rb, ok = rb.sub(1)
	}
	if ok {
		rb.vector(1, 16)
		rb.vector(2, 16)
		rb.vector(4, 8)
		if _, compressed := rb.sub(3); compressed && f.err == nil {
			return errors.New("compressed record batches are not supported")
		}
	}
	if f.err != nil {
		return fmt.Errorf("message: %v", f.err)
	}
	return nil
}

// footerBlocks returns the record batch blocks (offset, metadata length) listed in a verified footer.
func footerBlocks(data []byte) [][2]int64 {
	size := int64(len(data))
	flen := int64(binary.LittleEndian.Uint32(data[size-10:]))
	f := &fbReader{b: data[size-10-flen : size-10]}
	start, n := f.root().vector(3, 24)
	out := make([][2]int64, n)
	for b := range out {
		p := start + 24*int64(b)
		out[b] = [2]int64{f.i64(p), int64(int32(f.u32(p + 8)))}
	}
	return out
}
