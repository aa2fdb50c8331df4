"""Logprob tables: the per-token log-probabilities an RL framework already has, written for `bitalign diff`.

write_logprobs(path, side, seq_ids, tokens, logprobs) takes torch tensors or numpy arrays, padded (B, L) with a
mask or ragged (one 1-D array per sequence), and writes one row per sequence (seq, start, tokens, logprobs
lists) -- or, when a mask leaves gaps inside a row, one row per token (seq, pos, token, logprob). The format
follows the extension: .parquet (pyarrow), .arrow/.feather/.ipc (Arrow IPC file, pyarrow), .jsonl (the
standard library only). Positions follow docs/rl-metrics.md: the row's `start` (or `pos`) is the position of
the token in its sequence; without `start` the positions count generated tokens (0 = the first response
token) and the file says so (schema metadata bitalign.logprobs.positions = "generated"). The file is written
atomically and an existing one is replaced only with overwrite=True.
"""

import json
import math
import os
import tempfile

import numpy as np

from .writer import _fsync, _publish, _remove

# Schema metadata keys of a logprob table (never bitalign.format: that marks a capture).
KEY_SIDE = "bitalign.logprobs.side"
KEY_POSITIONS = "bitalign.logprobs.positions"


def _np(x, dtype=None):
    """A torch tensor (any device, bf16 included) or array-like as a numpy array."""
    if hasattr(x, "detach"):
        x = x.detach()
        if dtype is not None and str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        x = x.cpu().numpy()
    a = np.asarray(x)
    return a if dtype is None else a.astype(dtype, copy=False)


def _rows(x, dtype, what, n=None):
    """Rows of a padded (B, L) array or a list of 1-D arrays, as a list of numpy arrays."""
    if isinstance(x, (list, tuple)) and (len(x) == 0 or np.ndim(_np(x[0])) == 1):
        rows = [_np(r, dtype).reshape(-1) for r in x]
    else:
        a = _np(x, dtype)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2:
            raise ValueError(f"bitalign_capture: write_logprobs: {what} has shape {a.shape}, want (B, L) or a list of 1-D arrays")
        rows = list(a)
    if n is not None and len(rows) != n:
        raise ValueError(f"bitalign_capture: write_logprobs: {len(rows)} rows of {what} for {n} sequences")
    return rows


def write_logprobs(path, side, seq_ids, tokens, logprobs, *, mask=None, start=None, overwrite=False):
    """Writes a logprob table for `bitalign diff` / `bitalign open`; returns path.

    side: "trainer" or "sampler" (any name; stored in the metadata). seq_ids: one id per sequence (>= 0),
    the same ids the other side uses. tokens: the scored token ids, (B, L) or a list of 1-D arrays (None:
    ids unknown). logprobs: their log-probabilities, the same shape (float32 is kept bit for bit; bf16/f16
    widen exactly; float64 rounds to nearest float32). mask: (B, L) truthy where a token is real (verl's
    response_mask). start: the position of column 0 of each row in its sequence (an int or one per row), e.g.
    the prompt length for response-only tensors; None: positions count generated tokens.
    """
    path = os.fspath(path)
    ids = _np(seq_ids, np.int64).reshape(-1)
    if ids.size and ids.min() < 0:
        raise ValueError("bitalign_capture: write_logprobs: seq_ids must be >= 0")
    if len(set(ids.tolist())) != ids.size:
        raise ValueError("bitalign_capture: write_logprobs: seq_ids repeat an id")
    lps = _rows(logprobs, np.float32, "logprobs", ids.size)
    toks = None if tokens is None else _rows(tokens, np.int64, "tokens", ids.size)
    masks = None if mask is None else [r.astype(bool) for r in _rows(mask, None, "mask", ids.size)]
    starts = np.zeros(ids.size, np.int64) if start is None else np.broadcast_to(_np(start, np.int64).reshape(-1), ids.shape)
    positions = "generated" if start is None else "absolute"

    seqs, firsts, tok_rows, lp_rows, gaps = [], [], [], [], False
    for i, sid in enumerate(ids.tolist()):
        lp = lps[i]
        tk = None if toks is None else toks[i]
        if tk is not None and tk.shape != lp.shape:
            raise ValueError(f"bitalign_capture: write_logprobs: sequence {sid}: {tk.size} tokens but {lp.size} logprobs")
        cols = np.arange(lp.size)
        if masks is not None:
            if masks[i].shape != lp.shape:
                raise ValueError(f"bitalign_capture: write_logprobs: sequence {sid}: mask shape {masks[i].shape}, logprobs {lp.shape}")
            cols = np.nonzero(masks[i])[0]
            if cols.size and cols[-1] - cols[0] + 1 != cols.size:
                gaps = True
        seqs.append(sid)
        firsts.append(cols + int(starts[i]))
        lp_rows.append(lp[cols])
        tok_rows.append(None if tk is None else tk[cols])
    if toks is not None and any(int(t.min(initial=0)) < 0 or int(t.max(initial=0)) > 2**31 - 1 for t in tok_rows):
        raise ValueError("bitalign_capture: write_logprobs: token ids must be in [0, 2^31)")

    ext = os.path.splitext(path)[1].lower()
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".bitalign-", suffix=ext, dir=d)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # a regular file's mode, not mkstemp's 0600
    try:
        if ext == ".jsonl":
            _write_jsonl(tmp, seqs, firsts, tok_rows, lp_rows, gaps)
        elif ext in (".parquet", ".arrow", ".feather", ".ipc"):
            _write_arrow(tmp, ext, side, positions, seqs, firsts, tok_rows, lp_rows, gaps)
        else:
            raise ValueError(f"bitalign_capture: write_logprobs: {path}: unknown extension (use .parquet, .arrow or .jsonl)")
        _fsync(tmp)
        _publish(tmp, path, overwrite)
    except BaseException:
        _remove(tmp)
        raise
    return path


