package engine

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bitalign/capture"
)

func TestCheckpointRoundTrip(t *testing.T) {
	for _, arch := range []string{ArchLlama, ArchQwen2, ArchQwen3, ArchQwen3MoE, ArchQwen2MoE} {
		for _, dt := range []capture.DType{capture.BF16, capture.F16, capture.F32} {
			for _, tied := range []bool{false, true} {
				cfg := tinyConfig(arch, dt)
				cfg.TiedEmbeddings = tied
				name := arch + "-" + dt.String()
				if tied {
					name += "-tied"
				}
				t.Run(name, func(t *testing.T) {
					m := NewRandom(cfg, 11)
					dir := filepath.Join(t.TempDir(), "ckpt")
					if err := m.Save(dir); err != nil {
						t.Fatal(err)
					}
					back, err := Load(dir)
					if err != nil {
						t.Fatal(err)
					}
					if !sameWeights(m, back) {
						t.Fatal("weights differ after Save/Load")
					}
					st, err := openSafetensors(filepath.Join(dir, "model.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					if _, has := st.tensors["lm_head.weight"]; has == tied {
						t.Fatalf("lm_head.weight present = %v with tied = %v", has, tied)
					}
					if err := m.Save(dir); err == nil || !strings.Contains(err.Error(), "exists") {
						t.Fatalf("Save over an existing checkpoint: %v", err)
					}
					if err := m.Save(dir, Overwrite()); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

func TestNewRandomDeterministic(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	a, b, c := NewRandom(cfg, 1), NewRandom(cfg, 1), NewRandom(cfg, 2)
	if !sameWeights(a, b) || sameWeights(a, c) {
		t.Fatal("NewRandom is not a function of (config, seed)")
	}
	for _, x := range a.Layers[0].Q.Float32() {
		if roundTo(capture.BF16, x) != x {
			t.Fatal("random weight not representable in bf16")
		}
	}
}

// TestLoadShardedFixture loads testdata/engine/tiny_qwen2, written by make_tiny_qwen2.py (an independent
// safetensors writer): two shards and an index, bf16, q/k/v bias, tied embeddings.
func TestLoadShardedFixture(t *testing.T) {
	m, err := Load("../testdata/engine/tiny_qwen2")
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.Architecture != ArchQwen2 || !c.QKVBias || !c.TiedEmbeddings || c.HeadDim != 4 || c.KVHeads != 2 || c.RopeTheta != 1e6 {
		t.Fatalf("config %+v", c)
	}
	for _, s := range m.weightSpecs() {
		got := s.ptr.Float32()
		for i := range got {
			want := float32((i*37+len(s.name)*11)%17-8) / 16
			if got[i] != want {
				t.Fatalf("%s[%d] = %v, want %v", s.name, i, got[i], want)
			}
		}
	}
	if &m.LMHead.Raw()[0] != &m.Embed.Raw()[0] {
		t.Fatal("tied LM head is not the embedding")
	}
	// The fixture runs: a short rollout and its trainer recomputation agree bitwise.
	seqs, plen, out := rollout(t, m, 0, "")
	tr, err := m.Train(t.Context(), seqs, TrainOptions{RunOptions: RunOptions{TP: 2, Seed: 9, Step: 3}, PromptLens: plen})
	if err != nil {
		t.Fatal(err)
	}
	if d := sameOutputs(out, tr); d != "" {
		t.Fatal(d)
	}
}

// TestLoadF32IntoBF16 rounds float32 stored weights to the config's bf16.
func TestLoadF32IntoBF16(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.F32)
	m := NewRandom(cfg, 3)
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	rewriteConfig(t, dir, func(c map[string]any) { c["torch_dtype"] = "bfloat16" })
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if dt := back.Layers[1].Down.DType(); dt != capture.BF16 {
		t.Fatalf("down is held as %s, want the config's bf16", dt)
	}
	for i, x := range m.Layers[1].Down.Float32() {
		if back.Layers[1].Down.At(i) != roundTo(capture.BF16, x) {
			t.Fatalf("down[%d]: %v, want bf16(%v)", i, back.Layers[1].Down.At(i), x)
		}
	}
}

// TestLoadDTypeFromWeights: a config.json without dtype takes the stored weights' dtype.
func TestLoadDTypeFromWeights(t *testing.T) {
	m := NewRandom(tinyConfig(ArchQwen2, capture.F16), 3)
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	rewriteConfig(t, dir, func(c map[string]any) { delete(c, "torch_dtype") })
	if c, err := LoadConfig(dir); err != nil || c.DType != capture.InvalidDType {
		t.Fatalf("config without dtype: %v %v", c.DType, err)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Config.DType != capture.F16 || !sameWeights(m, back) {
		t.Fatalf("dtype %v", back.Config.DType)
	}
}

func rewriteConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	if err := os.WriteFile(p, mustJSON(t, c), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadBadCheckpoints(t *testing.T) {
	cfg := tinyConfig(ArchLlama, capture.BF16)
	good := t.TempDir()
	if err := NewRandom(cfg, 4).Save(good, Overwrite()); err != nil {
		t.Fatal(err)
	}
	stFile := filepath.Join(good, "model.safetensors")
	orig, hdr, data := readSafetensors(t, stFile)
	// withHeader rebuilds the file with an edited header and the same data.
	withHeader := func(edit func(map[string]json.RawMessage)) []byte {
		h := map[string]json.RawMessage{}
		for k, v := range hdr {
			h[k] = v
		}
		edit(h)
		hb, _ := json.Marshal(h)
		return safetensorsFile(hb, data)
	}
	dupHeader := []byte(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`)
	cases := []struct {
		name string
		file []byte
		cfg  func(map[string]any)
		want string
	}{
		{"missing tensor", withHeader(func(h map[string]json.RawMessage) { delete(h, "model.layers.1.mlp.up_proj.weight") }), nil,
			`tensor "model.layers.1.mlp.up_proj.weight" missing`},
		{"wrong shape", withHeader(func(h map[string]json.RawMessage) {
			var e stEntry
			json.Unmarshal(h["model.norm.weight"], &e)
			e.Shape = []int64{8, 8}
			h["model.norm.weight"], _ = json.Marshal(e)
		}), nil, `"model.norm.weight" has shape [8 8], the config needs [64]`},
		{"offsets past the end", withHeader(func(h map[string]json.RawMessage) {
			var e stEntry
			json.Unmarshal(h["model.norm.weight"], &e)
			e.Offsets = []int64{e.Offsets[0], e.Offsets[0] + 1<<40}
			h["model.norm.weight"], _ = json.Marshal(e)
		}), nil, "outside the"},
		{"bad dtype", withHeader(func(h map[string]json.RawMessage) {
			var e stEntry
			json.Unmarshal(h["model.norm.weight"], &e)
			e.DType, e.Shape = "U8", []int64{e.Offsets[1] - e.Offsets[0]} // valid safetensors, not a float dtype
			h["model.norm.weight"], _ = json.Marshal(e)
		}), nil, `"model.norm.weight": dtype u8 not supported`},
		{"truncated", orig[:len(orig)-100], nil, "outside the"},
		{"header longer than the file", append(binary.LittleEndian.AppendUint64(nil, 1<<40), orig[8:]...), nil, "header length"},
		{"empty file", nil, nil, "truncated safetensors file (0 bytes"},
		{"duplicate key", append(binary.LittleEndian.AppendUint64(nil, uint64(len(dupHeader))), dupHeader...), nil, `duplicate key "a"`},
		{"unknown architecture", orig, func(c map[string]any) { c["architectures"] = []string{"GPT2LMHeadModel"} }, `unsupported architecture "GPT2LMHeadModel"`},
		{"config disagrees with weights", orig, func(c map[string]any) { c["hidden_size"] = 32; c["head_dim"] = 4 }, "has shape"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cj, _ := os.ReadFile(filepath.Join(good, "config.json"))
			os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
			os.WriteFile(filepath.Join(dir, "model.safetensors"), c.file, 0o644)
			if c.cfg != nil {
				rewriteConfig(t, dir, c.cfg)
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "engine: ") {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
			if c.cfg == nil && !strings.Contains(err.Error(), "model.safetensors") {
				t.Fatalf("error does not name the file: %v", err)
			}
		})
	}
	// Several problems in one header: the error must be the same on every run (never map order) and name
	// the file. capture reports the first bad entry by name, the engine the first unsupported dtype by offset.
	t.Run("deterministic", func(t *testing.T) {
		for _, c := range []struct {
			name string
			edit func(map[string]json.RawMessage)
			want string
		}{
			{"bad offsets", func(h map[string]json.RawMessage) {
				for _, name := range []string{"model.norm.weight", "model.layers.1.mlp.up_proj.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"} {
					var e stEntry
					json.Unmarshal(h[name], &e)
					e.Offsets = []int64{e.Offsets[0], e.Offsets[0] + 1<<40}
					h[name], _ = json.Marshal(e)
				}
			}, `tensor "model.embed_tokens.weight": data_offsets`}, // the first by name
			{"bad dtypes", func(h map[string]json.RawMessage) {
				for _, name := range []string{"model.norm.weight", "model.layers.1.mlp.up_proj.weight", "model.layers.0.input_layernorm.weight"} {
					var e stEntry
					json.Unmarshal(h[name], &e)
					e.DType, e.Shape = "U8", []int64{e.Offsets[1] - e.Offsets[0]}
					h[name], _ = json.Marshal(e)
				}
			}, `tensor "model.layers.0.input_layernorm.weight": dtype u8 not supported`}, // the first by offset
		} {
			dir := t.TempDir()
			cj, _ := os.ReadFile(filepath.Join(good, "config.json"))
			os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
			os.WriteFile(filepath.Join(dir, "model.safetensors"), withHeader(c.edit), 0o644)
			var first error
			for i := 0; i < 20; i++ {
				_, err := Load(dir)
				if err == nil {
					t.Fatalf("%s: loaded", c.name)
				}
				if first == nil {
					first = err
					t.Logf("%s: %v", c.name, err)
				} else if err.Error() != first.Error() {
					t.Fatalf("%s: run %d says %q, run 0 said %q", c.name, i, err, first)
				}
			}
			if !strings.Contains(first.Error(), c.want) {
				t.Errorf("%s: %v, want it to report %s", c.name, first, c.want)
			}
			if !strings.HasPrefix(first.Error(), "engine: "+filepath.Join(dir, "model.safetensors")+": ") {
				t.Errorf("%s: error does not start with the package and the file: %v", c.name, first)
			}
		}
		dir := t.TempDir()
		cj, _ := os.ReadFile(filepath.Join(good, "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": {"z": "../z", "m": "../m", "a": "/a", "q": ".."}}`), 0o644)
		for i := 0; i < 20; i++ {
			if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `tensor "a": shard "/a"`) {
				t.Fatalf("index run %d: %v", i, err)
			}
		}
	})
	t.Run("no weights", func(t *testing.T) {
		dir := t.TempDir()
		cj, _ := os.ReadFile(filepath.Join(good, "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no model.safetensors") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("index escaping the directory", func(t *testing.T) {
		dir := t.TempDir()
		cj, _ := os.ReadFile(filepath.Join(good, "config.json"))
		os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644)
		os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map": {"model.norm.weight": "../x.safetensors"}}`), 0o644)
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a file name") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no config", func(t *testing.T) {
		if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDTypeConversions(t *testing.T) {
	// encode/decode round trip every half value, and decode(encode(x)) agreeing with the kernels' rounding
	// (the conversions themselves are internal/fp's, tested exhaustively there).
	for h := 0; h < 1<<16; h++ {
		var x [1]float32
		decode(capture.F16, []byte{byte(h), byte(h >> 8)}, x[:])
		if x[0] != x[0] {
			continue
		}
		if b := encode(capture.F16, x[:]); int(b[0])|int(b[1])<<8 != h {
			t.Fatalf("f16 %#04x → %v → %#02x%02x", h, x[0], b[1], b[0])
		}
	}
	rng := splitmix64(1)
	for i := 0; i < 200000; i++ {
		x := math.Float32frombits(uint32(rng.next()))
		if x != x {
			continue
		}
		for _, dt := range []capture.DType{capture.F16, capture.BF16} {
			var y [1]float32
			decode(dt, encode(dt, []float32{x}), y[:])
			if r := roundTo(dt, x); math.Float32bits(y[0]) != math.Float32bits(r) {
				t.Fatalf("%s rounding of %v (%#08x): %v vs kernels %v", dt, x, math.Float32bits(x), y[0], r)
			}
		}
	}
}
