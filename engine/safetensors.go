package engine

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"bitalign/capture"
	"bitalign/internal/atomicfile"
)

// Checkpoints are read through capture's safetensors header parser (the one captures use: bounded, duplicate
// keys, overlaps and out-of-range offsets rejected, entries checked in a fixed order), and written by
// writeSafetensors below: an 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.

// stEntry is one tensor's header entry as writeSafetensors writes it.
type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// stFile is an open safetensors file and its validated header, tensors by name.
type stFile struct {
	path    string
	f       *os.File
	tensors map[string]capture.SafetensorsTensor
}

// openSafetensors opens path and validates its header with capture.ParseSafetensorsHeader on the same open
// file (so the header and the data read later come from one file). Every error names the file; with several
// problems in one header the one reported is always the same: capture checks the entries by name and the
// overlaps by offset, and the dtype check below walks the tensors by offset.
func openSafetensors(path string) (*stFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %v", err)
	}
	st, err := readSafetensorsHeader(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return st, nil
}

func readSafetensorsHeader(path string, f *os.File) (*stFile, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("engine: %v", err)
	}
	h, err := capture.ParseSafetensorsHeader(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %v", path, err)
	}
	st := &stFile{path: path, f: f, tensors: make(map[string]capture.SafetensorsTensor, len(h.Tensors))}
	for _, t := range h.Tensors { // ordered by offset
		switch t.DType {
		case capture.BF16, capture.F16, capture.F32:
		default:
			return nil, fmt.Errorf("engine: %s: tensor %q: dtype %s not supported (bf16, f16, f32)", path, t.Name, t.DType)
		}
		st.tensors[t.Name] = t
	}
	return st, nil
}

var stNames = map[capture.DType]string{capture.BF16: "BF16", capture.F16: "F16", capture.F32: "F32"}

// read loads tensor name into out (len(out) must equal its element count).
func (st *stFile) read(name string, out []float32) error {
	t := st.tensors[name]
	buf := make([]byte, t.End-t.Begin)
	if _, err := st.f.ReadAt(buf, t.Begin); err != nil {
		return fmt.Errorf("engine: %s: tensor %q: %v", st.path, name, err)
	}
	if len(buf) != len(out)*t.DType.Size() {
		return fmt.Errorf("engine: %s: tensor %q: %d bytes for %d elements", st.path, name, len(buf), len(out))
	}
	decode(t.DType, buf, out)
	return nil
}

func (st *stFile) Close() error { return st.f.Close() }

// stTensor is one tensor to write.
type stTensor struct {
	name  string
	shape []int64
	data  []float32
}

// writeSafetensors writes tensors (sorted by name, as safetensors does) in dtype dt to path atomically.
func writeSafetensors(path string, dt capture.DType, tensors []stTensor) error {
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].name < tensors[j].name })
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range tensors {
		n := int64(len(t.data)) * int64(dt.Size())
		hdr[t.name] = stEntry{DType: stNames[dt], Shape: t.shape, Offsets: []int64{off, off + n}}
		off += n
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return fmt.Errorf("engine: %s: %v", path, err)
	}
	for len(hb)%8 != 0 { // align the data to 8 bytes, as the reference writer does
		hb = append(hb, ' ')
	}
	return writeAtomic(path, func(w io.Writer) error {
		var lenb [8]byte
		binary.LittleEndian.PutUint64(lenb[:], uint64(len(hb)))
		if _, err := w.Write(lenb[:]); err != nil {
			return err
		}
		if _, err := w.Write(hb); err != nil {
			return err
		}
		for _, t := range tensors {
			if _, err := w.Write(encode(dt, t.data)); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeAtomic writes a file through a temp file in the same directory, fsyncs and renames it into place (Save
// has already checked whether replacing is allowed).
func writeAtomic(path string, fill func(io.Writer) error) error {
	if err := atomicfile.Write(path, true, fill); err != nil {
		return fmt.Errorf("engine: %s: %v", path, err)
	}
	return nil
}
