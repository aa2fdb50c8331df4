"""The wheel a user pip-installs carries the repository's PTX and manifest, byte for byte, and verifies."""

import os
import subprocess
import sys
import zipfile

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KERNELS = os.path.join(os.path.dirname(os.path.dirname(_PKG)), "kernels", "cuda")


def test_wheel_carries_the_kernels(tmp_path):
    # the build backend comes from this environment (--no-build-isolation: no network); make test installs
    # setuptools >= 70.1, which builds wheels without the separate `wheel` package
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), _PKG],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    (whl,) = [p for p in tmp_path.iterdir() if p.suffix == ".whl"]
    want = sorted(f for f in os.listdir(_KERNELS) if f.endswith(".ptx")) + ["MANIFEST.sha256", "launch.json"]
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        for f in want:
            arc = "bitalign/_ptx/" + f
            assert arc in names, f"{arc} missing from {whl.name}"
            with open(os.path.join(_KERNELS, f), "rb") as src:
                assert z.read(arc) == src.read(), f"{arc} differs from kernels/cuda/{f}"
        assert "bitalign_capture/writer.py" in names
        z.extractall(tmp_path / "site")
    r = subprocess.run(
        [sys.executable, "-c", "import bitalign, bitalign.launch as L; l = bitalign.ptx.library(); L.load_rules(); print(l.dir); print(' '.join(l.modules()))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert r.returncode == 0, r.stderr
    where, mods = r.stdout.splitlines()
    assert where.startswith(str(tmp_path / "site")), where
    assert "matmul" in mods.split()
