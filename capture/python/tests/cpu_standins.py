"""CPU stand-ins for bitalign.ops, for running a patched (and sharded) Hugging Face model without a GPU: where the
CUDA kernels would run, their exact CPU twins in bitalign.cpu (linear, rms_norm, attention, residual, swiglu,
log_softmax, sample), each pinned to the Go reference's bits by kernels/testdata/op_vectors.tsv
(test_torch_cpu.py). Slow (Python loops over the reduction order), exact: a patched model computes the engine's
bits on the CPU, and `bitalign replay --device cpu` of its capture can reproduce them."""

from bitalign import cpu, ops

STANDINS = {"linear": cpu.linear, "rms_norm": cpu.rms_norm, "attention": cpu.attention, "residual": cpu.residual,
            "swiglu": cpu.swiglu, "log_softmax": cpu.log_softmax, "sample": cpu.sample}


def install(setattr_=setattr):
    """Replaces bitalign.ops' functions with the twins (setattr_: pytest's monkeypatch.setattr to undo)."""
    for name, fn in STANDINS.items():
        setattr_(ops, name, fn)
