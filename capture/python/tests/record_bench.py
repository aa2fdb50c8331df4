"""Recording cost at size (issue 15): a model's plain forward, the forward recorded as fingerprints and the
forward recorded in full, timed in one call, with the captures' sizes, their ratio and the full recording's
write rate; and checks that the background writer's captures are the synchronous writer's bytes.

    python3 capture/python/tests/record_bench.py OUT [--device cuda|cpu] [--tiny] [--iters 5] [--full-iters 3]
        [--warmup 2] [--batch 4] [--tokens 256] [--pairs 10] [--no-baseline] [--no-full] [--profile] [--bin bitalign]

The model is a random bf16 Hugging Face Qwen2 of Qwen2-1.5B's shapes (hidden 1536, 28 layers, 12/2 heads,
intermediate 8960, vocabulary 151936, tied; eager attention, as tinymodels builds it) over batch × tokens random
token ids; --tiny a small one (CPU tests). Each forward is timed from the call to the end of a device
synchronisation (wall, what the caller waits for; its median over the iterations) and with CUDA events (GPU).

- plain: the forward without hooks (warm-up forwards first).
- fingerprint: one recorder (mode="fingerprint", every op) over `iters` forwards (steps 0..iters-1): the median
  recorded forward back to back (the writer thread writing the previous forward's tensors meanwhile), its
  overhead over plain, the recorder's whole time (start to close: the writer thread's work included) per
  forward, and the median forward started with the writer thread idle (rec.flush() between forwards).
- interleaved (the goal's figure): a copy of the model, never recorded, and the recorded model run by turns,
  `pairs` forwards each, medians: the plain forward at the same moments as the recorded one (this host's forward
  time drifts by tens of per cent between phases of one run), each started with the writer thread idle (the
  writing left after a recorded forward returned, drained untimed, is its drain_ms), for the fingerprint
  recorder and for watch only.
- watch only: a fingerprint recorder whose ops record nothing but tokens (ops=["tokens"]): every module watched,
  nothing held: the cost of watching alone.
- full: one recorder over `full-iters` forwards: the median forward, and bytes written / wall time from the
  recorder's start to the end of close, which fsyncs the file (GB/s = 1e9 bytes a second). Files in OUT (local
  disk), removed after.
- baseline (unless --no-baseline): one forward recorded with background=False (every tensor copied to the host and
  written from its hook: the recorder before the writer thread), full and fingerprint.
- disk anchors: as many bytes as the full capture written with os.write (64 MiB calls) and fsync'd, once with all
  write-out left to the fsync (dd conv=fsync) and once with it started every 256 MiB (as the capture writer does).
- checks: a background capture of one forward equals the background=False capture of the same forward byte for
  byte (full and fingerprint; on the GPU when the forward is deterministic, which the script tests), the
  fingerprints of the fingerprint capture are those numpy computes from the full capture's rows, the kernel's
  fingerprint capture equals the torch expression's (when the kernel is the backend: fingerprint_backend), and
  `bitalign diff` (--bin, default $BITALIGN_BIN; skipped without one) of the fingerprint capture against the full
  one exits 0.

--no-full: no full recording timed and no disk anchors. RECORD_BENCH_PACKAGE=DIR: bitalign_capture from DIR
(another commit's capture/python) instead of this one, for a before/after figure with the same measurements.
--profile: one more fingerprint recording under cProfile, its top functions (by own time and by cumulative
time) in OUT/record-profile.txt. Writes OUT/record-bench.json and prints a table; exit status 1 if a check
fails.
"""

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
if os.environ.get("RECORD_BENCH_PACKAGE"):  # another checkout's capture/python: its recorder, these measurements
    sys.path.insert(0, os.environ["RECORD_BENCH_PACKAGE"])

import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model  # noqa: E402

CREATED = "2026-12-01T00:00:00Z"


def build(tiny, device):
    kw = dict(vocab=1024, hidden=192, intermediate=512, layers=2, heads=12, kv_heads=2) if tiny else \
        dict(vocab=151936, hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2)
    m = hf_model("qwen2", torch.bfloat16, seed=0, tied=True, positions=4096, rope_theta=1e6, **kw)
    return m.to(device).eval(), kw


