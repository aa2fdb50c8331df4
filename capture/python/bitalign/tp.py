"""Tensor parallelism with the engine's bits, over the user's own torch.distributed (NCCL, gloo, any backend).

The engine is bitwise equal at TP 1, 2, 4 and 8 because a row-parallel reduction's 8 fixed segments
(docs/arithmetic.md §3) fall on whole ranks: rank r of tp holds segments [r·G, (r+1)·G), G = 8/tp, computes
their subtree, and the all-reduce finishes the same tree over ranks (§12). NCCL's all_reduce adds in an order
of its own (ring, tree, NVLS: chosen by size and topology), so this module never reduces through the backend:

    partial = the rank's subtree (ops.linear_partial)        float32, unrounded, no bias
    parts   = all_gather(partial)                           (tp, M, N) in rank order: data moves, nothing is added
    out     = tree(parts) ⊕ bias, rounded (ops.linear_finish) the same on every rank, the same at every tp

The layers (x is this rank's input, w its weight shard in the engine's Megatron layout, engine/shard.go):

- row_parallel(x, w, bias, group): o_proj, down_proj (x and w hold the rank's K slice);
- row_parallel_sp(...): the same under sequence parallelism: the reduce-scatter becomes an all_to_all of the
  partials' row blocks (still no reduction) and the tree on each rank's own rows; gather_rows all-gathers them;
- column_parallel(x, w, bias): q/k/v, gate/up, the LM head (no exchange; gather_columns when the full output
  is wanted, an exact concatenation);
- the vocab-parallel log-softmax of §9 (log_softmax, logprobs): the ranks' maxima, Σ exp subtrees and target
  terms are all-gathered and combined by the same trees on every rank.

On CUDA tensors these run bitalign.ops (the PTX); on CPU tensors bitalign.cpu, the exact CPU twins (slow; what
the gloo tests run). shard(model, group) lays a Hugging Face Llama, Qwen2 or Qwen3 out over the ranks;
bitalign.hf.patch(model) then computes each rank's share with these layers (docs/kernels-torch.md, "Tensor
parallelism").
"""

import torch

from . import cpu as _cpu

# the tree over ranks (§12, T(0, n)) and the max tree: plain torch additions and selections, the same bits on
# every device (each a single IEEE operation per element)
tree = _cpu.tree
max_tree = _cpu.max_tree


def _dist():
    import torch.distributed as dist

    return dist


def _kernels(t):
    """bitalign.ops for CUDA (and meta) tensors, bitalign.cpu for CPU tensors: the same functions, the same bits."""
    if t.device.type == "cpu":
        return _cpu
    from . import ops

    return ops


def size(group=None):
    """The group's tensor-parallel degree (1 without torch.distributed)."""
    dist = _dist()
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def rank(group=None):
    dist = _dist()
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def _degree(group, op):
    tp = size(group)
    if tp not in (1, 2, 4, 8):
        raise ValueError(f"bitalign.tp.{op}: tensor-parallel degree {tp} not in {{1, 2, 4, 8}} (the 8-segment rule "
                         "puts whole segments on each rank only then)")
    return tp


# --- the exchange: data only ---------------------------------------------------------------------------------------


def gather(x, group=None):
    """(tp, *x.shape): every rank's x in rank order (all_gather_into_tensor; no reduction, so the backend's order
    cannot matter). tp = 1: x[None]."""
    tp = size(group)
    if tp == 1:
        return x[None]
    x = x.contiguous()
    out = x.new_empty((tp, *x.shape))
    dist = _dist()
    try:
        dist.all_gather_into_tensor(out, x, group=group)
    except (RuntimeError, NotImplementedError, AttributeError):  # a backend without the fused gather
        dist.all_gather(list(out.unbind(0)), x, group=group)
    return out


