package engine

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"

	"bitalign/capture"
	"bitalign/internal/atomicfile"
	"bitalign/kernels"
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

// stFile is a mapped safetensors file and its validated header, tensors by name.
type stFile struct {
	path    string
	m       *mapping
	tensors map[string]capture.SafetensorsTensor
}

// mapping is a checkpoint file mapped read-only. Every weight that views it holds it (kernels.Weights' keep),
// and it is unmapped by a cleanup once nothing does.
type mapping struct{ data []byte }

// openSafetensors validates path's header with capture.ParseSafetensorsHeader (reading only the header), then
// maps the file. Every error names the file; with several problems in one header the one reported is always
// the same: capture checks the entries by name and the overlaps by offset, and the dtype check below walks the
// tensors by offset. Nothing is allocated from the header beyond the header itself: the data stays in the
// mapping, whose size is the file's.
func openSafetensors(path string) (*stFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("engine: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("engine: %v", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("engine: %s: not a regular file", path)
	}
	h, err := capture.ParseSafetensorsHeader(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %v", path, err)
	}
	st := &stFile{path: path, tensors: make(map[string]capture.SafetensorsTensor, len(h.Tensors))}
	for _, t := range h.Tensors { // ordered by offset
		switch t.DType {
		case capture.BF16, capture.F16, capture.F32:
		default:
			return nil, fmt.Errorf("engine: %s: tensor %q: dtype %s not supported (bf16, f16, f32)", path, t.Name, t.DType)
		}
		if want := int64(numel(t.Shape)) * int64(t.DType.Size()); t.End-t.Begin != want {
			return nil, fmt.Errorf("engine: %s: tensor %q: shape %v × %s needs %d bytes, data_offsets give %d", path, t.Name, t.Shape, t.DType, want, t.End-t.Begin)
		}
		st.tensors[t.Name] = t
	}
	data, unmap, err := mapFile(path, f, fi.Size())
	if err != nil {
		return nil, err
	}
	st.m = &mapping{data: data}
	runtime.AddCleanup(st.m, func(unmap func() error) {
		unmap() //nolint:errcheck // nothing to tell: no weight refers to the mapping any more
	}, unmap)
	return st, nil
}

var stNames = map[capture.DType]string{capture.BF16: "BF16", capture.F16: "F16", capture.F32: "F32"}

// stored reports whether tensor name can be held in its stored dtype by a model of dtype want (kernels.F32, BF16
// or F16): it is stored in want, or in bf16/f16 for an f32 model (widening is exact: the stored bits are the
// model's values). It returns the tensor's bytes in the mapping.
func (st *stFile) stored(name string, want kernels.DType) (raw []byte, dt kernels.DType, ok bool) {
	t := st.tensors[name]
	raw = st.m.data[t.Begin:t.End]
	return raw, t.DType, t.DType == want || (want == kernels.F32 && (t.DType == capture.BF16 || t.DType == capture.F16))
}

// view is tensor name as a zero-copy view of the mapping, when it is stored (see stored) and aligned; the caller
// has checked kernels.CanonicalNaNs on its bytes.
func (st *stFile) view(name string, want kernels.DType) (W, bool) {
	raw, dt, ok := st.stored(name, want)
	if !ok {
		return W{}, false
	}
	return kernels.WeightsView(dt, raw, st.m)
}

// copyWeight is tensor name rounded to the model dtype want (today's rule for a checkpoint stored in another
// dtype than its config's), or, when it is stored (a misaligned tensor, a non-canonical NaN), in its own dtype
// with NaN made canonical: converted a block at a time, so that no float32 copy of a whole tensor is ever made.
func (st *stFile) copyWeight(name string, want kernels.DType) (W, error) {
	raw, dt, stored := st.stored(name, want)
	size := dt.Size()
	n := len(raw) / size
	if len(raw) != n*size {
		return W{}, fmt.Errorf("engine: %s: tensor %q: %d bytes of %s", st.path, name, len(raw), dt)
	}
	if stored {
		want = dt
	}
	w := kernels.NewWeights(want, n)
	const block = 1 << 16
	buf := make([]float32, min(n, block))
	for off := 0; off < n; off += block {
		b := buf[:min(block, n-off)]
		decode(dt, raw[off*size:(off+len(b))*size], b)
		w.Store(off, b)
	}
	runtime.KeepAlive(st.m)
	return w, nil
}

// Close drops this handle's reference to the mapping (which stays while weights view it).
func (st *stFile) Close() error {
	st.m = nil
	return nil
}

// stTensor is one tensor to write.
type stTensor struct {
	name  string
	shape []int64
	data  W
}

// writeSafetensors writes tensors (sorted by name, as safetensors does) in dtype dt to path atomically.
func writeSafetensors(path string, dt capture.DType, tensors []stTensor) error {
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].name < tensors[j].name })
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range tensors {
		n := int64(t.data.Len()) * int64(dt.Size())
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
			b := t.data.Raw() // stored in dt already: its bytes as they are
			if t.data.DType() != dt {
				b = encode(dt, t.data.Float32())
			}
			_, err := w.Write(b)
			runtime.KeepAlive(t.data)
			if err != nil {
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
