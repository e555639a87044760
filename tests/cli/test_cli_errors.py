"""Exit codes of backend failures: the adapters raise typed errors, and one mapping
(``statestore/cli/errors.py``) turns each type into the exit code the CLI documents, never a message's text.
"""

from __future__ import annotations

import pytest

from statestore.cli import main
from statestore.cli.errors import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    exit_code,
)
from statestore.cli.parser import EPILOG
from statestore.errors import (
    AccessDeniedError,
    CodecError,
    CommitOutcomeUnknownError,
    EndpointUnavailableError,
    ResourceNotFoundError,
    StateStoreError,
    StoreUnavailableError,
    TableNotFoundError,
    ThrottledError,
    TransactionValidationError,
)
from tests.fixtures.fake_aws import (
    ACCESS_DENIED,
    INTERNAL,
    NOT_FOUND,
    THROTTLED,
    Reply,
    error,
    fake_endpoint,
    no_botocore_sleep,  # noqa: F401  (fixture)
)


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (ThrottledError("slow down"), EXIT_UNAVAILABLE),
        (StoreUnavailableError("down"), EXIT_UNAVAILABLE),
        (EndpointUnavailableError("nothing answers"), EXIT_UNAVAILABLE),
        (CommitOutcomeUnknownError("t", 3, "w", "reset"), EXIT_UNAVAILABLE),
        (AccessDeniedError("not authorized"), EXIT_UNAVAILABLE),
        (ResourceNotFoundError("no such table"), EXIT_UNAVAILABLE),
        (TableNotFoundError("t"), EXIT_NOT_FOUND),
        (CodecError("bad"), EXIT_USAGE),
        (TransactionValidationError("no"), EXIT_FAILED),
        (StateStoreError("anything else"), EXIT_FAILED),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_error_type_has_its_documented_exit_code(raised: StateStoreError, code: int) -> None:
    assert exit_code(raised) == code
    assert f"  {code}    " in EPILOG


def test_the_exit_code_table_says_access_denied_is_4() -> None:
    four = EPILOG.split("  4    ", 1)[1].split("\n  5 ", 1)[0]
    assert "access denied" in four and "no credentials" in four and "throttling" in four


@pytest.mark.usefixtures("no_botocore_sleep")
@pytest.mark.parametrize(
    "command",
    [["tables", "list"], ["committer", "status"], ["committer", "pause"], ["dead-letters", "list"]],
    ids=" ".join,
)
@pytest.mark.parametrize(
    ("reply", "code", "says"),
    [
        (ACCESS_DENIED, EXIT_UNAVAILABLE, "is not authorized"),
        (THROTTLED, EXIT_UNAVAILABLE, "try again later"),
        (INTERNAL, EXIT_UNAVAILABLE, "kept failing"),
        (NOT_FOUND, EXIT_UNAVAILABLE, "instance 'denied' is not set up at"),
        (error(400, "ValidationException", "1 validation error detected"), EXIT_FAILED, "validation error"),
    ],
    ids=["access-denied", "throttled", "internal", "not-found", "invalid"],
)
def test_a_backend_failure_of_a_command_exits_with_its_types_code_in_one_line(
    command: list[str], reply: Reply, code: int, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_endpoint(lambda _o, _b: reply) as endpoint:
        result = main([*command, "--endpoint-url", endpoint.url, "--instance", "denied"])

    err = capsys.readouterr().err
    assert result == code, err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err
