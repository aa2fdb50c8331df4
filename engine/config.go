package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"bitalign/capture"
)

// Architectures the engine runs, as Config.Architecture spells them.
const (
	ArchLlama = "llama"
	ArchQwen2 = "qwen2"
	ArchQwen3 = "qwen3"
	// ArchQwen3MoE is Qwen3 attention with mixture-of-experts MLPs (Qwen3MoeForCausalLM, docs/arithmetic.md §19).
	ArchQwen3MoE = "qwen3_moe"
	// ArchQwen2MoE is Qwen2 attention (q/k/v bias) with MoE MLPs plus a shared expert under a sigmoid gate
	// (Qwen2MoeForCausalLM).
	ArchQwen2MoE = "qwen2_moe"
)

// hfArchitectures maps a config.json "architectures" entry to the engine's architecture name.
var hfArchitectures = map[string]string{
	"LlamaForCausalLM":    ArchLlama,
	"Qwen2ForCausalLM":    ArchQwen2,
	"Qwen3ForCausalLM":    ArchQwen3,
	"Qwen3MoeForCausalLM": ArchQwen3MoE,
	"Qwen2MoeForCausalLM": ArchQwen2MoE,
}

// Config describes a decoder-only model. The field names follow docs/design.md; QKVBias, OBias and QKNorm are
// derived from the architecture and config.json (Qwen2 always has q/k/v bias; Llama and Qwen3 have q/k/v/o bias when
// attention_bias is set; Qwen3 has per-head q/k RMSNorm).
type Config struct {
	Architecture   string // llama, qwen2, qwen3
	Vocab          int
	Hidden         int
	Intermediate   int
	Layers         int
	Heads          int
	KVHeads        int
	HeadDim        int
	RopeTheta      float64
	Eps            float32
	TiedEmbeddings bool
	MaxPositions   int
	// DType is the activation and weight dtype: BF16 or F16 round every op boundary to that type; F32 rounds
	// nothing (used to replay float32 Hugging Face models). From config.json's dtype/torch_dtype; when
	// config.json has neither, ParseConfig leaves it invalid and Load takes the stored embedding's dtype.
	DType   capture.DType
	QKVBias bool // q_proj, k_proj, v_proj have a bias
	OBias   bool // o_proj has a bias
	QKNorm  bool // Qwen3: RMSNorm over each head's hd values of q and k, before RoPE

	// Mixture of experts (Qwen3-MoE); Experts = 0 is a dense model and the rest is ignored.
	Experts         int   // num_experts (config.json's num_experts, or num_local_experts)
	ExpertsPerTok   int   // num_experts_per_tok: k, the experts each token uses
	MoEIntermediate int   // moe_intermediate_size: each expert's intermediate width
	NormTopK        bool  // norm_topk_prob: the k selected probabilities are divided by their sum
	SparseStep      int   // decoder_sparse_step: layer l is sparse when (l+1) % SparseStep == 0
	MLPOnly         []int // mlp_only_layers: layers that keep the dense MLP (Intermediate wide)
	// SharedIntermediate is Qwen2-MoE's shared_expert_intermediate_size: every token also runs a shared expert
	// of this width, weighted by sigmoid(x·shared_expert_gateᵀ); 0 for Qwen3-MoE.
	SharedIntermediate int
}

// isMoE reports whether arch is a mixture-of-experts architecture.
func isMoE(arch string) bool { return arch == ArchQwen3MoE || arch == ArchQwen2MoE }

// MoELayer reports whether layer l runs the mixture-of-experts block (transformers' Qwen3MoeDecoderLayer rule:
// not in mlp_only_layers, and (l+1) divisible by decoder_sparse_step).
func (c Config) MoELayer(l int) bool {
	if c.Experts <= 0 || c.SparseStep <= 0 || (l+1)%c.SparseStep != 0 {
		return false
	}
	for _, d := range c.MLPOnly {
		if d == l {
			return false
		}
	}
	return true
}

// moeLayers is MoELayer for capture.OpNames, nil for a dense model.
func (c Config) moeLayers() func(int) bool {
	if c.Experts <= 0 {
		return nil
	}
	return c.MoELayer
}

