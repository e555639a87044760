"""The warm budget a function's environment gives it, and the snapshot worker's bounded warm stores."""

from __future__ import annotations

import pytest

from lambdas._runtime import Runtime, warm_budget
from statestore.engine.log_store import TransactionLogStateStore
from statestore.services.committer.batch import DEFAULT_WARM_BUDGET
from statestore.services.upkeep import UpkeepKind, UpkeepWork, run_snapshot_work
from statestore.sizing import (
    MEASURED_BYTES_PER_REFERENCE,
    WARM_BYTES_PER_REFERENCE,
    WarmBudget,
    warm_state_bytes,
)
from statestore.sizing import warm_budget as budget_for_memory
from statestore.state.table_state import TableState
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, data_key, ref, tree

MIB = 1 << 20


def test_the_budget_is_the_variable_set_in_megabytes_of_state_kept_with_each_loads_room_outside_it() -> None:
    assert warm_budget({"STATESTORE_WARM_CACHE_MB": "512"}) == WarmBudget(512 * MIB, 1.0)
    assert warm_budget({"STATESTORE_WARM_CACHE_MB": "0.5"}) == WarmBudget(MIB // 2, 1.0)
    assert warm_budget({"STATESTORE_WARM_CACHE_MB": "0"}) == WarmBudget(0, 1.0)  # keep no table warm
    # The variable wins over the function's memory.
    assert warm_budget(
        {"STATESTORE_WARM_CACHE_MB": "64", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "4096"}
    ) == WarmBudget(64 * MIB, 1.0)


def test_without_it_the_budget_follows_the_functions_memory_and_else_the_default_committers() -> None:
    assert warm_budget({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048"}) == budget_for_memory(2048)
    assert warm_budget({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048"}).bytes > budget_for_memory(1024).bytes
    assert warm_budget({}) == budget_for_memory(1024)
    assert warm_budget({"STATESTORE_WARM_CACHE_MB": " "}) == budget_for_memory(1024)
    # Each load makes room for its peak within it.
    assert warm_budget({}).load_factor == MEASURED_BYTES_PER_REFERENCE / WARM_BYTES_PER_REFERENCE
    assert warm_budget({}) == DEFAULT_WARM_BUDGET


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "inf", "1e999", "512MB"])
def test_a_budget_that_is_not_a_number_of_megabytes_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(
        ValueError, match=rf"STATESTORE_WARM_CACHE_MB='{value}' must be a number of megabytes"
    ):
        warm_budget({"STATESTORE_WARM_CACHE_MB": value})


@pytest.mark.parametrize("value", ["big", "0", "-128", "1.5"])
def test_a_function_memory_that_is_not_a_size_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ValueError, match="AWS_LAMBDA_FUNCTION_MEMORY_SIZE"):
        warm_budget({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": value})


def test_the_committer_and_the_snapshot_stores_get_the_budget_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STATESTORE_WARM_CACHE_MB", "3")
    rt = Runtime.in_memory()
    assert rt.committer().warm_budget == WarmBudget(3 * MIB, 1.0)
    assert (rt.snapshot_stores.budget_bytes, rt.snapshot_stores.load_factor) == (3 * MIB, 1.0)
    monkeypatch.delenv("STATESTORE_WARM_CACHE_MB")
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048")
    rt = Runtime.in_memory()
    from_memory = budget_for_memory(2048)
    assert rt.committer().warm_budget == from_memory
    assert (rt.snapshot_stores.budget_bytes, rt.snapshot_stores.load_factor) == (
        from_memory.bytes,
        from_memory.load_factor,
    )


def tables_with_files(rt: Runtime, *files: int) -> list[str]:
    """A table per count in ``files``, each with that many files."""
    table_ids = []
    for i, count in enumerate(files):
        info = TableInfo.new(f"t{i}", INT_SCHEMA)
        rt.tables.create(info)
        store = TransactionLogStateStore(info.table_id, INT_SCHEMA, rt.log, rt.snapshots)
        store.commit(InitialisePartitions(tuple(tree(INT_SCHEMA))))
        store.commit(AddFiles(tuple(ref(data_key(info.table_id, f"f{n}")) for n in range(count))))
        table_ids.append(info.table_id)
    return table_ids


def snapshot_by_the_worker(rt: Runtime, table_id: str) -> None:
    """One snapshot work item run as the snapshot function runs it, its warm stores settled after."""
    work = UpkeepWork(UpkeepKind.SNAPSHOT, table_id, 0, 60_000)
    outcome = run_snapshot_work(
        work, rt.tables, rt.log, rt.snapshots, first_received_at=1, stores=rt.snapshot_stores
    )
    assert outcome.snapshot is not None, outcome
    rt.snapshot_stores.settle()


def test_the_snapshot_worker_keeps_its_tables_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    one_table = warm_state_bytes(3, len(tree(INT_SCHEMA)))
    monkeypatch.setenv("STATESTORE_WARM_CACHE_MB", str(1.5 * one_table / MIB))
    rt = Runtime.in_memory()
    table_ids = tables_with_files(rt, 3, 3, 3, 3)

    for table_id in table_ids:
        snapshot_by_the_worker(rt, table_id)

    assert list(rt.snapshot_stores) == table_ids[-1:]
    assert rt.snapshot_stores.counts.evictions == 3


def test_the_snapshot_worker_makes_room_as_a_table_outgrows_its_last_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker snapshots tables whose log moved since their last snapshot: the log, not the snapshot,
    says how large the state is. Room is made as the load applies it, not only once it is kept."""
    partitions = len(tree(INT_SCHEMA))
    small, imported = 100, 300
    monkeypatch.setenv("STATESTORE_WARM_CACHE_MB", str(1.5 * warm_state_bytes(imported, partitions) / MIB))
    rt = Runtime.in_memory()
    *others, big = tables_with_files(rt, small, small, small, 3)  # the last one is small when snapshotted
    cache = rt.snapshot_stores

    snapshot_by_the_worker(rt, big)
    del cache[big]  # as after the container's next start: its size is known from its snapshot alone
    writer = TransactionLogStateStore(big, INT_SCHEMA, rt.log, rt.snapshots)
    for n in range(imported // 30):  # an import since: ten entries of 30 files
        writer.commit(AddFiles(tuple(ref(data_key(big, f"import-{n}-{i}")) for i in range(30))))
    for table_id in others:
        snapshot_by_the_worker(rt, table_id)
    assert list(cache) == others
    kept_beside: list[int] = []  # the others' bytes kept, as each entry is applied to the table
    apply = AddFiles.apply

    def apply_and_watch(self: AddFiles, state: TableState, update_time: int) -> None:
        if state.data_prefix is not None and big in state.data_prefix:
            after = warm_state_bytes(state.reference_count() + len(self.references), partitions)
            kept_beside.append(cache.used_bytes)
            assert cache.used_bytes + after <= cache.budget_bytes, (cache.used_bytes, after)
        apply(self, state, update_time)

    monkeypatch.setattr(AddFiles, "apply", apply_and_watch)

    snapshot_by_the_worker(rt, big)

    assert len(kept_beside) >= imported // 30
    assert cache.counts.evictions >= 2
