package capture

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Capture is an open capture: one or more mapped files and the index of their tensors. Entries are ordered by
// file (rank), then as written. Data slices are views of the mapping, valid until Close.
type Capture struct {
	cfg     openConfig
	path    string
	files   []*mappedFile
	metas   []Meta
	entries []Entry
	closed  bool
}

type mappedFile struct {
	path  string
	data  []byte
	unmap func() error
}

// OpenOption configures Open.
type OpenOption func(*openConfig)

type openConfig struct {
	mem         memory.Allocator
	genericOnly bool // tests: index with arrow-go's record batch decoder only
}

// WithReadAllocator sets the allocator arrow-go uses while reading the index (tests pass a checked allocator).
func WithReadAllocator(mem memory.Allocator) OpenOption { return func(c *openConfig) { c.mem = mem } }

// Open opens a capture: a bitalign .arrow file, a directory of them (one per rank) or a .safetensors file.
// It reads only the index; tensor bytes are touched when Data or Tensor is called. A file must be a regular
// file (captures are mapped: a pipe such as <(...) would block or stream). Complete says whether a
// tensor-parallel capture holds every rank's shards.
func Open(path string, opts ...OpenOption) (*Capture, error) {
	var cfg openConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.mem == nil {
		cfg.mem = memory.DefaultAllocator
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %v", err)
	}
	if st.IsDir() {
		return openDir(path, opts)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("capture: %s: not a regular file (%s): captures are read by mapping them; save the stream to a file first", path, fileKind(st.Mode()))
	}
	c := &Capture{path: path, cfg: cfg}
	if err := c.addFile(path, st.Size()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// addFile maps one file and indexes it as file number len(c.files).
func (c *Capture) addFile(path string, size int64) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("capture: %v", err)
	}
	defer f.Close()
	data, unmap, err := mapFile(f, size)
	if err != nil {
		return fmt.Errorf("capture: %s: %v", path, err)
	}
	adviseIndexing(data)
	defer adviseDone(data)
	return c.addData(path, data, unmap)
}

// addData indexes the file contents data (mapped, or in memory) as file number len(c.files).
func (c *Capture) addData(path string, data []byte, unmap func() error) (err error) {
	c.files = append(c.files, &mappedFile{path: path, data: data, unmap: unmap})
	idx := len(c.files) - 1

	defer func() {
		// arrow-go and our decoders are meant to fail with errors; this is the last line of defence.
		if r := recover(); r != nil {
			err = fmt.Errorf("capture: %s: corrupt file (%v)", path, r)
		}
	}()
	var meta Meta
	var entries []Entry
	switch {
	case bytes.HasPrefix(data, arrowMagic):
		meta, entries, err = indexArrow(data, idx, c.cfg)
	case strings.HasSuffix(strings.ToLower(path), ".safetensors") || looksLikeSafetensors(data):
		meta, entries, err = indexSafetensors(data, idx)
	default:
		err = errors.New("not a capture: neither an Arrow IPC file (wrong magic) nor safetensors")
	}
	if err == nil {
		err = checkUnique(entries)
	}
	if err != nil {
		return fmt.Errorf("capture: %s: %v", path, err)
	}
	c.metas = append(c.metas, meta)
	c.entries = append(c.entries, entries...)
	return nil
}

// openDir opens every *.arrow file of dir (one per rank; hidden files such as a writer's temp files are
// skipped) and checks that they form one capture: same side, step and layout, ranks 0..world-1 each once.
func openDir(dir string, opts []OpenOption) (*Capture, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("capture: %v", err)
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		if !de.IsDir() && !strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".arrow") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("capture: %s: no .arrow files in directory", dir)
	}
	// open each file on its own, then order by rank
	parts := make([]*Capture, 0, len(names))
	closeAll := func() {
		for _, p := range parts {
			p.Close()
		}
	}
	for _, n := range names {
		p, err := Open(filepath.Join(dir, n), opts...)
		if err != nil {
			closeAll()
			return nil, err
		}
		parts = append(parts, p)
	}
	slices.SortStableFunc(parts, func(a, b *Capture) int { return a.metas[0].Rank - b.metas[0].Rank })
	if err := checkRanks(dir, parts); err != nil {
		closeAll()
		return nil, err
	}
	c := &Capture{path: dir}
	for i, p := range parts {
		c.files = append(c.files, p.files[0])
		c.metas = append(c.metas, p.metas[0])
		for _, e := range p.entries {
			e.File = i
			c.entries = append(c.entries, e)
		}
	}
	return c, nil
}

