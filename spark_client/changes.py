"""The rows added in a range of transactions: what the data source's ``startingTransaction`` /
``endingTransaction`` (and ``startingTimestamp`` / ``endingTimestamp``) options and
:func:`spark_client.incremental.read_added_since` read.

:func:`changes_between` gives every file reference the ``AddFiles`` of transactions ``start..end``
added, each as a part to read restricted like a plain read restricts it (to
its partition's region, unless the file holds only that partition's rows), so the rows added over
consecutive ranges are exactly the rows a full read of the table gives, as long as nothing was deleted.
It also says what every transaction in the range did (:class:`RangeTransaction`): compactions, splits and
claims add no rows, and a range holding only those is empty.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from spark_client.data_store import DataStore
from spark_client.errors import DataFileMissingError, DataSourceOptionError
from spark_client.log_times import LogTimes, format_time
from spark_client.read_plan import ReadPart, intersect
from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import TableStateStore, entries_after
from statestore.model.files import FileReference
from statestore.model.partitions import Region
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, Transaction, TransactionBatch


def added_references(transaction: Transaction) -> list[FileReference]:
    """The references a log entry's transaction added as new files (looking inside batches)."""
    if isinstance(transaction, AddFiles):
        return list(transaction.references)
    if isinstance(transaction, TransactionBatch):
        return [ref for item in transaction.items for ref in added_references(item.transaction)]
    return []


@dataclass(frozen=True)
class AddedPart(ReadPart):
    """A part of a file an ``AddFiles`` added: read as a plain read would, tagged with that transaction."""

    transaction_number: int = 0
    commit_time: int = 0  # the transaction's update time, epoch ms


@dataclass(frozen=True)
class RangeTransaction:
    """What one transaction of a range did: its types (a committer's batch holds several), and the files
    and rows its ``AddFiles`` added (none for a compaction, a split, a claim or a deletion)."""

    transaction_number: int
    update_time: int
    types: tuple[str, ...]
    files_added: int
    rows_added: int


@dataclass(frozen=True)
class Changes:
    """The rows added by transactions ``start..end`` (inclusive; empty when ``start > end``), as parts to
    read, and what each transaction in the range did."""

    start: int
    end: int
    parts: tuple[AddedPart, ...]
    transactions: tuple[RangeTransaction, ...]

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(part.filename for part in self.parts))

    @property
    def rows_added(self) -> int:
        return sum(t.rows_added for t in self.transactions)

    def summary(self) -> dict[str, Any]:
        """The range as plain JSON: its ends, the rows and files added, and per transaction type how many
        transactions there were and how many rows they added, with a note saying which add none."""
        by_type: dict[str, dict[str, int]] = {}
        for t in self.transactions:
            for kind, count in Counter(t.types).items():
                entry = by_type.setdefault(kind, {"transactions": 0, "rowsAdded": 0})
                entry["transactions"] += count
            if t.rows_added:
                by_type["AddFiles"]["rowsAdded"] += t.rows_added
        none_added = sorted(kind for kind, entry in by_type.items() if not entry["rowsAdded"])
        note = "only AddFiles transactions add rows"
        if none_added:
            note += f"; the {', '.join(none_added)} transaction(s) in this range add none"
            if {"ReplaceFileReferences", "SplitFileReferences", "SplitPartition"} & set(none_added):
                note += " (a compaction or a split rewrites or moves rows already in the table)"
        return {
            "startingTransaction": self.start,
            "endingTransaction": self.end,
            "startingTime": format_time(self.transactions[0].update_time) if self.transactions else None,
            "endingTime": format_time(self.transactions[-1].update_time) if self.transactions else None,
            "rowsAdded": self.rows_added,
            "filesAdded": len(self.files),
            "transactionsByType": by_type,
            "note": note,
        }


