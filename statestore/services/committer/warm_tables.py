"""What the committer keeps of each table between batches, in the terms its warm cache counts: a table's
estimated bytes, its demotion to its guard, and the room its first load makes (from its snapshot's record).
"""

from __future__ import annotations

from statestore import sizing
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.overlap import Outcome
from statestore.services.committer.group import WarmTable
from statestore.store.snapshot_ports import SnapshotInfo


def warm_table_bytes(table: WarmTable) -> int:
    """A warm table's estimated bytes: its loaded state's, else its guard's (0 before it is loaded)."""
    state = table.store.loaded_state
    if state is None:
        return 0 if table.guard is None else table.guard.estimated_bytes
    return sizing.warm_state_bytes(state.reference_count(), len(state.partitions_by_id))


def demote(table: WarmTable) -> bool:
    """Evicting ``table``: drop its state, keeping its guard (what takes new files without the state) if it
    is loaded from a log; False when nothing is left to keep (then it is evicted whole)."""
    store = table.store
    if not isinstance(store, TransactionLogStateStore) or store.loaded_state is None:
        return False
    unloaded = store.unload()
    assert unloaded is not None
    state, read_to_end_at = unloaded
    table.guard = state.file_guard(read_to_end_at)
    return table.guard is not None


def first_read_snapshot(read: Outcome[SnapshotInfo | None]) -> SnapshotInfo | None:
    """The latest snapshot's record a table's first reads found (None: no snapshot, or the read failed,
    which the load will meet)."""
    return None if read.error is not None else read.value


def snapshot_bytes(snapshot: SnapshotInfo | None) -> int | None:
    """The estimated bytes of the state a snapshot's record counts (None: no snapshot, or not counted)."""
    if snapshot is None or snapshot.references is None or snapshot.partitions is None:
        return None
    return sizing.warm_state_bytes(snapshot.references, snapshot.partitions)
