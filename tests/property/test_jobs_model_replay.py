"""Random histories (group commits included): the job-status model kept up to date incrementally, or loaded
from a saved model and folded on, equals the model folded from the whole log, at every point."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.engine.jobs_reader import JobStatusReader
from statestore.engine.log_store import GroupMember, TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import TransactionValidationError
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.transactions import InitialisePartitions
from statestore.views.jobs_model import JobsModel, JobState
from tests.builders import STRING_SCHEMA, tree
from tests.property.test_log_replay import SPLIT_POINTS, TABLE, Names, invalid, next_transaction


def run_history(
    data: st.DataObject, log: InMemoryTransactionLog, snapshots: SnapshotStore
) -> list[JobsModel]:
    """Commit a random history, some of it as group commits of several requests; return the model an
    incremental reader held after each transaction number (index = number)."""
    clock = itertools.count(1_000, 7)
    store = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, snapshots, clock=lambda: next(clock))
    reader = JobStatusReader(TABLE, STRING_SCHEMA, log, snapshots)
    names = Names()
    store.commit(
        InitialisePartitions(tuple(tree(STRING_SCHEMA, sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3))))))
    )
    models = [JobsModel(), reader.model().copy()]
    for _ in range(data.draw(st.integers(1, 25))):
        state = store.state()
        if not state.partitions_by_id:  # cleared: initialise again before anything else
            points = sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3)))
            store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA, points))))
        elif data.draw(st.integers(0, 4)) == 0:
            # A group commit: each member drawn from the state now; later ones may be rejected by the
            # members before them, and an invalid one sometimes joins (rejected, the others committed).
            members = []
            for _ in range(data.draw(st.integers(1, 3))):
                transaction = invalid(data, state, names) if data.draw(st.integers(0, 5)) == 0 else None
                transaction = transaction or next_transaction(data, state, names)
                if transaction is not None:
                    members.append(GroupMember(names("request"), transaction))
            result = store.commit_group(members)
            if result.transaction_number is None:
                continue
        else:
            transaction = next_transaction(data, state, names)
            if transaction is None:
                continue
            try:
                store.commit(transaction)
            except TransactionValidationError:
                continue
        before = reader.entries_folded
        models.append(reader.model().copy())
        assert reader.entries_folded == before + 1, "an incremental reader read more than the new entry"
    assert reader.model().transaction_number == log.latest_number(TABLE)
    return models


def full_replay(log: InMemoryTransactionLog, to_number: int) -> JobsModel:
    return JobStatusReader(
        TABLE, STRING_SCHEMA, log, SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    ).model(to_number)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_incremental_job_model_equals_a_full_replay_at_every_point(data: st.DataObject) -> None:
    log = InMemoryTransactionLog()
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    models = run_history(data, log, snapshots)

    for number, incremental in enumerate(models):
        assert incremental == full_replay(log, number), f"the models differ at transaction {number}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_saved_job_model_plus_the_rest_of_the_log_equals_a_full_replay(data: st.DataObject) -> None:
    log = InMemoryTransactionLog()
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    models = run_history(data, log, snapshots)
    latest = len(models) - 1
    saved_at = data.draw(st.integers(1, latest))

    # Saved at a state snapshot's number, as the snapshot writers do.
    store = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, snapshots)
    snapshots.write(TABLE, store.load(saved_at), created_time=1)
    assert JobStatusReader(TABLE, STRING_SCHEMA, log, snapshots).save(saved_at) == saved_at

    resumed = JobStatusReader(TABLE, STRING_SCHEMA, log, snapshots)
    for number in range(saved_at, latest + 1):
        assert resumed.model(number) == models[number], f"the models differ at transaction {number}"
    assert resumed.entries_folded == latest - saved_at, "loading replayed entries the saved model covers"

    # Once cleanup deleted the entries the saved model covers, it still loads and continues.
    log.delete_up_to(TABLE, saved_at)
    assert JobStatusReader(TABLE, STRING_SCHEMA, log, snapshots).model() == models[latest]


def test_the_histories_reach_every_job_state() -> None:
    """The generators are worth their name: across many histories every outcome of a job shows up."""
    seen: set[JobState] = set()

    # Derandomized, and 200 histories: whether they reach every state must not depend on the run (a random
    # run missed TAKEN_OVER once; 80 derandomized histories missed it once more when run after the unit
    # tests in one process, for a reason not found: not the string hash seed, tried with six).
    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
        derandomize=True,
    )
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        log = InMemoryTransactionLog()
        models = run_history(data, log, SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore()))
        seen.update(run.state for runs in models[-1].runs.values() for run in runs)

    collect()
    assert seen >= set(JobState) - {JobState.CLEARED}
