"""A fingerprint recording's ops held until their forward ends, then fingerprinted and written together.

A hook of a fingerprinted op does almost nothing: it keeps the op's rows (the tensor itself, no copy, no
kernel), the tensor's version counter and where its segments are. At the forward's end flush() fingerprints
every held tensor in one fingerprints.fingerprint_sets call (one fingerprint_rows launch on a GPU with the
bitalign driver), sends the fingerprints to the host in one copy, and writes them as ONE record batch of many
rows (Writer.prepare_rows). Holding outputs keeps them alive, so hold_bytes (default_bound) bounds the device
memory the recorder keeps from the allocator: past it the held tensors are fingerprinted at once and let go,
their fingerprints joining the forward's one batch. A tensor changed in place after
its hook (its version moved) is an error naming the op: its fingerprint would not be of what the op returned.
Inference tensors (torch.inference_mode) have no version counter: those are fingerprinted in their hook (one
launch an op, still no synchronisation) and only their fingerprints are held.

Both writing modes use it: the synchronous recorder (background=False) copies the fingerprints at once and
writes the batch; the background one queues the batch for the writer thread with the copy still on its way (an
event on a side stream), so the two files are the same bytes.
"""

import functools
import operator

import numpy as np

from . import fingerprints as fingerprint_mod
from . import pipeline as pipeline_mod

HOLD_BYTES = 1 << 30  # default bound of held tensor bytes before they are fingerprinted inside the forward (off a GPU)
HOLD_MAX = 8 << 30  # the most a default bound on a GPU holds (default_bound)
PLANS = 64  # flush plans kept (Held._plans): a forward's batch, for a few shapes of forward

_first, _rows_of, _version_of, _n_of, _segkey_of = (operator.itemgetter(i) for i in (0, 1, 2, 5, 3))
_version = operator.attrgetter("_version")


