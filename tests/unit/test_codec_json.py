"""The transaction JSON codec: golden files pin the wire format; round trips, compression and every error."""

from __future__ import annotations

import json
import random
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestore.codec.transaction_json import (
    COMPRESS_ABOVE_BYTES,
    decode_entry,
    decode_transaction,
    encode_transaction,
    transaction_from_json,
    transaction_to_json,
)
from statestore.errors import CodecError, UnreadableLogEntryError
from statestore.model.files import FileReference
from statestore.model.partitions import Partition, Range, Region, root_partition
from statestore.model.schema import Schema
from statestore.store.ports import LogEntry
from statestore.transactions import (
    TRANSACTION_TYPES,
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearFiles,
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
    TransactionBatch,
)

GOLDEN = Path(__file__).parent.parent / "golden"

TABLE = "tables/5f0c1d9e-8a4b-4c2e-9d7f-3b6a1e2c4d5f/data"
P_ROOT = "root"
P_LEFT = "8d3c6b1a-2f4e-4a7b-9c1d-0e5f6a7b8c9d"
P_RIGHT = "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e"
FILE_A = f"{TABLE}/partition={P_LEFT}/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d.parquet"
FILE_B = f"{TABLE}/partition={P_RIGHT}/f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9.parquet"
FILE_C = f"{TABLE}/partition={P_ROOT}/3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f.parquet"
FILE_D = f"{TABLE}/partition={P_LEFT}/9f8e7d6c-5b4a-4392-8180-7f6e5d4c3b2a.parquet"

# A bytes row key and a long row key: the partitions carry keys of both kinds, and an unbounded max.
BYTES_LONG = Schema.of({"row": "bytes", "ts": "long"})
_root = root_partition(BYTES_LONG)
_root_split, _left, _right = _root.split(0, b"\x80m", P_LEFT, P_RIGHT)
_left_split, _left_low, _left_high = _left.split(
    1, 1_767_225_600_000, "c4d5e6f7-a8b9-4c0d-9e1f-2a3b4c5d6e7f", "d5e6f7a8-b9c0-4d1e-8f2a-3b4c5d6e7f80"
)

# A bulk import's tree below the right leaf: split on the time, then the lower half again on the row.
_right_split, _right_early, _right_late = _right.split(
    1, 1_767_225_600_000, "e6f7a8b9-c0d1-4e2f-9a3b-4c5d6e7f8091", "f7a8b9c0-d1e2-4f3a-8b4c-5d6e7f809102"
)
_early_split, _early_low, _early_high = _right_early.split(
    0, b"\xc0", "a8b9c0d1-e2f3-4a4b-9c5d-6e7f80910213", "b9c0d1e2-f3a4-4b5c-8d6e-7f8091021324"
)

ADD = AddFiles(
    (
        FileReference(FILE_A, P_LEFT, 1_204_557),
        FileReference(
            FILE_C, P_LEFT, 40_000, count_approximate=True, only_contains_data_for_this_partition=False
        ),
        FileReference(
            FILE_C, P_RIGHT, 38_211, count_approximate=True, only_contains_data_for_this_partition=False
        ),
    )
)
ASSIGN = AssignJobIds(
    (
        AssignJobIdRequest("compaction-7c1e", P_LEFT, (FILE_A, FILE_D)),
        AssignJobIdRequest("compaction-9a02", P_RIGHT, (FILE_B,)),
    )
)

# The AssignJobIds golden file has the optional take-over time; the batch's holds one without it.
CLAIM_TIME = 1_767_225_600_000

