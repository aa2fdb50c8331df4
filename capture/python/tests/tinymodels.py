"""Tiny random-init Hugging Face models and a vLLM-style fused twin, for the torch tests (no network)."""

import torch


def hf_model(arch, dtype=torch.float32, seed=0, tied=False, *, vocab=96, hidden=64, intermediate=96, layers=2,
             heads=4, kv_heads=2, head_dim=None, positions=128, **over):
    """A random LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM / Qwen3MoeForCausalLM (qwen3_moe) /
    Gemma3ForCausalLM (gemma3_text) with eager attention, its norms and biases random too, in dtype.

    The sizes default to the torch tests' model; head_dim None is hidden // heads for llama and qwen2 and 16 for
    the others. over: any other config field (transformers' names; they also override the sizes)."""
    import transformers as tf

    kw = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=positions,
              rms_norm_eps=1e-6, tie_word_embeddings=tied, pad_token_id=0, bos_token_id=None, eos_token_id=None)
    if head_dim is not None:
        kw["head_dim"] = head_dim
    kw.update(over)
    if arch == "qwen3_moe":
        moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1)
        cfg = tf.Qwen3MoeConfig(**{"head_dim": 16, **moe, **kw})
        cls = tf.Qwen3MoeForCausalLM
    elif arch == "gemma3_text":
        layer_types = ["sliding_attention", "full_attention"]
        cfg = tf.Gemma3TextConfig(**{"head_dim": 16, "sliding_window": 4, "layer_types": layer_types, **kw})
        cls = tf.Gemma3ForCausalLM
    elif arch == "llama":
        cfg = tf.LlamaConfig(**kw)
        cls = tf.LlamaForCausalLM
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(**kw)
        cls = tf.Qwen2ForCausalLM
    elif arch == "qwen3":
        cfg = tf.Qwen3Config(**{"head_dim": 16, **kw})
        cls = tf.Qwen3ForCausalLM
    else:
        raise ValueError(arch)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    m = cls(cfg)
    with torch.no_grad():
        # random norms and biases (init leaves them at 1 and 0, which would hide mix-ups)
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
    return m.to(dtype).eval()


def padded(seqs, side="left", pad=0):
    """(input_ids, attention_mask, position_ids) of a padded batch, positions counting real tokens."""
    S = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), S), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), S), dtype=torch.long)
    for b, s in enumerate(seqs):
        sl = slice(S - len(s), S) if side == "left" else slice(0, len(s))
        ids[b, sl] = torch.tensor(s)
        mask[b, sl] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return ids, mask, pos


class _Norm(torch.nn.Module):
    """vLLM's RMSNorm: norm(x) -> y, norm(x, residual) -> (y, x + residual)."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, x, residual=None):
        if residual is None:
            return self.hf(x)
        r = x + residual
        return self.hf(r), r


class _Rope(torch.nn.Module):
    """vLLM's per-layer rotary_emb(positions, q, k) -> (q, k), over flat [N, heads*hd] tensors."""

    def __init__(self, hf_rotary, hd):
        super().__init__()
        self.rot, self.hd = hf_rotary, hd

    def forward(self, positions, q, k):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        N = q.shape[0]
        cos, sin = self.rot(q, positions.view(1, N))
        qh = q.view(1, N, -1, self.hd).transpose(1, 2)
        kh = k.view(1, N, -1, self.hd).transpose(1, 2)
        qr, kr = apply_rotary_pos_emb(qh, kh, cos, sin)
        return qr.transpose(1, 2).reshape(N, -1), kr.transpose(1, 2).reshape(N, -1)


def _rows(w, _, tp, rank):
    """Rank's block of w's first dimension split into tp equal blocks."""
    k = w.shape[0] // tp
    return w[rank * k : (rank + 1) * k]


class RowParallel(torch.nn.Module):
    """A row-parallel linear layer: this rank's input columns, then an all-reduce (inside the module, as vLLM's
    RowParallelLinear does, so its output is the full sum)."""

    def __init__(self, linear, tp, rank):
        super().__init__()
        k = linear.in_features // tp
        self.weight = torch.nn.Parameter(linear.weight[:, rank * k : (rank + 1) * k].detach().clone())
        self.bias = linear.bias if (linear.bias is not None and rank == 0) else None
        self.tp = tp

    def forward(self, x):
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        if self.tp > 1:
            import torch.distributed as dist

            dist.all_reduce(y)
        return y


