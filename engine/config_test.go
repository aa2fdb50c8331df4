package engine

import (
	"reflect"
	"strings"
	"testing"

	"bitalign/capture"
)

const llamaJSON = `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128, "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "max_position_embeddings": 2048, "hidden_act": "silu", "attention_bias": false, "rope_scaling": null
}`

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name string
		json string
		want Config
	}{
		{"llama", llamaJSON, Config{Architecture: ArchLlama, Vocab: 128, Hidden: 64, Intermediate: 96, Layers: 2,
			Heads: 4, KVHeads: 2, HeadDim: 16, RopeTheta: 500000, Eps: 1e-5, MaxPositions: 2048, DType: capture.BF16}},
		{"qwen2 bias, kv heads default, f32 via dtype", `{"architectures": ["Qwen2ForCausalLM"], "vocab_size": 32,
			"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
			"dtype": "float32", "tie_word_embeddings": true, "use_sliding_window": false}`,
			Config{Architecture: ArchQwen2, Vocab: 32, Hidden: 32, Intermediate: 64, Layers: 1, Heads: 2, KVHeads: 2,
				HeadDim: 16, RopeTheta: 10000, Eps: 1e-6, TiedEmbeddings: true, DType: capture.F32, QKVBias: true}},
		{"qwen3 explicit head_dim, q/k norm, rope_parameters", `{"architectures": ["Qwen3ForCausalLM"], "vocab_size": 32,
			"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
			"num_key_value_heads": 2, "head_dim": 16, "torch_dtype": "float16", "attention_bias": true,
			"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}`,
			Config{Architecture: ArchQwen3, Vocab: 32, Hidden: 32, Intermediate: 64, Layers: 1, Heads: 4, KVHeads: 2,
				HeadDim: 16, RopeTheta: 1e6, Eps: 1e-6, DType: capture.F16, QKVBias: true, OBias: true, QKNorm: true}},
		{"qwen3_moe as transformers 5 writes it (num_local_experts)", `{"architectures": ["Qwen3MoeForCausalLM"],
			"vocab_size": 96, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
			"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "dtype": "bfloat16",
			"num_local_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true,
			"decoder_sparse_step": 2, "mlp_only_layers": [3], "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}`,
			Config{Architecture: ArchQwen3MoE, Vocab: 96, Hidden: 64, Intermediate: 128, Layers: 4, Heads: 4, KVHeads: 2,
				HeadDim: 16, RopeTheta: 1e6, Eps: 1e-6, DType: capture.BF16, QKNorm: true, Experts: 8, ExpertsPerTok: 2,
				MoEIntermediate: 32, NormTopK: true, SparseStep: 2, MLPOnly: []int{3}}},
		{"qwen3_moe defaults (num_experts, no step)", `{"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 32,
			"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
			"head_dim": 8, "num_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 16, "dtype": "float32"}`,
			Config{Architecture: ArchQwen3MoE, Vocab: 32, Hidden: 32, Intermediate: 64, Layers: 1, Heads: 4, KVHeads: 4,
				HeadDim: 8, RopeTheta: 10000, Eps: 1e-6, DType: capture.F32, QKNorm: true, Experts: 4, ExpertsPerTok: 1,
				MoEIntermediate: 16, SparseStep: 1}},
		{"qwen2_moe: qkv_bias, a shared expert", `{"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 32,
			"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
			"num_key_value_heads": 2, "dtype": "bfloat16", "num_experts": 8, "num_experts_per_tok": 2,
			"moe_intermediate_size": 16, "shared_expert_intermediate_size": 48, "qkv_bias": true}`,
			Config{Architecture: ArchQwen2MoE, Vocab: 32, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2,
				HeadDim: 8, RopeTheta: 10000, Eps: 1e-6, DType: capture.BF16, QKVBias: true, Experts: 8, ExpertsPerTok: 2,
				MoEIntermediate: 16, SparseStep: 1, SharedIntermediate: 48}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig("config.json", []byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			// HFConfig round trip
			back, err := ParseConfig("x", mustJSON(t, got.HFConfig()))
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("HFConfig round trip: %+v, %v", back, err)
			}
		})
	}
}

