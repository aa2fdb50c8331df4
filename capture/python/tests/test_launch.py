"""bitalign.launch makes, from kernels/cuda/launch.json, exactly the plans the Go launchers make (the table
kernels/cuda/testdata/launch_plans.tsv that the Go tests write and check)."""

import json
import os

import pytest

from bitalign import launch, ptx

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
_PLANS = os.path.join(_REPO, "kernels", "cuda", "testdata", "launch_plans.tsv")


def _args(s):
    out = {}
    for kv in s.split():
        k, v = kv.split("=", 1)
        out[k] = v
    return out


def _b(v):
    return {"true": True, "false": False}[v]


def _table():
    with open(_PLANS) as f:
        head = f.readline()
        sms = int(head.split("sms=")[1].split()[0])
        optin = int(head.split("smem_optin=")[1].split()[0])
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return launch.Limits(sms, optin), rows


def test_plans_match_the_go_launchers():
    lim, rows = _table()
    pl = launch.Planner(lim)
    seen = set()
    bad = []
    for op, args, want in rows:
        a = _args(args)
        seen.add(op)
        if op == "matmul":
            M, K, N, tp = int(a["M"]), int(a["K"]), int(a["N"]), int(a["tp"])
            if tp == 1:
                bounds, tree = launch.matmul_bounds(a["profile"], M, K)
            else:
                bounds, tree = launch.partial_bounds(a["profile"], K, tp)
            vec = K % 4 == 0 and all(v % 4 == 0 for v in bounds)
            p = pl.matmul(M, K, N, bounds, tree, vec)
            got_args = (
                f"profile={a['profile']} M={M} K={K} N={N} tp={tp} bounds={','.join(map(str, bounds))} "
                f"tree={str(tree).lower()} vec={str(vec).lower()} g={p.g} part={p.part_floats} stack={p.stack_floats}"
            )
            got = "; ".join(map(str, p.launches))
        elif op == "rmsnorm":
            got_args, got = args, str(pl.rmsnorm(a["profile"], _b(a["general"]), int(a["rows"]), int(a["C"])))
        elif op == "attention":
            l, tq, mode = pl.attention(
                a["profile"], _b(a["fast"]), _b(a["general"]), int(a["T"]), int(a["nh"]), int(a["nkv"]), int(a["hd"])
            )
            got_args = args.rsplit(" tq=", 1)[0] + f" tq={tq} mode={mode}"
            got = str(l)
        elif op == "elementwise":
            got_args, got = args, str(pl.elementwise(a["kernel"], int(a["n"])))
        elif op == "swiglu":
            got_args, got = args, str(pl.swiglu(int(a["n"]), _b(a["aligned"])))
        elif op == "logsoftmax_max":
            part, fin, nb = pl.logsoftmax_max(int(a["T"]), int(a["V"]))
            got_args, got = f"T={a['T']} V={a['V']} nb={nb}", f"{part}; {fin}"
        elif op == "logsoftmax_sum":
            seg, tree = pl.logsoftmax_sum(int(a["T"]), int(a["nseg"]))
            got_args, got = args, f"{seg}; {tree}"
        elif op == "logsoftmax_finish":
            got_args, got = args, str(pl.logsoftmax_finish(int(a["T"]), int(a["V"])))
        elif op == "logprobs":
            got_args, got = args, str(pl.logprobs(int(a["T"])))
        elif op == "sample":
            got_args, got = args, str(pl.sample(int(a["T"])))
        else:
            raise AssertionError(f"the table has an op this test does not know: {op}")
        if (got_args, got) != (args, want):
            bad.append((op, args, want, got_args, got))
    assert not bad, f"{len(bad)} of {len(rows)} plans differ from Go's; first: {bad[0]}"
    assert seen == {"matmul", "rmsnorm", "attention", "elementwise", "swiglu", "logsoftmax_max", "logsoftmax_sum",
                    "logsoftmax_finish", "logprobs", "sample"}
    assert len(rows) > 1000


def test_bounds():
    assert launch.seg_bounds(4100, 8) == [0, 512, 1025, 1537, 2050, 2562, 3075, 3587, 4100]
    assert launch.matmul_bounds("standard", 5, 100) == ([0, 25, 50, 75, 100], False)
    assert launch.partial_bounds("canonical", 1024, 4) == ([0, 512, 1024], True)
    with pytest.raises(ValueError, match="not in"):
        launch.partial_bounds("canonical", 1024, 3)


def test_bad_rules_file(tmp_path):
    d = ptx.find_dir()
    r = json.loads((d / "launch.json").read_text())
    r["matmul"]["dec"] = [x for x in r["matmul"]["dec"] if x["mt"] != 4]
    p = tmp_path / "launch.json"
    p.write_text(json.dumps(r))
    with pytest.raises(ptx.PTXError, match="mt = 4"):
        launch.load_rules(p)
    p.write_text("{")
    with pytest.raises(ptx.PTXError, match="not JSON"):
        launch.load_rules(p)


def test_a_ptx_tree_without_launch_json_takes_the_packages_rules(tmp_path, monkeypatch):
    """BITALIGN_PTX_DIR (a `make ptx PTX_OUT=dir` tree: PTX and manifest) replaces the PTX only; without a
    launch.json there the rules are the package's, as the Go engine's are embedded."""
    import shutil

    src = os.path.join(_REPO, "kernels", "cuda")
    d = tmp_path / "kernels" / "cuda"
    d.mkdir(parents=True)
    for f in os.listdir(src):
        if f.endswith(".ptx") or f == ptx.MANIFEST_NAME:
            shutil.copyfile(os.path.join(src, f), d / f)
    monkeypatch.setenv(ptx.DIR_ENV, str(tmp_path))
    launch._default_rules.cache_clear()
    try:
        assert ptx.find_dir() == d and not (d / "launch.json").exists()
        with open(os.path.join(src, "launch.json")) as f:
            assert launch.load_rules() == json.load(f)
    finally:
        launch._default_rules.cache_clear()
