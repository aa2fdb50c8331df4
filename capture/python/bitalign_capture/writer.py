"""Writing bitalign capture files (docs/capture-format.md) with pyarrow, from numpy arrays or raw bytes.

One record batch of one row per tensor, written as it arrives (memory stays at one tensor), into a temporary
file next to the target that appears under its final name only on close (flush, fsync, link/rename): a crashed
program leaves no half-written capture, and an existing file is never replaced unless overwrite=True.
Like Go's capture.Writer, each tensor's bytes start on a 64-byte boundary of the file (record-batch custom
metadata "bitalign.pad" of spaces sizes the message); readers do not depend on it.

Many small 1-D tensors of one dtype (a forward's fingerprint tensors: 8 bytes a token) go into ONE record batch
of many rows instead (prepare_rows / emit of its Rows header; docs/capture-format.md, "Layout"): the batch's
first tensor starts on a 64-byte boundary, the others follow back to back (8-byte aligned for i64).
"""

import bisect
import datetime
import json
import math
import os
import secrets

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from . import dtypes

FORMAT_NAME = "bitalign-capture"  # schema metadata bitalign.format
FORMAT_VERSION = 1  # schema metadata bitalign.version
ALIGNMENT = 64  # file offset alignment of tensor bytes
KEY_FORMAT, KEY_VERSION, KEY_META, KEY_PAD = "bitalign.format", "bitalign.version", "bitalign.meta", "bitalign.pad"
VERSION = "0.1.0"  # this package's version
PRODUCER = f"bitalign_capture {VERSION} (python)"
MAX_DIMS = 32  # as Go's capture.MaxDims

_I64, _I32, _STR, _LARGE_BINARY = pa.int64(), pa.int32(), pa.string(), pa.large_binary()
_CACHE = 4096  # entries per cache of emit's arrays (cleared when full: bounded memory)
# (pad, rows) -> bytes from a batch's start to its tensor bytes, for every batch but a file's first: the same in
# every file of this schema (the message does not hold the schema's metadata), so measured once a process, not
# once a Writer (~200 scratch encodings, ~0.1-0.5 ms each, on the writer thread of every new capture)
_PREFIX = {}
_ROWS_CACHE = 64  # Rows headers whose columns a Writer keeps (cleared when full)
WRITEBACK_BYTES = 256 << 20  # start the disk's write-out of every this many bytes written (Linux), not at close
_FIELDS = [
    ("data", pa.large_binary()),
    ("step", _I64),
    ("seq", _I64),
    ("pos", _I64),
    ("ntok", _I64),
    ("op", _STR),
    ("index", _I32),
    ("role", _STR),
    ("dtype", _STR),
    ("shape", pa.list_(_I64)),
    ("rank", _I32),
    ("shard_dim", _I32),
    ("shard_start", _I64),
    ("full_shape", pa.list_(_I64)),
]


CLAIM_STEPS = 16  # steps behind the highest one written whose coordinates a writer keeps (Writer._step_claims)


def schema(meta_json):
    """The Arrow schema of a capture whose Meta is the JSON string meta_json (capture.Schema in Go)."""
    md = {KEY_FORMAT: FORMAT_NAME, KEY_VERSION: str(FORMAT_VERSION), KEY_META: meta_json}
    return pa.schema([pa.field(n, t, nullable=False) for n, t in _FIELDS], metadata=md)


def make_meta(
    side,
    *,
    model=None,
    tp=1,
    pp=1,
    dp=1,
    rank=0,
    kernel_profile="",
    batch_size=0,
    seed=0,
    step=0,
    producer=PRODUCER,
    created=None,
    extra=None,
):
    """A Meta dict with the JSON keys of Go's capture.Meta. model: {"architecture": ..., "config": {...}}."""
    if created is None:
        created = datetime.datetime.now(datetime.timezone.utc)
    if isinstance(created, datetime.datetime):
        created = created.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    m = {
        "format_version": FORMAT_VERSION,
        "side": str(side),
        "tp": int(tp),
        "pp": int(pp),
        "dp": int(dp),
        "rank": int(rank),
        "kernel_profile": str(kernel_profile),
        "batch_size": int(batch_size),
        "seed": int(seed),
        "step": int(step),
        "producer": str(producer),
        "created": created,
    }
    if model is not None:
        m["model"] = model
    if extra is not None:
        m["extra"] = extra
    return m


