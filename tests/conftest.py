"""Shared test set-up: fake AWS credentials and local-only settings, so no test can reach a real account."""

from __future__ import annotations

import os

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