class _Attn(torch.nn.Module):
    def __init__(self, hf_attn, rotary, cfg, tp, rank):
        super().__init__()
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.nh, self.nkv, self.hd = cfg.num_attention_heads // tp, cfg.num_key_value_heads // tp, hd
        q, k, v = hf_attn.q_proj, hf_attn.k_proj, hf_attn.v_proj
        bias = q.bias is not None
        self.qkv_proj = torch.nn.Linear(q.in_features, (self.nh + 2 * self.nkv) * hd, bias=bias)
        with torch.no_grad():
            self.qkv_proj.weight.copy_(torch.cat([_rows(x.weight, 0, tp, rank) for x in (q, k, v)]))
            if bias:
                self.qkv_proj.bias.copy_(torch.cat([_rows(x.bias, 0, tp, rank) for x in (q, k, v)]))
        self.q_norm = getattr(hf_attn, "q_norm", None)
        self.k_norm = getattr(hf_attn, "k_norm", None)
        self.rotary_emb = _Rope(rotary, hd)
        self.o_proj = RowParallel(hf_attn.o_proj, tp, rank) if tp > 1 else hf_attn.o_proj

    def forward(self, positions, x, cu_seqlens):
        N = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        if self.q_norm is not None:
            q = self.q_norm(q.view(N, self.nh, self.hd)).view(N, -1)
            k = self.k_norm(k.view(N, self.nkv, self.hd)).view(N, -1)
        q, k = self.rotary_emb(positions, q, k)
        out = torch.empty_like(q)
        for a, b in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
            qh = q[a:b].view(b - a, self.nh, self.hd).transpose(0, 1)
            kh = k[a:b].view(b - a, self.nkv, self.hd).transpose(0, 1).repeat_interleave(self.nh // self.nkv, 0)
            vh = v[a:b].view(b - a, self.nkv, self.hd).transpose(0, 1).repeat_interleave(self.nh // self.nkv, 0)
            s = (qh @ kh.transpose(1, 2)) * self.hd**-0.5
            s = s + torch.full((b - a, b - a), float("-inf")).triu(1)
            out[a:b] = (s.softmax(-1) @ vh).transpose(0, 1).reshape(b - a, -1)
        return self.o_proj(out)


class _SiluAndMul(torch.nn.Module):
    def forward(self, x):
        g, u = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(g) * u


class _MLP(torch.nn.Module):
    def __init__(self, hf_mlp, tp, rank):
        super().__init__()
        g, u = hf_mlp.gate_proj, hf_mlp.up_proj
        self.gate_up_proj = torch.nn.Linear(g.in_features, 2 * g.out_features // tp, bias=False)
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.cat([_rows(g.weight, 0, tp, rank), _rows(u.weight, 0, tp, rank)]))
        self.act_fn = _SiluAndMul()
        self.down_proj = RowParallel(hf_mlp.down_proj, tp, rank) if tp > 1 else hf_mlp.down_proj

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class _Layer(torch.nn.Module):
    def __init__(self, hf_layer, rotary, cfg, tp, rank):
        super().__init__()
        self.input_layernorm = _Norm(hf_layer.input_layernorm)
        self.self_attn = _Attn(hf_layer.self_attn, rotary, cfg, tp, rank)
        self.post_attention_layernorm = _Norm(hf_layer.post_attention_layernorm)
        self.mlp = _MLP(hf_layer.mlp, tp, rank)

    def forward(self, positions, h, residual, cu_seqlens):
        if residual is None:
            residual = h
            h = self.input_layernorm(h)
        else:
            h, residual = self.input_layernorm(h, residual)
        h = self.self_attn(positions, h, cu_seqlens)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class _Inner(torch.nn.Module):
    def __init__(self, hf, tp, rank):
        super().__init__()
        self.embed_tokens = hf.model.embed_tokens
        self.layers = torch.nn.ModuleList(_Layer(l, hf.model.rotary_emb, hf.config, tp, rank) for l in hf.model.layers)
        self.norm = _Norm(hf.model.norm)


class LogitsProcessor(torch.nn.Module):
    """vLLM's logits_processor(lm_head, hidden) module."""

    def forward(self, lm_head, hidden):
        return torch.nn.functional.linear(hidden, lm_head.weight)


class FusedModel(torch.nn.Module):
    """The HF model's weights behind vLLM's module names and calling conventions: flat tokens (N,), positions
    (N,), cu_seqlens; fused qkv_proj and gate_up_proj; norms that add the residual; rotary_emb per layer.

    With tp > 1 (torch.distributed initialised), rank holds its heads, its intermediate columns and its vocab
    rows (the logits are this rank's vocab shard); o_proj and down_proj all-reduce inside the module."""

    def __init__(self, hf, tp=1, rank=0):
        super().__init__()
        self.config = hf.config
        self.model = _Inner(hf, tp, rank)
        if tp > 1:
            self.lm_head = torch.nn.Linear(hf.lm_head.in_features, hf.lm_head.out_features // tp, bias=False)
            with torch.no_grad():
                self.lm_head.weight.copy_(_rows(hf.lm_head.weight, 0, tp, rank))
        else:
            self.lm_head = hf.lm_head
        self.logits_processor = LogitsProcessor()

    def forward(self, input_ids, positions, cu_seqlens, last_only=False):
        h, residual = self.model.embed_tokens(input_ids), None
        for layer in self.model.layers:
            h, residual = layer(positions, h, residual, cu_seqlens)
        h, _ = self.model.norm(h, residual)
        if last_only:  # vLLM: logits of each sequence's last position only
            return self.logits_processor(self.lm_head, h[cu_seqlens[1:] - 1])
        return self.lm_head(h)