class Clock:
    """Times forwards: wall from the call to the end of a synchronisation, and CUDA events on a GPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.wall, self.gpu = [], []

    def run(self, f):
        if self.cuda:
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
        t0 = time.perf_counter()
        out = f()
        if self.cuda:
            b.record()
            torch.cuda.synchronize()
            self.gpu.append(a.elapsed_time(b))
        self.wall.append((time.perf_counter() - t0) * 1e3)
        return out

    def summary(self):
        out = {"wall_ms": statistics.median(self.wall), "wall_ms_all": [round(x, 3) for x in self.wall]}
        if self.gpu:
            out["gpu_ms"] = statistics.median(self.gpu)
        return out


def record(m, ids, path, forwards, clock=None, drained=False, **kw):
    """Records `forwards` forwards of m (steps 0..forwards-1) into path; (seconds from start to close, recorder).
    drained: each forward starts with the writer thread idle (rec.flush() between forwards, untimed)."""
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    rec = bc.record(m, path, "trainer", created=CREATED, overwrite=True, **kw)
    with torch.no_grad(), rec:
        for i in range(forwards):
            rec.set_step(i)
            if clock is None:
                m(input_ids=ids)
            else:
                clock.run(lambda: m(input_ids=ids))
            if drained:
                rec.flush()
    sync()
    return time.perf_counter() - t0, rec


def tensors(path):
    """(op, role, step, seq, pos, ntok, data as a uint8 numpy view) of each tensor of a capture, in file order
    (record batches of one row, or of many: a recorder's fingerprint tensors)."""
    with pa.memory_map(path, "r") as src:
        r = ipc.open_file(src)
        for i in range(r.num_record_batches):
            b = r.get_batch(i)
            cols = {n: b.column(n).to_pylist() for n in ("op", "role", "step", "seq", "pos", "ntok")}
            arr = b.column(0)
            bufs = arr.buffers()
            offs = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + b.num_rows + 1]
            data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
            for j in range(b.num_rows):
                yield (cols["op"][j], cols["role"][j], cols["step"][j], cols["seq"][j], cols["pos"][j],
                       cols["ntok"][j], data[offs[j] : offs[j + 1]])


def disk_anchor(directory, nbytes, chunk=64 << 20, writeout=False):
    """The disk's own rate for the full recording's write: nbytes of random bytes written with os.write in
    chunk-sized calls (GIL released) to a new file in directory, fsync'd, removed; (GB/s, seconds). writeout:
    the disk's write-out started every writer.WRITEBACK_BYTES as the capture writer does (else all at the fsync,
    what `dd conv=fsync` measures)."""
    from bitalign_capture import writer as wmod

    buf = np.random.default_rng(0).integers(0, 256, size=chunk, dtype=np.uint8).tobytes()
    sfr = wmod._sync_file_range() if writeout else None
    p = os.path.join(directory, "anchor.bin")
    t0 = time.perf_counter()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left, done, mark = nbytes, 0, 0
        while left > 0:
            k = os.write(fd, buf if left >= chunk else buf[:left])
            left, done = left - k, done + k
            if sfr is not None and done - mark >= wmod.WRITEBACK_BYTES:
                sfr(fd, mark, done - mark, 2)
                mark = done
        os.fsync(fd)
    finally:
        os.close(fd)
    t = time.perf_counter() - t0
    os.unlink(p)
    return nbytes / t / 1e9, t


def go_diff(binary, a, b):
    """(exit status, first line of output: the verdict) of `bitalign diff a b`, or (None, why) without the binary."""
    if not binary or not os.path.exists(binary):
        return None, f"no bitalign binary ({binary or 'none given'})"
    r = subprocess.run([binary, "diff", a, b], capture_output=True, text=True, timeout=600)
    out = (r.stdout + r.stderr).strip().splitlines()
    return r.returncode, out[0] if out else ""


def check_fingerprints(fp_path, full_path):
    """(rows checked, first mismatch or None): the fingerprint capture against numpy's fingerprints of the full
    capture's rows."""
    fps = {(op, role[len(bc.fingerprints.ROLE_PREFIX):], st, s, p): d.view(np.uint64).copy()
           for op, role, st, s, p, n, d in tensors(fp_path) if role.startswith(bc.fingerprints.ROLE_PREFIX)}
    rows, seen = 0, 0
    for op, role, st, s, p, n, d in tensors(full_path):
        if op in bc.fingerprints.ALWAYS_FULL:
            continue
        got = fps.get((op, role, st, s, p))
        if got is None:
            return rows, f"{op} [{role}] step {st} seq {s} pos {p}: no fingerprint tensor"
        want = bc.fingerprint_rows(d, n)
        if not np.array_equal(got, want):
            i = int(np.nonzero(got != want)[0][0])
            return rows, f"{op} [{role}] step {st} seq {s} pos {p + i}: fingerprint {got[i]:#x}, rows give {want[i]:#x}"
        rows += n
        seen += 1
    if seen != len(fps):
        return rows, f"{len(fps) - seen} fingerprint tensors without a full tensor"
    return rows, None


