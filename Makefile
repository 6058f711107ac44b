# Two commands do all the set-up: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 4000

.PHONY: run test check lint typecheck unit bench fuzz services clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Re-install only when the project's metadata changed.
$(VENV)/.installed: pyproject.toml setup.py gateway/prefix/_locate.c gateway/_rawjson.c | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	@echo "Farebox: point your OpenAI SDK at base_url=http://$(HOST):$(PORT)/v1 (any api_key)"
	$(BIN)/farebox serve --host $(HOST) --port $(PORT)

services:
	@bash .ci/services

lint: $(VENV)/.installed-test
	$(BIN)/ruff check gateway tests $(wildcard bench)
	$(BIN)/mypy

# Four workers, each test file on one of them (files share their servers and fixtures).
test: $(VENV)/.installed-test services lint
	$(BIN)/pytest -q -n 4 --dist loadfile

unit: $(VENV)/.installed-test
	$(BIN)/pytest -q tests/unit

check: lint

# Schema-driven fuzzing of the HTTP API against a gateway on the simulator: no 5xx, every
# error in OpenAI's shape. The test suite runs 200 requests; this runs FUZZ_REQUESTS.
FUZZ_REQUESTS ?= 10000
fuzz: $(VENV)/.installed-test
	FUZZ_REQUESTS=$(FUZZ_REQUESTS) $(BIN)/pytest -q -s tests/e2e/test_fuzz_api.py

bench: $(VENV)/.installed-test
	$(BIN)/python bench/prefix_bench.py
	$(BIN)/python bench/rawjson_bench.py
	$(BIN)/python bench/loop_stall.py
	$(BIN)/python bench/budget_overshoot.py
	$(BIN)/python bench/gateway_overshoot.py
	$(BIN)/python bench/key_check.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
