#!/usr/bin/env python3
"""Builds tiny random float32 Llama, Qwen2, Qwen3, Qwen3-MoE and Qwen2-MoE models with transformers, saves them with
save_pretrained, and records their eager forward on fixed token sequences, for engine's TestHFParity:

    python3 hf_parity.py OUT && BITALIGN_HF_PARITY=OUT ./engine.test -test.run HFParity -test.v

OUT/<arch>/ holds the checkpoint plus parity.json: {"seqs": [{"tokens": [...], "logits": "logits0.f32",
"hidden": ["hidden0_1.f32", ...]}]}; logits (T, V) and the residual stream after each layer (T, H), float32 LE.
For the MoE model each entry also has "moe": {layer: {"router": file (T, E) f32, "experts": file (T, k) i32,
"combine": file (T, H) f32}}, from hooks on the sparse block's gate and the block itself.
Needs torch and transformers (no network: configs only). Runs on the CPU so that no TF32 path is taken.
"""
import json, os, sys

import torch
import transformers

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
out = sys.argv[1]

common = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6, torch_dtype=torch.float32)
models = {
    "llama": transformers.LlamaForCausalLM(transformers.LlamaConfig(rope_theta=10000.0, **common)),
    "llama_bias_tied": transformers.LlamaForCausalLM(transformers.LlamaConfig(
        rope_theta=500000.0, attention_bias=True, tie_word_embeddings=True, **common)),
    "qwen2": transformers.Qwen2ForCausalLM(transformers.Qwen2Config(rope_theta=1000000.0, **common)),
    "qwen3": transformers.Qwen3ForCausalLM(transformers.Qwen3Config(rope_theta=1000000.0, head_dim=32, **common)),
    # 3 layers: 0 and 2 sparse, 1 dense (mlp_only_layers); 8 experts, 2 per token, normalised weights
    "qwen3_moe": transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        rope_theta=1000000.0, head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], **dict(common, num_hidden_layers=3))),
    # Qwen2 attention (q/k/v bias), 8 experts, 2 per token, weights not normalised, a shared expert with its gate
    "qwen2_moe": transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, norm_topk_prob=False, decoder_sparse_step=1, **common)),
}
g = torch.Generator().manual_seed(1)
seqs = [torch.randint(0, 96, (n,), generator=g) for n in (17, 70)]
for name, model in models.items():
    model = model.float().eval()
    with torch.no_grad():  # random init leaves norms at 1 and biases at 0: perturb them so they matter
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "seqs": []}
    for i, toks in enumerate(seqs):
        moe, hooks = {}, []
        for l, layer in enumerate(getattr(model.model, "layers", [])):
            block = layer.mlp
            if not hasattr(block, "gate") or not hasattr(block, "experts"):
                continue
            moe[l] = {}

            def on_gate(mod, inp, out, l=l):  # Qwen3MoeTopKRouter returns (logits, weights, indices)
                moe[l]["router"], moe[l]["weights"], moe[l]["experts"] = out[0], out[1], out[2]

            def on_block(mod, inp, out, l=l):
                moe[l]["combine"] = out[0] if isinstance(out, tuple) else out

            hooks += [block.gate.register_forward_hook(on_gate), block.register_forward_hook(on_block)]
        with torch.no_grad():
            r = model(toks[None], output_hidden_states=True)
        for h in hooks:
            h.remove()
        entry = {"tokens": toks.tolist(), "logits": f"logits{i}.f32", "hidden": []}
        if moe:
            entry["moe"] = {}
            for l, t in moe.items():
                files = {}
                for key in ("router", "weights", "experts", "combine"):
                    f = f"{key}{i}_{l}." + ("i32" if key == "experts" else "f32")
                    v = t[key].reshape(len(toks), -1)
                    v = v.to(torch.int32) if key == "experts" else v.float()
                    v.contiguous().numpy().tofile(os.path.join(d, f))
                    files[key] = f
                entry["moe"][str(l)] = files
        r.logits[0].float().contiguous().numpy().tofile(os.path.join(d, entry["logits"]))
        # hidden_states[0] is the embedding, [l+1] the residual after layer l; the last one is after the final
        # norm in transformers, so layer L-1's residual is not available there: keep layers 0..L-2 and the norm.
        for l, h in enumerate(r.hidden_states):
            f = f"hidden{i}_{l}.f32"
            h[0].float().contiguous().numpy().tofile(os.path.join(d, f))
            entry["hidden"].append(f)
        meta["seqs"].append(entry)
    with open(os.path.join(d, "parity.json"), "w") as f:
        json.dump(meta, f)
    print(name, "saved", sorted(os.listdir(d)))
