"""Shared test set-up: fake AWS credentials and local-only settings, so no test can reach a real account."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "eu-west-2",
        "AWS_REGION": "eu-west-2",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }
)
os.environ.pop("AWS_PROFILE", None)

# A throwaway PostgreSQL server for the tests of the PostgreSQL file-reference store (and anyone else).
pytest_plugins = ["tests.fixtures.postgres"]

# Hypothesis's per-example deadline is a timed assertion: on a busy shared machine a correct example can take
# longer than 200 ms and fail. Speed is measured in benchmarks/, not here.
settings.register_profile("statestore", deadline=None)
settings.load_profile("statestore")

# The modules that take minutes each, longest first, run before the others: in two processes
# (pytest-xdist, `--dist loadscope`) modules are handed out in collection order, so a long module collected
# last keeps one process busy while the other has nothing left. The order within each module is kept.
LONG_MODULES = (
    "tests/spark/test_change_ranges.py",
    "tests/spark/test_datasource.py",
    "tests/cli/test_cli.py",
    "tests/spark/test_cluster.py",
    "tests/e2e/test_local_runtime.py",
    "tests/aws/test_queryable_view.py",
    "tests/e2e/test_installed_package.py",
    "tests/simulation/test_simulation.py",
    "tests/e2e/test_embedded_default.py",
    "tests/infra/test_deployed_access.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {module: i for i, module in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
