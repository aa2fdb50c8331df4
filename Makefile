# bitalign — build, run and test. `make run` and `make test` are the two set-up commands (see README.md).
GO      ?= go
export CGO_ENABLED := 0
BIN     := bin/bitalign
# the version bitalign reports: the commit (and -dirty) from git describe when this is a git checkout
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X main.version=$(VERSION))
VENV    := .venv
PY      := $(VENV)/bin/python

.PHONY: build run test test-go test-python test-torch bench fuzz ptx print-nvccflags screenshots gpu-build clean

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .

run: build
	./$(BIN)

test: test-go test-python

# The Go tests' output is filtered (internal/testreport): each package's ok/FAIL line, failed tests' output,
# and every skipped test with its reason.
test-go:
	$(GO) vet ./...
	$(GO) build -o bin/testreport ./internal/testreport
	$(GO) test -count=1 -json ./... | bin/testreport

$(VENV)/.ok: capture/python/pyproject.toml capture/python/setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q pyarrow numpy pytest 'setuptools>=70.1'
	$(PY) -m pip install -q --no-deps -e capture/python
	touch $@

test-python: $(VENV)/.ok build
	BITALIGN_BIN=$(abspath $(BIN)) $(PY) -m pytest -q -rs capture/python/tests -m "not torch"

# Needs torch, transformers, pyarrow and pytest in $(TORCH_PYTHON) (the GPU machine has them; see README).
# The replay and diff checks run the freshly built binary.
TORCH_PYTHON ?= python3
test-torch: build
	BITALIGN_BIN=$(abspath $(BIN)) $(TORCH_PYTHON) -m pytest -q -rs capture/python/tests -m torch
	rm -rf .hfparity && $(TORCH_PYTHON) testdata/engine/hf_parity.py .hfparity
	BITALIGN_HF_PARITY=$(abspath .hfparity) $(GO) test -count=1 -run HFParity -v ./engine
	rm -rf .hforacle && $(TORCH_PYTHON) testdata/session/hf_oracle.py .hforacle
	BITALIGN_HF_ORACLE=$(abspath .hforacle) $(GO) test -count=1 -run HFOracle -v ./session

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

# -fuzzminimizetime: an input with new coverage is minimised before fuzzing goes on, one run per byte or chunk
# removed; the default minute per input (the seeds are whole Parquet and Arrow files) stalls a 30 s run.
FUZZFLAGS := -fuzztime 30s -fuzzminimizetime 3s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzOpenArrow $(FUZZFLAGS) ./capture
	$(GO) test -run '^$$' -fuzz FuzzOpenSafetensors $(FUZZFLAGS) ./capture
	$(GO) test -run '^$$' -fuzz FuzzRead $(FUZZFLAGS) ./logprobs

# CUDA kernels: nvcc exists only on the GPU machine (docs/gpu.md). `make ptx` regenerates every PTX that
# bitalign embeds (kernels/cuda/*.cu; the tensor-core kernels kernels/cuda/tc/*.cu, the wgmma and TMA ones
# (tc_wgmma.cu, tc_tma.cu) with -arch=sm_90a in place of -arch=sm_90; nvls/cuda/collectives.cu for 1, 2, 4 and 8
# ranks) with NVCCFLAGS, the one flag set, and writes each directory's MANIFEST.sha256 (scripts/ptx.sh);
# `make ptx PTX_OUT=dir` writes the same tree under dir. scripts/gpu.sh and the manifest tests read NVCCFLAGS
# from here.
NVCC ?= nvcc
NVCCFLAGS := -ptx -arch=sm_90 -fmad=false -ftz=false -prec-div=true -prec-sqrt=true -O3
ptx:
	NVCC='$(NVCC)' NVCCFLAGS='$(NVCCFLAGS)' PTX_OUT='$(PTX_OUT)' bash scripts/ptx.sh

print-nvccflags:
	@echo '$(NVCCFLAGS)'

# Test binaries to carry to the GPU machine (scripts/gpu.sh runs them there).
# Stripped (-s -w) and xz-compressed (scripts/gpu.sh unpacks them there with python3's lzma), so that all of
# them and the tree fit the device tool's 64 MiB carry (with the tc PTX embedded, gzip's 64 MB would not).
GPUFLAGS = -trimpath -ldflags='-s -w'
gpu-build:
	rm -rf .gpu && mkdir -p .gpu
	$(GO) build $(GPUFLAGS) -o .gpu/bitalign .
	$(GO) test -c $(GPUFLAGS) -o .gpu/cuda.test ./cuda
	$(GO) test -c $(GPUFLAGS) -o .gpu/kernels-cuda.test ./kernels/cuda
	$(GO) test -c $(GPUFLAGS) -o .gpu/engine.test ./engine
	$(GO) test -c $(GPUFLAGS) -o .gpu/nvls.test ./nvls
	$(GO) test -c $(GPUFLAGS) -o .gpu/ui.test ./ui
	$(GO) test -c $(GPUFLAGS) -o .gpu/session.test ./session
	xz -6 -T2 -f .gpu/bitalign .gpu/*.test

# Renders the main TUI screens (overview, heatmap, bit view, replay verdict, help) to screenshots/*.png.
screenshots:
	$(GO) test -count=1 -run '^TestScreenshots$$' ./ui -args -shots $(abspath screenshots)

clean:
	rm -rf bin
