"""Whatever ``validate`` accepts, every codec holds exactly (design invariant 6).

Transactions carry numbers drawn across the integer widths the codecs use (int32 keys and dimensions,
int64 keys, row counts and update times), just inside and just outside each limit, far beyond them, and
the values Python lets pass for integers (``True``, ``1.0``). Either ``validate`` rejects the transaction,
or its JSON body reads back as the very same body and, once applied, the state's Parquet snapshot reads
back as the very same state, value for value and type for type.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.codec.transaction_json import decode_transaction, encode_transaction
from statestore.errors import InvalidPartitionSplitError, TransactionValidationError
from statestore.model.files import FileReference
from statestore.model.partitions import Partition
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
    Transaction,
)
from tests.builders import INT_SCHEMA, LONG_SCHEMA, commit, new_state, tree

LIMITS = [2**31, 2**63]
EDGES = sorted({sign * limit + delta for limit in LIMITS for sign in (1, -1) for delta in (-1, 0, 1)})
ODD_NUMBERS: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([-1, *EDGES, 2**64, 2**70, -(2**70)]),
    st.integers(-(2**72), 2**72),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)


def mostly(ordinary: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``odd`` about one draw in four: with every number odd half the time, hardly any transaction would
    get past ``validate`` to reach the codecs."""
    return st.integers(0, 3).flatmap(lambda n: odd if n == 3 else ordinary)


NUMBERS = mostly(st.integers(0, 10**6), ODD_NUMBERS)
FLAGS = mostly(st.booleans(), st.sampled_from([0, 1]))
POINTS = mostly(st.integers(-(10**6), 10**6), ODD_NUMBERS)  # split points either side of 0
DIMENSION_CHANGE = mostly(st.none(), NUMBERS)  # None: the dimension the split gave


def base_state(schema: Schema) -> TableState:
    """root split at 0 into p1 (below) and p2; in.parquet in p1 owned by a job; whole.parquet in root."""
    state = new_state(schema, [0])
    commit(
        state, AddFiles((FileReference("in.parquet", "p1", 10), FileReference("whole.parquet", "root", 10)))
    )
    commit(state, AssignJobIds((AssignJobIdRequest("job", "p1", ("in.parquet",)),)))
    return state


@st.composite
def references(draw: st.DrawFn, filename: str, partition_id: str) -> FileReference:
    return FileReference(
        filename,
        partition_id,
        number_of_rows=draw(NUMBERS),
        count_approximate=draw(FLAGS),
        only_contains_data_for_this_partition=draw(FLAGS),
        last_update_time=draw(NUMBERS),
    )


def with_dimension(draw: st.DrawFn, partition: Partition) -> Partition:
    dimension = draw(DIMENSION_CHANGE)
    return partition if dimension is None else replace(partition, dimension=dimension)


@st.composite
def transactions(draw: st.DrawFn, state: TableState) -> Transaction | None:
    """One transaction carrying drawn numbers, or None if the draw made no sense (a point outside a leaf)."""
    kind = draw(
        st.sampled_from(["add", "split", "initialise", "replace", "split-references", "take-over", "release"])
    )
    if kind == "add":
        partition_ids = draw(st.lists(st.sampled_from(["root", "p1", "p2"]), min_size=1, max_size=3))
        return AddFiles(tuple(draw(references(f"new-{i}.parquet", p)) for i, p in enumerate(partition_ids)))
    if kind in ("split", "initialise"):
        leaf = (
            state.partition(draw(st.sampled_from(["p1", "p2"]))) if kind == "split" else tree(state.schema)[0]
        )
        try:
            parent, left, right = leaf.split(0, draw(POINTS), "L", "R")
        except InvalidPartitionSplitError:
            return None
        parent, left, right = (with_dimension(draw, p) for p in (parent, left, right))
        if kind == "split":
            return SplitPartition(parent, (left, right))
        return InitialisePartitions((parent, left, right))
    if kind == "take-over":
        return AssignJobIds((AssignJobIdRequest("resumed", "p1", ("in.parquet",)),), draw(NUMBERS))
    if kind == "release":
        return ReleaseClaims(("job",), draw(mostly(st.none(), NUMBERS)))
    if kind == "replace":
        output = draw(references("out.parquet", "p1"))
        return ReplaceFileReferences((ReplaceFileReferencesJob("job", "p1", ("in.parquet",), output),))
    halves = (draw(references("whole.parquet", "p1")), draw(references("whole.parquet", "p2")))
    return SplitFileReferences((SplitFileReferenceRequest("whole.parquet", "root", halves),))


def exact(state: TableState) -> tuple[Any, ...]:
    """The state with every value's type showing (``True == 1`` and ``1.0 == 1`` for ``==``)."""
    files = sorted((f.filename, repr(f.last_update_time)) for f in state.files())
    references = sorted(map(repr, state.file_references()))
    partitions = sorted(map(repr, state.partitions()))
    return state.transaction_number, files, references, partitions


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([INT_SCHEMA, LONG_SCHEMA]))
def test_whatever_validate_accepts_round_trips_exactly_through_json_and_the_parquet_snapshot(
    data: st.DataObject, schema: Schema
) -> None:
    transaction = data.draw(transactions(base_state(schema)))
    if transaction is None:
        return
    # InitialisePartitions needs a table with no files; everything else goes onto the base state.
    state = TableState(schema) if isinstance(transaction, InitialisePartitions) else base_state(schema)
    try:
        transaction.validate(state)
    except TransactionValidationError:
        event(f"{transaction.TYPE} rejected")
        return  # rejected before anything is logged: nothing for a codec to hold
    event(f"{transaction.TYPE} accepted")

    body, compressed = encode_transaction(transaction)
    decoded = decode_transaction(body, compressed)
    assert decoded == transaction
    assert encode_transaction(decoded) == (body, compressed)  # bytes show a true written for a 1

    commit(state, transaction, update_time=5_000)
    loaded = state_from_parquet(schema, *state_to_parquet(state), state.transaction_number)
    assert loaded == state
    assert exact(loaded) == exact(state)
