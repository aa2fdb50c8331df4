"""The recorder's background writer (pipeline.py) on CPU torch: the same bytes as the synchronous recorder
(background=False, the recorder as it was before the writer thread), the device row sums against numpy's
fingerprints, the staging bound, and the writer thread's errors reaching the caller with the file named."""

import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bitalign_capture as bc  # noqa: E402
from bitalign_capture import fingerprints as fpm  # noqa: E402
from bitalign_capture import pipeline  # noqa: E402
from bitalign_capture import writer as writer_mod  # noqa: E402
from tinymodels import hf_model, padded  # noqa: E402

CREATED = "2026-01-01T00:00:00.000000Z"
SEQS = [[5, 17, 33, 2, 71, 9, 40], [11, 64, 3, 3, 58], [90, 1, 2]]


def first_difference(a, b):
    x, y = open(a, "rb").read(), open(b, "rb").read()
    if x == y:
        return None
    n = min(len(x), len(y))
    i = next((i for i in range(n) if x[i] != y[i]), n)
    return f"{len(x)} vs {len(y)} bytes, first difference at byte {i}"


def generate_then_train(m, rec):
    """generate (a left-padded prefill, then one token per forward from the KV cache: generate's layouts), then
    at step 1 a right-padded forward of the full sequences with a record mask."""
    prompts = [s[:3] for s in SEQS]
    ids, mask, _ = padded(prompts, "left")
    out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    rec.sampled(range(len(prompts)), out[:, -1])
    rec.set_step(1)
    ids, mask, pos = padded(SEQS, "right")
    rec.batch(record_mask=mask.bool())
    m(input_ids=ids, attention_mask=mask, position_ids=pos)


@pytest.mark.parametrize("arch,dtype", [("llama", torch.float32), ("qwen3", torch.bfloat16), ("qwen2", torch.bfloat16)])
@pytest.mark.parametrize("mode", ["full", "fingerprint"])
def test_background_capture_is_the_synchronous_capture(tmp_path, arch, dtype, mode):
    m = hf_model(arch, dtype)
    kw = {"full_ops": ["layers.1.mlp.*", "logits"]} if mode == "fingerprint" else {"record_inputs": True}
    files = {}
    for bg in (False, True):
        p = files[bg] = tmp_path / f"{bg}.arrow"
        with torch.no_grad(), bc.record(m, p, "trainer", mode=mode, created=CREATED, background=bg,
                                        final_tokens={0: 4}, record_samples=True, **kw) as rec:
            generate_then_train(m, rec)
        assert (rec._pipe is not None) == bg
    assert first_difference(files[False], files[True]) is None
    # and field for field (what a reader sees)
    a, b = bc.read(files[False])[1], bc.read(files[True])[1]
    assert len(a) == len(b) > 50
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k != "array"} == {k: v for k, v in y.items() if k != "array"}


def test_row_sums_finish_to_numpy_fingerprints(rng, monkeypatch):
    cases = []
    for dt in (torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.int32, torch.uint8, torch.bool):
        for F in (1, 3, 7, 64):
            x = torch.from_numpy(rng.standard_normal((5, F)).astype(np.float32) * 1e3)
            cases.append((x > 0) if dt == torch.bool else x.to(dt))
    base = torch.from_numpy(rng.integers(-(1 << 31), 1 << 31, (6, 40)).astype(np.int32))
    cases += [base[:, 3:17], base[:, ::2], base.view(torch.uint8)[:, 1:30], base[1:4].view(torch.bfloat16),
              base[:0], base.reshape(6, 4, 10).transpose(1, 2)]
    for widen in (True, False):  # one cast from a uint32 view, or a cast and a mask (where uint32 is missing)
        monkeypatch.setitem(fpm._u32, "cpu", widen)
        for chunk in (fpm.CHUNK_WORDS, 7):  # one pass, several
            monkeypatch.setattr(fpm, "CHUNK_WORDS", chunk)
            for x in cases:
                h, L = fpm.row_sums_torch(x)
                raw = x.contiguous().reshape(x.shape[0], int(np.prod(x.shape[1:])))
                raw = (raw.to(torch.uint8) if raw.dtype == torch.bool else raw).view(torch.uint8).numpy()
                assert L == raw.shape[1]
                want = bc.fingerprint_rows(raw, x.shape[0]) if x.shape[0] else np.zeros(0, np.uint64)
                np.testing.assert_array_equal(fpm.finish(h.numpy(), L).view(np.uint64), want,
                                              err_msg=f"{x.dtype} {tuple(x.shape)} widen {widen} chunk {chunk}")
                np.testing.assert_array_equal(fpm.fingerprint_rows_torch(x).numpy().view(np.uint64), want)