def host_costs(dev, reps=200):
    """The launching thread's cost of what a recorder does a few times a forward (median µs of reps, the GPU
    idle): a pinned allocation, a staged copy (pipeline.Stager.copy), a synchronisation, small copies each way."""
    from bitalign_capture import pipeline

    x = torch.zeros(1 << 17, dtype=torch.int64, device=dev)  # 1 MiB: a forward's fingerprints, about
    small = np.arange(1024, dtype=np.int64)
    st = pipeline.Stager()
    cases = {
        "torch.empty 1 MiB, pin_memory": lambda: torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True),
        "Stager.copy of 1 MiB (side stream, event)": lambda: st.copy(x),
        "torch.cuda.synchronize, idle": torch.cuda.synchronize,
        ".cpu() of 8 KiB": lambda: x[:1024].cpu(),
        "as_tensor(8 KiB numpy, device)": lambda: torch.as_tensor(small, device=dev),
        "from_numpy(8 KiB).to(device, non_blocking)": lambda: torch.from_numpy(small).to(dev, non_blocking=True),
    }
    lines = ["host costs (median µs of %d, the GPU idle)" % reps]
    for name, f in cases.items():
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter()
            f()
            ts.append((time.perf_counter() - t) * 1e6)
        lines.append(f"  {name:45} {statistics.median(ts):9.1f}")
    return "\n".join(lines) + "\n"


