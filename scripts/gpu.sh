#!/usr/bin/env bash
# scripts/gpu.sh — build-check-time on the GPU machine in one call (see docs/gpu.md).
# Here (no GPU):   make gpu-build            # CGO_ENABLED=0 test binaries into .gpu/
# There (device):  bash scripts/gpu.sh [ptx] [test] [engine] [ui] [bench]   (default: all), with .gpu carried.
#   ptx   compiles kernels/cuda/*.cu with the machine's nvcc into $OUT/ptx.tar and diffs it with the committed
#         PTX; the tests then load the fresh PTX (BITALIGN_PTX_DIR) so one call checks new kernel sources.
#   test  runs the cuda/ and kernels/cuda/ tests with BITALIGN_REQUIRE_GPU=1 (a skip becomes a failure).
#   engine runs the engine's CUDA-backend tests (demo trainer and sampler captures bitwise equal to the CPU's).
#   ui    runs the debugger's real-session test with replay on the GPU (verdicts as on the CPU).
#   bench runs the Go benchmarks and the cuBLAS reference (PyTorch) in the same call.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
[[ -n "${GPU:-}" ]] && export CUDA_VISIBLE_DEVICES="$GPU"  # the tests use the first visible GPU; TP 2 uses two
export BITALIGN_REQUIRE_GPUS="$(nvidia-smi -L | wc -l)"       # the 2-GPU engine test fails instead of skipping
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
steps="${*:-ptx test engine ui bench}"
NVCC="${NVCC:-nvcc}"
NVCCFLAGS="-ptx -arch=sm_90 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true -O3"
rc=0
for f in .gpu/*.gz; do [[ -e "$f" ]] && gunzip -f "$f" && chmod +x "${f%.gz}"; done  # make gpu-build gzips them
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
"$NVCC" --version | tail -2

if [[ " $steps " == *" ptx "* ]]; then
  echo "== ptx: $NVCC $NVCCFLAGS"
  fresh=$(mktemp -d)
  cp kernels/cuda/*.cu kernels/cuda/*.cuh "$fresh"/
  (cd "$fresh" && for f in *.cu; do "$NVCC" $NVCCFLAGS -o "${f%.cu}.ptx" "$f" || exit 1; done &&
     sha256sum *.cu *.cuh *.ptx > MANIFEST.sha256) || { echo "ptx: nvcc FAILED"; rc=1; }
  for f in "$fresh"/*.ptx; do
    cmp -s "$f" "kernels/cuda/$(basename "$f")" && echo "ptx: $(basename "$f") identical to the committed one" ||
      echo "ptx: $(basename "$f") DIFFERS from the committed one"
  done
  # registers and spills of the matmul kernels (ptxas as the driver's JIT would run it)
  ptxas -arch=sm_90 -v "$fresh/matmul.ptx" -o /dev/null 2>&1 | grep -E "entry function|spill|Used" |
    sed -e "s/ptxas info *: //" | paste - - - | grep -E "matmul_(t|dec)" | sed -e "s/Compiling entry function//"
  tar -C "$fresh" -cf "$OUT/ptx.tar" $(cd "$fresh" && ls *.ptx MANIFEST.sha256)
  export BITALIGN_PTX_DIR="$fresh"
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
  echo "== engine (CUDA backend vs CPU, bitwise)"
  (cd engine && BITALIGN_REQUIRE_GPU=1 ../.gpu/engine.test -test.run 'CUDA|SelectBackend' -test.v -test.count=1 \
    -test.timeout 400s ${TESTFLAGS:-}) 2>&1 | tee "$OUT/test-engine.log" | grep -E "^(--- |    ---|ok|FAIL|PASS)|differs|GPU" | head -60
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" ui "* ]]; then
  echo "== ui (the debugger's replay on the GPU)"
  (cd ui && BITALIGN_REQUIRE_GPU=1 ../.gpu/ui.test -test.run 'RealSession' -test.v -test.count=1 -test.timeout 200s) 2>&1 |
    tee "$OUT/test-ui.log" | grep -E "^(--- |ok|FAIL|PASS)|GPU" | head -20
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi

if [[ " $steps " == *" bench "* ]]; then
  echo "== bench"
  (cd kernels/cuda && BITALIGN_REQUIRE_GPU=1 ../../.gpu/kernels-cuda.test -test.run '^$' -test.bench "${BENCH:-.}" \
    -test.benchtime "${BENCHTIME:-20x}" -test.timeout 300s ${BENCHFLAGS:-}) 2>&1 | tee "$OUT/bench.log" | grep -E "Benchmark|FAIL|panic" || rc=1
  python3 scripts/cublas_bench.py 2>&1 | tee "$OUT/cublas.log" || rc=1
fi
echo "gpu.sh: exit $rc"
exit $rc