def _check_meta(path, m):
    for k in ("tp", "pp", "dp", "rank", "batch_size"):
        if int(m.get(k, 0)) < 0:
            raise ValueError(f"bitalign_capture: {path}: meta: negative {k} {m[k]}")
    world = 1
    for k in ("tp", "pp", "dp"):
        if int(m.get(k, 0)) > 1:
            world *= int(m[k])
    if int(m.get("rank", 0)) >= world:
        raise ValueError(f"bitalign_capture: {path}: meta: rank {m['rank']} outside tp×pp×dp = {world}")
    if not 0 <= int(m.get("seed", 0)) < 1 << 64:
        raise ValueError(f"bitalign_capture: {path}: meta: seed {m['seed']} is not a uint64")


def rank_path(directory, rank):
    """The file of one tensor-parallel rank inside a capture directory (Open reads every *.arrow there)."""
    return os.path.join(directory, f"rank{int(rank)}.arrow")


class Closing:
    """A context manager of close() and abort(): the block's clean end closes, an exception aborts."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


class Writer(Closing):
    """Streams tensors into the capture file path; use as a context manager or call close()/abort().

    meta is a dict from make_meta (format_version is set here). Not safe for concurrent use.
    """

    def __init__(self, path, meta, *, overwrite=False):
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.n = 0
        self._done = False
        meta = dict(meta)
        meta["format_version"] = FORMAT_VERSION
        _check_meta(self.path, meta)
        self.meta = meta
        if not overwrite and os.path.lexists(self.path):
            raise FileExistsError(f"bitalign_capture: {self.path}: file exists (pass overwrite=True to replace it)")
        d, base = os.path.split(os.path.abspath(self.path))
        self._tmp = os.path.join(d, f".{base}.tmp-{secrets.token_hex(4)}")
        self._schema = schema(json.dumps(meta, separators=(",", ":")))
        self._sink = pa.OSFile(self._tmp, "wb")
        self._wb_from = 0  # file offset up to which write-out was started (_writeback)
        try:
            self._w = ipc.new_file(self._sink, self._schema)
        except BaseException:
            self._sink.close()
            os.unlink(self._tmp)
            raise
        self._prefix = {}  # (pad, rows) -> the first batch's bytes from the file's start to its tensor bytes
        self._pads = {}  # pad -> its record-batch custom metadata
        self._pad_at = {}  # (first batch?, file offset mod ALIGNMENT) -> the pad _pad gives
        self._offsets = {}  # payload length -> the [0, length] offsets buffer of the data column
        self._rows_cols = {}  # Rows.key() -> its columns but the step (_emit_rows: built once a header)
        self._cols = [{} for _ in _FIELDS[1:]]  # per column: value -> its one-row array (emit's cache)
        self._closed = False  # the file is ended (emit refuses); _done: close or abort was asked
        # the coordinates written, per step (the last CLAIM_STEPS + 1 steps: _step_claims), to refuse one
        # written twice: step -> (spans, row spans, row keys):
        #   spans: (seq, op, role, rank, shard_start) -> sorted disjoint [pos, end) runs written by prepare
        #   row spans: (op, role, rank) -> prepare_rows's merged [(seq, pos, end)] runs, sorted
        #   row keys: (op, role, rank) of which prepare claimed some positions (shard start 0)
        self._claims = {}
        self._top = None  # the highest step written

    def write(
        self,
        op,
        data,
        *,
        dtype=None,
        shape=None,
        step=0,
        seq=0,
        pos=0,
        ntok=0,
        index=0,
        role="out",
        rank=0,
        shard=None,
    ):
        """Appends one tensor. data is a numpy array (dtype taken from it unless given: pass dtype="bf16" with
        the uint16 bits) or bytes-like (dtype and shape required). shard = (dim, start, full_shape) or None.

        Raises ValueError naming the op, step, seq and position when a position of (step, seq, op, role, rank,
        shard start) is written twice (ntok positions from pos; a tensor with ntok 0 holds position pos).
        """
        h = self.prepare(op, data, dtype=dtype, shape=shape, step=step, seq=seq, pos=pos, ntok=ntok, index=index,
                         role=role, rank=rank, shard=shard)
        self.emit(h, payload(data))

    def prepare(
        self,
        op,
        data=None,
        *,
        dtype=None,
        shape=None,
        nbytes=None,
        step=0,
        seq=0,
        pos=0,
        ntok=0,
        index=0,
        role="out",
        rank=0,
        shard=None,
    ):
        """Checks one tensor's fields and claims its positions (write's errors, raised here) without writing
        it: the header that emit(header, payload) writes. data as write's, or None with dtype, shape and nbytes
        (the payload's length) given: the recorder checks a tensor while its bytes are still on the way."""
        if self._done:
            raise ValueError(f"bitalign_capture: {self.path}: write after close or abort")
        if not op:
            raise ValueError(f"bitalign_capture: {self.path}: tensor without an op name")
        if isinstance(data, np.generic):
            data = np.asarray(data)
        if isinstance(data, np.ndarray):
            dt = dtypes.check(dtype) if dtype else dtypes.from_numpy(data.dtype)
            if shape is None:
                shape = data.shape
            st = dtypes.storage(dt)
            if data.dtype.itemsize != st.itemsize:
                raise ValueError(f"bitalign_capture: {self.path}: {op}: {data.dtype} array cannot hold {dt}")
            nbytes = data.nbytes
        else:
            if dtype is None or shape is None:
                raise ValueError(f"bitalign_capture: {self.path}: {op}: raw bytes need dtype and shape")
            dt = dtypes.check(dtype)
            if data is not None:
                nbytes = memoryview(data).nbytes
        shape = [int(d) for d in shape]
        if len(shape) > MAX_DIMS:
            raise ValueError(f"bitalign_capture: {self.path}: {op}: {len(shape)} dimensions (at most {MAX_DIMS})")
        if any(d < 0 for d in shape):
            raise ValueError(f"bitalign_capture: {self.path}: {op}: negative dimension in shape {shape}")
        want = math.prod(shape) * dtypes.SIZES[dt]
        if want != nbytes:
            raise ValueError(
                f"bitalign_capture: {self.path}: {op}: shape {shape} × {dt} needs {want} bytes, has {nbytes}"
            )
        if int(ntok) < 0:
            raise ValueError(f"bitalign_capture: {self.path}: {op}: negative ntok {ntok}")
        if int(rank) < 0:
            raise ValueError(f"bitalign_capture: {self.path}: {op}: negative rank {rank}")
        sdim, sstart, sfull = -1, 0, ()
        if shard is not None and shard[0] >= 0:
            sdim, sstart, sfull = int(shard[0]), int(shard[1]), tuple(int(d) for d in shard[2])
            ok = sdim < len(shape) and len(sfull) == len(shape)
            ok = ok and all(sfull[d] == shape[d] for d in range(len(shape)) if d != sdim)
            ok = ok and 0 <= sstart <= sfull[sdim] - shape[sdim]
            if not ok:
                raise ValueError(
                    f"bitalign_capture: {self.path}: {op}: shard dim {sdim} start {sstart} of {list(sfull)} "
                    f"does not fit shape {shape}"
                )
        role = str(role or "out")
        self._claim(op, role, int(step), int(seq), int(pos), int(ntok), int(rank), sstart)
        return (int(step), int(seq), int(pos), int(ntok), str(op), int(index), role, dt, tuple(shape), int(rank),
                sdim, sstart, sfull)

    def emit(self, header, payload):
        """Writes one tensor whose header prepare gave; payload is its bytes (bytes-like or a pyarrow Buffer,
        read without a copy). Emits follow their prepares' order; they may run on another thread than
        prepare (the recorder's writer thread), never two at once."""
        if self._closed:
            raise ValueError(f"bitalign_capture: {self.path}: write after close or abort")
        if isinstance(header, Rows):
            return self._emit_rows(header, payload)
        buf = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
        n = buf.size
        offsets = self._offsets.get(n)
        if offsets is None:
            if len(self._offsets) > _CACHE:
                self._offsets.clear()
            offsets = self._offsets[n] = pa.py_buffer(np.array([0, n], dtype=np.int64))
        data = pa.LargeBinaryArray.from_buffers(_LARGE_BINARY, 1, [None, offsets, buf])
        arrays = [self._column(i, v) for i, v in enumerate(header)]
        self._emit(data, arrays, self._pad(arrays), 1)

    def prepare_rows(self, parts, *, step=0, dtype="i64", rank=0):
        """Checks and claims many 1-D tensors of dtype written together as one record batch (emit of the Rows
        header returned, with the bytes of all of them back to back): parts is a list of (keys, seq, pos,
        ntok), keys [(op, role, index)] sharing the segments seq, pos, ntok (int arrays of one length: a
        tensor of ntok values of (op, role) at seq, pos for each). Tensor order: part by part, key by key,
        segment by segment. Errors as prepare's (a position written twice names the op, step, seq and pos).
        The claims cost one check per part and one dict look-up per key when the keys are new (a forward's
        fingerprints), a merge of their runs otherwise (a decode loop)."""
        if self._done:
            raise ValueError(f"bitalign_capture: {self.path}: write after close or abort")
        dt = dtypes.check(dtype)
        step, rank = int(step), int(rank)
        if rank < 0:
            raise ValueError(f"bitalign_capture: {self.path}: negative rank {rank}")
        self._admit(step)
        spans, row_spans, row_keys = self._claims.get(step) or ({}, {}, set())
        ops, roles, index, seqs, poss, ntoks = [], [], [], [], [], []
        claimed = {}  # the claims, made only if every tensor passes (a refused call leaves the writer as it was)
        fresh = True  # no key claimed in step before: claimed is this call's alone (rows_again may repeat it)
        for keys, seq, pos, ntok in parts:
            seq, pos, ntok = (np.asarray(a, dtype=np.int64).reshape(-1) for a in (seq, pos, ntok))
            m = seq.size
            if not (pos.size == ntok.size == m):
                raise ValueError(f"bitalign_capture: {self.path}: prepare_rows: seq, pos and ntok differ in length")
            if m == 0 or not keys:
                continue
            if (ntok < 0).any():
                raise ValueError(f"bitalign_capture: {self.path}: {keys[0][0]}: negative ntok {int(ntok.min())}")
            runs = list(zip(seq.tolist(), pos.tolist(), (pos + np.maximum(ntok, 1)).tolist()))
            own = None
            for op, role, idx in keys:
                op, role = str(op), str(role or "out")
                if not op:
                    raise ValueError(f"bitalign_capture: {self.path}: tensor without an op name")
                rk = (op, role, rank)
                had = claimed.get(rk, row_spans.get(rk))
                if fresh and (rk in row_spans or rk in row_keys):
                    fresh = False
                if had is None and rk not in row_keys:
                    if own is None:
                        own = _merge_runs(self.path, op, role, step, runs)
                    claimed[rk] = own
                else:
                    merged = _merge_runs(self.path, op, role, step, (had or []) + runs)
                    if rk in row_keys:
                        for q, lo, hi in runs:
                            for a, b in spans.get((q, op, role, rank, 0), ()):
                                if a < hi and lo < b:
                                    _twice(self.path, op, role, step, q, max(a, lo), a, b)
                    claimed[rk] = merged
                ops.append((op, m))
                roles.append((role, m))
                index.append((int(idx), m))
                seqs.append(seq)
                poss.append(pos)
                ntoks.append(ntok)
        if claimed:
            self._step_claims(step)[1].update(claimed)
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)  # noqa: E731
        rows = Rows(step, dt, rank, ops, roles, index, cat(seqs), cat(poss), cat(ntoks))
        rows.claims = claimed if fresh else None
        return rows

    def rows_again(self, rows, step):
        """prepare_rows's header of the same tensors at step, without their checks, or None (prepare_rows
        then): rows was prepared in a step where none of its keys was claimed before, and none of them is
        claimed in step yet, so its claims are the ones prepare_rows would make (a repeated forward's
        fingerprints: one dict update instead of a look-up and a merge per tensor)."""
        if self._done:
            raise ValueError(f"bitalign_capture: {self.path}: write after close or abort")
        step = int(step)
        self._admit(step)
        claims = rows.claims
        if claims is None:
            return None
        c = self._claims.get(step)
        if c is not None and (c[1].keys() & claims.keys() or c[2] & claims.keys()):
            return None
        self._step_claims(step)[1].update(claims)
        return rows.again(step)

    def _emit_rows(self, rows, payload):
        k = rows.n
        if k == 0:
            return
        buf = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
        size = dtypes.SIZES[rows.dtype]
        offsets = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(rows.ntok * size, out=offsets[1:])
        if int(offsets[-1]) != buf.size:
            raise ValueError(
                f"bitalign_capture: {self.path}: {rows.n} tensors of {int(offsets[-1])} bytes, the payload has {buf.size}"
            )
        data = pa.LargeBinaryArray.from_buffers(_LARGE_BINARY, k, [None, pa.py_buffer(offsets), buf])
        # every forward of one shape writes the same header but for the step: the other columns built once
        key = rows.key()
        cols = self._rows_cols.get(key)
        if cols is None:
            if len(self._rows_cols) >= _ROWS_CACHE:
                self._rows_cols.clear()
            cols = self._rows_cols[key] = rows.arrays()[1:]
        arrays = [pa.array(np.full(k, rows.step, dtype=np.int64))] + cols
        self._emit(data, arrays, self._pad(arrays, k), k)

    def _emit(self, data, arrays, pad, k):
        """Writes one record batch of k tensors (the payload column and the header columns) with pad bytes of
        padding metadata (the pad's metadata object cached), then counts them; a failed write aborts the file."""
        batch = pa.RecordBatch.from_arrays([data] + arrays, schema=self._schema)
        md = self._pads.get(pad)
        if md is None:
            md = self._pads[pad] = pa.KeyValueMetadata({KEY_PAD: " " * pad})
        try:
            self._w.write_batch(batch, custom_metadata=md)
        except BaseException:
            self.abort()
            raise
        self.n += k
        self._writeback()

    def _writeback(self):
        """Starts the disk's write-out of what was written since the last call once WRITEBACK_BYTES have
        accumulated (sync_file_range(SYNC_FILE_RANGE_WRITE): asynchronous, the GIL released), so that close's
        fsync finds most of a multi-GB capture already on its way instead of writing it all then. A no-op where
        the call does not exist (not Linux); durability still comes from close's fsync alone."""
        end = self._sink.tell()
        if end - self._wb_from < WRITEBACK_BYTES:
            return
        f = _sync_file_range()
        if f is not None:
            f(self._sink.fileno(), self._wb_from, end - self._wb_from, 2)  # SYNC_FILE_RANGE_WRITE; errors ignored
        self._wb_from = end

    def _column(self, i, v):
        """The one-row array of column i + 1 holding v, made once per value (the values repeat: steps,
        sequences, op names, shapes)."""
        cache = self._cols[i]
        a = cache.get(v)
        if a is None:
            if len(cache) > _CACHE:
                cache.clear()
            t = _FIELDS[i + 1][1]
            a = cache[v] = pa.array([list(v) if isinstance(v, tuple) else v], type=t)
        return a

    def _admit(self, step):
        """Refuses a step whose claims are no longer kept (more than CLAIM_STEPS before the highest step
        written): its coordinates could not be checked, so steps come in order within that window."""
        if step not in self._claims and self._top is not None and step < self._top - CLAIM_STEPS:
            raise ValueError(
                f"bitalign_capture: {self.path}: step {step} after step {self._top}: a writer keeps the coordinates "
                f"of its last {CLAIM_STEPS + 1} steps to refuse a tensor written twice, so a step more than "
                f"{CLAIM_STEPS} before the highest one written is refused (write steps in order, or an old step to "
                "a capture of its own)"
            )

    def _step_claims(self, step):
        """The claims of step (created for a new one); a new highest step drops those of the steps more than
        CLAIM_STEPS before it, so a long recording's claims stay bounded (they grew by about 60 MB every
        1000 steps of a 28-layer fingerprint capture)."""
        c = self._claims.get(step)
        if c is None:
            c = self._claims[step] = ({}, {}, set())
            if self._top is None or step > self._top:
                self._top = step
                for old in [s for s in self._claims if s < step - CLAIM_STEPS]:
                    del self._claims[old]
        return c

    def _claim(self, op, role, step, seq, pos, ntok, rank, sstart):
        """Records that positions [pos, pos + max(ntok, 1)) of (step, seq, op, role) are written, or raises if
        one already was: two tensors at one coordinate are a capture the diff cannot align (in a recorder,
        usually two sequences under one seq id: give seq_ids)."""
        self._admit(step)
        spans, row_spans, row_keys = self._step_claims(step)
        key = (seq, op, role, rank, sstart)
        lo, hi = pos, pos + max(ntok, 1)
        if sstart == 0:
            rs = row_spans.get((op, role, rank))
            if rs is not None:  # the same coordinates written by prepare_rows
                _merge_runs(self.path, op, role, step, rs + [(seq, lo, hi)])
            row_keys.add((op, role, rank))
        runs = spans.setdefault(key, [])
        i = bisect.bisect_left(runs, (lo,))
        for a, b in runs[max(i - 1, 0) : i + 1]:
            if a < hi and lo < b:
                _twice(self.path, op, role, step, seq, max(a, lo), a, b)
        # merge with touching neighbours: a decode loop keeps one run per key
        if i < len(runs) and runs[i][0] == hi:
            hi = runs.pop(i)[1]
        if i > 0 and runs[i - 1][1] == lo:
            lo = runs.pop(i - 1)[0]
            i -= 1
        runs.insert(i, (lo, hi))

    def _pad(self, arrays, rows=1):
        """The pad length that puts the next batch's first tensor bytes on an ALIGNMENT boundary of the file.

        The encoded message's length depends only on the pad (every other field of a batch of this schema is
        fixed-size) and the data's offsets buffer on the row count, so each (first?, pad, rows) prefix is
        measured once on a scratch stream.
        """
        first = self.n == 0
        start = self._sink.tell()
        key = (first, start % ALIGNMENT, rows)  # the answer depends on these alone: found once each
        pad = self._pad_at.get(key)
        if pad is None:
            if len(self._pad_at) > _CACHE:
                self._pad_at.clear()
                self._prefix.clear()
            pad = self._pad_at[key] = self._find_pad(arrays, first, start, rows)
        return pad

    def _find_pad(self, arrays, first, start, rows):
        cache = self._prefix if first else _PREFIX  # a first batch's prefix holds this file's schema message
        for pad in range(2 * ALIGNMENT):
            key = (pad, rows)
            got = cache.get(key)
            if got is None:
                if len(cache) > _CACHE:
                    cache.clear()
                got = cache[key] = self._measure(arrays, first, pad)
            if (start + got) % ALIGNMENT == 0:
                return pad
        return 0

    def _measure(self, arrays, first, pad):
        marker = secrets.token_bytes(32)
        sink = pa.BufferOutputStream()
        w = ipc.new_file(sink, self._schema)
        rows = len(arrays[0])
        b = pa.RecordBatch.from_arrays([pa.array([marker] + [b""] * (rows - 1), pa.large_binary())] + arrays,
                                       schema=self._schema)
        start = 0
        if not first:
            w.write_batch(b)
            start = sink.tell()
        w.write_batch(b, custom_metadata={KEY_PAD: " " * pad})
        w.close()
        buf = sink.getvalue().to_pybytes()
        return buf.index(marker, start) - start

    def close(self):
        """Finishes the file: footer, fsync, then it appears under its final name."""
        if not self._finish():
            return
        try:
            self._w.close()
            self._sink.close()
            _fsync(self._tmp)
            _publish(self._tmp, self.path, self.overwrite)
        except BaseException:
            _remove(self._tmp)
            raise
        try:
            _fsync(os.path.dirname(os.path.abspath(self.path)))
        except OSError:
            pass  # a directory that cannot be opened or synced (some file systems): the file is there

    def abort(self):
        """Discards the file being written (safe after close and twice)."""
        if not self._finish():
            return
        for end in (self._w.close, self._sink.close):
            try:
                end()
            except Exception:
                pass
        _remove(self._tmp)

    def _finish(self):
        """True the first time close or abort asks: the file is ended once."""
        if self._closed:
            return False
        self._done = self._closed = True
        return True

    def end_writes(self):
        """Refuses further prepares (close is on its way; emits of prepared tensors still go through)."""
        self._done = True


