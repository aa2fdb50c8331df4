package engine

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"
	"weak"

	"bitalign/capture"
	"bitalign/kernels"
)

// within reports whether w's bytes lie inside data (a zero-copy view of it).
func within(w W, data []byte) bool {
	r := w.Raw()
	if len(r) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&r[0])), uintptr(unsafe.Pointer(&data[0]))
	return p >= lo && p+uintptr(len(r)) <= lo+uintptr(len(data))
}

// TestLoadKeepsStoredDType: a bf16 checkpoint of a bf16 model loads as views of its mapping (no copy, no
// float32), f16 into bf16 and f32 into bf16 are compact bf16 copies with today's rounding, bf16 into an f32
// model stays bf16 (exact); the model's memory is the checkpoint's size.
func TestLoadKeepsStoredDType(t *testing.T) {
	for _, c := range []struct {
		stored, config capture.DType
		held           kernels.DType
	}{
		{capture.BF16, capture.BF16, kernels.BF16}, {capture.F16, capture.F16, kernels.F16}, {capture.F32, capture.F32, kernels.F32},
		{capture.F16, capture.BF16, kernels.BF16}, {capture.F32, capture.BF16, kernels.BF16}, {capture.BF16, capture.F32, kernels.BF16},
	} {
		t.Run(c.stored.String()+"-as-"+c.config.String(), func(t *testing.T) {
			m := NewRandom(tinyConfig(ArchQwen2, c.stored), 5)
			dir := t.TempDir()
			if err := m.Save(dir); err != nil {
				t.Fatal(err)
			}
			if c.config != c.stored {
				rewriteConfig(t, dir, func(h map[string]any) {
					h["torch_dtype"] = map[capture.DType]string{capture.BF16: "bfloat16", capture.F32: "float32"}[c.config]
				})
			}
			back, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range back.weightSpecs() {
				if dt := s.ptr.DType(); dt != c.held {
					t.Fatalf("%s held as %v, want %v", s.name, dt, c.held)
				}
				want := (*m.weightSpecsByName()[s.name]).Float32()
				for i, x := range want {
					if r := roundTo(c.config, x); math.Float32bits(s.ptr.At(i)) != math.Float32bits(r) {
						t.Fatalf("%s[%d] = %v, want %v", s.name, i, s.ptr.At(i), r)
					}
				}
				// a view of the mapping exactly when nothing had to be converted
				mp, _ := s.ptr.Owner().(*mapping)
				if view := mp != nil && within(*s.ptr, mp.data); view != (c.stored == c.config || c.held == c.stored) {
					t.Fatalf("%s: view of the mapping = %v", s.name, view)
				}
			}
			size := int64(0)
			for _, s := range m.weightSpecs() {
				size += int64(numel(s.shape)) * int64(c.held.Size())
			}
			if got := back.WeightBytes(); got != size {
				t.Fatalf("weights take %d bytes, want %d", got, size)
			}
		})
	}
}

// weightSpecsByName indexes weightSpecs (tests).
func (m *Model) weightSpecsByName() map[string]*W {
	out := map[string]*W{}
	for _, s := range m.weightSpecs() {
		out[s.name] = s.ptr
	}
	return out
}

// TestLoadMisalignedAndNaN: a tensor whose offset is odd (no uint16 view possible) or that holds a NaN other
// than the canonical one is copied, with the bits today's rule gives (NaN canonical), and the model runs.
func TestLoadMisalignedAndNaN(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	m := NewRandom(cfg, 8)
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.safetensors")
	_, hdr, stored := readSafetensors(t, path)
	// a NaN with a payload in model.norm.weight[3]
	var e stEntry
	json.Unmarshal(hdr["model.norm.weight"], &e)
	data := append([]byte(nil), stored...)
	binary.LittleEndian.PutUint16(data[e.Offsets[0]+6:], 0x7F81)
	hb, _ := json.Marshal(hdr)
	hb = append(hb, ' ') // odd header length: every tensor starts at an odd address
	if len(hb)%2 == 0 {
		hb = append(hb, ' ')
	}
	if err := os.WriteFile(path, safetensorsFile(hb, data), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := math.Float32bits(back.Norm.At(3)); got != kernels.CanonicalNaN {
		t.Fatalf("NaN weight loaded as %#x, want the canonical NaN", got)
	}
	want := m.Norm.Float32()
	want = append([]float32(nil), want...)
	want[3] = math.Float32frombits(kernels.CanonicalNaN)
	if i, _, diff := kernels.FirstDiff(back.Norm.Float32(), want); diff {
		t.Fatalf("norm differs at %d", i)
	}
	back.Norm = m.Norm // checked above; every other tensor (all misaligned) must be the original
	if !sameWeights(m, back) {
		t.Fatal("misaligned tensors load to other values")
	}
}

// TestLoadSharded: a checkpoint saved in shards (MaxShardBytes) loads to the same weights as one file, and a
// bad shard is reported by name, the same one (the first by file name) on every run although the shards are
// opened in parallel.
func TestLoadSharded(t *testing.T) {
	cfg := tinyConfig(ArchQwen3, capture.BF16)
	m := NewRandom(cfg, 9)
	dir := t.TempDir()
	if err := m.Save(dir, MaxShardBytes(20_000)); err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 4 {
		t.Fatalf("%d shards, want several", len(shards))
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
		t.Fatal("a sharded save wrote model.safetensors")
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !sameWeights(m, back) {
		t.Fatal("sharded checkpoint loads to other weights")
	}
	if err := m.Save(dir, MaxShardBytes(20_000)); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("Save over shards: %v", err)
	}
	// two shards truncated: always the first by name
	for _, s := range []string{shards[len(shards)-1], shards[1]} {
		b, _ := os.ReadFile(s)
		os.WriteFile(s, b[:len(b)-10], 0o644)
	}
	for i := 0; i < 10; i++ {
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), filepath.Base(shards[1])) {
			t.Fatalf("run %d: %v, want the error of %s", i, err, filepath.Base(shards[1]))
		}
	}
	// Overwrite back to one file removes the stale index
	if err := m.Save(dir, Overwrite()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		t.Fatal("stale index left beside model.safetensors")
	}
	if back, err = Load(dir); err != nil || !sameWeights(m, back) {
		t.Fatalf("after Overwrite: %v", err)
	}
}

