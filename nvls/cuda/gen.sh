#!/bin/sh
# Regenerates the PTX that nvls embeds from collectives.cu, one module per rank count, and manifest.json (the
# source's sha256, so a CPU test fails when the .cu changed without regenerating). Needs nvcc 13.0 (the GPU
# machine has it in /usr/local/cuda/bin; the driver there, CUDA 13.0, JIT-compiles PTX ISA 9.0).
#   sh nvls/cuda/gen.sh           regenerate in place
#   sh nvls/cuda/gen.sh --check   compile into a temporary folder and compare with the committed PTX
#                                 (comment lines, which name the compiler build, are ignored)
set -eu
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
FLAGS="-ptx -arch=sm_90 -fmad=false"
RANKS="1 2 4 8"
dst=.
if [ "${1:-}" = "--check" ]; then dst=$(mktemp -d); fi
for nr in $RANKS; do
	# shellcheck disable=SC2086
	"$NVCC" $FLAGS -DNVLS_NR="$nr" -o "$dst/collectives_nr$nr.ptx" collectives.cu
done
if [ "$dst" != . ]; then
	status=0
	for nr in $RANKS; do
		if grep -v '^//' "collectives_nr$nr.ptx" >"$dst/a" && grep -v '^//' "$dst/collectives_nr$nr.ptx" >"$dst/b" &&
			cmp -s "$dst/a" "$dst/b"; then
			echo "collectives_nr$nr.ptx: identical"
		else
			echo "collectives_nr$nr.ptx: DIFFERS from what $("$NVCC" --version | tail -1) produces"
			status=1
		fi
	done
	rm -rf "$dst"
	exit $status
fi
sha() { sha256sum "$1" | cut -d' ' -f1; }
{
	printf '{\n'
	printf '  "source": "collectives.cu",\n'
	printf '  "source_sha256": "%s",\n' "$(sha collectives.cu)"
	printf '  "nvcc": "%s",\n' "$("$NVCC" --version | tail -1)"
	printf '  "flags": "%s -DNVLS_NR=<ranks>",\n' "$FLAGS"
	printf '  "ptx": {\n'
	sep=''
	for nr in $RANKS; do
		printf '%s    "collectives_nr%s.ptx": "%s"' "$sep" "$nr" "$(sha "collectives_nr$nr.ptx")"
		sep=',
'
	done
	printf '\n  }\n}\n'
} >manifest.json.tmp
mv manifest.json.tmp manifest.json
echo "wrote $(echo collectives_nr*.ptx) manifest.json"
