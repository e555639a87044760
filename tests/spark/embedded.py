"""The embedded default as a Spark user meets it: a local runtime started as ``statestore local`` starts one
(on the test session's servers), and the environment its printed ``export`` lines give another shell."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import unique_resources


def exported_environment(runtime: LocalRuntime) -> dict[str, str]:
    """What ``statestore local`` tells a user to export for ``runtime`` (see ``statestore.cli.local``)."""
    exports = {
        "AWS_ENDPOINT_URL": runtime.endpoint_url,
        "AWS_ENDPOINT_URL_DYNAMODB": runtime.dynamodb_endpoint_url,
        "STATESTORE_INSTANCE_ID": runtime.resources.instance_id,
        "AWS_DEFAULT_REGION": runtime.region,
    }
    if os.environ.get("AWS_ACCESS_KEY_ID") == "testing":
        exports |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    return exports


def shell_environment(runtime: LocalRuntime) -> dict[str, str]:
    """A user's shell after those exports: this process's environment without any statestore setting
    that would name the instance another way, plus the exports."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("STATESTORE_RESOURCES", "STATESTORE_BUCKET", "STATESTORE_INSTANCE_ID")
    }
    return {**env, **exported_environment(runtime)}


def runtime_as_statestore_local_starts_it(moto_server: str, dynamodb_local: str) -> Iterator[LocalRuntime]:
    """A runtime for a new instance with the commit queue's poller and no schedules (a test takes its
    snapshots when it wants them); stopped afterwards."""
    runtime = LocalRuntime.start(
        unique_resources("sp"),
        endpoint_url=moto_server,
        dynamodb_endpoint_url=dynamodb_local,
        snapshot_interval=None,
        cleanup_interval=None,
    )
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture
def embedded(moto_server: str, dynamodb_local: str) -> Iterator[LocalRuntime]:
    yield from runtime_as_statestore_local_starts_it(moto_server, dynamodb_local)


@pytest.fixture
def user_shell(embedded: LocalRuntime, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment as the user's shell after the exports (undone after the test)."""
    for name in ("STATESTORE_RESOURCES", "STATESTORE_BUCKET"):
        monkeypatch.delenv(name, raising=False)
    exports = exported_environment(embedded)
    for name, value in exports.items():
        monkeypatch.setenv(name, value)
    return exports
