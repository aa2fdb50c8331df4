package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"bitalign/capture"
)

// Layer holds one decoder layer's weights as float32 values representable in the model dtype. Linear weights are
// (out_features, in_features), as PyTorch stores them. Optional tensors are nil when the config has none.
type Layer struct {
	AttnNorm, MLPNorm       []float32 // (H)
	Q, K, V, O              []float32 // (nh*hd, H), (nkv*hd, H), (nkv*hd, H), (H, nh*hd)
	QBias, KBias, VBias, OB []float32 // q/k/v bias (Qwen2; attention_bias), o bias (attention_bias)
	QNorm, KNorm            []float32 // (hd) Qwen3
	Gate, Up, Down          []float32 // (I, H), (I, H), (H, I); nil in a mixture-of-experts layer
	Router                  []float32 // (E, H) mixture-of-experts layers: mlp.gate, the router
	Experts                 []Expert  // (E) mixture-of-experts layers
	Shared                  Expert    // Qwen2-MoE's shared expert (SharedIntermediate wide); nil slices otherwise
	SharedGate              []float32 // (1, H) Qwen2-MoE: the shared expert's sigmoid gate
}

// Expert is one expert's SwiGLU MLP, moe_intermediate_size (Im) wide.
type Expert struct {
	Gate, Up, Down []float32 // (Im, H), (Im, H), (H, Im)
}

// Model is a loaded decoder: its config and weights.
type Model struct {
	Config Config
	Embed  []float32 // (V, H)
	Layers []Layer
	Norm   []float32 // (H)
	LMHead []float32 // (V, H); the same slice as Embed when the embeddings are tied
}

// weightSpec names one checkpoint tensor, its shape and where it lives in a Model.
type weightSpec struct {
	name  string
	shape []int64
	ptr   *[]float32
}

// weightSpecs lists every tensor of the checkpoint layout for m.Config, in a fixed order.
func (m *Model) weightSpecs() []weightSpec {
	c := m.Config
	H, I, V := int64(c.Hidden), int64(c.Intermediate), int64(c.Vocab)
	qd, kvd, hd := int64(c.QDim()), int64(c.KVDim()), int64(c.HeadDim)
	specs := []weightSpec{{"model.embed_tokens.weight", []int64{V, H}, &m.Embed}}
	for l := range m.Layers {
		ly := &m.Layers[l]
		p := "model.layers." + strconv.Itoa(l) + "."
		specs = append(specs,
			weightSpec{p + "input_layernorm.weight", []int64{H}, &ly.AttnNorm},
			weightSpec{p + "self_attn.q_proj.weight", []int64{qd, H}, &ly.Q},
			weightSpec{p + "self_attn.k_proj.weight", []int64{kvd, H}, &ly.K},
			weightSpec{p + "self_attn.v_proj.weight", []int64{kvd, H}, &ly.V},
			weightSpec{p + "self_attn.o_proj.weight", []int64{H, qd}, &ly.O})
		if c.QKVBias {
			specs = append(specs,
				weightSpec{p + "self_attn.q_proj.bias", []int64{qd}, &ly.QBias},
				weightSpec{p + "self_attn.k_proj.bias", []int64{kvd}, &ly.KBias},
				weightSpec{p + "self_attn.v_proj.bias", []int64{kvd}, &ly.VBias})
		}
		if c.OBias {
			specs = append(specs, weightSpec{p + "self_attn.o_proj.bias", []int64{H}, &ly.OB})
		}
		if c.QKNorm {
			specs = append(specs,
				weightSpec{p + "self_attn.q_norm.weight", []int64{hd}, &ly.QNorm},
				weightSpec{p + "self_attn.k_norm.weight", []int64{hd}, &ly.KNorm})
		}
		specs = append(specs, weightSpec{p + "post_attention_layernorm.weight", []int64{H}, &ly.MLPNorm})
		if !c.MoELayer(l) {
			specs = append(specs,
				weightSpec{p + "mlp.gate_proj.weight", []int64{I, H}, &ly.Gate},
				weightSpec{p + "mlp.up_proj.weight", []int64{I, H}, &ly.Up},
				weightSpec{p + "mlp.down_proj.weight", []int64{H, I}, &ly.Down})
			continue
		}
		// transformers' per-expert names (what save_pretrained writes); Load also reads the fused
		// mlp.experts.gate_up_proj / down_proj tensors (fusedExperts)
		E, Im := c.Experts, int64(c.MoEIntermediate)
		specs = append(specs, weightSpec{p + "mlp.gate.weight", []int64{int64(E), H}, &ly.Router})
		if len(ly.Experts) != E {
			ly.Experts = make([]Expert, E)
		}
		for e := range ly.Experts {
			x := &ly.Experts[e]
			q := p + "mlp.experts." + strconv.Itoa(e) + "."
			specs = append(specs,
				weightSpec{q + "gate_proj.weight", []int64{Im, H}, &x.Gate},
				weightSpec{q + "up_proj.weight", []int64{Im, H}, &x.Up},
				weightSpec{q + "down_proj.weight", []int64{H, Im}, &x.Down})
		}
		if Is := int64(c.SharedIntermediate); Is > 0 {
			q := p + "mlp.shared_expert."
			specs = append(specs,
				weightSpec{q + "gate_proj.weight", []int64{Is, H}, &ly.Shared.Gate},
				weightSpec{q + "up_proj.weight", []int64{Is, H}, &ly.Shared.Up},
				weightSpec{q + "down_proj.weight", []int64{H, Is}, &ly.Shared.Down},
				weightSpec{p + "mlp.shared_expert_gate.weight", []int64{1, H}, &ly.SharedGate})
		}
	}
	specs = append(specs, weightSpec{"model.norm.weight", []int64{H}, &m.Norm})
	if !c.TiedEmbeddings {
		specs = append(specs, weightSpec{"lm_head.weight", []int64{V, H}, &m.LMHead})
	}
	return specs
}