def _write_arrow(tmp, ext, side, positions, seqs, pos_rows, tok_rows, lp_rows, per_token):
    import pyarrow as pa

    md = {KEY_SIDE: str(side), KEY_POSITIONS: positions}
    if per_token:
        n = [r.size for r in lp_rows]
        cols = {
            "seq": pa.array(np.repeat(np.asarray(seqs, np.int64), n)),
            "pos": pa.array(np.concatenate(pos_rows).astype(np.int64) if pos_rows else np.zeros(0, np.int64)),
        }
        if tok_rows and tok_rows[0] is not None:
            cols["token"] = pa.array(np.concatenate(tok_rows).astype(np.int32))
        cols["logprob"] = pa.array(np.concatenate(lp_rows) if lp_rows else np.zeros(0, np.float32))
    else:
        cols = {
            "seq": pa.array(np.asarray(seqs, np.int64)),
            "start": pa.array(np.asarray([int(p[0]) if p.size else 0 for p in pos_rows], np.int64)),
        }
        if tok_rows and tok_rows[0] is not None:
            cols["tokens"] = pa.array([t.astype(np.int32) for t in tok_rows], type=pa.list_(pa.int32()))
        cols["logprobs"] = pa.array(lp_rows, type=pa.list_(pa.float32()))
    table = pa.table(cols).replace_schema_metadata(md)
    if ext == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, tmp)
    else:
        import pyarrow.feather as feather

        feather.write_feather(table, tmp, compression="uncompressed")


def _jfloat(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _write_jsonl(tmp, seqs, pos_rows, tok_rows, lp_rows, per_token):
    # float(np.float32) is exact in float64 and repr round-trips it, so the Go reader gets the same float32.
    with open(tmp, "w") as f:
        for sid, pos, tok, lp in zip(seqs, pos_rows, tok_rows, lp_rows):
            if per_token:
                for k in range(lp.size):
                    row = {"seq": sid, "pos": int(pos[k]), "logprob": _jfloat(lp[k])}
                    if tok is not None:
                        row["token"] = int(tok[k])
                    f.write(json.dumps(row) + "\n")
                continue
            row = {"seq": sid, "start": int(pos[0]) if pos.size else 0}
            if tok is not None:
                row["tokens"] = [int(t) for t in tok]
            row["logprobs"] = [_jfloat(v) for v in lp]
            f.write(json.dumps(row) + "\n")
