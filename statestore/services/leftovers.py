"""What late writers left under a deleted table's prefix, deleted by cleanup.

A table's delete marks its record, then deletes its log, its view, its snapshots and every object under its
prefix, and last its record. A writer the store does not control may still put objects under the prefix
after the delete's pass over them: a Spark job still writing its data files, a sender putting a commit
request's body, a cleanup saving its sweep's progress just before it sees the delete. Nothing reads them (a
table id is never used again), and nothing else would delete them: they would be paid for for ever.

So the delete writes the table's *tombstone* (``deleted-tables/<id>.json``, outside every table's prefix)
just before its last step. Cleanup's plan lists the tombstones (one LIST call per 1,000) and queues a
cleanup of each one's table. The worker, finding the table's record gone, deletes the objects under its
prefix that are older than the GC delay (a newer one is left for a later period). Once the tombstone is
older than the longest a writer of the table can still write (a commit request's lifetime, plus the GC
delay) and nothing is left under the prefix, the tombstone is deleted too. An object put after that is not
collected.

Why a tombstone, and not "every prefix whose table has no record": a record can be missing for reasons
that are no delete (an index restored from a backup older than the table, a local runtime whose DynamoDB
data was lost, a client given another deployment's index). Deleting by absence would turn any of them into
the loss of those tables' snapshots and data. A tombstone is written only by a delete that has already
deleted everything else of its table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from statestore.model import layout
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.store.ports import BlobStore
from statestore.store.tables import TableInfo


@dataclass(frozen=True)
class Tombstone:
    """A deleted table's tombstone: its id, and when the store wrote it (epoch ms, the store's clock)."""

    table_id: str
    written_at: int


@dataclass(frozen=True)
class LeftoversReport:
    """What cleanup deleted under a deleted table's prefix: objects older than the GC delay, and its
    tombstone once that is old enough and nothing is left; ``objects_kept`` were newer than the delay."""

    table_id: str
    objects_deleted: int = 0
    objects_kept: int = 0
    tombstone_deleted: bool = False


def write_tombstone(blobs: BlobStore, table: TableInfo, now: int) -> None:
    """Say durably that ``table`` was deleted (its delete calls this once everything else of it is gone,
    before it deletes the record)."""
    body = {"table_id": table.table_id, "table_name": table.table_name, "deleted_at": now}
    blobs.put(layout.deleted_table_key(table.table_id), json.dumps(body).encode())


def tombstones(blobs: BlobStore) -> list[Tombstone]:
    """Every tombstone in the bucket, by table id."""
    return [
        Tombstone(table_id, written_at)
        for key, written_at in blobs.list_modified(layout.DELETED_TABLES_PREFIX)
        if (table_id := layout.deleted_table_id(key)) is not None
    ]


def deleted_tables(blobs: BlobStore, recorded: Iterable[TableInfo]) -> list[str]:
    """The ids of the tables whose tombstone is there and whose record is not among ``recorded`` (every
    record of the index, marked ones too: a table being deleted keeps its record, and its delete goes on)."""
    ids = {table.table_id for table in recorded}
    return [t.table_id for t in tombstones(blobs) if t.table_id not in ids]


def tombstone_of(blobs: BlobStore, table_id: str) -> Tombstone | None:
    key = layout.deleted_table_key(table_id)
    for listed, written_at in blobs.list_modified(key):
        if listed == key:
            return Tombstone(table_id, written_at)
    return None


def delete_leftovers(
    table_id: str, blobs: BlobStore, *, now: int, policy: CleanupPolicy | None = None
) -> LeftoversReport | None:
    """Delete what is left under the prefix of a table whose record is gone (the caller read it), if its
    tombstone says it was deleted; None if there is none (nothing of ours says so: nothing is deleted).
    Raises StateStoreError if the bucket cannot be read or written."""
    policy = policy or CleanupPolicy()
    tombstone = tombstone_of(blobs, table_id)
    if tombstone is None:
        return None
    listed = blobs.list_modified(layout.table_prefix(table_id))
    old = [key for key, written_at in listed if now - written_at >= policy.gc_delay_ms]
    blobs.delete(old)
    kept = len(listed) - len(old)
    done = kept == 0 and now - tombstone.written_at >= policy.max_request_age_ms + policy.gc_delay_ms
    if done:
        blobs.delete([layout.deleted_table_key(table_id)])
    return LeftoversReport(table_id, len(old), kept, done)
