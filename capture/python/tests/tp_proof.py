#!/usr/bin/env python3
"""The proof of the issue "Tensor parallelism in the user's own stack": a Hugging Face model sharded with
bitalign.tp.shard and patched with bitalign.hf computes, at TP N over torch.distributed (NCCL), the bits of
TP 1 and of `bitalign replay`; sharded without the patch (the usual Megatron arithmetic) it does not.

    torchrun --nproc-per-node 2 capture/python/tests/tp_proof.py OUT [--bin .gpu/bitalign] [--model qwen3|qwen2-1.5b]
        [--tiny] [--seqs 8] [--prompt 6] [--new 16] [--no-speed] [--iters 50]
    torchrun --nproc-per-node 2 capture/python/tests/tp_proof.py OUT --device cpu --tiny --cpu-standins   (gloo)

NCCL_NVLS_ENABLE=0 is set before the process group starts (and checked: the script refuses another value), so
NCCL's NVLink SHARP reductions stay off; bitalign's layers never reduce through NCCL anyway, the control's
all_reduce does. Every rank builds the same random bf16 model (seed 0); rank 0 saves the checkpoint. Then, in
OUT/MODEL/:

  tpN-sampler/rankR.arrow      patched, sharded over the N ranks: generate, batch of --seqs left-padded prompts,
                               seeded sampling (temperature 1), a capture per rank
  tpN-trainer/rankR.arrow      patched, TP N: one forward over those sequences, right-padded
  tp1-sampler.arrow, tp1-trainer.arrow   the same on rank 0 alone (a process group of one: TP 1)
  control-tpN-trainer/, control-tp1-trainer.arrow   unpatched (shard's usual arithmetic: torch's bf16 matmul
                               and NCCL's all_reduce of bf16 partials; SDPA) over the same sequences
  *.json                       the bitalign diff and replay reports

Checks (rank 0 prints them; OUT/MODEL/tp-proof.json is the summary; exit 1 when a patched check fails): the
TP N logits, logprobs and sampled tokens equal TP 1's bitwise on every rank; bitalign diff exits 0 for TP N
against TP 1 (trainer and sampler: every op, logprob and sample); bitalign replay of the
TP N trainer capture (the engine at TP 1) exits 0; the control's diff TP N against TP 1 (expected exit 1) and its
first divergence. Speed (CUDA): the row-parallel exchange (all_gather of the float32 partials +
ops.linear_finish) against NCCL all_reduce of the same tensor in bf16 and in float32, for M × N outputs
(N the model's hidden size and 4096), CUDA events, median of --iters after warm-up, all in this run.

--device cpu --cpu-standins runs it here (gloo) with tests/cpu_standins.py in place of bitalign.ops (bitalign.cpu's
exact twins of the kernels, pinned to the Go bits): every check holds there too, replay --device cpu included.
"""
import argparse
import copy
import json
import os
import sys
import time

