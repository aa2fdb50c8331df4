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

// A minimal safetensors reader and writer: an 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.

const maxSafetensorsHeader = 100 << 20 // the format's own limit

type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// stFile is an open safetensors file: its header and where its data starts.
type stFile struct {
	path    string
	f       *os.File
	size    int64
	dataOff int64
	entries map[string]stEntry
}

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
	size := fi.Size()
	var lenb [8]byte
	if _, err := io.ReadFull(f, lenb[:]); err != nil {
		return nil, fmt.Errorf("engine: %s: not a safetensors file: %d bytes, too short for a header", path, size)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n > maxSafetensorsHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("engine: %s: safetensors header length %d exceeds the file (%d bytes)", path, n, size)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("engine: %s: reading header: %v", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("engine: %s: safetensors header: %v", path, err)
	}
	st := &stFile{path: path, f: f, size: size, dataOff: 8 + int64(n), entries: map[string]stEntry{}}
	dataLen := size - st.dataOff
	for name, v := range raw {
		if name == "__metadata__" {
			continue
		}
		var e stEntry
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("engine: %s: tensor %q: %v", path, name, err)
		}
		dt, ok := stDTypes[e.DType]
		if !ok {
			return nil, fmt.Errorf("engine: %s: tensor %q: dtype %q not supported (BF16, F16, F32)", path, name, e.DType)
		}
		if len(e.Offsets) != 2 || e.Offsets[0] < 0 || e.Offsets[1] < e.Offsets[0] || e.Offsets[1] > dataLen {
			return nil, fmt.Errorf("engine: %s: tensor %q: data_offsets %v outside the %d data bytes", path, name, e.Offsets, dataLen)
		}
		if len(e.Shape) > capture.MaxDims {
			return nil, fmt.Errorf("engine: %s: tensor %q: %d dimensions", path, name, len(e.Shape))
		}
		elems := int64(1)
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && elems > dataLen/d) {
				return nil, fmt.Errorf("engine: %s: tensor %q: shape %v does not fit the file", path, name, e.Shape)
			}
			elems *= d
		}
		if want := elems * int64(dt.Size()); want != e.Offsets[1]-e.Offsets[0] {
			return nil, fmt.Errorf("engine: %s: tensor %q: shape %v × %s needs %d bytes, data_offsets give %d",
				path, name, e.Shape, e.DType, want, e.Offsets[1]-e.Offsets[0])
		}
		st.entries[name] = e
	}
	return st, nil
}

var stDTypes = map[string]capture.DType{"BF16": capture.BF16, "F16": capture.F16, "F32": capture.F32}

var stNames = map[capture.DType]string{capture.BF16: "BF16", capture.F16: "F16", capture.F32: "F32"}

// read loads tensor name into out (len(out) must equal its element count).
func (st *stFile) read(name string, out []float32) error {
	e := st.entries[name]
	dt := stDTypes[e.DType]
	buf := make([]byte, e.Offsets[1]-e.Offsets[0])
	if _, err := st.f.ReadAt(buf, st.dataOff+e.Offsets[0]); err != nil {
		return fmt.Errorf("engine: %s: tensor %q: %v", st.path, name, err)
	}
	if len(buf) != len(out)*dt.Size() {
		return fmt.Errorf("engine: %s: tensor %q: %d bytes for %d elements", st.path, name, len(buf), len(out))
	}
	decode(dt, buf, out)
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