def test_widening_is_checked_once_per_device():
    fpm._u32.pop("cpu", None)
    fpm.row_sums_torch(torch.ones(2, 3))
    assert fpm._u32["cpu"] in (True, False)


class SlowEmit:
    """Writer.emit with a delay (a slow disk) that records the bytes staged at each emit."""

    def __init__(self, monkeypatch, delay=0.002, fail_at=None, error=None):
        self.calls, self.delay, self.fail_at, self.error = 0, delay, fail_at, error
        inner = writer_mod.Writer.emit
        me = self

        def emit(w, header, payload):
            me.calls += 1
            if me.fail_at is not None and me.calls == me.fail_at:
                raise me.error
            import time

            time.sleep(me.delay)
            return inner(w, header, payload)

        monkeypatch.setattr(writer_mod.Writer, "emit", emit)


@pytest.mark.parametrize("full_ops", [None, ["layers.0.*"]])
def test_a_fingerprint_forward_writes_after_it_ends(tmp_path, monkeypatch, full_ops):
    """In fingerprint mode the writer thread starts nothing while a forward runs (Pipeline.hold: its pyarrow work
    would take the GIL from the launching thread) and writes it all after; a forward whose full_ops rows fill
    the staging budget releases it instead of waiting for itself (staging_bytes of a few rows), and the capture is
    the background=False one, byte for byte."""
    m = hf_model("llama", torch.float32)
    ids, mask, pos = padded(SEQS, "left")
    in_forward, during = [False], []
    m.register_forward_pre_hook(lambda mod, a: in_forward.__setitem__(0, True), prepend=True)
    m.register_forward_hook(lambda mod, a, out: in_forward.__setitem__(0, False))
    inner = writer_mod.Writer.emit

    def emit(w, header, payload):
        during.append(in_forward[0])
        return inner(w, header, payload)

    monkeypatch.setattr(writer_mod.Writer, "emit", emit)
    paths = {}
    for bg in (True, False):
        paths[bg] = tmp_path / f"c{int(bg)}.arrow"
        kw = dict(staging_bytes=4096) if full_ops else {}
        with torch.no_grad(), bc.record(m, paths[bg], "trainer", mode="fingerprint", full_ops=full_ops,
                                        created=CREATED, background=bg, **kw) as rec:
            for step in range(2):
                rec.set_step(step)
                m(input_ids=ids, attention_mask=mask, position_ids=pos)
        if bg:
            assert during and (any(during) if full_ops else not any(during)), during
        during.clear()
    assert paths[True].read_bytes() == paths[False].read_bytes()


def test_staging_is_bounded_and_the_bytes_unchanged(tmp_path, monkeypatch):
    m = hf_model("llama", torch.float32)
    ids, mask, pos = padded(SEQS, "left")
    with torch.no_grad(), bc.record(m, tmp_path / "sync.arrow", "trainer", created=CREATED, background=False):
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
    sizes = [len(t["data"]) for t in bc.read(tmp_path / "sync.arrow")[1]]
    largest = max(sizes)
    SlowEmit(monkeypatch)
    budget = 2048
    with torch.no_grad(), bc.record(m, tmp_path / "bg.arrow", "trainer", created=CREATED, staging_bytes=budget) as rec:
        m(input_ids=ids, attention_mask=mask, position_ids=pos)
    assert largest > budget and sum(sizes) > 20 * budget  # one tensor larger than the budget goes alone
    assert 0 < rec.staged_peak <= largest
    assert first_difference(tmp_path / "sync.arrow", tmp_path / "bg.arrow") is None


# 9 emits: tokens, logprobs and one record batch of 29 fingerprint tensors a forward; the error is raised by a
# hook or by close
@pytest.mark.parametrize("fail_at", [3, 9])
def test_writer_thread_error_names_the_file_and_leaves_nothing(tmp_path, monkeypatch, fail_at):
    m = hf_model("llama", torch.float32)
    SlowEmit(monkeypatch, delay=0, fail_at=fail_at, error=OSError(28, "No space left on device"))
    path = tmp_path / "c.arrow"
    with pytest.raises(pipeline.WriterThreadError) as e:
        with torch.no_grad(), bc.record(m, path, "trainer", mode="fingerprint") as rec:
            for i in range(3):
                rec.set_step(i)
                m(input_ids=torch.tensor(SEQS[:1]))
    assert str(path) in str(e.value) and "No space left on device" in str(e.value)
    assert os.listdir(tmp_path) == []  # no capture, no temporary file
    assert not rec._pipe._t.is_alive()
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks for mod in m.modules())