def profile(m, ids, a, path, dev):
    """--profile: where a recorded forward's time goes. Recorder variants, each interleaved with the plain copy;
    then torch.profiler's table (self CPU time: launches, synchronisations, allocations) of one plain and one
    fingerprint-recorded forward, and cProfile of `iters` fingerprint-recorded forwards, into
    OUT/record-profile.txt. Returns {variant: interleaved()'s figures}."""
    import cProfile
    import io
    import pstats

    variants = {
        "watching, nothing recorded": dict(mode="fingerprint", ops=["-"], logprobs=False),
        "watch only, no logprobs": dict(mode="fingerprint", ops=["tokens"], logprobs=False),
        "watch only, background=False": dict(mode="fingerprint", ops=["tokens"], background=False),
        "fingerprint, no logprobs": dict(mode="fingerprint", logprobs=False),
        "fingerprint, hold_bytes 64 GiB (no chunk inside)": dict(mode="fingerprint", hold_bytes=64 << 30),
        "fingerprint, logits only": dict(mode="fingerprint", ops=["tokens", "logits", "logprobs"]),
    }
    out, buf = {}, io.StringIO()
    for name, kw in variants.items():
        d = out[name] = interleaved(m, ids, path("variant"), a.pairs, dev, **kw)
        buf.write(f"{name:40} {d['recorded_ms']:9.2f} ms, plain beside it {d['plain_ms']:9.2f} ms: "
                  f"{d['overhead'] * 100:+6.1f} % (medians of {a.pairs}, interleaved)\n")
    if dev.type == "cuda":
        buf.write("\n" + host_costs(dev))
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for name, kw in (("plain", None), ("fingerprint", dict(mode="fingerprint"))):
        rec = None if kw is None else bc.record(m, path("prof"), "trainer", created=CREATED, overwrite=True, **kw)
        with torch.no_grad():
            if rec is not None:
                rec.__enter__()
            m(input_ids=ids)  # warm
            sync()
            if rec is not None:
                rec.set_step(1)
            with torch.profiler.profile(activities=acts) as prof:
                m(input_ids=ids)
                sync()
            if rec is not None:
                rec.__exit__(None, None, None)
                os.unlink(path("prof"))
        buf.write(f"\ntorch.profiler, one {name} forward, by self CPU time\n")
        buf.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    cp = cProfile.Profile()
    cp.enable()
    record(m, ids, path("fingerprint"), a.iters, mode="fingerprint")
    cp.disable()
    os.unlink(path("fingerprint"))
    buf.write(f"\ncProfile of {a.iters} fingerprint-recorded forwards (recorder start to close; main thread)\n")
    for key in ("tottime", "cumulative"):
        pstats.Stats(cp, stream=buf).sort_stats(key).print_stats(35)
    with open(os.path.join(a.out, "record-profile.txt"), "w") as f:
        f.write(buf.getvalue())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--full-iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--no-full", action="store_true")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--loop", type=int, default=0, metavar="N",
                    help="only N plain forwards (plain_loop), then N fingerprint-recorded ones (recorded_loop), for "
                         "a sampling profiler (spy_summary.py); no figures, no checks")
    ap.add_argument("--bin", default=os.environ.get("BITALIGN_BIN", ""),
                    help="the bitalign binary for the diff check (default $BITALIGN_BIN)")
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    os.makedirs(a.out, exist_ok=True)
    m, shape = build(a.tiny, dev)
    if a.loop:
        return loop(m, shape, a, dev)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, shape["vocab"], (a.batch, a.tokens), generator=g).to(dev)
    res = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
           "model": {"arch": "qwen2", "dtype": "bf16", **shape}, "batch": a.batch, "tokens": a.tokens,
           "iters": a.iters, "full_iters": a.full_iters, "warmup": a.warmup,
           "fingerprint_backend": list(bc.fingerprints.backend(dev)), "package": os.path.dirname(bc.__file__)}
    path = lambda name: os.path.join(a.out, name + ".arrow")  # noqa: E731

    with torch.no_grad():
        for _ in range(a.warmup):
            m(input_ids=ids)
        plain = Clock(dev)
        outs = [plain.run(lambda: m(input_ids=ids)).logits for _ in range(max(a.iters, 2))]
        deterministic = all(torch.equal(outs[0], o) for o in outs[1:])
        del outs
    res["plain"] = plain.summary()
    res["deterministic_forward"] = deterministic

    # one forward each way: the synchronous baseline, then the background writer (also the warm-up)
    checks = {}
    for mode in ("full", "fingerprint"):
        if not a.no_baseline:
            t, rec = record(m, ids, path(f"sync-{mode}"), 1, mode=mode, background=False)
            size = os.path.getsize(path(f"sync-{mode}"))
            res[f"baseline_{mode}"] = {"total_ms": t * 1e3, "bytes": size, "GBps": size / t / 1e9}
        for _ in range(max(a.warmup, 1)):
            record(m, ids, path(f"bg-{mode}"), 1, mode=mode)
        if not a.no_baseline:
            same = filecmp.cmp(path(f"sync-{mode}"), path(f"bg-{mode}"), shallow=False)
            checks[f"{mode}_background_equals_sync"] = same if deterministic else f"{same} (forward not deterministic)"
    rows, bad = check_fingerprints(path("bg-fingerprint"), path("bg-full"))
    checks["fingerprints_match_full_rows"] = bad is None
    checks["fingerprint_rows_checked"] = rows
    if bad:
        checks["fingerprint_mismatch"] = bad
    if res["fingerprint_backend"][0] == "kernel":  # the kernel's capture is the torch expression's, byte for byte
        os.environ[bc.fingerprints.BACKEND_ENV] = "torch"
        try:
            record(m, ids, path("torch-fingerprint"), 1, mode="fingerprint")
        finally:
            del os.environ[bc.fingerprints.BACKEND_ENV]
        same = filecmp.cmp(path("torch-fingerprint"), path("bg-fingerprint"), shallow=False)
        checks["kernel_equals_torch_fingerprints"] = same if deterministic else f"{same} (forward not deterministic)"
    rc, line = go_diff(a.bin, path("bg-fingerprint"), path("bg-full"))
    checks["go_diff_fingerprint_vs_full_exit"] = rc
    checks["go_diff_fingerprint_vs_full"] = line
    for n in ("sync-full", "sync-fingerprint", "bg-full", "bg-fingerprint", "torch-fingerprint"):
        if os.path.exists(path(n)):
            os.unlink(path(n))

    fp_clock = Clock(dev)
    t, rec = record(m, ids, path("fingerprint"), a.iters, fp_clock, mode="fingerprint")
    fp_size = os.path.getsize(path("fingerprint"))
    res["fingerprint"] = {**fp_clock.summary(), "total_ms_per_forward": t * 1e3 / a.iters,
                          "bytes_per_forward": fp_size / a.iters, "tensors": rec.written, "held_peak_bytes": rec.held_peak}
    os.unlink(path("fingerprint"))
    # the same forwards, each started with the writer thread idle: the hooks' own cost (a trainer's backward and
    # optimizer step give the writer thread that time; back-to-back forwards above do not)
    fp_alone = Clock(dev)
    record(m, ids, path("fingerprint"), a.iters, fp_alone, drained=True, mode="fingerprint")
    res["fingerprint"]["drained_wall_ms"] = fp_alone.summary()["wall_ms"]
    os.unlink(path("fingerprint"))
    watch = Clock(dev)
    record(m, ids, path("watch"), a.iters, watch, mode="fingerprint", ops=["tokens"])
    res["watch_only"] = watch.summary()
    os.unlink(path("watch"))
    res["interleaved"] = {name: interleaved(m, ids, path("pairs"), a.pairs, dev, **kw) for name, kw in
                          (("fingerprint", dict(mode="fingerprint")), ("watch_only", dict(mode="fingerprint", ops=["tokens"])))}
    if a.profile:  # after the figures above: nothing the profilers leave behind can reach them
        res["profile_variants"] = profile(m, ids, a, path, dev)

    if not a.no_full:
        full(m, ids, a, path, dev, res)
    p = res["plain"]["wall_ms"]
    fp = res["fingerprint"]
    fp["overhead"] = fp["wall_ms"] / p - 1
    fp["overhead_total"] = fp["total_ms_per_forward"] / p - 1
    fp["overhead_drained"] = fp["drained_wall_ms"] / p - 1
    res["watch_only"]["overhead"] = res["watch_only"]["wall_ms"] / p - 1
    res["goals"] = {
        "fingerprint_overhead_interleaved_le_10pct": res["interleaved"]["fingerprint"]["overhead"] <= 0.10,
        "fingerprint_overhead_le_10pct": fp["overhead"] <= 0.10,
        "fingerprint_overhead_total_le_10pct": fp["overhead_total"] <= 0.10,
        "fingerprint_overhead_drained_le_10pct": fp["overhead_drained"] <= 0.10,
    }
    if "full" in res:
        res["ratio_full_to_fingerprint"] = res["full"]["bytes_per_forward"] / fp["bytes_per_forward"]
        res["goals"]["fingerprint_capture_le_1_500"] = res["ratio_full_to_fingerprint"] >= 500
        res["goals"]["full_ge_2GBps"] = res["full"]["GBps"] >= 2.0
    res["checks"] = checks
    with open(os.path.join(a.out, "record-bench.json"), "w") as f:
        json.dump(res, f, indent=1)
    report(res, shape, a)
    ok = checks["fingerprints_match_full_rows"] and all(
        v is True for k, v in checks.items() if k.endswith(("equals_sync", "equals_torch_fingerprints")) and deterministic)
    ok = ok and (rc is None or (rc == 0 or not deterministic))
    return 0 if ok else 1