func numel(shape []int64) int {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return int(n)
}

func newModel(cfg Config) *Model {
	return &Model{Config: cfg, Layers: make([]Layer, cfg.Layers)}
}

// Load reads a Hugging Face checkpoint directory: config.json plus model.safetensors, or the shards named by
// model.safetensors.index.json. Weights stored in bf16, f16 or f32 are rounded to the config's dtype.
func Load(dir string) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	m := newModel(cfg)
	files := map[string]*stFile{} // shard file name → open file
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	where := map[string]string{} // tensor name → shard file name
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	source := indexPath // what names the tensors: the index, or the single file
	if data, err := os.ReadFile(indexPath); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, fmt.Errorf("engine: %s: %v", indexPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("engine: %s: empty weight_map", indexPath)
		}
		names := make([]string, 0, len(idx.WeightMap))
		for name := range idx.WeightMap {
			names = append(names, name)
		}
		slices.Sort(names) // the first bad entry reported must not depend on map order
		for _, name := range names {
			file := idx.WeightMap[name]
			if file != filepath.Base(file) || file == "" || file == "." || file == ".." {
				return nil, fmt.Errorf("engine: %s: tensor %q: shard %q is not a file name in the checkpoint directory", indexPath, name, file)
			}
			where[name] = file
		}
	} else if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, "model.safetensors")
		if _, err := os.Stat(single); err != nil {
			return nil, fmt.Errorf("engine: %s: no model.safetensors or model.safetensors.index.json", dir)
		}
		st, err := openSafetensors(single)
		if err != nil {
			return nil, err
		}
		files["model.safetensors"] = st
		source = single
		for name := range st.tensors {
			where[name] = "model.safetensors"
		}
	} else {
		return nil, fmt.Errorf("engine: %v", err)
	}
	// read loads one tensor of the given shape (rounded to the model dtype); ok is false when no file has it.
	read := func(name string, shape []int64, first bool) (buf []float32, ok bool, err error) {
		file, ok := where[name]
		if !ok {
			return nil, false, nil
		}
		st, ok := files[file]
		if !ok {
			st, err = openSafetensors(filepath.Join(dir, file))
			if err != nil {
				return nil, true, err
			}
			files[file] = st
		}
		e, ok := st.tensors[name]
		if !ok {
			return nil, true, fmt.Errorf("engine: %s: tensor %q missing (the index names this file)", st.path, name)
		}
		if !equalShape(e.Shape, shape) {
			return nil, true, fmt.Errorf("engine: %s: tensor %q has shape %v, the config needs %v", st.path, name, e.Shape, shape)
		}
		if first && cfg.DType == capture.InvalidDType { // config.json names no dtype: the embedding's
			cfg.DType = e.DType
			m.Config.DType = cfg.DType
		}
		buf = make([]float32, numel(shape))
		if err := st.read(name, buf); err != nil {
			return nil, true, err
		}
		roundSlice(cfg.DType, buf)
		return buf, true, nil
	}
	fused := map[int]bool{} // MoE layers read from the fused expert tensors
	for i, s := range m.weightSpecs() {
		if l, _, ok := expertSpec(s.name); ok && fused[l] {
			continue // read by fusedExperts
		}
		buf, ok, err := read(s.name, s.shape, i == 0)
		if err != nil {
			return nil, err
		}
		if !ok {
			if l, _, isExpert := expertSpec(s.name); isExpert {
				found, err := m.fusedExperts(l, read)
				if err != nil {
					return nil, err
				}
				if found {
					fused[l] = true
					continue
				}
			}
			return nil, fmt.Errorf("engine: %s: tensor %q missing from the checkpoint", source, s.name)
		}
		*s.ptr = buf
	}
	if cfg.TiedEmbeddings {
		m.LMHead = m.Embed
	}
	return m, nil
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

