# Two commands do all the set-up: `make run` and `make test` (see README.md, docs/install.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

# Some machines set PYTHONDONTWRITEBYTECODE: then every test worker and every `farebox serve`
# a test starts would compile the package and rewrite the test modules again from source.
unexport PYTHONDONTWRITEBYTECODE
# Empty: farebox's own default (FAREBOX_HOST / FAREBOX_PORT, else 127.0.0.1:4000).
HOST   ?=
PORT   ?=
# uv installs the exact versions in uv.lock; it is bootstrapped from PyPI into the venv, so
# nothing but Python is needed. INSTALLER=pip installs with pip from pyproject.toml's ranges.
INSTALLER  ?= uv
UV_VERSION ?= 0.13.9
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))
INSTALL_TOOL := $(if $(filter pip,$(INSTALLER)),$(BIN)/python,$(BIN)/uv)

.PHONY: run test check lint typecheck unit bench fuzz services clean chromium prometheus agent-clis load-tools screenshots warm-tests

$(BIN)/python:
	@echo "farebox: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	@echo "farebox: installing uv $(UV_VERSION) into $(VENV) (it installs what uv.lock pins)"
	$(BIN)/pip install --disable-pip-version-check "uv==$(UV_VERSION)"

# Bytecode is written at install, for the dependencies and for gateway/ (an editable install:
# its sources stay here): without it, and with PYTHONDONTWRITEBYTECODE set (as on some
# machines), every `farebox serve` compiles ~1,000 modules before its first request
# (bench/first_request.py: 2.4-2.8 s instead of 1.2). uv does not compile by default. The
# installs below compile the dependencies (uv sync --compile-bytecode, pip --compile); the
# .bytecode stamp compiles gateway/, whose sources the editable install leaves here.
# (Checking every site-packages module again took 6.5 s of a fresh clone's CI.)

# Re-install only when the project's metadata, lock or C sources changed. No --quiet: the
# first install downloads over 100 packages and says so as it goes.
$(VENV)/.installed: pyproject.toml setup.py uv.lock gateway/prefix/_locate.c gateway/_rawjson.c gateway/upstream/_plain_event.c | $(INSTALL_TOOL)
	@echo "farebox: installing Farebox and its dependencies into $(VENV) ($(INSTALLER))"
ifeq ($(INSTALLER),pip)
	$(BIN)/pip install --disable-pip-version-check --compile -e .
else
	$(BIN)/uv sync --inexact --compile-bytecode
endif
	touch $@

$(VENV)/.bytecode: $(VENV)/.installed $(wildcard gateway/*.py gateway/*/*.py)
	$(BIN)/python -m compileall -q -j 0 gateway
	touch $@

$(VENV)/.installed-test: pyproject.toml uv.lock $(VENV)/.installed
	@echo "farebox: installing the test tools into $(VENV) ($(INSTALLER))"
ifeq ($(INSTALLER),pip)
	$(BIN)/pip install --disable-pip-version-check --compile -e '.[test]'
else
	$(BIN)/uv sync --inexact --extra test --compile-bytecode
endif
	touch $@

# PORT=... and HOST=... are passed on only when given, so FAREBOX_PORT and FAREBOX_HOST
# work too; the gateway's banner prints the base_url once it is listening.
run: $(VENV)/.installed $(VENV)/.bytecode
	FAREBOX_SIM_PROFILE=$(or $(SIM_PROFILE),realistic) $(BIN)/farebox serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

services:
	@bash .ci/services

# Debian's Chromium, for the cost explorer's browser test and screenshots (.ci/chromium).
chromium:
	@bash .ci/chromium

# Debian's Prometheus and promtool, for tests/dashboards (.ci/prometheus; fails if it cannot).
prometheus:
	@bash .ci/prometheus

# Debian's wrk and nginx-light, the load tools in C of bench/hotpath.py's workers comparison
# (.ci/load-tools; fails if it cannot), for it and tests/bench/test_native_load.py.
load-tools:
	@bash .ci/load-tools

# Codex and Claude Code from npm, pinned, into .cache/npm (.ci/agent-clis; ~20 s the first
# time; fails under CI=true if it cannot), for tests/e2e/test_agent_clis.py.
agent-clis:
	@bash .ci/agent-clis

# A PNG of each view of the cost explorer (/ui) after a small workload, in docs/screenshots.
screenshots: $(VENV)/.installed-test chromium
	$(BIN)/python -m tests.e2e.explorer_workload --screenshots docs/screenshots

lint: $(VENV)/.installed-test
	$(BIN)/ruff check gateway tests $(wildcard bench)
	$(BIN)/mypy

# Four workers, each test file on one of them (files share their servers and fixtures);
# the 25 slowest steps are listed at the end, to keep CI under its 10 minutes. Lint runs
# beside the tests, its output shown after theirs: mypy from a fresh clone takes ~30 s of
# one core, which the tests (~1.6 of the 2 cores busy) mostly absorb. Either failing
# fails `make test`.
test: $(VENV)/.installed-test $(VENV)/.bytecode services chromium prometheus agent-clis load-tools
	@$(MAKE) --no-print-directory lint > .lint.log 2>&1 & lint=$$!; \
	$(MAKE) --no-print-directory warm-tests; \
	$(BIN)/pytest -q -n 4 --dist loadfile --durations=25; tests=$$?; \
	wait $$lint; linted=$$?; cat .lint.log; \
	[ $$linted -eq 0 ] || echo "make test: lint failed (above)"; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

# pytest rewrites each test module's asserts and caches the result in __pycache__: on a
# fresh clone the four workers each rewrote all ~340 modules at once (~6 s of CPU each).
# One collection first leaves the cache for them. A collection error is left to the run.
warm-tests: $(VENV)/.installed-test
	-@$(BIN)/pytest --collect-only -q -p no:xdist -p no:cacheprovider > /dev/null 2>&1

unit: $(VENV)/.installed-test
	$(BIN)/pytest -q tests/unit

check: lint

# Schema-driven fuzzing of the HTTP API against a gateway on the simulator: no 5xx, every
# error in OpenAI's shape. The test suite runs 200 requests; this runs FUZZ_REQUESTS.
FUZZ_REQUESTS ?= 10000
fuzz: $(VENV)/.installed-test
	FUZZ_REQUESTS=$(FUZZ_REQUESTS) $(BIN)/pytest -q -s tests/e2e/test_fuzz_api.py

# LiteLLM's proxy for bench/hotpath.py, in a venv of its own at a pinned version.
LITELLM_BENCH_VERSION ?= 1.108.7
LITELLM_VENV := bench/.litellm-venv
$(LITELLM_VENV)/.installed:
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install --quiet 'litellm[proxy]==$(LITELLM_BENCH_VERSION)'
	touch $@

bench: $(VENV)/.installed-test $(VENV)/.bytecode services load-tools $(LITELLM_VENV)/.installed
	$(BIN)/python bench/prefix_bench.py
	$(BIN)/python bench/rawjson_bench.py
	$(BIN)/python bench/loop_stall.py
	$(BIN)/python bench/budget_overshoot.py
	$(BIN)/python bench/gateway_overshoot.py
	$(BIN)/python bench/key_check.py
	$(BIN)/python bench/hotpath.py --quick --profile
	$(BIN)/python bench/api_c1.py -n 1000 --pairs 1

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
