# Everything a fresh machine needs: `make demo` and `make test` build the virtual environment themselves
# from the pinned versions in pyproject.toml (+ requirements.lock) and package-lock.json.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

export SPARK_LOCAL_IP ?= 127.0.0.1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION ?= 20
export CDK_DISABLE_CLI_TELEMETRY ?= true
export PYSPARK_PYTHON := $(abspath $(PY))
export PATH := $(abspath node_modules/.bin):$(PATH)

.PHONY: venv node demo test lint bench soak synth lambda-asset clean

venv: $(STAMP)
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@

node: $(NODE_STAMP)
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: venv
	$(PY) -m statestore.demo

test: venv node
	$(PY) -m pytest -q

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Each script prints its figures, targets and ratios (the README's Benchmarks section).
bench: venv
	$(PY) benchmarks/bench_model.py
	$(PY) benchmarks/bench_sync_commits.py
	$(PY) benchmarks/bench_committer.py
	$(PY) benchmarks/bench_spark.py

# The commit-path simulation over many more seeds than make test runs (README: Correctness under faults).
SOAK_SEEDS ?= 0:4000
SOAK_STEPS ?= 250
soak: venv
	$(PY) -m tests.simulation --seeds $(SOAK_SEEDS) --steps $(SOAK_STEPS) --jobs 2

# The Lambda asset (our code + pinned dependencies for Lambda's Python 3.12 x86_64, from PyPI wheels, no
# Docker): build/lambda/asset/. Rebuilt only when its inputs change.
lambda-asset: venv
	$(PY) -m infra.asset

# CloudFormation templates into cdk.out/ (offline: no account, region or lookups needed). cdk.json runs
# `python3 app.py`, so the venv's python goes first on PATH.
synth: venv node lambda-asset
	PATH="$(abspath $(VENV)/bin):$$PATH" cdk synth --quiet

clean:
	rm -rf $(VENV) node_modules cdk.out build .pytest_cache .mypy_cache .ruff_cache