FIXED: dict[str, Transaction] = {
    "InitialisePartitions": InitialisePartitions((_root_split, _left, _right)),
    "SplitPartition": SplitPartition(_left_split, (_left_low, _left_high)),
    "ExtendPartitionTree": ExtendPartitionTree(
        (_right_split,), (_early_split, _right_late, _early_low, _early_high)
    ),
    "AddFiles": ADD,
    "AssignJobIds": AssignJobIds(ASSIGN.requests, take_over_claimed_before=CLAIM_TIME),
    "ReleaseClaims": ReleaseClaims(("compaction-7c1e", "compaction-9a02"), claimed_before=CLAIM_TIME),
    "ReplaceFileReferences": ReplaceFileReferences(
        (
            ReplaceFileReferencesJob(
                "compaction-7c1e",
                P_LEFT,
                (FILE_A, FILE_D),
                FileReference(f"{TABLE}/partition={P_LEFT}/compacted-7c1e.parquet", P_LEFT, 2_409_114),
            ),
        )
    ),
    "SplitFileReferences": SplitFileReferences(
        (
            SplitFileReferenceRequest(
                FILE_C,
                P_ROOT,
                (
                    FileReference(FILE_C, P_LEFT, 51_000, True, False),
                    FileReference(FILE_C, P_RIGHT, 49_000, True, False),
                ),
            ),
        )
    ),
    "DeleteFiles": DeleteFiles((FILE_A, FILE_D)),
    "ClearFiles": ClearFiles(),
    "ClearTable": ClearTable(),
    "Batch": TransactionBatch(
        (
            BatchItem("req-2f6d0c1e-ingest-17", ADD),
            BatchItem("req-8b3a9e44-compaction-3", ASSIGN),
        )
    ),
}


def plain_json(body: bytes, compressed: bool) -> Any:
    return json.loads(zlib.decompress(body) if compressed else body)


# --- golden files ---------------------------------------------------------------------------------


def test_there_is_a_fixed_transaction_and_a_golden_file_for_every_type() -> None:
    assert set(FIXED) == set(TRANSACTION_TYPES)
    assert {p.stem for p in GOLDEN.glob("*.json")} == set(TRANSACTION_TYPES)


@pytest.mark.parametrize("type_name", sorted(TRANSACTION_TYPES))
def test_encoding_gives_the_golden_file(type_name: str) -> None:
    golden = json.loads((GOLDEN / f"{type_name}.json").read_text())
    assert plain_json(*encode_transaction(FIXED[type_name])) == golden
    assert transaction_to_json(FIXED[type_name]) == golden


@pytest.mark.parametrize("type_name", sorted(TRANSACTION_TYPES))
def test_decoding_the_golden_file_gives_the_transaction(type_name: str) -> None:
    text = (GOLDEN / f"{type_name}.json").read_bytes()
    assert decode_transaction(text, compressed=False) == FIXED[type_name]
    assert transaction_from_json(json.loads(text)) == FIXED[type_name]


def test_an_unset_optional_time_is_left_out_and_a_body_without_it_reads_as_unset() -> None:
    # The batch golden file holds an AssignJobIds written without the take-over time: as bodies were
    # before the field existed.
    assign = transaction_to_json(FIXED["Batch"])["items"][1]["transaction"]
    assert "take_over_claimed_before" not in assign
    assert transaction_from_json({"version": 1, **assign}) == ASSIGN
    assert ASSIGN.take_over_claimed_before is None
    release = ReleaseClaims(("job",))
    assert transaction_to_json(release) == {"version": 1, "type": "ReleaseClaims", "job_ids": ["job"]}
    assert transaction_from_json(transaction_to_json(release)) == release


def test_files_added_with_no_references_are_written_only_when_there_are_some() -> None:
    # The AddFiles golden file has none: bodies written before the field existed read the same.
    assert "unreferenced_files" not in transaction_to_json(ADD)
    with_unreferenced = AddFiles(ADD.references, (FILE_D,))
    data = transaction_to_json(with_unreferenced)
    assert data["unreferenced_files"] == [FILE_D]
    assert transaction_from_json(data) == with_unreferenced
    only_unreferenced = AddFiles((), (FILE_D,))
    assert transaction_from_json(transaction_to_json(only_unreferenced)) == only_unreferenced


def test_bytes_keys_are_written_as_base64_objects() -> None:
    data = transaction_to_json(FIXED["InitialisePartitions"])
    left = data["partitions"][1]
    assert left["region"][0] == {"min": {"b64": ""}, "max": {"b64": "gG0="}}
    assert left["region"][1] == {"min": -(2**63), "max": None}


# --- round trips ----------------------------------------------------------------------------------

names = st.text(min_size=1, max_size=30)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
references = st.builds(
    FileReference,
    filename=names,
    partition_id=names,
    number_of_rows=st.integers(min_value=0, max_value=2**63 - 1),
    count_approximate=st.booleans(),
    only_contains_data_for_this_partition=st.booleans(),
    job_id=st.none() | names,
    last_update_time=st.integers(min_value=0, max_value=2**53),
)


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    kind: st.SearchStrategy[Any] = draw(st.sampled_from([ints, st.text(max_size=10), st.binary(max_size=10)]))
    low = draw(kind)
    high = draw(st.none() | kind.filter(lambda v: bool(v > low)))
    return Range(low, high)


