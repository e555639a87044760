"""Random histories (splits, compactions, claims and take-overs, ClearFiles and ClearTable, re-initialisation,
group commits with rejected members): at every point every query through the queryable view equals the
full state's answer, whether the view is current, lags the log by some entries, or was just rebuilt; and
an upkeep leaves exactly the items a rebuild from the full state would write. In some histories a file of
more than one or two references is held in parts, and a partition lists only its nearest one or two
ancestors (as the view does for a file of thousands and a tree thousands deep).

``run_view_history`` takes the view's store, so the same property runs on DynamoDB Local
(``tests/aws/test_queryable_view.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.engine.log_store import GroupMember, TransactionLogStateStore
from statestore.engine.queryable_view import QueryableView
from statestore.errors import TransactionValidationError
from statestore.model.files import TableFile
from statestore.model.partitions import Range, Region
from statestore.model.schema import Key
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.ports import TransactionLogStore
from statestore.store.view_ports import QueryableViewStore
from statestore.transactions import (
    AddFiles,
    ClearFiles,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitPartition,
    Transaction,
)
from statestore.views import queryable_view, view_index
from statestore.views.queryable_view import ViewValue, items_of_state
from tests.builders import STRING_SCHEMA, TWO_KEY_SCHEMA, data_key, ref, tree
from tests.property.test_log_replay import SPLIT_POINTS, TABLE, Names, invalid, next_transaction


def normal(table_file: TableFile | None) -> object:
    return (
        None
        if table_file is None
        else (table_file.filename, sorted(table_file.references), table_file.last_update_time)
    )


def normal_items(items: dict[str, ViewValue]) -> dict[str, object]:
    return {k: normal(v) if isinstance(v, TableFile) else v for k, v in items.items()}


def regions(data: st.DataObject) -> list[Region]:
    """A few regions of the one string row key: points, ranges, the whole key space."""
    found = [Region((Range(""),))]
    for _ in range(data.draw(st.integers(0, 3))):
        low, high = sorted(data.draw(st.lists(SPLIT_POINTS, min_size=2, max_size=2, unique=True)))
        found.append(Region((Range(low, high if data.draw(st.booleans()) else None),)))
    return found


def check_queries(view: QueryableView, state: TableState, data: st.DataObject) -> None:
    """Every query through ``view`` answers as the full ``state`` (the log's latest) does."""
    number = state.transaction_number
    for partition_id in [*sorted(state.partitions_by_id), "no-such-partition"]:
        answer = view.references_in_partition(partition_id)
        assert answer.transaction_number == number
        assert answer.value == sorted(state.references_in_partition(partition_id)), partition_id
    for filename in [*sorted(state.files_by_name), "no-such-file"]:
        found = view.file(filename)
        assert found.transaction_number == number
        assert normal(found.value) == normal(state.files_by_name.get(filename)), filename
    for job_id in [*sorted(state.claimed_references()), "no-such-job"]:
        expected = sorted(state.claimed_references().get(job_id, []))
        assert view.claimed_references(job_id).value == expected, job_id
    for region in regions(data):
        expected_refs = {
            p.id: sorted(state.references_in_partition(p.id))
            for p in (state.partition_tree.overlapping(region) if state.partitions_by_id else [])
        }
        in_region = view.references_in_region(region)
        assert in_region.transaction_number == number
        assert in_region.value == expected_refs, region


def replace_onto_an_existing_file(data: st.DataObject, state: TableState) -> Transaction | None:
    """A compaction commit whose one valid job is applied and whose other job, writing over a file the
    table already has (any file: the replay must know the view holds it), is rejected."""
    claimed = [r for r in state.file_references() if r.job_id is not None]
    if not claimed or not state.files_by_name:
        return None
    chosen = data.draw(st.sampled_from(sorted(claimed)))
    clash = data.draw(st.sampled_from(sorted(state.files_by_name)))
    if clash == chosen.filename:
        return None
    inputs = tuple(
        sorted(
            r.filename for r in claimed if (r.job_id, r.partition_id) == (chosen.job_id, chosen.partition_id)
        )
    )
    assert chosen.job_id is not None
    return ReplaceFileReferences(
        (
            ReplaceFileReferencesJob(
                chosen.job_id, chosen.partition_id, inputs, ref(clash, chosen.partition_id, 3)
            ),
            ReplaceFileReferencesJob(
                chosen.job_id,
                chosen.partition_id,
                inputs,
                ref(data_key(TABLE, f"out-{state.transaction_number}"), chosen.partition_id, 3),
            ),
        )
    )


def run_view_history(
    data: st.DataObject,
    make_store: Callable[[], QueryableViewStore],
    make_log: Callable[[], TransactionLogStore] = InMemoryTransactionLog,
) -> None:
    """The history on ``make_log()``'s log. Each commit asks for the log's leaf index or not (drawn), so a
    log that keeps one (DynamoDB's) answers the view's reads through it, by the range, or both."""
    with items_cut_short(data):
        _run_view_history(data, make_store, make_log)


@contextmanager
def items_cut_short(data: st.DataObject) -> Iterator[None]:
    """In some histories, files of more than one or two references held in parts and lists of more than
    one or two ancestors cut (as the view does for thousands)."""
    references = data.draw(st.sampled_from([1, 2, queryable_view.REFERENCES_PER_FILE_ITEM]))
    ancestors = data.draw(st.sampled_from([1, 2, view_index.ANCESTORS_PER_ITEM]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(queryable_view, "REFERENCES_PER_FILE_ITEM", references)
        patch.setattr(view_index, "ANCESTORS_PER_ITEM", ancestors)
        yield


def _run_view_history(
    data: st.DataObject,
    make_store: Callable[[], QueryableViewStore],
    make_log: Callable[[], TransactionLogStore],
) -> None:
    clock = itertools.count(1_000, 7)
    log = make_log()
    store = TransactionLogStateStore(TABLE, STRING_SCHEMA, log, clock=lambda: next(clock))
    items = make_store()
    view = QueryableView(TABLE, STRING_SCHEMA, log, items, sleep=lambda _: None)
    names = Names()
    states = [TableState(STRING_SCHEMA)]

    def load() -> TableState:
        return store.load()

    def step() -> None:
        store.index_leaves = data.draw(st.sampled_from([True, True, False]))
        state = store.state()
        if not state.partitions_by_id:  # cleared: initialise again before anything else
            points = sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3)))
            store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA, points))))
        elif data.draw(st.integers(0, 12)) == 0:
            store.commit(ClearFiles())
        elif data.draw(st.integers(0, 8)) == 0 and (replace := replace_onto_an_existing_file(data, state)):
            store.commit(replace)
        elif data.draw(st.integers(0, 4)) == 0:
            # A group commit drawn from one state: later members may clash with earlier ones, and an
            # invalid one sometimes joins (rejected, the others committed).
            members = []
            for _ in range(data.draw(st.integers(1, 3))):
                transaction = invalid(data, state, names) if data.draw(st.integers(0, 5)) == 0 else None
                transaction = transaction or next_transaction(data, state, names)
                if transaction is not None:
                    members.append(GroupMember(names("request"), transaction))
            store.commit_group(members)
        else:
            transaction = next_transaction(data, state, names)
            if transaction is None:
                return
            try:
                store.commit(transaction)
            except TransactionValidationError:
                return

    store.commit(
        InitialisePartitions(tuple(tree(STRING_SCHEMA, sorted(data.draw(st.sets(SPLIT_POINTS, max_size=3))))))
    )
    for _ in range(data.draw(st.integers(1, 20))):
        step()
        latest = log.latest_number(TABLE)
        while len(states) <= latest:
            states.append(store.load(len(states)))
        action = data.draw(st.sampled_from(["lag", "lag", "update", "update_part", "rebuild"]))
        if action == "update":
            view.update(load)
        elif action == "update_part":
            meta = items.meta(TABLE)
            start = 0 if meta is None else meta.transaction_number
            if start < latest:
                view.update(load, data.draw(st.integers(start + 1, latest)))
        elif action == "rebuild":
            view.rebuild(store.load())
        meta = items.meta(TABLE)
        if meta is not None:  # an upkeep leaves the items a rebuild at its number would write
            assert meta.writing_to is None
            at = states[meta.transaction_number]
            assert normal_items(items.with_prefix(TABLE, "")) == normal_items(items_of_state(at))
        check_queries(view, states[latest], data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_query_through_the_view_equals_the_full_state_at_every_point(data: st.DataObject) -> None:
    run_view_history(data, InMemoryQueryableViewStore)


# --- trees split on both row key fields ----------------------------------------------------------

TWO_KEY_POINTS: tuple[st.SearchStrategy[Key], ...] = (SPLIT_POINTS, st.integers(-50, 50))


def two_key_regions(data: st.DataObject) -> list[Region]:
    """Regions of the two row key fields: ranges of each or both, points, the whole key space."""
    found = [Region((Range(""), Range(-(2**63))))]
    for _ in range(data.draw(st.integers(1, 4))):
        low_a, high_a = sorted(data.draw(st.lists(SPLIT_POINTS, min_size=2, max_size=2, unique=True)))
        low_b, high_b = sorted(data.draw(st.lists(st.integers(-60, 60), min_size=2, max_size=2, unique=True)))
        first = Range(low_a, high_a if data.draw(st.booleans()) else None)
        second = Range(low_b, high_b) if data.draw(st.booleans()) else Range(-(2**63))
        found.append(Region((first if data.draw(st.booleans()) else Range(""), second)))
    return found


def run_two_key_history(data: st.DataObject, make_store: Callable[[], QueryableViewStore]) -> None:
    with items_cut_short(data):
        _run_two_key_history(data, make_store)


def _run_two_key_history(data: st.DataObject, make_store: Callable[[], QueryableViewStore]) -> None:
    clock = itertools.count(1_000, 7)
    log = InMemoryTransactionLog()
    store = TransactionLogStateStore(TABLE, TWO_KEY_SCHEMA, log, clock=lambda: next(clock))
    items = make_store()
    view = QueryableView(TABLE, TWO_KEY_SCHEMA, log, items, sleep=lambda _: None)
    names = Names()
    store.commit(InitialisePartitions(tuple(tree(TWO_KEY_SCHEMA))))
    for step in range(data.draw(st.integers(1, 25))):
        state = store.state()
        if data.draw(st.integers(0, 2)) == 0:  # a file referenced in a partition, a leaf or not
            partition_id = data.draw(st.sampled_from(sorted(state.partitions_by_id)))
            store.commit(AddFiles((ref(data_key(TABLE, f"f{step}"), partition_id),)))
        else:  # a leaf split on either field
            leaf = state.partition(data.draw(st.sampled_from(sorted(p.id for p in state.leaf_partitions()))))
            dimension = data.draw(st.integers(0, 1))
            point = data.draw(TWO_KEY_POINTS[dimension])
            current = leaf.region.ranges[dimension]
            if current.min < point and (current.max is None or point < current.max):  # type: ignore[operator]
                parent, left, right = leaf.split(dimension, point, names("part"), names("part"))
                store.commit(SplitPartition(parent, (left, right)))
        action = data.draw(st.sampled_from(["lag", "update", "rebuild"]))
        if action == "update":
            view.update(store.load)
        elif action == "rebuild":
            view.rebuild(store.load())
        meta = items.meta(TABLE)
        if meta is not None and meta.transaction_number == log.latest_number(TABLE):
            assert normal_items(items.with_prefix(TABLE, "")) == normal_items(items_of_state(store.load()))
        state = store.state()
        for region in two_key_regions(data):
            expected = {
                p.id: sorted(state.references_in_partition(p.id))
                for p in state.partition_tree.overlapping(region)
            }
            assert view.references_in_region(region).value == expected, region


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_region_query_of_a_tree_split_on_both_fields_equals_the_full_state(data: st.DataObject) -> None:
    """The index keys leaves by their cell on the first field: leaves below a split on the second field
    share it, and a region's query must still find every one it overlaps, and only those."""
    run_two_key_history(data, InMemoryQueryableViewStore)