def _scatter_rows(parts, group):
    """parts (M, N) → (tp, M/tp, N): row block r of every rank's parts, rank order, on rank r (all_to_all)."""
    tp = size(group)
    M = parts.shape[0]
    if tp == 1:
        return parts[None]
    out = torch.empty_like(parts).view(tp, M // tp, *parts.shape[1:])
    dist = _dist()
    try:
        dist.all_to_all_single(out, parts.contiguous(), group=group)
    except (RuntimeError, NotImplementedError):  # a backend without all_to_all: gather everything, keep our rows
        r = rank(group)
        return gather(parts, group)[:, r * (M // tp):(r + 1) * (M // tp)].contiguous()
    return out


# --- the layers ----------------------------------------------------------------------------------------------------


def row_parallel(x, w, bias=None, group=None, profile="canonical", out_dtype="bf16"):
    """out (M, N) = x·wᵀ + bias over the group, with the engine's bits at every tp: x (M, K/tp) and w (N, K/tp) are
    this rank's K slice (rank r: columns [r·K/tp, (r+1)·K/tp)), bias (N) replicated (added once, after the tree).
    Every rank returns the same bits, those of ops.linear on the whole x and w."""
    tp = _degree(group, "row_parallel")
    k = _kernels(x)
    parts = gather(k.linear_partial(x, w, tp, profile), group)
    return k.linear_finish(parts, bias, profile, out_dtype)


def row_parallel_sp(x, w, bias=None, group=None, profile="canonical", out_dtype="bf16"):
    """row_parallel under sequence parallelism: returns this rank's rows [r·M/tp, (r+1)·M/tp) of the output
    (M % tp == 0), what Megatron's reduce-scatter gives, with the same bits as those rows of row_parallel: the
    row blocks of the partials travel by all_to_all (no reduction) and each rank adds its own block's tp partials
    by the tree."""
    tp = _degree(group, "row_parallel_sp")
    if x.shape[0] % tp:
        raise ValueError(f"bitalign.tp.row_parallel_sp: {x.shape[0]} rows do not split over {tp} ranks (pad the "
                         "sequence to a multiple of tp, as Megatron's sequence parallelism does)")
    k = _kernels(x)
    return k.linear_finish(_scatter_rows(k.linear_partial(x, w, tp, profile), group), bias, profile, out_dtype)


def gather_rows(x, group=None):
    """(tp·M, ...) the ranks' row blocks x (M, ...) concatenated in rank order (sequence parallelism's all-gather)."""
    g = gather(x, group)
    return g.reshape(g.shape[0] * g.shape[1], *g.shape[2:])


def gather_columns(y, group=None):
    """(..., tp·N) the ranks' column shards y (..., N) side by side in rank order (a column-parallel output made
    whole; exact)."""
    return torch.cat(list(gather(y, group).unbind(0)), dim=-1)


def column_parallel(x, w, bias=None, group=None, profile="canonical", out_dtype="bf16", gather_output=False):
    """out (M, N/tp) = x·wᵀ + bias of this rank's output rows w (N/tp, K), bias (N/tp): each output is computed
    whole on one rank, so no partial crosses ranks. gather_output: the full (M, N) on every rank."""
    y = _kernels(x).linear(x, w, bias, profile, out_dtype)
    return gather_columns(y, group) if gather_output else y


# --- the vocab-parallel log-softmax (§9) -----------------------------------------------------------------------------


def _stats(logits, group, profile):
    """The rows' max m and Σ Exp(x ⊖ m) S over the whole vocabulary, (T) each, the same bits on every rank."""
    tp = _degree(group, "log_softmax")
    if logits.dim() != 2:
        raise ValueError(f"bitalign.tp: logits must be (T, V/tp), have shape {tuple(logits.shape)}")
    k = _kernels(logits)
    m = max_tree(gather(k.log_softmax_max(logits), group))  # then a zero max is +0 (max_tree does it)
    parts = gather(k.log_softmax_sum(logits, m, tp, profile), group)
    S = tree(parts) if profile != "standard" else _cpu._seq(parts)
    return k, m, S


def log_softmax(logits, group=None, profile="canonical"):
    """(T, V/tp) the log-softmax of this rank's vocab shard logits (T, V/tp) (rank r: columns [r·V/tp, (r+1)·V/tp)),
    bitwise the columns of ops.log_softmax over the whole row."""
    k, m, S = _stats(logits, group, profile)
    return k.log_softmax_finish(logits, m, S)


def logprobs(logits, targets, group=None, profile="canonical"):
    """(T) log p(targets[t]) from this rank's vocab shard logits (T, V/tp); targets (T) int32 global ids. Every
    rank returns the same bits, those of ops.logprobs over the whole rows."""
    V = logits.shape[1] * size(group)
    if targets.numel() and not torch.compiler.is_compiling() and targets.device.type != "meta":
        bad = (targets < 0) | (targets >= V)
        if bool(bad.any()):
            t = int(bad.nonzero()[0, 0])
            raise ValueError(f"bitalign.tp.logprobs: target {int(targets[t])} at row {t} outside the vocabulary "
                             f"[0, {V})")
    k, m, S = _stats(logits, group, profile)
    d = tree(gather(k.logprob_target(logits, targets, m, rank(group) * logits.shape[1]), group))  # one owner: exact
    return k.logprob_finish(d, S)


# --- the control: what a Megatron-style model does today ------------------------------------------------------------


def row_parallel_allreduce(x, w, bias=None, group=None):
    """The usual row-parallel linear, for comparison: the rank's x·wᵀ in the model dtype (torch's matmul), summed
    over ranks by the backend's all_reduce in that dtype, then the bias. Its bits depend on tp, the backend's
    order and the kernel torch picks (the TP divergence bitalign's layers remove)."""
    y = torch.nn.functional.linear(x, w)
    if size(group) > 1:
        _dist().all_reduce(y, group=group)
    return y if bias is None else y + bias


# --- a Hugging Face model over the ranks (engine/shard.go's Megatron layout) ----------------------------------------


class Layout:
    """One rank's slice of the model, as the engine's layout (engine/shard.go): query heads, kv heads (replicated
    over tp/nkv consecutive ranks when tp exceeds them), intermediate columns and vocabulary rows."""

    def __init__(self, heads, kv_heads, intermediate, vocab, tp, rank, group=None, gather_logits=True):
        self.tp, self.rank, self.group, self.gather_logits = tp, rank, group, gather_logits
        self.q_heads = heads // tp
        self.q_head0 = rank * self.q_heads
        if kv_heads >= tp:
            self.kv_heads, self.kv_head0, self.kv_writer = kv_heads // tp, rank * (kv_heads // tp), True
        else:
            rep = tp // kv_heads
            self.kv_heads, self.kv_head0, self.kv_writer = 1, rank // rep, rank % rep == 0
        self.i_local = intermediate // tp
        self.i0 = rank * self.i_local
        self.v_local = vocab // tp
        self.v0 = rank * self.v_local

    def __repr__(self):
        return (f"Layout(tp={self.tp}, rank={self.rank}, q_heads={self.q_head0}+{self.q_heads}, "
                f"kv_heads={self.kv_head0}+{self.kv_heads}, intermediate={self.i0}+{self.i_local}, "
                f"vocab={self.v0}+{self.v_local})")


def check(cfg, tp):
    """A ValueError unless the config splits over tp ranks (engine.checkTP's rules and words)."""
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    if tp not in (1, 2, 4, 8):
        raise ValueError(f"bitalign.tp: TP {tp}: must be 1, 2, 4 or 8")
    if nh % tp:
        raise ValueError(f"bitalign.tp: TP {tp} does not divide {nh} attention heads")
    if (nkv >= tp and nkv % tp) or (nkv < tp and tp % nkv):
        raise ValueError(f"bitalign.tp: TP {tp} and {nkv} kv heads: one must divide the other")
    if cfg.intermediate_size % tp:
        raise ValueError(f"bitalign.tp: TP {tp} does not divide intermediate size {cfg.intermediate_size}")
    if cfg.vocab_size % tp:
        raise ValueError(f"bitalign.tp: TP {tp} does not divide vocab size {cfg.vocab_size}")


def _keep_rows(m, r0, n):
    """Linear m keeps output rows [r0, r0 + n) of its weight (and bias): a column-parallel shard."""
    m.weight = torch.nn.Parameter(m.weight.detach()[r0:r0 + n].clone(), requires_grad=m.weight.requires_grad)
    if m.bias is not None:
        m.bias = torch.nn.Parameter(m.bias.detach()[r0:r0 + n].clone(), requires_grad=m.bias.requires_grad)
    m.out_features = n


def _keep_cols(m, c0, n):
    """Linear m keeps input columns [c0, c0 + n) of its weight: a row-parallel shard (the bias stays whole: it is
    added once, after the ranks' partials are summed)."""
    m.weight = torch.nn.Parameter(m.weight.detach()[:, c0:c0 + n].clone(), requires_grad=m.weight.requires_grad)
    m.in_features = n


def _mark(m, role, lay, forward):
    m._bitalign_tp = (role, lay)
    m.forward = forward


def shard(model, group=None, gather_logits=True, *, tp=None, rank=None):
    """Lays a Hugging Face LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM out over the ranks of group (the
    default: the world), as the engine does: q/k/v column-parallel by heads (kv heads replicated over tp/nkv
    ranks when fewer than tp), o_proj row-parallel over the same columns, gate/up column-parallel by intermediate
    rows, down_proj row-parallel over them, the LM head vocab-parallel (a tied head gets its own rows; the
    embedding stays whole), norms and embedding replicated. Each rank keeps only its shard (the parameters are
    replaced; shard is not undone by unpatch). Returns model.

    Unpatched, the sharded model runs the usual Megatron arithmetic (row_parallel_allreduce: torch's matmul and
    the backend's all_reduce, the TP divergence); bitalign.hf.patch(model) afterwards runs row_parallel and the
    kernels instead, with TP 1's bits. gather_logits: the logits are all-gathered to the whole vocabulary on
    every rank (what generate and the recorder's log-probabilities need); False leaves each rank its vocab shard
    for logprobs(..., group). tp and rank: the layout without a process group (planning, meta-device models; the
    layers need the group when they run)."""
    from . import hf

    name = type(model).__name__
    if hf.is_patched(model):
        raise ValueError(f"bitalign.tp.shard: {name} is patched: shard first, then patch (the patch copies the "
                         "rank's weights)")
    if getattr(model, "_bitalign_tp", None) is not None:
        raise ValueError(f"bitalign.tp.shard: {name} is already sharded ({model._bitalign_tp})")
    _, _, cls, act_types = hf._classes(model)
    hf._walk(model, cls, act_types)  # every module one the engine computes, else a ValueError naming it
    tp = size(group) if tp is None else int(tp)
    r = globals()["rank"](group) if rank is None else int(rank)
    if not 0 <= r < tp:
        raise ValueError(f"bitalign.tp.shard: rank {r} outside TP {tp}")
    cfg = model.config
    check(cfg, tp)
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
    lay = Layout(nh, nkv, cfg.intermediate_size, cfg.vocab_size, tp, r, group, gather_logits)
    q0, qn = lay.q_head0 * hd, lay.q_heads * hd
    k0, kn = lay.kv_head0 * hd, lay.kv_heads * hd

    def row_forward(m):
        return lambda x: row_parallel_allreduce(x, m.weight, m.bias, group)

    for L in model.model.layers:
        at, mlp = L.self_attn, L.mlp
        _keep_rows(at.q_proj, q0, qn)
        _keep_rows(at.k_proj, k0, kn)
        _keep_rows(at.v_proj, k0, kn)
        _keep_cols(at.o_proj, q0, qn)
        _mark(at.o_proj, "row", lay, row_forward(at.o_proj))
        at.num_key_value_groups = lay.q_heads // lay.kv_heads  # repeat_kv of transformers' own attention
        _keep_rows(mlp.gate_proj, lay.i0, lay.i_local)
        _keep_rows(mlp.up_proj, lay.i0, lay.i_local)
        _keep_cols(mlp.down_proj, lay.i0, lay.i_local)
        _mark(mlp.down_proj, "row", lay, row_forward(mlp.down_proj))
    head = model.lm_head
    _keep_rows(head, lay.v0, lay.v_local)  # a tied head's weight is the embedding's: the copy unties it

    def head_forward(x):
        y = torch.nn.functional.linear(x, head.weight)
        return gather_columns(y, group) if gather_logits else y

    _mark(head, "vocab", lay, head_forward)
    model._bitalign_tp = lay
    return model


def layout(model):
    """The Layout shard gave model, or None."""
    return getattr(model, "_bitalign_tp", None)


def patched_linear(m, mark, w, b, profile, out_dtype):
    """The forward bitalign.hf.patch gives a linear that shard marked: float32 x (..., K_local) → (..., N) through
    row_parallel (o_proj, down_proj) or column_parallel (the vocab-parallel LM head, all-gathered unless
    gather_logits is False). w and b are the patch's float32 copies of the rank's shard."""
    role, lay = mark
    N, K = w.shape

    def forward(x):
        x2 = x.reshape(-1, K).contiguous()
        if role == "row":
            y = row_parallel(x2, w, b, lay.group, profile, out_dtype)
        else:
            y = column_parallel(x2, w, b, lay.group, profile, out_dtype, gather_output=lay.gather_logits)
        return y.view(*x.shape[:-1], y.shape[-1])

    return forward