def resolve_range(
    store: TableStateStore,
    starting_transaction: int | None,
    ending_transaction: int | None,
    starting_time: int | None,
    ending_time: int | None,
) -> tuple[int, int]:
    """The transactions ``(start, end)`` a range's options name; ``start > end`` is an empty range.

    Start: ``starting_transaction``, or the first transaction committed at or after ``starting_time``
    (epoch ms; none yet: empty). End: ``ending_transaction`` (it must exist), or the last committed at or
    before ``ending_time`` (none: empty), or else the latest now. Raises DataSourceOptionError when
    neither start is given, both forms of one end are, or explicit numbers run backwards; StateStoreError
    when the log no longer holds the entries a time needs.
    """
    if (starting_transaction is None) == (starting_time is None):
        raise DataSourceOptionError(
            "a range needs exactly one of the options 'startingTransaction' and 'startingTimestamp'"
        )
    if ending_transaction is not None and ending_time is not None:
        raise DataSourceOptionError(
            "give at most one of the options 'endingTransaction' and 'endingTimestamp'"
        )
    times = LogTimes(store.log, store.table_id)
    latest = times.latest
    if ending_transaction is not None and ending_transaction > latest:
        raise DataSourceOptionError(
            f"option 'endingTransaction' is {ending_transaction}, but table {store.table_id!r}'s latest "
            f"transaction is {latest}"
        )
    if starting_time is not None and ending_time is not None and starting_time > ending_time:
        raise DataSourceOptionError(
            f"option 'startingTimestamp' ({format_time(starting_time)}) is after 'endingTimestamp' "
            f"({format_time(ending_time)})"
        )
    if starting_transaction is not None:
        start = starting_transaction
    else:
        assert starting_time is not None
        first = times.first_from(starting_time)
        start = latest + 1 if first is None else first
    if ending_transaction is not None:
        end = ending_transaction
        if starting_transaction is not None and starting_transaction > ending_transaction:
            raise DataSourceOptionError(
                f"option 'startingTransaction' ({starting_transaction}) is after 'endingTransaction' "
                f"({ending_transaction})"
            )
    elif ending_time is not None:
        end = times.latest_at_or_none(ending_time, "endingTimestamp")
    else:
        end = latest
    return start, end


def changes_between(store: TableStateStore, start: int, end: int, region: Region | None = None) -> Changes:
    """The rows added by transactions ``start..end`` (inclusive), restricted to ``region`` if given.

    Raises TransactionNotRetainedError when cleanup already deleted some of those entries, and
    UnsupportedByFileStoreError for a table whose files are not on its log.
    """
    store.require_file_log("an incremental read")
    if start < 1:
        raise ValueError(f"a range starts at transaction 1 or later, got {start}")
    if start > end:
        return Changes(start, end, (), ())
    transactions: list[RangeTransaction] = []
    added: list[tuple[FileReference, int, int]] = []
    for entry in entries_after(store.log, store.table_id, start - 1, end, "snapshot"):
        transaction = decode_entry(entry)
        references = added_references(transaction)
        added.extend((ref, entry.transaction_number, entry.update_time) for ref in references)
        transactions.append(
            RangeTransaction(
                entry.transaction_number,
                entry.update_time,
                _types(transaction),
                len({ref.filename for ref in references}),
                sum(ref.number_of_rows for ref in references),
            )
        )
    regions = _Regions(store, end)
    parts = []
    for ref, number, time in added:
        part_region = regions.to_read(ref, region)
        if part_region is not _NOTHING:
            parts.append(AddedPart(ref.filename, part_region, ref.number_of_rows, number, time))
    return Changes(start, end, tuple(parts), tuple(transactions))


def _types(transaction: Transaction) -> tuple[str, ...]:
    if isinstance(transaction, TransactionBatch):
        return tuple(item.transaction.TYPE for item in transaction.items)
    return (transaction.TYPE,)


_NOTHING: Any = object()


class _Regions:
    """The regions references are read within, from the partitions of the state (loaded on first need)."""

    def __init__(self, store: TableStateStore, end: int) -> None:
        self._store = store
        self._end = end
        self._states: list[TableState] = []

    def to_read(self, ref: FileReference, region: Region | None) -> Region | None:
        """The region to read ``ref`` within (None: every row of its file), or _NOTHING: none of its
        rows is in ``region``."""
        if ref.only_contains_data_for_this_partition and region is None:
            return None
        partition = self._partition(ref.partition_id)
        if partition is None:  # gone since (the table was cleared): its rows are the file's
            return region
        if region is None:
            return partition.region
        restricted = intersect(partition.region, region)
        if restricted is None:
            return _NOTHING
        if ref.only_contains_data_for_this_partition and region.covers(partition.region):
            return None
        return restricted

    def _partition(self, partition_id: str) -> Any:
        if not self._states:
            self._states.append(self._store.state())  # every partition ever made, unless cleared since
        found = self._states[0].partitions_by_id.get(partition_id)
        if found is None and len(self._states) == 1:
            self._states.append(self._store.load(self._end))
        if found is None:
            found = self._states[1].partitions_by_id.get(partition_id)
        return found


def check_files_present(data: DataStore, files: tuple[str, ...], what: str) -> None:
    """Raise :class:`DataFileMissingError` if any of ``files`` was garbage-collected already."""
    gone = [f for f in files if not data.exists(f)]
    if gone:
        raise DataFileMissingError(
            f"{len(gone)} file(s) {what} were already garbage-collected, e.g. {data.uri(gone[0])}: the "
            "consumer is further behind than the GC delay; restart it from a full read"
        )