const moeJSON = `{"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 32, "hidden_size": 32,
  "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "num_experts": 8,
  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1, "mlp_only_layers": []}`

func TestParseConfigRejects(t *testing.T) {
	repl := func(old, new string) string { return strings.Replace(llamaJSON, old, new, 1) }
	moe := func(old, new string) string { return strings.Replace(moeJSON, old, new, 1) }
	cases := []struct{ json, want string }{
		{repl(`"LlamaForCausalLM"`, `"MistralForCausalLM"`), `unsupported architecture "MistralForCausalLM"`},
		{repl(`"rope_scaling": null`, `"rope_scaling": {"rope_type": "llama3", "factor": 8.0}`), `rope_scaling type "llama3" is not supported`},
		{repl(`"rope_scaling": null`, `"rope_scaling": {"type": "linear", "factor": 2.0}`), `"linear" is not supported`},
		{repl(`"bfloat16"`, `"float8"`), `dtype "float8" not supported`},
		{repl(`"num_key_value_heads": 2`, `"num_key_value_heads": 3`), "not a multiple of 3 kv heads"},
		{repl(`"hidden_act": "silu"`, `"hidden_act": "gelu"`), `hidden_act "gelu"`},
		{repl(`"vocab_size": 128`, `"vocab_size": 0`), "vocab must be positive"},
		{`{"architectures": []}`, "exactly one"},
		{moe(`"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`), "num_experts_per_tok 9 exceeds num_experts 8"},
		{moe(`"moe_intermediate_size": 32`, `"moe_intermediate_size": 0`), "moe_intermediate_size must be positive"},
		{moe(`"mlp_only_layers": []`, `"mlp_only_layers": [5]`), "mlp_only_layers names layer 5 of 2"},
		{moe(`"decoder_sparse_step": 1`, `"decoder_sparse_step": 0`), "decoder_sparse_step must be positive"},
		{`{not json`, "config.json"},
	}
	for _, c := range cases {
		_, err := ParseConfig("dir/config.json", []byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "engine: ") {
			t.Errorf("want error containing %q, got %v", c.want, err)
		}
	}
}

