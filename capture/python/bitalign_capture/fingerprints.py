"""Row fingerprints (docs/capture-format.md, "Fingerprint tensors"): the 64-bit hash of each token row's raw
little-endian bytes that a fingerprint capture stores instead of the row, the same as Go's
capture.Fingerprint. For a row of L bytes:

    w_i = the row's bytes as little-endian uint32 words, the last one zero-padded
    K_i = splitmix64(i) | 1      (the i-th splitmix64 output, from 0, of seed 0)
    h   = sum_i w_i * K_i  mod 2^64
    fp  = mix64(h + L * GAMMA  mod 2^64)

fingerprint_rows works on numpy arrays (uint64 arithmetic wraps); fingerprint_rows_torch computes the same on
the tensor's device with integer ops only: an int64 multiply and an int64 sum, which wrap modulo 2^64 on the
CPU and on CUDA (two's complement; torch does not check integer overflow), and shifts made logical with a mask.
The result is the fingerprint's bits as int64, the dtype a capture stores them in.
"""

import operator

import numpy as np

GAMMA = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
# ops a fingerprint capture holds in full (one value a token; Go's capture.FullAlways, checked by the tests)
ALWAYS_FULL = ("tokens", "logprobs", "sample")
ROLE_PREFIX = "fp."  # the role of the fingerprints of role r is "fp." + r
_MASK = (1 << 64) - 1


def mix64(z):
    """splitmix64's finaliser of one Python int (a bijection of 64-bit integers)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * M1) & _MASK
    z = ((z ^ (z >> 27)) * M2) & _MASK
    return z ^ (z >> 31)


_consts = np.zeros(0, dtype=np.uint64)


def constants(n):
    """K_0 .. K_{n-1} as uint64."""
    global _consts
    if len(_consts) < n:
        i = np.arange(1, n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            z = i * np.uint64(GAMMA)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
            _consts = (z ^ (z >> np.uint64(31))) | np.uint64(1)
    return _consts[:n]


def _mix64_np(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
    return z ^ (z >> np.uint64(31))


def fingerprint_rows(data, rows):
    """The fingerprints (uint64 [rows]) of data (a numpy array or bytes) split into rows equal rows."""
    b = np.frombuffer(np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else bytes(data), dtype=np.uint8)
    if rows < 1 or len(b) % rows:
        raise ValueError(f"bitalign_capture: {len(b)} bytes do not split into {rows} rows")
    L = len(b) // rows
    W = (L + 3) // 4
    m = np.zeros((rows, 4 * W), dtype=np.uint8)
    m[:, :L] = b.reshape(rows, L)
    w = m.view("<u4").astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (w * constants(W)).sum(axis=1, dtype=np.uint64) + np.uint64((L * GAMMA) & _MASK)
    return _mix64_np(h)


def fingerprint(row):
    """The fingerprint (a Python int) of one row's bytes."""
    return int(fingerprint_rows(row, 1)[0])


def _signed(u):
    return u - (1 << 64) if u >= 1 << 63 else u


def _lshr(torch, z, s):
    # a logical right shift of int64: torch's >> is arithmetic, so the sign bits it brings in are masked off
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix64_torch(torch, z):
    z = (z ^ _lshr(torch, z, 30)) * _signed(M1)
    z = (z ^ _lshr(torch, z, 27)) * _signed(M2)
    return z ^ _lshr(torch, z, 31)


_kcache = {}
_u32 = {}  # device type -> whether a uint32 view widens to int64 in one cast there (checked once)
CHUNK_WORDS = 1 << 25  # row_sums_torch's int64 words per pass (256 MiB of scratch at most)


def _widen(torch, w):
    """The int32 words w as their unsigned values in int64: one cast from a uint32 view where the device
    supports it (checked once per device type against the two-op form), else a cast and a mask."""
    ok = _u32.get(w.device.type)
    if ok is None:
        t = torch.tensor([[-1, 5, -(1 << 31), 7]], dtype=torch.int32, device=w.device)
        try:
            ok = bool(torch.equal(t.view(torch.uint32).to(torch.int64), t.to(torch.int64) & 0xFFFFFFFF))
        except (RuntimeError, TypeError, AttributeError):
            ok = False
        _u32[w.device.type] = ok
    if ok:
        return w.view(torch.uint32).to(torch.int64)
    return w.to(torch.int64) & 0xFFFFFFFF