partitions = st.builds(
    Partition,
    id=names,
    region=st.builds(Region, st.lists(ranges(), min_size=1, max_size=3).map(tuple)),
    parent_id=st.none() | names,
    child_ids=st.lists(names, max_size=2).map(tuple),
    leaf=st.booleans(),
    dimension=st.integers(min_value=-1, max_value=3),
)


def tuples_of(
    strategy: st.SearchStrategy[Any], min_size: int = 0, max_size: int = 5
) -> st.SearchStrategy[Any]:
    return st.lists(strategy, min_size=min_size, max_size=max_size).map(tuple)


simple_transactions: st.SearchStrategy[Transaction] = st.one_of(
    st.builds(InitialisePartitions, tuples_of(partitions)),
    st.builds(SplitPartition, partitions, tuples_of(partitions, max_size=2)),
    st.builds(AddFiles, tuples_of(references, max_size=20), tuples_of(names)),
    st.builds(ExtendPartitionTree, tuples_of(partitions, max_size=2), tuples_of(partitions)),
    st.builds(
        AssignJobIds,
        tuples_of(st.builds(AssignJobIdRequest, names, names, tuples_of(names))),
        st.none() | ints,
    ),
    st.builds(ReleaseClaims, tuples_of(names), st.none() | ints),
    st.builds(
        ReplaceFileReferences,
        tuples_of(st.builds(ReplaceFileReferencesJob, names, names, tuples_of(names), references)),
    ),
    st.builds(
        SplitFileReferences,
        tuples_of(st.builds(SplitFileReferenceRequest, names, names, tuples_of(references))),
    ),
    st.builds(DeleteFiles, tuples_of(names)),
    st.just(ClearFiles()),
    st.just(ClearTable()),
)
transactions = simple_transactions | st.builds(
    TransactionBatch, tuples_of(st.builds(BatchItem, names, simple_transactions))
)


@given(transactions)
def test_every_transaction_round_trips_through_the_stored_body(txn: Transaction) -> None:
    body, compressed = encode_transaction(txn)
    assert decode_transaction(body, compressed) == txn
    assert decode_entry(LogEntry(7, 1_000, txn.TYPE, body, compressed)) == txn


@given(transactions)
def test_every_transaction_round_trips_through_its_json_object(txn: Transaction) -> None:
    assert transaction_from_json(json.loads(json.dumps(transaction_to_json(txn)))) == txn


# --- compression ----------------------------------------------------------------------------------


@given(transactions)
def test_a_body_is_compressed_only_when_big_enough_and_smaller(txn: Transaction) -> None:
    body, compressed = encode_transaction(txn)
    plain = json.dumps(transaction_to_json(txn), separators=(",", ":")).encode()
    if compressed:
        assert len(plain) > COMPRESS_ABOVE_BYTES and len(body) < len(plain)
    else:
        assert body == plain


def test_a_small_body_is_stored_as_readable_json() -> None:
    body, compressed = encode_transaction(ClearFiles())
    assert not compressed
    assert json.loads(body) == {"version": 1, "type": "ClearFiles"}


def test_a_body_is_left_plain_when_compression_would_not_make_it_smaller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    txn = DeleteFiles(tuple(f"file-{i}.parquet" for i in range(100)))
    monkeypatch.setattr(zlib, "compress", lambda data, level: data + b"longer")
    body, compressed = encode_transaction(txn)
    assert not compressed
    assert decode_transaction(body, compressed) == txn


def test_a_big_add_files_stores_at_most_64_bytes_per_reference() -> None:
    rng = random.Random(4)

    def new_uuid() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    table_id = new_uuid()
    partition_ids = [new_uuid() for _ in range(100)]
    refs = []
    for _ in range(10_000):
        p = rng.choice(partition_ids)
        name = f"tables/{table_id}/data/partition={p}/{new_uuid()}.parquet"
        refs.append(FileReference(name, p, rng.randrange(1, 10_000_000)))
    body, compressed = encode_transaction(AddFiles(tuple(refs)))
    assert compressed
    assert len(body) / len(refs) <= 64


