package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxSafetensorsHeader bounds the JSON header of a safetensors file (the reference implementation's limit).
const MaxSafetensorsHeader = 100 << 20

// safetensors dtype names → DType. Anything else is an unknown dtype.
var safetensorsDTypes = map[string]DType{
	"BF16": BF16, "F16": F16, "F32": F32, "F64": F64, "I32": I32, "I64": I64, "U8": U8, "BOOL": Bool,
	"F8_E4M3": F8E4M3, "F8_E5M2": F8E5M2,
}

// SafetensorsTensor is one tensor of a safetensors header.
type SafetensorsTensor struct {
	Name  string
	DType DType
	Shape []int64
	// Begin and End are absolute byte offsets in the file (the header included): the data is file[Begin:End].
	Begin, End int64
}

// SafetensorsHeader is the parsed, validated header of a safetensors file.
type SafetensorsHeader struct {
	Tensors   []SafetensorsTensor // ordered by Begin (then by name for empty tensors)
	Metadata  map[string]string   // __metadata__; nil when absent
	DataStart int64               // 8 + header length: where the data section begins
}

// ReadSafetensorsHeader reads and validates the header of the safetensors file at path without reading
// tensor data (for checkpoint loaders). Errors read "capture: <path>: <problem>".
func ReadSafetensorsHeader(path string) (*SafetensorsHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("capture: %v", err)
	}
	h, err := ParseSafetensorsHeader(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("capture: %s: %v", path, err)
	}
	return h, nil
}

// ParseSafetensorsHeader reads and validates the header of a safetensors file of the given size from r.
// It allocates at most the header length, itself bounded by MaxSafetensorsHeader and the file size.
func ParseSafetensorsHeader(r io.ReaderAt, size int64) (*SafetensorsHeader, error) {
	var pre [8]byte
	if size < 8 {
		return nil, fmt.Errorf("truncated safetensors file (%d bytes, no header length)", size)
	}
	if _, err := r.ReadAt(pre[:], 0); err != nil {
		return nil, fmt.Errorf("reading header length: %v", err)
	}
	n, err := headerLen(binary.LittleEndian.Uint64(pre[:]), size)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("reading header: %v", err)
	}
	return parseHeader(hdr, size)
}

func headerLen(n uint64, size int64) (int64, error) {
	switch {
	case n < 2:
		return 0, fmt.Errorf("safetensors header length %d too small", n)
	case n > MaxSafetensorsHeader:
		return 0, fmt.Errorf("safetensors header length %d exceeds %d", n, MaxSafetensorsHeader)
	case int64(n) > size-8:
		return 0, fmt.Errorf("truncated safetensors file: header length %d, only %d bytes follow", n, size-8)
	}
	return int64(n), nil
}

// looksLikeSafetensors sniffs a file without the .safetensors suffix.
func looksLikeSafetensors(data []byte) bool {
	if len(data) < 10 {
		return false
	}
	n := binary.LittleEndian.Uint64(data)
	return n >= 2 && n <= uint64(len(data)-8) && data[8] == '{'
}

type stEntry struct {
	DType       *string       `json:"dtype"`
	Shape       []json.Number `json:"shape"`
	DataOffsets []json.Number `json:"data_offsets"`
}

