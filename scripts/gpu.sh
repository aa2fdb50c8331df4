#!/usr/bin/env bash
# scripts/gpu.sh — build-check-time on the GPU machine in one call (see docs/gpu.md).
# Here (no GPU):   make gpu-build            # CGO_ENABLED=0 test binaries into .gpu/
# There (device):  bash scripts/gpu.sh [ptx] [test] [engine] [nvls] [ui] [bench] [tc] [tcattn]   (default: all but tcattn), with .gpu carried;
#                  load, torch, tp, size, sweep, record, replay and e2e only when named.
#   ptx   runs `make ptx` (every PTX: kernels/cuda, kernels/cuda/tc and nvls/cuda, the Makefile's NVCCFLAGS) into a
#         fresh tree, says which PTX differ from the committed ones and leaves the tree in $OUT/ptx.tar (PTX and the
#         three manifests; `tar -xf ptx.tar` at the repository root puts them in place); the tests then load the
#         fresh PTX (BITALIGN_PTX_DIR) so one call checks new kernel sources.
#   test  runs the cuda/ and kernels/cuda/ tests with BITALIGN_REQUIRE_GPU=1 (a skip becomes a failure).
#   engine runs the engine's CUDA-backend tests (demo trainer and sampler captures bitwise equal to the CPU's), the
#         tc profile's cases with the tc PTX (the ptx step's fresh tree, else the committed, embedded one): the
#         CPU↔GPU row, the tc demo, the invariance matrix on the GPU (TestCUDATCMatchesCPU, TestCUDADemoTC,
#         TestCUDAInvarianceTC; BITALIGN_REQUIRE_TC=1).
#   nvls  runs the GPU collectives' tests (the 2-GPU ones need a machine with two).
#   audit plants bugs in transformers pairs made on the GPU (capture/python/tests/plant.py) and checks that
#         bitalign audit's first suspect names each (docs/audit.md).
#   ui    runs the debugger's real-session test with replay on the GPU (verdicts as on the CPU).
#   bench runs the Go benchmarks and the cuBLAS reference (PyTorch) in the same call.
#   tc    the tensor-core matmul (issue 14, kernels/cuda/tc/*.cu): with the ptx step's fresh tc PTX (BITALIGN_PTX_DIR)
#         or, without a ptx step in the call, the committed PTX the test binaries embed, runs the tc GPU tests
#         (bitwise against the CPU tc matmul,
#         BITALIGN_REQUIRE_TC=1: a tc module that does not load fails; every loaded M > 64 family: tmap, tma,
#         wgmma, mma.sync; cuda's tensor-map tests) and BenchmarkMatmulTC, then scripts/tc_bench.py prints one
#         table beside cuBLAS bf16 (torch.mm) at the same shapes (launch.json's big_order), one per entry of
#         TCPATHS (default "tma tmapall:128 tmapall:256 wgmma mmasync": -tc-path=P -tc-bn=BN; tmapall is tmap
#         at every M, decode included) that loaded at the square, gate/up and o_proj shapes, and one of tmap with
#         bf16 output (-tc-bf16, MatmulTCBF16) at every shape, all in the same call; then the decode sizes
#         (M = 1…64) once per entry of TCDECS (default "mma tmd": -tc-dec=D; tmd:C also forces C consumer warps,
#         tmd:C:G also G segments a work item; TCDECM="1|64" other M, TCDECSHAPES a regex of the shapes);
#         TCBIG=0 runs only these; TCREPS=R times them as R launches back to back (cuBLAS: R in a CUDA graph);
#         TCBASE=dir runs them once more with the PTX tree dir (a kernel change's before, in the same call).
#         ptxas -v of each module (registers, spills) first. The step also runs the tc attention's part (below;
#         TCATT=0 skips it in the tc step).
#   tcattn the tensor-core attention alone (kernels/cuda/tc/tc_attention.cu; also part of tc): the same PTX, its
#         GPU tests (bitwise against kernels.AttentionTC over the sweep and in batched launches, chunked prefill
#         and decode equal to the full prefill, the float64 bound) and BenchmarkAttentionTC, printed by
#         scripts/tc_bench.py beside torch's scaled_dot_product_attention with the flash backend at the same shapes
#         (TCATT_BENCH=prefill or decode: one half). Not in the default list: `bash scripts/gpu.sh tcattn`.
#   load  generates a Qwen2-1.5B-shaped bf16 sharded checkpoint (3.1 GB, 28 layers) once in $LOAD_DIR and times
#         loading it onto GPU 0 (engine.Load plus every weight's upload) against cat of the same files in the same
#         run, and the peak RSS of such a load in a fresh process (BenchmarkLoadCheckpoint: load/cat, rss/ckpt);
#         then the same on the CPU. Not in the default list: `bash scripts/gpu.sh load`.
#   torch runs the PyTorch library's GPU tests (bitalign.ops against the Go reference's bits, bitalign.hf's patched
#         models: batch invariance, generate at batch 1 = batch 8, replay exit 0) and capture/python/tests/torch_proof.py
#         (patched trainer vs patched generate, replay on cuda and cpu, the unpatched control group, speed) into
#         $OUT/torch-proof (proof.json is its summary). Not in the default list: `bash scripts/gpu.sh torch`.
#   tp    bitalign.tp over NCCL (capture/python/tests/tp_proof.py under torchrun, NCCL_NVLS_ENABLE=0): a patched
#         sharded model at TP 2 (and 4 with four GPUs) bitwise equal to TP 1 and to bitalign replay, the unpatched
#         control's TP divergence, the row-parallel exchange's latency against NCCL all_reduce, into
#         $OUT/tp-proof (tp-proof.json per model). Needs two GPUs (nvidia-h200-x2): with one it says so and skips.
#         Not in the default list: `bash scripts/gpu.sh tp`. TPFLAGS: more tp_proof.py flags.
#   size  issue 15's diff at size on this machine's cores: session's BenchmarkDiffSize and BenchmarkOpenSize on a
#         generated Qwen2-1.5B-shaped pair (SIZE=LAYERS,SEQS,TOKENS, default 28,4,256: 2.8 GiB per side; the
#         files stay in $SIZEDIR), then the real `cmp` and `bitalign diff` timed on the same files in the same
#         call (SIZEBENCHTIME iterations, default 3x). Needs about 6 × the pair's size of disk. Not in the default list:
#         `bash scripts/gpu.sh size`.
#   sweep every tiled-matmul plan (tile rows, segments per block) at the Qwen2-1.5B and Qwen2.5-7B projection
#         shapes beside cuBLAS SGEMM, after checking that they give the same bits (scripts/plan_sweep.py): the
#         figures launch.json's matmul rules are fitted to. Not in the default list: `bash scripts/gpu.sh sweep`.
#   e2e   issue 14's end-to-end forward: capture/python/tests/e2e_forward.py builds replay_size.py's random bf16
#         models (Qwen2-1.5B's shapes at 4 × 256 tokens, Qwen3-8B's at 8 × 512), times transformers' bf16 SDPA
#         forward (CUDA events), saves the model and runs the engine's BenchmarkForwardSize on that checkpoint at
#         the same shape for each profile (ms/forward and the per-op device-time table), in the same call; into
#         $OUT/e2e. E2EFLAGS: more flags (e.g. --models 1.5b --profiles canonical). Not in the default list.
#   record issue 15's recording goals: capture/python/tests/record_bench.py on a Qwen2-1.5B-shaped random bf16 model
#         over 4 × 256 tokens times, in one call, the plain forward, the forward with every op recorded as
#         fingerprints and in full (GB/s = bytes / wall time to the end of close, which fsyncs; files in
#         $RECORD_DIR on local disk, removed after), the capture sizes and their ratio, and checks the background
#         writer's captures against background=False byte for byte, the kernel's fingerprints against torch's and
#         numpy's, `bitalign diff` of the fingerprint capture against the full one (exit 0), the disk's own rate
#         (os.write + fsync of as many bytes); test_record_gpu.py first; $OUT/record-bench.json is its summary.
#         About 9 GB of disk. Not in the default list: `bash scripts/gpu.sh record`. RECORDFLAGS: more flags.
#         RECORDBASE=a .tgz of another commit's capture/python (`git archive REV capture/python | gzip`, carried;
#         not .gz, which the unpacking above would gunzip):
#         this record_bench.py then runs RECORDROUNDS (default 2) times more with each package by turns, base
#         first (RECORD_BENCH_PACKAGE; --no-baseline --no-full), in the same call, so that the host's drift between
#         minutes reaches both: a table of each run's figures, $OUT/record-ab.json (all of them) and
#         $OUT/record-base.log (the last base run's).
#         RECORDPROFILE=1: record_bench --profile (cProfile of the recorder) into $OUT/record-profile.txt.
#         RECORDSPY=a py-spy binary (carried: `pip download py-spy`, its wheel's bin/py-spy is static): py-spy samples
#         record_bench --loop 40 (plain, then fingerprint-recorded forwards) and spy_summary.py writes what the
#         recorded ones spend beside the plain ones into $OUT/record-spy.txt (the raw profile stays there: 35-70 MB).
#   replay issue 15's replay at size (capture/python/tests/replay_size.py): random Qwen2-1.5B-shaped (4 × 256 tokens)
#         and Qwen3-8B-shaped (8 × 512) bf16 models built on the GPU and saved, their trainer captures recorded
#         with bitalign_capture (1.5B full and fingerprint; 8B fingerprint with layer $REPLAY_LAYER in full), then
#         `bitalign replay --device cuda --timings` end to end (wall, peak RSS, phases), --ops 'layers.L.*' too;
#         a table and $OUT/replay-size/replay-size.json. Needs about 40 GB of disk (the 8B checkpoint is 16 GB,
#         deleted at the end). Not in the default list: `bash scripts/gpu.sh replay`. REPLAYFLAGS: more flags
#         (e.g. --models 1.5b; --profile tc: the tc engine's replay beside transformers' bf16 forward in the same run).
#   ncu   Nsight Compute readings (--clock-control none: the clocks stay as they are) of the kernels issue 14's gaps
#         are about, each beside its anchor's kernel at the same shape: tc attention prefill (hd 128, 28/4, T = 4096)
#         and decode (S = 4096, B = 8) against SDPA's flash kernels, the tc matmul at Qwen2.5-7B's gate/up and o_proj
#         shapes (M = 4096) against cuBLAS bf16 (torch.mm). Sections: speed of light, compute and memory workload,
#         occupancy, launch, warp states, scheduler, instructions. One profiled launch of each, after warm-up
#         launches; $OUT/ncu-*.txt. NCUKERNELS: a subset (attn-prefill attn-decode mm-gateup mm-o; mm-dec-gateup mm-dec-kv mm-dec-down: M = 1, not in the default); NCUSIDE=tc or anchor: one side only; NCUSOURCE=1 adds the source counters (top stall locations). Not in the default list.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
[[ -n "${GPU:-}" ]] && export CUDA_VISIBLE_DEVICES="$GPU"  # the tests use the first visible GPU; TP 2 uses two
export BITALIGN_REQUIRE_GPUS="$(nvidia-smi -L | wc -l)"       # the 2-GPU engine test fails instead of skipping
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
steps="${*:-ptx test engine nvls ui audit bench tc}"
NVCC="${NVCC:-nvcc}"
rc=0
# tc_ptx sets tcdir, the directory of the tc PTX (tc_*.ptx) the tc steps load: the ptx step's fresh
# $BITALIGN_PTX_DIR/kernels/cuda/tc, else the committed kernels/cuda/tc, which the test binaries embed (the tests
# then run without BITALIGN_PTX_DIR, as a user's --profile tc does).
tcdir=""
tc_ptx() {
  [[ -n "$tcdir" ]] && return 0
  if [[ -n "${BITALIGN_PTX_DIR:-}" ]]; then
    tcdir="$BITALIGN_PTX_DIR/kernels/cuda/tc"
    echo "tc: the fresh tc PTX of $tcdir (BITALIGN_PTX_DIR)"
  else
    tcdir="kernels/cuda/tc"
    echo "tc: the committed tc PTX (embedded; no BITALIGN_PTX_DIR)"
  fi
  return 0
}

