"""A table's first reads, made while the batch's statuses are read.

A batch for a table the committer does not keep warm waits for three reads before its commit can be
drafted: the requests' statuses, the table's record (schema, allowed senders, where its files are) and the
record of its latest snapshot; then the snapshot's objects and the log after it. The first three depend on
nothing but the batch's messages, so they are made at once (:func:`statestore.engine.overlap.both`): a cold
commit waits three round trips (these reads, the snapshot's objects with the log, the append), a warm one
two (the statuses, the append).

Each read's outcome is kept, its error included, and taken where the read would otherwise have been made:
a table that is gone is found so when its messages are decided, exactly as before. A read made for a table
whose messages all turn out to be decided already is not used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from statestore.engine import overlap
from statestore.engine.overlap import Outcome
from statestore.engine.snapshots import SnapshotStore
from statestore.store.ports import TableIndex
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo


@dataclass(frozen=True)
class FirstReads:
    """What was read of one table beside the statuses: its record, and its latest snapshot's record (None:
    not read, as the committer keeps the table's state)."""

    info: Outcome[TableInfo]
    snapshot: Outcome[SnapshotInfo | None] | None


def read_first(
    tables: TableIndex, snapshots: SnapshotStore | None, needed: Mapping[str, bool]
) -> dict[str, FirstReads]:
    """The record of each table in ``needed`` and, where it maps to True, its latest snapshot's record:
    the two reads of a table at once, the tables one after another (a batch has few). Never raises."""
    read: dict[str, FirstReads] = {}
    for table_id, wants_snapshot in needed.items():
        info_read: Callable[[], TableInfo] = partial(tables.get, table_id)
        if wants_snapshot and snapshots is not None:
            latest = partial(snapshots.latest_at_or_before, table_id, None)
            info, snapshot = overlap.both(info_read, latest)
            read[table_id] = FirstReads(info, snapshot)
        else:
            read[table_id] = FirstReads(overlap.outcome(info_read), None)
    return read