def plain_loop(m, ids, n, sync):
    for _ in range(n):
        m(input_ids=ids)
        sync()


def recorded_loop(m, ids, n, path):
    record(m, ids, path, n, mode="fingerprint")


def loop(m, shape, a, dev):
    """--loop: the two loops a sampling profiler tells apart by name (spy_summary.py), after a warm-up of each."""
    ids = torch.randint(1, shape["vocab"], (a.batch, a.tokens), generator=torch.Generator().manual_seed(0)).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    p = os.path.join(a.out, "loop.arrow")
    with torch.no_grad():
        plain_loop(m, ids, 3, sync)
        recorded_loop(m, ids, 3, p)
        plain_loop(m, ids, a.loop, sync)
        recorded_loop(m, ids, a.loop, p)
    os.unlink(p)
    return 0


def interleaved(m, ids, p, pairs, dev, **kw):
    """The recorded model and an unrecorded copy of it by turns, `pairs` forwards each: medians and overhead.
    Each forward starts with the writer thread idle (rec.flush() before it, untimed), so that no recorded
    forward's writing runs in the plain one beside it; what the writer still had to do after a recorded forward
    returned is drain_ms (a trainer's backward and optimizer step give it that time)."""
    import copy

    twin = copy.deepcopy(m)
    plain, recd, drain = Clock(dev), Clock(dev), []
    with torch.no_grad():
        twin(input_ids=ids)
        rec = bc.record(m, p, "trainer", created=CREATED, overwrite=True, **kw)
        with rec:
            for i in range(pairs):
                plain.run(lambda: twin(input_ids=ids))
                rec.set_step(i)
                recd.run(lambda: m(input_ids=ids))
                t = time.perf_counter()
                rec.flush()
                drain.append((time.perf_counter() - t) * 1e3)
    os.unlink(p)
    del twin
    a, b = plain.summary(), recd.summary()
    pairwise = statistics.median(r / q - 1 for q, r in zip(a["wall_ms_all"], b["wall_ms_all"]))
    return {"plain_ms": a["wall_ms"], "recorded_ms": b["wall_ms"], "overhead": b["wall_ms"] / a["wall_ms"] - 1,
            "overhead_pairwise": pairwise,
            "drain_ms": statistics.median(drain), "plain_ms_all": a["wall_ms_all"], "recorded_ms_all": b["wall_ms_all"]}