# make gpu-build xz-compresses them (python3's lzma unpacks them: no xz needed there); a .gz of an older build too
for f in .gpu/*.xz .gpu/*.gz; do
  [[ -e "$f" ]] || continue
  case $f in
  *.gz) gunzip -f "$f" ;;
  *.xz) python3 -c 'import lzma, os, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[1][:-3], "wb") as dst: shutil.copyfileobj(src, dst, 1 << 20)
os.remove(sys.argv[1])' "$f" ;;
  esac || { echo "gpu.sh: cannot unpack $f"; exit 1; }
  chmod +x "${f%.*}"
done
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
"$NVCC" --version | tail -2

if [[ " $steps " == *" ptx "* ]]; then
  fresh=$(mktemp -d)
  if command -v make >/dev/null; then # the one pipeline and flag set: make ptx (scripts/ptx.sh)
    echo "== ptx: $NVCC $(make -s print-nvccflags)"
    make -s ptx NVCC="$NVCC" PTX_OUT="$fresh" || { echo "ptx: nvcc FAILED"; rc=1; }
  else # no make here: the same script, with NVCCFLAGS read from the Makefile
    flags=$(sed -n 's/^NVCCFLAGS *:= *//p' Makefile)
    echo "== ptx (no make): $NVCC $flags"
    NVCC="$NVCC" NVCCFLAGS="$flags" PTX_OUT="$fresh" bash scripts/ptx.sh || { echo "ptx: nvcc FAILED"; rc=1; }
  fi
  for d in kernels/cuda kernels/cuda/tc nvls/cuda; do
    for f in "$fresh/$d"/*.ptx; do
      cmp -s "$f" "$d/$(basename "$f")" && echo "ptx: $d/$(basename "$f") identical to the committed one" ||
        echo "ptx: $d/$(basename "$f") DIFFERS from the committed one"
    done
  done
  # registers and spills of the matmul kernels (ptxas as the driver's JIT would run it)
  ptxas -arch=sm_90 -v "$fresh/kernels/cuda/matmul.ptx" -o /dev/null 2>&1 | grep -E "entry function|spill|Used" |
    sed -e "s/ptxas info *: //" | paste - - - | grep -E "matmul_(t|dec)" | sed -e "s/Compiling entry function//"
  tar -C "$fresh" -cf "$OUT/ptx.tar" kernels/cuda nvls/cuda
  export BITALIGN_PTX_DIR="$fresh" # kernels/cuda and nvls load $fresh/<their directory>/*.ptx
fi

if [[ " $steps " == *" test "* ]]; then
  echo "== test"
  # each test binary runs in its package directory, as `go test` does (the manifest test reads files there)
  (cd cuda && BITALIGN_REQUIRE_GPU=1 ../.gpu/cuda.test -test.v -test.count=1 -test.timeout 300s) 2>&1 | tee "$OUT/test-cuda.log" |
    grep -E "^(---|===|ok|FAIL|PASS)|gpu_test|driver_test" | grep -v "=== RUN" || true
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test -test.v -test.count=1 -test.timeout 480s ${TESTFLAGS:-}) 2>&1 |
    tee "$OUT/test-kernels.log" | grep -E "^(--- |ok|FAIL|PASS)|first difference|gpu |seed" | head -150 || true
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" engine "* ]]; then
  echo "== engine (CUDA backend vs CPU, bitwise; the tc profile's cases with the tc PTX)"
  tc_ptx # the tc profile's engine tests need the tc modules: BITALIGN_REQUIRE_TC=1 fails them when one is missing
  (cd engine && BITALIGN_REQUIRE_GPU=1 BITALIGN_REQUIRE_TC=1 ../.gpu/engine.test -test.run 'CUDA|SelectBackend' \
    -test.v -test.count=1 -test.timeout 540s ${TESTFLAGS:-}) 2>&1 | tee "$OUT/test-engine.log" |
    grep -E "^(--- |    ---|ok|FAIL|PASS)|differs|diverge|GPU|tc " | head -90
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" nvls "* ]]; then
  echo "== nvls (the GPU collectives, bitwise against the CPU transport)"
  # its GPU tests need two GPUs: they must pass where there are two, and skip (saying so) where there is one
  req=$([[ "$BITALIGN_REQUIRE_GPUS" -ge 2 ]] && echo 1 || echo 0)
  (cd nvls && BITALIGN_REQUIRE_GPU=$req ../.gpu/nvls.test -test.v -test.count=1 -test.timeout 300s) 2>&1 |
    tee "$OUT/test-nvls.log" | grep -E "^(--- |ok|FAIL|PASS)|GPU" | head -40
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" ui "* ]]; then
  echo "== ui (the debugger's replay on the GPU)"
  (cd ui && BITALIGN_REQUIRE_GPU=1 ../.gpu/ui.test -test.run 'RealSession' -test.v -test.count=1 -test.timeout 200s) 2>&1 |
    tee "$OUT/test-ui.log" | grep -E "^(--- |ok|FAIL|PASS)|GPU" | head -20
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" audit "* ]]; then
  # docs/audit.md on the GPU: transformers pairs whose trainer (one padded batch) and sampler (a decode loop) both
  # run on cuda, the sampler with the trainer's kernels (--native: cuBLAS at another M is the only noise) and
  # with SDPA and TP-2 style bf16 all-reduces; one bug planted; the audit's first suspect must be it.
  echo "== audit (bitalign audit on GPU-made transformers pairs)"
  for c in "weight qwen2 sampler" "eps qwen2 sampler" "fp16 llama sampler" "rope qwen3 sampler" "weight qwen3 trainer" "none llama sampler"; do
    set -- $c
    for k in native emulated; do
      d=/tmp/audit-$1-$2-$3-$k
      python3 -W ignore capture/python/tests/plant.py "$d" --bug "$1" --arch "$2" --side "$3" --device cuda \
        $([[ $k == native ]] && echo --native) > "$d.log" 2>&1 || { echo "plant $c $k FAILED"; tail -3 "$d.log"; rc=1; continue; }
      first=$(.gpu/bitalign diff "$d/trainer.arrow" "$d/sampler.arrow" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["first_divergence"]["op"])' 2>/dev/null)
      .gpu/bitalign audit "$d/trainer.arrow" "$d/sampler.arrow" --checkpoint "$d/checkpoint" --format json > "$d.json"
      python3 - "$d" "$first" "$k" <<'PY' || rc=1
import json, sys
d, first, k = sys.argv[1:]
want, rep = json.load(open(d + "/plant.json")), json.load(open(d + ".json"))
s = rep["suspects"]
ok = (s == []) if want["op"] is None else bool(s) and (s[0]["op"], s[0]["side_name"]) == (want["op"], want["side"])
print(f'{"ok  " if ok else "FAIL"} {want["bug"]:6} {want["arch"]:5} {str(want["side"]):7} {k:8} diff first: {first:22} audit: {rep["headline"]}')
sys.exit(0 if ok else 1)
PY
    done
  done
fi

if [[ " $steps " == *" bench "* ]]; then
  echo "== bench"
  (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test -test.run '^$' -test.bench "${BENCH:-.}" \
    -test.benchtime "${BENCHTIME:-20x}" -test.timeout 300s ${BENCHFLAGS:-}) 2>&1 | tee "$OUT/bench.log" | grep -E "Benchmark|FAIL|panic" || rc=1
  python3 scripts/cublas_bench.py 2>&1 | tee "$OUT/cublas.log" || rc=1
fi
if [[ " $steps " == *" tc "* || " $steps " == *" tcattn "* ]]; then
  echo "== tc (the tensor-core kernels: compile; matmul (step tc): bitwise against the CPU tc matmul, speed beside cuBLAS bf16; attention (tc, tcattn): bitwise against the CPU tc attention, speed beside SDPA flash)"
  tc_ptx
  for m in tc_matmul:sm_90 tc_wgmma:sm_90a tc_tma:sm_90a tc_attention:sm_90; do # the inline PTX (mma, wgmma, TMA) is first assembled here
    mod=${m%%:*}
    [[ -s "$tcdir/$mod.ptx" ]] || continue
    if ! ptxas -arch="${m##*:}" -v "$tcdir/$mod.ptx" -o /dev/null >"$OUT/$mod-ptxas.log" 2>&1; then
      echo "tc: ptxas FAILED on $mod.ptx (the driver will refuse it):"; grep -iv "info" "$OUT/$mod-ptxas.log" | head -40; rc=1
    fi
    grep -E "entry function|spill|Used" "$OUT/$mod-ptxas.log" | sed -e "s/ptxas info *: //" | paste - - - |
      sed -e "s/Compiling entry function//" | grep -v "_vec'" | head -12
  done
  # attention (tc_attention.cu): bitwise against kernels.AttentionTC, invariance, the float64 bound, then the
  # speed beside SDPA's flash backend (scripts/tc_bench.py's attention table)
  if [[ " $steps " != *" tcattn "* && "${TCATT:-1}" == 0 ]]; then
    echo "tc: TCATT=0: the tc attention's part skipped"
  elif [[ ! -s "$tcdir/tc_attention.ptx" ]]; then
    echo "tc: no tc_attention.ptx: the tc attention tests and benchmark do not run"; rc=1
  else
    (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 BITALIGN_REQUIRE_TC=1 ../../.gpu/kernels-cuda.test \
      -test.run '^(TestTCAttentionMatchesSource|TestAttentionTCBitwise|TestAttentionTCBatch|TestAttentionTCInvariance|TestAttentionTCAccuracy)$' \
      -test.v -test.count=1 -test.timeout 400s) 2>&1 |
      tee "$OUT/tc-attention-test.log" | grep -E "^(--- |ok|FAIL|PASS)|first difference|float64|control|seed|panic" | head -60
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test \
      -test.run '^$' -test.bench "^BenchmarkAttentionTC\$${TCATT_BENCH:+/}${TCATT_BENCH:-}" -test.benchtime "${BENCHTIME:-20x}" -test.timeout 500s) \
      >"$OUT/tc-attention-bench.log" 2>&1 || { echo "tc: attention benchmark FAILED"; tail -20 "$OUT/tc-attention-bench.log"; rc=1; }
    python3 scripts/tc_bench.py "$OUT/tc-attention-bench.log" 2>&1 | tee "$OUT/tc-attention-table.log" || rc=1
  fi
fi
if [[ " $steps " == *" tc "* ]]; then
  if [[ ! -s "$tcdir/tc_matmul.ptx" ]]; then
    echo "tc: no tc_matmul.ptx: the tc tests and benchmark do not run"; rc=1
  else
    (cd cuda && BITALIGN_REQUIRE_GPU=1 ../.gpu/cuda.test -test.run '^(TestTiled2DCheck|TestEncodeTiled)$' -test.v -test.count=1) 2>&1 |
      grep -E "^(--- |ok|FAIL|PASS)|panic" | head -10
    (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 BITALIGN_REQUIRE_TC=1 ../../.gpu/kernels-cuda.test \
      -test.run '^(TestTCVariantsMatchSource|TestTCPlan|TestMatmulTCBitwise)$' -test.v -test.count=1 -test.timeout 400s) 2>&1 |
      tee "$OUT/tc-test.log" | grep -E "^(--- |ok|FAIL|PASS)|first difference|bitwise|seed|panic" | head -60
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    big=${TCBIG:-1} # TCBIG=0: only the decode sizes' benchmarks below (TCDECS), not the M > 64 ones
    [[ $big == 0 ]] && echo "tc: TCBIG=0: the M > 64 benchmarks skipped"
    [[ $big == 0 ]] || (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test \
      -test.run '^$' -test.bench '^(BenchmarkCopy|BenchmarkMatmulTC)$' -test.benchtime "${BENCHTIME:-20x}" -test.timeout 400s) \
      >"$OUT/tc-bench.log" 2>&1 || { echo "tc: benchmark FAILED"; tail -20 "$OUT/tc-bench.log"; rc=1; }
    [[ $big == 0 ]] || echo "-- tc beside cuBLAS (M > 64: launch.json's big_order, the first family that loaded: tmap, tma, wgmma, mma.sync)"
    [[ $big == 0 ]] || python3 scripts/tc_bench.py "$OUT/tc-bench.log" 2>&1 | tee "$OUT/tc-table.log" || rc=1
    # each other family that loaded at the same shapes, for comparison in the same call (-tc-path forces one for M > 64)
    # TCPATHS: path[:bn] entries (bn forces the tmap chain's tile width: tma128p or tma256p)
    [[ $big == 0 ]] && TCPATHS=" "
    for pb in ${TCPATHS:-tma tmapall:128 tmapall:256 wgmma mmasync}; do
      path=${pb%%:*} bn=0 && [[ $pb == *:* ]] && bn=${pb##*:}
      case $path in tma*) [[ -s "$tcdir/tc_tma.ptx" ]] || continue ;; wgmma) [[ -s "$tcdir/tc_wgmma.ptx" ]] || continue ;; esac
      (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test -test.run '^$' \
        -test.bench '^(BenchmarkCopy|BenchmarkMatmulTC)$/(square|qwen7b-o|qwen7b-gateup)' -test.benchtime "${BENCHTIME:-20x}" \
        -tc-path=$path -tc-bn=$bn -test.timeout 300s) >"$OUT/tc-bench-$path-$bn.log" 2>&1 || { echo "tc: benchmark -tc-path=$path -tc-bn=$bn FAILED"; tail -5 "$OUT/tc-bench-$path-$bn.log"; rc=1; }
      echo "-- the same with -tc-path=$path -tc-bn=$bn at M > 64"
      python3 scripts/tc_bench.py "$OUT/tc-bench-$path-$bn.log" 2>&1 | tee "$OUT/tc-table-$path-$bn.log" || rc=1
    done
    # the decode sizes (M ≤ 64) with each decode family forced in the same call: TCDECS entries dec[:C[:G]] (mma:
    # dec16, dec64; tmd with C consumer warps a block and G segments a work item, 0 or none: planTMD's choice)
    # dec_bench TAG PTXDIR ENTRY: one such run (PTXDIR: BITALIGN_PTX_DIR for it, empty: the tree's PTX) into
    # $OUT/tc-bench-dec-TAG… and its table
    dec_bench() {
      local tag=$1 ptx=$2 dec c g
      IFS=: read -r dec c g <<<"$3" && c=${c:-0} g=${g:-0}
      local log="$OUT/tc-bench-dec-$tag$dec-$c-$g.log" what="-tc-dec=$dec -tc-c=$c -tc-g=$g -tc-reps=${TCREPS:-1}"
      (cd kernels/cuda && BITALIGN_PTX_DIR="$ptx" BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test -test.run '^$' \
        -test.bench "^(BenchmarkCopy|BenchmarkMatmulTC)\$/${TCDECSHAPES:-.*}/.*/^M=(${TCDECM:-1|8|16|32|64})\$" -test.benchtime "${BENCHTIME:-20x}" \
        -tc-dec=$dec -tc-c=$c -tc-g=$g -tc-reps=${TCREPS:-1} -test.timeout 300s) >"$log" 2>&1 || { echo "tc: benchmark ${ptx:+(PTX of $ptx) }$what FAILED"; tail -5 "$log"; rc=1; }
      echo "-- the same with ${ptx:+the PTX of $ptx, }$what at M ≤ 64"
      TCREPS=${TCREPS:-1} python3 scripts/tc_bench.py "$log" 2>&1 | tee "${log/tc-bench-/tc-table-}" || rc=1
    }
    for dc in ${TCDECS:-mma tmd}; do
      dec_bench "" "${BITALIGN_PTX_DIR:-}" "$dc"
    done
    # TCBASE=dir: the decode sizes once more with every PTX from dir (a tree as make ptx PTX_OUT=dir writes it, e.g.
    # the previous commit's: git archive HEAD~ kernels/cuda | tar -x -C dir), the first TCDECS entry, in the same
    # call: a kernel change's before and after side by side
    if [[ -n "${TCBASE:-}" ]]; then
      dc=${TCDECS:-tmd}
      dec_bench base- "$(cd "$TCBASE" && pwd)" "${dc%% *}"
    fi
    if [[ $big != 0 && -s "$tcdir/tc_tma.ptx" ]]; then # bf16 output (MatmulTCBF16), every shape, as cuBLAS writes it
      (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test -test.run '^$' \
        -test.bench '^(BenchmarkCopy|BenchmarkMatmulTC)$' -test.benchtime "${BENCHTIME:-20x}" -tc-path=tmap -tc-bf16 \
        -test.timeout 300s) >"$OUT/tc-bench-tmap-bf16.log" 2>&1 || { echo "tc: benchmark -tc-path=tmap -tc-bf16 FAILED"; tail -5 "$OUT/tc-bench-tmap-bf16.log"; rc=1; }
      echo "-- the same with -tc-path=tmap -tc-bf16 (bf16 output) at M > 64"
      python3 scripts/tc_bench.py "$OUT/tc-bench-tmap-bf16.log" 2>&1 | tee "$OUT/tc-table-tmap-bf16.log" || rc=1
    fi
  fi