def test_exception_in_forward_stops_the_writer_thread(tmp_path):
    m = hf_model("llama", torch.float32)
    with pytest.raises(RuntimeError, match="boom"):
        with torch.no_grad(), bc.record(m, tmp_path / "c.arrow", "trainer") as rec:
            m(input_ids=torch.tensor(SEQS[:1]))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    assert not rec._pipe._t.is_alive()


def test_a_bad_tensor_is_still_an_error_in_the_hook(tmp_path):
    m = hf_model("llama", torch.float32)
    # two forwards of the same sequences at the same step: positions written twice, raised by the hook
    with pytest.raises(ValueError, match="written twice"):
        with torch.no_grad(), bc.record(m, tmp_path / "c.arrow", "trainer"):
            m(input_ids=torch.tensor(SEQS[:1]))
            m(input_ids=torch.tensor(SEQS[:1]))
    assert os.listdir(tmp_path) == []


def test_record_bench_runs_on_the_cpu(tmp_path):
    import record_bench

    rc = record_bench.main([str(tmp_path), "--device", "cpu", "--tiny", "--iters", "1", "--warmup", "1",
                            "--full-iters", "1", "--batch", "2", "--tokens", "16", "--pairs", "2", "--profile"])
    res = json.load(open(tmp_path / "record-bench.json"))
    assert rc == 0
    assert res["checks"]["full_background_equals_sync"] is True
    assert res["checks"]["fingerprint_background_equals_sync"] is True
    assert res["checks"]["fingerprints_match_full_rows"] is True and res["checks"]["fingerprint_rows_checked"] > 0
    assert res["full"]["bytes_per_forward"] > res["fingerprint"]["bytes_per_forward"] > 0
    assert res["full"]["GBps"] > 0 and res["plain"]["wall_ms"] > 0
    assert res["watch_only"]["wall_ms"] > 0
    assert all(len(d["plain_ms_all"]) == len(d["recorded_ms_all"]) == 2 for d in res["interleaved"].values())
    assert "recorder.py" in (tmp_path / "record-profile.txt").read_text()
    assert sorted(os.listdir(tmp_path)) == ["record-bench.json", "record-profile.txt"]  # the captures are removed


def test_record_bench_loop_for_a_profiler(tmp_path):
    import record_bench

    assert record_bench.main([str(tmp_path), "--device", "cpu", "--tiny", "--tokens", "8", "--loop", "2"]) == 0
    assert os.listdir(tmp_path) == []  # the loop's capture is removed


@pytest.mark.parametrize("mode", ["full", "fingerprint"])
def test_flush_waits_for_everything_recorded(tmp_path, monkeypatch, mode):
    m = hf_model("llama", torch.float32)
    SlowEmit(monkeypatch, delay=0.001)
    with torch.no_grad(), bc.record(m, tmp_path / "c.arrow", "trainer", mode=mode) as rec:
        m(input_ids=torch.tensor([SEQS[0], SEQS[0][::-1]]))
        rec.flush()
        n = rec.written
    assert n > 20 and len(bc.read(tmp_path / "c.arrow")[1]) == n


def _numpy_fingerprints_of(full_path, fp_path):
    """{(op, role, step, seq, pos): fingerprints} of a fingerprint capture, and the same computed by numpy from
    the full capture of the same forwards (the reference)."""
    got = {(t["op"], t["role"][len(fpm.ROLE_PREFIX):], t["step"], t["seq"], t["pos"]): t["array"].view(np.uint64)
           for t in bc.read(fp_path)[1] if t["role"].startswith(fpm.ROLE_PREFIX)}
    want = {(t["op"], t["role"], t["step"], t["seq"], t["pos"]): bc.fingerprint_rows(t["data"], t["ntok"])
            for t in bc.read(full_path)[1] if t["op"] not in fpm.ALWAYS_FULL}
    return got, want


