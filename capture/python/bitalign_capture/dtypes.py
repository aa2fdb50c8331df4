"""Element types of capture tensors: bitalign's names, sizes, and conversions from numpy and torch.

The names are those of Go's capture.DType.String(). bf16 has no numpy type: bf16 data travels as uint16 bits.
"""

import numpy as np

# name -> element size in bytes, in capture.DType order.
SIZES = {
    "bf16": 2,
    "f16": 2,
    "f32": 4,
    "f64": 8,
    "i32": 4,
    "i64": 8,
    "u8": 1,
    "bool": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
}

_FROM_NUMPY = {
    np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}

# bitalign name -> the numpy dtype whose bytes hold it (bf16 as its uint16 bits).
_STORAGE = {
    "bf16": np.dtype("<u2"),
    "f16": np.dtype("<f2"),
    "f32": np.dtype("<f4"),
    "f64": np.dtype("<f8"),
    "i32": np.dtype("<i4"),
    "i64": np.dtype("<i8"),
    "u8": np.dtype("u1"),
    "bool": np.dtype("u1"),
    "f8e4m3": np.dtype("u1"),
    "f8e5m2": np.dtype("u1"),
}


def check(name):
    """Returns name if it is a bitalign dtype name, else raises ValueError."""
    if name not in SIZES:
        raise ValueError(f"bitalign_capture: unknown dtype {name!r} (want one of {', '.join(SIZES)})")
    return name


def from_numpy(dt):
    """The bitalign name of a numpy dtype (bf16 cannot be told from uint16: pass dtype='bf16' explicitly)."""
    dt = np.dtype(dt)
    try:
        return _FROM_NUMPY[dt.newbyteorder("=")]
    except KeyError:
        raise ValueError(f"bitalign_capture: numpy dtype {dt} has no bitalign dtype") from None


def storage(name):
    """The little-endian numpy dtype whose bytes carry elements of the bitalign dtype name."""
    return _STORAGE[check(name)]


def from_torch(dt):
    """The bitalign name of a torch dtype."""
    import torch

    table = {
        torch.bfloat16: "bf16",
        torch.float16: "f16",
        torch.float32: "f32",
        torch.float64: "f64",
        torch.int32: "i32",
        torch.int64: "i64",
        torch.uint8: "u8",
        torch.bool: "bool",
    }
    for attr, name in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")):
        if hasattr(torch, attr):
            table[getattr(torch, attr)] = name
    try:
        return table[dt]
    except KeyError:
        raise ValueError(f"bitalign_capture: torch dtype {dt} has no bitalign dtype") from None


def torch_to_numpy(t):
    """(array, name): a CPU numpy array holding the bytes of torch tensor t, and its bitalign dtype name.

    bf16 and fp8 are reinterpreted bit for bit (no rounding): bf16 as uint16, fp8 as uint8.
    """
    import torch

    name = from_torch(t.dtype)
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if name == "bf16":
        t = t.view(torch.int16)
    elif name in ("f8e4m3", "f8e5m2"):
        t = t.view(torch.uint8)
    elif name == "bool":
        t = t.to(torch.uint8)
    return t.numpy().view(storage(name)), name
