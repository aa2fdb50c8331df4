#!/bin/bash
# run_h200.sh: the tensor-core measurement of docs/arithmetic.md "The `tc` profile" (tc.6), on the GPU machine.
# 10^8 k-steps (seed 3) through mma.sync and wgmma m64n8k16, 4-step chains of each and wgmma m64n256k16, every
# output checked against kernels.MMABF16Dot16; the crafted cases through both instructions (-> the golden file
# kernels/testdata/mma_h200_crafted.txt). Beside it on that machine (Go is not there): mma_probe.cu and, built
# here,
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o DIR/mmacheck ./kernels/cuda/experiments/mmacheck
#   DIR/mmacheck crafted DIR/crafted.bin
# OUT is the folder whose files come back (log.txt, crafted_out.bin, mma_h200_crafted.txt).
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")"
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o mma_probe mma_probe.cu > nvcc.log 2>&1 || { cat nvcc.log; exit 1; }
grep -v C7519 nvcc.log
cuobjdump --dump-sass mma_probe | grep -oE '(HMMA|HGMMA)[A-Z0-9._]*' | sort | uniq -c
./mma_probe file crafted.bin $OUT/crafted_out.bin || exit 1
MMA_SOURCE="H200, driver 580.159.04, CUDA 13.0.88, 2026-12-01" ./mmacheck golden $OUT/crafted_out.bin > $OUT/mma_h200_crafted.txt
mkdir -p /tmp/bulk
./mma_probe rand 3 196608 /tmp/bulk /tmp/bulk/d || exit 1
./mmacheck parity 3 /tmp/bulk/dump.bin
time ./mmacheck check 3 /tmp/bulk/d.mma /tmp/bulk/d.wg /tmp/bulk/d.mma4 /tmp/bulk/d.wg4 /tmp/bulk/d.wg256