// Validate checks that the sizes are positive and consistent.
func (c Config) Validate() error {
	switch c.Architecture {
	case ArchLlama, ArchQwen2, ArchQwen3, ArchQwen3MoE, ArchQwen2MoE:
	default:
		return fmt.Errorf("engine: unknown architecture %q (want llama, qwen2, qwen3, qwen3_moe or qwen2_moe)", c.Architecture)
	}
	if err := c.validateMoE(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab", c.Vocab}, {"hidden", c.Hidden}, {"intermediate", c.Intermediate}, {"layers", c.Layers},
		{"heads", c.Heads}, {"kv heads", c.KVHeads}, {"head_dim", c.HeadDim}} {
		if f.v <= 0 {
			return fmt.Errorf("engine: config: %s must be positive, is %d", f.name, f.v)
		}
		if f.v > 1<<24 {
			return fmt.Errorf("engine: config: %s = %d is implausibly large", f.name, f.v)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("engine: config: %d attention heads are not a multiple of %d kv heads", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("engine: config: head_dim %d must be even for RoPE", c.HeadDim)
	}
	if !(c.RopeTheta > 0) {
		return fmt.Errorf("engine: config: rope_theta must be positive, is %v", c.RopeTheta)
	}
	if !(c.Eps > 0) {
		return fmt.Errorf("engine: config: rms_norm_eps must be positive, is %v", c.Eps)
	}
	switch c.DType {
	case capture.BF16, capture.F16, capture.F32:
	default:
		return fmt.Errorf("engine: config: dtype %v not supported (bf16, f16, f32)", c.DType)
	}
	if c.MaxPositions < 0 {
		return fmt.Errorf("engine: config: max_position_embeddings must not be negative")
	}
	if c.Architecture == ArchQwen2 && !c.QKVBias {
		return fmt.Errorf("engine: config: qwen2 has q/k/v bias")
	}
	return nil
}

// validateMoE checks the mixture-of-experts fields: present exactly for qwen3_moe, sizes positive, k ≤ E.
func (c Config) validateMoE() error {
	if !isMoE(c.Architecture) {
		if c.Experts != 0 || c.SharedIntermediate != 0 {
			return fmt.Errorf("engine: config: %s has no experts, num_experts is %d", c.Architecture, c.Experts)
		}
		return nil
	}
	switch {
	case c.Architecture == ArchQwen2MoE && c.SharedIntermediate <= 0:
		return fmt.Errorf("engine: config: shared_expert_intermediate_size must be positive, is %d", c.SharedIntermediate)
	case c.Architecture == ArchQwen2MoE && c.SharedIntermediate > 1<<24:
		return fmt.Errorf("engine: config: shared_expert_intermediate_size = %d is implausibly large", c.SharedIntermediate)
	case c.Architecture == ArchQwen3MoE && c.SharedIntermediate != 0:
		return fmt.Errorf("engine: config: qwen3_moe has no shared expert")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"num_experts", c.Experts}, {"num_experts_per_tok", c.ExpertsPerTok}, {"moe_intermediate_size", c.MoEIntermediate},
		{"decoder_sparse_step", c.SparseStep}} {
		if f.v <= 0 {
			return fmt.Errorf("engine: config: %s must be positive, is %d", f.name, f.v)
		}
		if f.v > 1<<24 {
			return fmt.Errorf("engine: config: %s = %d is implausibly large", f.name, f.v)
		}
	}
	if c.Experts > 1<<12 {
		return fmt.Errorf("engine: config: num_experts = %d is implausibly large (at most 4096)", c.Experts)
	}
	if c.ExpertsPerTok > c.Experts {
		return fmt.Errorf("engine: config: num_experts_per_tok %d exceeds num_experts %d", c.ExpertsPerTok, c.Experts)
	}
	for _, l := range c.MLPOnly {
		if l < 0 || l >= max(c.Layers, 1) {
			return fmt.Errorf("engine: config: mlp_only_layers names layer %d of %d", l, c.Layers)
		}
	}
	return nil
}

// hfConfig is the subset of a Hugging Face config.json the engine reads. Pointers tell "absent" from zero.
type hfConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	VocabSize         int             `json:"vocab_size"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumHiddenLayers   int             `json:"num_hidden_layers"`
	NumAttentionHeads int             `json:"num_attention_heads"`
	NumKeyValueHeads  *int            `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	RopeTheta         *float64        `json:"rope_theta"`
	RopeScaling       json.RawMessage `json:"rope_scaling"`
	RopeParameters    json.RawMessage `json:"rope_parameters"`
	RMSNormEps        *float64        `json:"rms_norm_eps"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	MaxPositions      int             `json:"max_position_embeddings"`
	TorchDType        string          `json:"torch_dtype"`
	DType             string          `json:"dtype"`
	AttentionBias     *bool           `json:"attention_bias"`
	MLPBias           *bool           `json:"mlp_bias"`
	HiddenAct         string          `json:"hidden_act"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
	PretrainingTP     *int            `json:"pretraining_tp"`
	// Qwen3-MoE
	NumExperts        *int  `json:"num_experts"`
	NumLocalExperts   *int  `json:"num_local_experts"` // transformers ≥ 5 writes this name
	NumExpertsPerTok  *int  `json:"num_experts_per_tok"`
	MoEIntermediate   *int  `json:"moe_intermediate_size"`
	NormTopKProb      *bool `json:"norm_topk_prob"`
	DecoderSparseStep *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int `json:"mlp_only_layers"`
	// Qwen2-MoE
	SharedIntermediate *int  `json:"shared_expert_intermediate_size"`
	QKVBiasFlag        *bool `json:"qkv_bias"`
}

