"""Hugging Face models on bitalign's kernels: patch(model) makes a transformers LlamaForCausalLM,
Qwen2ForCausalLM or Qwen3ForCausalLM run the Go engine's op sequence (engine/forward.go, docs/design.md) through
bitalign.ops, so that its trainer forward, its `generate` and `bitalign replay` agree bit for bit.

    import bitalign.hf as bh
    bh.patch(model)                                     # canonical profile; bh.unpatch(model) undoes it
    out = bh.generate(model, ids, attention_mask=mask, seed=7, temperature=1.0, max_new_tokens=64)

What the patch replaces (instance attributes only: the classes, the parameters and the module tree are untouched,
so forward hooks such as bitalign_capture's still see every module's output):

- every RMSNorm (input_layernorm, post_attention_layernorm, the final norm, Qwen3's q_norm/k_norm as rows of
  head_dim) → ops.rms_norm, rounded to the model dtype;
- q/k/v/o/gate/up/down_proj → ops.linear rounded to the model dtype; lm_head → ops.linear in float32 (the logits
  are float32, as the engine's);
- the MLP's act_fn(gate) · up → ops.swiglu (one op, the engine's SiLU);
- the decoder layer's two residual adds → ops.residual;
- model.model.rotary_emb → the engine's tables (bitalign.rope.tables) gathered at position_ids; transformers'
  own apply_rotary_pos_emb then rotates q and k, which on model-dtype tensors is the engine's RoPE bit for bit
  (docs/kernels-torch.md says why);
- attention → the "bitalign" entry of transformers' AttentionInterface (and AttentionMaskInterface, so the mask
  is always a boolean matrix): for every query the mask says which keys it sees; those must be one contiguous
  run (a sequence's keys in order), key j of the run at position j, and ops.attention runs once per run of
  queries sharing a first key (a sequence of a padded batch, a packed sequence, a decode step over the cache).

The weights are widened to float32 once at patch time (tied weights once) and freed by unpatch. The embedding
stays transformers' (a gather: no arithmetic). Anything the engine does not compute (another model class or
module, sliding windows, rope scaling, MLP biases, dropout, another activation) is a ValueError naming it.

The op layer is thin on purpose: a vLLM or SGLang adapter would map its own layers (QKVParallelLinear,
RMSNorm, RotaryEmbedding, its attention backend with its block tables) onto the same bitalign.ops calls; only
the mask→segment step (segments()) is Hugging Face's way of saying which keys a query sees.
"""

import math
import collections
import weakref
from typing import Optional

import numpy as np
import torch

from . import ops, rope as _rope, sampling

ATTN = "bitalign"
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
# class name of the model → (decoder layer, attention, MLP, RMSNorm, rotary embedding, base model), and whether
# the attention has per-head q/k norms
_ARCH = {
    "LlamaForCausalLM": ("Llama", False),
    "Qwen2ForCausalLM": ("Qwen2", False),
    "Qwen3ForCausalLM": ("Qwen3", True),
}


def _err(msg):
    return ValueError(f"bitalign.hf: {msg}")


# --- which keys each query sees -----------------------------------------------------------------------------------


def segments(mask):
    """The attention runs of one batch row: mask (Tq, S) bool, True where query t may see key s.

    Returns a list of (r0, r1, k0, pos): queries r0..r1-1 all see keys starting at k0 (a sequence whose key j is
    at k0 + j), query r0 + i sees keys k0..k0 + pos[i] (pos an int32 tensor of r1 - r0 positions). Every query's
    visible keys must be one contiguous run; a query that sees no key belongs to no run (its output is zero). A
    run's pos need not rise by one per query: padding queries of a right-padded batch repeat the last position.
    """
    if mask.dim() != 2:
        raise _err(f"an attention mask row must be (queries, keys), has shape {tuple(mask.shape)}")
    m = mask.to(torch.bool)
    return _runs(_mask_stats(m).cpu().tolist(), m.shape[-1], lambda t: m[t])


def _mask_stats(mb):
    """mb (..., Tq, S) bool → int32 (3, ..., Tq) on mb's device: per query its first and last visible key and how
    many it sees (count 0: none; first/last are then meaningless). Three reductions, so that a CUDA mask's runs
    are found from 12 bytes a query copied to the host, not from the whole mask."""
    S = mb.shape[-1]
    mi = mb.to(torch.int32)
    first = mi.argmax(-1)  # the first maximal element: the first visible key
    last = (S - 1) - mi.flip(-1).argmax(-1)
    return torch.stack([first.to(torch.int32), last.to(torch.int32), mi.sum(-1, dtype=torch.int32)])


def _runs(stats, S, row):
    """segments() from one batch row's _mask_stats as lists [first, last, count] (each Tq long); row(t) gives query
    t's mask row (bool, S) for the error message of a query whose keys are not one run."""
    first, last, count = stats
    T = len(first)
    if T == 0 or S == 0:
        return []
    for t in range(T):
        if count[t] and count[t] != last[t] - first[t] + 1:
            keys = row(t).nonzero().flatten().tolist()
            raise _err(f"query {t} sees keys {keys[:8]}{'…' if len(keys) > 8 else ''}: not one contiguous run of a "
                       "sequence's keys (a mask bitalign cannot express as one sequence's causal attention)")
    out = []
    t = 0
    while t < T:
        if not count[t]:
            t += 1
            continue
        r0, k0 = t, first[t]
        while t < T and count[t] and first[t] == k0:
            t += 1
        out.append((r0, t, k0, torch.tensor([last[i] - k0 for i in range(r0, t)], dtype=torch.int32)))
    return out