# --- errors ---------------------------------------------------------------------------------------


def body_of(data: Any) -> bytes:
    return json.dumps(data).encode()


def with_change(type_name: str, path: list[Any], value: Any) -> dict[str, Any]:
    """The JSON object of ``FIXED[type_name]`` with one value changed (or deleted)."""
    data: dict[str, Any] = json.loads(json.dumps(transaction_to_json(FIXED[type_name])))
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()

MALFORMED: list[tuple[str, Any, str]] = [
    ("not an object", [1, 2], "must be a JSON object"),
    ("no version", {"type": "ClearFiles"}, "no 'version'"),
    ("unknown version", {"version": 2, "type": "ClearFiles"}, "unknown transaction format version 2"),
    ("version as a string", {"version": "1", "type": "ClearFiles"}, "unknown transaction format version '1'"),
    ("version as true", {"version": True, "type": "ClearFiles"}, "unknown transaction format version True"),
    ("no type", {"version": 1}, "missing field 'type'"),
    ("unknown type", {"version": 1, "type": "DropTable"}, "unknown transaction type 'DropTable'"),
    ("type not a string", {"version": 1, "type": 3}, "type: expected a string"),
    (
        "unexpected field",
        {"version": 1, "type": "ClearFiles", "force": True},
        "unexpected field(s) ['force']",
    ),
    ("missing field", with_change("DeleteFiles", ["filenames"], _DELETE), "missing field 'filenames'"),
    ("list is an object", with_change("DeleteFiles", ["filenames"], {}), "filenames: expected a list"),
    (
        "string is a number",
        with_change("DeleteFiles", ["filenames", 1], 5),
        "filenames[1]: expected a string",
    ),
    (
        "int is a bool",
        with_change("AddFiles", ["references", "number_of_rows", 0], True),
        "number_of_rows[0]: expected an integer",
    ),
    (
        "int is a float",
        with_change("AddFiles", ["references", "last_update_time", 2], 1.5),
        "last_update_time[2]: expected an integer",
    ),
    (
        "bool is an int",
        with_change("AddFiles", ["references", "count_approximate", 1], 1),
        "count_approximate[1]: expected true or false",
    ),
    (
        "column of the wrong length",
        with_change("AddFiles", ["references", "number_of_rows"], [1, 2]),
        "number_of_rows: has 2 values but there are 3 references",
    ),
    (
        "filename pair of three",
        with_change("AddFiles", ["references", "filename_partition_id", 0], ["a", "b", "c"]),
        "filename_partition_id[0]: expected [filename, partition_id]",
    ),
    (
        "unexpected column",
        with_change("AddFiles", ["references", "sizes"], [1, 2, 3]),
        "unexpected field(s) ['sizes']",
    ),
    (
        "optional string is a number",
        with_change("ReplaceFileReferences", ["jobs", 0, "new_reference", "job_id"], 7),
        "new_reference.job_id: expected a string",
    ),
    (
        "missing reference field",
        with_change("SplitFileReferences", ["requests", 0, "new_references", 1, "number_of_rows"], _DELETE),
        "new_references[1]: missing field 'number_of_rows'",
    ),
    (
        "bad base64",
        with_change("InitialisePartitions", ["partitions", 1, "region", 0, "max"], {"b64": "not base64!"}),
        "invalid base64",
    ),
    (
        "key is a float",
        with_change("InitialisePartitions", ["partitions", 1, "region", 1, "min"], 0.5),
        "region[1].min: a key must be an integer, a string or",
    ),
    (
        "key object with other fields",
        with_change("InitialisePartitions", ["partitions", 1, "region", 0, "min"], {"b64": "", "x": 1}),
        "region[0].min: a key must be",
    ),
    (
        "empty range",
        with_change("SplitPartition", ["children", 0, "region", 1], {"min": 5, "max": 5}),
        "children[0].region[1]: empty range",
    ),
    (
        "range of mixed types",
        with_change("SplitPartition", ["children", 0, "region", 1], {"min": 5, "max": "x"}),
        "are of different types",
    ),
    (
        "partition not an object",
        with_change("InitialisePartitions", ["partitions", 0], "root"),
        "partitions[0]: expected a JSON object",
    ),
    (
        "optional time is a bool",
        with_change("ReleaseClaims", ["claimed_before"], True),
        "claimed_before: expected an integer",
    ),
    (
        "optional time is null",
        with_change("AssignJobIds", ["take_over_claimed_before"], None),
        "take_over_claimed_before: expected an integer",
    ),
    (
        "job id is a number",
        with_change("ReleaseClaims", ["job_ids", 0], 7),
        "job_ids[0]: expected a string",
    ),
    (
        "nested batch",
        with_change("Batch", ["items", 0, "transaction"], {"type": "Batch", "items": []}),
        "batches cannot be nested",
    ),
    (
        "batch item without a transaction",
        with_change("Batch", ["items", 1, "transaction"], _DELETE),
        "items[1]: missing field 'transaction'",
    ),
    (
        "unknown type inside a batch",
        with_change("Batch", ["items", 1, "transaction", "type"], "Nope"),
        "unknown transaction type 'Nope'",
    ),
]


