"""bitalign.hf on a GPU: a patched Hugging Face model is batch-invariant bit for bit (a sequence's logits alone,
in a right-padded batch, in a left-padded batch and from generate's KV cache are the same bits), its seeded
sampling draws the same tokens at batch 1 and batch 8, the standard profile run through the same test shows
the test can fail, and `bitalign replay` of a patched trainer capture reproduces it (exit 0). Needs torch with
CUDA (and cuda-bindings); the replay test needs BITALIGN_BIN. Passed on an H200 (docs/kernels-torch.md)."""

import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bitalign.ops runs the PTX)"),
]

import bitalign.hf as bh  # noqa: E402
from tinymodels import hf_model, padded as _padded  # noqa: E402

ARCHS = ["llama", "qwen2", "qwen3"]
SEQS = [[(5 + 7 * i + j * (i + 3)) % 120 + 1 for j in range(4 + (5 * i) % 13)] for i in range(8)]  # 8 lengths, 4…16
BIN = os.environ.get("BITALIGN_BIN", "")


def model(arch, profile="canonical", **kw):
    m = hf_model(arch, torch.bfloat16, seed=2, vocab=128, hidden=128, intermediate=256, layers=2, heads=4,
                 kv_heads=2, head_dim=32, positions=256, **kw).cuda()
    m.generation_config.pad_token_id = 0
    return bh.patch(m, profile=profile)


def padded(seqs, left):
    """(input_ids, attention_mask) of a padded batch (tinymodels.padded)."""
    ids, mask, _ = _padded(seqs, "left" if left else "right")
    return ids.cuda(), mask.cuda()


def first_difference(a, b):
    """'' when a and b are the same bits, else the first differing index and the ULP distance (float32)."""
    ai, bi = a.contiguous().view(torch.int32).flatten(), b.contiguous().view(torch.int32).flatten()
    ne = (ai != bi).nonzero()
    if not len(ne):
        return ""
    i = int(ne[0, 0])

    def ordered(x):
        x = int(x)
        return x if x >= 0 else -(x & 0x7FFFFFFF)

    return f"first difference at flat index {i} of {ai.numel()}: {abs(ordered(ai[i]) - ordered(bi[i]))} ulp"


def rows_of(m, left):
    ids, mask = padded(SEQS, left)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        lg = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    return [lg[b][mask[b].bool()] for b in range(len(SEQS))]


def alone(m):
    with torch.no_grad():
        return [m(input_ids=torch.tensor([s], device="cuda")).logits[0] for s in SEQS]


@pytest.mark.parametrize("arch", ARCHS)
def test_patched_forward_is_batch_invariant(arch):
    m = model(arch)
    one = alone(m)
    for left in (False, True):
        for b, got in enumerate(rows_of(m, left)):
            d = first_difference(got, one[b])
            assert not d, f"{arch}, {'left' if left else 'right'}-padded batch of 8, sequence {b}: {d}"


def test_standard_profile_is_not():
    """The same comparison with the standard profile (split-K chosen from M): it must find a difference, or the
    test above could not fail."""
    m = model("qwen3", "standard")
    one = alone(m)
    diffs = [first_difference(got, one[b]) for b, got in enumerate(rows_of(m, False))]
    assert any(diffs), "the standard profile gave batch-invariant logits: the invariance test proves nothing"


@pytest.mark.parametrize("arch", ARCHS)
def test_decode_steps_equal_the_prefill(arch):
    """generate's KV cache: the logits of each decode step are the trainer forward's at that position."""
    m = model(arch)
    s = SEQS[3]
    ids = torch.tensor([s[:4]], device="cuda")
    with torch.no_grad():
        out = m.generate(input_ids=ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, output_logits=True,
                         return_dict_in_generate=True)
        full = m(input_ids=out.sequences[:, :-1]).logits[0]
    for i, step in enumerate(out.logits):
        d = first_difference(step[0], full[3 + i])
        assert not d, f"{arch}: decode step {i} (position {3 + i}): {d}"


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (1.0, 0, 1.0), (1.0, 50, 1.0), (0.8, 0, 0.9),
                                                     (1.2, 40, 0.95)])
def test_generate_batch1_equals_batch8(temperature, top_k, top_p):
    m = model("qwen3")
    ids, mask = padded(SEQS, True)
    kw = dict(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=12, min_new_tokens=12)
    with torch.no_grad():
        batch = bh.generate(m, ids, mask, seed=11, **kw)
        for b, s in enumerate(SEQS):
            one = bh.generate(m, torch.tensor([s], device="cuda"), seed=11, seq_ids=[b], **kw)
            assert one[0, len(s):].tolist() == batch[b, ids.shape[1]:].tolist(), f"sequence {b}"


def test_unpatch_restores_transformers_bits():
    m = model("qwen2")
    bh.unpatch(m)
    ref = hf_model("qwen2", torch.bfloat16, seed=2, vocab=128, hidden=128, intermediate=256, layers=2, heads=4,
                   kv_heads=2, head_dim=32, positions=256).cuda()
    ids = torch.tensor([SEQS[5]], device="cuda")
    with torch.no_grad():
        assert not first_difference(m(input_ids=ids).logits.float(), ref(input_ids=ids).logits.float())


@pytest.mark.skipif(not (BIN and os.access(BIN, os.X_OK)), reason="set BITALIGN_BIN to a built bitalign binary")
@pytest.mark.parametrize("arch", ARCHS)
def test_replay_reproduces_the_patched_trainer(tmp_path, arch):
    import bitalign_capture as bc

    m = model(arch)
    bh.unpatch(m)
    ckpt = tmp_path / "checkpoint"
    m.save_pretrained(ckpt, safe_serialization=True)
    bh.patch(m)
    ids, mask = padded([s[:-1] for s in SEQS], False)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    cap = tmp_path / "trainer.arrow"
    with torch.no_grad(), bc.record(m, cap, "trainer", final_tokens={b: s[-1] for b, s in enumerate(SEQS)},
                                    created="2026-12-01T00:00:00Z", batch_size=len(SEQS)):
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
    for dev in ("cuda", "cpu"):
        p = subprocess.run([BIN, "replay", "--checkpoint", str(ckpt), "--capture", str(cap), "--device", dev],
                           capture_output=True, text=True)
        assert p.returncode == 0, f"{arch}: replay --device {dev}: exit {p.returncode}\n{p.stdout[-3000:]}{p.stderr}"


def test_compiled_patched_forward_equals_eager():
    """torch.compile on a patched model on the GPU (inductor with emulate_precision_casts, docs/kernels-torch.md:
    without it inductor keeps RoPE's float32 intermediates) gives the eager logits' bits, padded batch included."""
    import torch._inductor.config as ic

    m = model("qwen3")
    ids, mask = padded(SEQS, False)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        want = m(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        old = ic.emulate_precision_casts
        ic.emulate_precision_casts = True
        try:
            fwd = torch.compile(m.forward)
            got = fwd(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        finally:
            ic.emulate_precision_casts = old
    d = first_difference(got.float(), want.float())
    assert not d, f"compiled patched forward: {d}"

