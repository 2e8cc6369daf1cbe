# Two entry points for a newcomer: `make run` and `make test`. Both bootstrap .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck bench clean constraints

# The scheduler core is compiled by mypyc when the package is installed (setup.py): a changed core source
# reinstalls, so what runs is never older than the sources.
CORE_SOURCES := $(shell find kai_stream/core/scheduler -name '*.py')

# Ranges live in pyproject.toml; the exact versions installed come from constraints.txt.
$(STAMP): pyproject.toml constraints.txt setup.py $(CORE_SOURCES)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[embedded,dev]'
	touch $(STAMP)

# Re-pin constraints.txt to what the current .venv has installed (after widening or upgrading a dependency).
constraints:
	$(BIN)/python .ci/constraints.py

run: $(STAMP)
	@echo "kai-stream run: starting (Ctrl-C stops) ..."
	$(BIN)/kai-stream run $(ARGS)

# A first run also downloads Kafka's jars and builds the Go binaries the tests start (cached outside the clone).
test: $(STAMP)
	$(BIN)/python -m tests.prebuild
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# What `mypy --strict` checks is the [tool.mypy] files list in pyproject.toml (the packages, benchmarks, deploy).
typecheck: $(STAMP)
	$(BIN)/mypy --strict

clean:
	rm -rf $(VENV) .kai-stream .pytest_cache .mypy_cache .ruff_cache build
	find . -name '*.so' -not -path './.venv/*' -delete
