"""spy_summary.py (the py-spy summary of record_bench --loop that scripts/gpu.sh's RECORDSPY step writes)."""

import spy_summary

RAW = """\
MainThread (0x1);<module> (record_bench.py:9);loop (record_bench.py:400);plain_loop (record_bench.py:380);forward (modeling_qwen2.py:240) 30
MainThread (0x1);<module> (record_bench.py:9);loop (record_bench.py:400);recorded_loop (record_bench.py:386);forward (modeling_qwen2.py:240) 31
MainThread (0x1);<module> (record_bench.py:9);loop (record_bench.py:400);recorded_loop (record_bench.py:386);call (bitalign_capture/recorder.py:763);_post (bitalign_capture/recorder.py:520);_tensor (bitalign_capture/recorder.py:587) 7
MainThread (0x1);<module> (record_bench.py:9);loop (record_bench.py:400);recorded_loop (record_bench.py:386);_Observer.__init__.<locals>.call (bitalign_capture/recorder.py:828);_call_impl (torch/nn/modules/module.py:1784);forward (modeling_qwen2.py:240) 11
MainThread (0x1);<module> (record_bench.py:9);loop (record_bench.py:400);recorded_loop (record_bench.py:386);_Observer.__init__.<locals>.call (bitalign_capture/recorder.py:826) 2
Thread 0x2 (bitalign_capture writer);_run (bitalign_capture/pipeline.py:120);emit (bitalign_capture/writer.py:284) 5
MainThread (0x1);<module> (record_bench.py:9);build (record_bench.py:60) 100

"""


def test_summary_splits_plain_recorded_and_writer():
    out = spy_summary.summarize(RAW.splitlines(True), top=5)
    assert out.startswith("samples: plain 30, recorded 56 (the writer thread 5); recorded / plain 1.867")
    lines = out.splitlines()
    inc = lines[lines.index("-- recorded: bitalign_capture functions by inclusive samples") + 1:]
    assert inc[0] == "      11 _Observer.__init__.<locals>.call (bitalign_capture/recorder.py:828)"
    assert sorted(inc[1:4]) == ["       7 _post (bitalign_capture/recorder.py:520)",  # equal counts: any order
                                "       7 _tensor (bitalign_capture/recorder.py:587)",
                                "       7 call (bitalign_capture/recorder.py:763)"]
    assert "       5 emit (bitalign_capture/writer.py:284)" in inc  # the writer thread's frames count as recorded
    assert "build" not in out  # outside the loops
    # the recorder's own: _tensor's 7, the writer's 5, the wrapper's own 2; not the 11 of the module it runs
    mine = out[out.index("-- the recorder's own samples: "):].splitlines()
    assert mine[0].startswith("-- the recorder's own samples: 14 of the recorded 56 (25.0 %;")
    assert mine[1:4] == ["       7 _tensor", "       5 emit", "       2 _Observer.__init__.<locals>.call"]


def test_bad_profile_is_exit_2(tmp_path, capsys):
    p = tmp_path / "x.raw"
    p.write_text("no count here\n")
    assert spy_summary.main([str(p)]) == 2
    assert "x.raw: not a py-spy raw line" in capsys.readouterr().err
    assert spy_summary.main([str(tmp_path / "missing.raw")]) == 2
