"""bitalign_capture: write bitalign captures (docs/capture-format.md) from PyTorch models.

record() hooks a model (torch is imported only there); Writer, the name maps and the token layout work on
numpy arrays alone.
"""

from .fingerprints import fingerprint, fingerprint_rows, fingerprint_rows_torch
from .layout import Layout, Segment, build as build_layout
from .names import (
    ARCHITECTURES,
    HF_NOT_CAPTURED,
    HF_RULES,
    ModelConfig,
    Rule,
    Take,
    canonical_ops,
    feature_size,
    resolve,
    shard_of,
    split_fused,
    user_rules,
)
from .tables import write_logprobs
from .writer import FORMAT_NAME, FORMAT_VERSION, Writer, make_meta, rank_path, read, schema


def record(model, path, side, **kwargs):
    """Hooks model and records its forwards into the capture at path; see recorder.Recorder."""
    from .recorder import Recorder

    return Recorder(model, path, side, **kwargs)


__all__ = [
    "ARCHITECTURES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "HF_NOT_CAPTURED",
    "HF_RULES",
    "Layout",
    "ModelConfig",
    "Rule",
    "Segment",
    "Take",
    "Writer",
    "build_layout",
    "canonical_ops",
    "feature_size",
    "fingerprint",
    "fingerprint_rows",
    "fingerprint_rows_torch",
    "make_meta",
    "rank_path",
    "read",
    "record",
    "resolve",
    "schema",
    "shard_of",
    "split_fused",
    "user_rules",
    "write_logprobs",
]