if os.environ.setdefault("NCCL_NVLS_ENABLE", "0") != "0":
    raise SystemExit(f"tp_proof.py: NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}: run with NCCL_NVLS_ENABLE=0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bitalign.hf as bh  # noqa: E402
import bitalign_capture as bc  # noqa: E402
from bitalign import tp as btp  # noqa: E402
from torch_proof import CREATED, SEED, build, diff, padded, prompts, replay  # noqa: E402


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


def generate(m, path, ps, new, rec_kw):
    dev = next(m.parameters()).device
    ids, mask = padded(ps, True, dev)
    with torch.no_grad(), bc.record(m, path, "sampler", record_samples=True, created=CREATED, batch_size=len(ps),
                                    seq_ids=list(range(len(ps))), overwrite=True, **rec_kw) as rec:
        out = bh.generate(m, ids, mask, seed=SEED, temperature=1.0, seq_ids=list(range(len(ps))),
                          max_new_tokens=new, min_new_tokens=new)
        rec.sampled(range(len(ps)), out[:, -1])
    P = ids.shape[1]
    return [p + out[b, P:].tolist() for b, p in enumerate(ps)]


def forward(m, path, seqs, rec_kw):
    """One forward over t0..t(N-2) of every sequence, right-padded; the logits (B, T, V) and the logprobs of the
    next tokens (vocab-parallel over m's group when m is sharded with gather_logits: from the logits' shard)."""
    dev = next(m.parameters()).device
    ids, mask = padded([s[:-1] for s in seqs], False, dev)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    final = {i: s[-1] for i, s in enumerate(seqs)}
    with torch.no_grad(), bc.record(m, path, "trainer", final_tokens=final, created=CREATED, batch_size=len(seqs),
                                    overwrite=True, **rec_kw):
        logits = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
    lp = None
    lay = btp.layout(m)
    if bh.is_patched(m) and lay is not None:
        nxt = torch.tensor([s[1:] + [0] * (ids.shape[1] - len(s) + 1) for s in seqs], device=dev)
        flat = logits.reshape(-1, logits.shape[-1])
        with torch.no_grad():
            lp = btp.logprobs(flat[:, lay.v0:lay.v0 + lay.v_local].contiguous(),
                              nxt.reshape(-1).to(torch.int32).contiguous(), lay.group)
    return logits, lp


def bits_differ(a, b):
    return int((a.contiguous().view(torch.int32) != b.contiguous().view(torch.int32)).sum())


def cuda_ms(f, iters):
    """Median milliseconds of f() over iters (CUDA events per call, a barrier before each), after 5 warm-ups."""
    for _ in range(5):
        f()
    ts = []
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def speed(hidden, iters, dev):
    """The row-parallel exchange against NCCL all_reduce of the same (M, N) outputs."""
    from bitalign import ops

    tp = dist.get_world_size()
    rows = []
    for N in sorted({hidden, 4096}):
        for M in (1, 16, 128, 1024, 4096):
            part = torch.randn(M, N, device=dev)
            b16 = part.to(torch.bfloat16)
            f32 = part.clone()
            gathered = torch.empty(tp, M, N, device=dev)
            r = {"M": M, "N": N, "tp": tp, "bytes_f32": 4 * M * N}
            r["nccl_allreduce_bf16_ms"] = cuda_ms(lambda: dist.all_reduce(b16), iters)
            r["nccl_allreduce_f32_ms"] = cuda_ms(lambda: dist.all_reduce(f32), iters)
            r["allgather_f32_ms"] = cuda_ms(lambda: dist.all_gather_into_tensor(gathered, part), iters)
            r["exchange_ms"] = cuda_ms(lambda: ops.linear_finish(btp.gather(part), None, "canonical", "bf16"), iters)
            r["exchange_vs_allreduce_bf16"] = r["exchange_ms"] / r["nccl_allreduce_bf16_ms"]
            rows.append(r)
            log("  speed", json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--model", default="qwen3", help="qwen3 or qwen2-1.5b (torch_proof.py's models)")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=6)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-speed", dest="speed", action="store_false")
    ap.add_argument("--cpu-standins", action="store_true", help="with --device cpu: tests/cpu_standins.py for "
                    "bitalign.ops (exact twins; float64 attention and sampling)")
    ap.add_argument("--bin", default=os.environ.get("BITALIGN_BIN", "bin/bitalign"))
    a = ap.parse_args()
    dev = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        devs = f"cuda:{local}"
        dist.init_process_group("nccl", device_id=torch.device(devs))
    else:
        if not a.cpu_standins:
            raise SystemExit("tp_proof.py: --device cpu needs --cpu-standins (bitalign.ops runs on CUDA tensors)")
        import cpu_standins

        cpu_standins.install()
        devs = "cpu"
        dist.init_process_group("gloo")
    tp, rank = dist.get_world_size(), dist.get_rank()
    if tp not in (2, 4, 8):
        raise SystemExit(f"tp_proof.py: {tp} processes: run with torchrun --nproc-per-node 2 (or 4, 8)")
    one = dist.new_group([0])  # TP 1: rank 0 alone (every rank takes part in creating it)
    out = os.path.join(a.out, a.model + ("-tiny" if a.tiny else ""))
    f = lambda s: os.path.join(out, s)  # noqa: E731
    if rank == 0:
        os.makedirs(out, exist_ok=True)
    t0 = time.time()
    base = build(a.model, a.tiny)  # the same random weights on every rank (seed 0)
    ps = prompts(a.seqs, a.prompt, base.config.vocab_size)
    if rank == 0:
        base.save_pretrained(f("checkpoint"), safe_serialization=True)
    res = {"model": a.model, "tiny": a.tiny, "device": dev, "tp": tp, "nccl_nvls_enable": os.environ["NCCL_NVLS_ENABLE"],
           "backend": dist.get_backend(), "sequences": a.seqs, "new_tokens": a.new}
    if dev == "cuda":
        res["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    dist.barrier()

    def model(group, patched, **kw):
        m = copy.deepcopy(base).to(devs)
        m.config._attn_implementation = "sdpa"
        btp.shard(m, group, **kw)
        return bh.patch(m) if patched else m

    # patched, TP N: every rank
    m = model(None, True)
    seqs = generate(m, f(f"tp{tp}-sampler"), ps, a.new, {})
    logits, lp = forward(m, f(f"tp{tp}-trainer"), seqs, {})
    del m
    # patched, TP 1: rank 0 alone; its results go to every rank
    ref = [None, None, None]
    if rank == 0:
        m1 = model(one, True)
        s1 = generate(m1, f("tp1-sampler.arrow"), ps, a.new, dict(tp=1, rank=0))
        l1, lp1 = forward(m1, f("tp1-trainer.arrow"), seqs, dict(tp=1, rank=0))
        ref = [s1, l1.cpu(), lp1.cpu()]
        del m1
    dist.broadcast_object_list(ref, src=0)
    s1, l1, lp1 = ref
    mine = {"samples_equal": seqs == s1, "logits_bits_differ": bits_differ(logits.cpu(), l1),
            "logprobs_bits_differ": bits_differ(lp.cpu(), lp1)}
    every = [None] * tp
    dist.all_gather_object(every, mine)
    res["patched"] = p = {"ranks": every}
    p["ranks_equal_tp1"] = all(r["samples_equal"] and r["logits_bits_differ"] == 0 and r["logprobs_bits_differ"] == 0
                               for r in every)
    log(f"{a.model}: patched TP {tp} vs TP 1, per rank: {every}")

    # the control: unpatched, the usual arithmetic
    m = model(None, False)
    cl, _ = forward(m, f(f"control-tp{tp}-trainer"), seqs, {})
    del m
    cref = [None]
    if rank == 0:
        m1 = model(one, False)
        cref = [forward(m1, f("control-tp1-trainer.arrow"), seqs, dict(tp=1, rank=0))[0].cpu()]
        del m1
    dist.broadcast_object_list(cref, src=0)
    res["control"] = {"logits_bits_differ_rank%d" % rank: bits_differ(cl.cpu(), cref[0]), "logits": cl.numel()}
    log(f"{a.model}: control (unpatched) TP {tp} vs TP 1: {res['control']}")
    dist.barrier()

    if rank == 0:
        b = a.bin
        p["diff_trainer_tpN_tp1"] = diff(b, f(f"tp{tp}-trainer"), f("tp1-trainer.arrow"), f("diff-trainer.json"))
        p["diff_sampler_tpN_tp1"] = diff(b, f(f"tp{tp}-sampler"), f("tp1-sampler.arrow"), f("diff-sampler.json"))
        rdev = "cuda" if dev == "cuda" else "cpu"
        p["replay_tp1"] = replay(b, f("checkpoint"), f(f"tp{tp}-trainer"), f("replay-tp1.json"), rdev)
        res["control"]["diff_tpN_tp1"] = diff(b, f(f"control-tp{tp}-trainer"), f("control-tp1-trainer.arrow"),
                                              f("control-diff.json"))
        checks = [p["ranks_equal_tp1"], p["replay_tp1"]["exit"] == 0] + [p[k]["exit"] == 0 for k in p
                                                                        if k.startswith("diff_")]
        p["ok"] = all(checks)
        log(f"{a.model}: patched: diff TP {tp}/TP 1 trainer exit {p['diff_trainer_tpN_tp1']['exit']}, sampler exit "
            f"{p['diff_sampler_tpN_tp1']['exit']}; "
            f"replay --device {rdev} exit {p['replay_tp1']['exit']} {p['replay_tp1']['first_divergence'] or ''}"
            f" → {'OK' if p['ok'] else 'FAILED'}")
        log(f"{a.model}: control: diff TP {tp}/TP 1 exit {res['control']['diff_tpN_tp1']['exit']}, first divergence "
            f"{res['control']['diff_tpN_tp1']['first_divergence']}")
    if a.speed and dev == "cuda":
        res["speed"] = speed(base.config.hidden_size, a.iters, devs)
    res["seconds"] = round(time.time() - t0, 1)
    ok = [None]
    if rank == 0:
        with open(f("tp-proof.json"), "w") as fp:
            json.dump(res, fp, indent=1)
        ok = [bool(p["ok"])]
        print(json.dumps({"ok": ok[0], "summary": f("tp-proof.json")}), flush=True)
    dist.broadcast_object_list(ok, src=0)
    dist.destroy_process_group()
    sys.exit(0 if ok[0] else 1)


if __name__ == "__main__":
    main()
