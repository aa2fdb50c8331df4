#!/usr/bin/env bash
# scripts/ptx.sh — the recipe of `make ptx` (run `make ptx`: the Makefile passes NVCC and NVCCFLAGS, the one
# flag set every PTX is built with). Compiles kernels/cuda/*.cu (one PTX each) and nvls/cuda/collectives.cu
# (one PTX per rank count, -DNVLS_NR=n) and writes each directory's MANIFEST.sha256 (format: internal/ptx).
# PTX_OUT=dir writes the PTX and manifests under dir/kernels/cuda and dir/nvls/cuda instead of in place.
set -euo pipefail
: "${NVCC:?}" "${NVCCFLAGS:?}"
cd "$(dirname "$0")/.."
out=${PTX_OUT:-.}
NVLS_RANKS="1 2 4 8" # nvls.ptxRanks
build=$("$NVCC" --version | tail -1)

# manifest SRC DST: the sources of SRC and the PTX of DST, after the compiler build and the flags.
manifest() {
	{
		echo "# nvcc: $build"
		echo "# flags: $NVCCFLAGS"
		(cd "$1" && sha256sum -- *.cu $(ls -- *.cuh 2>/dev/null || true))
		(cd "$2" && sha256sum -- *.ptx)
	} >"$2/MANIFEST.sha256.tmp"
	mv "$2/MANIFEST.sha256.tmp" "$2/MANIFEST.sha256"
}

for d in kernels/cuda nvls/cuda; do
	mkdir -p "$out/$d"
	rm -f "$out/$d"/*.ptx # a PTX whose source is gone must not stay behind
done
for f in kernels/cuda/*.cu; do
	# shellcheck disable=SC2086
	"$NVCC" $NVCCFLAGS -o "$out/${f%.cu}.ptx" "$f"
done
for nr in $NVLS_RANKS; do
	# shellcheck disable=SC2086
	"$NVCC" $NVCCFLAGS -DNVLS_NR="$nr" -o "$out/nvls/cuda/collectives_nr$nr.ptx" nvls/cuda/collectives.cu
done
manifest kernels/cuda "$out/kernels/cuda"
manifest nvls/cuda "$out/nvls/cuda"
echo "ptx: $NVCC $NVCCFLAGS ($build) -> $out/kernels/cuda, $out/nvls/cuda"