// parseHeader validates the JSON header hdr of a file of fileSize bytes.
func parseHeader(hdr []byte, fileSize int64) (*SafetensorsHeader, error) {
	if len(bytes.TrimLeft(hdr, " \t\r\n")) == 0 || bytes.TrimLeft(hdr, " \t\r\n")[0] != '{' {
		return nil, errors.New("safetensors header is not a JSON object")
	}
	if err := checkDuplicateKeys(hdr); err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &top); err != nil {
		return nil, fmt.Errorf("safetensors header: %v", err)
	}
	h := &SafetensorsHeader{DataStart: 8 + int64(len(hdr))}
	dataLen := fileSize - h.DataStart
	names := slices.Sorted(maps.Keys(top)) // map order must not reach the result
	for _, name := range names {
		raw := top[name]
		if name == "__metadata__" {
			if err := json.Unmarshal(raw, &h.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ is not an object of strings: %v", err)
			}
			continue
		}
		t, err := parseEntry(name, raw, dataLen)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %v", truncate(name, 80), err)
		}
		t.Begin += h.DataStart
		t.End += h.DataStart
		h.Tensors = append(h.Tensors, t)
	}
	slices.SortStableFunc(h.Tensors, func(a, b SafetensorsTensor) int {
		if a.Begin != b.Begin {
			return cmpInt64(a.Begin, b.Begin)
		}
		return cmpInt64(a.End, b.End)
	})
	var prev *SafetensorsTensor
	for i := range h.Tensors {
		t := &h.Tensors[i]
		if t.End == t.Begin {
			continue
		}
		if prev != nil && t.Begin < prev.End {
			return nil, fmt.Errorf("tensors %q and %q overlap (bytes [%d, %d) and [%d, %d))",
				truncate(prev.Name, 80), truncate(t.Name, 80), prev.Begin, prev.End, t.Begin, t.End)
		}
		prev = t
	}
	return h, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func parseEntry(name string, raw json.RawMessage, dataLen int64) (SafetensorsTensor, error) {
	var e stEntry
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return SafetensorsTensor{}, err
	}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return SafetensorsTensor{}, errors.New("needs dtype, shape and data_offsets")
	}
	dt, ok := safetensorsDTypes[*e.DType]
	if !ok {
		return SafetensorsTensor{}, fmt.Errorf("unknown dtype %q", truncate(*e.DType, 20))
	}
	if len(e.Shape) > MaxDims {
		return SafetensorsTensor{}, fmt.Errorf("%d dimensions (at most %d)", len(e.Shape), MaxDims)
	}
	t := SafetensorsTensor{Name: name, DType: dt, Shape: make([]int64, len(e.Shape))}
	for i, d := range e.Shape {
		v, err := nonNegInt(d)
		if err != nil {
			return t, fmt.Errorf("shape: %v", err)
		}
		t.Shape[i] = v
	}
	if len(e.DataOffsets) != 2 {
		return t, fmt.Errorf("data_offsets has %d values, want 2", len(e.DataOffsets))
	}
	var err error
	if t.Begin, err = nonNegInt(e.DataOffsets[0]); err != nil {
		return t, fmt.Errorf("data_offsets: %v", err)
	}
	if t.End, err = nonNegInt(e.DataOffsets[1]); err != nil {
		return t, fmt.Errorf("data_offsets: %v", err)
	}
	if t.Begin > t.End || t.End > dataLen {
		return t, fmt.Errorf("data_offsets [%d, %d) outside the %d data bytes", t.Begin, t.End, dataLen)
	}
	want, err := byteLen(dt, t.Shape)
	if err != nil {
		return t, err
	}
	if want != t.End-t.Begin {
		return t, fmt.Errorf("shape %v × %s needs %d bytes, data_offsets give %d", t.Shape, dt, want, t.End-t.Begin)
	}
	return t, nil
}

// nonNegInt parses a JSON number that must be a non-negative integer fitting int64.
func nonNegInt(n json.Number) (int64, error) {
	s := string(n)
	if s == "" || strings.ContainsAny(s, ".eE+-") {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("negative value %s", truncate(s, 24))
		}
		return 0, fmt.Errorf("%s is not a non-negative integer", truncate(s, 24))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s overflows int64", truncate(s, 24))
	}
	return v, nil
}

// maxJSONDepth bounds nesting in a safetensors header (a tensor entry needs 3 levels).
const maxJSONDepth = 16

