package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"bitalign/kernels"
)

// W is a weight tensor as the model holds it: in the checkpoint's dtype when that is the model's (a zero-copy
// view of the mapped file where alignment allows), else rounded to the model's dtype and stored in it
// (kernels.Weights: docs/design.md, "Data conventions").
type W = kernels.Weights

// Layer holds one decoder layer's weights. Linear weights are (out_features, in_features), as PyTorch stores
// them. Optional tensors are zero (W.IsZero) when the config has none.
type Layer struct {
	AttnNorm, MLPNorm       W        // (H)
	Q, K, V, O              W        // (nh*hd, H), (nkv*hd, H), (nkv*hd, H), (H, nh*hd)
	QBias, KBias, VBias, OB W        // q/k/v bias (Qwen2; attention_bias), o bias (attention_bias)
	QNorm, KNorm            W        // (hd) Qwen3
	Gate, Up, Down          W        // (I, H), (I, H), (H, I); zero in a mixture-of-experts layer
	Router                  W        // (E, H) mixture-of-experts layers: mlp.gate, the router
	Experts                 []Expert // (E) mixture-of-experts layers
	Shared                  Expert   // Qwen2-MoE's shared expert (SharedIntermediate wide); zero otherwise
	SharedGate              W        // (1, H) Qwen2-MoE: the shared expert's sigmoid gate
}

// Expert is one expert's SwiGLU MLP, moe_intermediate_size (Im) wide.
type Expert struct {
	Gate, Up, Down W // (Im, H), (Im, H), (H, Im)
}

// Model is a loaded decoder: its config and weights.
type Model struct {
	Config Config
	Embed  W // (V, H)
	Layers []Layer
	Norm   W // (H)
	LMHead W // (V, H); the same tensor as Embed when the embeddings are tied

	mappings []*mapping // the checkpoint files Load mapped (dropMappedPages)
}

// dropMappedPages takes the mapped checkpoint's pages out of the resident set once every backend holds its
// weights itself (the GPU's: newGroup). Reading a weight on the host afterwards is still correct: it faults
// its pages in again from the page cache.
func (m *Model) dropMappedPages() {
	for _, mp := range m.mappings {
		dropPages(mp.data) //nolint:errcheck // only the resident set is at stake
	}
}

// WeightBytes is the memory the model's weights occupy (a tied LM head counted once).
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, s := range m.weightSpecs() {
		n += s.ptr.Bytes()
	}
	return n
}

// weightSpec names one checkpoint tensor, its shape and where it lives in a Model.
type weightSpec struct {
	name  string
	shape []int64
	ptr   *W
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

type saveOptions struct {
	overwrite  bool
	shardBytes int64
}

// Overwrite lets Save replace an existing checkpoint (config.json, model.safetensors, the index and its shards).
func Overwrite() SaveOption { return func(o *saveOptions) { o.overwrite = true } }

// MaxShardBytes makes Save write shards of at most n bytes of tensor data each (a tensor larger than n gets a
// shard of its own), model-0000i-of-0000N.safetensors, and model.safetensors.index.json naming them, as
// transformers' save_pretrained(max_shard_size=n) does. n ≤ 0: one model.safetensors.
func MaxShardBytes(n int64) SaveOption { return func(o *saveOptions) { o.shardBytes = n } }

// Save writes config.json and the weights (in the config's dtype: model.safetensors, or shards and their index
// with MaxShardBytes) to dir, creating it if needed. Each file is written atomically. Existing files are kept
// unless Overwrite is given.
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
	var shards [][]stTensor // tensors in the specs' order, cut into shards
	var size, total int64
	for _, s := range m.weightSpecs() {
		if s.ptr.Len() != numel(s.shape) {
			return fmt.Errorf("engine: save %s: tensor %q has %d values, shape %v needs %d", dir, s.name, s.ptr.Len(), s.shape, numel(s.shape))
		}
		n := int64(s.ptr.Len()) * int64(m.Config.DType.Size())
		if len(shards) == 0 || (o.shardBytes > 0 && size > 0 && size+n > o.shardBytes) {
			shards, size = append(shards, nil), 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], stTensor{s.name, s.shape, *s.ptr})
		size += n
		total += n
	}
	cfgPath, indexPath := filepath.Join(dir, "config.json"), filepath.Join(dir, "model.safetensors.index.json")
	names := []string{"model.safetensors"}
	if o.shardBytes > 0 {
		names = names[:0]
		for i := range shards {
			names = append(names, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards)))
		}
	}
	if !o.overwrite {
		paths := []string{cfgPath, indexPath, filepath.Join(dir, "model.safetensors")}
		for _, n := range names {
			paths = append(paths, filepath.Join(dir, n))
		}
		for _, p := range paths {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("engine: %s exists (use Overwrite to replace it)", p)
			}
		}
	}
	weightMap := map[string]string{}
	for i, ts := range shards {
		for _, t := range ts {
			weightMap[t.name] = names[i]
		}
		if err := writeSafetensors(filepath.Join(dir, names[i]), m.Config.DType, ts); err != nil {
			return err
		}
	}
	if o.shardBytes > 0 {
		idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]int64{"total_size": total}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			return fmt.Errorf("engine: %v", err)
		}
		if err := writeAtomic(indexPath, func(w io.Writer) error { _, err := w.Write(append(idx, '\n')); return err }); err != nil {
			return err
		}
	} else if err := os.Remove(indexPath); err != nil && !errors.Is(err, os.ErrNotExist) { // Overwrite: a stale index would win
		return fmt.Errorf("engine: %v", err)
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
			buf[j] = float32(offset + scale*rng.uniform())
		}
		*s.ptr = kernels.RoundWeights(kdt(cfg.DType), buf)
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
