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


class CompactionFailedError(StateStoreError):
    """A compaction run failed while merging (a data file unreadable or unwritable, a task lost).

    Nothing was committed, and the run released its claims, so the next compaction can take those files
    again; the message says what failed, and whether the claims and partial outputs were cleaned up.
    """
