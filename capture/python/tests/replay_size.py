#!/usr/bin/env python3
"""Issue 15's replay at size: `bitalign replay` end to end (load, forward, writing the replay capture, diff) of
random Hugging Face bf16 models recorded with bitalign_capture, timed by wall clock with the replay's peak RSS
and its own phase report (--timings). Runs on the GPU machine (`bash scripts/gpu.sh replay`); --device cpu
--tiny runs the same plumbing at toy size here (test_torch_replay_size.py).

    python3 capture/python/tests/replay_size.py OUT [--device auto|cpu|cuda] [--tiny] [--models 1.5b,8b]
        [--bin bin/bitalign] [--layer 12] [--keep] [--profile canonical|standard|tc]

Models (random weights in bf16, built on the device, saved with save_pretrained as safetensors):
  1.5b  Qwen2-1.5B's shapes (hidden 1536, 28 layers, 12/2 heads, intermediate 8960, V 151936, tied), 4 × 256 tokens
  8b    Qwen3-8B's shapes (hidden 4096, 36 layers, 32/8 heads, head_dim 128, intermediate 12288, V 151936),
        8 × 512 tokens
(--tiny: the same architectures at hidden 128-192, 2 layers, V 1024, 2 × 16-32 tokens.)

Runs, each a fresh `bitalign replay --device DEV --timings -o report.json` process:
  1.5b full         the full trainer capture (every op in full): replay writes every op in full
  1.5b fingerprint  the same step recorded with mode="fingerprint": replay writes fingerprints, diff fp vs fp
  1.5b ops          the full capture with --ops 'layers.L.*': the forward stops after layer L, writes layer L
  8b fingerprint    mode="fingerprint" with full_ops=['layers.L.*'] (layer L beside in full)
  8b ops            that capture with --ops 'layers.L.*' (layer L compared full against full)
For each: exit status (0 identical, 1 divergent: transformers' bf16 kernels are not the engine's; 2 is a failure),
wall seconds, peak RSS (/usr/bin/time -v, else the child's VmHWM), the capture and
checkpoint sizes, the phase report, the first divergence. Also the transformers forward and the recording time.
OUT/replay-size.json holds it all; the table goes to stdout. Checkpoints and captures are deleted at the end
unless --keep (the 8B checkpoint is 16 GB). Exit status 1 when a replay exits 2 or its report is missing.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bitalign_capture from the checkout
sys.path.insert(0, HERE)

import bitalign_capture as bc  # noqa: E402

SEED = 0


def config(name, tiny):
    """(transformers config, batch, tokens per sequence)."""
    import transformers as tf

    common = dict(rms_norm_eps=1e-6, pad_token_id=0, bos_token_id=None, eos_token_id=None, max_position_embeddings=4096)
    if name == "1.5b":
        kw = dict(vocab_size=1024, hidden_size=192, intermediate_size=512, num_hidden_layers=2, num_attention_heads=12,
                  num_key_value_heads=2) if tiny else \
            dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2)
        cfg = tf.Qwen2Config(tie_word_embeddings=True, rope_theta=1e6, **common, **kw)
        return cfg, tf.Qwen2ForCausalLM, (2, 16) if tiny else (4, 256)
    if name == "8b":
        kw = dict(vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32) if tiny else \
            dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128)
        cfg = tf.Qwen3Config(tie_word_embeddings=False, rope_theta=1e6, **common, **kw)
        return cfg, tf.Qwen3ForCausalLM, (2, 32) if tiny else (8, 512)
    raise SystemExit(f"replay_size.py: unknown model {name!r} (1.5b, 8b)")


def build(name, tiny, dev):
    """The random bf16 model, built on dev (an 8B model never exists in float32 on the host)."""
    cfg, cls, shape = config(name, tiny)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(SEED)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):
            m = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():  # random norms and biases (init leaves them at 1 and 0)
        for n, p in m.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
    return m.eval(), shape


def size_of(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def record(m, path, ids, final, dev, **kw):
    """One trainer forward recorded into path; the seconds it took."""
    sync(dev)
    t0 = time.perf_counter()
    with torch.no_grad(), bc.record(m, path, "trainer", final_tokens=final, batch_size=ids.shape[0], overwrite=True,
                                    **kw):
        m(input_ids=ids)
        sync(dev)
    return time.perf_counter() - t0


def forward_time(m, ids, dev, iters=3):
    with torch.no_grad():
        m(input_ids=ids)
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            m(input_ids=ids)
        sync(dev)
    return (time.perf_counter() - t0) / iters


PHASE = re.compile(r"^  (.+?)\s+([0-9.]+) s(?:\s+([0-9.]+)%)?(?:\s+(\d+)×)?(?:\s+([0-9.]+) MB)?")
PHASE_RSS = re.compile(r"\[peak RSS ([0-9.]+) GB\]")


def timings(stderr):
    """({phase: seconds}, {phase: the process's peak RSS in GB when it ended}) of the replay's --timings report."""
    out, rss, on = {}, {}, False
    for line in stderr.splitlines():
        if line.startswith("bitalign replay: timings"):
            on = True
            continue
        if on:
            mt = PHASE.match(line)
            if mt:
                out[mt.group(1).strip()] = float(mt.group(2))
                mr = PHASE_RSS.search(line)
                if mr:
                    rss[mt.group(1).strip()] = float(mr.group(1))
    return out, rss


TIME = "/usr/bin/time"
MAXRSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def hwm(pid):
    """The process's peak RSS so far in bytes (/proc VmHWM: its own address space, not its parent's)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def replay(binary, ckpt, cap, report, dev, ops=None, profile="canonical"):
    """One `bitalign replay` process: exit, wall seconds, peak RSS, phases, first divergence.

    Peak RSS: /usr/bin/time -v's "Maximum resident set size" where it exists, else the child's VmHWM polled every
    20 ms (a child's own ru_maxrss would include this Python process's RSS, inherited at fork)."""
    cmd = [binary, "replay", "--checkpoint", ckpt, "--capture", cap, "--device", dev, "--timings", "-o", report,
           "--overwrite", "--profile", profile]
    if ops:
        cmd += ["--ops", ops]
    timed = os.access(TIME, os.X_OK)
    t0 = time.perf_counter()
    p = subprocess.Popen(([TIME, "-v"] if timed else []) + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    if timed:
        _, err = p.communicate()
    else:
        import threading

        errs = []
        th = threading.Thread(target=lambda: errs.append(p.stderr.read()))
        th.start()
        while p.poll() is None:
            peak = max(peak, hwm(p.pid))
            time.sleep(0.02)
        th.join()
        p.stdout.read()
        err = errs[0] if errs else ""
    wall = time.perf_counter() - t0
    if timed:
        mt = MAXRSS.search(err)
        peak = int(mt.group(1)) * 1024 if mt else 0
    phases, phase_rss = timings(err)
    res = {"cmd": " ".join(cmd), "exit": p.returncode, "wall_s": round(wall, 3), "phases": phases,
           "phase_peak_rss_gb": phase_rss,
           "peak_rss_gb": round(peak / 1e9, 3), "rss_from": "/usr/bin/time -v" if timed else "VmHWM polled"}
    if p.returncode == 2 or not os.path.exists(report):
        res["error"] = err.strip()[-2000:]
        return res
    rep = json.load(open(report))
    fd = rep.get("first_divergence") or {}
    res["first_divergence"] = fd.get("op")
    res["identical"] = rep.get("identical")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--tiny", action="store_true", help="toy shapes (the CPU check of the script itself)")
    ap.add_argument("--models", default="1.5b,8b")
    ap.add_argument("--layer", type=int, default=12, help="the layer of the --ops runs (clamped to the model's)")
    ap.add_argument("--bin", default=os.environ.get("BITALIGN_BIN", "bin/bitalign"))
    ap.add_argument("--keep", action="store_true", help="keep checkpoints and captures")
    ap.add_argument("--profile", default="canonical", help="the replays' kernel profile: canonical, standard or tc "
                    "(tc: the tensor-core engine, docs/arithmetic.md tc.7, beside transformers' bf16 forward)")
    a = ap.parse_args()
    dev = a.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    binary = os.path.abspath(a.bin)
    os.makedirs(a.out, exist_ok=True)
    results, failed = [], False
    for name in a.models.split(","):
        d = os.path.join(a.out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        f = lambda s: os.path.join(d, s)  # noqa: E731
        t0 = time.perf_counter()
        m, (B, S) = build(name, a.tiny, dev)
        L = min(a.layer, m.config.num_hidden_layers - 1)
        ops = f"layers.{L}.*"
        ckpt = f("checkpoint")
        m.save_pretrained(ckpt, safe_serialization=True)
        built = time.perf_counter() - t0
        g = torch.Generator().manual_seed(1)
        seqs = torch.randint(1, m.config.vocab_size, (B, S + 1), generator=g)
        ids = seqs[:, :-1].to(dev)
        final = {b: int(seqs[b, -1]) for b in range(B)}
        res = {"model": name, "tiny": a.tiny, "device": dev, "profile": a.profile, "batch": B, "tokens": S, "layers": m.config.num_hidden_layers,
               "build_and_save_s": round(built, 1), "checkpoint_bytes": size_of(ckpt),
               "forward_bf16_s": round(forward_time(m, ids, dev), 4), "runs": {}}
        caps = {}
        if name == "1.5b":
            caps["full"] = f("trainer-full.arrow")
            res["record_full_s"] = round(record(m, caps["full"], ids, final, dev), 3)
            caps["fingerprint"] = f("trainer-fp.arrow")
            res["record_fingerprint_s"] = round(record(m, caps["fingerprint"], ids, final, dev, mode="fingerprint"), 3)
            plan = [("full", caps["full"], None), ("fingerprint", caps["fingerprint"], None), ("ops", caps["full"], ops)]
        else:
            caps["fingerprint"] = f("trainer-fp.arrow")
            res["record_fingerprint_s"] = round(record(m, caps["fingerprint"], ids, final, dev, mode="fingerprint",
                                                       full_ops=[ops]), 3)
            plan = [("fingerprint", caps["fingerprint"], None), ("ops", caps["fingerprint"], ops)]
        res["capture_bytes"] = {k: size_of(v) for k, v in caps.items()}
        del m
        if dev == "cuda":
            torch.cuda.empty_cache()  # the replay gets the GPU to itself
        for run, cap, o in plan:
            r = replay(binary, ckpt, cap, f(f"replay-{run}.json"), dev, o, a.profile)
            res["runs"][run] = r
            failed = failed or "error" in r
        res["model_wall_s"] = round(time.perf_counter() - t0, 1)  # build, save, record, replays: the 600 s budget
        results.append(res)
        if not a.keep:
            shutil.rmtree(ckpt, ignore_errors=True)
            for c in caps.values():
                os.remove(c)
    json.dump(results, open(os.path.join(a.out, "replay-size.json"), "w"), indent=1)
    print(f"{'model':6} {'run':12} {'exit':>4} {'wall s':>8} {'RSS GB':>7} {'/ckpt':>5} {'load':>6} {'upload':>6} "
          f"{'forward':>7} {'D→H':>6} {'write':>6} {'diff':>6}  first divergence")
    for res in results:
        for run, r in res["runs"].items():
            ph = r["phases"]

            def col(*ks):  # the sum of the phases named by these prefixes (D→H: the copies and the device fingerprints)
                v = [t for n, t in ph.items() if n.startswith(ks)]
                return f"{sum(v) if v else float('nan'):6.2f}"

            rss = r.get("peak_rss_gb", float("nan"))
            print(f"{res['model']:6} {run:12} {r['exit']:4} {r['wall_s']:8.2f} {rss:7.2f} "
                  f"{rss * 1e9 / res['checkpoint_bytes']:5.2f} "
                  f"{col('load the checkpoint')} {col('upload weights')} {col('forward'):>7} "
                  f"{col('record: device', 'record: fingerprints')} "
                  f"{col('record: capture writes')} {col('diff the capture')}  {r.get('first_divergence') or r.get('error', '')[:60]}")
            rises, last = [], 0.0  # the phases that raised the peak RSS (by 1 % or more), with the peak after each
            for n, g in r.get("phase_peak_rss_gb", {}).items():
                if g > last * 1.01:
                    rises.append(f"{n.split(' (')[0].split(',')[0]} {g:.2f}")
                last = max(last, g)
            if rises:
                print("       peak RSS rose in: " + ", ".join(rises))
        print(f"{res['model']}: checkpoint {res['checkpoint_bytes'] / 1e9:.2f} GB, captures "
              + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in res["capture_bytes"].items())
              + f"; transformers bf16 forward {res['forward_bf16_s'] * 1e3:.1f} ms; recording "
              + ", ".join(f"{k[7:-2]} {res[k]:.2f} s" for k in res if k.startswith("record_"))
              + f"; {res['model_wall_s']:.0f} s for the model in all")
    print(json.dumps(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
