"""Scheduled snapshots of tables: each table whose log moved is loaded (kept warm between calls where the
caller keeps its stores) and written as a snapshot, one table at a time; a failing table is reported and
the others go on. The snapshot worker (:func:`statestore.services.upkeep.run_snapshot_work`) runs
:func:`snapshot_table` on the one table of its message; :func:`snapshot_tables` runs it on every table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from functools import partial

from statestore.engine.jobs_reader import save_job_model_beside_snapshot
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StaleSnapshotError, StateStoreError, TableNotFoundError
from statestore.model.clock import now_millis
from statestore.services.view_upkeep import ViewOutcome
from statestore.services.warm_cache import WarmCache
from statestore.store.ports import TableIndex, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo, deleted_meanwhile

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotOutcome:
    table_id: str
    snapshot: SnapshotInfo | None = None  # the snapshot written, if any
    skipped: str | None = None  # why none was written
    error: str | None = None
    view: ViewOutcome | None = None  # the upkeep of the table's queryable view, when it keeps one


def snapshot_tables(
    tables: TableIndex,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    *,
    min_transactions: int = 1,
    clock: Callable[[], int] = now_millis,
    stores: MutableMapping[str, TransactionLogStateStore] | None = None,
) -> list[SnapshotOutcome]:
    """Snapshot every table whose log moved at least ``min_transactions`` since its latest snapshot, one
    after another (see :func:`snapshot_table`). A failing table is reported and the others go on."""
    stores = {} if stores is None else stores
    snap = partial(snapshot_table, log=log, snapshots=snapshots, min_transactions=min_transactions)
    outcomes = []
    for table in tables.list():
        if not table.deleting:
            check = partial(tables.check_live, table.table_id)
            outcomes.append(snap(table, clock=clock, stores=stores, table_check=check))
    return outcomes


def transactions_since_snapshot(table_id: str, log: TransactionLogStore, snapshots: SnapshotStore) -> int:
    """How far the table's log moved since its latest snapshot: one read of the log head and one of the
    latest snapshot record, without loading the table."""
    latest = snapshots.metadata.latest(table_id)
    return log.latest_number(table_id) - (latest.transaction_number if latest else 0)


def snapshot_table(
    table: TableInfo,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    *,
    min_transactions: int = 1,
    clock: Callable[[], int] = now_millis,
    stores: MutableMapping[str, TransactionLogStateStore] | None = None,
    table_check: Callable[[], object] | None = None,
) -> SnapshotOutcome:
    """Snapshot ``table`` if its log moved at least ``min_transactions`` since its latest snapshot.

    A table that has not moved is skipped without loading it (:func:`transactions_since_snapshot`).
    A table whose files are rows is snapshotted from its log alone: its partitions (the file store keeps
    the files and needs no snapshot), and it moves only when its partitions do.
    ``stores`` keeps tables' states warm between calls (a Lambda container's). A failure of the store is
    reported in the outcome, not raised.

    ``table_check`` (``TableIndex.check_live``) runs after the load and after the writes. A table whose
    delete began before the load is skipped; one whose delete began before the writes were done has its
    snapshots deleted again (the delete's own pass may have run before they were written), and is skipped.
    """
    stores = {} if stores is None else stores
    table_id = table.table_id
    try:
        return _snapshot_table(table, log, snapshots, min_transactions, clock, stores, table_check)
    except TableNotFoundError as e:  # the check after the load (nothing written), or the log gone
        stores.pop(table_id, None)
        if deleted_meanwhile(table_check) is None:
            logger.exception("could not snapshot table %r", table_id)
            return SnapshotOutcome(table_id, error=str(e))
        return SnapshotOutcome(table_id, skipped=str(e))


def _snapshot_table(
    table: TableInfo,
    log: TransactionLogStore,
    snapshots: SnapshotStore,
    min_transactions: int,
    clock: Callable[[], int],
    stores: MutableMapping[str, TransactionLogStateStore],
    table_check: Callable[[], object] | None,
) -> SnapshotOutcome:
    table_id = table.table_id
    try:
        since = transactions_since_snapshot(table_id, log, snapshots)
        if since < min_transactions:
            return SnapshotOutcome(table_id, skipped=f"{since} transaction(s) since the last snapshot")
        store = stores.get(table_id)
        if store is None or store.schema != table.schema:
            store = stores[table_id] = TransactionLogStateStore(
                table_id, table.schema, log, snapshots, clock=clock
            )
            if isinstance(stores, WarmCache):  # the log since the snapshot may hold far more than it
                store.growth_watch = stores.growth_watch(table_id)
        store.table_check = table_check
        state = store.state()
        try:
            written = snapshots.write(table_id, state, clock())
        except StaleSnapshotError as e:
            return SnapshotOutcome(table_id, skipped=f"another snapshot won the race: {e}")
        if not table.files_in_rows:  # a postgres table's log holds no file transaction: no job history
            save_job_model_beside_snapshot(table_id, table.schema, log, snapshots, written.transaction_number)
        deleted = deleted_meanwhile(table_check)
        if deleted is not None:
            stores.pop(table_id, None)
            snapshots.delete_table(table_id)
            return SnapshotOutcome(table_id, skipped=f"{deleted}; the snapshot written meanwhile is deleted")
        return SnapshotOutcome(table_id, snapshot=written)
    except TableNotFoundError:
        raise
    except StateStoreError as e:
        logger.exception("could not snapshot table %r", table_id)
        stores.pop(table_id, None)
        return SnapshotOutcome(table_id, error=str(e))