@pytest.mark.parametrize("hold", [1, 4096, None])  # every op alone; a few ops a batch; the whole forward
def test_held_fingerprints_are_numpys_and_the_same_in_both_modes(tmp_path, hold):
    """Fingerprint mode holds op outputs and fingerprints them together (at the forward's end, or when hold_bytes
    passes): the capture is the same bytes with and without the writer thread, and its fingerprints are numpy's of
    the full capture's rows, for padded, generate (KV cache) and record-masked layouts."""
    m = hf_model("qwen2", torch.bfloat16)
    kw = {} if hold is None else {"hold_bytes": hold}
    files = {}
    for name, mode, bg in (("full", "full", True), ("sync", "fingerprint", False), ("bg", "fingerprint", True)):
        p = files[name] = tmp_path / f"{name}.arrow"
        with torch.no_grad(), bc.record(m, p, "trainer", mode=mode, created=CREATED, background=bg,
                                        **(kw if mode == "fingerprint" else {})) as rec:
            generate_then_train(m, rec)
        if mode == "fingerprint":
            # generate's three forwards and the trainer's: one batch each, whatever the bound; past it the held
            # outputs are fingerprinted within the forward (every op alone at hold 1)
            c = rec._held.chunks
            assert rec._held.flushes == 4 and ((c == 0) if hold is None else (c > 4 * 20 if hold == 1 else c > 4)), c
            if hold is not None and hold > 1:
                # past the bound, the op that passed it is the last held: one op's rows at most (here at most
                # the 3 × 7 tokens of the right-padded forward of the widest op, the float32 logits)
                assert hold < rec.held_peak <= hold + 3 * 7 * m.config.vocab_size * 4
    assert first_difference(files["sync"], files["bg"]) is None
    got, want = _numpy_fingerprints_of(files["full"], files["bg"])
    assert got.keys() == want.keys() and len(got) > 100
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=str(k))


@pytest.mark.parametrize("hold", [4096, None])
def test_a_repeated_forwards_batches_come_from_its_plan(tmp_path, monkeypatch, hold):
    """A forward of the shape of an earlier one (same ops, segments of the same contents) at a new step takes the
    earlier flush's header and gather again (Writer.rows_again): the same bytes as made afresh, padded rows
    gathered, outputs fingerprinted inside the forward (hold_bytes) too."""
    m = hf_model("qwen2", torch.bfloat16)
    ids, mask, pos = padded([SEQS[0], SEQS[1][:3]], "left")
    kw = {} if hold is None else {"hold_bytes": hold}

    def run(p):
        with torch.no_grad(), bc.record(m, p, "trainer", mode="fingerprint", created=CREATED, **kw) as rec:
            for step in range(3):
                rec.set_step(step)
                m(input_ids=ids, attention_mask=mask, position_ids=pos)
        return rec._held

    held = run(tmp_path / "planned.arrow")
    assert held.flushes == 3 and held.planned == 2 and (held.chunks > 3) == (hold is not None), held.chunks
    monkeypatch.setattr(bc.writer.Writer, "rows_again", lambda self, rows, step: None)
    assert run(tmp_path / "made.arrow").planned == 0
    assert first_difference(tmp_path / "planned.arrow", tmp_path / "made.arrow") is None


def test_the_default_hold_bound(monkeypatch, tmp_path):
    """hold_bytes by default: 1 GiB off a GPU; on one an eighth of its free memory, from 1 to 8 GiB."""
    from bitalign_capture import held

    assert held.default_bound(torch.device("cpu")) == held.default_bound(None) == 1 << 30
    for free, want in ((4 << 30, 1 << 30), (24 << 30, 3 << 30), (140 << 30, 8 << 30)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, f=free: (f, 141 << 30))
        assert held.default_bound(torch.device("cuda", 0)) == want
    m = hf_model("llama", torch.float32)
    for kw, want in (({}, 1 << 30), ({"hold_bytes": 5000}, 5000)):
        with torch.no_grad(), bc.record(m, tmp_path / "c.arrow", "trainer", mode="fingerprint", overwrite=True, **kw) as rec:
            assert rec._held.bound == want


def test_a_plan_is_not_taken_where_its_positions_are_claimed(tmp_path):
    """The same forward twice at one step (its ops' positions claimed by the first): the second is refused as
    written twice, as without the plan (tokens left out, so the fingerprints are the first to collide)."""
    m = hf_model("llama", torch.float32)
    p = tmp_path / "c.arrow"
    with pytest.raises(ValueError, match=r"layers\.0\.\S+ \[fp\.out\] step 0 seq 0 pos 0 written twice"):
        with torch.no_grad(), bc.record(m, p, "trainer", mode="fingerprint", ops=["layers.0.*"]) as rec:
            m(input_ids=torch.tensor(SEQS[:1]))
            rec.set_step(1)
            m(input_ids=torch.tensor(SEQS[:1]))
            assert rec._held.planned == 1
            rec.set_step(0)
            m(input_ids=torch.tensor(SEQS[:1]))
    assert not p.exists()