def causal_mask(Tq, S):
    """The mask of Tq queries that are the last Tq of S keys (no padding): query t sees keys 0..S-Tq+t."""
    return torch.arange(S)[None, :] <= (torch.arange(Tq)[:, None] + (S - Tq))


# --- the attention op ---------------------------------------------------------------------------------------------

_last_mask = [None, None]  # [weakref to the last mask tensor, its segments per batch row]


def _row_segments(mask, B, Tq, S, device):
    """Every batch row's runs (_on_device) of mask, found once per mask (one forward's layers share it)."""
    ref = _last_mask[0]
    if mask is not None and ref is not None and ref() is mask and \
            _last_mask[1][0] == (B, Tq, S, mask._version, device):
        return _last_mask[1][1]
    given = mask
    if mask is None:  # causal, the queries the last Tq keys: one run
        segs = [[(0, Tq, 0, torch.arange(S - Tq, S, dtype=torch.int32))] if Tq and S else []] * B
    else:
        if mask.dim() == 4:
            if mask.shape[1] != 1:
                raise _err(f"per-head attention masks {tuple(mask.shape)} are not supported")
            mask = mask[:, 0]
        mb = mask[..., :S]
        if mb.dtype != torch.bool:  # an additive float mask: 0 where a key is seen
            mb = mb == 0
        if mb.shape[0] == 1 and B > 1:
            mb = mb.expand(B, -1, -1)
        if tuple(mb.shape) != (B, Tq, S):
            raise _err(f"attention mask {tuple(mask.shape)} for {B} rows of {Tq} queries over {S} keys")
        stats = _host_stats(given, mb)
        segs = [_runs([st[b] for st in stats], S, lambda t, b=b: mb[b, t].cpu()) for b in range(B)]
    segs = _on_device(segs, device)
    if given is not None:  # the mask transformers passes every layer of one forward: its runs once
        try:
            _last_mask[0], _last_mask[1] = weakref.ref(given), ((B, Tq, S, given._version, device), segs)
        except TypeError:
            pass
    return segs


def _on_device(rows, device):
    """rows' runs as (r0, r1, k0, n, pos) with n the keys the run's last query sees and pos on device: one
    copy of every run's positions (a pinned buffer, asynchronous; each run's slice 16-byte aligned, as the
    kernels load it), not one pageable copy per attention call (each of which waits for the stream)."""
    flat = [(b, run) for b, runs in enumerate(rows) for run in runs]
    if not flat:
        return [[] for _ in rows]
    parts, offs, o = [], [], 0
    for _, (_, _, _, pos) in flat:
        pad = -len(pos) % 4
        parts += [pos, torch.zeros(pad, dtype=torch.int32)] if pad else [pos]
        offs.append(o)
        o += len(pos) + pad
    host = torch.cat(parts)
    dev = host.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else host.to(device)
    out = [[] for _ in rows]
    for (b, (r0, r1, k0, pos)), off in zip(flat, offs):
        out[b].append((r0, r1, k0, int(pos.max()) + 1, dev[off:off + len(pos)]))
    return out


def _f32(x):
    """x widened to float32 (exact), contiguous and 16-byte aligned, as the kernels need."""
    y = x.to(torch.float32).contiguous()
    if y.data_ptr() % 16:
        y = y.clone()
    return y


def _attention_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], scale: float,
                  profile: str, out_dtype: str) -> torch.Tensor:
    """q (B, heads, Tq, hd), k and v (B, kv_heads, S, hd) in the model dtype, mask (B, 1, Tq, S) bool or None
    (causal, the queries the last Tq keys) → (B, Tq, heads, hd) in the model dtype: ops.attention per run of
    segments()."""
    return _attention_f32(q, k, v, mask, scale, profile, out_dtype).to(q.dtype)  # exact: model-dtype values


def _attention_f32(q, k, v, mask, scale, profile, out_dtype):
    """_attention_impl's result before its narrowing: float32 (B, Tq, heads, hd) holding model-dtype values."""
    B, H, Tq, hd = q.shape
    KV, S = k.shape[1], k.shape[2]
    rows = _row_segments(mask, B, Tq, S, q.device)
    top = max((k0 + n - 1 for runs in rows for _, _, k0, n, _ in runs), default=S - 1)
    if S > Tq and top != S - 1:  # with a cache (more keys than queries) the forward's own keys must come last
        raise _err(f"no query sees the last {S - 1 - top} of {S} keys (a static or preallocated cache?): bitalign.hf "
                   "needs the keys of a sequence to end at its last query (transformers' DynamicCache, or no cache)")
    for b, runs in enumerate(rows):
        for r0, r1, k0, n, _ in runs:
            if k0 + n > S:
                raise _err(f"row {b}: queries {r0}…{r1 - 1} see keys up to {k0 + n - 1} of {S}")
    # the whole batch widened once, token-major ((B, T, heads·hd): a run's rows are one contiguous slice), and
    # every run's output written into one float32 tensor (rows no run covers, queries that see no key, are 0)
    qs, ks, vs = _tokens_f32(q), _tokens_f32(k), _tokens_f32(v)
    covered = sum(r1 - r0 for runs in rows for r0, r1, _, _, _ in runs) == B * Tq
    out = (torch.empty if covered else torch.zeros)((B, Tq, H * hd), dtype=torch.float32, device=q.device)
    for b, runs in enumerate(rows):
        for r0, r1, k0, n, pos in runs:
            o = out[b, r0:r1]
            dst = o if o.data_ptr() % 16 == 0 else torch.empty_like(o)
            ops.attention_into(dst, _slice(qs, b, r0, r1), _slice(ks, b, k0, k0 + n), _slice(vs, b, k0, k0 + n), pos,
                               H, KV, hd, scale, profile, out_dtype)
            if dst is not o:
                o.copy_(dst)
    return out.view(B, Tq, H, hd)


