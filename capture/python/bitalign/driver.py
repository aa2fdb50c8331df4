"""The kernels on a GPU through NVIDIA's CUDA Python driver bindings (cuda-bindings): nothing to compile.

Each module of the checked PTX (bitalign.ptx) is loaded with cuModuleLoadData into the device's primary context,
the context PyTorch uses, so kernels run on PyTorch's tensors and stream. A launch packs its arguments by the
kernel's own parameter list, read from the PTX's `.entry` declaration (.u64 pointers and 64-bit integers, .u32
integers, .f32 floats, .b8[n] structs passed by value): a wrong count or an out-of-range value is an error naming
the kernel, never a garbled launch. Launch shapes come from bitalign.launch (the rules the Go engine uses).
"""

import ctypes
import functools
import re
import struct
import threading

from .launch import Limits, Planner
from .ptx import library

_DEC = re.compile(r"matmul_dec(\d+)(?:_\w+)?$")
_ENTRY = re.compile(r"\.visible \.entry (\w+)\(\s*(.*?)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(u64|u32|s32|s64|f32|f64|b8)(?:\s+\.ptr(?:\s+\.\w+)*)?(?:\s+\.align\s+\d+)?\s+\w+(?:\[(\d+)\])?")


class DriverError(RuntimeError):
    """A CUDA driver call failed; the message names the call, the kernel and the driver's error."""


def entry_params(ptx_text):
    """{kernel name: [(kind, size)]} of a PTX module, kind one of u64/u32/s32/s64/f32/f64/b8 (size in bytes)."""
    out = {}
    text = ptx_text.decode() if isinstance(ptx_text, (bytes, bytearray)) else ptx_text
    for name, params in _ENTRY.findall(text):
        ps = []
        for decl in filter(None, (p.strip() for p in params.split(","))):
            m = _PARAM.match(decl)
            if not m:
                raise ValueError(f"bitalign: {name}: cannot read the PTX parameter {decl!r}")
            kind, n = m.group(1), m.group(2)
            size = int(n) if kind == "b8" else {"u64": 8, "s64": 8, "f64": 8, "u32": 4, "s32": 4, "f32": 4}[kind]
            if kind == "b8" and n is None:
                size = 1
            ps.append((kind, size))
        out[name] = ps
    return out


_FMT = {"u64": "Q", "s64": "Q", "u32": "I", "s32": "I", "f32": "f", "f64": "d"}
_INT = {"u64": 64, "s64": 64, "u32": 32, "s32": 32}


@functools.lru_cache(maxsize=None)
def _layout(params):
    """(struct.Struct, offsets) of a parameter list (a tuple): each slot 8-byte aligned, as pack() lays them out."""
    fmt, offs, o = ["<"], [], 0
    for kind, size in params:
        pad = -o % 8
        if pad:
            fmt.append(f"{pad}x")
            o += pad
        offs.append(o)
        fmt.append(f"{size}s" if kind == "b8" else _FMT[kind])
        o += size
    return struct.Struct("".join(fmt)), tuple(offs)


def pack(kernel, params, args):
    """The launch's argument bytes, one slot per PTX parameter, and the slots' offsets."""
    params = tuple(params)
    if len(args) != len(params):
        raise TypeError(f"bitalign: {kernel} takes {len(params)} arguments, got {len(args)}")
    st, offs = _layout(params)
    vals = []
    for i, ((kind, size), a) in enumerate(zip(params, args)):
        try:
            bits = _INT.get(kind)
            if bits:
                v = int(a)
                if not -(1 << (bits - 1)) <= v < 1 << bits:
                    raise ValueError(f"{v} does not fit {bits} bits")
                vals.append(v & ((1 << bits) - 1))
            elif kind == "b8":
                b = bytes(a)
                if len(b) != size:
                    raise ValueError(f"is {len(b)} bytes, the kernel's struct {size}")
                vals.append(b)
            else:
                vals.append(float(a))
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"bitalign: {kernel}: argument {i} ({kind}): {e}") from None
    return st.pack(*vals), list(offs)


