"""Snapshots: a written state reads back equal; failed or deleted snapshots leave no objects behind."""

from __future__ import annotations

import pytest

from statestore.engine import snapshots
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    SnapshotNotFoundError,
    StaleSnapshotError,
    StateStoreError,
    StoreUnavailableError,
)
from statestore.model import layout
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.transactions import (
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import STRING_SCHEMA, commit, new_state, ref

TABLE = "table-1"


def busy_state() -> TableState:
    """Several partitions, a file spanning two, one owned by a job, one awaiting garbage collection."""
    state = new_state(
        STRING_SCHEMA,
        ["g", "p"],
        [ref("a", "p3", 10), ref("b", "p3", 5, whole_file=False), ref("b", "p4", 6, approximate=True)],
        update_time=1_000,
    )
    commit(state, AssignJobIds((AssignJobIdRequest("j", "p3", ("a",)),)), 2_000)
    commit(
        state,
        ReplaceFileReferences((ReplaceFileReferencesJob("j", "p3", ("a",), ref("c", "p3", 10)),)),
        3_000,
    )
    commit(state, AssignJobIds((AssignJobIdRequest("k", "p4", ("b",)),)), 4_000)
    return state


def test_a_snapshot_reads_back_equal_to_the_state_it_was_written_from() -> None:
    store = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    state = busy_state()

    info = store.write(TABLE, state, created_time=9_000)

    assert (info.table_id, info.transaction_number, info.created_time) == (
        TABLE,
        state.transaction_number,
        9_000,
    )
    assert store.metadata.latest(TABLE) == info
    assert store.read(info, STRING_SCHEMA) == state
    assert store.read(info, STRING_SCHEMA).file("a").references == ()


def test_latest_at_or_before_picks_the_newest_snapshot_not_after_the_number() -> None:
    store = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    state = new_state()
    infos = {}
    for number in (2, 5, 9):
        state.transaction_number = number
        infos[number] = store.write(TABLE, state, created_time=number)

    assert store.latest_at_or_before(TABLE, None) == infos[9]
    assert store.latest_at_or_before(TABLE, 1) is None
    assert store.latest_at_or_before(TABLE, 2) == infos[2]
    assert store.latest_at_or_before(TABLE, 8) == infos[5]
    assert store.latest_at_or_before("other-table", None) is None


def test_a_snapshot_that_would_not_be_the_latest_is_rejected_and_leaves_no_objects() -> None:
    blobs = InMemoryBlobStore()
    store = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    state = busy_state()
    newer = store.write(TABLE, state, created_time=1)
    objects = blobs.list(layout.snapshot_prefix(TABLE))

    for number in (state.transaction_number, state.transaction_number - 1):
        older = state.copy()
        older.transaction_number = number
        with pytest.raises(StaleSnapshotError):
            store.write(TABLE, older, created_time=2)

    assert blobs.list(layout.snapshot_prefix(TABLE)) == objects
    assert store.metadata.latest(TABLE) == newer


def test_deleting_an_old_snapshot_removes_its_objects_but_the_latest_cannot_be_deleted() -> None:
    blobs = InMemoryBlobStore()
    store = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    state = new_state()
    old = store.write(TABLE, state, created_time=1)
    state.transaction_number += 1
    latest = store.write(TABLE, state, created_time=2)

    store.delete(old)

    copies = layout.latest_snapshot_keys(TABLE)  # the latest copy: the latest snapshot's bytes again
    assert blobs.list(layout.snapshot_prefix(TABLE)) == sorted(
        [latest.partitions_key, latest.files_key, *copies]
    )
    assert store.metadata.list(TABLE) == [latest]
    with pytest.raises(StateStoreError, match="latest"):
        store.delete(latest)
    assert store.read(latest, STRING_SCHEMA) == state


def test_reading_a_snapshot_whose_objects_are_gone_raises_snapshot_not_found() -> None:
    blobs = InMemoryBlobStore()
    store = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    info = store.write(TABLE, new_state(), created_time=1)
    blobs.delete([info.files_key])

    with pytest.raises(
        SnapshotNotFoundError, match=f"snapshot 1 of table {TABLE!r}.*object {info.files_key!r} is gone"
    ):
        store.read(info, STRING_SCHEMA)


def test_deleting_a_table_removes_only_that_tables_snapshots() -> None:
    blobs = InMemoryBlobStore()
    store = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    store.write(TABLE, new_state(), created_time=1)
    other = store.write("table-2", new_state(), created_time=1)

    store.delete_table(TABLE)

    assert store.metadata.latest(TABLE) is None
    assert blobs.list(layout.snapshot_prefix(TABLE)) == []
    assert store.read(other, STRING_SCHEMA) == new_state()


class LostRecordResponse(InMemorySnapshotMetadataStore):
    """The next record lands, then its caller sees ``failure`` (a lost response, or a retry's refusal)."""

    def __init__(self, failure: StateStoreError) -> None:
        super().__init__()
        self.failure: StateStoreError | None = failure

    def record(self, snapshot: SnapshotInfo) -> None:
        super().record(snapshot)
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure


@pytest.mark.parametrize(
    "failure",
    [StoreUnavailableError("connection reset"), StaleSnapshotError("retry found the pointer already moved")],
    ids=["connection-lost", "retry-refused"],
)
def test_a_snapshot_whose_record_response_was_lost_keeps_its_objects_and_loads(
    failure: StateStoreError,
) -> None:
    metadata, blobs = LostRecordResponse(failure), InMemoryBlobStore()
    store = SnapshotStore(metadata, blobs)
    state = busy_state()

    info = store.write(TABLE, state, 5_000)

    assert metadata.latest(TABLE) == info
    assert store.read(info, STRING_SCHEMA) == state


def test_a_snapshot_that_truly_lost_the_race_leaves_no_objects() -> None:
    metadata, blobs = InMemorySnapshotMetadataStore(), InMemoryBlobStore()
    store = SnapshotStore(metadata, blobs)
    newer = busy_state()
    newer.transaction_number = 9
    info = store.write(TABLE, newer, 5_000)
    older = busy_state()
    older.transaction_number = 3

    with pytest.raises(StaleSnapshotError):
        store.write(TABLE, older, 6_000)

    copies = layout.latest_snapshot_keys(TABLE)
    assert [blobs.get(key) for key in copies] == [blobs.get(info.partitions_key), blobs.get(info.files_key)]
    # the newer snapshot's two objects and their latest copy only
    assert len(blobs.list(layout.snapshot_prefix(TABLE))) == 4


def test_each_object_is_checksummed_once_on_write_and_on_read_in_part_from_the_latest_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CRC-32 costs a pass over the object (~30 MB for a million references): written, each object is
    summed for its record and once more as read back; read with one object from the latest copy, each is
    summed once (the copied one as it is judged to be this snapshot's), not the copied one again."""
    blobs = InMemoryBlobStore()
    store = SnapshotStore(InMemorySnapshotMetadataStore(), blobs)
    summed: list[bytes] = []
    real = snapshots.checksum

    def counted(data: bytes) -> str:
        summed.append(data)
        return real(data)

    monkeypatch.setattr(snapshots, "checksum", counted)
    state = busy_state()

    info = store.write(TABLE, state, created_time=9_000)

    written = [blobs.get(info.partitions_key), blobs.get(info.files_key)]
    assert sorted(summed) == sorted(written * 2)
    summed.clear()
    partitions_copy, _ = store.latest_copy(TABLE, 1 << 20)
    assert partitions_copy == written[0]

    assert store.read(info, STRING_SCHEMA, (partitions_copy, None)) == state
    assert sorted(summed) == sorted(written)
