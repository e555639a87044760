"""CLI fixtures: one local runtime (committer and all) attached to the session's servers for the module,
and ``cli(...)``, which runs ``statestore`` against it and captures what it printed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from statestore.cli import main
from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import (  # noqa: F401  (session fixtures)
    dynamodb_local,
    moto_server,
    unique_resources,
)


@pytest.fixture(scope="module")
def runtime(moto_server: str, dynamodb_local: str) -> Iterator[LocalRuntime]:  # noqa: F811
    with LocalRuntime.start(
        unique_resources("cli"),
        endpoint_url=moto_server,
        dynamodb_endpoint_url=dynamodb_local,
        snapshot_interval=None,
        cleanup_interval=None,
    ) as rt:
        yield rt


def _is_function_record(line: str) -> bool:
    """A line the in-process functions print meanwhile: a log record or an embedded-metric record (EMF)."""
    return line.startswith(('{"level"', '{"_aws"'))


def cli_json(out: str) -> Any:
    """The CLI's JSON document in ``out``, without the functions' log and metric lines printed meanwhile
    (the runtime's committer and workers run in this process and share its stdout)."""
    return json.loads("\n".join(line for line in out.splitlines() if not _is_function_record(line)))


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return cli_json(self.out)


class Cli:
    def __init__(self, runtime: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> None:
        self.runtime = runtime
        self.capsys = capsys

    def __call__(self, *argv: str) -> Run:
        """``statestore ARGV...`` against the runtime's endpoint and instance."""
        self.capsys.readouterr()
        code = main(
            [
                *argv,
                "--endpoint-url",
                self.runtime.endpoint_url,
                "--dynamodb-endpoint-url",
                self.runtime.dynamodb_endpoint_url,
                "--instance",
                self.runtime.resources.instance_id,
            ]
        )
        captured = self.capsys.readouterr()
        return Run(code, captured.out, captured.err)


@pytest.fixture
def cli(runtime: LocalRuntime, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(runtime, capsys)
