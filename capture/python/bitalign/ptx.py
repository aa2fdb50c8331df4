"""The kernels' PTX, found and checked against its manifest before anything loads it.

`make ptx` writes kernels/cuda/*.ptx and kernels/cuda/MANIFEST.sha256 (internal/ptx: two comment lines naming
the compiler and NVCCFLAGS, then sha256sum lines for every source and PTX). The Go engine embeds those files; this
module reads the same ones: from the wheel's bitalign/_ptx/ (copied there by setup.py at build time: the
repository holds one copy) or, in a checkout or an editable install, from the repository's kernels/cuda. A PTX
whose hash is not the manifest's, or a manifest that lists a module without its file, is an error naming the file:
a kernel changed in kernels/cuda reaches Go and Python together or fails here.
"""

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST_NAME = "MANIFEST.sha256"
# DIR_ENV is internal/ptx.DirEnv: a tree written by `make ptx PTX_OUT=dir` (dir/kernels/cuda/*.ptx) replaces the
# packaged PTX, as it does for the Go tests (scripts/gpu.sh sets it after compiling).
DIR_ENV = "BITALIGN_PTX_DIR"
_PKG_DIR = "kernels/cuda"
_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)$")


class PTXError(Exception):
    """A PTX directory, manifest or module that cannot be trusted; the message names the file."""


@dataclass
class Manifest:
    """A parsed MANIFEST.sha256: the compiler build, NVCCFLAGS, and file name -> sha256 (lower-case hex)."""

    path: Path
    nvcc: str = ""
    flags: str = ""
    files: dict = field(default_factory=dict)

    def modules(self):
        """The PTX module names the manifest lists (e.g. "matmul"), sorted."""
        return sorted(n[: -len(".ptx")] for n in self.files if n.endswith(".ptx"))


def parse_manifest(path):
    """Reads a manifest in internal/ptx's format; errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PTXError(f"bitalign: {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PTXError(f"bitalign: {path}: not a text manifest") from None
    m = Manifest(path)
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# nvcc:"):
            m.nvcc = line[len("# nvcc:") :].strip()
            continue
        if line.startswith("# flags:"):
            m.flags = " ".join(line[len("# flags:") :].split())
            continue
        if not line.strip():
            continue
        g = _LINE.match(line)
        if not g:
            raise PTXError(f"bitalign: {path}:{n}: not a '<sha256>  <file>' line: {line[:80]!r}")
        name = g.group(2)
        if name in m.files:
            raise PTXError(f"bitalign: {path}:{n}: {name} listed twice")
        m.files[name] = g.group(1)
    if not m.files:
        raise PTXError(f"bitalign: {path}: lists no files")
    if not m.flags:
        raise PTXError(f"bitalign: {path}: has no '# flags:' line")
    return m


def _candidates():
    env = os.environ.get(DIR_ENV)
    if env:
        return [Path(env) / _PKG_DIR]
    here = Path(__file__).resolve().parent
    # the wheel's copy first, then a checkout: capture/python/bitalign -> the repository root
    return [here / "_ptx", here.parents[2] / _PKG_DIR]


def package_dir():
    """The packaged (or checkout) kernels directory, ignoring DIR_ENV: where launch.json comes from when a
    DIR_ENV tree (PTX only, as `make ptx PTX_OUT=dir` writes it) has none; None if neither holds a manifest."""
    here = Path(__file__).resolve().parent
    for d in (here / "_ptx", here.parents[2] / _PKG_DIR):
        if (d / MANIFEST_NAME).is_file():
            return d
    return None


def find_dir():
    """The directory holding the PTX and its manifest (see the module doc)."""
    tried = []
    for d in _candidates():
        if (d / MANIFEST_NAME).is_file():
            return d
        tried.append(str(d))
    raise PTXError(
        "bitalign: no kernels found: none of " + ", ".join(tried) + f" holds {MANIFEST_NAME} "
        "(install the package from the repository with pip, or set " + DIR_ENV + ")"
    )


class Library:
    """The checked PTX of one directory: manifest() and ptx(name), each module verified once."""

    def __init__(self, directory=None):
        self.dir = Path(directory) if directory is not None else find_dir()
        self.manifest = parse_manifest(self.dir / MANIFEST_NAME)
        self._cache = {}

    def modules(self):
        return self.manifest.modules()

    def ptx(self, name):
        """Module name's PTX text (bytes), after checking its sha256 against the manifest."""
        if name in self._cache:
            return self._cache[name]
        file = name + ".ptx"
        want = self.manifest.files.get(file)
        path = self.dir / file
        if want is None:
            raise PTXError(f"bitalign: {self.manifest.path}: lists no module {name!r} (it has {', '.join(self.modules())})")
        try:
            b = path.read_bytes()
        except OSError as e:
            raise PTXError(f"bitalign: {path}: {e.strerror or e} (the manifest lists it)") from None
        got = hashlib.sha256(b).hexdigest()
        if got != want:
            raise PTXError(
                f"bitalign: {path}: sha256 {got[:16]}… is not the manifest's {want[:16]}…: the PTX was changed "
                "without `make ptx`, or the manifest without the PTX (docs/gpu.md)"
            )
        self._cache[name] = b
        return b

    def verify(self):
        """Checks every module the manifest lists; returns their names."""
        for m in self.modules():
            self.ptx(m)
        return self.modules()


_default = None


def library():
    """The process's Library over find_dir(), made and verified on first use."""
    global _default
    if _default is None:
        lib = Library()
        lib.verify()
        _default = lib
    return _default
