"""Copies the kernels' PTX, manifest and launch rules (kernels/cuda, the files the Go engine embeds) into the wheel's
bitalign/_ptx/ at build time, so the repository holds one copy; pyproject.toml holds everything else."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

_KERNELS = Path(__file__).resolve().parent.parent.parent / "kernels" / "cuda"


class BuildWithPTX(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return  # an editable install reads the repository's kernels/cuda (bitalign.ptx.find_dir)
        manifest = _KERNELS / "MANIFEST.sha256"
        if not manifest.is_file():
            raise SystemExit(f"bitalign: {manifest} not found: build the package from a bitalign checkout")
        dest = Path(self.build_lib) / "bitalign" / "_ptx"
        dest.mkdir(parents=True, exist_ok=True)
        for f in [manifest, _KERNELS / "launch.json", *sorted(_KERNELS.glob("*.ptx"))]:
            shutil.copyfile(f, dest / f.name)


setup(cmdclass={"build_py": BuildWithPTX})
