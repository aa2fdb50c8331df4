"""Recording a PyTorch model's forward passes into a bitalign capture by watching its modules' calls (_Observer).

    with bitalign_capture.record(model, "trainer.arrow", side="trainer", step=0) as rec:
        model(input_ids=ids, attention_mask=mask)

Every forward of `model` inside the block is recorded: the token ids, the outputs of the modules the name map
knows (under canonical op names, split per sequence and position: see layout.py), the logits as float32 and the
next-token log-probabilities (log_softmax in float32 of the logits, then the next token's entry).

By default (background=True) no hook waits for the GPU or the disk (pipeline.py): a full op's rows are copied
into pinned host memory on a side stream and written by a writer thread; the file is byte for byte the one
background=False writes (every tensor copied to the CPU and written from its hook). A fingerprinted op's hook
only keeps its output (held.py): at the forward's end all of them are fingerprinted in one launch and written as
one record batch, in both modes.
"""

import fnmatch
import functools
import json
import os
import warnings

import numpy as np

from . import dtypes, names
from . import fingerprints as fingerprint_mod
from . import held as held_mod
from . import layout as layout_mod
from . import pipeline as pipeline_mod
from . import writer as writer_mod
from .logprobs import Pending


def record(model, path, side, **kwargs):
    """A Recorder for model writing to path (a file, or a directory of rank files under tensor parallelism).

    Use it as a context manager. Keyword arguments are Recorder's.
    """
    return Recorder(model, path, side, **kwargs)


