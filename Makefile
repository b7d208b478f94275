# One command path for developers and CI: `make test` is what .ci/run executes.
# The venv is built from nothing by `python3 -m venv`, pinned by constraints.txt, and rebuilt
# only when pyproject.toml or constraints.txt change (stamp file .venv/.installed).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help test demo up lint bench bench-e2e lock clean venv system
.DEFAULT_GOAL := help

# `make` alone lists the targets: each target's `## ...` comment is its line.
help: ## list the targets, one line each
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv with the pinned dependencies (again when they change)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -c constraints.txt -e '.[dev,embedded]'
	touch $@

# The UI test drives Debian's chromium (playwright's own browser download does not work here);
# Spark needs a Java runtime (17 or newer).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq
system: ## apt-get install chromium and a Java runtime when missing
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && $(APT_INSTALL) chromium; }
	command -v java >/dev/null || { $(SUDO) apt-get update -qq && \
	  $(APT_INSTALL) default-jre-headless; }

# The suite runs on PYTEST_WORKERS processes, a whole test file per worker at a time (module
# fixtures are built once), in the order tests/conftest.py gives: the longest files first; the
# end-to-end files (tests/e2e/), each a whole platform, run one after another on one worker,
# and the files that use the in-process Spark session share another (one JVM).
# Most of the time goes to waiting on brokers, Dagster and Spark, so four workers fit 2 cores
# (five kept the machine 95% busy and took longer: 15:14 against 14:33, 2026-11-28).
# PYTEST_WORKERS=0 runs it in one process. Python writes its bytecode caches here even where
# the environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts ~900 Python
# processes that import the project, each of which compiled it from source again (~0.25 CPU-s),
# and a worker's collection takes 9.5 CPU-s instead of 18.5 once pytest's rewritten test
# modules are cached (from the second run of a checkout on).
PYTEST_WORKERS ?= 4
test: $(STAMP) system ## run the whole suite on 4 workers (PYTEST_ARGS=..., PYTEST_WORKERS=N)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(PYTEST_WORKERS) \
	  --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

demo: $(STAMP) ## lanehouse demo: 3 days of shop data end to end, reconciled
	$(BIN)/lanehouse demo

up: $(STAMP) ## lanehouse up: brokers, live shop, Dagster on 127.0.0.1:3000
	$(BIN)/lanehouse up

lint: $(STAMP) ## ruff check, ruff format --check and mypy (product and tests)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy consumers orchestration spark_jobs tests

# Lanehouse, the raw client, Quix Streams and Arroyo side by side (docs/benchmarks.md); the
# peers' venvs (.bench-venvs/) are built on first use. ~15 min on 2 cores.
BENCH_OUT ?= bench-results.json
bench: $(STAMP) ## Lanehouse beside the raw client, Quix Streams, Arroyo (~15 min)
	$(BIN)/python -m bench.engine --repeat 3 --out $(BENCH_OUT)

# 1,000,000 demo events from produce to clean Spark tables, time per stage (docs/benchmarks.md).
bench-e2e: $(STAMP) ## 1,000,000 demo events to clean Spark tables, time per stage
	$(BIN)/python bench/e2e.py

# Two replicas against one on one 8-partition topic, as `lanehouse consume --replicas R` and as R
# Dagster consumer runs (`--modes cli,runs`, both by default; docs/benchmarks.md).
.PHONY: bench-fleet
bench-fleet: $(STAMP) ## two consumer replicas against one (CLI and Dagster runs)
	$(BIN)/python -m bench.fleet

# Re-resolve every dependency within pyproject.toml's ranges into a fresh venv, then pin it.
lock: ## re-resolve every dependency in a fresh venv and re-pin constraints.txt
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -e '.[dev,embedded]'
	{ echo '# Pinned lock of the whole environment; `make lock` regenerates it'; \
	  echo '# (pip freeze of a fresh venv after `pip install -e .[dev,embedded]`, lanehouse itself left out).'; \
	  .lock-venv/bin/pip freeze --exclude-editable | grep -iv '^lanehouse[= @]'; } > constraints.txt
	rm -rf .lock-venv

clean: ## remove .venv, caches, build output, .lanehouse and test-artifacts
	rm -rf $(VENV) .lock-venv build *.egg-info .pytest_cache .ruff_cache .mypy_cache .lanehouse test-artifacts
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