// checkDuplicateKeys walks the JSON tokens of b and fails on a key repeated within one object, which
// encoding/json would silently resolve to the last value.
func checkDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]struct{}
		key    bool // the next token in this object is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) != 0 {
				return errors.New("safetensors header: unexpected end of JSON")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("safetensors header: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k, _ := tok.(string)
			if _, dup := top.keys[k]; dup {
				return fmt.Errorf("safetensors header: duplicate key %q", truncate(k, 80))
			}
			top.keys[k] = struct{}{}
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // this token is the value; the one after it is a key again
		}
		switch d, _ := tok.(json.Delim); d {
		case '{':
			if len(stack) >= maxJSONDepth {
				return errors.New("safetensors header: JSON nested too deeply")
			}
			stack = append(stack, frame{object: true, keys: map[string]struct{}{}, key: true})
		case '[':
			if len(stack) >= maxJSONDepth {
				return errors.New("safetensors header: JSON nested too deeply")
			}
			stack = append(stack, frame{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		}
	}
}

// indexSafetensors indexes a mapped safetensors file as a capture (docs/capture-format.md).
func indexSafetensors(data []byte, file int) (Meta, []Entry, error) {
	h, err := ParseSafetensorsHeader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Meta{}, nil, err
	}
	meta, err := metaFromSafetensors(h.Metadata)
	if err != nil {
		return Meta{}, nil, err
	}
	entries := make([]Entry, 0, len(h.Tensors))
	explicit := make([]bool, 0, len(h.Tensors))
	in := internTable{}
	for _, t := range h.Tensors {
		e, explicitIndex, err := entryFromName(t.Name, t.Shape)
		if err != nil {
			return Meta{}, nil, fmt.Errorf("tensor %q: %v", truncate(t.Name, 80), err)
		}
		e.Op, e.Role = in.intern(e.Op), in.intern(e.Role)
		e.DType, e.Shape, e.File = t.DType, t.Shape, file
		e.Offset, e.NBytes = t.Begin, t.End-t.Begin
		entries = append(entries, e)
		explicit = append(explicit, explicitIndex)
	}
	order, _, err := importOrder(h.Metadata, entries, explicit)
	if err != nil {
		return Meta{}, nil, err
	}
	for i := range entries {
		e := &entries[i]
		if !explicit[i] {
			e.Index = order[e.Op]
		}
		if err := e.check(); err != nil {
			return Meta{}, nil, fmt.Errorf("tensor %q: %v", truncate(h.Tensors[i].Name, 80), err)
		}
	}
	return meta, entries, nil
}

// KeyImportIndex is the __metadata__ key of a safetensors file that gives its ops' execution order: a JSON
// array of op names, index = position ("[\"tokens\",\"embed\",...]").
const KeyImportIndex = "bitalign.index"

// maxImportLayer bounds the layer number of a canonical op name in an imported file: a larger one is not
// canonical (no model has that many layers, and the indexes after it must fit an int32).
const maxImportLayer = 1 << 16