class Rows:
    """The header of many 1-D tensors written as one record batch (Writer.prepare_rows); n tensors."""

    __slots__ = ("step", "dtype", "rank", "ops", "roles", "index", "seq", "pos", "ntok", "n", "claims", "_key")

    def __init__(self, step, dtype, rank, ops, roles, index, seq, pos, ntok):
        self.step, self.dtype, self.rank = step, dtype, rank
        self.ops, self.roles, self.index = ops, roles, index  # [(value, repeats)] in tensor order
        self.seq, self.pos, self.ntok = seq, pos, ntok
        self.n = int(seq.size)
        self.claims = None  # prepare_rows: its claims when they were its alone ({(op, role, rank): runs})
        self._key = None

    def key(self):
        """What the columns but the step depend on (hashable): equal keys give equal arrays() but column 0."""
        if self._key is None:
            self._key = (self.dtype, self.rank, tuple(self.ops), tuple(self.roles), tuple(self.index),
                         self.seq.tobytes(), self.pos.tobytes(), self.ntok.tobytes())
        return self._key

    def again(self, step):
        """The same header at step (the arrays shared: neither is changed after it is made)."""
        self.key()
        r = Rows.__new__(Rows)
        for f in Rows.__slots__:
            setattr(r, f, getattr(self, f))
        r.step = step
        return r

    def arrays(self):
        """Columns 1.. of the batch (schema order after data), built from numpy buffers (no per-row Python)."""
        k = self.n
        idx = np.repeat(np.array([v for v, _ in self.index], dtype=np.int32), [m for _, m in self.index])
        return [
            pa.array(np.full(k, self.step, dtype=np.int64)),
            pa.array(self.seq),
            pa.array(self.pos),
            pa.array(self.ntok),
            _strings(self.ops, k),
            pa.array(idx),
            _strings(self.roles, k),
            _strings([(self.dtype, k)], k),
            pa.ListArray.from_arrays(pa.array(np.arange(k + 1, dtype=np.int32)), pa.array(self.ntok)),
            pa.array(np.full(k, self.rank, dtype=np.int32)),
            pa.array(np.full(k, -1, dtype=np.int32)),
            pa.array(np.zeros(k, dtype=np.int64)),
            pa.ListArray.from_arrays(pa.array(np.zeros(k + 1, dtype=np.int32)), pa.array([], type=_I64)),
        ]


