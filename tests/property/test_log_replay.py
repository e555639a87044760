"""Random valid histories: a snapshot at any point plus the rest of the log rebuilds the same state as a full
replay, and rejected transactions change nothing."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import TransactionValidationError
from statestore.model.partitions import Partition
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearTable,
    DeleteFiles,
    ExtendPartitionTree,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
    Transaction,
)
from tests.builders import STRING_SCHEMA, data_key, ref, tree

TABLE = "table-1"
Draw = Callable[..., object]

SPLIT_POINTS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=3)


class Names:
    """Fresh file, partition and job names for one history of table ``table_id``."""

    def __init__(self, table_id: str = TABLE) -> None:
        self._counter = itertools.count(1)
        self.table_id = table_id

    def __call__(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter)}"

    def file(self, prefix: str) -> str:
        """A fresh data file name: a key under the table's data prefix, as a store takes."""
        return data_key(self.table_id, self(prefix))


def sample(data: st.DataObject, items: list[str], min_size: int = 1) -> list[str]:
    return data.draw(
        st.lists(st.sampled_from(sorted(items)), min_size=min_size, max_size=len(items), unique=True)
    )


def add_files(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    leaves = [p.id for p in state.leaf_partitions()]
    refs = []
    for _ in range(data.draw(st.integers(1, 3))):
        filename = names.file("file")
        for partition_id in sample(data, leaves, 1)[:2]:
            refs.append(ref(filename, partition_id, data.draw(st.integers(0, 1000))))
    # Sometimes files written but referenced nowhere yet.
    unreferenced = tuple(names.file("unreferenced") for _ in range(data.draw(st.integers(0, 2))))
    return AddFiles(tuple(refs), unreferenced)


def split_leaf(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    leaf = state.partition(data.draw(st.sampled_from(sorted(p.id for p in state.leaf_partitions()))))
    current = leaf.region.ranges[0]
    point = data.draw(SPLIT_POINTS)
    if not (current.min < point and (current.max is None or point < current.max)):  # type: ignore[operator]
        return None
    parent, left, right = leaf.split(0, point, names("part"), names("part"))
    return SplitPartition(parent, (left, right))


def extend_tree(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    """A bulk import's tree: one or two leaves split, a child of the first split again."""
    leaves = sample(data, [p.id for p in state.leaf_partitions()])[:2]
    updated: list[Partition] = []
    new: list[Partition] = []
    for leaf_id in leaves:
        leaf = state.partition(leaf_id)
        point = data.draw(SPLIT_POINTS)
        current = leaf.region.ranges[0]
        if not (current.min < point and (current.max is None or point < current.max)):  # type: ignore[operator]
            return None
        parent, left, right = leaf.split(0, point, names("part"), names("part"))
        updated.append(parent)
        new.extend((left, right))
    deeper = new[0]
    point = data.draw(SPLIT_POINTS)
    current = deeper.region.ranges[0]
    if data.draw(st.booleans()) and current.min < point and (current.max is None or point < current.max):  # type: ignore[operator]
        new[0], low, high = deeper.split(0, point, names("part"), names("part"))
        new.extend((high, low))  # in either order
    return ExtendPartitionTree(tuple(updated), tuple(reversed(new)))


def clear_table(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    """Rarely: clear the table (the history initialises it again next)."""
    return ClearTable() if data.draw(st.integers(0, 5)) == 0 else None


def assign_jobs(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    free: dict[str, list[str]] = {}
    for r in state.references_with_no_job():
        free.setdefault(r.partition_id, []).append(r.filename)
    if not free:
        return None
    partition_id = data.draw(st.sampled_from(sorted(free)))
    return AssignJobIds(
        (AssignJobIdRequest(names("job"), partition_id, tuple(sample(data, free[partition_id]))),)
    )


def take_over_claims(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    """A resumed compaction: a new job takes over claims made before a time (and free references)."""
    by_partition: dict[str, list[str]] = {}
    for r in state.file_references():
        by_partition.setdefault(r.partition_id, []).append(r.filename)
    claim_times = sorted({r.last_update_time for r in state.file_references() if r.job_id is not None})
    if not claim_times:
        return None
    cutoff = data.draw(st.sampled_from(claim_times)) + data.draw(st.sampled_from([0, 1]))
    eligible: dict[str, list[str]] = {}
    for r in state.file_references():
        if r.job_id is None or r.last_update_time < cutoff:
            eligible.setdefault(r.partition_id, []).append(r.filename)
    if not eligible:
        return None
    partition_id = data.draw(st.sampled_from(sorted(eligible)))
    filenames = tuple(sample(data, eligible[partition_id]))
    return AssignJobIds((AssignJobIdRequest(names("job"), partition_id, filenames),), cutoff)


def release_claims(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    """A failed job's release, or the sweep's (claims before a time); sometimes of a job holding nothing."""
    jobs = sorted(state.claimed_references())
    if not jobs:
        return None
    chosen = sample(data, jobs)
    if data.draw(st.booleans()):
        chosen.append(names("gone-job"))
    times = sorted({r.last_update_time for r in state.file_references() if r.job_id is not None})
    before = data.draw(st.none() | st.sampled_from(times).map(lambda t: t + 1))
    return ReleaseClaims(tuple(chosen), claimed_before=before)


def replace_references(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    owned: dict[tuple[str, str], list[str]] = {}
    for r in state.file_references():
        if r.job_id is not None:
            owned.setdefault((r.job_id, r.partition_id), []).append(r.filename)
    if not owned:
        return None
    chosen = data.draw(st.lists(st.sampled_from(sorted(owned)), min_size=1, max_size=3, unique=True))
    jobs = [
        ReplaceFileReferencesJob(
            job_id, pid, tuple(sorted(owned[(job_id, pid)])), ref(names.file("out"), pid, 7)
        )
        for job_id, pid in chosen
    ]
    if data.draw(st.booleans()):  # a job nobody assigned: reported and skipped, the others applied
        jobs.append(
            ReplaceFileReferencesJob(
                "stranger", chosen[0][1], jobs[0].input_files, ref(names.file("out"), chosen[0][1], 1)
            )
        )
    return ReplaceFileReferences(tuple(jobs))


def split_references_down(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    movable = [
        r for r in state.file_references() if r.job_id is None and not state.partition(r.partition_id).leaf
    ]
    if not movable:
        return None
    r = data.draw(st.sampled_from(sorted(movable)))
    parent: Partition = state.partition(r.partition_id)
    table_file = state.file(r.filename)
    targets = [c for c in parent.child_ids if table_file.reference_in(c) is None]
    if not targets:
        return None
    new = tuple(ref(r.filename, c, r.number_of_rows // 2, whole_file=False) for c in targets)
    return SplitFileReferences((SplitFileReferenceRequest(r.filename, r.partition_id, new),))


def delete_unreferenced(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    unreferenced = [f.filename for f in state.unreferenced_files()]
    if not unreferenced:
        return None
    return DeleteFiles(tuple(sample(data, unreferenced)))


def invalid(data: st.DataObject, state: TableState, names: Names) -> Transaction | None:
    """A transaction that must be rejected on ``state``."""
    referenced = [f.filename for f in state.files() if f.references]
    choice = data.draw(st.integers(0, 4))
    if choice == 0 and state.files_by_name:
        existing = data.draw(st.sampled_from(sorted(state.files_by_name)))
        return AddFiles((ref(existing, state.leaf_partitions()[0].id),))
    if choice == 1 and referenced:
        return DeleteFiles((data.draw(st.sampled_from(sorted(referenced))),))
    if choice == 2:
        return AssignJobIds(
            (AssignJobIdRequest("j", state.leaf_partitions()[0].id, (names.file("missing"),)),)
        )
    claimed = [r for r in state.file_references() if r.job_id is not None]
    if choice == 3 and claimed:  # a take-over of a claim made at the limit, not before it
        r = data.draw(st.sampled_from(sorted(claimed)))
        return AssignJobIds(
            (AssignJobIdRequest(names("job"), r.partition_id, (r.filename,)),), r.last_update_time
        )
    return AddFiles((ref(names.file("file"), "no-such-partition"),))


Operation = Callable[[st.DataObject, TableState, Names], Transaction | None]
VALID_OPERATIONS: list[Operation] = [
    add_files,
    split_leaf,
    extend_tree,
    clear_table,
    assign_jobs,
    replace_references,
    split_references_down,
    delete_unreferenced,
    take_over_claims,
    release_claims,
]


def next_transaction(
    data: st.DataObject, state: TableState, names: Names, operations: list[Operation] = VALID_OPERATIONS
) -> Transaction | None:
    """The transaction of the first of ``operations``, tried in a random order, that ``state`` allows; None
    if it allows none."""
    for operation in data.draw(st.permutations(operations)):
        transaction = operation(data, state, names)
        if transaction is not None:
            return transaction
    return None


def run_history(data: st.DataObject, log: InMemoryTransactionLog) -> list[TableState]:
    """Commit a random history through a store on ``log``; return the state after each transaction number."""
    clock = itertools.count(1_000, 7)
    store = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, clock=lambda: next(clock))
    names = Names()
    initial = tree(STRING_SCHEMA, sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3))))
    store.commit(InitialisePartitions(tuple(initial)))
    states = [TableState(STRING_SCHEMA), store.state().copy()]
    for _ in range(data.draw(st.integers(1, 25))):
        state = store.state()
        if not state.partitions_by_id:  # cleared: initialise again before anything else
            points = sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3)))
            store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA, points))))
            states.append(store.state().copy())
            continue
        if data.draw(st.integers(0, 9)) == 0:
            transaction = invalid(data, state, names)
            assert transaction is not None
            before, latest = state.copy(), log.latest_number(TABLE)
            try:
                store.commit(transaction)
            except TransactionValidationError:
                pass
            else:
                raise AssertionError(f"an invalid {transaction.TYPE} was committed")
            assert store.state() == before and log.latest_number(TABLE) == latest
            continue
        transaction = next_transaction(data, state, names)
        if transaction is None:
            continue
        store.commit(transaction)
        states.append(store.state().copy())
    return states


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_snapshot_at_any_point_plus_the_rest_of_the_log_equals_a_full_replay(data: st.DataObject) -> None:
    log = InMemoryTransactionLog()
    states = run_history(data, log)
    replay = TransactionLogStateStore(TABLE, STRING_SCHEMA, log)

    assert replay.load() == states[-1]
    for number, expected in enumerate(states):
        assert replay.load(as_of=number) == expected

    snapshot_at = data.draw(st.integers(0, len(states) - 1))
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    if snapshot_at > 0:
        snapshots.write(TABLE, states[snapshot_at], created_time=1)
    from_snapshot = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, snapshots)
    assert from_snapshot.load() == states[-1]
    # Once the snapshot covers them, the entries before it may go, and loading still works.
    log.delete_up_to(TABLE, snapshot_at)
    assert TransactionLogStateStore(TABLE, STRING_SCHEMA, log, snapshots).load() == states[-1]
