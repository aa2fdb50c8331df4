#!/usr/bin/env bash
# scripts/cuda-toolchain.sh — the GPU machine's CUDA compiler on a machine without CUDA, from NVIDIA's pip wheels.
#
#   scripts/cuda-toolchain.sh nvcc                 the path of nvcc 13.0.88 (installed on first use), the build the
#                                                  GPU machine has (cuda_13.0.r13.0/compiler.36424714_0): its PTX is
#                                                  byte for byte the GPU machine's, so `make ptx NVCC=$(...)` here
#                                                  gives the committed PTX and manifests (checked on 2026-12-03: every
#                                                  PTX but matmul.ptx identical to the committed; matmul.ptx differs
#                                                  from the committed one on the GPU machine too)
#   scripts/cuda-toolchain.sh sass FILE.ptx [FN]   ptxas -v (registers, spills) of FILE.ptx for sm_90a, then the SASS of
#                                                  function FN (every function without it), from that ptxas and
#                                                  cuobjdump 13.5 (the oldest cuobjdump wheel is 13.2; it reads 13.0's
#                                                  cubins)
#
# BITALIGN_CUDA_CACHE: where the wheels go (default ~/.cache/bitalign/cuda-13.0.88). Needs pip and network (the
# package registry) the first time; nothing is installed into a Python environment.
set -euo pipefail
cache="${BITALIGN_CUDA_CACHE:-$HOME/.cache/bitalign/cuda-13.0.88}"
compiler=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96
	nvidia-cuda-cccl==13.0.85)
disasm=(nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37)

# unpack DIR PKG...: the wheels of PKG... unzipped into DIR (once: DIR/.done)
unpack() {
	local dir=$1
	shift
	[[ -e "$dir/.done" ]] && return 0
	local tmp
	tmp=$(mktemp -d)
	python3 -m pip download -q --no-deps -d "$tmp" "$@" >&2 || {
		echo "cuda-toolchain: pip download $* failed (no network or registry?)" >&2
		exit 2
	}
	mkdir -p "$dir"
	for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$dir"; done
	chmod -R u+x "$dir"/nvidia/cu13/bin "$dir"/nvidia/cu13/nvvm/bin 2>/dev/null || true
	rm -rf "$tmp"
	touch "$dir/.done"
}

case "${1:-}" in
nvcc)
	unpack "$cache/compiler" "${compiler[@]}"
	echo "$cache/compiler/nvidia/cu13/bin/nvcc"
	;;
sass)
	[[ -n "${2:-}" && -s "$2" ]] || {
		echo "cuda-toolchain: sass FILE.ptx [FUNCTION]: no PTX file ${2:-}" >&2
		exit 2
	}
	unpack "$cache/compiler" "${compiler[@]}"
	unpack "$cache/disasm" "${disasm[@]}"
	cubin=$(mktemp --suffix=.cubin)
	trap 'rm -f "$cubin"' EXIT
	"$cache/compiler/nvidia/cu13/bin/ptxas" -arch=sm_90a -O3 -v "$2" -o "$cubin" 2>&1 |
		grep -E "entry function|spill|Used" | sed -e "s/ptxas info *: //" | paste - - - | sed -e "s/Compiling entry function//" >&2
	"$cache/disasm/nvidia/cu13/bin/cuobjdump" -sass ${3:+-fun "$3"} "$cubin" | sed -e 's@ */\* 0x[0-9a-f]* \*/@@' | grep -v '^\s*$'
	;;
*)
	echo "usage: scripts/cuda-toolchain.sh nvcc | sass FILE.ptx [FUNCTION]" >&2
	exit 2
	;;
esac