@pytest.mark.parametrize(
    ("data", "message"), [(d, m) for _, d, m in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_malformed_json_is_rejected_naming_what_is_wrong(data: Any, message: str) -> None:
    with pytest.raises(CodecError) as error:
        decode_transaction(body_of(data), compressed=False)
    assert message in str(error.value)
    with pytest.raises(CodecError):
        transaction_from_json(data)


@pytest.mark.parametrize(
    ("body", "compressed", "message"),
    [
        (b"{not json", False, "not valid JSON"),
        (b"", False, "not valid JSON"),
        (b"\xff\xfe{}", False, "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, False, "transaction"),
        (b'{"version": 1, "type": "ClearFiles"}', True, "not valid zlib data"),
        (zlib.compress(b"{"), True, "not valid JSON"),
        (b'{"version": 1, "type": "DeleteFiles", "filenames": [' + b"9" * 5000 + b"]}", False, "JSON"),
    ],
    ids=["bad JSON", "empty", "not UTF-8", "deeply nested", "not zlib", "bad JSON inside zlib", "huge int"],
)
def test_undecodable_bodies_are_rejected(body: bytes, compressed: bool, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_transaction(body, compressed)


def test_a_log_entry_whose_type_does_not_match_its_body_is_rejected_naming_the_table_and_entry() -> None:
    body, compressed = encode_transaction(ClearFiles())
    with pytest.raises(
        UnreadableLogEntryError,
        match="table 't1': log entry 3 cannot be read: it says it holds a 'AddFiles' transaction but "
        "its body is a 'ClearFiles'",
    ):
        decode_entry(LogEntry(3, 1_000, "AddFiles", body, compressed), "t1")


def test_a_truncated_log_entry_body_is_unreadable_naming_the_table_and_entry_not_bad_input() -> None:
    body, compressed = encode_transaction(
        AddFiles(tuple(FileReference(f"file-{i}", "root", i) for i in range(200)))
    )
    assert compressed
    with pytest.raises(UnreadableLogEntryError, match="table 't1': log entry 9 cannot be read: .*zlib") as e:
        decode_entry(LogEntry(9, 1_000, "AddFiles", body[: len(body) // 2], compressed), "t1")
    assert not isinstance(e.value, CodecError)  # the caller's input was fine: not a usage error


def test_a_nested_batch_cannot_be_encoded() -> None:
    inner = TransactionBatch((BatchItem("a", ClearFiles()),))
    with pytest.raises(CodecError, match="batches cannot be nested"):
        encode_transaction(TransactionBatch((BatchItem("b", inner),)))


@pytest.mark.parametrize("key", [1.5, True, None])
def test_a_key_json_cannot_carry_is_rejected_when_encoding(key: Any) -> None:
    partition = Partition("root", Region((Range.__new__(Range),)))
    object.__setattr__(partition.region.ranges[0], "min", key)
    object.__setattr__(partition.region.ranges[0], "max", None)
    with pytest.raises(CodecError, match="a key value must be int, str or bytes"):
        encode_transaction(InitialisePartitions((partition,)))


def test_a_value_json_cannot_carry_is_rejected_when_encoding() -> None:
    txn = DeleteFiles((b"not-a-str",))  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="cannot write DeleteFiles as JSON"):
        encode_transaction(txn)