func checkRanks(dir string, parts []*Capture) error {
	m0 := parts[0].metas[0]
	name := func(p *Capture) string { return filepath.Base(p.path) }
	for _, p := range parts[1:] {
		m := p.metas[0]
		switch {
		case m.Side != m0.Side:
			return fmt.Errorf("capture: %s: mixed captures: %s has side %q, %s has %q", dir, name(parts[0]), m0.Side, name(p), m.Side)
		case m.Step != m0.Step:
			return fmt.Errorf("capture: %s: mixed captures: %s has step %d, %s has %d", dir, name(parts[0]), m0.Step, name(p), m.Step)
		case m.TP != m0.TP || m.PP != m0.PP || m.DP != m0.DP:
			return fmt.Errorf("capture: %s: mixed captures: %s has tp/pp/dp %d/%d/%d, %s has %d/%d/%d", dir,
				name(parts[0]), m0.TP, m0.PP, m0.DP, name(p), m.TP, m.PP, m.DP)
		case m.FormatVersion != m0.FormatVersion:
			return fmt.Errorf("capture: %s: mixed captures: format versions %d and %d", dir, m0.FormatVersion, m.FormatVersion)
		}
	}
	world := m0.World()
	seen := make(map[int]string)
	for _, p := range parts {
		r := p.metas[0].Rank
		if prev, ok := seen[r]; ok {
			return fmt.Errorf("capture: %s: rank %d appears twice (%s and %s)", dir, r, prev, name(p))
		}
		seen[r] = name(p)
		if r < 0 || r >= world {
			return fmt.Errorf("capture: %s: %s has rank %d outside tp×pp×dp = %d", dir, name(p), r, world)
		}
	}
	var missing []int
	for r := 0; r < world; r++ {
		if _, ok := seen[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("capture: %s: rank files missing: ranks %v of tp×pp×dp = %d", dir, missing, world)
	}
	return nil
}

// fileKind names a non-regular file's type for an error.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a pipe, e.g. a FIFO or a <(...) process substitution"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// Complete returns an error when c is one file of a tensor-parallel capture whose tensors come from some
// ranks only (one rank's file opened alone): comparing it would report every other rank's shard as missing.
// A directory's ranks are checked by Open.
func (c *Capture) Complete() error {
	m := c.metas[0]
	if len(c.files) != 1 || m.TP < 2 {
		return nil
	}
	has := make([]bool, m.TP)
	for _, e := range c.entries {
		if int(e.Rank) >= 0 && int(e.Rank) < m.TP {
			has[e.Rank] = true
		}
	}
	var present, missing []int
	for r, ok := range has {
		if ok {
			present = append(present, r)
		} else {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 || len(present) == 0 {
		return nil
	}
	return fmt.Errorf("capture: %s: one file of a TP %d capture: it holds rank %v, ranks %v are missing; open the directory holding every rank's file (%s)",
		c.path, m.TP, present, missing, filepath.Dir(c.path)+string(filepath.Separator))
}

// Path is the path Open was given.
func (c *Capture) Path() string { return c.path }

// Meta is the metadata of the first file (rank 0 in a directory); Ranks gives every file's.
func (c *Capture) Meta() Meta {
	if len(c.metas) == 0 {
		return Meta{}
	}
	return c.metas[0]
}

// Ranks returns each file's metadata, in file order (by rank for a directory). Entry.File indexes it.
func (c *Capture) Ranks() []Meta { return slices.Clone(c.metas) }

// Files returns the path of each file, in file order.
func (c *Capture) Files() []string {
	out := make([]string, len(c.files))
	for i, f := range c.files {
		out[i] = f.path
	}
	return out
}

// Len is the number of tensors over all files.
func (c *Capture) Len() int { return len(c.entries) }

// Entry returns the index record of tensor i (0 ≤ i < Len). It never touches tensor data. Its Shape slices
// are shared: do not modify them.
func (c *Capture) Entry(i int) Entry { return c.entries[i] }

// Data returns the bytes of tensor i: a read-only view of the mapped file (writing to it faults), valid until
// Close. Its length is Entry(i).NBytes.
func (c *Capture) Data(i int) ([]byte, error) {
	if c.closed {
		return nil, fmt.Errorf("capture: %s: closed", c.path)
	}
	if i < 0 || i >= len(c.entries) {
		return nil, fmt.Errorf("capture: %s: tensor %d out of range [0, %d)", c.path, i, len(c.entries))
	}
	e := &c.entries[i]
	d := c.files[e.File].data
	end := e.Offset + e.NBytes
	return d[e.Offset:end:end], nil
}

// Tensor returns tensor i with its Data (a view, as Data).
func (c *Capture) Tensor(i int) (Tensor, error) {
	d, err := c.Data(i)
	if err != nil {
		return Tensor{}, err
	}
	return c.entries[i].tensor(d), nil
}

// DropPages takes the pages lying wholly inside tensors idx out of this process's resident set: a reader done
// with them (the diff, after each op) keeps the peak RSS near one op's tensors instead of both whole captures.
// Their Data stays valid: reading it again faults the pages back in from the page cache. It does nothing where
// the files are not mapped (only Linux's mappings are advised) and ignores indices out of range.
func (c *Capture) DropPages(idx []int) {
	if c.closed {
		return
	}
	pg := int64(os.Getpagesize())
	for _, i := range idx {
		if i < 0 || i >= len(c.entries) {
			continue
		}
		e := &c.entries[i]
		lo, hi := (e.Offset+pg-1)/pg*pg, (e.Offset+e.NBytes)/pg*pg
		if d := c.files[e.File].data; hi > lo && hi <= int64(len(d)) {
			dropPages(d[lo:hi])
		}
	}
}

// Close unmaps the files. Slices returned by Data are invalid afterwards. Close is idempotent.
func (c *Capture) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var first error
	for _, f := range c.files {
		if f.unmap != nil {
			if err := f.unmap(); err != nil && first == nil {
				first = fmt.Errorf("capture: %s: %v", f.path, err)
			}
			f.unmap = nil
		}
		f.data = nil
	}
	return first
}

// coord is what identifies a tensor within one file; the diff aligns tensors by it.
type coord struct {
	step, seq, pos int64
	op, role       string
	rank           int32
	shardStart     int64
}

// checkUnique fails when two tensors of one file have the same coordinates (the diff could not tell them
// apart).
func checkUnique(es []Entry) error {
	seen := make(map[coord]int, len(es))
	for i, e := range es {
		k := coord{e.Step, e.Seq, e.Pos, e.Op, e.Role, e.Rank, e.Shard.Start}
		if j, dup := seen[k]; dup {
			return fmt.Errorf("duplicate tensor %s role %s step %d seq %d pos %d rank %d (tensors %d and %d)",
				truncate(e.Op, 80), truncate(e.Role, 20), e.Step, e.Seq, e.Pos, e.Rank, j, i)
		}
		seen[k] = i
	}
	return nil
}
