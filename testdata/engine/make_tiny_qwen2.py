#!/usr/bin/env python3
"""Writes tiny_qwen2/: a 2-shard Hugging Face style Qwen2 checkpoint (bf16, q/k/v bias, tied embeddings),
with only the standard library, as an independent writer for the engine's loader test.

Every value is v(name, i) = ((i * 37 + len(name) * 11) % 17 - 8) / 16, exact in bf16; the Go test recomputes it.
Run from this directory: python3 make_tiny_qwen2.py
"""
import json, os, struct

H, I, V, L, NH, NKV, HD = 16, 32, 24, 2, 4, 2, 4

def tensors():
    t = [("model.embed_tokens.weight", [V, H])]
    for l in range(L):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", [H]),
              (p + "self_attn.q_proj.weight", [NH * HD, H]), (p + "self_attn.q_proj.bias", [NH * HD]),
              (p + "self_attn.k_proj.weight", [NKV * HD, H]), (p + "self_attn.k_proj.bias", [NKV * HD]),
              (p + "self_attn.v_proj.weight", [NKV * HD, H]), (p + "self_attn.v_proj.bias", [NKV * HD]),
              (p + "self_attn.o_proj.weight", [H, NH * HD]),
              (p + "post_attention_layernorm.weight", [H]),
              (p + "mlp.gate_proj.weight", [I, H]), (p + "mlp.up_proj.weight", [I, H]),
              (p + "mlp.down_proj.weight", [H, I])]
    t += [("model.norm.weight", [H])]
    return t

def value(name, i):
    return ((i * 37 + len(name) * 11) % 17 - 8) / 16

def bf16(x):
    return struct.pack("<f", x)[2:4]  # exact: the values have at most 4 significant bits

def write(path, items):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, shape in items:
        n = 1
        for d in shape:
            n *= d
        raw = b"".join(bf16(value(name, i)) for i in range(n))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)

os.makedirs("tiny_qwen2", exist_ok=True)
ts = tensors()
half = len(ts) // 2
shards = {"model-00001-of-00002.safetensors": ts[:half], "model-00002-of-00002.safetensors": ts[half:]}
for fname, items in shards.items():
    write(os.path.join("tiny_qwen2", fname), items)
index = {"metadata": {"total_size": 0}, "weight_map": {n: f for f, items in shards.items() for n, _ in items}}
with open("tiny_qwen2/model.safetensors.index.json", "w") as f:
    json.dump(index, f, indent=2, sort_keys=True)
config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": V, "hidden_size": H,
          "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
          "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
          "max_position_embeddings": 64, "hidden_act": "silu", "use_sliding_window": False}
with open("tiny_qwen2/config.json", "w") as f:
    json.dump(config, f, indent=2)
