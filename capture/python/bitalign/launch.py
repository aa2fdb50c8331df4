"""The kernels' launch rules, read from kernels/cuda/launch.json: the file the Go engine embeds.

Every variant of an op computes the same bits (docs/arithmetic.md fixes the order, and the Go tests check every
variant against the CPU reference), so these choices only change speed. The numbers live once, in launch.json
beside the PTX; this module and kernels/cuda/launch.go make the same plans from them, which
kernels/cuda/testdata/launch_plans.tsv (written by the Go tests) pins for both over a sweep of shapes.

The chains' K-bounds of a matmul (docs/arithmetic.md §3 and §13, kernels/segment.go) are part of a plan: the
8 fixed segments b(s) = floor(s·K/8) of the canonical profile, whatever M, and the standard profile's split-K
chosen from M.
"""

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from .ptx import PTXError, find_dir, package_dir

SEGMENTS = 8  # kernels.Segments: the canonical reduction's fixed segment count


def load_rules(path=None):
    """launch.json as a dict, from the kernels' directory (bitalign.ptx.find_dir) unless path is given; the
    default file is read once per process (the ops consult it on every call). Do not modify the dict."""
    if path is None:
        return _default_rules()
    return _read_rules(Path(path))


@functools.lru_cache(maxsize=1)
def _default_rules():
    p = find_dir() / "launch.json"
    if not p.is_file():  # a BITALIGN_PTX_DIR tree of PTX only: the rules are the package's (Go embeds its own)
        pkg = package_dir()
        if pkg is not None and (pkg / "launch.json").is_file():
            p = pkg / "launch.json"
    return _read_rules(p)


def _read_rules(p):
    try:
        r = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise PTXError(f"bitalign: {p}: {e.strerror or e}") from None
    except ValueError as e:
        raise PTXError(f"bitalign: {p}: not JSON: {e}") from None
    m = r.get("matmul", {})
    mt = 1
    while mt <= m.get("dec_max_m", 0):
        if not any(d.get("mt") == mt for d in m.get("dec", [])):
            raise PTXError(f"bitalign: {p}: matmul.dec has no entry for mt = {mt}")
        mt *= 2
    return r


@dataclass(frozen=True)
class Limits:
    """What the launch rules read of the device: multiprocessors and the opt-in shared memory per block."""

    sms: int
    smem_optin: int


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple  # (x, y, z)
    block: int
    smem: int = 0

    def __str__(self):
        return f"{self.kernel} grid={self.grid[0]},{self.grid[1]},{self.grid[2]} block={self.block} smem={self.smem}"


@dataclass
class MatmulPlan:
    launches: list = field(default_factory=list)
    g: int = 0  # segments a tiled block runs in a row (0: matmul_dec or matmul_small)
    bm: int = 0
    part_floats: int = 0
    stack_floats: int = 0


