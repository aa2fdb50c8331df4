"""NumPy reference of the logprob metrics (docs/rl-metrics.md), for the tests and the committed fixture.

Everything is computed in float64 from the float32 values, summing over all compared tokens at once (NumPy's
pairwise summation); bitalign sums per sequence in position order, then over sequences in id order. The two
agree to float64 rounding (relative 1e-12 is asserted; the float32 inputs are identical bit for bit).
"""

import numpy as np


def compare(a, b, is_low=0.5, is_high=2.0):
    """a, b: {seq id: (positions, tokens or None, float32 logprobs)} -> (overall dict, {seq: dict})."""
    seqs = {}
    all_d, all_a, all_b, equal_n = [], [], [], 0
    for sid in sorted(set(a) & set(b)):
        pa, ta, la = a[sid]
        pb, tb, lb = b[sid]
        common, ia, ib = np.intersect1d(pa, pb, return_indices=True)
        keep = np.ones(common.size, bool)
        if ta is not None and tb is not None:
            keep = ta[ia] == tb[ib]
        xa = la[ia][keep].astype(np.float32)
        xb = lb[ib][keep].astype(np.float32)
        eq = xa.view(np.uint32) == xb.view(np.uint32)
        d = xa.astype(np.float64) - xb.astype(np.float64)
        d[eq] = 0.0
        s = _stats(d, xa, xb, is_low, is_high)
        s["tokens"] = int(xa.size)
        s["equal_tokens"] = int(eq.sum())
        diff_pos = common[keep][~eq]
        missing = np.setxor1d(pa, pb)
        firsts = [p for p in (diff_pos.min() if diff_pos.size else None, missing.min() if missing.size else None,
                              common[~keep].min() if (~keep).any() else None) if p is not None]
        s["first_diff_pos"] = int(min(firsts)) if firsts else None
        seqs[sid] = s
        all_d.append(d)
        all_a.append(xa)
        all_b.append(xb)
        equal_n += int(eq.sum())
    d = np.concatenate(all_d)
    xa = np.concatenate(all_a)
    xb = np.concatenate(all_b)
    o = _stats(d, xa, xb, is_low, is_high)
    o["tokens"] = int(d.size)
    o["equal_tokens"] = equal_n
    return o, seqs


def _stats(d, xa, xb, lo, hi):
    r = np.exp(d)
    n = d.size
    return {
        "max_abs_diff": float(np.abs(d).max()) if n else 0.0,
        "mean_abs_diff": float(np.abs(d).mean()) if n else 0.0,
        "mean_diff": float(d.mean()) if n else 0.0,
        "kl_k1": float((-d).mean()) if n else 0.0,
        "kl_k2": float((d * d / 2).mean()) if n else 0.0,
        "kl_k3": float((r - 1 - d).mean()) if n else 0.0,
        "is_ratio_min": float(r.min()) if n else 0.0,
        "is_ratio_max": float(r.max()) if n else 0.0,
        "is_ratio_mean": float(r.mean()) if n else 0.0,
        "is_outside_frac": float(((r < lo) | (r > hi)).mean()) if n else 0.0,
        "chi2": float((r * r).mean() - 1) if n else 0.0,
        "token_mult_prob_error": float(np.exp(np.abs(d)).mean()) if n else 0.0,
        "rollout_train_prob_diff": float(np.abs(np.exp(xa.astype(np.float64)) - np.exp(xb.astype(np.float64))).mean()) if n else 0.0,
        "ppl_a": float(np.exp(-xa.astype(np.float64).mean())) if n else 0.0,
        "ppl_b": float(np.exp(-xb.astype(np.float64).mean())) if n else 0.0,
        "log_ratio_sum": float(d.sum()),
    }


def pair(seed=3, n_seqs=12, length=40):
    """A trainer/sampler pair with every kind of difference the metrics see: ULP-level noise, a 1e-3 shift, one
    large outlier (an importance ratio outside [0.5, 2]), a sequence with a token id that differs, one whose
    sampler side lacks its last 5 tokens, and identical sequences."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n_seqs, dtype=np.int64) * 7 + 3
    tok = rng.integers(0, 32000, (n_seqs, length)).astype(np.int64)
    lp = (-rng.exponential(1.5, (n_seqs, length))).astype(np.float32)
    lp2 = lp.copy()
    noisy = rng.random((n_seqs, length)) < 0.3
    bits = lp2.view(np.uint32)
    bits[noisy] += rng.integers(1, 8, noisy.sum()).astype(np.uint32)
    lp2[2, 10:] = (lp2[2, 10:].astype(np.float64) + 1e-3).astype(np.float32)
    lp2[5, 17] = np.float32(lp2[5, 17] - 1.2)
    tok2 = tok.copy()
    tok2[7, 30] += 1
    lp2[0] = lp[0]
    lp2[9] = lp[9]
    mask = np.ones((n_seqs, length), bool)
    mask2 = mask.copy()
    mask2[11, length - 5:] = False
    return ids, tok, lp, tok2, lp2, mask, mask2