fi

if [[ " $steps " == *" load "* ]]; then
  echo "== load (checkpoint load and upload against cat, peak RSS; docs/benchmarks.md)"
  export BITALIGN_LOAD_DIR="${LOAD_DIR:-/tmp/bitalign-load-qwen2-1.5b}" BITALIGN_LOAD_LAYERS="${LOAD_LAYERS:-28}"
  mkdir -p "$BITALIGN_LOAD_DIR"
  for dev in cuda cpu; do
    (cd engine && BITALIGN_LOAD_DEVICE=$dev ../.gpu/engine.test -test.run '^$' -test.bench 'BenchmarkLoadCheckpoint' \
      -test.benchtime "${LOADTIME:-5x}" -test.timeout 500s -test.v) 2>&1 | tee "$OUT/load-$dev.log" | grep -E "Benchmark|generated|FAIL|panic"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  done
  free -g | head -2
fi

if [[ " $steps " == *" e2e "* ]]; then
  echo "== e2e (the engine's forward against transformers' bf16 SDPA forward, same model, same call)"
  python3 -W ignore capture/python/tests/e2e_forward.py "$OUT/e2e" --engine-test .gpu/engine.test ${E2EFLAGS:-} 2>&1 |
    grep -v "Writing model shards" | tee "$OUT/e2e.log" | tail -80
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" torch "* ]]; then
  echo "== torch (bitalign.ops and bitalign.hf on the GPU, then the proof script)"
  BITALIGN_BIN="$PWD/.gpu/bitalign" python3 -m pytest -q -rs -m torch capture/python/tests/test_ops_gpu.py \
    capture/python/tests/test_hf_gpu.py 2>&1 | tee "$OUT/test-torch.log" | tail -40
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  python3 -W ignore capture/python/tests/torch_proof.py "$OUT/torch-proof" --device cuda --bin .gpu/bitalign \
    ${PROOFFLAGS:-} 2>&1 | grep -v "Writing model shards" | tee "$OUT/torch-proof.log" | tail -30
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  rm -rf "$OUT/torch-proof"/*/checkpoint "$OUT/torch-proof"/*/*.arrow  # the reports and proof.json come back
fi

