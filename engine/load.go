package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"bitalign/capture"
	"bitalign/internal/par"
	"bitalign/kernels"
)

// maxIndexBytes bounds model.safetensors.index.json (real ones are a few hundred KB even for MoE models).
const maxIndexBytes = 64 << 20

// Load reads a Hugging Face checkpoint directory: config.json plus model.safetensors, or the shards named by
// model.safetensors.index.json. The files are mapped read-only and validated, the shards in parallel. A weight
// stored in the config's dtype (or in bf16/f16 for an f32 model) stays in it: a zero-copy view of the mapping
// where its offset is aligned, a copy otherwise; a weight stored in another dtype is rounded to the config's
// dtype into a compact copy of that dtype. The model's memory is then about the checkpoint's size.
func Load(dir string) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	m := newModel(cfg)
	where, source, err := checkpointFiles(dir)
	if err != nil {
		return nil, err
	}
	files, err := openShards(dir, where)
	if err != nil {
		return nil, err
	}
	if where == nil { // one model.safetensors: it holds every tensor
		where = map[string]string{}
		for name := range files["model.safetensors"].tensors {
			where[name] = "model.safetensors"
		}
	}
	// The header-only pass, in the specs' fixed order (so the first problem reported never depends on timing):
	// every tensor located, its shape checked; then the data pass, in parallel.
	var jobs []loadJob
	locate := func(name string, shape []int64, dst *W) (ok bool, err error) {
		file, ok := where[name]
		if !ok {
			return false, nil
		}
		st := files[file]
		e, ok := st.tensors[name]
		if !ok {
			return true, fmt.Errorf("engine: %s: tensor %q missing (the index names this file)", st.path, name)
		}
		if !equalShape(e.Shape, shape) {
			return true, fmt.Errorf("engine: %s: tensor %q has shape %v, the config needs %v", st.path, name, e.Shape, shape)
		}
		if len(jobs) == 0 && cfg.DType == capture.InvalidDType { // config.json names no dtype: the embedding's
			cfg.DType = e.DType
			m.Config.DType = cfg.DType
		}
		jobs = append(jobs, loadJob{st: st, name: name, dst: dst, bytes: e.End - e.Begin})
		return true, nil
	}
	var fused []*fusedLayer // MoE layers stored in the fused expert layout
	for _, s := range m.weightSpecs() {
		if l, _, ok := expertSpec(s.name); ok && slices.ContainsFunc(fused, func(f *fusedLayer) bool { return f.l == l }) {
			continue // located with the layer's fused tensors
		}
		ok, err := locate(s.name, s.shape, s.ptr)
		if err != nil {
			return nil, err
		}
		if ok {
			continue
		}
		if l, _, isExpert := expertSpec(s.name); isExpert {
			f, found, err := m.locateFused(l, locate)
			if err != nil {
				return nil, err
			}
			if found {
				fused = append(fused, f)
				continue
			}
		}
		return nil, fmt.Errorf("engine: %s: tensor %q missing from the checkpoint", source, s.name)
	}
	if err := runJobs(jobs, kdt(cfg.DType)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		m.mappings = append(m.mappings, files[n].m)
	}
	for _, f := range fused {
		m.splitFused(f)
	}
	if cfg.TiedEmbeddings {
		m.LMHead = m.Embed
	}
	return m, nil
}

// checkpointFiles maps every tensor name to its shard's file name (model.safetensors.index.json) or to
// model.safetensors; source is the file that names the tensors (for "missing" errors).
func checkpointFiles(dir string) (where map[string]string, source string, err error) {
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	fi, err := os.Stat(indexPath)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(single); err != nil {
			return nil, "", fmt.Errorf("engine: %s: no model.safetensors or model.safetensors.index.json", dir)
		}
		return nil, single, nil // every tensor in model.safetensors: openShards fills where
	}
	if err != nil {
		return nil, "", fmt.Errorf("engine: %v", err)
	}
	if fi.Size() > maxIndexBytes {
		return nil, "", fmt.Errorf("engine: %s: %d bytes, more than an index can need (%d)", indexPath, fi.Size(), maxIndexBytes)
	}
	data, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, "", fmt.Errorf("engine: %v", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, "", fmt.Errorf("engine: %s: %v", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, "", fmt.Errorf("engine: %s: empty weight_map", indexPath)
	}
	where = make(map[string]string, len(idx.WeightMap))
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) { // the first bad entry reported must not depend on map order
		file := idx.WeightMap[name]
		if file != filepath.Base(file) || file == "" || file == "." || file == ".." {
			return nil, "", fmt.Errorf("engine: %s: tensor %q: shard %q is not a file name in the checkpoint directory", indexPath, name, file)
		}
		where[name] = file
	}
	return where, indexPath, nil
}

// openShards maps and validates every shard where names (model.safetensors when where is nil, filling where
// with its tensors), in parallel over at most GOMAXPROCS goroutines. The error reported is the first shard's in
// file-name order, whatever finished first.
func openShards(dir string, where map[string]string) (map[string]*stFile, error) {
	if where == nil {
		st, err := openSafetensors(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			return nil, err
		}
		return map[string]*stFile{"model.safetensors": st}, nil
	}
	names := slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, f := range where {
			if !seen[f] {
				seen[f] = true
				if !yield(f) {
					return
				}
			}
		}
	})
	sts := make([]*stFile, len(names))
	errs := make([]error, len(names))
	parallel(len(names), func(i int) { sts[i], errs[i] = openSafetensors(filepath.Join(dir, names[i])) })
	if err := firstError(errs); err != nil {
		return nil, err
	}
	files := make(map[string]*stFile, len(names))
	for i, n := range names {
		files[n] = sts[i]
	}
	return files, nil
}

