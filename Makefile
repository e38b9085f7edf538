# Gannet developer entry points. The README gives two set-up commands: `make run`, `make test`.
# Everything is installed from scratch into .venv; nothing relies on what a machine happens to have.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA_DIR ?= $(HOME)/.gannet/store
PYTEST_ARGS ?=
# promtool (Debian's prometheus package) checks /metrics and the alert rules in tests/metrics.
PROMTOOL := $(shell command -v promtool 2>/dev/null || echo /usr/bin/promtool)

.PHONY: run test lint unit bench install clean dashboards e2e-prometheus

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -e '.[dev,pipeline]'
	touch $(STAMP)

install: $(STAMP)

$(PROMTOOL):
	bash deploy/prometheus/install-promtool.sh

## run: install and start a single-node broker on $(DATA_DIR)
run: $(STAMP)
	$(BIN)/gannet broker run --data-dir $(DATA_DIR)

## test: install, lint (ruff + mypy --strict) and run the test suite
test: lint unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p gannet.node -p gannet.operator -p gannet.pipeline
	$(BIN)/mypy tests bench

unit: $(STAMP) $(PROMTOOL)
	$(BIN)/pytest -q $(PYTEST_ARGS)

## bench: quick benchmarks (storage engine, Pop); figures go to bench/results/
bench: $(STAMP)
	$(BIN)/python -m bench.storage --quick
	$(BIN)/python -m bench.pop --quick
	$(BIN)/python -m bench.metrics --quick

## e2e-prometheus: a real Prometheus scrapes a broker under load; every dashboard and alert
## expression is evaluated through its HTTP API (about 30 s; also part of `make unit`)
e2e-prometheus: $(STAMP) $(PROMTOOL)
	$(BIN)/python -m e2e.prometheus.scenario

## dashboards: rebuild charts/gannet/dashboards/*.json and the chart's alert-rules copy
dashboards: $(STAMP)
	$(BIN)/python -m deploy.dashboards.build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
