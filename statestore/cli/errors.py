"""The CLI's exit codes, its one expected-failure exception, and the one mapping from library errors to them.

Every message an expected failure prints says what was wrong and what to do; the exit code says which kind
of failure it was (scripts rely on them: see ``statestore --help``). Adapters raise typed errors
(:mod:`statestore.errors`; botocore failures are translated by
:func:`statestore.adapters.aws.clients.translate_error`), so nothing here reads a message's text: the type
decides.
"""

from __future__ import annotations

from typing import Protocol, TextIO

from statestore.errors import (
    AccessDeniedError,
    CodecError,
    CommitConflictError,
    InvalidKeyError,
    InvalidSchemaError,
    ResourceNotFoundError,
    SnapshotNotFoundError,
    StateStoreError,
    StoreUnavailableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionNotRetainedError,
    TransactionValidationError,
    UnreadableDataError,
)
from statestore.instance import ResourceNames

EXIT_OK = 0
EXIT_FAILED = 1  # the operation was refused or failed: a rejected commit, a validation error, a name taken
EXIT_USAGE = 2  # bad usage or input: unknown option, missing file, invalid schema or transaction JSON
EXIT_NOT_FOUND = 3  # no such table, request or log entry
# the backend cannot be reached, is not set up, refuses the caller (no endpoint, no resources, throttled, no
# credentials, access denied), or holds something it cannot read back (a damaged snapshot or log entry)
EXIT_UNAVAILABLE = 4
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


# Failures of the backend as a whole (not of one table): a command working through tables stops at one.
BACKEND_ERRORS: tuple[type[StateStoreError], ...] = (
    StoreUnavailableError,
    AccessDeniedError,
    ResourceNotFoundError,
)

# First match wins: a subclass listed before its base gets its own code.
EXIT_CODES: tuple[tuple[type[StateStoreError], int], ...] = (
    (TableNotFoundError, EXIT_NOT_FOUND),
    (TransactionNotRetainedError, EXIT_NOT_FOUND),
    (SnapshotNotFoundError, EXIT_NOT_FOUND),
    (InvalidSchemaError, EXIT_USAGE),
    (InvalidKeyError, EXIT_USAGE),
    (CodecError, EXIT_USAGE),
    (TransactionValidationError, EXIT_FAILED),
    (TableAlreadyExistsError, EXIT_FAILED),
    (CommitConflictError, EXIT_FAILED),
    (StoreUnavailableError, EXIT_UNAVAILABLE),  # throttled, unreachable, a local endpoint down
    (UnreadableDataError, EXIT_UNAVAILABLE),  # the store holds a damaged object: not the caller's input
    (AccessDeniedError, EXIT_UNAVAILABLE),  # IAM denied the action, or no / bad credentials
    (ResourceNotFoundError, EXIT_UNAVAILABLE),  # the instance is not set up where we looked
)


class Place(Protocol):
    """Where the CLI looked: the instance's resources and the endpoint (the CLI's ``Session``)."""

    @property
    def resources(self) -> ResourceNames: ...

    def where(self) -> str: ...


def exit_code(error: StateStoreError) -> int:
    """The exit code for a library error (see the CLI's ``EPILOG``): 1 when no type matches."""
    for error_type, code in EXIT_CODES:
        if isinstance(error, error_type):
            return code
    return EXIT_FAILED


def describe(error: StateStoreError, place: Place) -> tuple[str, int]:
    """The one-line message (saying what to do) and exit code for a library error."""
    message = str(error)
    if isinstance(error, TableNotFoundError):
        message = f"{message}; list the tables with `statestore tables list`"
    elif isinstance(error, ResourceNotFoundError):
        instance = place.resources.instance_id
        message = (
            f"instance {instance!r} is not set up at {place.where()} ({message}); start "
            f"`statestore local --instance {instance}`, deploy the stack, or pass the right "
            "--instance / --resources-json / --endpoint-url"
        )
    return message, exit_code(error)