def test_an_output_changed_in_place_after_its_hook_is_an_error(tmp_path):
    m = hf_model("llama", torch.float32)
    path = tmp_path / "c.arrow"
    with pytest.raises(ValueError, match=r"c\.arrow: layers\.0\.mlp\.down_proj \[fp\.out\]: its output was changed "
                                         r"in place after its module returned it \(tensor version 0 → 1\)"):
        with torch.no_grad(), bc.record(m, path, "trainer", mode="fingerprint"):
            # down_proj's output is the MLP's: a hook of the MLP changes it after down_proj returned it
            m.model.layers[0].mlp.register_forward_hook(lambda mod, a, out: out.mul_(2))
            m(input_ids=torch.tensor(SEQS[:1]))
    assert os.listdir(tmp_path) == []
    # recorded in full instead, the same change is no error: the full rows are copied in the hook
    with torch.no_grad(), bc.record(m, path, "trainer", mode="fingerprint", ops=["tokens", "layers.0.mlp.down_proj"],
                                    background=False) as rec:
        pass
    assert rec.written == 0


def test_the_kernels_descriptor_table_is_its_loops():
    """The launch's descriptors of contiguous tensors made from arrays (_Kernel._table) are the per-tensor loop's
    (_loop: ptr, row stride, rows, first output row, row bytes), tensors of no rows left out; a tensor on another
    device is refused by both. (The launch itself needs the GPU: test_record_gpu.py.)"""
    k = fpm._Kernel.__new__(fpm._Kernel)
    k.index, k.device = -1, torch.device("cpu")
    xs = [torch.zeros(4, 6, dtype=torch.bfloat16), torch.zeros(2, 3, 5), torch.zeros(0, 8), torch.zeros(3, 1, dtype=torch.int64),
          torch.zeros(6, 7, dtype=torch.uint8), torch.zeros(2, 2, 4, dtype=torch.bfloat16)]
    ns = [4, 6, 0, 3, 6, 4]  # the second as 6 rows of 5, the last as 4 rows of 4
    desc, total, L_max = k._loop(xs, ns)
    np.testing.assert_array_equal(k._table(xs, ns), desc)
    assert total == sum(ns) and L_max == 20 and desc.shape == (5, 5)
    assert desc[:, 3].tolist() == [0, 4, 10, 13, 19] and desc[:, 4].tolist() == [12, 20, 8, 7, 8]
    k.index = 0
    for f in (k._loop, k._table):
        with pytest.raises(ValueError, match=r"a tensor on cpu \(want cpu\)"):
            f(xs, ns)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8])
def test_fingerprint_sets_is_numpys_per_row(rng, dtype):
    """fingerprint_sets (the torch expression off a GPU) of many tensors: each row numpy's fingerprint, rows of
    any length (odd byte counts zero-padded), strided rows."""
    xs, want = [], []
    for n, f in [(3, 5), (1, 1), (4, 7), (2, 64), (5, 3)]:
        base = torch.from_numpy(rng.integers(0, 200, size=(n, 2 * f)).astype(np.float32))
        base = base > 100 if dtype == torch.bool else base.to(dtype)
        t = base[:, :f] if f % 2 else base[:, f:].contiguous()  # rows at a stride of 2f elements, or packed
        xs.append(t)
        want.append(bc.fingerprint_rows(t.contiguous().view(torch.uint8).numpy(), n))
    got = fpm.fingerprint_sets(xs).numpy().view(np.uint64)
    np.testing.assert_array_equal(got, np.concatenate(want))
    assert fpm.backend(xs[0].device) == ("torch", "not a CUDA device")


def test_inference_mode_tensors_are_fingerprinted_in_their_hooks(tmp_path):
    """Under torch.inference_mode tensors have no version counter: their fingerprints are taken in the hook, and
    the capture is the same bytes as under no_grad."""
    m = hf_model("qwen3", torch.bfloat16)
    ids, mask, pos = padded(SEQS, "left")
    paths = []
    for ctx in (torch.no_grad, torch.inference_mode):
        paths.append(tmp_path / f"{ctx.__name__}.arrow")
        with ctx(), bc.record(m, paths[-1], "trainer", mode="fingerprint", created=CREATED) as rec:
            m(input_ids=ids, attention_mask=mask, position_ids=pos)
        assert rec.written > 30
    assert first_difference(*paths) is None
