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

    A query DataFrame reads the file list of the state it was planned on, however much later it runs. Once a
    file has left the state (compacted away) garbage collection deletes it after the GC delay, so a query
    whose file list is older than that finds it gone: run the query again, or raise the instance's
    ``gc_delay_minutes`` above the longest query. For incremental reads it means the consumer fell further
    behind than the delay: restart it from a full read. The message (see :func:`missing_file_message`) says
    so, since Spark hands a task's error to the driver as text.
    """


def missing_file_message(uri: str, cause: object, planned_at: int | None = None) -> str:
    """What a :class:`DataFileMissingError` says: which file, what most likely happened, what to do.

    ``planned_at`` is the transaction number whose file list the read was planned from, if known.
    """
    listed = "" if planned_at is None else f" (as of transaction {planned_at})"
    return (
        f"data file {uri} is missing ({cause}). A query reads the file list of the state it was planned "
        f"on{listed}, and garbage collection deletes a file the GC delay after it left the state (compacted "
        "away): most likely this file list is older than the GC delay. Run the query again to read the "
        "current state, or raise the instance's gc_delay_minutes (a table's gc_delay_minutes property) above "
        "the longest query's run time. If the table's current state still references the file, it was "
        "deleted outside the store"
    )


class CompactionFailedError(StateStoreError):
    """A compaction run failed while merging (a data file unreadable or unwritable, a task lost).

    Nothing was committed, and the run released its claims, so the next compaction can take those files
    again; the message says what failed, and whether the claims and partial outputs were cleaned up.
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


class DataSourceOptionError(StateStoreError, ValueError):
    """An option given to ``spark.read/df.write.format("statestore-table")`` is missing, unknown or
    malformed."""
