"""End-to-end fixtures: a :class:`LocalRuntime` (poller and all) attached to the session's servers as the
embedded default runs (tables on DynamoDB Local, bucket and queues on moto), one fresh instance per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import (  # noqa: F401  (session fixtures)
    dynamodb_local,
    moto_server,
    unique_resources,
)

StartRuntime = Callable[..., LocalRuntime]


@pytest.fixture
def start_runtime(moto_server: str, dynamodb_local: str) -> Iterator[StartRuntime]:  # noqa: F811
    """Start a local runtime for a new instance on the session's servers (options as for
    LocalRuntime.start); it is stopped at the end of the test."""
    started: list[LocalRuntime] = []

    def start(**options: Any) -> LocalRuntime:
        options = {"snapshot_interval": None, "cleanup_interval": None, **options}
        runtime = LocalRuntime.start(
            unique_resources("e"), endpoint_url=moto_server, dynamodb_endpoint_url=dynamodb_local, **options
        )
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        runtime.stop()


@pytest.fixture
def runtime(start_runtime: StartRuntime) -> LocalRuntime:
    return start_runtime()
