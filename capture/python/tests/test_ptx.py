"""bitalign.ptx: the packaged PTX is the repository's and matches its manifest; tampering is caught."""

import shutil

import pytest

from bitalign import ptx


def test_checkout_kernels_verify():
    lib = ptx.Library()
    mods = lib.verify()
    assert {"matmul", "rmsnorm", "attention", "logsoftmax", "sample"} <= set(mods)
    assert "-fmad=false" in lib.manifest.flags
    assert lib.ptx("matmul").startswith(b"//") and b".entry" in lib.ptx("matmul")


def _copy(tmp_path):
    d = tmp_path / "kernels" / "cuda"
    shutil.copytree(ptx.Library().dir, d, ignore=shutil.ignore_patterns("*.go", "*.cu", "*.cuh", "experiments"))
    return d


def test_edited_ptx_is_refused(tmp_path):
    d = _copy(tmp_path)
    p = d / "rmsnorm.ptx"
    p.write_bytes(p.read_bytes() + b"\n// edited\n")
    lib = ptx.Library(d)
    lib.ptx("matmul")
    with pytest.raises(ptx.PTXError, match=r"rmsnorm\.ptx: sha256 .* is not the manifest's"):
        lib.ptx("rmsnorm")


def test_missing_module_and_unknown_name(tmp_path):
    d = _copy(tmp_path)
    (d / "rope.ptx").unlink()
    lib = ptx.Library(d)
    with pytest.raises(ptx.PTXError, match=r"rope\.ptx: .*the manifest lists it"):
        lib.verify()
    with pytest.raises(ptx.PTXError, match="lists no module 'nope'"):
        lib.ptx("nope")


@pytest.mark.parametrize(
    "text,msg",
    [
        ("", "lists no files"),
        ("# flags: -O3\nnot a line\n", r":2: not a '<sha256>  <file>' line"),
        ("0" * 64 + "  a.ptx\n", "no '# flags:' line"),
        ("# flags: x\n" + "0" * 64 + "  a.ptx\n" + "1" * 64 + "  a.ptx\n", "a.ptx listed twice"),
    ],
)
def test_bad_manifests(tmp_path, text, msg):
    m = tmp_path / ptx.MANIFEST_NAME
    m.write_text(text)
    with pytest.raises(ptx.PTXError, match=msg):
        ptx.parse_manifest(m)


def test_env_dir_and_missing_dir(tmp_path, monkeypatch):
    d = _copy(tmp_path)
    monkeypatch.setenv(ptx.DIR_ENV, str(tmp_path))
    assert ptx.find_dir() == d
    monkeypatch.setenv(ptx.DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ptx.PTXError, match="no kernels found"):
        ptx.find_dir()
