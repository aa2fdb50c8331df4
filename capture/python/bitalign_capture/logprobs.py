"""Log-probabilities of the next token, which a forward may not know yet.

logprobs at position p is log p(token at p+1 | tokens <= p) (docs/design.md). Inside one forward, positions
whose next token is in the same input are resolved at once; the last position of each segment waits for its
next token: in the next forward of that sequence (a sampler's decode step feeds it back), or from
Recorder.sampled(). Pending keeps one full-vocabulary log-softmax row per waiting sequence, so memory is bounded
by the number of sequences in flight, and a row whose next token never comes is dropped at close.
"""

import numpy as np


class Pending:
    """Log-softmax rows (float32 [V]) waiting for the token that follows them, keyed by sequence id."""

    def __init__(self):
        self._rows = {}

    def __len__(self):
        return len(self._rows)

    def hold(self, seq, pos, row):
        """Keeps row, the log-softmax at position pos of sequence seq, until its next token is known: the
        float32 [V] values, or a callable giving them (read only when a token resolves them)."""
        self._rows[int(seq)] = (int(pos), row if callable(row) else np.asarray(row, dtype=np.float32))

    def resolve(self, seq, pos, token):
        """token is at position pos of seq: returns (pos-1, logprob) if a row waited for it, else None.

        A waiting row of seq at any other position is dropped (its sequence moved on without it).
        """
        held = self._rows.pop(int(seq), None)
        if held is None:
            return None
        p, row = held
        if p != int(pos) - 1:
            return None
        if callable(row):
            row = np.asarray(row(), dtype=np.float32)
        if not 0 <= int(token) < row.size:
            raise ValueError(f"bitalign_capture: token id {token} outside the vocabulary of {row.size}")
        return p, np.float32(row[int(token)])

    def take(self, seq, token):
        """token follows the waiting row of seq, whatever its position: (pos, logprob), or None if none waits."""
        held = self._rows.get(int(seq))
        if held is None:
            return None
        return self.resolve(seq, held[0] + 1, token)

    def clear(self):
        self._rows.clear()


def log_softmax(x):
    """Reference float32 log-softmax over the last axis (numpy; the recorder uses torch's on the device)."""
    x = np.asarray(x, dtype=np.float32)
    m = x.max(axis=-1, keepdims=True)
    z = np.log(np.exp(x - m).sum(axis=-1, keepdims=True, dtype=np.float32))
    return (x - m - z).astype(np.float32)