func TestOpNamesAndProducers(t *testing.T) {
	llama := tinyConfig(ArchLlama, capture.BF16)
	ops := OpNames(llama)
	if n := 2 + 15*llama.Layers + 4; len(ops) != n {
		t.Fatalf("%d ops, want %d", len(ops), n)
	}
	for i, op := range ops {
		if OpIndex(llama, op) != i {
			t.Fatalf("OpIndex(%s) = %d, want %d", op, OpIndex(llama, op), i)
		}
		for _, p := range Producers(llama, op) {
			if OpIndex(llama, p) >= i {
				t.Fatalf("%s reads %s, which does not come before it", op, p)
			}
		}
	}
	q3 := tinyConfig(ArchQwen3, capture.BF16)
	if len(OpNames(q3)) != len(ops)+2*q3.Layers {
		t.Fatalf("qwen3 ops: %d", len(OpNames(q3)))
	}
	table := []struct {
		cfg  Config
		op   string
		want string
	}{
		{llama, "tokens", ""},
		{llama, "embed", "tokens"},
		{llama, "layers.0.attn_norm", "embed"},
		{llama, "layers.1.attn_norm", "layers.0.mlp_residual"},
		{llama, "layers.0.attn.q_proj", "layers.0.attn_norm"},
		{llama, "layers.0.attn.q_rope", "layers.0.attn.q_proj"},
		{q3, "layers.0.attn.q_rope", "layers.0.attn.q_norm"},
		{q3, "layers.1.attn.k_norm", "layers.1.attn.k_proj"},
		{llama, "layers.0.attn.sdpa", "layers.0.attn.q_rope layers.0.attn.k_rope layers.0.attn.v_proj"},
		{llama, "layers.1.attn_residual", "layers.0.mlp_residual layers.1.attn.o_proj"},
		{llama, "layers.0.mlp.act", "layers.0.mlp.gate_proj layers.0.mlp.up_proj"},
		{llama, "layers.1.mlp_residual", "layers.1.attn_residual layers.1.mlp.down_proj"},
		{llama, "final_norm", "layers.1.mlp_residual"},
		{llama, "logprobs", "logits tokens"},
		{llama, "sample", "logits"},
	}
	for _, c := range table {
		if got := strings.Join(Producers(c.cfg, c.op), " "); got != c.want {
			t.Errorf("Producers(%s) = %q, want %q", c.op, got, c.want)
		}
	}
	moe := tinyConfig(ArchQwen3MoE, capture.BF16)
	mops := OpNames(moe)
	if len(mops) != 2+17*moe.Layers+4 {
		t.Fatalf("qwen3_moe ops: %d", len(mops))
	}
	for i, op := range mops {
		if OpIndex(moe, op) != i {
			t.Fatalf("qwen3_moe: OpIndex(%s) = %d, want %d", op, OpIndex(moe, op), i)
		}
		for _, p := range Producers(moe, op) {
			if OpIndex(moe, p) >= i {
				t.Fatalf("qwen3_moe: %s reads %s, which does not come before it", op, p)
			}
		}
	}
	if !moe.MoELayer(0) || moe.MoELayer(1) || !moe.MoELayer(2) {
		t.Fatal("MoELayer: want 0 and 2 sparse, 1 dense (mlp_only_layers)")
	}
	step := moe
	step.MLPOnly, step.SparseStep = nil, 2 // transformers: sparse when (l+1) % step == 0
	if step.MoELayer(0) || !step.MoELayer(1) || step.MoELayer(2) {
		t.Fatal("MoELayer with decoder_sparse_step 2: want only layer 1 sparse")
	}
	for _, c := range []struct{ op, want string }{
		{"layers.0.mlp.router", "layers.0.mlp_norm"},
		{"layers.0.mlp.experts", "layers.0.mlp.router"},
		{"layers.0.mlp.expert_weights", "layers.0.mlp.router"},
		{"layers.0.mlp.combine", "layers.0.mlp_norm layers.0.mlp.experts layers.0.mlp.expert_weights"},
		{"layers.0.mlp_residual", "layers.0.attn_residual layers.0.mlp.combine"},
		{"layers.1.mlp_residual", "layers.1.attn_residual layers.1.mlp.down_proj"},
		{"layers.1.mlp.act", "layers.1.mlp.gate_proj layers.1.mlp.up_proj"},
	} {
		if got := strings.Join(Producers(moe, c.op), " "); got != c.want {
			t.Errorf("qwen3_moe: Producers(%s) = %q, want %q", c.op, got, c.want)
		}
	}
	for _, bad := range []string{"layers.0.mlp.gate_proj", "layers.1.mlp.router", "layers.2.mlp.down_proj"} {
		if OpIndex(moe, bad) >= 0 {
			t.Errorf("qwen3_moe: %s accepted", bad)
		}
	}
	if i, j := OpIndex(moe, "layers.0.mlp.router"), OpIndex(q3, "layers.0.mlp.gate_proj"); i != j {
		t.Errorf("router index %d, want gate_proj's place %d", i, j)
	}
	for _, bad := range []string{"layers.2.attn_norm", "layers.0.attn.q_norm", "layers.x.attn_norm", "layers.01.attn_norm", "nope"} {
		if Producers(llama, bad) != nil || OpIndex(llama, bad) >= 0 {
			t.Errorf("%s accepted", bad)
		}
	}
}
