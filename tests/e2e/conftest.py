"""End-to-end fixtures: a :class:`LocalRuntime` (poller and all) attached to the session's moto server, one
fresh instance per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statestore.local_runtime import LocalRuntime
from tests.fixtures.aws_servers import moto_server, unique_resources  # noqa: F401  (session fixture)

StartRuntime = Callable[..., LocalRuntime]


@pytest.fixture
def start_runtime(moto_server: str) -> Iterator[StartRuntime]:  # noqa: F811
    """Start a local runtime for a new instance on the moto server (options as for LocalRuntime.start);
    it is stopped at the end of the test."""
    started: list[LocalRuntime] = []

    def start(**options: Any) -> LocalRuntime:
        options = {"snapshot_interval": None, "cleanup_interval": None, **options}
        runtime = LocalRuntime.start(unique_resources("e"), endpoint_url=moto_server, **options)
        started.append(runtime)
        return runtime

    yield start
    for runtime in started:
        runtime.stop()


@pytest.fixture
def runtime(start_runtime: StartRuntime) -> LocalRuntime:
    return start_runtime()