// TestLoadBadData: a header whose data_offsets disagree with shape × dtype, and a checkpoint that is a
// directory, are errors naming the file.
func TestLoadBadData(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	dir := t.TempDir()
	if err := NewRandom(cfg, 4).Save(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.safetensors")
	_, hdr, data := readSafetensors(t, path)
	var e stEntry
	json.Unmarshal(hdr["model.norm.weight"], &e)
	e.DType = "F32" // twice the bytes the offsets hold
	hdr["model.norm.weight"], _ = json.Marshal(e)
	hb, _ := json.Marshal(hdr)
	os.WriteFile(path, safetensorsFile(hb, data), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "model.norm.weight") {
		t.Fatalf("lying dtype: %v", err)
	}
	os.Remove(path)
	os.Mkdir(path, 0o755)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("directory: %v", err)
	}
}

// TestLoadReleasesMappings: the weights keep their mapping alive (a weight used after every other reference to
// its file is gone still reads it), and a dropped model's mappings are collected (and so unmapped by their
// cleanup).
func TestLoadReleasesMappings(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	dir := t.TempDir()
	want := NewRandom(cfg, 12)
	if err := want.Save(dir, MaxShardBytes(30_000)); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var maps []weak.Pointer[mapping]
	for _, s := range m.weightSpecs() {
		mp, ok := s.ptr.Owner().(*mapping)
		if !ok {
			t.Fatalf("%s is not a view of a mapping", s.name)
		}
		maps = append(maps, weak.Make(mp))
	}
	q := m.Layers[1].Q // the last reference to its shard once m is dropped
	qm := weak.Make(q.Owner().(*mapping))
	m = nil
	for range 3 {
		runtime.GC()
	}
	if qm.Value() == nil {
		t.Fatal("the mapping of a live weight was collected")
	}
	if !q.Identical(want.Layers[1].Q) {
		t.Fatal("a weight changed after its model was dropped")
	}
	runtime.KeepAlive(q)
	q = W{}
	for range 3 {
		runtime.GC()
	}
	for i, p := range maps {
		if p.Value() != nil {
			t.Fatalf("mapping %d still reachable after the model and its weights were dropped", i)
		}
	}
	_, _ = m, q
}

// TestCPUWeightBufs: the CPU backend's weight buffers (UploadWeights: the model's own tensor) download, copy
// and view as their widened values, and a matmul on a view reads the right rows.
func TestCPUWeightBufs(t *testing.T) {
	vals := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	be := NewCPU()
	b := be.UploadWeights(kernels.RoundWeights(kernels.BF16, vals))
	got := make([]float32, 8)
	if err := be.Download(got, b); err != nil || fmt.Sprint(got) != fmt.Sprint(vals) {
		t.Fatalf("download %v %v", got, err)
	}
	c := be.Alloc(4)
	be.Copy(c, be.View(b, 4, 4))
	be.Download(got[:4], c)
	if fmt.Sprint(got[:4]) != "[5 6 7 8]" {
		t.Fatalf("copy of a view: %v", got[:4])
	}
	x, out := be.Alloc(2), be.Alloc(2)
	be.Upload(x, []float32{1, 1})
	be.Matmul(kernels.Canonical, out, x, be.View(b, 4, 4), nil, 1, 2, 2, kernels.F32)
	be.Download(got[:2], out)
	if fmt.Sprint(got[:2]) != "[11 15]" || be.Err() != nil {
		t.Fatalf("matmul on a view: %v %v", got[:2], be.Err())
	}
	be.View(b, 6, 4)
	if be.Err() == nil {
		t.Fatal("view past the end accepted")
	}
}