// fusedExperts reads layer l's experts from the fused layout transformers ≥ 5 holds in memory
// (mlp.experts.gate_up_proj (E, 2·Im, H): each expert's gate rows then its up rows; mlp.experts.down_proj
// (E, H, Im)). found is false when the checkpoint has neither fused tensor.
func (m *Model) fusedExperts(l int, read func(string, []int64, bool) ([]float32, bool, error)) (found bool, err error) {
	c := m.Config
	E, H, Im := c.Experts, c.Hidden, c.MoEIntermediate
	p := "model.layers." + strconv.Itoa(l) + ".mlp.experts."
	gu, ok1, err := read(p+"gate_up_proj", []int64{int64(E), int64(2 * Im), int64(H)}, false)
	if err != nil {
		return true, err
	}
	down, ok2, err := read(p+"down_proj", []int64{int64(E), int64(H), int64(Im)}, false)
	if err != nil {
		return true, err
	}
	if !ok1 && !ok2 {
		return false, nil
	}
	if !ok1 || !ok2 {
		return true, fmt.Errorf("engine: layer %d: the checkpoint has only one of %sgate_up_proj and %sdown_proj", l, p, p)
	}
	ly := &m.Layers[l]
	for e := range ly.Experts {
		g := gu[e*2*Im*H : (e*2+1)*Im*H]
		u := gu[(e*2+1)*Im*H : (e+1)*2*Im*H]
		ly.Experts[e] = Expert{Gate: append([]float32(nil), g...), Up: append([]float32(nil), u...),
			Down: append([]float32(nil), down[e*H*Im:(e+1)*H*Im]...)}
	}
	return true, nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SaveOption changes how Save writes.
type SaveOption func(*saveOptions)

type saveOptions struct{ overwrite bool }

// Overwrite lets Save replace an existing config.json and model.safetensors.
func Overwrite() SaveOption { return func(o *saveOptions) { o.overwrite = true } }

// Save writes config.json and model.safetensors (in the config's dtype) to dir, creating it if needed. Each file
// is written atomically. Existing files are kept unless Overwrite is given.
func (m *Model) Save(dir string, opts ...SaveOption) error {
	var o saveOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := m.Config.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("engine: %v", err)
	}
	cfgPath, stPath := filepath.Join(dir, "config.json"), filepath.Join(dir, "model.safetensors")
	if !o.overwrite {
		for _, p := range []string{cfgPath, stPath, filepath.Join(dir, "model.safetensors.index.json")} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("engine: %s exists (use Overwrite to replace it)", p)
			}
		}
	}
	var tensors []stTensor
	for _, s := range m.weightSpecs() {
		if len(*s.ptr) != numel(s.shape) {
			return fmt.Errorf("engine: save %s: tensor %q has %d values, shape %v needs %d", dir, s.name, len(*s.ptr), s.shape, numel(s.shape))
		}
		tensors = append(tensors, stTensor{s.name, s.shape, *s.ptr})
	}
	if err := writeSafetensors(stPath, m.Config.DType, tensors); err != nil {
		return err
	}
	cfgJSON, err := json.MarshalIndent(m.Config.HFConfig(), "", "  ")
	if err != nil {
		return fmt.Errorf("engine: %v", err)
	}
	return writeAtomic(cfgPath, func(w io.Writer) error {
		_, err := w.Write(append(cfgJSON, '\n'))
		return err
	})
}

// splitmix64 is the deterministic generator behind NewRandom.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// uniform returns a value in [-1, 1) with 24 random bits.
func (s *splitmix64) uniform() float64 { return float64(int64(s.next()>>40)-(1<<23)) / (1 << 23) }

// NewRandom builds a model with deterministic random weights for cfg (which must be valid): linear weights
// uniform with unit output variance, norm weights near 1, small biases. The same (cfg, seed) always gives the
// same bits.
func NewRandom(cfg Config, seed uint64) *Model {
	m := newModel(cfg)
	for i, s := range m.weightSpecs() {
		rng := splitmix64(seed ^ uint64(i+1)*0x9e3779b97f4a7c15)
		buf := make([]float32, numel(s.shape))
		var scale, offset float64
		switch {
		case len(s.shape) == 2 && s.name == "model.embed_tokens.weight":
			scale = 1
		case len(s.shape) == 2 && s.name == "lm_head.weight":
			scale = 2 * math.Sqrt(3/float64(s.shape[1])) // logits of standard deviation ~2: sampling is not argmax
		case len(s.shape) == 2:
			scale = math.Sqrt(3 / float64(s.shape[1]))
		case isNormWeight(s.name):
			scale, offset = 0.2, 1
		default: // bias
			scale = 0.05
		}
		for j := range buf {
			buf[j] = roundTo(cfg.DType, float32(offset+scale*rng.uniform()))
		}
		*s.ptr = buf
	}
	if cfg.TiedEmbeddings {
		m.LMHead = m.Embed
	}
	return m
}

func isNormWeight(name string) bool {
	for _, suf := range []string{"layernorm.weight", "norm.weight"} {
		if len(name) >= len(suf) && name[len(name)-len(suf):] == suf {
			return true
		}
	}
	return false
}