def _words(torch, x):
    """The rows of x (a tensor [N, ...]) as int32 words [N, W] (zero-padded) and the row length L in bytes."""
    n = x.shape[0]
    b = x.reshape(n, int(np.prod(x.shape[1:], dtype=np.int64)))
    if b.dtype == torch.bool:
        b = b.to(torch.uint8)
    try:
        b = b.view(torch.uint8)
    except RuntimeError:  # rows not contiguous inside
        b = b.contiguous().view(torch.uint8)
    L = b.shape[1]
    if L == 0:  # empty rows: no words (a zero-size view may refuse the int32 view)
        return torch.zeros((n, 0), dtype=torch.int32, device=x.device), 0
    W = (L + 3) // 4
    if 4 * W != L:
        b = torch.nn.functional.pad(b, (0, 4 * W - L))
    try:
        w = b.view(torch.int32)
    except RuntimeError:  # a row start not on a 4-byte boundary
        w = b.contiguous().view(torch.int32)
    return w, L


def row_sums_torch(x):
    """(h, L): h = sum_i w_i * K_i mod 2^64 of each row of x (a torch tensor [N, ...]) as int64 [N] on x's
    device, before the length term and the mix (finish adds them on the host), and L the row length in bytes.
    Three kernels a pass (the widening cast, the multiply, the sum; rows in passes of CHUNK_WORDS words), no
    float reduction, no copy to the host, no synchronisation."""
    import torch

    w, L = _words(torch, x)
    n, W = w.shape
    key = (W, w.device)
    k = _kcache.get(key)
    if k is None:
        if len(_kcache) > 64:
            _kcache.clear()
        k = _kcache[key] = torch.from_numpy(constants(W).view(np.int64).copy()).to(w.device)
    step = max(1, CHUNK_WORDS // max(W, 1))
    if n <= step:
        return _widen(torch, w).mul_(k).sum(dim=1), L  # int64: wraps modulo 2^64
    return torch.cat([_widen(torch, w[i : i + step]).mul_(k).sum(dim=1) for i in range(0, n, step)]), L


def finish(h, L):
    """The fingerprints (int64 bits) of rows whose row_sums_torch sums are h (a numpy int64 or uint64 array)
    and whose length is L bytes: the length term and the mix, on the host."""
    with np.errstate(over="ignore"):
        z = np.asarray(h).view(np.uint64) + np.uint64((L * GAMMA) & _MASK)
    return _mix64_np(z).view(np.int64)


def fingerprint_rows_torch(x):
    """The fingerprints of the rows of x (a torch tensor [N, ...]: row r is x[r]) as int64 [N] on x's device:
    integer tensor ops only, no float reduction, no copy of the rows to the host."""
    import torch

    h, L = row_sums_torch(x)
    return _mix64_torch(torch, h + _signed((L * GAMMA) & _MASK))  # wraps modulo 2^64


# ----- many tensors at once: the bitalign kernel (kernels/cuda/fingerprint.cu) or the torch expression

BACKEND_ENV = "BITALIGN_CAPTURE_FINGERPRINTS"  # "torch": never the kernel (tests and benchmarks compare both)
_kernels = {}  # cuda device index -> _Kernel, or the reason it is unavailable (a str)


def fingerprint_sets(xs, ns=None):
    """The fingerprints (int64 [Σ rows] on their device) of every row of each tensor of xs (all on one device),
    in order: tensor i is ns[i] rows (default its first dimension), x.reshape(ns[i], -1)'s rows: a 2-D tensor
    of ns[i] rows contiguous inside (stride(1) == 1), or a contiguous tensor of any shape. One fingerprint_rows
    launch of the repository's PTX on a GPU where the bitalign driver (cuda-bindings) loads it, else
    fingerprint_rows_torch of each tensor (CPU, or no driver: what backend() says). Asynchronous on the current
    stream either way."""
    import torch

    if not xs:
        raise ValueError("bitalign_capture: fingerprint_sets of no tensors")
    if ns is None:
        ns = [x.shape[0] for x in xs]
    k = _kernel(xs[0].device)
    if isinstance(k, _Kernel):
        return k.rows(xs, ns)
    return torch.cat([fingerprint_rows_torch(x if x.dim() == 2 and x.shape[0] == n else x.reshape(n, -1))
                      for x, n in zip(xs, ns)])


def backend(device):
    """("kernel", "") when fingerprint_sets launches fingerprint_rows on device, else ("torch", why not)."""
    k = _kernel(device)
    return ("kernel", "") if isinstance(k, _Kernel) else ("torch", k)


def _kernel(device):
    import os

    if device.type != "cuda":
        return "not a CUDA device"
    if os.environ.get(BACKEND_ENV, "") == "torch":
        return f"{BACKEND_ENV}=torch"
    import torch

    idx = device.index if device.index is not None else torch.cuda.current_device()
    k = _kernels.get(idx)
    if k is None:
        try:
            k = _Kernel(idx)
        except Exception as e:  # noqa: BLE001 — no bindings, no driver, stale PTX: the torch expression
            k = f"{type(e).__name__}: {e}"
        _kernels[idx] = k
    return k


class _Kernel:
    """fingerprint_rows on one GPU through bitalign.driver: the constants table (grown to the longest row),
    a descriptor table a launch (pinned, copied asynchronously), the launch shape of Go's planFingerprintRows
    (kernels/cuda/fingerprint.go: one warp a row, 8 warps a block, at most 16 blocks an SM)."""

    WARPS = 8
    BLOCKS_PER_SM = 16

    def __init__(self, index):
        import torch
        from bitalign import driver
        from bitalign.launch import Launch

        self.index = index
        self.device = torch.device("cuda", index)
        self.d = driver.device(index)
        for name in ("fingerprint_rows",):
            if name not in self.d._fn:
                raise RuntimeError(f"the loaded PTX has no {name} (stale PTX? run make ptx)")
        self.Launch = Launch
        self.K = None

    def _consts(self, words):
        import torch

        if self.K is None or self.K.numel() < words:
            n = max(words, 4096, 0 if self.K is None else 2 * self.K.numel())
            self.K = torch.from_numpy(constants(n).view(np.int64).copy()).to(self.device)
        return self.K

    def rows(self, xs, ns):
        import torch

        if all(map(torch.Tensor.is_contiguous, xs)):  # a held forward's outputs: the table without per-tensor Python
            return self._launch(self._table(xs, ns), sum(ns))
        return self._launch(*self._loop(xs, ns))

    def _loop(self, xs, ns):
        """(descriptor rows, total rows, longest row's bytes) of xs of ns rows, tensor by tensor: 2-D tensors of
        rows with a stride, contiguous ones of any shape."""
        desc = []
        total, L_max = 0, 0
        for x, n in zip(xs, ns):
            if n == 0:
                continue
            if x.get_device() != self.index:
                raise ValueError(f"bitalign_capture: fingerprint_sets: a tensor on {x.device} (want {self.device})")
            if x.dim() == 2 and x.shape[0] == n:  # rows with a stride (contiguous inside)
                es = x.element_size()
                L = x.shape[1] * es
                if x.shape[1] > 1 and x.stride(1) != 1:
                    raise ValueError(f"bitalign_capture: fingerprint_sets: a {tuple(x.shape)} tensor with strides "
                                     f"{x.stride()} (want rows contiguous inside)")
                desc.append((x.data_ptr(), x.stride(0) * es, n, total, L))
            else:  # a contiguous tensor of n rows
                if not x.is_contiguous():
                    raise ValueError(f"bitalign_capture: fingerprint_sets: a {tuple(x.shape)} tensor with strides "
                                     f"{x.stride()} as {n} rows (want it contiguous)")
                L = x.nbytes // n
                desc.append((x.data_ptr(), L, n, total, L))
            total += n
            L_max = max(L_max, L)
        return np.array(desc, dtype=np.int64).reshape(-1, 5), total, L_max

    def _table(self, xs, ns):
        """_loop's descriptor rows of contiguous tensors xs of ns rows (those with no rows left out), made from
        arrays of their pointers and sizes."""
        import torch

        if set(map(torch.Tensor.get_device, xs)) != {self.index}:
            bad = next(x for x in xs if x.get_device() != self.index)
            raise ValueError(f"bitalign_capture: fingerprint_sets: a tensor on {bad.device} (want {self.device})")
        k = len(xs)
        n = np.array(ns, dtype=np.int64)
        t = np.empty((k, 5), dtype=np.int64)
        t[:, 0] = np.fromiter(map(torch.Tensor.data_ptr, xs), np.int64, k)
        t[:, 1] = np.fromiter(map(operator.attrgetter("nbytes"), xs), np.int64, k) // np.maximum(n, 1)
        t[:, 2] = n
        t[:, 3] = np.cumsum(n) - n
        t[:, 4] = t[:, 1]
        return t[n > 0]

    def _launch(self, desc, total, L_max=None):
        """One fingerprint_rows launch over desc's rows (ptr, stride, rows, first output row, row bytes)."""
        import torch

        out = torch.empty(total, dtype=torch.int64, device=self.device)
        if total == 0:
            return out
        if L_max is None:
            L_max = int(desc[:, 4].max())
        K = self._consts((L_max + 3) // 4)
        dd = torch.from_numpy(desc).pin_memory().to(self.device, non_blocking=True)
        blocks = min(-(-total // self.WARPS), self.BLOCKS_PER_SM * max(self.d.limits.sms, 1))
        stream = torch.cuda.current_stream(self.device).cuda_stream
        self.d.launch(self.Launch("fingerprint_rows", (blocks, 1, 1), 32 * self.WARPS),
                      [out.data_ptr(), dd.data_ptr(), len(desc), total, K.data_ptr()], stream)
        return out
