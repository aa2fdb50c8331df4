"""Which sequence and position each token of a forward pass belongs to.

A forward's activations have a leading token layout: (B, S) for a padded batch, (N,) or (1, N) for packed
sequences. Flattened row-major, token i of the forward is position pos[i] of sequence seq[i], or is padding
(seq[i] == -1). A Layout cuts the flattened tokens into segments: maximal runs of consecutive positions of one
sequence, each of which becomes one tensor per op in the capture (Pos = first position, NTok = run length).

Position p of a sequence is its token index p (docs/design.md), whatever positions the model itself used:
- padded batches: p counts the attention mask's ones, so left and right padding give the same positions, and a
  decode step whose mask covers past + current tokens gets the past length added;
- packed sequences: cu_seqlens (cumulative lengths, as flash-attention's varlen API and vLLM take them) cut the
  tokens into sequences; position_ids that restart (p != previous + 1) do the same where no cu_seqlens are given.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """Tokens [start, start+n) of the flattened forward are positions [pos, pos+n) of sequence seq."""

    seq: int
    pos: int
    start: int
    n: int


class Layout:
    """The token layout of one forward. seq and pos are int64 arrays over the flattened tokens."""

    def __init__(self, seq, pos, tokens=None, shape=None):
        self.seq = np.asarray(seq, dtype=np.int64).reshape(-1)
        self.pos = np.asarray(pos, dtype=np.int64).reshape(-1)
        self.shape = tuple(shape) if shape is not None else (1, self.seq.size)  # (B, S) of the forward
        if self.shape[0] * self.shape[1] != self.seq.size:
            raise ValueError(f"bitalign_capture: layout: shape {self.shape} for {self.seq.size} tokens")
        if self.seq.shape != self.pos.shape:
            raise ValueError("bitalign_capture: layout: seq and pos differ in length")
        self.tokens = None if tokens is None else np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self.tokens is not None and self.tokens.shape != self.seq.shape:
            raise ValueError(f"bitalign_capture: layout: {self.tokens.size} token ids for {self.seq.size} positions")
        self.segments = _runs(self.seq, self.pos)

    @property
    def n_flat(self):
        """Tokens in the flattened forward, padding included."""
        return int(self.seq.size)

    def tail(self, k):
        """The layout of the last k tokens of every row (what a model that keeps only the last k logits
        per row, as generate's logits_to_keep does, computes on)."""
        B, S = self.shape
        if not 0 < k <= S:
            raise ValueError(f"bitalign_capture: layout: tail {k} of {S} tokens")
        cut = lambda a: None if a is None else a.reshape(B, S)[:, S - k :]
        return Layout(cut(self.seq), cut(self.pos), cut(self.tokens), (B, k))

    def lasts(self):
        """The layout of one token per segment, its last: what a logits processor that keeps each sequence's
        last position (vLLM's) computes on."""
        last = np.array([s.start + s.n - 1 for s in self.segments], dtype=np.int64)
        tok = None if self.tokens is None else self.tokens[last]
        return Layout(self.seq[last], self.pos[last], tok, (last.size, 1))

    def next_token(self):
        """For each flat token, the id of the token one position later in the same forward, or -1."""
        nxt = np.full(self.seq.size, -1, dtype=np.int64)
        if self.tokens is None:
            return nxt
        for s in self.segments:
            nxt[s.start : s.start + s.n - 1] = self.tokens[s.start + 1 : s.start + s.n]
        return nxt

    def valid_index(self):
        """Flat indices of the recorded (non-padding) tokens, in segment order."""
        if not self.segments:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(s.start, s.start + s.n) for s in self.segments])


def _runs(seq, pos):
    """The segments of the flat tokens, found with numpy (no Python loop over tokens): a run starts at a valid
    token whose predecessor is padding, another sequence or not the position before it, and ends before the next
    token that does not continue it."""
    n = seq.size
    if n == 0:
        return []
    valid = seq >= 0
    brk = np.ones(n, dtype=bool)  # token i does not continue token i - 1
    brk[1:] = (seq[1:] != seq[:-1]) | (pos[1:] != pos[:-1] + 1) | ~valid[:-1]
    starts = np.nonzero(valid & brk)[0]
    stops = np.append(np.nonzero(brk | ~valid)[0], n)  # where a run cannot go on
    ends = stops[np.searchsorted(stops, starts, side="right")]
    return [Segment(int(q), int(p), int(a), int(b - a))
            for q, p, a, b in zip(seq[starts].tolist(), pos[starts].tolist(), starts.tolist(), ends.tolist())]