def _tokens_f32(x):
    """(B, heads, T, hd) in the model dtype → (B, T, heads·hd) float32 (exact), contiguous, in one copy."""
    B, h, T, hd = x.shape
    y = torch.empty((B, T, h, hd), dtype=torch.float32, device=x.device)
    y.copy_(x.transpose(1, 2))
    return y.view(B, T, h * hd)


def _slice(x, b, r0, r1):
    """Rows r0…r1-1 of batch row b of a contiguous (B, T, C) float32 tensor: contiguous; cloned when the view's
    start is not 16-byte aligned (C not a multiple of 4), as the kernels' loads need."""
    s = x[b, r0:r1]
    return s if s.data_ptr() % 16 == 0 else s.clone()


_attention_op = torch.library.custom_op("bitalign_hf::attention", mutates_args=())(_attention_impl)


@_attention_op.register_fake
def _(q, k, v, mask, scale, profile, out_dtype):
    B, H, Tq, hd = q.shape
    return q.new_empty((B, Tq, H, hd))


def attention_scale(head_dim):
    """RN32(1/√hd) computed in float64, the engine's kernels.AttentionScale."""
    return float(np.float32(1.0 / math.sqrt(head_dim)))


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: returns (attn_output (B, Tq, heads, hd), None)."""
    p = getattr(module, "_bitalign", None)
    if p is None:
        raise _err(f"attention implementation {ATTN!r} on a module that bitalign.hf.patch did not patch "
                   f"({type(module).__name__})")
    if dropout:
        raise _err(f"attention dropout {dropout} (the engine has none: call model.eval())")
    if kwargs.get("sliding_window") is not None:
        raise _err(f"sliding window {kwargs['sliding_window']}")
    if kwargs.get("output_attentions"):
        raise _err("output_attentions: bitalign's attention does not materialise the probabilities")
    hd = query.shape[-1]
    if scaling is not None and abs(scaling - hd ** -0.5) > 1e-9 * hd ** -0.5:
        raise _err(f"attention scaling {scaling} is not 1/√head_dim")
    ro = getattr(module, "rotary_emb", None)
    if isinstance(ro, RotaryOut) and _observed(ro):
        # only when something listens (a recorder): the copies cost. The forward's own keys are the cache's last
        # Tq (a DynamicCache appends; no cache: all of them): _attention_op checks that the last query sees them.
        B, H, Tq, _ = query.shape
        ro(query.transpose(1, 2).reshape(B, Tq, H * hd), key[:, :, -Tq:].transpose(1, 2).reshape(B, Tq, -1))
    args = (query, key, value, attention_mask, attention_scale(hd), p.profile, p.dt)
    if type(query) is torch.Tensor and query.device.type == "cuda" and not torch.compiler.is_compiling():
        # eager: the implementation itself, as ops.eager does, narrowed through the patch so that the o_proj
        # widening of (a view of) it gets the float32 source back
        return p.narrow(_attention_f32(*args)), None
    return _attention_op(*args), None


def _bitalign_mask(*args, **kwargs):
    """The boolean mask (B, 1, Tq, S) always, never the is_causal shortcut."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    kwargs.pop("dtype", None)
    kwargs.pop("config", None)
    m = sdpa_mask(*args, **kwargs)
    if isinstance(m, torch.Tensor) and type(m) is torch.Tensor and m.device.type == "cuda" and m.dim() == 4 and \
            m.shape[1] == 1 and m.dtype == torch.bool and not torch.compiler.is_compiling():
        # the mask's runs come from three numbers a query (_mask_stats), computed on the GPU and copied to the
        # host now, before the first layer's launches: the first attention then waits for this small copy only,
        # while the GPU already has that layer's norm and projections queued
        st = _mask_stats(m[:, 0])
        host = torch.empty(st.shape, dtype=st.dtype, pin_memory=True)
        host.copy_(st, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        _pending_mask[:] = [weakref.ref(m), m._version, host, ev]
    return m


_pending_mask = [None, None, None, None]  # [weakref to the mask, its _version, its stats' pinned copy, copy done]


def _host_stats(mask, mb):
    """_mask_stats(mb) as lists on the host ([first, last, count], each (B, Tq)): the copy _bitalign_mask started
    when mask is that mask (and mb all of it), else computed now on mb's device."""
    ref, version, host, ev = _pending_mask
    if ref is not None and ref() is mask and mask._version == version and tuple(host.shape[1:]) == tuple(mb.shape[:2]) \
            and mask.shape[-1] == mb.shape[-1]:
        ev.synchronize()
        _pending_mask[:] = [None, None, None, None]
        return host.tolist()
    return _mask_stats(mb).cpu().tolist()


def register():
    """Registers the "bitalign" attention and mask functions with transformers (patch does it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN, _attention)
    AttentionMaskInterface.register(ATTN, _bitalign_mask)


class RotaryOut(torch.nn.Module):
    """A patched attention's rotated q and k of the forward's tokens, (B, T, heads·hd) and (B, T, kv_heads·hd),
    returned unchanged: the module a capture hook sees them at (bitalign_capture maps self_attn.rotary_emb's
    outputs to layers.L.attn.q_rope and k_rope, the engine's ops that transformers computes in a function).
    Parameterless: the state dict does not change; unpatch removes it."""

    def forward(self, q, k):
        return q, k


# --- the patch ----------------------------------------------------------------------------------------------------


class _Patch:
    def __init__(self, profile, dt, dtype):
        self.profile, self.dt, self.dtype = profile, dt, dtype
        self.weights = {}  # id(parameter) → float32 copy (tied weights once)
        self.forwards = []  # (module, previous instance forward or None)
        self.attn = None  # the config's previous attention implementation
        self.tables = None
        self.children = []  # attention modules given a RotaryOut child
        self.plain = {}  # id(Linear) → its (float32 weight, bias) when ops.linear computes it alone (not TP)
        self.wides = collections.OrderedDict()  # id(narrowed tensor) → (weakref, its float32 source, _version)

    def narrow(self, y32):
        """y32 (float32 holding model-dtype values, an op's output) in the model dtype, remembered so that
        wide() of the result gives y32 back instead of widening it again (the bits are the same: both
        conversions are exact)."""
        y = y32 if self.dtype == torch.float32 else y32.to(self.dtype)
        if y is not y32 and not torch.compiler.is_compiling() and type(y) is torch.Tensor:
            self.wides[id(y)] = (weakref.ref(y), y32, y._version)
            self.wides.move_to_end(id(y))
            while len(self.wides) > self.WIDES:
                self.wides.popitem(last=False)
        return y

    def wide(self, x):
        """x in float32 (exact), contiguous: narrow()'s float32 source when x is what it returned, unchanged."""
        if torch.compiler.is_compiling():  # traced: a plain conversion (the ops check alignment at run time)
            return x.to(torch.float32).contiguous()
        e = self.wides.get(id(x))
        if e is not None and e[0]() is x and x._version == e[2]:
            return e[1]
        b = x._base  # a contiguous view of all of a narrowed output (transformers' reshape of the attention's)
        if b is not None:
            e = self.wides.get(id(b))
            if e is not None and e[0]() is b and b._version == e[2] and x.is_contiguous() and b.is_contiguous() and \
                    x.storage_offset() == b.storage_offset() and x.numel() == b.numel():
                return e[1].view(x.shape)
        return _f32(x)

    WIDES = 6  # outputs remembered: a layer's fan-out (a norm's output to q, k, v; gate and up to the SwiGLU)

    def w32(self, p):
        if p is None:
            return None
        w = self.weights.get(id(p))
        if w is None:
            w = p.detach().to(torch.float32).contiguous()
            if w.data_ptr() == p.data_ptr() and w.device.type != "meta":
                w = w.clone()  # a float32 model: its own copy too (patch-time weights, whatever the dtype)
            self.weights[id(p)] = w
        return w

    def replace(self, module, fn):
        self.forwards.append((module, module.__dict__.get("forward")))
        module.forward = fn


def _model_dtype(model):
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        raise _err(f"{type(model).__name__} mixes parameter dtypes {sorted(map(str, dtypes))}")
    dtype = dtypes.pop()
    if dtype not in _DTYPES:
        raise _err(f"{type(model).__name__} is {dtype}: the kernels compute bf16, f16 and f32 models")
    return dtype


def _check_config(name, cfg, qk_norm):
    act = getattr(cfg, "hidden_act", "silu")
    if act != "silu":
        raise _err(f"{name}: hidden_act {act!r} (the engine's MLP is SwiGLU: silu)")
    rp = getattr(cfg, "rope_parameters", None) or {}
    rtype = rp.get("rope_type", "default") if isinstance(rp, dict) else "default"
    if rtype != "default":
        raise _err(f"{name}: rope scaling {rtype!r} (only plain RoPE, rope_type 'default', is supported)")
    rs = getattr(cfg, "rope_scaling", None)  # transformers before rope_parameters
    if isinstance(rs, dict) and rs.get("rope_type", rs.get("type", "default")) != "default":
        raise _err(f"{name}: rope_scaling {rs}")
    if getattr(cfg, "use_sliding_window", False):
        raise _err(f"{name}: sliding window attention (use_sliding_window, window {cfg.sliding_window})")
    lt = getattr(cfg, "layer_types", None)
    if lt and any(t != "full_attention" for t in lt):
        raise _err(f"{name}: layer types {sorted(set(lt))} (only full_attention)")
    if getattr(cfg, "mlp_bias", False):
        raise _err(f"{name}: mlp_bias (the engine's gate/up/down projections have no bias)")
    if (getattr(cfg, "pretraining_tp", 1) or 1) != 1:
        raise _err(f"{name}: pretraining_tp {cfg.pretraining_tp}")
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    from . import launch

    limit = launch.load_rules()["attention"]["max_head_dim"]
    if not 0 < hd <= limit or hd % 2:
        raise _err(f"{name}: head_dim {hd} (the attention kernel takes even head dims up to {limit})")
    return hd


def _classes(model):
    """(prefix, qk_norm, the model's transformers classes, the SiLU types) of a supported model class (patch and
    bitalign.tp.shard both ask)."""
    import transformers as tf

    name = type(model).__name__
    if name not in _ARCH or not isinstance(model, getattr(tf, name)):
        raise _err(f"model class {name} is not supported (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)")
    prefix, qk_norm = _ARCH[name]
    mods = getattr(tf.models, prefix.lower())
    mm = getattr(mods, f"modeling_{prefix.lower()}")
    cls = {k: getattr(mm, f"{prefix}{k}") for k in ("Model", "DecoderLayer", "Attention", "MLP", "RMSNorm",
                                                     "RotaryEmbedding")}
    act_types = (torch.nn.SiLU,)
    try:
        from transformers.activations import SiLUActivation

        act_types += (SiLUActivation,)
    except ImportError:  # transformers versions whose ACT2FN["silu"] is torch.nn.SiLU
        pass
    return prefix, qk_norm, cls, act_types


def _walk(model, cls, act_types):
    """A ValueError naming the first module in model's tree that is not one the engine computes."""
    allowed = tuple(cls.values()) + (torch.nn.ModuleList, torch.nn.Embedding, torch.nn.Linear, type(model))
    for mname, m in model.named_modules():
        if isinstance(m, allowed) or (mname.endswith("act_fn") and isinstance(m, act_types)):
            continue
        raise _err(f"module {mname or '(root)'} is a {type(m).__name__}: not a module of {type(model).__name__} "
                   "the patch knows")


def patch(model, profile="canonical", max_positions=None):
    """Makes model (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) run the engine's ops; returns model.

    profile: "canonical" (batch-invariant, the engine's default) or "standard" (the engine's split-K/cuBLAS-like
    order: batch-variant, for showing what the canonical profile fixes). max_positions: the RoPE tables' length
    (default: config.max_position_embeddings). Raises ValueError naming anything the engine does not compute."""
    if profile not in ops._PROFILES:  # the ops' own list: a new kernel profile reaches the patch with them
        raise _err(f"profile must be one of {', '.join(map(repr, ops._PROFILES))}, not {profile!r}")
    name = type(model).__name__
    prefix, qk_norm, cls, act_types = _classes(model)
    if getattr(model, "_bitalign", None) is not None:
        raise _err(f"{name} is already patched (unpatch it first)")
    if _recording(model):
        # the recorder found the modules to watch when it started: q_rope and k_rope (the RotaryOut the patch
        # adds) would go unrecorded
        raise _err(f"{name} is being recorded (bitalign_capture): patch it before the recording starts")
    cfg = model.config
    hd = _check_config(name, cfg, qk_norm)
    dtype = _model_dtype(model)
    _walk(model, cls, act_types)
    base = model.model
    if not isinstance(base, cls["Model"]) or not isinstance(base.rotary_emb, cls["RotaryEmbedding"]):
        raise _err(f"{name}.model is a {type(base).__name__}, not {prefix}Model with a {prefix}RotaryEmbedding")
    if len(base.layers) != cfg.num_hidden_layers:
        raise _err(f"{name}: {len(base.layers)} layers, config says {cfg.num_hidden_layers}")
    for i, layer in enumerate(base.layers):
        ln = f"model.layers.{i}"
        if not isinstance(layer, cls["DecoderLayer"]):
            raise _err(f"{ln} is a {type(layer).__name__}, not {prefix}DecoderLayer")
        at, mlp = layer.self_attn, layer.mlp
        if not isinstance(at, cls["Attention"]):
            raise _err(f"{ln}.self_attn is a {type(at).__name__}, not {prefix}Attention")
        if not isinstance(mlp, cls["MLP"]):
            raise _err(f"{ln}.mlp is a {type(mlp).__name__}, not {prefix}MLP (mixture-of-experts is not supported)")
        if getattr(at, "sliding_window", None) is not None:
            raise _err(f"{ln}.self_attn: sliding window {at.sliding_window}")
        if at.head_dim != hd:
            raise _err(f"{ln}.self_attn: head_dim {at.head_dim}, config says {hd}")
        for p in ("gate_proj", "up_proj", "down_proj"):
            if getattr(mlp, p).bias is not None:
                raise _err(f"{ln}.mlp.{p} has a bias (the engine's MLP has none)")
        if not isinstance(mlp.act_fn, act_types):
            raise _err(f"{ln}.mlp.act_fn is a {type(mlp.act_fn).__name__}, not SiLU")
        if qk_norm != (hasattr(at, "q_norm") and hasattr(at, "k_norm")):
            raise _err(f"{ln}.self_attn: q_norm/k_norm {'missing' if qk_norm else 'present'}")
    if not isinstance(model.lm_head, torch.nn.Linear) or model.lm_head.bias is not None:
        raise _err(f"{name}.lm_head has a bias (the engine's LM head has none)")
    rot = base.rotary_emb
    if float(getattr(rot, "attention_scaling", 1.0)) != 1.0:
        raise _err(f"{name}: rotary attention_scaling {rot.attention_scaling}")
    theta = float(cfg.rope_parameters["rope_theta"]) if isinstance(getattr(cfg, "rope_parameters", None), dict) \
        else float(cfg.rope_theta)
    max_pos = int(max_positions or cfg.max_position_embeddings)

    register()
    st = _Patch(profile, _DTYPES[dtype], dtype)
    dev = next(model.parameters()).device
    c, s = _rope.tables(theta, hd, max_pos, st.dt)
    c, s = torch.from_numpy(np.concatenate([c, c], 1)), torch.from_numpy(np.concatenate([s, s], 1))
    st.tables = (c.to(device=dev, dtype=dtype), s.to(device=dev, dtype=dtype))
    try:
        _install(model, st, cfg)
    except BaseException:
        _restore(model, st)
        raise
    return model


def _install(model, st, cfg):
    base = model.model
    eps = cfg.rms_norm_eps

    def norm(m):
        w = st.w32(m.weight)
        C = w.shape[0]

        def forward(x):
            _dtype_of(x, st, "RMSNorm input")
            y = ops.eager("rms_norm", st.wide(x).reshape(-1, C), w, eps, st.profile, st.dt)
            return st.narrow(y.view(x.shape))

        st.replace(m, forward)

    def linear(m, out_dt):
        w, b = st.w32(m.weight), st.w32(m.bias)
        N, K = w.shape
        if _tp_linear(m, st, w, b, out_dt):
            return
        st.plain[id(m)] = (w, b)

        def forward(x):
            _dtype_of(x, st, "Linear input")
            y = ops.eager("linear", st.wide(x).reshape(-1, K), w, b, st.profile, out_dt)
            y = y.view(*x.shape[:-1], N)
            return y if out_dt == "f32" else st.narrow(y)

        st.replace(m, forward)

    def fused(mods, out_dt):
        """Linears that read one input (q/k/v_proj) as one matmul over their stacked weights: each output
        column's K order is the profile's whatever N, so the bits are each linear's own (docs/arithmetic.md §4).
        The first module called on an input computes all outputs; its siblings called on the same input return
        theirs (each module is still called, so capture hooks see every output). Traced (torch.compile), each
        module computes its own rows."""
        if len({m.in_features for m in mods}) != 1 or len({m.bias is None for m in mods}) != 1:
            for m in mods:
                linear(m, out_dt)
            return
        W = torch.cat([m.weight.detach().to(torch.float32) for m in mods]).contiguous()
        B = None if mods[0].bias is None else torch.cat([m.bias.detach().to(torch.float32) for m in mods])
        st.weights[id(W)] = W  # held (and freed by unpatch) with the other float32 weights
        if B is not None:
            st.weights[id(B)] = B
        K = W.shape[1]
        cols, o = [], 0
        for m in mods:
            cols.append((o, m.out_features))
            o += m.out_features
        last = [None, None, None]  # [weakref to the input, its _version, the outputs]

        def one(i):
            o, N = cols[i]
            w = W[o:o + N]
            b = None if B is None else B[o:o + N]

            def forward(x):
                _dtype_of(x, st, "Linear input")
                if torch.compiler.is_compiling():
                    y = ops.eager("linear", st.wide(x).reshape(-1, K), w, b, st.profile, out_dt)
                    return st.narrow(y.view(*x.shape[:-1], N))
                ref, version, outs = last
                if ref is None or ref() is not x or x._version != version:
                    y = ops.eager("linear", st.wide(x).reshape(-1, K), W, B, st.profile, out_dt)
                    outs = []
                    for o2, N2 in cols:
                        t = torch.empty((y.shape[0], N2), dtype=st.dtype, device=y.device)
                        outs.append(t.copy_(y[:, o2:o2 + N2]).view(*x.shape[:-1], N2))  # exact narrowing
                    last[:] = [weakref.ref(x), x._version, outs]
                return outs[i]

            return forward

        for i, m in enumerate(mods):
            st.replace(m, one(i))

    def mlp(m):
        mods = (m.gate_proj, m.up_proj, m.down_proj)

        def forward(x):
            ws = [st.plain.get(id(p)) for p in mods]
            if torch.compiler.is_compiling() or None in ws or not _unobserved(*mods):
                g, u = m.gate_proj(x), m.up_proj(x)
                a = ops.eager("swiglu", st.wide(g), st.wide(u), st.dt)
                return m.down_proj(st.narrow(a))
            # nothing observes the three projections (no hook, not sharded): their outputs stay float32 on the
            # device, never narrowed to the model dtype and widened again (the same bits: both are exact)
            _dtype_of(x, st, "Linear input")
            (wg, bg), (wu, bu), (wd, bd) = ws
            x32 = st.wide(x).reshape(-1, wg.shape[1])
            g = ops.eager("linear", x32, wg, bg, st.profile, st.dt)
            u = ops.eager("linear", x32, wu, bu, st.profile, st.dt)
            y = ops.eager("linear", ops.eager("swiglu", g, u, st.dt), wd, bd, st.profile, st.dt)
            return st.narrow(y.view(*x.shape[:-1], wd.shape[0]))

        st.replace(m, forward)

    def layer(m):
        # transformers' decoder layer hands every keyword (attention_mask, position_ids, position_embeddings, the
        # cache: `cache` from 5.2x, `past_key_values` before) to self_attn: so does this one, whatever the version
        def forward(hidden_states, *args, **kwargs):
            if args:
                raise _err(f"{type(m).__name__} called with {len(args)} positional arguments after hidden_states "
                           "(transformers passes keywords)")
            h = m.input_layernorm(hidden_states)
            h, _ = m.self_attn(hidden_states=h, **kwargs)
            x2 = _residual(hidden_states, h, st)
            h = m.mlp(m.post_attention_layernorm(x2))
            return _residual(x2, h, st)

        st.replace(m, forward)

    cos, sin = st.tables

    def rotary(x, position_ids):
        if not torch.compiler.is_compiling() and position_ids.numel() and position_ids.device.type != "meta":
            lo, hi = int(position_ids.min()), int(position_ids.max())
            if lo < 0 or hi >= cos.shape[0]:
                raise _err(f"position {lo if lo < 0 else hi} outside the RoPE tables' 0…{cos.shape[0] - 1} "
                           "(patch(..., max_positions=N))")
        return cos[position_ids].to(x.dtype), sin[position_ids].to(x.dtype)

    for L in base.layers:
        norm(L.input_layernorm)
        norm(L.post_attention_layernorm)
        at = L.self_attn
        if hasattr(at, "q_norm"):
            norm(at.q_norm)
            norm(at.k_norm)
        fused([at.q_proj, at.k_proj, at.v_proj], st.dt)
        linear(at.o_proj, st.dt)
        for p in ("gate_proj", "up_proj", "down_proj"):
            linear(getattr(L.mlp, p), st.dt)
        mlp(L.mlp)
        layer(L)
        at._bitalign = st
        at.add_module("rotary_emb", RotaryOut())
        st.children.append(at)
    norm(base.norm)
    linear(model.lm_head, "f32")
    st.replace(base.rotary_emb, rotary)
    def log_softmax(rows):
        """The engine's log-softmax (docs/arithmetic.md §9) of float32 logits rows (T, V): what bitalign_capture's
        recorder takes for the log-probabilities of a patched model (its bitalign_log_softmax)."""
        return ops.eager("log_softmax", _f32(rows), st.profile)

    model.bitalign_log_softmax = log_softmax
    st.attn = cfg._attn_implementation_internal if hasattr(cfg, "_attn_implementation_internal") else None
    cfg._attn_implementation_internal = ATTN
    model._bitalign = st


def _tp_linear(m, st, w, b, out_dt):
    """A linear that bitalign.tp.shard made row-parallel (o_proj, down_proj) or vocab-parallel (lm_head) gets
    bitalign.tp's layer instead of ops.linear; returns whether it did."""
    lay = getattr(m, "_bitalign_tp", None)
    if lay is None:
        return False
    from . import tp

    fn = tp.patched_linear(m, lay, w, b, st.profile, out_dt)

    def forward(x):
        _dtype_of(x, st, "Linear input")
        y = fn(x.to(torch.float32))
        return y if out_dt == "f32" else y.to(st.dtype)

    st.replace(m, forward)
    return True


def _unobserved(*mods):
    """Nothing sees any of mods' outputs (no forward hook or pre-hook, own or global, and no recorder's wrapper:
    bitalign_capture.recorder.observed): calling their weights directly, skipping the modules, changes nothing
    anyone sees."""
    return not any(_observed(m) for m in mods)


def _observed(m):
    from bitalign_capture.recorder import observed

    return observed(m)


def _recording(model):
    from bitalign_capture.recorder import recording

    return recording(model)


def _dtype_of(x, st, what):
    if x.dtype != st.dtype:
        raise _err(f"{what} is {x.dtype}, the patched model computes {st.dtype}")


def _residual(a, b, st):
    return st.narrow(ops.eager("residual", st.wide(a), st.wide(b), st.dt))


def _restore(model, st):
    for m, old in reversed(st.forwards):
        if old is None:
            m.__dict__.pop("forward", None)
        else:
            m.forward = old
    st.forwards.clear()
    for at in st.children:
        at._modules.pop("rotary_emb", None)
    st.children.clear()
    for m in model.modules():
        m.__dict__.pop("_bitalign", None)
    model.__dict__.pop("bitalign_log_softmax", None)
    if st.attn is not None or getattr(model.config, "_attn_implementation_internal", None) == ATTN:
        model.config._attn_implementation_internal = st.attn
    st.weights.clear()
    st.plain.clear()
    st.wides.clear()
    st.tables = None


def unpatch(model):
    """Undoes patch(model): every forward, the attention implementation and the config as they were; frees the
    float32 weights and the RoPE tables."""
    st = getattr(model, "_bitalign", None)
    if st is None:
        raise _err(f"{type(model).__name__} is not patched")
    _restore(model, st)
    return model


def is_patched(model):
    return getattr(model, "_bitalign", None) is not None


# --- sampling in generate -----------------------------------------------------------------------------------------


def rows(prompt_mask, cur_len):
    """The sampling key's position for each row of a generate step: prompt_mask (B, P) the prompt's attention
    mask (left padding: zeros first), cur_len the length of generate's input_ids now (P + tokens drawn so far).

    Row b's last token is at position (real prompt tokens) + (cur_len - P) - 1; the token drawn is for the next
    position, as the engine's Sample(seq, pos) draws the token after pos (docs/arithmetic.md §10)."""
    m = torch.as_tensor(prompt_mask).to(torch.int64)
    if m.dim() != 2:
        raise _err(f"prompt attention mask must be (rows, prompt length), has shape {tuple(m.shape)}")
    B, P = m.shape
    if cur_len < P:
        raise _err(f"generate's input is {cur_len} tokens, shorter than the {P}-token prompt")
    if B and P:
        # right padding: a 0 after a 1 in some row
        after = m.cumsum(1) > 0
        if ((m == 0) & after).any():
            b = int(((m == 0) & after).any(1).nonzero()[0, 0])
            raise _err(f"prompt row {b} is right-padded: generate needs left padding (tokenizer padding_side='left')")
    real = m.sum(1)
    if (real == 0).any():
        raise _err(f"prompt row {int((real == 0).nonzero()[0, 0])} has no tokens")
    return real + (cur_len - P) - 1


try:
    from transformers import LogitsProcessor as _LogitsProcessor
except ImportError:  # transformers absent: Sampler is still a plain callable
    _LogitsProcessor = object


class Sampler(_LogitsProcessor):
    """A transformers LogitsProcessor that draws each row's next token with ops.sample keyed by (seed, sequence
    id, position), never by batch slot, and leaves only that token (score 0, every other -inf), so generate's
    greedy step (do_sample=False) takes it. temperature <= 0 is greedy (argmax, ties to the smallest index).

    seq_ids: the sequences' ids (default 0..B-1); prompt_mask: the prompt's attention mask (default: no padding).
    top_k (0: off) and top_p (1: off) cut the vocabulary first, in the order (logit/temperature desc, index
    asc) of docs/arithmetic.md §10, as the engine's SampleParams; top_p < 1 takes a host step per generated
    token (ops.restrict). `drawn` collects the tokens of every step ((B,) int32 tensors)."""

    def __init__(self, seed, temperature=0.0, seq_ids=None, prompt_mask=None, top_k=0, top_p=1.0):
        if not 0 <= int(seed) < 1 << 64:
            raise _err(f"seed {seed} is not an unsigned 64-bit integer")
        try:
            sampling.params(temperature, top_k, top_p)
        except ValueError as e:
            raise _err(str(e).replace("bitalign: sampling: ", "")) from None
        self.seed, self.temperature = int(seed), float(temperature)
        self.top_k, self.top_p = int(top_k), float(top_p)
        self.seq_ids = None if seq_ids is None else torch.as_tensor(list(seq_ids), dtype=torch.int64)
        self.prompt_mask = None if prompt_mask is None else torch.as_tensor(prompt_mask).cpu()
        self.drawn = []

    def keys(self, input_ids):
        """(seqs, pos) int64 (B,) for generate's input_ids (B, cur_len) now."""
        B, cur = input_ids.shape
        pm = self.prompt_mask if self.prompt_mask is not None else torch.ones((B, cur), dtype=torch.int64)
        if pm.shape[0] != B:
            raise _err(f"generate runs {B} rows, the prompt mask has {pm.shape[0]} (num_return_sequences and beam "
                       "search are not supported)")
        seqs = self.seq_ids if self.seq_ids is not None else torch.arange(B, dtype=torch.int64)
        if seqs.shape[0] != B:
            raise _err(f"generate runs {B} rows, {seqs.shape[0]} sequence ids given")
        return seqs, rows(pm, cur)

    def __call__(self, input_ids, scores):
        seqs, pos = self.keys(input_ids)
        dev = scores.device
        tok = ops.sample(_f32(scores), seqs.to(dev), pos.to(dev), self.temperature, self.seed, self.top_k, self.top_p)
        self.drawn.append(tok)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, tok.to(torch.int64)[:, None], 0.0)
        return out


def generate(model, input_ids, attention_mask=None, *, seed=0, temperature=0.0, seq_ids=None, top_k=0, top_p=1.0,
             **kwargs):
    """model.generate with Sampler: greedy (temperature <= 0) or seeded Gumbel-max keyed by (seed, seq, pos), after
    top_k (0: off) and top_p (1: off) in the engine's order (§10). input_ids must be left-padded; kwargs go to
    generate (max_new_tokens, eos_token_id, …). Sampling arguments of generate's own (do_sample, num_beams,
    num_return_sequences, logits_processor) are errors."""
    for k in ("do_sample", "num_beams", "num_return_sequences", "logits_processor"):
        if k in kwargs:
            raise _err(f"generate(..., {k}=…): bitalign.hf.generate samples itself (seed, temperature, top_k, top_p)")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    s = Sampler(seed, temperature, seq_ids, attention_mask, top_k, top_p)
    from transformers import LogitsProcessorList

    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, top_k=None,
                         top_p=None, temperature=None, logits_processor=LogitsProcessorList([s]), **kwargs)
    return out