// importOrder gives each op of a safetensors file whose tensors carry no index= coordinate its execution
// index: from __metadata__ bitalign.index, else from the canonical op names (capture.OpNames, with the layers
// and the optional q/k norms the file has; other names are numbered after that list in data order), else in
// data order from 0. warn is non-empty when some index follows the data order, which is not the execution order for files
// saved by safetensors.torch.save_file (it sorts tensors by dtype, then name).
func importOrder(md map[string]string, es []Entry, explicit []bool) (order map[string]int32, warn string, err error) {
	var ops []string // in data order, each once
	seen := map[string]bool{}
	for i, e := range es {
		if !explicit[i] && !seen[e.Op] {
			seen[e.Op] = true
			ops = append(ops, e.Op)
		}
	}
	order = make(map[string]int32, len(ops))
	if v, ok := md[KeyImportIndex]; ok {
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			return nil, "", fmt.Errorf("__metadata__ %s: want a JSON array of op names: %v", KeyImportIndex, err)
		}
		pos := make(map[string]int32, len(list))
		for i, op := range list {
			if _, dup := pos[op]; dup {
				return nil, "", fmt.Errorf("__metadata__ %s: op %q listed twice", KeyImportIndex, truncate(op, 80))
			}
			if i > 1<<31-1 {
				return nil, "", fmt.Errorf("__metadata__ %s: more than 2^31 ops", KeyImportIndex)
			}
			pos[op] = int32(i)
		}
		for _, op := range ops {
			i, ok := pos[op]
			if !ok {
				return nil, "", fmt.Errorf("__metadata__ %s does not list op %q (give every op without index=)",
					KeyImportIndex, truncate(op, 80))
			}
			order[op] = i
		}
		return order, "", nil
	}
	layers, qkNorm := 0, false
	moeLayers := map[int]bool{} // layers with a mixture-of-experts op
	isMoE := func(l int) bool { return moeLayers[l] }
	allMoE := func(int) bool { return true }
	for _, op := range ops {
		l, s, ok := SplitLayerOp(op)
		if !ok || l >= maxImportLayer {
			continue
		}
		dense, moe := OpIndex(op, l+1, true, nil) >= 0, OpIndex(op, l+1, true, allMoE) >= 0
		if dense || moe {
			layers = max(layers, l+1)
			qkNorm = qkNorm || s == LayerQNorm || s == LayerKNorm
		}
		if moe && !dense {
			moeLayers[l] = true
		}
	}
	next, canonical := int32(0), false
	for _, op := range ops {
		canonical = canonical || OpIndex(op, layers, qkNorm, isMoE) >= 0
	}
	if canonical {
		next = int32(OpIndex(OpSample, layers, qkNorm, isMoE) + 1) // past the canonical list
	}
	var other []string
	for _, op := range ops {
		if i := OpIndex(op, layers, qkNorm, isMoE); i >= 0 {
			order[op] = int32(i)
			continue
		}
		order[op] = next
		next++
		other = append(other, op)
	}
	if len(other) > 0 {
		warn = fmt.Sprintf("%d op names are not canonical (%s): their execution index is the order of the file's "+
			"data, which safetensors.torch.save_file sorts by dtype and name, not by execution; give "+
			"__metadata__ %s or index= in the names", len(other), listSome(other, 3), KeyImportIndex)
	}
	return order, warn, nil
}

// listSome quotes the first n of names, then says how many more there are.
func listSome(names []string, n int) string {
	q := make([]string, 0, n)
	for _, s := range names[:min(n, len(names))] {
		q = append(q, strconv.Quote(truncate(s, 80)))
	}
	if len(names) > n {
		q = append(q, fmt.Sprintf("and %d more", len(names)-n))
	}
	return strings.Join(q, ", ")
}

// ImportWarnings says what the import of c's safetensors files could not decide for sure (today: ops whose
// execution index follows the file's data order), one line per file naming it; nil for Arrow captures.
func (c *Capture) ImportWarnings() []string {
	var out []string
	for i, f := range c.files {
		if f.data == nil || bytes.HasPrefix(f.data, arrowMagic) {
			continue
		}
		h, err := ParseSafetensorsHeader(bytes.NewReader(f.data), int64(len(f.data)))
		if err != nil {
			continue // Open indexed it, so this does not happen
		}
		var es []Entry
		var explicit []bool
		for _, e := range c.entries {
			if e.File == i {
				_, ex, _ := entryFromName(h.Tensors[len(es)].Name, nil)
				es, explicit = append(es, e), append(explicit, ex)
			}
		}
		if _, warn, err := importOrder(h.Metadata, es, explicit); err == nil && warn != "" {
			out = append(out, fmt.Sprintf("capture: %s: %s", f.path, warn))
		}
	}
	return out
}