// ParseConfig reads a Hugging Face config.json. name is used in error messages (usually the file's path).
func ParseConfig(name string, data []byte) (Config, error) {
	var h hfConfig
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, fmt.Errorf("engine: %s: %v", name, err)
	}
	errf := func(format string, a ...any) error {
		return fmt.Errorf("engine: %s: "+format, append([]any{name}, a...)...)
	}
	if len(h.Architectures) != 1 {
		return Config{}, errf("architectures must name exactly one of LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM, has %q", h.Architectures)
	}
	arch, ok := hfArchitectures[h.Architectures[0]]
	if !ok {
		return Config{}, errf("unsupported architecture %q (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2MoeForCausalLM)", h.Architectures[0])
	}
	c := Config{
		Architecture: arch, Vocab: h.VocabSize, Hidden: h.HiddenSize, Intermediate: h.IntermediateSize,
		Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads, MaxPositions: h.MaxPositions,
		RopeTheta: 10000, Eps: 1e-6,
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, errf("hidden_act %q not supported (only silu)", h.HiddenAct)
	}
	if h.MLPBias != nil && *h.MLPBias {
		return Config{}, errf("mlp_bias is not supported")
	}
	if h.UseSlidingWindow != nil && *h.UseSlidingWindow {
		return Config{}, errf("sliding-window attention (use_sliding_window) is not supported")
	}
	if h.PretrainingTP != nil && *h.PretrainingTP > 1 {
		return Config{}, errf("pretraining_tp %d > 1 is not supported", *h.PretrainingTP)
	}
	c.KVHeads = c.Heads
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if h.HeadDim != nil {
		c.HeadDim = *h.HeadDim
	} else if c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	if err := checkRope(h.RopeScaling, "rope_scaling"); err != nil {
		return Config{}, errf("%v", err)
	}
	if len(h.RopeParameters) > 0 && string(h.RopeParameters) != "null" {
		// transformers ≥ 4.56 moves rope_theta into rope_parameters.
		if err := checkRope(h.RopeParameters, "rope_parameters"); err != nil {
			return Config{}, errf("%v", err)
		}
		var p struct {
			RopeTheta *float64 `json:"rope_theta"`
		}
		if err := json.Unmarshal(h.RopeParameters, &p); err == nil && p.RopeTheta != nil {
			c.RopeTheta = *p.RopeTheta
		}
	}
	if h.RMSNormEps != nil {
		c.Eps = float32(*h.RMSNormEps)
	}
	// LlamaConfig, Qwen2Config and Qwen3Config default tie_word_embeddings to false.
	if h.TieWordEmbeddings != nil {
		c.TiedEmbeddings = *h.TieWordEmbeddings
	}
	dt := h.DType
	if dt == "" {
		dt = h.TorchDType
	}
	if dt != "" { // else Load takes the dtype of the stored embedding
		var ok bool
		if c.DType, ok = hfDTypes[dt]; !ok {
			return Config{}, errf("dtype %q not supported (bfloat16, float16, float32)", dt)
		}
	}
	bias := h.AttentionBias != nil && *h.AttentionBias
	switch arch {
	case ArchQwen2:
		c.QKVBias = true // Qwen2Attention: q/k/v bias always, o_proj none
	case ArchLlama:
		c.QKVBias, c.OBias = bias, bias
	case ArchQwen3, ArchQwen3MoE:
		c.QKVBias, c.OBias, c.QKNorm = bias, bias, true
	}
	if arch == ArchQwen2MoE {
		// Qwen2MoeConfig: qkv_bias (default true), no o_proj bias, no q/k norm; a shared expert (default 5632)
		c.QKVBias, c.SharedIntermediate = true, 5632
		if h.QKVBiasFlag != nil {
			c.QKVBias = *h.QKVBiasFlag
		}
		if h.SharedIntermediate != nil {
			c.SharedIntermediate = *h.SharedIntermediate
		}
	}
	if isMoE(arch) {
		// Qwen3MoeConfig's defaults: 128 experts, 8 per token, moe_intermediate_size 768, norm_topk_prob false,
		// decoder_sparse_step 1 (Qwen2MoeConfig's: 60, 4, 1408)
		c.Experts, c.ExpertsPerTok, c.MoEIntermediate, c.SparseStep = 128, 8, 768, 1
		if arch == ArchQwen2MoE {
			c.Experts, c.ExpertsPerTok, c.MoEIntermediate = 60, 4, 1408
		}
		switch {
		case h.NumExperts != nil:
			c.Experts = *h.NumExperts
		case h.NumLocalExperts != nil:
			c.Experts = *h.NumLocalExperts
		}
		if h.NumExpertsPerTok != nil {
			c.ExpertsPerTok = *h.NumExpertsPerTok
		}
		if h.MoEIntermediate != nil {
			c.MoEIntermediate = *h.MoEIntermediate
		}
		if h.NormTopKProb != nil {
			c.NormTopK = *h.NormTopKProb
		}
		if h.DecoderSparseStep != nil {
			c.SparseStep = *h.DecoderSparseStep
		}
		c.MLPOnly = append([]int(nil), h.MLPOnlyLayers...)
	}
	check := c
	if check.DType == capture.InvalidDType {
		check.DType = capture.BF16
	}
	if err := check.Validate(); err != nil {
		return Config{}, errf("%v", err)
	}
	return c, nil
}