def _rows(a, name, B, width=None):
    a = np.asarray(a)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or a.shape[0] != B or (width is not None and a.shape[1] != width):
        want = f"({B}, {width})" if width is not None else f"({B}, K)"
        raise ValueError(f"bitalign_capture: layout: {name} has shape {tuple(a.shape)}, want {want}")
    return a


def build(
    shape,
    *,
    tokens=None,
    attention_mask=None,
    position_ids=None,
    cache_position=None,
    cu_seqlens=None,
    seq_ids=None,
    record_mask=None,
):
    """The Layout of a forward whose input ids have shape (B, S) or (N,).

    seq_ids names the sequences: one id per batch row for padded batches, one per packed sequence (in order)
    for packed ones; by default 0, 1, 2, ... record_mask (B, S), if given, leaves out the tokens where it is
    False (they are computed, not recorded).
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) == 1:
        shape = (1, shape[0])
    if len(shape) != 2:
        raise ValueError(f"bitalign_capture: layout: input shape {shape}, want (B, S) or (N,)")
    B, S = shape
    if cu_seqlens is not None:
        seq, pos = _packed_cu(B, S, cu_seqlens, position_ids, seq_ids)
    elif attention_mask is not None:
        mask = _rows(attention_mask, "attention_mask", B) != 0
        if mask.shape[1] < S:
            raise ValueError(f"bitalign_capture: layout: attention_mask covers {mask.shape[1]} tokens, the input {S}")
        # token index = ones before it in the mask (past and current tokens); padding is never a position.
        pos = (np.cumsum(mask, axis=1) - 1)[:, -S:]
        valid = mask[:, -S:]
        ids = _ids(seq_ids, B, "batch rows")
        seq = np.where(valid, ids[:, None], -1)
    elif position_ids is not None:
        seq, pos = _packed_restarts(B, S, _rows(position_ids, "position_ids", B, S), seq_ids)
    else:
        if cache_position is not None:
            cp = np.asarray(cache_position, dtype=np.int64).reshape(-1)
            if cp.size != S:
                raise ValueError(f"bitalign_capture: layout: cache_position has {cp.size} entries, want {S}")
            pos = np.broadcast_to(cp, (B, S))
        else:
            pos = np.broadcast_to(np.arange(S, dtype=np.int64), (B, S))
        ids = _ids(seq_ids, B, "batch rows")
        seq = np.broadcast_to(ids[:, None], (B, S))
    seq = np.array(seq, dtype=np.int64).reshape(B, S)
    if record_mask is not None:
        seq[~(_rows(record_mask, "record_mask", B, S).astype(bool))] = -1
    tok = None
    if tokens is not None:
        tok = np.asarray(tokens).reshape(-1)
        if tok.size != B * S:
            raise ValueError(f"bitalign_capture: layout: {tok.size} token ids, want {B * S}")
    return Layout(seq, pos, tok, (B, S))


def _ids(seq_ids, n, what):
    if seq_ids is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(seq_ids, dtype=np.int64).reshape(-1)
    if ids.size != n:
        raise ValueError(f"bitalign_capture: layout: {ids.size} seq_ids for {n} {what}")
    if (ids < 0).any():
        raise ValueError("bitalign_capture: layout: seq_ids must be >= 0")
    return ids


def _packed_cu(B, S, cu_seqlens, position_ids, seq_ids):
    if B != 1:
        raise ValueError(f"bitalign_capture: layout: cu_seqlens needs a packed (1, N) input, got ({B}, {S})")
    cu = np.asarray(cu_seqlens, dtype=np.int64).reshape(-1)
    if cu.size < 2 or cu[0] != 0 or (np.diff(cu) < 0).any() or cu[-1] > S:
        raise ValueError(f"bitalign_capture: layout: cu_seqlens {cu.tolist()} do not cut {S} tokens")
    ids = _ids(seq_ids, cu.size - 1, "packed sequences")
    seq = np.full(S, -1, dtype=np.int64)
    pos = np.zeros(S, dtype=np.int64)
    for k in range(cu.size - 1):
        a, b = int(cu[k]), int(cu[k + 1])
        seq[a:b] = ids[k]
        pos[a:b] = np.arange(b - a)
    if position_ids is not None:
        # chunked prefill and decode steps start mid-sequence: the positions say where.
        pos = _rows(position_ids, "position_ids", 1, S).reshape(-1).astype(np.int64)
    return seq.reshape(1, S), pos.reshape(1, S)


def _packed_restarts(B, S, position_ids, seq_ids):
    pos = position_ids.astype(np.int64)
    starts = np.ones((B, S), dtype=bool)
    starts[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
    n = int(starts.sum())
    ids = _ids(seq_ids, n, "sequences (rows, or runs of consecutive position_ids)")
    seq = ids[np.cumsum(starts.reshape(-1)) - 1].reshape(B, S)
    return seq, pos
