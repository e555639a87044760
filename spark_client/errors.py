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
    """A commit was sent but its outcome is not known yet (the committer did not answer in time).

    It is NOT a success: the request may still be committed or rejected. Look it up later by
    ``request_id`` (``statestore status REQUEST_ID``, or ``QueueCommitter.outcome``); do not resend the same
    work under a new request id, or it may be applied twice.
    """

    def __init__(self, what: str, request_id: str, reason: str) -> None:
        super().__init__(f"{what} has no outcome yet ({reason}); request id {request_id!r}")
        self.request_id = request_id


class InvalidDataFileError(StateStoreError):
    """A data file just written is not a readable Parquet file of the table's schema and row count.

    Raised before the file is committed: nothing references it, and the orphan sweep deletes it.
    """