def full(m, ids, a, path, dev, res):
    full_clock = Clock(dev)
    t, rec = record(m, ids, path("full"), a.full_iters, full_clock)
    full_size = os.path.getsize(path("full"))
    res["full"] = {**full_clock.summary(), "total_ms_per_forward": t * 1e3 / a.full_iters,
                   "bytes_per_forward": full_size / a.full_iters, "GBps": full_size / t / 1e9, "fsync": True,
                   "staged_peak_bytes": rec.staged_peak, "tensors": rec.written}
    os.unlink(path("full"))
    gbps, secs = disk_anchor(a.out, full_size)
    res["disk_anchor"] = {"GBps": gbps, "seconds": secs, "bytes": full_size,
                          "how": "os.write of 64 MiB chunks of random bytes, fsync, same bytes as the full capture"}
    gbps2, secs2 = disk_anchor(a.out, full_size, writeout=True)
    res["disk_anchor_writeout"] = {"GBps": gbps2, "seconds": secs2, "bytes": full_size,
                                   "how": "the same with the write-out started every 256 MiB (as the writer does)"}
    res["full"]["of_disk_anchor"] = res["full"]["GBps"] / max(gbps, gbps2)


def report(res, shape, a):
    fp = res["fingerprint"]
    print(f"record_bench: {res['device']}, qwen2 hidden {shape['hidden']} × {shape['layers']} layers, "
          f"{a.batch} × {a.tokens} tokens, bf16; wall = call to synchronised end, median; {res['package']}")
    print(f"{'':40} {'wall ms':>9} {'gpu ms':>8} {'total ms/fwd':>13} {'MB/fwd':>9} {'GB/s':>6}")

    def line(name, d, total=None, size=None, rate=None):
        gpu = f"{d['gpu_ms']:8.2f}" if "gpu_ms" in d else f"{'':8}"
        wall = f"{d['wall_ms']:9.2f}" if "wall_ms" in d else f"{'':9}"
        print(f"{name:40} {wall} {gpu} {'' if total is None else f'{total:13.1f}':>13} "
              f"{'' if size is None else f'{size / 1e6:9.2f}':>9} {'' if rate is None else f'{rate:6.2f}':>6}")

    line("plain forward", res["plain"])
    line(f"fingerprint ({fp['overhead'] * 100:+.1f} %)", fp, fp["total_ms_per_forward"], fp["bytes_per_forward"])
    line(f"fingerprint, writer idle ({fp['overhead_drained'] * 100:+.1f} %)", {"wall_ms": fp["drained_wall_ms"]})
    line(f"watch only ({res['watch_only']['overhead'] * 100:+.1f} %)", res["watch_only"])
    for name, d in res["interleaved"].items():
        line(f"interleaved: plain, beside {name}", {"wall_ms": d["plain_ms"]})
        line(f"interleaved: {name} ({d['overhead'] * 100:+.1f} %; pairs {d['overhead_pairwise'] * 100:+.1f} %)",
             {"wall_ms": d["recorded_ms"]})
        line(f"interleaved: {name}, writer drain after", {"wall_ms": d["drain_ms"]})
    if "full" in res:
        line("full (fsync'd at close)", res["full"], res["full"]["total_ms_per_forward"],
             res["full"]["bytes_per_forward"], res["full"]["GBps"])
        line("disk anchor (os.write + fsync)", {}, None, None, res["disk_anchor"]["GBps"])
        line("disk anchor, write-out every 256 MiB", {}, None, None, res["disk_anchor_writeout"]["GBps"])
    for mode in ("full", "fingerprint"):
        b = res.get(f"baseline_{mode}")
        if b:
            line(f"{mode}, background=False", {}, b["total_ms"], b["bytes"], b["GBps"])
    if "ratio_full_to_fingerprint" in res:
        print(f"full / fingerprint capture: {res['ratio_full_to_fingerprint']:.0f}×")
    print(f"goals: {res['goals']}")
    print(f"fingerprints: {res['fingerprint_backend']}; checks: {res['checks']}")


if __name__ == "__main__":
    sys.exit(main())