if [[ " $steps " == *" sweep "* ]]; then
  echo "== sweep (every tiled-matmul plan beside cuBLAS SGEMM, same bits checked first)"
  python3 scripts/plan_sweep.py --json "$OUT/plan-sweep.json" ${SWEEPFLAGS:-} 2>&1 | tee "$OUT/plan-sweep.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" tp "* ]]; then
  echo "== tp (bitalign.tp over NCCL: TP N = TP 1 = replay, the unpatched control, the exchange's latency)"
  ngpu=$(nvidia-smi -L | wc -l)
  if [[ "$ngpu" -lt 2 ]]; then
    echo "tp: SKIPPED: $ngpu GPU on this machine; the TP proof needs two (the nvidia-h200-x2 kind)"
  else
    [[ "$NCCL_NVLS_ENABLE" == 0 ]] || { echo "tp: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE, must be 0"; rc=1; }
    for run in "2 qwen3" "2 qwen2-1.5b" "4 qwen3"; do
      set -- $run
      [[ "$ngpu" -ge "$1" ]] || { echo "tp: TP $1 skipped: $ngpu GPUs"; continue; }
      python3 -W ignore -m torch.distributed.run --nproc-per-node "$1" capture/python/tests/tp_proof.py \
        "$OUT/tp-proof/tp$1" --model "$2" --bin .gpu/bitalign ${TPFLAGS:-} 2>&1 | grep -v "Writing model shards" |
        tee "$OUT/tp-proof-tp$1-$2.log" | tail -40
      [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    done
    rm -rf "$OUT/tp-proof"/*/*/checkpoint "$OUT/tp-proof"/*/*/*.arrow "$OUT/tp-proof"/*/*/*/*.arrow  # reports come back
  fi
fi

if [[ " $steps " == *" size "* ]]; then
  echo "== size (diff and open at size against cmp, $(nproc) cores)"
  dir="${SIZEDIR:-/tmp/bitalign-size}"
  mkdir -p "$dir"
  (cd session && BITALIGN_SIZE="${SIZE:-28,4,256}" BITALIGN_BENCH_DIR="$dir" ../.gpu/session.test -test.run '^$' \
    -test.bench 'DiffSize|OpenSize' -test.benchtime "${SIZEBENCHTIME:-3x}" -test.timeout 580s) 2>&1 |
    tee "$OUT/size.log" | grep -E "Benchmark|FAIL|panic|ok" || rc=1
  ls -l "$dir" | tee -a "$OUT/size.log"
  a=$(ls "$dir"/*-trainer.arrow | head -1)
  for i in 1 2 3; do # cmp must read both files to the end: A against its byte copy
    TIMEFORMAT="cmp A A-copy: %R s"
    { time cmp "$a" "${a%.arrow}-copy.arrow"; } 2>&1 | tee -a "$OUT/size.log"
  done
  for b in "${a%-trainer.arrow}"-sampler-*.arrow; do
    for i in 1 2 3; do
      TIMEFORMAT="bitalign diff A $(basename "$b"): %R s"
      { time .gpu/bitalign diff "$a" "$b" -o "$OUT/size-$(basename "$b" .arrow).txt" --overwrite >/dev/null 2>&1; } 2>&1 |
        tee -a "$OUT/size.log"
    done
  done
fi

if [[ " $steps " == *" record "* ]]; then
  echo "== record (bitalign_capture: fingerprint and full recording against the plain forward, issue 15)"
  rdir="${RECORD_DIR:-/tmp/bitalign-record}"
  python3 -m pytest -q -rs -m torch capture/python/tests/test_record_gpu.py 2>&1 | tee "$OUT/record-test.log" | tail -15
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  python3 -W ignore capture/python/tests/record_bench.py "$rdir" --device cuda --bin .gpu/bitalign ${RECORDFLAGS:-} \
    ${RECORDPROFILE:+--profile} 2>&1 | tee "$OUT/record.log" | tail -20
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  cp "$rdir/record-bench.json" "$OUT/" 2>/dev/null || { echo "record: no record-bench.json"; rc=1; }
  [[ -z "${RECORDPROFILE:-}" ]] || cp "$rdir/record-profile.txt" "$OUT/" 2>/dev/null || true
  if [[ -n "${RECORDSPY:-}" ]]; then
    echo "== record, sampled (py-spy $RECORDSPY)"
    chmod +x "$RECORDSPY"
    timeout 300 "$RECORDSPY" record -r 200 -f raw --threads -o "$rdir/spy.raw" -- python3 -W ignore \
      capture/python/tests/record_bench.py "$rdir" --device cuda --loop 40 2>&1 | tail -2
    python3 capture/python/tests/spy_summary.py "$rdir/spy.raw" > "$OUT/record-spy.txt" || rc=1
    head -3 "$OUT/record-spy.txt"
    rm -f "$rdir/spy.raw"
  fi
  if [[ -n "${RECORDBASE:-}" ]]; then
    echo "== record, the base package ($RECORDBASE) and this one by turns"
    bdir=$(mktemp -d) && tar -xzf "$RECORDBASE" -C "$bdir" || rc=1
    for i in $(seq 1 "${RECORDROUNDS:-2}"); do
      for side in base new; do
        rm -f "$rdir/record-bench.json"
        pkg=$PWD/capture/python log=/dev/null
        [[ $side == base ]] && pkg=$bdir/capture/python log=$OUT/record-base.log
        BITALIGN_PTX_DIR="${BITALIGN_PTX_DIR:-$PWD}" RECORD_BENCH_PACKAGE="$pkg" python3 -W ignore \
          capture/python/tests/record_bench.py "$rdir" --device cuda --bin .gpu/bitalign --no-baseline --no-full \
          ${RECORDFLAGS:-} >"$log" 2>&1
        mv "$rdir/record-bench.json" "$rdir/ab-$i-$side.json" 2>/dev/null || { echo "record: $side run $i: no json"; rc=1; }
      done
    done
    python3 - "$rdir" "$OUT/record-ab.json" <<'PY'
import glob, json, os, sys
runs = {os.path.basename(p)[3:-5]: json.load(open(p)) for p in sorted(glob.glob(os.path.join(sys.argv[1], "ab-*.json")))}
json.dump(runs, open(sys.argv[2], "w"), indent=1)
print(f"{'run':10} {'plain ms':>9} {'fp seq':>8} {'fp idle':>8} {'fp inter':>9} {'fp pairs':>9} {'watch pairs':>12}")
for k, r in runs.items():
    fp, il = r["fingerprint"], r["interleaved"]
    print(f"{k:10} {r['plain']['wall_ms']:9.2f} {fp['overhead']*100:+7.1f}% {fp['overhead_drained']*100:+7.1f}% "
          f"{il['fingerprint']['overhead']*100:+8.1f}% {il['fingerprint']['overhead_pairwise']*100:+8.1f}% "
          f"{il['watch_only']['overhead_pairwise']*100:+11.1f}%")
PY
    rm -rf "$bdir" "$rdir"/ab-*.json
  fi
fi

if [[ " $steps " == *" replay "* ]]; then
  echo "== replay (issue 15: bitalign replay end to end at 1.5B and 8B, with --timings)"
  df -h "${REPLAYDIR:-/tmp}" | tail -1
  python3 -W ignore capture/python/tests/replay_size.py "${REPLAYDIR:-/tmp/bitalign-replay-size}" --device cuda \
    --bin .gpu/bitalign --layer "${REPLAY_LAYER:-12}" ${REPLAYFLAGS:-} 2>&1 | grep -v "Writing model shards" |
    tee "$OUT/replay-size.log" | grep -v '^\[{'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
  mkdir -p "$OUT/replay-size"
  cp "${REPLAYDIR:-/tmp/bitalign-replay-size}"/replay-size.json "${REPLAYDIR:-/tmp/bitalign-replay-size}"/*/replay-*.json \
    "$OUT/replay-size/" 2>/dev/null
  free -g | head -2
fi

if [[ " $steps " == *" ncu "* ]]; then
  echo "== ncu (Nsight Compute readings of the tc kernels and their anchors at the same shapes)"
  tc_ptx
  ncuflags=(--clock-control none --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats
    --section SchedulerStats --section InstructionStats)
  # NCUSOURCE=1: also the source counters (the warp-stall samples' top SASS locations, branch and memory hot spots)
  [[ "${NCUSOURCE:-0}" == 1 ]] && ncuflags+=(--section SourceCounters)
  ncu_go() { # name kernel-regex bench-regex [test flags]: one profiled launch of the kernels-cuda benchmark
    local name=$1 k=$2 bench=$3; shift 3
    [[ "${NCUSIDE:-both}" == anchor ]] && return 0
    (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 timeout 240 ncu "${ncuflags[@]}" -k "regex:$k" ../../.gpu/kernels-cuda.test \
      -test.run '^$' -test.bench "$bench" -test.benchtime 1x "$@") >"$OUT/ncu-$name.txt" 2>&1 ||
      { echo "ncu: $name FAILED"; tail -5 "$OUT/ncu-$name.txt"; rc=1; }
  }
  ncu_py() { # name kernel-regex python-code: one profiled launch of a torch anchor
    local name=$1 k=$2 code=$3; shift 3
    [[ "${NCUSIDE:-both}" == tc ]] && return 0
    timeout 240 ncu "${ncuflags[@]}" -k "regex:$k" python3 -c "$code" "$@" >"$OUT/ncu-$name.txt" 2>&1 ||
      { echo "ncu: $name FAILED"; tail -5 "$OUT/ncu-$name.txt"; rc=1; }
  }
  sdpa='import torch, torch.nn.functional as F, sys
from torch.nn.attention import sdpa_kernel, SDPBackend
nh, nkv, hd, T, S, B = map(int, sys.argv[1:])
q = torch.randn(B, nh, T, hd, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, nkv, S, hd, device="cuda", dtype=torch.bfloat16); v = torch.randn_like(k)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(4): F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=True)
torch.cuda.synchronize()'
  mm='import torch, sys