def _strings(pairs, k):
    """The string array of k values given as [(value, repeats)], made from its offsets and bytes."""
    enc = [(v.encode(), m) for v, m in pairs]
    lens = np.repeat(np.array([len(b) for b, _ in enc], dtype=np.int64), [m for _, m in enc])
    offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] >= 1 << 31:
        raise ValueError(f"bitalign_capture: {offsets[-1]} bytes of names in one record batch")
    data = b"".join(b * m for b, m in enc)
    return pa.StringArray.from_buffers(k, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))


def _twice(path, op, role, step, seq, at, a, b):
    raise ValueError(
        f"bitalign_capture: {path}: {op} [{role}] step {step} seq {seq} pos {at} written twice "
        f"(positions {a}..{b - 1} already are; a second sequence under seq id {seq}? give each "
        "sequence its own seq_ids)"
    )


def _merge_runs(path, op, role, step, runs):
    """runs [(seq, pos, end)] sorted and merged where they touch; raises (naming op) where two overlap."""
    out = []
    for q, lo, hi in sorted(runs):
        if out and out[-1][0] == q:
            _, a, b = out[-1]
            if lo < b:
                _twice(path, op, role, step, q, lo, a, b)
            if lo == b:
                out[-1] = (q, a, hi)
                continue
        out.append((q, lo, hi))
    return out