// entryFromName maps "op" or "op@key=value,..." to coordinates; it reports whether index was given.
func entryFromName(name string, shape []int64) (Entry, bool, error) {
	e := Entry{Role: "out", Shard: NoShard}
	op, coords, hasCoords := strings.Cut(name, "@")
	if op == "" {
		return e, false, errors.New("empty op name")
	}
	e.Op = op
	if len(shape) > 0 {
		e.NTok = shape[0]
	}
	explicitIndex := false
	if !hasCoords {
		return e, false, nil
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(coords, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return e, false, fmt.Errorf("bad coordinate %q (want key=value)", truncate(kv, 40))
		}
		if seen[k] {
			return e, false, fmt.Errorf("coordinate %q given twice", truncate(k, 40))
		}
		seen[k] = true
		var err error
		num := func(lo, hi int64) int64 {
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < lo || n > hi {
				err = fmt.Errorf("bad %s=%q", k, truncate(v, 24))
			}
			return n
		}
		const maxI32 = 1<<31 - 1
		switch k {
		case "step":
			e.Step = num(-1<<63, 1<<63-1)
		case "seq":
			e.Seq = num(-1<<63, 1<<63-1)
		case "pos":
			e.Pos = num(-1<<63, 1<<63-1)
		case "ntok":
			e.NTok = num(0, 1<<63-1)
		case "index":
			e.Index = int32(num(-1<<31, maxI32))
			explicitIndex = true
		case "rank":
			e.Rank = int32(num(0, maxI32))
		case "shard_dim":
			e.Shard.Dim = int(num(-1, MaxDims))
		case "shard_start":
			e.Shard.Start = num(0, 1<<63-1)
		case "role":
			if v == "" {
				err = errors.New("empty role")
			}
			e.Role = v
		case "full_shape":
			dims := strings.Split(v, "x")
			if len(dims) > MaxDims {
				return e, false, fmt.Errorf("full_shape with %d dimensions", len(dims))
			}
			for _, d := range dims {
				n, perr := strconv.ParseInt(d, 10, 64)
				if perr != nil || n < 0 {
					return e, false, fmt.Errorf("bad full_shape=%q", truncate(v, 40))
				}
				e.Shard.FullShape = append(e.Shard.FullShape, n)
			}
		default:
			return e, false, fmt.Errorf("unknown coordinate %q", truncate(k, 40))
		}
		if err != nil {
			return e, false, err
		}
	}
	return e, explicitIndex, nil
}

// metaFromSafetensors maps __metadata__ to a Meta (docs/capture-format.md).
func metaFromSafetensors(md map[string]string) (Meta, error) {
	m := Meta{FormatVersion: FormatVersion}
	extra := map[string]string{}
	if mj, ok := md["bitalign.meta"]; ok {
		if err := json.Unmarshal([]byte(mj), &m); err != nil {
			return m, fmt.Errorf("__metadata__ bitalign.meta: %v", err)
		}
		m.FormatVersion = FormatVersion
		if len(m.Extra) == 0 {
			for k, v := range md {
				if k != "bitalign.meta" && k != KeyImportIndex {
					extra[k] = v
				}
			}
		}
	} else {
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the first bad key reported must not depend on map order
		for _, k := range keys {
			v := md[k]
			var err error
			switch k {
			case KeyImportIndex: // the ops' order, not Meta
			case "side":
				m.Side = v
			case "kernel_profile":
				m.KernelProfile = v
			case "producer":
				m.Producer = v
			case "tp":
				m.TP, err = strconv.Atoi(v)
			case "pp":
				m.PP, err = strconv.Atoi(v)
			case "dp":
				m.DP, err = strconv.Atoi(v)
			case "rank":
				m.Rank, err = strconv.Atoi(v)
			case "batch_size":
				m.BatchSize, err = strconv.Atoi(v)
			case "step":
				m.Step, err = strconv.ParseInt(v, 10, 64)
			case "seed":
				m.Seed, err = strconv.ParseUint(v, 10, 64)
			case "created":
				m.Created, err = time.Parse(time.RFC3339Nano, v)
			case "model":
				if !json.Valid([]byte(v)) {
					err = errors.New("not JSON")
				}
				m.Model = json.RawMessage(v)
			default:
				extra[k] = v
			}
			if err != nil {
				return m, fmt.Errorf("__metadata__ %s=%q: %v", k, truncate(v, 40), err)
			}
		}
	}
	if len(extra) > 0 {
		b, err := json.Marshal(extra) // encoding/json sorts map keys: deterministic
		if err != nil {
			return m, err
		}
		m.Extra = b
	}
	return m, checkMeta(m)
}