M, K, N = map(int, sys.argv[1:])
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); w = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
for _ in range(4): torch.mm(x, w)
torch.cuda.synchronize()'
  for n in ${NCUKERNELS:-attn-prefill attn-decode mm-gateup mm-o}; do
    case $n in
    attn-prefill)
      ncu_go tc-attn-prefill 'tc_attn_(batch_)?hd128' '^BenchmarkAttentionTC$/prefill/nh=28/nkv=4/hd=128/T=4096/'
      ncu_py flash-attn-prefill 'flash' "$sdpa" 28 4 128 4096 4096 1 ;;
    attn-decode)
      ncu_go tc-attn-decode 'tc_attn_dec' '^BenchmarkAttentionTC$/decode/nh=28/nkv=4/hd=128/T=1/S=4096/B=8$'
      ncu_py flash-attn-decode 'flash' "$sdpa" 28 4 128 1 4096 8 ;;
    mm-gateup)
      ncu_go tc-mm-gateup 'tc_mm' '^BenchmarkMatmulTC$/qwen7b-gateup/.*/M=4096/'
      ncu_py cublas-mm-gateup 'nvjet|gemm|xmma|cutlass' "$mm" 4096 3584 18944 ;;
    mm-o)
      ncu_go tc-mm-o 'tc_mm' '^BenchmarkMatmulTC$/qwen7b-o/.*/M=4096/'
      ncu_py cublas-mm-o 'nvjet|gemm|xmma|cutlass' "$mm" 4096 3584 3584 ;;
    mm-dec-gateup)
      ncu_go tc-mm-dec-gateup 'tc_mm' '^BenchmarkMatmulTC$/qwen7b-gateup/.*/M=1/'
      ncu_py cublas-mm-dec-gateup 'nvjet|gemm|gemv|xmma|cutlass' "$mm" 1 3584 18944 ;;
    mm-dec-kv)
      ncu_go tc-mm-dec-kv 'tc_mm' '^BenchmarkMatmulTC$/qwen7b-kv/.*/M=1/'
      ncu_py cublas-mm-dec-kv 'nvjet|gemm|gemv|xmma|cutlass' "$mm" 1 3584 512 ;;
    mm-dec-down)
      ncu_go tc-mm-dec-down 'tc_mm' '^BenchmarkMatmulTC$/qwen7b-down/.*/M=1/'
      ncu_py cublas-mm-dec-down 'nvjet|gemm|gemv|xmma|cutlass' "$mm" 1 18944 3584 ;;
    esac
  done
  for f in "$OUT"/ncu-*.txt; do # the headline of each: duration, throughputs, IPC, occupancy, the top stall
    echo "-- $(basename "$f" .txt)"
    grep -E '^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Executed Ipc Active|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued' "$f" | head -16
  done
fi

echo "gpu.sh: exit $rc"
exit $rc