def _cdiv(n, d):
    return -(-n // d)


def _pow2ceil(n):
    p = 1
    while p < n:
        p *= 2
    return p


def _flat(kernel, n, per, threads):
    return Launch(kernel, (_cdiv(n, per), 1, 1), threads)


# --- the chains' bounds (kernels/segment.go) -------------------------------------------------------------------


def seg_bounds(L, G):
    return [j * L // G for j in range(G + 1)]


def standard_splits(M):
    return 4 if M < 8 else 2 if M < 64 else 1


def chunk_bounds(L, n):
    c = _cdiv(L, n)
    b = [0]
    lo = c
    while lo < L:
        b.append(lo)
        lo += c
    return b + [L]


def matmul_bounds(profile, M, K):
    """(bounds, tree) of a whole matmul: canonical 8 segments by the tree; standard split-K from M, left to right."""
    if profile == "standard":
        return chunk_bounds(K, standard_splits(M)), False
    return seg_bounds(K, SEGMENTS), True


def partial_bounds(profile, k_local, tp):
    """(bounds, tree) of one rank's share of a row-parallel matmul at TP degree tp (1, 2, 4 or 8)."""
    if tp not in (1, 2, 4, 8):
        raise ValueError(f"bitalign: tensor-parallel degree {tp} not in {{1, 2, 4, 8}} (8-segment rule)")
    if profile == "standard":
        return [0, k_local], False
    return seg_bounds(k_local, SEGMENTS // tp), True


# --- the plans (kernels/cuda/launch.go) ---------------------------------------------------------------------------


class Planner:
    """Plans for one device from the rules of launch.json."""

    def __init__(self, limits, rules=None):
        self.lim = limits
        self.r = rules if rules is not None else load_rules()

    def _row_smem(self):
        return self.lim.smem_optin - self.r["smem_reserve"]

    def dec_shared_bytes(self, mt):
        (d,) = [d for d in self.r["matmul"]["dec"] if d["mt"] == mt]
        return d["stages"] * (SEGMENTS * 32 * (d["span"] + 4) + SEGMENTS * mt * d["span"]) * 4

    def matmul(self, M, K, N, bounds, tree, vec, force_bm=0, force_g=0):
        m = self.r["matmul"]
        if M <= 0 or N <= 0:
            return MatmulPlan()
        if vec and M <= m["dec_max_m"]:
            mt = _pow2ceil(M)
            return MatmulPlan(
                [Launch(f"matmul_dec{mt}", (_cdiv(N, m["dec_cols"]), 1, 1), m["dec_block"], self.dec_shared_bytes(mt))]
            )
        if M <= m["small_max_m"]:
            return MatmulPlan(
                [_flat(f"matmul_small{_pow2ceil(M)}", N, m["small_cols"], m["small_cols"] * m["small_threads_per_col"])]
            )
        nseg = len(bounds) - 1
        bm = m["tile_m_small"] if M <= m["tile_m_small_max_m"] else m["tile_m"]
        if force_bm:
            bm = force_bm
        g = nseg
        tiles = _cdiv(N, m["tile_n"]) * _cdiv(M, bm)
        while g > 1 and not self._wave_fits(tiles * (nseg // g), m["blocks_per_sm"] * self.lim.sms):
            g //= 2
        if force_g and nseg % force_g == 0:
            g = force_g
        if not tree and g != nseg:
            g = 1
        grid = (_cdiv(N, m["tile_n"]), _cdiv(M, bm), nseg // g)
        nparts = nseg // g
        part = (nparts * M * N + 63) & ~63 if nparts > 1 else 0
        nslots = g.bit_length() - 1
        stack = grid[0] * grid[1] * grid[2] * nslots * bm * m["tile_n"]
        name = f"matmul_t{bm}" + ("_vec" if vec and N % 4 == 0 else "")
        ls = [Launch(name, grid, m["tile_block"])]
        if nparts > 1:
            ls.append(self.matmul_reduce(M, N))
        return MatmulPlan(ls, g, bm, part, stack)

    def _wave_fits(self, blocks, slots):
        """kernels/cuda/launch.go waveFits: many_waves waves or more, or a last wave full_wave_num/full_wave_den full."""
        m = self.r["matmul"]
        waves = -(-blocks // slots)
        return blocks >= m["many_waves"] * slots or blocks * m["full_wave_den"] >= m["full_wave_num"] * waves * slots

    def matmul_reduce(self, M, N):
        """matmul_reduce over (M, N) outputs: the tiled matmul's second launch, and bitalign.tp's finish of the
        ranks' gathered partials (ops.linear_finish)."""
        b = self.r["matmul"]["reduce_block"]
        return _flat("matmul_reduce", M * N, b, b)

    def rmsnorm(self, profile, general, rows, C):
        r = self.r["rmsnorm"]
        seg = r["row_segments"]
        stride = ((C + seg - 1) // seg + 31) // 32 * 32 + 1
        smem = 4 * seg * stride
        # rows of C <= warp_max_c run a warp a row (the same bits; launch.go's planRMSNorm says why)
        if profile == "canonical" and smem <= self._row_smem() and not general and C > r["warp_max_c"]:
            return Launch("rmsnorm_row", (rows, 1, 1), r["row_block"], smem)
        return _flat("rmsnorm", rows, r["rows_per_block"], r["block"])

    def attention(self, profile, fast, general, T, nh, nkv, hd):
        """(launch, tq, mode): tq the query rows an attention_blk block serves (0: the general kernel), mode the
        general kernel's variant (0 canonical, 1 standard prefill, 2 standard decode, 3 fast-exp)."""
        a = self.r["attention"]
        if profile == "canonical" and not general:
            grp = nh // nkv
            tq = min(T, max(1, a["tasks"] // grp))
            smem = 4 * (a["kb"] * (hd + 4) + a["kb"] * hd + a["tasks"] * a["kb"] + a["tasks"] * hd)
            if tq * grp <= a["tasks"] and smem <= self._row_smem():
                name = f"attention_blk{_pow2ceil(_cdiv(hd, 32))}" + ("_fast" if fast else "")
                return Launch(name, (_cdiv(T, tq), nkv, 1), 32 * a["warps"], smem), tq, 0
        mode = 3 if fast else (1 if T > 1 else 2) if profile == "standard" else 0
        return _flat("attention", T * nh, a["rows_per_block"], a["block"]), 0, mode

    def elementwise(self, kernel, n):
        b = self.r["elementwise"]["block"]
        return _flat(kernel, n, b, b)

    def swiglu(self, n, aligned):
        """kernels/cuda/launch.go planSwiGLU: swiglu4 for n a multiple of 4 with 16-byte aligned buffers."""
        if aligned and n % 4 == 0:
            b = self.r["elementwise"]["block"]
            return _flat("swiglu4", n // 4, b, b)
        return self.elementwise("swiglu", n)

    def logsoftmax_max(self, T, v_local):
        s = self.r["logsoftmax"]
        nb = _cdiv(v_local, s["chunk"])
        return Launch("ls_max_part", (nb, T, 1), s["block"]), _flat("ls_max_fin", T, s["max_fin_rows_per_block"], s["block"]), nb

    def logsoftmax_sum(self, T, nseg):
        s = self.r["logsoftmax"]
        return Launch("ls_sum_seg", (nseg, T, 1), s["block"]), _flat("ls_tree", T, s["tree_block"], s["tree_block"])

    def logsoftmax_finish(self, T, V):
        b = self.r["logsoftmax"]["finish_block"]
        return _flat("ls_finish", T * V, b, b)

    def logprobs(self, T):
        b = self.r["logprobs"]["block"]
        return _flat("logprobs", T, b, b)

    def sample(self, T):
        return Launch("sample", (T, 1, 1), self.r["sample"]["block"])