// checkRope accepts an absent, null or default rope scaling and rejects every other kind clearly.
func checkRope(raw json.RawMessage, key string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var r struct {
		RopeType string `json:"rope_type"`
		Type     string `json:"type"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %v", key, err)
	}
	t := r.RopeType
	if t == "" {
		t = r.Type
	}
	if t != "" && t != "default" {
		return fmt.Errorf("%s type %q is not supported (only the default RoPE)", key, t)
	}
	return nil
}

// LoadConfig reads DIR/config.json.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("engine: %v", err)
	}
	return ParseConfig(path, data)
}

// hfDTypes maps config.json's dtype (torch_dtype) names to the capture dtypes the engine runs in.
var hfDTypes = map[string]capture.DType{"bfloat16": capture.BF16, "float16": capture.F16, "float32": capture.F32}

// HFConfig returns the config in Hugging Face config.json form (what Save writes and ParseConfig reads back).
func (c Config) HFConfig() map[string]any {
	archName := map[string]string{ArchLlama: "LlamaForCausalLM", ArchQwen2: "Qwen2ForCausalLM", ArchQwen3: "Qwen3ForCausalLM",
		ArchQwen3MoE: "Qwen3MoeForCausalLM", ArchQwen2MoE: "Qwen2MoeForCausalLM"}[c.Architecture]
	dt := ""
	for name, d := range hfDTypes {
		if d == c.DType {
			dt = name
		}
	}
	m := map[string]any{
		"architectures":           []string{archName},
		"model_type":              c.Architecture,
		"vocab_size":              c.Vocab,
		"hidden_size":             c.Hidden,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"rope_theta":              c.RopeTheta,
		"rms_norm_eps":            float64(c.Eps),
		"tie_word_embeddings":     c.TiedEmbeddings,
		"max_position_embeddings": c.MaxPositions,
		"torch_dtype":             dt,
		"hidden_act":              "silu",
		"rope_scaling":            nil,
	}
	switch c.Architecture {
	case ArchQwen2:
	case ArchQwen2MoE:
		m["qkv_bias"] = c.QKVBias
		m["shared_expert_intermediate_size"] = c.SharedIntermediate
	default:
		m["attention_bias"] = c.QKVBias
	}
	if isMoE(c.Architecture) {
		m["num_experts"] = c.Experts
		m["num_experts_per_tok"] = c.ExpertsPerTok
		m["moe_intermediate_size"] = c.MoEIntermediate
		m["norm_topk_prob"] = c.NormTopK
		m["decoder_sparse_step"] = c.SparseStep
		m["mlp_only_layers"] = append([]int{}, c.MLPOnly...)
	}
	return m
}

// ModelJSON is the capture Meta.Model value: {"architecture": ..., "config": {config.json}}.
func (c Config) ModelJSON() json.RawMessage {
	b, _ := json.Marshal(map[string]any{"architecture": c.Architecture, "config": c.HFConfig()})
	return b
}

// QDim is the width of q (heads × head_dim); KVDim the width of k and v.
func (c Config) QDim() int  { return c.Heads * c.HeadDim }
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }
