# bitalign — build, run and test. `make run` and `make test` are the two set-up commands (see README.md).
GO      ?= go
export CGO_ENABLED := 0
BIN     := bin/bitalign
VENV    := .venv
PY      := $(VENV)/bin/python

.PHONY: build run test test-go test-python test-torch bench fuzz ptx screenshots gpu-build clean

build:
	$(GO) build -o $(BIN) .

run: build
	./$(BIN)

test: test-go test-python

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

$(VENV)/.ok: capture/python/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q pyarrow numpy pytest
	$(PY) -m pip install -q --no-deps -e capture/python
	touch $@

test-python: $(VENV)/.ok
	$(PY) -m pytest -q capture/python/tests -m "not torch"

# Needs torch and transformers (the GPU machine has them; see README).
test-torch:
	python3 -m pytest -q capture/python/tests -m torch

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzOpenArrow -fuzztime 30s ./capture
	$(GO) test -run '^$$' -fuzz FuzzOpenSafetensors -fuzztime 30s ./capture

clean:
	rm -rf bin
