package engine

import (
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig("config.json", []byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			// HFConfig round trip
			back, err := ParseConfig("x", mustJSON(t, got.HFConfig()))
			if err != nil || back != got {
				t.Fatalf("HFConfig round trip: %+v, %v", back, err)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	repl := func(old, new string) string { return strings.Replace(llamaJSON, old, new, 1) }
	cases := []struct{ json, want string }{
		{repl(`"LlamaForCausalLM"`, `"MistralForCausalLM"`), `unsupported architecture "MistralForCausalLM"`},
		{repl(`"rope_scaling": null`, `"rope_scaling": {"rope_type": "llama3", "factor": 8.0}`), `rope_scaling type "llama3" is not supported`},
		{repl(`"rope_scaling": null`, `"rope_scaling": {"type": "linear", "factor": 2.0}`), `"linear" is not supported`},
		{repl(`"bfloat16"`, `"float8"`), `dtype "float8" not supported`},
		{repl(`"num_key_value_heads": 2`, `"num_key_value_heads": 3`), "not a multiple of 3 kv heads"},
		{repl(`"hidden_act": "silu"`, `"hidden_act": "gelu"`), `hidden_act "gelu"`},
		{repl(`"vocab_size": 128`, `"vocab_size": 0`), "vocab must be positive"},
		{`{"architectures": []}`, "exactly one"},
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
	for _, bad := range []string{"layers.2.attn_norm", "layers.0.attn.q_norm", "layers.x.attn_norm", "layers.01.attn_norm", "nope"} {
		if Producers(llama, bad) != nil || OpIndex(llama, bad) >= 0 {
			t.Errorf("%s accepted", bad)
		}
	}
}
