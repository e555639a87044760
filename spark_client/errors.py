"""Errors the Spark jobs raise. Each one is a :class:`~statestore.errors.StateStoreError`, says what was
wrong and what to do about it."""

from __future__ import annotations

from statestore.errors import StateStoreError


class SchemaMismatchError(StateStoreError, ValueError):
    """A DataFrame does not match the table's schema (missing, extra or mistyped columns, null keys).

    Raised before anything is written: no data file exists and nothing is committed.
    """


class CommitRejectedError(StateStoreError):
    """A commit request was rejected by the state store; ``reason`` says why."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what} was rejected: {reason}")
        self.reason = reason


class DataFileMissingError(StateStoreError):
    """A data file named in the state (or in the log) is no longer in the data store.

    For incremental reads this means the consumer fell further behind than the garbage-collection delay:
    the file was compacted away and then collected. Restart the consumer from a full read.
    """


class CommitPendingError(StateStoreError):
    """A commit request was sent but no outcome came back in time: it may still be committed.

    Nothing is undone (the files it names stay where they are). Look the outcome up later by
    ``request_id``; if it is never committed, the files become orphans for garbage collection.
    """

    def __init__(self, what: str, request_id: str | None, reason: str) -> None:
        super().__init__(
            f"{what} has no outcome yet ({reason}); it may still be committed: look up request id "
            f"{request_id!r} before writing the same rows again"
        )
        self.request_id = request_id


class DataSourceOptionError(StateStoreError, ValueError):
    """An option given to ``spark.read/df.write.format("statestore")`` is missing, unknown or malformed."""
