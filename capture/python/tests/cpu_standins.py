"""CPU stand-ins for bitalign.ops, for running a patched (and sharded) Hugging Face model without a GPU.

Where bitalign.cpu has the kernel's exact twin (linear, rms_norm, residual, swiglu, log_softmax: pinned to the
Go bits by test_torch_cpu.py) the stand-in is that twin. Attention and sampling are float64 references instead
(not the kernels' bits): attention runs head by head, so a head's output depends only on that head's q, k and v
and the stand-in gives the same bits whichever heads a rank holds; sampling reads one whole row at a time."""

import numpy as np
import torch

from bitalign import cpu, ops, sampling


def attention(q, k, v, pos, heads, kv_heads, hd, scale, profile, dt):
    T, S = q.shape[0], k.shape[0]
    g = heads // kv_heads
    see = torch.arange(S)[None, :] <= pos.long()[:, None]
    out = []
    for h in range(heads):
        kh = k[:, (h // g) * hd:(h // g + 1) * hd].double()
        vh = v[:, (h // g) * hd:(h // g + 1) * hd].double()
        s = (q[:, h * hd:(h + 1) * hd].double() @ kh.T) * scale
        p = s.masked_fill(~see, float("-inf")).softmax(-1)
        out.append(cpu.round_dt((p @ vh).float(), dt))
    return torch.cat(out, 1).contiguous()


def sample(logits, seqs, pos, temperature, seed):
    T, V = logits.shape
    if temperature <= 0:
        return logits.argmax(1).to(torch.int32)
    u = sampling.uniform(seed, seqs.cpu().numpy()[:, None], pos.cpu().numpy()[:, None], np.arange(V)[None, :])
    g = -np.log(-np.log(u.astype(np.float64)))
    return torch.from_numpy((logits.double().numpy() / temperature + g).argmax(1)).to(torch.int32)


STANDINS = {"linear": cpu.linear, "rms_norm": cpu.rms_norm, "residual": cpu.residual, "swiglu": cpu.swiglu,
            "log_softmax": cpu.log_softmax, "attention": attention, "sample": sample}


def install(setattr_=setattr):
    """Replaces bitalign.ops' functions with the stand-ins (setattr_: pytest's monkeypatch.setattr to undo)."""
    for name, fn in STANDINS.items():
        setattr_(ops, name, fn)
