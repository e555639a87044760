"""A table's first reads, made while the batch's statuses are read.

A batch for a table the committer does not keep warm needs, before its commit can be drafted: the
requests' statuses, the table's record (schema, allowed senders, where its files are), the record of its
latest snapshot, that snapshot's objects and the log after it. The objects' keys and the log's start come
from the snapshot's record, but the table also keeps a copy of its latest snapshot at fixed keys, and the
log's last entries can be read without knowing where they start. So all of it is read at once
(:func:`statestore.engine.overlap.each`): a cold commit waits two round trips (these reads, then the
append), as a warm one does (the statuses, the append). The copy is used only where its bytes are the
recorded snapshot's, and the log's tail only if it reaches back to that snapshot; otherwise the load reads
what is missing then, one round trip later (see ``statestore.engine.log_loading.FirstReads``).

A copy larger than :data:`COPY_READ_AT_MOST` an object is not read at once (a large table's state is
read only after the committer has made room for it, from the record's count). Each read's outcome is kept,
its error included, and taken where the read would otherwise have been made: a table that is gone is found
so when its messages are decided, exactly as before. A read made for a table whose messages all turn out
to be decided already is not used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from statestore.engine import overlap
from statestore.engine.log_loading import READ_AHEAD, FirstReads
from statestore.engine.overlap import Outcome
from statestore.engine.snapshots import SnapshotStore
from statestore.store.ports import LogTail, TableIndex, TransactionLogStore
from statestore.store.tables import TableInfo

# The most bytes of each latest-copy object read with the first reads: a table of ~100,000 references.
COPY_READ_AT_MOST = 4 << 20


@dataclass(frozen=True)
class TableReads:
    """What was read of one table beside the statuses: its record, and what its load starts from (None:
    not read, as the committer keeps the table's state)."""

    info: Outcome[TableInfo]
    load: FirstReads | None


def read_first(
    tables: TableIndex,
    log: TransactionLogStore,
    snapshots: SnapshotStore | None,
    needed: Mapping[str, bool],
    clock: Callable[[], int],
) -> dict[str, TableReads]:
    """The record of each table in ``needed`` and, where it maps to True, what its load starts from: a
    table's reads at once, the tables one after another (a batch has few). Never raises."""
    read: dict[str, TableReads] = {}
    for table_id, wants_load in needed.items():
        info_read: Callable[[], TableInfo] = partial(tables.get, table_id)
        if wants_load and snapshots is not None:

            def tail(table_id: str = table_id) -> tuple[int, LogTail]:
                return clock(), log.read_tail(table_id, READ_AHEAD)

            info, record, copy, log_tail = overlap.each(
                info_read,
                partial(snapshots.latest_at_or_before, table_id, None),
                partial(snapshots.latest_copy, table_id, COPY_READ_AT_MOST),
                tail,
            )
            read[table_id] = TableReads(info, FirstReads(record, copy, log_tail))
        else:
            read[table_id] = TableReads(overlap.outcome(info_read), None)
    return read
