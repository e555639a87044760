"""The CLI's exit codes, its one expected-failure exception, and how library errors map to both.

Every message an expected failure prints says what was wrong and what to do; the exit code says which kind
of failure it was (scripts rely on them: see ``statestore --help``). The only place that reads backend
error text (botocore's codes in a message) to tell a missing instance or missing credentials apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from statestore.errors import (
    CodecError,
    CommitConflictError,
    InvalidKeyError,
    InvalidSchemaError,
    SnapshotNotFoundError,
    StateStoreError,
    StoreUnavailableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionNotRetainedError,
    TransactionValidationError,
)

if TYPE_CHECKING:
    from statestore.cli.session import Session

EXIT_OK = 0
EXIT_FAILED = 1  # the operation was refused or failed: a rejected commit, a validation error, a name taken
EXIT_USAGE = 2  # bad usage or input: unknown option, missing file, invalid schema or transaction JSON
EXIT_NOT_FOUND = 3  # no such table, request or log entry
EXIT_UNAVAILABLE = 4  # the backend cannot be reached or is not set up (no endpoint, no resources, throttled)
EXIT_PENDING = 5  # waited, but the request has no outcome yet
EXIT_INTERNAL = 70  # a bug: the traceback is printed
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: printed as one line, the process exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def fail(stderr: TextIO, message: str, code: int) -> int:
    """Print ``message`` as the CLI's one error line on ``stderr``; returns ``code``."""
    print(f"statestore: error: {message}", file=stderr, flush=True)
    return code


_MISSING_RESOURCE_CODES = (
    "ResourceNotFoundException",
    "NonExistentQueue",
    "NoSuchBucket",
    "QueueDoesNotExist",
)
_NO_CREDENTIALS = ("Unable to locate credentials", "UnrecognizedClientException", "InvalidClientTokenId")


def describe(error: StateStoreError, session: Session) -> tuple[str, int]:
    """The one-line message and exit code for a library error."""
    message = str(error)
    if isinstance(error, TableNotFoundError):
        return f"{message}; list the tables with `statestore tables list`", EXIT_NOT_FOUND
    if isinstance(error, TransactionNotRetainedError | SnapshotNotFoundError):
        return message, EXIT_NOT_FOUND
    if isinstance(error, InvalidSchemaError | InvalidKeyError | CodecError):
        return message, EXIT_USAGE
    if isinstance(error, TransactionValidationError | TableAlreadyExistsError | CommitConflictError):
        return message, EXIT_FAILED
    if isinstance(error, StoreUnavailableError):
        return message, EXIT_UNAVAILABLE
    if any(code in message for code in _MISSING_RESOURCE_CODES):
        instance = session.resources.instance_id
        return (
            f"instance {instance!r} is not set up at {session.where()} ({message}); start "
            f"`statestore local --instance {instance}`, deploy the stack, or pass the right "
            "--instance / --resources-json / --endpoint-url",
            EXIT_UNAVAILABLE,
        )
    if any(text in message for text in _NO_CREDENTIALS):
        return (
            f"{message}; configure AWS credentials (e.g. `aws configure`) or use a local endpoint",
            EXIT_UNAVAILABLE,
        )
    return message, EXIT_FAILED
