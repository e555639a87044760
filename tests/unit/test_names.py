"""One rule for what a name may be, checked by ``validate`` before any store is touched: what S3 can use as
a key and every store can hold, and, for a new data file, a key under its table's own data prefix."""

from __future__ import annotations

import pytest

from statestore.errors import InvalidTransactionError, TransactionValidationError
from statestore.model import layout
from statestore.model.files import FileReference
from statestore.model.names import MAX_NAME_BYTES, key_problem, name_problem
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
)
from tests.builders import STRING_SCHEMA, new_state, ref

TABLE = "t-1"
PREFIX = layout.data_prefix(TABLE)


def table_state() -> TableState:
    """A state of table ``TABLE`` (it knows its data prefix, as every state a store loads does)."""
    state = new_state(STRING_SCHEMA)
    state.data_prefix = PREFIX
    return state


UNUSABLE = {
    "NUL": "a\x00b.parquet",
    "lone surrogate": "caf\udce9.parquet",
    "too long": "x" * (MAX_NAME_BYTES + 1),
    "too long in UTF-8": "é" * (MAX_NAME_BYTES // 2 + 1),  # fewer characters than bytes
}


@pytest.mark.parametrize("name", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_a_name_no_store_can_hold_is_named_as_such(name: str) -> None:
    assert name_problem(name) is not None
    assert name_problem(name[:1] + "ok.parquet") is None


def test_the_longest_name_a_key_can_be_is_accepted() -> None:
    assert name_problem("x" * MAX_NAME_BYTES) is None
    assert name_problem("é" * (MAX_NAME_BYTES // 2)) is None


@pytest.mark.parametrize("bulk", [False, True], ids=["one by one", "bulk, column by column"])
@pytest.mark.parametrize("name", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_add_files_refuses_a_name_no_store_can_hold(name: str, bulk: bool) -> None:
    good = [ref(f"{PREFIX}f{i}.parquet") for i in range(1_500 if bulk else 2)]
    transaction = AddFiles((*good, ref(PREFIX + name)))

    with pytest.raises(InvalidTransactionError, match="has filename"):
        transaction.validate(table_state())


OUTSIDE = {
    "another table's data": "tables/t-2/data/root/a.parquet",
    "the store's own objects": f"tables/{TABLE}/snapshots/000000000001-x/files.parquet",
    "spark artifacts": "spark/artifacts/statestore-spark.zip",
    "a bare name": "a.parquet",
    "a parent segment": f"{PREFIX}../../t-2/data/a.parquet",
    "a dot segment": f"{PREFIX}./a.parquet",
    "an empty segment": f"{PREFIX}root//a.parquet",
    "the prefix itself": PREFIX,
}


@pytest.mark.parametrize("filename", OUTSIDE.values(), ids=OUTSIDE.keys())
def test_a_new_data_file_must_be_a_key_under_its_tables_data_prefix(filename: str) -> None:
    assert key_problem(filename, PREFIX) is not None
    state = table_state()
    state_with_file = table_state()
    AddFiles((ref(f"{PREFIX}in.parquet"),)).apply(state_with_file, 1)
    AssignJobIds((AssignJobIdRequest("job", "root", (f"{PREFIX}in.parquet",)),)).apply(state_with_file, 1)
    refusing = [
        (state, AddFiles((ref(filename),))),
        (state, AddFiles((), (filename,))),
        (
            state_with_file,
            ReplaceFileReferences(
                (ReplaceFileReferencesJob("job", "root", (f"{PREFIX}in.parquet",), ref(filename)),)
            ),
        ),
    ]
    for target, transaction in refusing:  # (a compaction names the job whose output it refuses)
        with pytest.raises(TransactionValidationError, match=f"has filename {filename!r}, which "):
            transaction.validate(target)


def test_a_split_reference_is_checked_as_a_new_reference_under_the_prefix() -> None:
    state = table_state()
    parent, left, right = state.partition("root").split(0, "m", "left", "right")
    SplitPartition(parent, (left, right)).apply(state, 1)
    AddFiles((ref(f"{PREFIX}whole.parquet"),)).apply(state, 1)
    split = SplitFileReferences(
        (
            SplitFileReferenceRequest(
                f"{PREFIX}whole.parquet",
                "root",
                (ref(f"{PREFIX}whole.parquet", "left"), ref(f"{PREFIX}whole.parquet", "right")),
            ),
        )
    )
    split.validate(state)  # the same file, named as it is: fine


def test_a_state_that_knows_no_table_checks_only_what_every_store_can_hold() -> None:
    state = new_state(STRING_SCHEMA)  # built by hand: no data prefix to hold names to

    AddFiles((ref("a.parquet"),)).validate(state)
    with pytest.raises(InvalidTransactionError):
        AddFiles((ref("a\x00.parquet"),)).validate(state)


def test_existing_names_outside_the_prefix_keep_loading_and_can_be_removed() -> None:
    state = new_state(STRING_SCHEMA, references=[FileReference("legacy/old.parquet", "root", 1)])
    state.data_prefix = PREFIX  # loaded as a table's state today

    AssignJobIds((AssignJobIdRequest("job", "root", ("legacy/old.parquet",)),)).validate(state)
    assert "legacy/old.parquet" in state.files_by_name


@pytest.mark.parametrize("job_id", ["a\x00b", "\udce9", "j" * (MAX_NAME_BYTES + 1)])
def test_a_job_id_no_store_can_hold_is_refused(job_id: str) -> None:
    state = table_state()
    AddFiles((ref(f"{PREFIX}a.parquet"),)).apply(state, 1)

    with pytest.raises(InvalidTransactionError, match="job id"):
        AssignJobIds((AssignJobIdRequest(job_id, "root", (f"{PREFIX}a.parquet",)),)).validate(state)
    with pytest.raises(InvalidTransactionError, match="job id"):
        ReleaseClaims((job_id,)).validate(state)


@pytest.mark.parametrize("partition_id", ["p\x00", "\udce9", "p" * (MAX_NAME_BYTES + 1)])
def test_a_partition_id_no_store_can_hold_is_refused(partition_id: str) -> None:
    state = table_state()
    parent, left, right = state.partition("root").split(0, "m", partition_id, "right")

    with pytest.raises(TransactionValidationError, match="partition id .* (NUL|surrogate|bytes of UTF-8)"):
        SplitPartition(parent, (left, right)).validate(state)
