"""Orphan data files: objects under a table's data prefix that nothing of the table names.

A job writes its files, then sends the commit request naming them. When the request is rejected, or the
job dies first, the files are never committed: no state and no log entry names them, so the garbage
collection of unreferenced files (which works from the state) never sees them. They are found by listing
the data prefix and subtracting every filename the state holds and every filename a log entry since the
latest snapshot names (a file added then removed again since, whose object a cleanup is still deleting).

A file whose commit request still waits in the queue (or its dead-letter queue, to be redriven) is not named
anywhere yet either: only its age protects it. So a file is an orphan only once its object's last write is
older than any commit request can be in flight
(:meth:`statestore.services.cleanup_policy.CleanupPolicy.orphan_delay_ms`), measured from the store's
last-modified time, never from when the sweep first saw it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from statestore.codec.transaction_json import decode_entry, transaction_to_json
from statestore.engine.log_store import TableStateStore
from statestore.model import layout
from statestore.store.ports import BlobStore
from statestore.store.snapshot_ports import SnapshotMetadataStore


@dataclass(frozen=True)
class OrphanFile:
    filename: str
    last_modified: int  # epoch ms


def find_orphan_files(
    store: TableStateStore, snapshots: SnapshotMetadataStore, blobs: BlobStore, *, before: int
) -> list[OrphanFile]:
    """Objects under the table's data prefix named by neither its state nor a log entry since its latest
    snapshot, last modified before ``before`` (epoch ms), sorted by name. Lists the whole prefix: cleanup
    sweeps a window and a slice at a time instead (:mod:`statestore.engine.orphan_sweep`)."""
    # List first, then read the state: a file committed in between is then known, never an orphan.
    listed = blobs.list_modified(layout.data_prefix(store.table_id))
    known = known_data_files(store, snapshots)
    return [
        OrphanFile(key, modified)
        for key, modified in listed
        if key not in known and modified < before and not key.endswith("/")
    ]


class KnownDataFiles:
    """The data files a table names: its state's (looked up in the state, never copied out of it: a big
    table's names are not made into a set) and those the log since its latest snapshot names."""

    def __init__(self, files: Mapping[str, object], named_in_log: set[str]) -> None:
        self._files = files
        self._named_in_log = named_in_log

    def __contains__(self, filename: object) -> bool:
        return filename in self._named_in_log or filename in self._files


def known_data_files(store: TableStateStore, snapshots: SnapshotMetadataStore) -> KnownDataFiles:
    """Every data file the table's state names, and every one a log entry since its latest snapshot names
    (a file added and removed again since, whose object a cleanup may still be deleting). Read it after
    listing the objects it is compared with."""
    table_id = store.table_id
    state = store.state()
    latest = snapshots.latest(table_id)
    since = latest.transaction_number + 1 if latest is not None else 1
    named: set[str] = set()
    for entry in store.log.read(table_id, since, state.transaction_number):
        named.update(
            _data_files_named(
                transaction_to_json(decode_entry(entry, table_id)), layout.data_prefix(table_id)
            )
        )
    return KnownDataFiles(state.files_by_name, named)


def _data_files_named(value: Any, prefix: str) -> Iterator[str]:
    """Every string under ``prefix`` anywhere in a transaction's JSON (whatever its type)."""
    if isinstance(value, str):
        if value.startswith(prefix):
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _data_files_named(item, prefix)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _data_files_named(item, prefix)
