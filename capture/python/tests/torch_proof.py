#!/usr/bin/env python3
"""The proof of the issue "The fix, not just the finding": a Hugging Face model patched with bitalign.hf gives
its trainer forward, its generate (batch 1 and batch 8) and `bitalign replay` the same bits; unpatched, it does
not. Runs on the GPU machine; --device cpu (with --tiny) runs the parts that need no GPU here.

    python3 capture/python/tests/torch_proof.py OUT [--device auto|cpu|cuda] [--tiny] [--models qwen3,qwen2-1.5b]
        [--seqs 8] [--prompt 6] [--new 24] [--no-speed | --speed-only [--profile]] [--bin bin/bitalign]

For each model (random bf16 weights; "qwen3": hidden 256, 4 layers, head_dim 64; "qwen2-1.5b": Qwen2-1.5B's
shapes, hidden 1536, 28 layers, 12/2 heads, intermediate 8960, vocabulary 151936, tied; --tiny shrinks both) it
writes OUT/MODEL/:

  checkpoint/                    save_pretrained (what replay loads)
  patched-greedy-sampler.arrow   patched generate, batch 1 per sequence, greedy
  patched-greedy-trainer.arrow   patched forward over those 8 sequences, right-padded, one batch
  patched-sampled-sampler.arrow  patched generate, batch 8 left-padded, seeded sampling (temperature 1)
  patched-sampled-trainer.arrow  patched forward over those sequences
  control-sampler.arrow          unpatched transformers (bf16, SDPA) greedy generate, batch 1
  control-trainer.arrow          unpatched forward over those sequences
  *.json                         the `bitalign diff` and `bitalign replay` reports

and checks: patched diffs exit 0, patched replay of the trainer capture exits 0 on --device cuda (and cpu for the
small model), seeded sampling draws the same tokens at batch 1 and batch 8; the control group's diff and replay
(expected to diverge on a GPU: cuBLAS at another M) with their first divergences printed. Speed (CUDA only): the
patched forward against the unpatched forward in fp32 and bf16 (SDPA), 4×256 and 8×1024 tokens, CUDA events,
mean of --iters after warm-up, all in this run. OUT/proof.json is the summary; the exit status is 1 when a
patched check fails. --device cpu --tiny --cpu-reference-ops also runs the patched parts here, with the CPU
stand-ins of test_torch_hf.py for bitalign.ops: that checks the script's plumbing (captures, generate, diff,
replay invocations), not the kernels (the stand-ins are not batch-invariant: their diffs and replays diverge).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bitalign, bitalign_capture from the checkout
sys.path.insert(0, HERE)

import bitalign.hf as bh  # noqa: E402
import bitalign_capture as bc  # noqa: E402
from tinymodels import hf_model, padded as _padded  # noqa: E402

CREATED = "2026-12-01T00:00:00Z"
SEED = 1234


def build(name, tiny):
    if name == "qwen3":
        kw = dict(vocab=512, hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, head_dim=32) if tiny else \
            dict(vocab=4096, hidden=256, intermediate=768, layers=4, heads=4, kv_heads=2, head_dim=64)
        return hf_model("qwen3", torch.bfloat16, seed=0, positions=2048, **kw)
    if name == "qwen2-1.5b":
        kw = dict(vocab=1024, hidden=192, intermediate=512, layers=2, heads=12, kv_heads=2) if tiny else \
            dict(vocab=151936, hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2)
        return hf_model("qwen2", torch.bfloat16, seed=0, tied=True, positions=2048, rope_theta=1e6, **kw)
    raise SystemExit(f"torch_proof.py: unknown model {name!r} (qwen3, qwen2-1.5b)")


def prompts(n, base, vocab, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (base + (3 * i) % 7,), generator=g).tolist() for i in range(n)]


def padded(seqs, left, dev):
    """(input_ids, attention_mask) of a padded batch (tinymodels.padded)."""
    ids, mask, _ = _padded(seqs, "left" if left else "right")
    return ids.to(dev), mask.to(dev)


def gen(m, ids, mask, new, patched, temperature, seq_ids):
    if patched:
        return bh.generate(m, ids, mask, seed=SEED, temperature=temperature, seq_ids=seq_ids, max_new_tokens=new,
                           min_new_tokens=new)
    return m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False)


def sampler_batch1(m, path, ps, new, patched, temperature=0.0):
    """generate for each prompt alone; the full sequences (prompt + drawn tokens)."""
    dev = next(m.parameters()).device
    seqs = []
    with torch.no_grad(), bc.record(m, path, "sampler", record_samples=True, created=CREATED, batch_size=1,
                                    overwrite=True) as rec:
        for i, p in enumerate(ps):
            rec.batch(seq_ids=[i])
            ids = torch.tensor([p], device=dev)
            out = gen(m, ids, torch.ones_like(ids), new, patched, temperature, [i])
            rec.sampled([i], out[:, -1])
            seqs.append(out[0].tolist())
    return seqs


def sampler_batch(m, path, ps, new, patched, temperature):
    """generate for all prompts at once, left-padded."""
    dev = next(m.parameters()).device
    ids, mask = padded(ps, True, dev)
    with torch.no_grad(), bc.record(m, path, "sampler", record_samples=True, created=CREATED, batch_size=len(ps),
                                    seq_ids=list(range(len(ps))), overwrite=True) as rec:
        out = gen(m, ids, mask, new, patched, temperature, list(range(len(ps))))
        rec.sampled(range(len(ps)), out[:, -1])
    P = ids.shape[1]
    return [p + out[b, P:].tolist() for b, p in enumerate(ps)]


def trainer(m, path, seqs):
    """One forward over t0..t(N-2) of every sequence, right-padded; t(N-1) is only a target."""
    dev = next(m.parameters()).device
    ids, mask = padded([s[:-1] for s in seqs], False, dev)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    final = {i: s[-1] for i, s in enumerate(seqs)}
    with torch.no_grad(), bc.record(m, path, "trainer", final_tokens=final, created=CREATED, batch_size=len(seqs),
                                    overwrite=True):
        m(input_ids=ids, attention_mask=mask, position_ids=pos)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 2:
        print(f"torch_proof.py: {' '.join(cmd)}: exit 2\n{p.stderr.strip()}")
    return p.returncode, p.stderr.strip()


def first_div(path):
    try:
        fd = json.load(open(path)).get("first_divergence")
    except (OSError, ValueError):
        return None
    if not fd:
        return None
    return {k: fd.get(k) for k in ("op", "seq", "pos", "index", "ulp") if k in fd}


# What a trainer/sampler pair lacks by nature: the sampler draws (`sample`), the trainer does not; generate computes
# the logits of a prompt's last position only (transformers' logits_to_keep), so the trainer alone holds the
# logits and logprobs of the other prompt positions. --ignore-missing lets those through; expected_gaps checks
# that nothing else is missing.
EXPECTED_GAPS = {("sample", "A"), ("logits", "B"), ("logprobs", "B")}


def expected_gaps(path):
    """'' when every tensor one side lacks is one of EXPECTED_GAPS, else what else is missing."""
    try:
        rep = json.load(open(path))
    except (OSError, ValueError) as e:
        return f"no report: {e}"
    other = sorted({(m["op"], m["missing_in"]) for m in rep.get("missing") or []} - EXPECTED_GAPS)
    return ", ".join(f"{op} missing in {side}" for op, side in other)


def diff(binary, a, b, out):
    rc, err = run([binary, "diff", a, b, "-o", out, "--overwrite", "--ignore-missing"])
    res = {"exit": rc, "first_divergence": first_div(out) if rc == 1 else None, **({"error": err} if rc == 2 else {})}
    if rc != 2:
        rep = json.load(open(out))
        res.update(compared=rep.get("compared"), mismatched=rep.get("mismatched"), unexpected_gaps=expected_gaps(out))
    return res


def replay(binary, ckpt, cap, out, device):
    rc, err = run([binary, "replay", "--checkpoint", ckpt, "--capture", cap, "--device", device, "-o", out,
                   "--overwrite"])
    return {"exit": rc, "first_divergence": first_div(out) if rc == 1 else None, **({"error": err} if rc == 2 else {})}


def timed(f, iters, cuda):
    """Mean milliseconds of f() after 3 warm-up calls: CUDA events on a GPU, perf_counter on the CPU."""
    with torch.no_grad():
        for _ in range(3):
            f()
        if cuda:
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                f()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) / iters
        t = time.perf_counter()
        for _ in range(iters):
            f()
        return (time.perf_counter() - t) * 1e3 / iters


def profile(f, path, title):
    """torch.profiler's per-kernel table of two calls of f (CUDA kernels, the PTX's included: CUPTI sees every
    launch), appended to path."""
    from torch.profiler import ProfilerActivity, profile as prof

    with torch.no_grad(), prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(2):
            f()
        torch.cuda.synchronize()
    with open(path, "a") as fp:
        fp.write(f"== {title} (2 calls)\n")
        fp.write(p.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=60))
        fp.write("\n")


def speed(m, shapes, iters, cuda, prof_path=None):
    """The patched forward (when there is CUDA) against the unpatched model in bf16 (SDPA) and fp32 (SDPA), same
    tokens. m comes unpatched (a deep copy of a patched model would share its patched forwards' closures)."""
    import copy

    dev = next(m.parameters()).device
    res = []
    V = m.config.vocab_size
    ref = copy.deepcopy(m)
    ref.config._attn_implementation = "sdpa"
    ref32 = copy.deepcopy(ref).float()
    if cuda:
        bh.patch(m)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    for B, T in shapes:
        ids = torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(B * T)).to(dev)
        row = {"batch": B, "tokens": T}
        row["hf_bf16_ms"] = timed(lambda: ref(input_ids=ids, use_cache=False), iters, cuda)
        row["hf_fp32_ms"] = timed(lambda: ref32(input_ids=ids, use_cache=False), iters, cuda)
        if bh.is_patched(m):
            row["bitalign_ms"] = timed(lambda: m(input_ids=ids, use_cache=False), iters, cuda)
            row["vs_bf16"] = row["bitalign_ms"] / row["hf_bf16_ms"]
            row["vs_fp32"] = row["bitalign_ms"] / row["hf_fp32_ms"]
            if prof_path and cuda:
                profile(lambda: m(input_ids=ids, use_cache=False), prof_path, f"bitalign {B}x{T}")
                profile(lambda: ref32(input_ids=ids, use_cache=False), prof_path, f"hf fp32 {B}x{T}")
        res.append(row)
        print("  speed", json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}))
    if bh.is_patched(m):
        bh.unpatch(m)
    del ref, ref32
    return res


