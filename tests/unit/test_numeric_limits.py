"""Every number a transaction carries is one every codec can hold, or ``validate`` rejects it.

JSON holds any integer but reads back only what it wrote with the right JSON type (no ``true`` for a row
count, no ``1.0`` for a dimension); Parquet snapshots hold ``int`` keys and dimensions as int32 and ``long``
keys, row counts and update times as int64. A value that slipped through would be logged, and from then on
every snapshot of the table (or every load of its log) would fail.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.codec.transaction_json import decode_transaction, encode_transaction, transaction_to_json
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    CodecError,
    InvalidPartitionSplitError,
    InvalidPartitionTreeError,
    InvalidTransactionError,
    TransactionValidationError,
)
from statestore.model.files import FileReference
from statestore.model.partitions import Partition, root_partition
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionBatch,
)
from tests.builders import (
    INT_SCHEMA,
    LONG_SCHEMA,
    STRING_SCHEMA,
    TWO_KEY_SCHEMA,
    commit,
    data_key,
    new_state,
    ref,
    tree,
)

TABLE = "table-1"
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def store_with_snapshots(schema: Schema = STRING_SCHEMA) -> TransactionLogStateStore:
    store = TransactionLogStateStore(
        TABLE,
        schema,
        InMemoryTransactionLog(),
        SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore()),
        clock=iter(range(1_000, 10**9, 10)).__next__,
    )
    store.commit(InitialisePartitions(tuple(tree(schema))))
    return store


def assert_stored_exactly(state: TableState) -> None:
    """The Parquet snapshot of ``state`` reads back equal, with every value of the same Python type."""
    back = state_from_parquet(state.schema, *state_to_parquet(state), state.transaction_number)
    assert back == state
    assert sorted(map(repr, back.file_references())) == sorted(map(repr, state.file_references()))
    assert {p.id: repr(p) for p in back.partitions()} == {p.id: repr(p) for p in state.partitions()}


# --- the reported defect ------------------------------------------------------------------------------


def test_a_row_count_beyond_int64_is_rejected_nothing_is_logged_and_the_table_still_snapshots() -> None:
    store = store_with_snapshots()
    store.commit(AddFiles((ref(data_key(TABLE, "ok.parquet"), "root", 5),)))
    huge = data_key(TABLE, "huge.parquet")

    with pytest.raises(InvalidTransactionError) as caught:
        store.commit(AddFiles((ref(huge, "root", 2**70),)))

    message = str(caught.value)
    assert f"'{huge}'" in message and "number_of_rows" in message and str(INT64_MAX) in message
    assert store.log.latest_number(TABLE) == 2
    assert huge not in store.state().files_by_name
    snapshot = store.create_snapshot()
    assert snapshot is not None and snapshot.transaction_number == 2


def test_the_largest_int64_row_count_is_accepted_and_snapshotted_exactly() -> None:
    store = store_with_snapshots()

    store.commit(AddFiles((ref(data_key(TABLE, "big.parquet"), "root", INT64_MAX),)))

    assert store.create_snapshot() is not None
    assert_stored_exactly(store.state())
    assert store.load() == store.state()


# --- file reference fields ----------------------------------------------------------------------------

BAD_REFERENCE_FIELDS = [
    pytest.param(
        {"number_of_rows": 2**63}, "number_of_rows value 9223372036854775808 is out of range", id="rows-2**63"
    ),
    pytest.param({"number_of_rows": 2**70}, f"allowed 0 to {INT64_MAX} \\(int64\\)", id="rows-2**70"),
    pytest.param({"number_of_rows": True}, "number_of_rows needs an integer, got bool True", id="rows-bool"),
    pytest.param({"number_of_rows": 1.5}, "number_of_rows needs an integer, got float 1.5", id="rows-float"),
    pytest.param(
        {"number_of_rows": 10.0}, "number_of_rows needs an integer, got float 10.0", id="rows-whole-float"
    ),
    pytest.param({"number_of_rows": "5"}, "number_of_rows needs an integer, got str '5'", id="rows-str"),
    pytest.param(
        {"last_update_time": 2**63},
        "last_update_time value 9223372036854775808 is out of range",
        id="time-2**63",
    ),
    pytest.param({"last_update_time": -(2**63) - 1}, "last_update_time value", id="time-below-int64"),
    pytest.param({"last_update_time": 1.0}, "last_update_time needs an integer", id="time-float"),
    pytest.param({"last_update_time": False}, "last_update_time needs an integer, got bool", id="time-bool"),
    pytest.param(
        {"count_approximate": 1}, "count_approximate must be True or False, got 1", id="approximate-int"
    ),
    pytest.param(
        {"only_contains_data_for_this_partition": 0},
        "only_contains_data_for_this_partition must be True or False",
        id="whole-file-int",
    ),
]


def _with(reference: FileReference, fields: dict[str, Any]) -> FileReference:
    return reference._replace(**fields)


@pytest.mark.parametrize(("fields", "message"), BAD_REFERENCE_FIELDS)
def test_add_files_rejects_a_reference_field_no_codec_can_hold(fields: dict[str, Any], message: str) -> None:
    state = new_state(STRING_SCHEMA, ["m"])

    with pytest.raises(InvalidTransactionError, match=message) as caught:
        AddFiles((ref("good.parquet", "p1"), _with(ref("bad.parquet", "p2"), fields))).validate(state)

    assert "file 'bad.parquet' in partition 'p2'" in str(caught.value)


@pytest.mark.parametrize(("fields", "message"), BAD_REFERENCE_FIELDS)
def test_a_compaction_output_with_a_field_no_codec_can_hold_rejects_its_job(
    fields: dict[str, Any], message: str
) -> None:
    state = new_state(STRING_SCHEMA, ["m"], [ref("in.parquet", "p1")])
    commit(state, AssignJobIds((AssignJobIdRequest("job", "p1", ("in.parquet",)),)))
    job = ReplaceFileReferencesJob("job", "p1", ("in.parquet",), _with(ref("out.parquet", "p1"), fields))

    with pytest.raises(TransactionValidationError, match=message):
        ReplaceFileReferences((job,)).validate(state)


@pytest.mark.parametrize(("fields", "message"), BAD_REFERENCE_FIELDS)
def test_a_split_reference_with_a_field_no_codec_can_hold_is_rejected(
    fields: dict[str, Any], message: str
) -> None:
    state = new_state(STRING_SCHEMA, ["m"], [ref("f.parquet", "root")])
    request = SplitFileReferenceRequest(
        "f.parquet", "root", (ref("f.parquet", "p1", 50), _with(ref("f.parquet", "p2", 50), fields))
    )

    with pytest.raises(InvalidTransactionError, match=message):
        SplitFileReferences((request,)).validate(state)


# --- partition keys and fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "point", "message"),
    [
        pytest.param(
            LONG_SCHEMA, 2**63, f"allowed -9223372036854775808 to {INT64_MAX} \\(int64\\)", id="long-2**63"
        ),
        pytest.param(LONG_SCHEMA, 2**70, "out of range", id="long-2**70"),
        pytest.param(LONG_SCHEMA, True, "needs an integer, got bool True", id="long-bool"),
        pytest.param(LONG_SCHEMA, 5.0, "needs an integer, got float 5.0", id="long-float"),
        pytest.param(INT_SCHEMA, 2**31, f"allowed -2147483648 to {INT32_MAX} \\(int32\\)", id="int-2**31"),
        pytest.param(INT_SCHEMA, 2**40, "out of range", id="int-2**40"),
    ],
)
def test_a_split_point_beyond_its_key_type_is_rejected(schema: Schema, point: Any, message: str) -> None:
    state = new_state(schema)
    parent, left, right = state.partition("root").split(0, point, "L", "R")

    with pytest.raises(InvalidPartitionSplitError, match=message) as caught:
        SplitPartition(parent, (left, right)).validate(state)
    assert "partition 'L'" in str(caught.value) and "field 'key'" in str(caught.value)
    with pytest.raises(InvalidPartitionTreeError, match=message):
        InitialisePartitions((parent, left, right)).validate(TableState(schema))


@pytest.mark.parametrize(("schema", "point"), [(LONG_SCHEMA, INT64_MAX), (INT_SCHEMA, INT32_MAX)])
def test_a_split_point_at_the_largest_value_of_its_key_type_is_snapshotted_exactly(
    schema: Schema, point: int
) -> None:
    state = new_state(schema)
    parent, left, right = state.partition("root").split(0, point, "L", "R")

    commit(state, SplitPartition(parent, (left, right)))

    assert_stored_exactly(state)


@pytest.mark.parametrize(
    ("which", "fields", "message"),
    [
        ("left", {"dimension": 2**40}, "partition 'L': dimension value 1099511627776 is out of range"),
        ("left", {"dimension": True}, "partition 'L': dimension needs an integer, got bool"),
        ("left", {"dimension": -1.0}, "dimension needs an integer, got float"),
        ("left", {"dimension": 0}, "must be a leaf \\(dimension -1\\)"),
        ("parent", {"dimension": True}, "partition 'root': dimension needs an integer"),
        ("parent", {"leaf": 0}, "partition 'root': leaf must be True or False, got 0"),
        ("left", {"leaf": 1}, "partition 'L': leaf must be True or False"),
        ("left", {"id": 5}, "a partition id must be a non-empty string, got 5"),
        ("parent", {"child_ids": (5, "R")}, "partition 'root': child_ids must be a tuple of strings"),
    ],
)
def test_a_split_with_a_partition_field_no_codec_can_hold_is_rejected(
    which: str, fields: dict[str, Any], message: str
) -> None:
    # Two row keys, so that ``True`` is a valid index (1) and only its type is wrong.
    state = new_state(TWO_KEY_SCHEMA)
    split = dict(
        zip(("parent", "left", "right"), state.partition("root").split(0, "m", "L", "R"), strict=True)
    )
    split[which] = replace(split[which], **fields)

    with pytest.raises(InvalidPartitionSplitError, match=message):
        SplitPartition(split["parent"], (split["left"], split["right"])).validate(state)


def test_a_split_whose_parent_carries_a_bound_equal_to_but_not_of_its_key_type_is_rejected() -> None:
    state = new_state(LONG_SCHEMA, [100])
    parent, left, right = state.partition("p2").split(0, 200, "L", "R")
    # 100.0 == 100, so the parent still "keeps its region"; JSON would write 100.0, which no key reads back.
    float_bound: Any = 100.0
    float_region = replace(parent.region, ranges=(replace(parent.region.ranges[0], min=float_bound),))

    with pytest.raises(
        InvalidPartitionSplitError, match="partition 'p2' has an invalid bound.*got float 100.0"
    ):
        SplitPartition(replace(parent, region=float_region), (left, right)).validate(state)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dimension": -1.0}, "dimension needs an integer, got float -1.0"),
        ({"leaf": 1}, "leaf must be True or False, got 1"),
        ({"id": 7}, "a partition id must be a non-empty string, got 7"),
    ],
)
def test_initialise_partitions_rejects_a_partition_field_no_codec_can_hold(
    fields: dict[str, Any], message: str
) -> None:
    root = replace(root_partition(LONG_SCHEMA), **fields)

    with pytest.raises(InvalidPartitionTreeError, match=message):
        InitialisePartitions((root,)).validate(TableState(LONG_SCHEMA))


# --- ids that JSON would write but not read back ------------------------------------------------------


def test_a_job_id_or_request_id_that_is_not_a_string_is_rejected() -> None:
    state = new_state(STRING_SCHEMA, [], [ref("f.parquet")])

    with pytest.raises(InvalidTransactionError, match="job id must be a non-empty string, got 5"):
        AssignJobIds((AssignJobIdRequest(5, "root", ("f.parquet",)),)).validate(state)  # type: ignore[arg-type]
    batch = TransactionBatch((BatchItem(7, AddFiles((ref("g.parquet"),))),))  # type: ignore[arg-type]
    with pytest.raises(InvalidTransactionError, match="request id must be a non-empty string, got 7"):
        batch.validate(state)


# --- the JSON decoder ---------------------------------------------------------------------------------


def _add_files_body(**column: Any) -> bytes:
    data = transaction_to_json(AddFiles((ref("f.parquet"),)))
    data["references"].update(column)
    return json.dumps(data, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (
            {"number_of_rows": [True]},
            "AddFiles.references.number_of_rows\\[0\\]: expected an integer, got a boolean true",
        ),
        ({"number_of_rows": [10.0]}, "number_of_rows\\[0\\]: expected an integer, got float 10.0"),
        ({"last_update_time": [1e3]}, "last_update_time\\[0\\]: expected an integer, got float 1000.0"),
        ({"count_approximate": [0]}, "count_approximate\\[0\\]: expected true or false, got int 0"),
    ],
)
def test_the_json_decoder_rejects_a_bool_or_float_where_an_integer_belongs(
    column: dict[str, Any], message: str
) -> None:
    with pytest.raises(CodecError, match=message):
        decode_transaction(_add_files_body(**column), compressed=False)


def test_a_huge_row_count_decodes_and_then_validate_names_the_limit() -> None:
    # The decoder reads any integer JSON holds, so a log written before this check still loads; the range
    # is validate's to enforce, on commit requests and on direct commits alike.
    transaction = decode_transaction(_add_files_body(number_of_rows=[2**70]), compressed=False)

    with pytest.raises(InvalidTransactionError, match=f"number_of_rows .* allowed 0 to {INT64_MAX}"):
        transaction.validate(new_state(STRING_SCHEMA))


def test_an_integer_too_long_for_python_to_read_is_a_codec_error() -> None:
    body = _add_files_body().replace(b'"number_of_rows":[100]', b'"number_of_rows":[' + b"9" * 5000 + b"]")
    assert b"9" * 5000 in body

    with pytest.raises(CodecError, match="not valid JSON"):
        decode_transaction(body, compressed=False)


def test_what_validate_accepts_at_the_limits_round_trips_through_json_exactly() -> None:
    state = new_state(LONG_SCHEMA)
    transactions: list[Transaction] = [
        AddFiles((ref("f.parquet", "root", INT64_MAX)._replace(last_update_time=-(2**63)),)),
        SplitPartition(*_pair(state.partition("root").split(0, INT64_MAX, "L", "R"))),
    ]
    for transaction in transactions:
        transaction.validate(state)
        body, compressed = encode_transaction(transaction)
        back = decode_transaction(body, compressed)
        assert back == transaction and encode_transaction(back) == (body, compressed)


def _pair(split: tuple[Partition, Partition, Partition]) -> tuple[Partition, tuple[Partition, Partition]]:
    parent, left, right = split
    return parent, (left, right)