def default_bound(device):
    """hold_bytes when the caller gives none: HOLD_BYTES off a GPU; on one, an eighth of the memory free on it
    when recording starts, between HOLD_BYTES and HOLD_MAX. Fingerprinting inside the forward (past the bound)
    costs it more than the pass at its end does (on the H200, 1.5B model: +25.5 % against +20.6 % holding all
    3.2 GB to the end, docs/benchmarks.md); what is free then bounds what holding may keep from the allocator."""
    if device is None or device.type != "cuda":
        return HOLD_BYTES
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return max(HOLD_BYTES, min(HOLD_MAX, free // 8))


class Held:
    """Held fingerprinted rows of writer (a writer.Writer); put(header, payload) writes or queues a batch;
    stager (pipeline.Stager or None) copies the fingerprints to the host without waiting (background)."""

    def __init__(self, writer, put, stager=None, hold_bytes=HOLD_BYTES):
        if hold_bytes < 1:
            raise ValueError(f"bitalign_capture: hold_bytes {hold_bytes} must be ≥ 1")
        self.writer, self.put, self.stager, self.bound = writer, put, stager, int(hold_bytes)
        self.bytes = 0
        self.peak = 0  # the most bytes held at once (tests and benchmarks read it)
        self.flushes = 0  # record batches made
        self.chunks = 0  # fingerprint_sets calls inside a forward (past the bound)
        self.planned = 0  # flushes whose batch header came from a plan (tests and benchmarks read it)
        self._items = []  # ((op, role, index), rows tensor or None, its version, segments key, fingerprints, n)
        self._done = []  # the items of this batch fingerprinted already (rows dropped), in order
        self._chunks = []  # their fingerprints (on the device), in order
        self._segs = {}  # segments key -> (layout, seq, pos, ntok, flat starts, dense for rows)
        self._plans = {}  # (items, segments' contents) -> [_Plan]: a repeated forward's batch header and gather
        self._pre = 0  # items fingerprinted in add (inference tensors)
        self.step = 0

    def add(self, op, role, index, rows, lay, packed, step, n=None):
        """Holds rows of (op, role) at step: a 2-D tensor [n, ...], or (n given) a contiguous tensor of any shape
        whose x.reshape(n, -1) rows they are. Segment i of lay (which has segments) starts at row
        segments[i].start (packed False: rows are lay's flat tokens) or after the segments before it (packed
        True: rows are the valid tokens back to back)."""
        if n is None:
            if rows.dim() != 2:
                rows = rows.reshape(rows.shape[0], -1)
            n = rows.shape[0]
            if rows.shape[1] > 1 and rows.stride(1) != 1:
                rows = rows.contiguous()  # rows not contiguous inside (a transposed view): copied now
        self.add_rows((op, role, index), rows, lay, packed, step, n)

    def add_rows(self, op, rows, lay, packed, step, n):
        """add's work once rows are n rows as fingerprint_sets takes them; op is (op, role, index), the same
        tuple each forward where the caller can (a repeated forward's flush then compares it by identity)."""
        if step != self.step and (self._items or self._done):
            self.flush()
        self.step = step
        key = (id(lay), packed, n)
        got = self._segs.get(key)
        if got is None or got[0] is not lay:
            self._segs[key] = _segments(lay, packed, n)
        try:
            v = rows._version
        except RuntimeError:  # an inference tensor (torch.inference_mode) has no version counter: fingerprinted now
            self._items.append((op, None, None, key, fingerprint_mod.fingerprint_sets([rows], [n]), n))
            self._pre += 1
            self.bytes += 8 * n
        else:
            self._items.append((op, rows, v, key, None, n))
            self.bytes += rows.nbytes
        if self.bytes > self.peak:
            self.peak = self.bytes
        if self.bytes > self.bound:
            self._chunk()

    def _chunk(self):
        """Past the bound: what is held is fingerprinted now (one launch, nothing waits) and let go; its
        fingerprints stay on the device for the batch the forward's end writes, so that a forward writes one
        batch whatever the bound (the header, the copy and the writer's work once)."""
        items, self._items, self.bytes = self._items, [], 0
        self._chunks.append(self._fingerprints(items))
        self._done += [(it[0], None, None, it[3], None, it[5]) for it in items]
        self.chunks += 1

    def flush(self):
        """Fingerprints what is held and writes (or queues) it, with what was fingerprinted since the last
        flush, as one record batch."""
        rest, self._items, self.bytes = self._items, [], 0
        done, self._done = self._done, []
        chunks, self._chunks = self._chunks, []
        if not rest and not done:
            self._segs.clear()
            return
        segs, self._segs = self._segs, {}
        if rest:
            chunks.append(self._fingerprints(rest))
        if len(chunks) > 1:
            import torch

            fps = torch.cat(chunks)
        else:
            fps = chunks[0]
        del chunks
        items = done + rest if done else rest
        header, take = self._planned(items, segs)
        self.flushes += 1
        if self.stager is None:
            self.put(header, _rows_bytes(fps.cpu(), None, take))
            return
        host, done = self.stager.copy(fps)
        self.put(header, functools.partial(_rows_bytes, host, done, take))

    def _fingerprints(self, items):
        """The fingerprints (on the device) of items' rows in order: those held fingerprinted now, in one
        fingerprint_sets call, after the check that none changed in place since it was held."""
        pre, self._pre = self._pre, 0
        if pre:  # some fingerprinted in their hooks (inference tensors): the others now, in order
            xs = [it for it in items if it[1] is not None]
            _check(self.writer.path, xs)
            fps = fingerprint_mod.fingerprint_sets(list(map(_rows_of, xs)), list(map(_n_of, xs))) if xs else None
            del xs
            import torch

            pieces, off = [], 0
            for it in items:
                if it[4] is None:
                    pieces.append(fps[off : off + it[5]])
                    off += it[5]
                else:
                    pieces.append(it[4])
            return torch.cat(pieces)
        _check(self.writer.path, items)
        return fingerprint_mod.fingerprint_sets(list(map(_rows_of, items)), list(map(_n_of, items)))

    def _planned(self, items, segs):
        """The batch header of items at self.step and the gather of their fingerprints (None: in order): from
        the plan of an earlier flush of the same ops on segments of the same contents when the writer takes
        its claims again (Writer.rows_again), else made (and planned for the next time)."""
        order = {k: i for i, k in enumerate(segs)}
        ops = list(map(_first, items))
        sks = list(map(order.__getitem__, map(_segkey_of, items)))
        sig = (len(items), tuple((k[1], k[2]) + tuple(b"" if a is None else a.tobytes() for a in v[1:])
                                 for k, v in segs.items()))
        for p in self._plans.get(sig, ()):
            if p.ops == ops and p.sks == sks:
                header = self.writer.rows_again(p.header, self.step)
                if header is not None:
                    self.planned += 1
                    return header, p.take
                break
        parts, gather, base, last = [], None, 0, None
        for op, _, _, key, _, n in items:
            _, seq, pos, ntok, idx = segs[key]
            if seq is last:
                parts[-1][0].append(op)
            else:
                parts.append(([op], seq, pos, ntok))
                last = seq
            if idx is not None and gather is None:  # the first item not dense: the dense ones before it in full
                gather = [np.arange(base)]
            if gather is not None:
                gather.append(np.arange(base, base + n) if idx is None else base + idx)
            base += n
        header = self.writer.prepare_rows(parts, step=self.step, dtype="i64")
        take = None if gather is None else np.concatenate(gather)
        if header.claims is not None:
            plans = self._plans.setdefault(sig, [])
            if sum(map(len, self._plans.values())) >= PLANS:
                self._plans.clear()
                plans = self._plans[sig] = []
            plans.append(_Plan(ops, sks, header, take))
        return header, take

    def clear(self):
        """Drops what is held (abort)."""
        self._items, self._segs, self.bytes, self._pre, self._done, self._chunks = [], {}, 0, 0, [], []


class _Plan:
    """A flush's batch header and gather, for the next flush of the same ops (op tuples, segments keys' order)."""

    __slots__ = ("ops", "sks", "header", "take")

    def __init__(self, ops, sks, header, take):
        self.ops, self.sks, self.header, self.take = ops, sks, header, take


def _check(path, items):
    """Raises changed() for the first held tensor of items changed in place since it was held."""
    if list(map(_version, map(_rows_of, items))) != list(map(_version_of, items)):
        for (op, role, _), rows, v, *_ in items:
            if rows._version != v:
                raise changed(path, op, role, v, rows._version)


def changed(path, op, role, was, now):
    """The error of an output changed in place after its module returned it, before it was fingerprinted."""
    return ValueError(
        f"bitalign_capture: {path}: {op} [{role}]: its output was changed in place after its module returned it "
        f"(tensor version {was} → {now}): a fingerprint now would not be of what the op returned (record the op "
        "in full with full_ops, or leave it out with ops)"
    )


def _segments(lay, packed, n):
    """(lay, seq, pos, ntok, row index of each segment's rows or None where they are rows 0..n-1 in order)."""
    seq = np.array([s.seq for s in lay.segments], dtype=np.int64)
    pos = np.array([s.pos for s in lay.segments], dtype=np.int64)
    ntok = np.array([s.n for s in lay.segments], dtype=np.int64)
    if packed:
        st = np.concatenate([[0], np.cumsum(ntok)[:-1]]).astype(np.int64)
    else:
        st = np.array([s.start for s in lay.segments], dtype=np.int64)
    dense = bool(st[0] == 0 and (st[1:] == (st + ntok)[:-1]).all() and st[-1] + ntok[-1] == n)
    idx = None if dense else np.concatenate([np.arange(a, a + k) for a, k in zip(st.tolist(), ntok.tolist())])
    return lay, seq, pos, ntok, idx


def _rows_bytes(host, done, take):
    a = pipeline_mod.ready(host, done).numpy()
    if take is not None:
        a = a[take]
    return a.view(np.uint8)