def proof(name, a, dev, binary):
    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    f = lambda s: os.path.join(out, s)  # noqa: E731
    m = build(name, a.tiny)
    if a.speed_only:
        m = m.to(dev)
        res = {"model": name, "tiny": a.tiny, "device": dev, "speed": speed(
            m, [(2, 16), (2, 32)] if a.tiny else [(4, 256), (8, 1024)], a.iters, dev == "cuda",
            os.path.join(a.out, "profile.txt") if a.profile else None)}
        del m
        return res
    ckpt = f("checkpoint")
    m.save_pretrained(ckpt, safe_serialization=True)
    m = m.to(dev)
    m.config._attn_implementation = "sdpa"
    ps = prompts(a.seqs, a.prompt, m.config.vocab_size)
    small = name == "qwen3"
    res = {"model": name, "tiny": a.tiny, "device": dev, "sequences": a.seqs, "new_tokens": a.new}
    t0 = time.time()

    # the control group: transformers as it is (bf16, SDPA, cuBLAS)
    seqs = sampler_batch1(m, f("control-sampler.arrow"), ps, a.new, False)
    trainer(m, f("control-trainer.arrow"), seqs)
    res["control"] = {
        "diff": diff(binary, f("control-trainer.arrow"), f("control-sampler.arrow"), f("control-diff.json")),
        "replay": replay(binary, ckpt, f("control-trainer.arrow"), f("control-replay.json"), dev),
    }
    print(f"{name}: control (unpatched): diff exit {res['control']['diff']['exit']}, first divergence "
          f"{res['control']['diff']['first_divergence']}; replay --device {dev} exit "
          f"{res['control']['replay']['exit']}, first divergence {res['control']['replay']['first_divergence']}")

    if dev != "cuda" and not a.cpu_reference_ops:
        res["patched"] = "skipped: bitalign's kernels run on CUDA tensors"
        print(f"{name}: patched runs skipped (no CUDA)")
    else:
        bh.patch(m)
        p = res["patched"] = {}
        g = sampler_batch1(m, f("patched-greedy-sampler.arrow"), ps, a.new, True)
        trainer(m, f("patched-greedy-trainer.arrow"), g)
        p["greedy_diff"] = diff(binary, f("patched-greedy-trainer.arrow"), f("patched-greedy-sampler.arrow"),
                                f("patched-greedy-diff.json"))
        s8 = sampler_batch(m, f("patched-sampled-sampler.arrow"), ps, a.new, True, 1.0)
        trainer(m, f("patched-sampled-trainer.arrow"), s8)
        p["sampled_diff"] = diff(binary, f("patched-sampled-trainer.arrow"), f("patched-sampled-sampler.arrow"),
                                 f("patched-sampled-diff.json"))
        s1 = sampler_batch1(m, f("patched-sampled-batch1.arrow"), ps, a.new, True, 1.0)
        p["sampled_batch1_equals_batch8"] = s1 == s8
        p["greedy_batch8_equals_batch1"] = sampler_batch(m, f("patched-greedy-batch8.arrow"), ps, a.new, True,
                                                          0.0) == g
        for d in (["cpu"] if dev == "cpu" else ["cuda", "cpu"] if small else ["cuda"]):
            p[f"replay_{d}"] = replay(binary, ckpt, f("patched-greedy-trainer.arrow"), f(f"patched-replay-{d}.json"), d)
        ok = (p["greedy_diff"]["exit"] == 0 and p["sampled_diff"]["exit"] == 0
              and not p["greedy_diff"].get("unexpected_gaps") and not p["sampled_diff"].get("unexpected_gaps")
              and p["sampled_batch1_equals_batch8"]
              and p["greedy_batch8_equals_batch1"] and all(p[k]["exit"] == 0 for k in p if k.startswith("replay_")))
        p["ok"] = ok
        replays = ", ".join(f"{k} exit {p[k]['exit']} {p[k]['first_divergence'] or ''}" for k in p
                            if k.startswith("replay_"))
        verdict = " (stand-in CPU ops: plumbing only, no verdict)" if a.cpu_reference_ops else \
            f" → {'OK' if ok else 'FAILED'}"
        gd, sd = p["greedy_diff"], p["sampled_diff"]
        print(f"{name}: patched: greedy diff exit {gd['exit']} ({gd.get('compared')} elements, {gd.get('mismatched')} "
              f"differ{', also missing: ' + gd['unexpected_gaps'] if gd.get('unexpected_gaps') else ''}), sampled "
              f"(batch 8) diff exit {sd['exit']} ({sd.get('compared')} elements, {sd.get('mismatched')} differ"
              f"{', also missing: ' + sd['unexpected_gaps'] if sd.get('unexpected_gaps') else ''}), "
              f"sampled batch 1 = batch 8: {p['sampled_batch1_equals_batch8']}, "
              f"{replays}{verdict}")
    if bh.is_patched(m):
        bh.unpatch(m)
    if a.speed and (not small or a.tiny):
        shapes = [(2, 16), (2, 32)] if a.tiny else [(4, 256), (8, 1024)]
        res["speed"] = speed(m, shapes, a.iters, dev == "cuda")
    res["seconds"] = round(time.time() - t0, 1)
    del m
    if dev == "cuda":
        torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--tiny", action="store_true", help="small shapes (the CPU check of the script itself)")
    ap.add_argument("--models", default="qwen3,qwen2-1.5b")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=6)
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-speed", dest="speed", action="store_false")
    ap.add_argument("--speed-only", action="store_true", help="only the speed figures (no captures, diffs, replays)")
    ap.add_argument("--profile", action="store_true", help="with the speed figures: torch.profiler's kernel tables of "
                    "the patched and the fp32 forward, into OUT/profile.txt")
    ap.add_argument("--cpu-reference-ops", action="store_true",
                    help="with --device cpu: run the patched parts with test_torch_hf.py's float64 CPU stand-ins for "
                         "bitalign.ops (checks this script's plumbing; its verdicts say nothing about the kernels)")
    ap.add_argument("--bin", default=os.environ.get("BITALIGN_BIN", "bin/bitalign"))
    a = ap.parse_args()
    dev = a.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.cpu_reference_ops:
        if dev != "cpu":
            raise SystemExit("torch_proof.py: --cpu-reference-ops is for --device cpu")
        import test_torch_hf as ref
        from bitalign import ops

        for k, f in dict(linear=ref._ref_linear, rms_norm=ref._ref_rms, attention=ref._ref_attention,
                         sample=ref._ref_sample).items():
            setattr(ops, k, f)
        ops.residual = lambda x, y, dt: ref._round(x + y, dt)
        ops.swiglu = lambda g, u, dt: ref._round(ref._round(torch.nn.functional.silu(g), dt) * u, dt)
        ops.log_softmax = lambda x, profile: torch.log_softmax(x, -1)
    if shutil.which(a.bin) is None and not os.path.exists(a.bin):
        raise SystemExit(f"torch_proof.py: {a.bin}: no bitalign binary (make build, or --bin)")
    os.makedirs(a.out, exist_ok=True)
    summary = {"device": dev, "cpu_reference_ops": a.cpu_reference_ops,
               "gpu": torch.cuda.get_device_name() if dev == "cuda" else None, "torch": torch.__version__,
               "transformers": __import__("transformers").__version__, "models": []}
    for name in a.models.split(","):
        summary["models"].append(proof(name, a, dev, a.bin))
    fails = [r["model"] for r in summary["models"] if isinstance(r.get("patched"), dict) and not r["patched"]["ok"]]
    if a.cpu_reference_ops:
        fails = []  # stand-in ops: the plumbing ran, the verdicts are not the kernels'
    summary["ok"] = not fails
    with open(os.path.join(a.out, "proof.json"), "w") as fp:
        json.dump(summary, fp, indent=1)
    print(json.dumps({"ok": summary["ok"], "failed": fails, "summary": os.path.join(a.out, "proof.json")}))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