def _check(res, call, what=""):
    err = res[0] if isinstance(res, tuple) else res
    if int(err) != 0:
        from cuda.bindings import driver

        _, name = driver.cuGetErrorName(err)
        raise DriverError(f"bitalign: {call}{' (' + what + ')' if what else ''}: {name.decode() if name else int(err)}")
    return res[1:] if isinstance(res, tuple) and len(res) > 1 else None


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DriverError(
            "bitalign: the kernels need NVIDIA's CUDA Python bindings: pip install cuda-bindings (" + str(e) + ")"
        ) from None
    try:
        _check(driver.cuInit(0), "cuInit")
    except DriverError:
        raise
    except Exception as e:  # the bindings raise their own error when no driver library exists
        raise DriverError(f"bitalign: no usable CUDA driver: {e}") from None
    return driver


class Device:
    """One GPU's loaded kernels: launch(kernel, launch, args, stream)."""

    def __init__(self, index):
        d = _driver()
        self._d = d
        self.index = index
        (self.dev,) = _check(d.cuDeviceGet(index), "cuDeviceGet", f"device {index}")
        (self.ctx,) = _check(d.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        _check(d.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        attr = d.CUdevice_attribute
        (sms,) = _check(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.dev), "cuDeviceGetAttribute")
        (optin,) = _check(
            d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.dev), "cuDeviceGetAttribute"
        )
        self.limits = Limits(int(sms), int(optin))
        self.planner = Planner(self.limits)
        self._fn = {}
        self._params = {}
        lib = library()
        r = self.planner.r
        for mod in lib.modules():
            src = lib.ptx(mod)
            (m,) = _check(d.cuModuleLoadData(src + b"\0"), "cuModuleLoadData", f"{mod}.ptx")
            for name, ps in entry_params(src).items():
                (f,) = _check(d.cuModuleGetFunction(m, name.encode()), "cuModuleGetFunction", name)
                smem = 0
                dec = _DEC.match(name)
                if dec:  # matmul_dec<mt> and its bf16-weight twin matmul_dec<mt>_bf16w
                    smem = self.planner.dec_shared_bytes(int(dec.group(1)))
                elif name in r["big_smem_kernels"]:
                    smem = self.limits.smem_optin - r["smem_reserve"]
                if smem:
                    _check(
                        d.cuFuncSetAttribute(f, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                        "cuFuncSetAttribute",
                        name,
                    )
                self._fn[name] = f
                self._params[name] = ps

    def launch(self, l, args, stream):
        """Enqueues Launch l with args on stream (a CUDA stream handle, e.g. torch.cuda.current_stream().cuda_stream)."""
        f = self._fn.get(l.kernel)
        if f is None:
            raise DriverError(f"bitalign: kernel {l.kernel} is not in the loaded PTX")
        data, offs = pack(l.kernel, self._params[l.kernel], args)
        bufs = _tls.__dict__.setdefault("bufs", {})  # per thread: cuLaunchKernel copies them before it returns
        b = bufs.get(l.kernel)
        if b is None:
            store = (ctypes.c_char * max(len(data), 1))()
            base = ctypes.addressof(store)
            b = bufs[l.kernel] = (store, (ctypes.c_void_p * max(len(offs), 1))(*[base + o for o in offs]))
        store, ptrs = b
        ctypes.memmove(store, data, len(data))
        d = self._d
        _check(d.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        _check(
            d.cuLaunchKernel(
                f, l.grid[0], l.grid[1], l.grid[2], l.block, 1, 1, l.smem, d.CUstream(int(stream)), ctypes.addressof(ptrs), 0
            ),
            "cuLaunchKernel",
            f"{l.kernel} grid {l.grid} block {l.block} smem {l.smem}",
        )


_devices = {}
_lock = threading.Lock()
_tls = threading.local()


def device(index):
    """The loaded kernels of GPU index (loaded on first use, once per process)."""
    with _lock:
        if index not in _devices:
            _devices[index] = Device(index)
        return _devices[index]