def payload(data):
    """The bytes of write's data (a numpy array or bytes-like) for emit: a little-endian contiguous array's
    own memory (no copy), else a converted copy."""
    if isinstance(data, np.generic):
        data = np.asarray(data)
    if isinstance(data, np.ndarray):
        arr = np.ascontiguousarray(data)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return arr.reshape(-1).view(np.uint8)
    return bytes(data)


def _publish(tmp, path, overwrite):
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # fails atomically if path exists
    except FileExistsError:
        raise FileExistsError(f"bitalign_capture: {path}: file exists (pass overwrite=True to replace it)") from None
    except OSError:
        if os.path.lexists(path):
            raise FileExistsError(f"bitalign_capture: {path}: file exists (pass overwrite=True)") from None
        os.rename(tmp, path)
        return
    os.unlink(tmp)


_sfr = []


def _sync_file_range():
    """libc's sync_file_range(int, off64_t, off64_t, unsigned) through ctypes (which releases the GIL), or None."""
    if not _sfr:
        f = None
        try:
            import ctypes
            import ctypes.util
            import sys

            if sys.platform.startswith("linux"):
                f = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).sync_file_range
                f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                f.restype = ctypes.c_int
        except (OSError, AttributeError):
            f = None
        _sfr.append(f)
    return _sfr[0]


def _remove(p):
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass


def _fsync(path):
    """Flushes the file or directory path to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path):
    """(meta dict, [tensor dicts]) of a capture file written by any bitalign writer (for tests and tools).

    Each tensor dict has the columns by name, "data" as bytes and "array" as a numpy array of its dtype's
    storage type (bf16 as uint16 bits) in its shape.
    """
    with pa.memory_map(os.fspath(path), "r") as src:
        r = ipc.open_file(src)
        md = r.schema.metadata or {}
        if md.get(KEY_FORMAT.encode()) != FORMAT_NAME.encode():
            raise ValueError(f"bitalign_capture: {path}: not a bitalign capture (no {KEY_FORMAT})")
        meta = json.loads(md[KEY_META.encode()])
        out = []
        for i in range(r.num_record_batches):
            for row in r.get_batch(i).to_pylist():  # one row a batch, or many (prepare_rows)
                row["array"] = np.frombuffer(row["data"], dtype=dtypes.storage(row["dtype"])).reshape(row["shape"])
                out.append(row)
    return meta, out
