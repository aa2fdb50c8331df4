"""Recording cost: a forward with and without the recorder, and the capture's size and write rate.

python3 capture/python/tests/bench_record.py [cpu|cuda]
"""

import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model  # noqa: E402


def main(device):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    m = hf_model("llama", dt, vocab=8192, hidden=1024, intermediate=2816, layers=4, heads=16, kv_heads=4,
                 positions=512).to(device)
    B, S = 8, 128
    ids = torch.randint(1, 8192, (B, S), generator=torch.Generator().manual_seed(0)).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        m(input_ids=ids)
        sync()
        t0 = time.perf_counter()
        for _ in range(3):
            m(input_ids=ids)
        sync()
        plain = (time.perf_counter() - t0) / 3
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            with bc.record(m, os.path.join(d, "c.arrow"), "trainer") as rec:
                m(input_ids=ids)
                sync()
            rec_t = time.perf_counter() - t0
            size = os.path.getsize(os.path.join(d, "c.arrow"))
    print(
        f"{device} {dt}: batch {B}x{S}, 4 layers, hidden 1024: forward {plain * 1e3:.1f} ms, recorded forward "
        f"{rec_t * 1e3:.1f} ms, {rec.written} tensors, {size / 2**20:.1f} MiB, {size / 2**20 / rec_t:.0f} MiB/s"
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
