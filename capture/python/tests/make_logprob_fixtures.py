"""Writes testdata/logprobs: a trainer table by pyarrow (one row per token, Parquet), the sampler's by
bitalign_capture.write_logprobs (one row per sequence: Parquet and JSONL), and expected.json, the NumPy
reference of their metrics (rl_reference.py). Run from a checkout: python capture/python/tests/make_logprob_fixtures.py
"""

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_HERE), _HERE]

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import bitalign_capture as bc
import rl_reference as ref

OUT = os.path.join(_HERE, "..", "..", "..", "testdata", "logprobs")


def main():
    os.makedirs(OUT, exist_ok=True)
    ids, tok, lp, tok2, lp2, mask, mask2 = ref.pair()
    n, L = tok.shape
    # the trainer by pyarrow: one row per token, absolute positions 100.. (a 100-token prompt), shuffled rows
    order = np.random.default_rng(1).permutation(n * L)
    seq = np.repeat(ids, L)[order]
    pos = np.tile(np.arange(L) + 100, n)[order]
    t = pa.table({"sample_id": pa.array(seq, pa.int64()), "position": pa.array(pos, pa.int32()),
                  "token": pa.array(tok.reshape(-1)[order], pa.int64()), "old_log_prob": pa.array(lp.reshape(-1)[order], pa.float32())})
    pq.write_table(t, os.path.join(OUT, "trainer.parquet"))
    for ext in ("parquet", "jsonl"):
        bc.write_logprobs(os.path.join(OUT, "sampler." + ext), "sampler", ids, tok2, lp2, mask=mask2, start=100, overwrite=True)
    a = {int(s): (np.arange(L) + 100, tok[i], lp[i]) for i, s in enumerate(ids)}
    b = {int(s): ((np.arange(L) + 100)[mask2[i]], tok2[i][mask2[i]], lp2[i][mask2[i]]) for i, s in enumerate(ids)}
    overall, seqs = ref.compare(a, b)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"overall": overall, "sequences": {str(k): v for k, v in seqs.items()}}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
