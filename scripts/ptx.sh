#!/usr/bin/env bash
# scripts/ptx.sh — the recipe of `make ptx` (run `make ptx`: the Makefile passes NVCC and NVCCFLAGS, the one
# flag set every PTX is built with). Compiles kernels/cuda/*.cu (one PTX each), the tensor-core kernels
# kernels/cuda/tc/*.cu (one PTX each, -I kernels/cuda; tc_wgmma.cu and tc_tma.cu, whose wgmma and setmaxnreg exist
# only on sm_90a, with the same flags but -arch=sm_90a) and nvls/cuda/collectives.cu (one PTX per rank count,
# -DNVLS_NR=n), and writes each directory's MANIFEST.sha256 (format: internal/ptx). PTX_OUT=dir writes the PTX
# and manifests under dir/kernels/cuda, dir/kernels/cuda/tc and dir/nvls/cuda instead of in place.
set -euo pipefail
: "${NVCC:?}" "${NVCCFLAGS:?}"
cd "$(dirname "$0")/.."
out=${PTX_OUT:-.}
NVLS_RANKS="1 2 4 8" # nvls.ptxRanks
build=$("$NVCC" --version | tail -1)

# tc_flags FILE.cu: the flags of a tc source: NVCCFLAGS with -arch=sm_90a for the wgmma and TMA kernels (wgmma,
# setmaxnreg exist only on sm_90a), else NVCCFLAGS.
tc_flags() {
	case $(basename "$1" .cu) in
	*wgmma* | *tma*) echo "${NVCCFLAGS//-arch=sm_90/-arch=sm_90a}" ;;
	*) echo "$NVCCFLAGS" ;;
	esac
}

# manifest SRC DST [NOTE]: the sources of SRC and the PTX of DST, after the compiler build, the flags and NOTE
# (one more comment line).
manifest() {
	{
		echo "# nvcc: $build"
		echo "# flags: $NVCCFLAGS"
		[[ -z "${3:-}" ]] || echo "# $3"
		(cd "$1" && sha256sum -- *.cu $(ls -- *.cuh 2>/dev/null || true))
		(cd "$2" && sha256sum -- *.ptx)
	} >"$2/MANIFEST.sha256.tmp"
	mv "$2/MANIFEST.sha256.tmp" "$2/MANIFEST.sha256"
}

for d in kernels/cuda kernels/cuda/tc nvls/cuda; do
	mkdir -p "$out/$d"
	rm -f "$out/$d"/*.ptx # a PTX whose source is gone must not stay behind
done
for f in kernels/cuda/*.cu; do
	# shellcheck disable=SC2086
	"$NVCC" $NVCCFLAGS -o "$out/${f%.cu}.ptx" "$f"
done
for f in kernels/cuda/tc/*.cu; do
	# shellcheck disable=SC2046
	"$NVCC" $(tc_flags "$f") -I kernels/cuda -o "$out/${f%.cu}.ptx" "$f"
done
for nr in $NVLS_RANKS; do
	# shellcheck disable=SC2086
	"$NVCC" $NVCCFLAGS -DNVLS_NR="$nr" -o "$out/nvls/cuda/collectives_nr$nr.ptx" nvls/cuda/collectives.cu
done
manifest kernels/cuda "$out/kernels/cuda"
manifest kernels/cuda/tc "$out/kernels/cuda/tc" "sm_90a: $(cd kernels/cuda/tc && for f in *.cu; do [[ $(tc_flags "$f") == "$NVCCFLAGS" ]] || printf '%s ' "$f"; done)with the flags' -arch=sm_90 replaced by -arch=sm_90a (wgmma, setmaxnreg); -I kernels/cuda"
manifest nvls/cuda "$out/nvls/cuda"
echo "ptx: $NVCC $NVCCFLAGS ($build) -> $out/kernels/cuda, $out/kernels/cuda/tc (sm_90a: *wgmma*, *tma*), $out/nvls/cuda"