class Recorder(writer_mod.Closing):
    """Hooks on model that write its forwards to a capture.

    model: a torch.nn.Module whose forward takes input_ids (or inputs_embeds) and optionally attention_mask,
        position_ids (or positions), cache_position, cu_seqlens: a Hugging Face causal LM or a vLLM-style model.
    path: the capture file; under tensor parallelism (tp > 1) a directory that gets one rankN.arrow per rank.
    side: "trainer", "sampler", ... (Meta.side). step: Meta.step and every tensor's step (set_step changes it).
    name_map: {module path regex: op template or names.Take or a list of them} for models the built-in map
        does not know (it replaces the built-in rules); rules: a full list of names.Rule instead.
    config: a names.ModelConfig (default: from model.config). It sizes ops for TP shards and fused splits.
    ops: glob patterns of op names to record (default all), e.g. ["tokens", "layers.0.*", "logits", "logprobs"].
    mode: "full" (default) records each op's rows; "fingerprint" records each op as one 64-bit fingerprint per
        token row (role "fp.out", computed on the tensor's device: fingerprints.py), and full_ops (glob patterns)
        names the ops also recorded in full beside their fingerprints. tokens, logprobs and sample, one value
        per token, stay full. Fingerprints are of full rows: tp > 1 is refused in fingerprint mode.
    record_inputs: also record each mapped module's first input (role "in").
    logprobs: compute and record next-token log-probabilities from the logits.
    log_softmax: the function (float32 logits rows (T, V) → their log-softmax) the log-probabilities come from;
        default the model's bitalign_log_softmax when it has one (a model patched by bitalign.hf: the engine's
        log-softmax, docs/arithmetic.md §9, so that `bitalign replay` reproduces the captured logprobs), else
        torch.log_softmax in float32.
    record_samples: record op "sample" at the last position of each forward's sequences = the token the next
        forward of that sequence brings (or sampled() gives): a sampler's draws, for generate-style loops
        (prefill, then one token per forward). Leave it off on a trainer, whose "sample" is what the sampling
        rule would draw, not the next input token.
    tp, rank, group: the tensor-parallel layout; default from torch.distributed when it is initialised
        (group's size and rank, or the world's), else 1 and 0.
    seq_ids: the sequence id of each batch row of every forward with that many rows (default 0..B-1);
        batch(seq_ids=...) overrides it for a forward and the forwards that continue its sequences.
    background: write from a writer thread (default): hooks queue their tensors and return, GPU rows are
        copied on a side stream into pinned buffers, fingerprints go to the host once per forward; an error of
        that thread is raised by the next hook or by close, naming the file; in fingerprint mode the thread
        writes a forward's tensors after the forward (Pipeline.hold). False: each tensor is copied to the CPU and
        written from its hook (the same bytes; slower).
    staging_bytes: background's bound on tensor bytes copied and not yet written (default 1 GiB; a hook that
        would exceed it waits for the writer thread).
    hold_bytes: fingerprint mode's bound on op outputs held (kept alive on their device, not copied) until they
        are fingerprinted together (past it they are fingerprinted within the forward, and their fingerprints
        written with the rest at its end). Default: 1 GiB off a GPU; on one, an eighth of its memory free when
        recording starts, from 1 to 8 GiB. An output
        changed in place after its module returned it (hooks included) is then an error naming the op.
    overwrite: replace an existing capture file. kernel_profile, seed, batch_size, extra, created: Meta fields.
    final_tokens: {seq id: token} (or pairs) = the token after each sequence's last recorded position, known
        up front to a trainer (the last token of its sequences, which is only a target). At close it gives the
        last position's log-probability, and it goes into Meta.extra.final_tokens ([[step, seq, token], ...], as
        the engine writes it) so that `bitalign replay` has the target too.
    """

    def __init__(
        self,
        model,
        path,
        side,
        *,
        step=0,
        name_map=None,
        rules=None,
        config=None,
        ops=None,
        mode="full",
        full_ops=None,
        record_inputs=False,
        logprobs=True,
        log_softmax=None,
        record_samples=False,
        tp=None,
        rank=None,
        group=None,
        seq_ids=None,
        overwrite=False,
        kernel_profile="",
        seed=0,
        batch_size=0,
        extra=None,
        created=None,
        final_tokens=None,
        background=True,
        staging_bytes=pipeline_mod.STAGING_BYTES,
        hold_bytes=None,
    ):
        self.model = model
        self.path = os.fspath(path)
        self.side = side
        self.step = int(step)
        self.ops = list(ops) if ops else None
        if mode not in ("full", "fingerprint") or (full_ops and mode != "fingerprint"):
            raise ValueError(f"bitalign_capture: mode {mode!r} (want 'full' or 'fingerprint'; full_ops needs 'fingerprint')")
        self.mode, self.full_ops = mode, list(full_ops or [])
        self.record_inputs = record_inputs
        self.logprobs = logprobs
        self.log_softmax = log_softmax
        self.record_samples = record_samples
        self.seq_ids = None if seq_ids is None else [int(s) for s in seq_ids]
        self.overwrite = overwrite
        self.background = bool(background)
        self.staging_bytes = int(staging_bytes)
        self.hold_bytes = None if hold_bytes is None else int(hold_bytes)
        self.meta_args = dict(kernel_profile=kernel_profile, seed=seed, batch_size=batch_size, created=created)
        self.extra = extra
        ft = final_tokens.items() if isinstance(final_tokens, dict) else (final_tokens or [])
        self.final_tokens = {int(s): int(t) for s, t in ft}

        hf_cfg = getattr(model, "config", None)
        if isinstance(config, names.ModelConfig):
            self.cfg = config
        elif config is not None:
            self.cfg = names.ModelConfig.from_hf(config)
        elif hf_cfg is not None:
            self.cfg = names.ModelConfig.from_hf(hf_cfg)
        else:
            self.cfg = names.ModelConfig(architecture="", layers=0)
        self._hf_cfg = hf_cfg if config is None or not isinstance(config, names.ModelConfig) else None
        if rules is not None:
            self.rules = tuple(rules)
        elif name_map is not None:
            self.rules = names.user_rules(name_map)
        else:
            self.rules = names.HF_RULES

        self.tp, self.rank = _parallel(tp, rank, group)
        self.file = writer_mod.rank_path(self.path, self.rank) if self.tp > 1 else self.path
        if self.mode == "fingerprint" and self.tp > 1:
            raise ValueError(f"bitalign_capture: {self.path}: fingerprint mode needs full rows, not TP shards (tp {self.tp})")

        self._index = {}  # op -> execution index, from the module tree when the hooks are attached
        self._w = None
        self._pipe = None  # background: the writer thread's queue
        self._stager = self._held = None
        self._handles = []
        self._layout = None
        self._last_layout = None
        self._next = {}
        self._seen = set()
        self._depth = 0
        self._pending = Pending()
        self._idx = {}
        self._sticky = None  # (seq ids from batch(), {seq: position after its last token}) while forwards continue
        self._heads_first = {}  # layer op suffix -> its 4-D tensors are [B, heads, S, head_dim]
        self._suffix = {}  # op -> its layer op suffix (names.split_layer_op, once per op)
        self._full = {}  # op -> full_ops names it (fingerprint mode)
        self._info = {}  # (op, role) -> _op_info's (recorded, fingerprinted only, fingerprint role)
        self._warned = set()
        self.forwards = 0

    # ----- lifecycle

    def __enter__(self):
        self.start()
        return self

    def start(self):
        """Creates the (temporary) capture file and starts watching the model."""
        if self._w is not None:
            return
        if self.tp > 1:
            os.makedirs(self.path, exist_ok=True)
        self._w = writer_mod.Writer(self.file, self._meta(), overwrite=self.overwrite)
        try:
            if self.background:
                self._stager = pipeline_mod.Stager()
                self._pipe = pipeline_mod.Pipeline(self._w, staging_bytes=self.staging_bytes)
            put = self._w.emit if self._pipe is None else self._pipe.put
            p = next(self.model.parameters(), None)
            bound = self.hold_bytes
            if bound is None:
                bound = held_mod.default_bound(None if p is None else p.device)
            self._held = held_mod.Held(self._w, put, self._stager, bound)
            if self.mode == "fingerprint":
                if p is not None:
                    fingerprint_mod.backend(p.device)  # loads the kernel now, not in the first forward
            self._attach()
        except BaseException:
            self.abort()
            raise

    def close(self):
        """Stops watching the model and publishes the capture. Log-probabilities still waiting for a next token
        (the last position of each sequence) get it from final_tokens, or are dropped."""
        self._detach()
        if self._w is not None:
            try:
                for s, t in sorted(self.final_tokens.items()):
                    got = self._pending.take(s, t)
                    if got is not None and self._want("logprobs"):
                        self._put("logprobs", np.array([got[1]], dtype=np.float32), "f32", s, got[0])
                self._held.flush()
                if self._pipe is not None:
                    self._w.end_writes()
                    self._pipe.close()
            except BaseException:
                self.abort()
                raise
        self._pending.clear()
        if self._w is not None:
            self._w.close()

    def abort(self):
        """Stops watching the model and discards the capture."""
        self._detach()
        self._pending.clear()
        if self._held is not None:
            self._held.clear()
        if self._pipe is not None:
            self._pipe.abort()
        if self._w is not None:
            self._w.abort()

    def flush(self):
        """Waits until every tensor recorded so far is in the file (background=True; the file still appears
        under its name only at close). Raises the writer thread's error naming the file."""
        if self._held is not None:
            self._held.flush()
        if self._pipe is not None:
            self._pipe.drain()

    @property
    def staged_peak(self):
        """The most tensor bytes the background writer held copied and not yet written (0 without it)."""
        return 0 if self._pipe is None else self._pipe.peak

    @property
    def held_peak(self):
        """The most op-output bytes fingerprint mode held at once before fingerprinting them."""
        return 0 if self._held is None else self._held.peak

    @property
    def written(self):
        """Tensors written so far (by the writer thread: those queued may still be on their way)."""
        return 0 if self._w is None else self._w.n

    def set_step(self, step):
        """The step recorded with the next tensors (one capture can hold several steps)."""
        self.step = int(step)

    def batch(self, *, seq_ids=None, cu_seqlens=None, position_ids=None, record_mask=None, attention_mask=None):
        """Overrides what the next forward's inputs say about its tokens.

        seq_ids: the sequence id of each row (padded) or packed sequence. They hold for the next forward and
        for every forward after it that continues those sequences (each one's first position is one past its
        last position in the forward before: generate's decode steps), until batch() gives others or a forward
        does not continue them (which then gets the default ids). cu_seqlens: packed sequence boundaries (when
        the model gets them some other way than a cu_seqlens keyword). record_mask (B, S): False leaves a token
        out of the capture. attention_mask / position_ids: as the model's keywords. All but seq_ids are for the
        next forward only.
        """
        for k, v in (
            ("seq_ids", seq_ids),
            ("cu_seqlens", cu_seqlens),
            ("position_ids", position_ids),
            ("record_mask", record_mask),
            ("attention_mask", attention_mask),
        ):
            if v is not None:
                self._next[k] = v

    def sampled(self, seq_ids, tokens):
        """Tells the recorder which token each sequence sampled after its last forward (e.g. the last token
        generate returns, which is never fed back): records its log-probability at the last position."""
        for s, t in zip(_list(seq_ids), _list(tokens)):
            got = self._pending.take(s, t)
            if got is not None:
                self._next_known(s, got[0], got[1], t)

    def _next_known(self, seq, pos, lp, token):
        if self._want("logprobs"):
            self._put("logprobs", np.array([lp], dtype=np.float32), "f32", seq, pos)
        if self.record_samples and self._want("sample"):
            self._put("sample", np.array([token], dtype=np.int32), "i32", seq, pos)

    def record_op(self, op, x, *, role="out"):
        """Records x ([B, S, F], [N, F] or [B, k, F] for the last k tokens) under op, with the token layout
        of the forward in progress (or the last one): for ops no module hook sees."""
        lay = self._layout or self._last_layout
        if lay is None:
            raise RuntimeError("bitalign_capture: record_op outside a recorded forward")
        self._tensor(op, role, x, lay)

    # ----- hooks

    def _meta(self):
        model = {"architecture": self.cfg.architecture}
        if self._hf_cfg is not None and hasattr(self._hf_cfg, "to_json_string"):
            model["config"] = json.loads(self._hf_cfg.to_json_string(use_diff=False))
        extra = {"dtype": self._model_dtype()}
        if self.final_tokens:
            extra["final_tokens"] = [[self.step, s, t] for s, t in sorted(self.final_tokens.items())]
        if self.extra:
            extra.update(self.extra)
        producer = f"bitalign_capture {writer_mod.VERSION} (torch {_torch_version()})"
        return writer_mod.make_meta(
            self.side,
            model=model,
            tp=self.tp,
            rank=self.rank,
            step=self.step,
            extra=extra,
            producer=producer,
            **self.meta_args,
        )

    def _model_dtype(self):
        for p in self.model.parameters():
            if p.is_floating_point():
                try:
                    return dtypes.from_torch(p.dtype)
                except ValueError:
                    return str(p.dtype)
        return ""

    def _attach(self):
        mods = dict(self.model.named_modules())  # registration order
        resolved = names.resolve([p for p in mods if p], self.rules, self.cfg)
        if not resolved:
            raise ValueError(
                "bitalign_capture: no module of the model matches the name map (pass name_map for this model)"
            )
        self._index = names.op_index(resolved, self.cfg.layers)
        if self.rules is names.HF_RULES:
            own = [p for p, m in mods.items() if p and next(m.parameters(recurse=False), None) is not None]
            missed = names.unmapped_modules(own, resolved)
            if missed:
                self._warn(
                    "unmapped",
                    f"modules the built-in name map does not know, not recorded: {names.describe_paths(missed)} "
                    "(a block structure it does not cover; pass name_map to record them under your own names)",
                )
        for path, takes in resolved:
            m = mods[path]
            sel = [(t, n) for t, n in takes if t.source.startswith("select.")]
            if sel:
                self._wrap_select(path, m, sel)
            # only what something records is watched (the ops filter is fixed for the recording)
            wanted = lambda n, role="out": self._info_of(n, role)[0]  # noqa: E731
            pre = [(t, n) for t, n in takes if t.source in ("in", "residual") and wanted(n)]
            post = [(t, n) for t, n in takes if (t.source.startswith("out") or t.source == "residual") and wanted(n)]
            in_name = next((n for t, n in takes if t.source.startswith("out")), None)
            in_name = in_name if self.record_inputs and in_name and wanted(in_name, "in") else None
            if pre or in_name or post:
                self._handles.append(_Observer(self, m, pre, in_name, post, self._lean_tags(pre, in_name, post)))
        self._handles.append(self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True, prepend=True))
        self._handles.append(self.model.register_forward_hook(self._model_post, always_call=True))

    def _wrap_select(self, path, module, takes):
        """Records what the expert selection of a fused MoE module returns (Take source "select.N"): vLLM's
        FusedMoE routes inside, through router.select_experts(hidden_states, router_logits) -> (topk_weights,
        topk_ids) (runner.router, or the module's own select_experts in some versions), a method the recorder
        wraps on that object for as long as it records. A module without one (transformers' experts, which get
        the ids from the router module) is left alone."""
        owner = None
        for cand in (getattr(getattr(module, "runner", None), "router", None), getattr(module, "router", None), module):
            if cand is not None and callable(getattr(cand, "select_experts", None)):
                owner = cand
                break
        if owner is None:
            if "fusedmoe" in type(module).__name__.lower():
                self._warn(
                    f"select:{path}",
                    f"{path}: no select_experts to wrap: the expert ids and weights are not recorded "
                    "(record them with record_op)",
                )
            return
        inner = owner.select_experts
        rec = self

        @functools.wraps(inner)
        def select_experts(*args, **kwargs):
            out = inner(*args, **kwargs)
            if rec._layout is not None and isinstance(out, (tuple, list)):
                for take, name in takes:
                    i = int(take.source.split(".")[1])
                    if i < len(out):
                        rec._tensor(name, "out", out[i], rec._layout, take.split, take.dtype)
            return out

        had = "select_experts" in vars(owner)
        owner.select_experts = select_experts

        class _Restore:
            def remove(self):
                if had:
                    owner.select_experts = inner
                else:
                    del owner.select_experts

        self._handles.append(_Restore())

    def _detach(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._layout = None
        self._depth = 0

    def _model_pre(self, module, args, kwargs):
        self._depth += 1
        if self._depth > 1:
            return
        if self._pipe is not None and self.mode == "fingerprint":
            # a fingerprint forward's writing (a few MB) waits for its end: the writer thread's pyarrow work
            # retakes the GIL the launching thread needs (docs/benchmarks.md), so mid-forward it costs the forward
            # about what writing inline would; after it, it runs while the caller syncs or goes on
            self._pipe.hold()
        nxt, self._next = self._next, {}
        get = lambda k, i=None: nxt.get(k, kwargs.get(k, args[i] if i is not None and len(args) > i else None))
        ids = get("input_ids", 0)
        if ids is not None and not _is_tensor(ids):
            ids = None
        if ids is not None:
            shape = tuple(ids.shape)
        else:
            emb = kwargs.get("inputs_embeds")
            if emb is None:
                self._warn("noinput", "a forward without input_ids or inputs_embeds: not recorded")
                return
            shape = tuple(emb.shape[:-1])
        flat = ids is not None and ids.dim() == 1
        # positional arguments: transformers' forward(input_ids, attention_mask, position_ids, ...);
        # vLLM's forward(input_ids, positions, ...) with flat (N,) ids
        mask = get("attention_mask", None if flat else 1)
        pos_ids = get("position_ids", None if flat else 2)
        if pos_ids is None:
            pos_ids = kwargs.get("positions", args[1] if flat and len(args) > 1 else None)
        rows = shape[0] if len(shape) == 2 else 1
        default = self.seq_ids if self.seq_ids is not None and len(self.seq_ids) == rows else None
        build = functools.partial(
            layout_mod.build,
            shape,
            tokens=_np(ids),
            attention_mask=_np(mask),
            position_ids=_np(pos_ids),
            cache_position=_np(get("cache_position")),
            cu_seqlens=_np(get("cu_seqlens")),
            record_mask=_np(nxt.get("record_mask")),
        )
        if nxt.get("seq_ids") is not None:
            lay = build(seq_ids=_np(nxt["seq_ids"]))
            self._sticky = (_np(nxt["seq_ids"]), _ends(lay))
        else:
            lay = self._continued(build) or build(seq_ids=_np(default))
        self._layout = self._last_layout = lay
        self._seen = set()
        if lay.tokens is None:
            return
        for s in lay.segments:
            tok = lay.tokens[s.start : s.start + s.n]
            if self._want("tokens"):
                self._put("tokens", tok.astype(np.int32), "i32", s.seq, s.pos)
            got = self._pending.resolve(s.seq, s.pos, tok[0])
            if got is not None:
                self._next_known(s.seq, got[0], got[1], tok[0])

    def _continued(self, build):
        """The layout of this forward under batch()'s seq ids if it continues their sequences, else None."""
        if self._sticky is None:
            return None
        ids, ends = self._sticky
        try:
            lay = build(seq_ids=ids)
        except ValueError:  # another number of rows or sequences: not a continuation
            lay = None
        now = {} if lay is None else _starts(lay)
        shared = [s for s in now if s in ends]
        if not shared or any(now[s] != ends[s] for s in shared):
            self._sticky = None
            return None
        ends.update(_ends(lay))
        return lay

    def _model_post(self, module, args, output):
        self._depth = max(0, self._depth - 1)
        if self._depth != 0:
            return
        try:
            if self._layout is not None:
                self._layout = None
                self.forwards += 1
                self._held.flush()  # the forward's fingerprints: one launch, one copy to the host, one batch
        finally:
            if self._pipe is not None:
                self._pipe.release()
        if self._pipe is not None:
            self._pipe.check()

    def _pre(self, takes, in_name, args, kwargs):
        tensors = [a for a in args if _is_tensor(a)]
        x = tensors[0] if tensors else next((v for v in kwargs.values() if _is_tensor(v)), None)
        if x is None:
            return
        if in_name:
            self._tensor(in_name, "in", x, self._layout)
        for take, name in takes:
            if take.source == "residual":
                # a norm that gets the residual stream alone (Hugging Face); one that also gets the branch
                # output (vLLM's fused add) returns the sum, taken in _post.
                if len(tensors) != 1 or _is_tensor(kwargs.get("residual")):
                    continue
            self._tensor(name, "out", x, self._layout, take.split, take.dtype)

    def _post(self, takes, output):
        seq = isinstance(output, (tuple, list))
        for take, name in takes:
            if take.source == "residual":
                if not (seq and len(output) == 2 and _is_tensor(output[1])):
                    continue
                x = output[1]
            elif take.source == "out":
                x = output[0] if seq else output
            else:
                i = int(take.source.split(".")[1])
                if not seq or len(output) <= i:
                    continue
                x = output[i]
            self._tensor(name, "out", x, self._layout, take.split, take.dtype)

    # ----- writing

    def _op_info(self, name, role):
        """(recorded, fingerprinted only, the fingerprints' role) of (name, role): once per op and role."""
        logits = (name, role) == ("logits", "out")
        want = logits or self._want(name)
        fp_only = self.mode == "fingerprint" and not logits and not any(fnmatch.fnmatchcase(name, p) for p in self.full_ops)
        return want, fp_only, fingerprint_mod.ROLE_PREFIX + role

    def _want(self, op):
        return self.ops is None or any(fnmatch.fnmatchcase(op, p) for p in self.ops)

    def _warn(self, key, msg):
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn("bitalign_capture: " + msg, stacklevel=3)

    def _op_index(self, op):
        if op not in self._index:
            self._index[op] = len(self._index)
        return self._index[op]

    def _put(self, op, arr, dt, seq, pos, role="out", shard=None):
        if self._pipe is None:
            self._w.write(
                op,
                arr,
                dtype=dt,
                step=self.step,
                seq=seq,
                pos=pos,
                ntok=arr.shape[0],
                index=self._op_index(op),
                role=role,
                rank=self.rank,
                shard=shard,
            )
            return
        h = self._w.prepare(op, arr, dtype=dt, step=self.step, seq=seq, pos=pos, ntok=arr.shape[0],
                            index=self._op_index(op), role=role, rank=self.rank, shard=shard)
        self._pipe.put(h, writer_mod.payload(arr))

    def _put_later(self, op, values, ntok, dt, seq, pos):
        """_put of ntok values that values() gives once a copy to the host has finished: at once without the
        writer thread, else on it."""
        if self._pipe is None:
            return self._put(op, values(), dt, seq, pos)
        nbytes = ntok * dtypes.SIZES[dt]
        h = self._w.prepare(op, None, dtype=dt, shape=(ntok,), nbytes=nbytes, step=self.step, seq=seq, pos=pos,
                            ntok=ntok, index=self._op_index(op), role="out", rank=self.rank)
        self._pipe.put(h, lambda: writer_mod.payload(values()))

    def _queue(self, op, x, dt, seq, pos, role="out", shard=None):
        """Queues rows x (a torch tensor [n, F] on any device) for the writer thread: a copy staged now."""
        n = x.shape[0]
        nbytes = x.numel() * x.element_size()
        h = self._w.prepare(op, None, dtype=dt, shape=tuple(x.shape), nbytes=nbytes, step=self.step, seq=seq,
                            pos=pos, ntok=n, index=self._op_index(op), role=role, rank=self.rank, shard=shard)
        self._pipe.reserve(nbytes)
        self._pipe.put(h, self._stager.stage(x), nbytes)

    def _lean_tags(self, pre, in_name, post):
        """(pre tag, post tag) for _Observer's lean wrapper, or None: a tag ((op, fingerprint role, index), seen key)
        where the module's one record before its call (pre: its single input, source "in" or "residual") or after
        it (post: its output, source "out"; a "residual" take beside it needs a tuple output, which the lean
        wrapper leaves to _post) is fingerprinted only, as it is (no split, no dtype). The wrapper holds such a
        tensor itself; _tensor is the way of everything else."""

        def tag(take, name):
            info = self._info_of(name, "out")
            if take.split is not None or take.dtype is not None or not info[1]:
                return None
            return (name, info[2], self._op_index(name)), (name, "out")

        pre_tag = tag(*pre[0]) if len(pre) == 1 and not in_name else None
        outs = [(t, n) for t, n in post if t.source != "residual"]
        post_tag = tag(*outs[0]) if len(outs) == 1 and outs[0][0].source == "out" else None
        return None if pre_tag is None and post_tag is None else (pre_tag, post_tag)

    def _info_of(self, name, role):
        info = self._info.get((name, role))
        if info is None:
            info = self._info[(name, role)] = self._op_info(name, role)
        return info

    def _tensor(self, name, role, x, lay, split=None, dtype=None):
        if not self._info_of(name, role)[0] or not _is_tensor(x):
            return
        if dtype == "f32" and x.is_floating_point():
            x = x.float()  # widening bf16/f16 to float32 is exact
        elif dtype == "i32" and not x.is_floating_point():
            import torch

            x = x.to(dtype=torch.int32)  # expert ids: far below 2^31
        key = (name, role)
        if key in self._seen:  # a module run twice in one forward (e.g. recomputation): keep the first
            return
        suffix = self._suffix.get(name)
        if suffix is None:
            suffix = self._suffix[name] = names.split_layer_op(name)[1] or name
        x2, lay, heads_first = _flatten(x, lay, self._heads_first.get(suffix))
        if x2 is None:
            if heads_first == "ambiguous":
                self._warn(
                    f"heads:{name}",
                    f"{name}: shape {tuple(x.shape)} may be [B, heads, S, head_dim] or [B, S, heads, head_dim] "
                    "(as many heads as tokens, and its strides do not tell): skipped until a forward with another "
                    "length tells them apart",
                )
            else:
                self._warn(
                    f"shape:{name}", f"{name}: shape {tuple(x.shape)} does not follow the input's tokens: skipped"
                )
            return
        if heads_first is not None:
            self._heads_first[suffix] = heads_first
        self._seen.add(key)
        if split is not None:
            x2 = names.split_fused(x2, split, self.cfg)
        if name == "logits" and role == "out":  # the LM head's input (record_inputs) is rows like any other
            self._logits(x2, lay)
        else:
            self._rows(name, role, x2, lay)

    def _select(self, x2, lay):
        import torch

        key = (id(lay), x2.device)  # one index tensor per layout and device, not one per op
        idx = self._idx.get(key)
        if idx is None:
            if len(self._idx) > 8:
                self._idx.clear()
            idx = self._idx[key] = (lay, torch.as_tensor(lay.valid_index(), device=x2.device))
        return x2.index_select(0, idx[1])

    def _rows(self, name, role, x2, lay, rows=None):
        if not lay.segments:
            return
        if self.mode == "fingerprint":
            self._hold(name, role, x2, lay, rows)
            full = self._full.get(name)
            if full is None:
                full = self._full[name] = any(fnmatch.fnmatchcase(name, p) for p in self.full_ops)
            if not full:
                return
        if self._pipe is not None:
            return self._rows_background(name, role, x2, lay, rows)
        rows = self._select(x2, lay) if rows is None else rows
        arr, dt = dtypes.torch_to_numpy(rows)
        F = arr.shape[1]
        try:
            sdim, start, full = names.shard_of(self.cfg, name, F, self.tp, self.rank)
        except ValueError as e:
            self._warn(f"shard:{name}", f"{e}: recorded as unsharded")
            sdim, start, full = -1, 0, F
        off = 0
        for s in lay.segments:
            shard = (1, start, [s.n, full]) if sdim == 1 else None
            self._put(name, arr[off : off + s.n], dt, s.seq, s.pos, role, shard)
            off += s.n

    def _rows_background(self, name, role, x2, lay, rows):
        """_rows with the writer thread: the segments' rows are slices of x2 (at their starts) or of rows (the
        valid rows, back to back), never gathered; nothing waits for the device."""
        src = x2 if rows is None else rows
        if rows is None:
            starts = [s.start for s in lay.segments]
        else:
            starts = np.cumsum([0] + [s.n for s in lay.segments[:-1]]).tolist()
        dt = dtypes.from_torch(src.dtype)
        F = src.shape[1]
        try:
            sdim, start, full = names.shard_of(self.cfg, name, F, self.tp, self.rank)
        except ValueError as e:
            self._warn(f"shard:{name}", f"{e}: recorded as unsharded")
            sdim, start, full = -1, 0, F
        for s, a in zip(lay.segments, starts):
            shard = (1, start, [s.n, full]) if sdim == 1 else None
            self._queue(name, src[a : a + s.n], dt, s.seq, s.pos, role, shard)

    def _hold(self, name, role, x2, lay, rows):
        """Holds the fingerprinted rows (x2 at the segments' starts, or rows: the valid rows back to back)."""
        self._held.add(name, fingerprint_mod.ROLE_PREFIX + role, self._op_index(name), x2 if rows is None else rows,
                       lay, rows is not None, self.step)

    def _logits(self, x2, lay):
        import torch

        if not lay.segments:
            return
        # logits are float32 in a capture (docs/design.md); bf16/f16 -> f32 is exact. Every row recorded (no
        # padding): the widening is the copy, without a gather before it (a float32 x2 is still gathered, a copy
        # that a later in-place change of the model's logits cannot reach)
        every = sum(s.n for s in lay.segments) == x2.shape[0]
        rows = (x2 if every and x2.dtype != torch.float32 else self._select(x2, lay)).float()
        if self._want("logits"):
            self._rows("logits", "out", None, lay, rows)
        if not (self.logprobs and (self._want("logprobs") or self.record_samples)):
            return
        if lay.tokens is None:  # inputs_embeds: no token ids, so no next tokens
            return
        if self.cfg.vocab and rows.shape[1] != self.cfg.vocab:
            self._warn("lp-shard", "logits are a vocab shard: log-probabilities need the full vocabulary, skipped")
            return
        fn = self.log_softmax or getattr(self.model, "bitalign_log_softmax", None)
        lsm = fn(rows) if fn is not None else torch.log_softmax(rows, dim=-1)  # float32 on the device
        nxt = lay.next_token()[lay.valid_index()]
        ends = np.cumsum([s.n for s in lay.segments]) - 1  # each segment's last row
        n = nxt.shape[0]
        # the next tokens' log-probabilities and each segment's last row in one tensor, one copy to the host;
        # the indices go up from pinned memory, without a wait (from pageable memory the copy waits for the
        # stream: 0.65 ms a forward on the H200, docs/benchmarks.md)
        at = torch.from_numpy(np.concatenate([np.maximum(nxt, 0), ends]).astype(np.int64))
        if lsm.device.type == "cuda":
            at = at.pin_memory()
        at = at.to(lsm.device, non_blocking=True)
        got = torch.cat([lsm.gather(1, at[:n, None]).reshape(-1), lsm.index_select(0, at[n:]).reshape(-1)])
        V = lsm.shape[1]
        if self._pipe is None or got.device.type != "cuda":
            host, done = got.cpu().numpy(), None
        else:  # the writer thread and the next forward wait for the copy, not this one
            host, done = self._stager.copy(got)
        off = 0
        for i, s in enumerate(lay.segments):
            if s.n > 1 and self._want("logprobs"):
                lp = functools.partial(_values, host, done, off, off + s.n - 1)
                self._put_later("logprobs", lp, s.n - 1, "f32", s.seq, s.pos)
            self._pending.hold(s.seq, s.pos + s.n - 1, functools.partial(_values, host, done, n + i * V, n + (i + 1) * V))
            off += s.n


class _Observer:
    """A recorded module watched for as long as the recorder records: _pre sees its call's arguments, _post its
    output. Not forward hooks: a module with a hook takes Module.__call__'s general path, several microseconds a
    call, where this is one Python call; on a host-bound forward of ~400 recorded modules that difference is most
    of what recording fingerprints costs.

    What it wraps is the instance's _call_impl (what Module.__call__ calls, and what calls the module's current
    forward), so that whatever replaces the module's forward before or after (bitalign.hf.patch, unpatch) is
    still what it sees. A module compiled in place (Module.compile: __call__ goes to its compiled _call_impl)
    gets the two forward hooks instead. observed(module) tells bitalign.hf that something sees the output.

    remove() puts the previous _call_impl back when the wrapper is still the module's (past any wrapper under it
    whose recorder closed first); when another recorder's wrapper went on top since, this one stays in place and
    passes calls through until that one goes."""

    __slots__ = ("module", "prev", "fn", "hooks")

    def __init__(self, rec, module, pre, in_name, post, lean=None):
        self.module, self.hooks = module, []
        if getattr(module, "_compiled_call_impl", None) is not None:
            self.prev = self.fn = None
            if pre or in_name:
                h = module.register_forward_pre_hook(lambda m, a, kw: _call(rec._pre, pre, in_name, a, kw), with_kwargs=True)
                self.hooks.append(h)
            if post:
                self.hooks.append(module.register_forward_hook(lambda m, a, out: _call(rec._post, post, out)))
            return
        inner = module._call_impl  # the class's, bound, or an earlier recorder's wrapper
        self.prev = module.__dict__.get("_call_impl", _NONE)
        live = [True]  # cleared by remove(): a wrapper left in place passes calls through

        # lean: a record fingerprinted as it is before the call (its input) and/or after it (its output), the case
        # of nearly every module of a fingerprint recording, held here (Recorder._tensor's work inlined, one call
        # level less: ~5 -> ~3 us a module on the VM); anything else goes _pre's and _post's way
        import torch

        pre_tag, post_tag = lean or (None, None)
        add, tensor = rec._held.add_rows, torch.Tensor  # a subclass (a Parameter, a DTensor) goes the general way

        def hold(tag, x, lay):
            """True when x is held (or its op was this forward), False: _pre's or _post's way instead. Held as it
            is: a contiguous tensor whose leading dimensions are the forward's tokens (what _flatten views as
            [N, -1] rows) is N rows."""
            op, key = tag
            seen = rec._seen
            if key in seen:  # run twice in one forward: the first is kept
                return True
            if type(x) is not tensor:
                return False
            sh = x.shape
            B, S = lay.shape
            d = len(sh)
            if 0 < d < 4 and (sh[0] == B * S or (d > 1 and sh[0] == B and sh[1] == S)) and x.is_contiguous():
                seen.add(key)
                if lay.segments:
                    add(op, x, lay, False, rec.step, B * S)
                return True
            return False

        def call(*args, **kwargs):
            lay = rec._layout
            if lay is None or not live[0]:
                return inner(*args, **kwargs)
            if pre_tag is None:
                if pre or in_name:
                    rec._pre(pre, in_name, args, kwargs)
            elif kwargs or len(args) != 1 or not hold(pre_tag, args[0], lay):
                rec._pre(pre, in_name, args, kwargs)
            out = inner(*args, **kwargs)
            lay = rec._layout
            if lay is not None and post and (post_tag is None or not hold(post_tag, out, lay)):
                rec._post(post, out)
            return out

        call._bitalign_capture, call._bitalign_prev = live, self.prev
        self.fn = call
        module._call_impl = call

    def remove(self):
        for h in self.hooks:
            h.remove()
        if self.fn is None:
            return
        self.fn._bitalign_capture[0] = False
        d = self.module.__dict__
        if d.get("_call_impl") is self.fn:
            prev = self.prev
            while not getattr(prev, "_bitalign_capture", [True])[0]:  # wrappers under it whose recorders closed
                prev = prev._bitalign_prev
            if prev is _NONE:
                del d["_call_impl"]
            else:
                d["_call_impl"] = prev


def _call(f, *args):
    rec = f.__self__
    if rec._layout is not None:
        f(*args)


_NONE = object()


def _values(host, done, a, b):
    """Elements a:b of host (numpy, or a pinned tensor whose copy done records) once the copy has finished."""
    host = pipeline_mod.ready(host, done)
    return (host if done is None else host.numpy())[a:b]


def observed(module):
    """Whether something sees module's output: a forward hook or pre-hook (its own or a global one) or a
    recording recorder's wrapper (_Observer)."""
    from torch.nn.modules import module as _m

    if _m._global_forward_hooks or _m._global_forward_pre_hooks or module._forward_hooks or module._forward_pre_hooks:
        return True
    live = getattr(module.__dict__.get("_call_impl"), "_bitalign_capture", None)
    return bool(live and live[0])


def recording(model):
    """Whether a recorder records model (watches one of its modules)."""
    return any(getattr(m.__dict__.get("_call_impl"), "_bitalign_capture", [False])[0] or
               any(isinstance(getattr(h, "__self__", None), Recorder) for h in m._forward_pre_hooks.values())
               for m in model.modules())


def _flatten(x, lay, heads_first=None):
    """x viewed as (tokens, features) following lay, the layout its rows follow and what it found about a 4-D
    x's heads dimension (True, False, None = not a per-head tensor, "ambiguous").

    The rows are all tokens ([B, S, F] or [N, F]; [B, S, heads, head_dim]; [B, heads, S, head_dim], transposed
    first, as Gemma3's q/k norms get them), the last k of each row ([B, k, F], generate's logits_to_keep) or the
    last of each sequence ([sequences, F], vLLM's logits processor); (None, None, ...) if x's leading dimensions
    are none of these. A [B, S, S, head_dim] tensor (as many heads as tokens) follows heads_first (what an earlier
    forward of the op showed), else its strides: the projections before it write token-major memory, viewed
    as [B, S, heads, head_dim] and perhaps transposed, so the dimension with the larger stride is the tokens'
    (equal strides: "ambiguous").
    """
    B, S = lay.shape
    N = B * S
    if x.dim() == 4 and x.shape[0] == B and S in (x.shape[1], x.shape[2]):
        a, b = x.shape[1], x.shape[2]
        if a == b == 1:  # one token, one head: both readings are the same rows
            return x.reshape(N, -1), lay, None
        if a == b:
            if heads_first is None:
                if x.stride(1) == x.stride(2):
                    return None, None, "ambiguous"
                heads_first = x.stride(1) < x.stride(2)
            found = heads_first
        else:
            found = b == S
        if found:
            x = x.transpose(1, 2)
        return x.reshape(N, -1), lay, found
    if x.dim() >= 2 and x.shape[0] == B and x.shape[1] == S:
        return x.reshape(N, -1), lay, None
    if x.dim() >= 1 and x.shape[0] == N:
        return x.reshape(N, -1), lay, None
    if x.dim() >= 3 and x.shape[0] == B and 0 < x.shape[1] < S:
        k = x.shape[1]
        return x.reshape(B * k, -1), lay.tail(k), None
    if x.dim() == 2 and x.shape[0] == len(lay.segments):  # one row per sequence: its last position
        return x, lay.lasts(), None
    return None, None, None


def _starts(lay):
    """{seq: its first position in lay}."""
    out = {}
    for s in lay.segments:
        out[s.seq] = min(out.get(s.seq, s.pos), s.pos)
    return out


def _ends(lay):
    """{seq: one past its last position in lay}."""
    out = {}
    for s in lay.segments:
        out[s.seq] = max(out.get(s.seq, 0), s.pos + s.n)
    return out


def _parallel(tp, rank, group):
    dist = None
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            dist = None
    except ImportError:
        pass
    if tp is None:
        tp = dist.get_world_size(group) if dist is not None else 1
    if rank is None:
        rank = dist.get_rank(group) if dist is not None else 0
    tp, rank = int(tp), int(rank)
    if tp < 1 or not 0 <= rank < tp:
        raise ValueError(f"bitalign_capture: rank {rank} outside tp {tp}")
    return tp, rank


_TENSOR = []  # [torch.Tensor] once torch is imported


def _is_tensor(x):
    if not _TENSOR:
        try:
            import torch
        except ImportError:
            return False
        _TENSOR.append(torch.Tensor)
    return isinstance(x, _TENSOR[0])


def _np(x):
    if x is None:
        return None
    if _is_tensor(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _list(x):
    if _is_tensor(x):
        return x.detach().cpu().reshape(-1).tolist()
    return list(np.asarray(x).reshape(-1).tolist())


def _torch_version():
    try:
        import torch

        return torch.__version__
    except ImportError:
        return "?"