// firstError is the first non-nil error of errs (nil when none).
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// parallel runs f(0..n-1) over at most GOMAXPROCS goroutines, each taking the next index.
func parallel(n int, f func(i int)) { par.Each(n, 0, nil, f) }

// loadJob is one tensor to make a weight of.
type loadJob struct {
	st    *stFile
	name  string
	dst   *W
	bytes int64
}

// scanChunk is the most bytes of one tensor one goroutine scans for NaNs (kernels.CanonicalNaNs) at a time.
const scanChunk = 32 << 20

// runJobs makes every job's weight. First, in parallel, the bytes of every tensor that can stay a view are
// scanned for non-canonical NaNs in chunks of scanChunk (which also faults the mapping's pages in, on every
// core); then the views are made, and the tensors that cannot be views are copied, in parallel, the largest
// first. The error reported is the first job's in the specs' order.
func runJobs(jobs []loadJob, want kernels.DType) error {
	type chunk struct {
		job    int
		lo, hi int
	}
	var chunks []chunk
	for i, j := range jobs {
		raw, dt, ok := j.st.stored(j.name, want)
		if !ok {
			continue
		}
		step := scanChunk - scanChunk%dt.Size()
		for lo := 0; lo < len(raw); lo += step {
			chunks = append(chunks, chunk{i, lo, min(len(raw), lo+step)})
		}
	}
	clean := make([]bool, len(jobs)) // every chunk of the job's bytes has canonical NaNs only
	for _, c := range chunks {
		clean[c.job] = true
	}
	bad := make([]bool, len(chunks))
	parallel(len(chunks), func(i int) {
		c := chunks[i]
		raw, dt, _ := jobs[c.job].st.stored(jobs[c.job].name, want)
		bad[i] = !kernels.CanonicalNaNs(dt, raw[c.lo:c.hi])
	})
	for i, c := range chunks {
		if bad[i] {
			clean[c.job] = false
		}
	}
	var copies []int
	for i, j := range jobs {
		if clean[i] {
			if w, ok := j.st.view(j.name, want); ok {
				*j.dst = w
				continue
			}
		}
		copies = append(copies, i)
	}
	slices.SortStableFunc(copies, func(a, b int) int { return int(jobs[b].bytes>>20) - int(jobs[a].bytes>>20) })
	errs := make([]error, len(jobs))
	parallel(len(copies), func(i int) {
		j := jobs[copies[i]]
		*j.dst, errs[copies[i]] = j.st.copyWeight(j.name, want)
	})
	return firstError(errs)
}

// expertSpec parses "model.layers.L.mlp.experts.E.<proj>.weight" into L and E.
func expertSpec(name string) (layer, expert int, ok bool) {
	rest, found := strings.CutPrefix(name, "model.layers.")
	if !found {
		return 0, 0, false
	}
	ls, rest, found := strings.Cut(rest, ".mlp.experts.")
	if !found {
		return 0, 0, false
	}
	es, _, found := strings.Cut(rest, ".")
	if !found {
		return 0, 0, false
	}
	l, err1 := strconv.Atoi(ls)
	e, err2 := strconv.Atoi(es)
	return l, e, err1 == nil && err2 == nil
}

// fusedLayer is one MoE layer stored in the fused layout transformers ≥ 5 holds in memory
// (mlp.experts.gate_up_proj (E, 2·Im, H): each expert's gate rows then its up rows; mlp.experts.down_proj
// (E, H, Im)), split into the experts once loaded.
type fusedLayer struct {
	l            int
	gateUp, down W
}

// locateFused locates layer l's fused expert tensors (their weights are made with the other jobs, into f).
// found is false when the checkpoint has neither.
func (m *Model) locateFused(l int, locate func(string, []int64, *W) (bool, error)) (f *fusedLayer, found bool, err error) {
	c := m.Config
	E, H, Im := c.Experts, c.Hidden, c.MoEIntermediate
	p := "model.layers." + strconv.Itoa(l) + ".mlp.experts."
	f = &fusedLayer{l: l}
	ok1, err := locate(p+"gate_up_proj", []int64{int64(E), int64(2 * Im), int64(H)}, &f.gateUp)
	if err != nil {
		return nil, true, err
	}
	ok2, err := locate(p+"down_proj", []int64{int64(E), int64(H), int64(Im)}, &f.down)
	if err != nil {
		return nil, true, err
	}
	if !ok1 && !ok2 {
		return nil, false, nil
	}
	if !ok1 || !ok2 {
		return nil, true, fmt.Errorf("engine: layer %d: the checkpoint has only one of %sgate_up_proj and %sdown_proj", l, p, p)
	}
	return f, true, nil
}

// splitFused sets layer f.l's experts to views of its fused tensors.
func (m *Model) splitFused(f *fusedLayer) {
	c := m.Config
	H, Im := c.Hidden, c.MoEIntermediate
	ly := &m.Layers[f.l]
	for e := range ly.Experts {
		ly.Experts[e] = Expert{Gate: f.gateUp.Slice(e*2*Im*H, (e*2+1)*Im*H), Up: f.gateUp.Slice((e*2+1)*Im*H, (e+1)*2*Im*H),
			Down: f.down.Slice(e*H*Im, (e+1)*H*Im)}
	}
}
