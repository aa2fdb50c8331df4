"""The inputs of the op vectors: numpy makes the same streams as the Go reference (hashes in op_vectors.tsv)."""

from opvectors import digest, rows, stream


def test_input_streams_match_go():
    ins = [r for r in rows() if r[0] == "input"]
    assert len(ins) >= 3
    for _, params, kv, h in ins:
        assert digest(stream(int(kv["stream"]), int(kv["n"]), int(kv["shift"]))) == h, params


def test_table_covers_every_op():
    ops = {r[0] for r in rows()}
    assert {"linear", "rms_norm", "attention", "log_softmax", "logprobs", "residual", "swiglu", "rope", "embedding",
            "sample"} <= ops
