"""One behaviour suite for the ports, run in memory, on moto and on DynamoDB Local (see ``ports`` fixture)."""

from __future__ import annotations

import dataclasses
import gzip

import pytest

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.table_index import DynamoDBTableIndex
from statestore.errors import (
    BlobNotFoundError,
    PreviousEntryGoneError,
    RequestsAlreadyDecidedError,
    StaleSnapshotError,
    StateStoreError,
    TableAlreadyExistsError,
    TableBeingDeletedError,
    TableNotFoundError,
    TransactionNotRetainedError,
    TransactionNumberTakenError,
)
from statestore.instance import MAX_INLINE_BODY_BYTES
from statestore.model.clock import now_millis
from statestore.model.layout import REQUEST_BODY_TAGS
from statestore.model.schema import Schema
from statestore.store.memory import InMemoryBlobStore
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.tables import TableInfo
from tests.aws.backends import Ports, open_ports


def entry(number: int, body: bytes | None = None, compressed: bool = False) -> LogEntry:
    return LogEntry(
        number, 1_700_000_000_000 + number, "AddFiles", body or f'{{"n": {number}}}'.encode(), compressed
    )


# --- transaction log ----------------------------------------------------------------------------


def test_an_empty_log_has_latest_number_zero_and_no_entries(ports: Ports) -> None:
    assert ports.log.latest_number("t1") == 0
    assert list(ports.log.read("t1", 1)) == []


def test_appended_entries_read_back_in_order_from_any_number(ports: Ports) -> None:
    entries = [entry(n) for n in range(1, 8)]
    for e in entries:
        ports.log.append("t1", e)

    assert list(ports.log.read("t1", 1)) == entries
    assert list(ports.log.read("t1", 4)) == entries[3:]
    assert list(ports.log.read("t1", 2, 5)) == entries[1:5]
    assert list(ports.log.read("t1", 5, 4)) == []
    assert ports.log.latest_number("t1") == 7


def test_which_partitions_an_entry_adds_to_reads_back_as_written(ports: Ports) -> None:
    written = [
        dataclasses.replace(entry(1), adds_to_leaves=frozenset({"p1", "p2"})),
        dataclasses.replace(entry(2), adds_to_leaves=frozenset()),  # adds only, to partitions not listed
        entry(3),  # any other entry
    ]
    for e in written:
        ports.log.append("t1", e)

    assert [e.adds_to_leaves for e in ports.log.read("t1", 1)] == [frozenset({"p1", "p2"}), frozenset(), None]


def test_what_an_entry_adds_at_most_reads_back_as_written(ports: Ports) -> None:
    written = [
        dataclasses.replace(entry(1), most_added=(1_000_000, 3)),
        dataclasses.replace(entry(2), most_added=(0, 0)),  # only changes or removes
        entry(3),  # written before the counts were kept
        dataclasses.replace(entry(4, b"x" * (MAX_INLINE_BODY_BYTES + 1)), most_added=(7, 0)),  # body aside
    ]
    for e in written:
        ports.log.append("t1", e)

    assert [e.most_added for e in ports.log.read("t1", 1)] == [(1_000_000, 3), (0, 0), None, (7, 0)]


def test_a_read_about_some_partitions_skips_only_entries_that_add_to_others(ports: Ports) -> None:
    adds = {1: {"a"}, 2: {"b"}, 3: {"a", "c"}, 5: set(), 6: {"c"}, 8: {"b", "d"}}
    written = [
        dataclasses.replace(entry(n), adds_to_leaves=frozenset(adds[n])) if n in adds else entry(n)
        for n in range(1, 9)
    ]
    for e in written:
        ports.log.append("t1", e)
    ports.log.append("t2", dataclasses.replace(entry(1), adds_to_leaves=frozenset({"a"})))

    read, held = ports.log.read_about("t1", 2, 8, ["a", "b"])

    # 3 adds to "a"; 4 and 7 may change anything; 5 lists nothing; 8 adds to "b". Not 6 (only "c").
    assert [e.transaction_number for e in read] == [2, 3, 4, 5, 7, 8]
    assert read == written[1:5] + written[6:8]
    assert held == 7
    assert [e.transaction_number for e in ports.log.read_about("t1", 1, 8, [])[0]] == [4, 5, 7]
    # An entry that is gone is not counted: the reader sees the range is not whole.
    ports.log.delete_up_to("t1", 3)
    assert ports.log.read_about("t1", 1, 8, ["c"]) == (written[3:7], 5)


def test_a_used_transaction_number_is_refused_and_the_first_entry_kept(ports: Ports) -> None:
    ports.log.append("t1", entry(1, b"first"))

    with pytest.raises(TransactionNumberTakenError) as raised:
        ports.log.append("t1", entry(1, b"second"))

    assert raised.value.transaction_number == 1
    assert [e.body for e in ports.log.read("t1", 1)] == [b"first"]


def test_an_entry_is_refused_where_the_one_before_it_is_not_in_the_log(ports: Ports) -> None:
    statuses = ports.log.request_statuses
    assert statuses is not None
    for number in (1, 2, 3):
        ports.log.append("t1", entry(number))
    ports.log.delete_up_to("t1", 2)  # cleanup: the latest entry, 3, is kept

    # A writer whose state is still at 1 would fill number 2, which a reader from a snapshot never reads.
    with pytest.raises(PreviousEntryGoneError) as raised:
        ports.log.append("t1", entry(2, b"late"), [committed("r1", 2)])

    assert raised.value.transaction_number == 2
    assert [e.transaction_number for e in ports.log.read("t1", 1)] == [3]
    assert statuses.get("t1", "r1") is None  # nothing of the refused append was written
    ports.log.append("t1", entry(4))  # after the latest entry: appended
    ports.log.append("t2", entry(1))  # the first entry follows nothing
    with pytest.raises(PreviousEntryGoneError):
        ports.log.append("t3", entry(5))
    assert ports.log.latest_number("t3") == 0


def test_tables_have_separate_logs(ports: Ports) -> None:
    ports.log.append("t1", entry(1))
    ports.log.append("t2", entry(1, b"other"))
    ports.log.append("t2", entry(2))

    assert ports.log.latest_number("t1") == 1
    assert [e.body for e in ports.log.read("t2", 1)] == [b"other", entry(2).body]


def test_compressed_and_uncompressed_bodies_read_back_byte_for_byte(ports: Ports) -> None:
    compressed = gzip.compress(b'{"files": []}' * 50)
    ports.log.append("t1", entry(1, compressed, compressed=True))
    ports.log.append("t1", entry(2, '{"name": "caf\u00e9"}'.encode()))

    first, second = ports.log.read("t1", 1)
    assert (first.body, first.compressed) == (compressed, True)
    assert (second.body, second.compressed) == ('{"name": "caf\u00e9"}'.encode(), False)


def test_a_body_too_large_for_an_item_reads_back_whole(ports: Ports) -> None:
    big = b"x" * (MAX_INLINE_BODY_BYTES + 1)
    ports.log.append("t1", entry(1, big))
    ports.log.append("t1", entry(2))

    assert [e.body for e in ports.log.read("t1", 1)] == [big, entry(2).body]


def test_delete_up_to_removes_older_entries_only(ports: Ports) -> None:
    for n in range(1, 31):
        ports.log.append("t1", entry(n))

    assert ports.log.delete_up_to("t1", 27) == 27

    assert [e.transaction_number for e in ports.log.read("t1", 1)] == [28, 29, 30]
    assert ports.log.latest_number("t1") == 30


def test_delete_table_empties_one_tables_log(ports: Ports) -> None:
    ports.log.append("t1", entry(1))
    ports.log.append("t2", entry(1))

    ports.log.delete_table("t1")

    assert list(ports.log.read("t1", 1)) == []
    assert len(list(ports.log.read("t2", 1))) == 1


def test_the_logs_tail_is_its_last_entries_and_gives_those_after_a_number_whole(ports: Ports) -> None:
    assert ports.log.read_tail("t1", 5).numbers == ()
    big = b"x" * (MAX_INLINE_BODY_BYTES + 1)  # kept aside in the bucket by the DynamoDB log
    entries = [entry(n, big if n == 6 else None) for n in range(1, 8)]
    for e in entries:
        ports.log.append("t1", e)
    ports.log.append("t2", entry(1))

    tail = ports.log.read_tail("t1", 3)

    assert tail.numbers == (5, 6, 7)
    assert tail.after(5) == entries[5:] and tail.after(5)[0].body == big
    assert tail.after(7) == [] and tail.after(0) == entries[4:]
    assert tail.covers_after(4) and tail.covers_after(9) and not tail.covers_after(3)
    assert ports.log.read_tail("t1", 100).numbers == tuple(range(1, 8))
    assert ports.log.read_tail("t2", 100).numbers == (1,)


def test_the_logs_tail_after_cleanup_starts_where_the_log_does(ports: Ports) -> None:
    for n in range(1, 11):
        ports.log.append("t1", entry(n))
    ports.log.delete_up_to("t1", 8)

    tail = ports.log.read_tail("t1", 5)

    assert tail.numbers == (9, 10)
    assert not tail.covers_after(7)  # entry 8 is gone: a reader at 7 must find the gap itself
    assert [e.transaction_number for e in tail.after(8)] == [9, 10]


def attached(number: int, attachments: dict[str, bytes]) -> LogEntry:
    return LogEntry(
        number,
        1_700_000_000_000,
        "Batch",
        b'{"points": "at attachments"}',
        False,
        "w",
        tuple(attachments.items()),
    )


def test_an_entrys_attachments_read_back_from_the_blob_store_and_go_with_the_entry(ports: Ports) -> None:
    bodies = {"tables/t1/log/requests/r1.json": b'{"r": 1}', "tables/t1/log/requests/r2.json": b"\x00big"}
    for key, body in bodies.items():
        ports.blobs.put(key, body)
    ports.log.append("t1", attached(1, bodies))
    ports.log.append("t1", entry(2))

    (first,) = ports.log.read("t1", 1, 1)
    assert dict(first.attachments) == bodies
    assert ports.log.stored_body_keys("t1") == set(bodies)

    ports.log.delete_up_to("t1", 1)

    assert ports.blobs.list("tables/t1/log/") == []
    assert ports.log.stored_body_keys("t1") == set()


def test_an_entry_whose_attachment_is_gone_reads_as_not_retained(ports: Ports) -> None:
    ports.log.append("t1", attached(1, {"tables/t1/log/requests/r1.json": b"{}"}))

    with pytest.raises(TransactionNotRetainedError, match="transaction 1"):
        list(ports.log.read("t1", 1))


def test_stored_body_keys_names_bodies_stored_aside_too(ports: Ports) -> None:
    ports.log.append("t1", entry(1, b"x" * (MAX_INLINE_BODY_BYTES + 1)))
    ports.log.append("t1", entry(2))

    if ports.name == "memory":  # the in-memory log holds every body itself
        assert ports.log.stored_body_keys("t1") == set()
    else:
        (key,) = ports.log.stored_body_keys("t1")
        assert key.startswith("tables/t1/log/") and ports.blobs.list("tables/t1/log/") == [key]


# --- the outcomes of an entry's requests, written with it ----------------------------------------------


NOW = now_millis()  # statuses expire after their retention: recorded now, they are current


def committed(request_id: str, number: int, table_id: str = "t1") -> CommitStatus:
    return CommitStatus(request_id, table_id, CommitOutcome.COMMITTED, NOW + number, number)


def test_an_entry_and_its_requests_committed_statuses_are_written_together(ports: Ports) -> None:
    statuses = ports.log.request_statuses
    assert statuses is not None
    outcomes = [committed("r1", 1), committed("r2", 1)]

    ports.log.append("t1", entry(1), outcomes)

    assert [e.transaction_number for e in ports.log.read("t1", 1)] == [1]
    assert statuses.get_many([("t1", "r1"), ("t1", "r2")]) == {s.key: s for s in outcomes}


def test_a_request_with_a_final_status_leaves_no_entry_and_no_status(ports: Ports) -> None:
    statuses = ports.log.request_statuses
    assert statuses is not None
    rejected = CommitStatus("r2", "t1", CommitOutcome.REJECTED, NOW, None, "why")
    statuses.record([rejected])

    with pytest.raises(RequestsAlreadyDecidedError) as raised:
        ports.log.append("t1", entry(1), [committed("r1", 1), committed("r2", 1)])

    assert raised.value.request_ids == ("r2",)
    assert ports.log.latest_number("t1") == 0 and list(ports.log.read("t1", 1)) == []
    assert statuses.get("t1", "r1") is None  # all or nothing
    assert statuses.get("t1", "r2") == rejected


def test_a_dead_lettered_status_is_replaced_by_the_committed_one_with_the_entry(ports: Ports) -> None:
    statuses = ports.log.request_statuses
    assert statuses is not None
    statuses.record([CommitStatus("r1", "t1", CommitOutcome.DEAD_LETTERED, NOW, None, "table missing")])

    ports.log.append("t1", entry(1), [committed("r1", 1)])

    assert statuses.get("t1", "r1") == committed("r1", 1)


def test_a_taken_number_wins_over_a_final_status_and_writes_nothing(ports: Ports) -> None:
    statuses = ports.log.request_statuses
    assert statuses is not None
    ports.log.append("t1", entry(1), [committed("r1", 1)])

    # The same request again at the same number (a retry whose first try landed): the number decides.
    with pytest.raises(TransactionNumberTakenError):
        ports.log.append("t1", entry(1, b"again"), [committed("r1", 1)])

    assert [e.body for e in ports.log.read("t1", 1)] == [entry(1).body]


def test_an_entrys_outcomes_are_scoped_to_its_table(ports: Ports) -> None:
    statuses = ports.log.request_statuses
    assert statuses is not None
    ports.log.append("alpha", entry(1), [committed("job-7", 1, "alpha")])

    # beta's request of the same id is another request: its entry goes in with its own status.
    ports.log.append("beta", entry(1), [committed("job-7", 1, "beta")])

    assert statuses.get("alpha", "job-7") == committed("job-7", 1, "alpha")
    assert statuses.get("beta", "job-7") == committed("job-7", 1, "beta")


# --- snapshot metadata --------------------------------------------------------------------------


def snapshot(number: int, table_id: str = "t1") -> SnapshotInfo:
    return SnapshotInfo(table_id, number, 1000 + number, f"p{number}.parquet", f"f{number}.parquet")


def test_a_table_without_snapshots_has_no_latest(ports: Ports) -> None:
    assert ports.snapshot_metadata.latest("t1") is None
    assert ports.snapshot_metadata.list("t1") == []


def test_recorded_snapshots_list_in_number_order_and_the_newest_is_latest(ports: Ports) -> None:
    for number in (2, 10, 100):
        ports.snapshot_metadata.record(snapshot(number))

    assert ports.snapshot_metadata.list("t1") == [snapshot(2), snapshot(10), snapshot(100)]
    assert ports.snapshot_metadata.latest("t1") == snapshot(100)


def test_a_snapshots_counts_come_back_with_its_record_and_one_recorded_without_them_reads_none(
    ports: Ports,
) -> None:
    counted = dataclasses.replace(snapshot(2), references=10_000, partitions=199)
    ports.snapshot_metadata.record(counted)
    assert ports.snapshot_metadata.latest("t1") == counted
    ports.snapshot_metadata.record(snapshot(3))  # as recorded before snapshots were counted

    assert ports.snapshot_metadata.list("t1") == [counted, snapshot(3)]
    latest = ports.snapshot_metadata.latest("t1")
    assert latest is not None and (latest.references, latest.partitions) == (None, None)


@pytest.mark.parametrize("damage", [{"N": "lots"}, {"S": "10000"}, {"N": "-1"}])
def test_a_damaged_count_in_a_snapshot_record_reads_as_not_known(
    request: pytest.FixtureRequest, damage: dict[str, str]
) -> None:
    with open_ports("moto", request) as ports:
        assert ports.backend is not None
        ports.snapshot_metadata.record(dataclasses.replace(snapshot(2), references=10_000, partitions=199))
        for key in ("snapshot#", "latest"):
            ports.backend.dynamodb.update_item(
                TableName=ports.backend.resources.snapshots_table,
                Key={"table_id": {"S": "t1"}, "snapshot_key": {"S": _item_key(ports, key)}},
                UpdateExpression="SET reference_count = :d",
                ExpressionAttributeValues={":d": damage},
            )

        for read in (ports.snapshot_metadata.latest("t1"), *ports.snapshot_metadata.list("t1")):
            assert read is not None and (read.references, read.partitions) == (None, 199)
            assert read.files_key == snapshot(2).files_key  # the rest of the record reads as it was


def _item_key(ports: Ports, prefix: str) -> str:
    """The sort key of the table's only snapshot item (``snapshot#...``) or of its pointer."""
    assert ports.backend is not None
    items = ports.backend.dynamodb.scan(TableName=ports.backend.resources.snapshots_table)["Items"]
    return next(i["snapshot_key"]["S"] for i in items if i["snapshot_key"]["S"].startswith(prefix))


@pytest.mark.parametrize("number", [5, 10])
def test_the_latest_pointer_never_moves_backwards(ports: Ports, number: int) -> None:
    ports.snapshot_metadata.record(snapshot(10))

    with pytest.raises(StaleSnapshotError):
        ports.snapshot_metadata.record(SnapshotInfo("t1", number, 5, "other-p.parquet", "other-f.parquet"))

    assert ports.snapshot_metadata.latest("t1") == snapshot(10)


def test_a_stale_snapshot_records_nothing(ports: Ports) -> None:
    ports.snapshot_metadata.record(snapshot(10))
    with pytest.raises(StaleSnapshotError):
        ports.snapshot_metadata.record(snapshot(5))

    assert ports.snapshot_metadata.list("t1") == [snapshot(10)]
    assert ports.snapshot_metadata.latest("t1") == snapshot(10)


def test_an_older_snapshot_can_be_deleted_but_not_the_latest(ports: Ports) -> None:
    ports.snapshot_metadata.record(snapshot(3))
    ports.snapshot_metadata.record(snapshot(7))

    ports.snapshot_metadata.delete("t1", 3)
    with pytest.raises(StateStoreError, match="latest"):
        ports.snapshot_metadata.delete("t1", 7)

    assert ports.snapshot_metadata.list("t1") == [snapshot(7)]


def test_delete_table_forgets_every_snapshot_and_the_pointer(ports: Ports) -> None:
    ports.snapshot_metadata.record(snapshot(3))
    ports.snapshot_metadata.record(snapshot(7))
    ports.snapshot_metadata.record(snapshot(4, table_id="t2"))

    ports.snapshot_metadata.delete_table("t1")

    assert ports.snapshot_metadata.latest("t1") is None
    assert ports.snapshot_metadata.list("t1") == []
    assert ports.snapshot_metadata.latest("t2") == snapshot(4, "t2")
    ports.snapshot_metadata.record(snapshot(1))  # a fresh start is allowed again


# --- blobs --------------------------------------------------------------------------------------


def test_blobs_read_back_and_a_missing_one_is_a_named_error(ports: Ports) -> None:
    ports.blobs.put("tables/t1/a", b"\x00\x01data")

    assert ports.blobs.get("tables/t1/a") == b"\x00\x01data"
    with pytest.raises(BlobNotFoundError) as raised:
        ports.blobs.get("tables/t1/missing")
    assert raised.value.key == "tables/t1/missing"


def test_a_blob_read_up_to_a_size_is_whole_or_none(ports: Ports) -> None:
    data = bytes(range(256)) * 4
    ports.blobs.put("tables/t1/a", data)
    ports.blobs.put("tables/t1/empty", b"")

    assert ports.blobs.get_at_most("tables/t1/a", len(data)) == data
    assert ports.blobs.get_at_most("tables/t1/a", 10 * len(data)) == data
    assert ports.blobs.get_at_most("tables/t1/a", len(data) - 1) is None
    assert ports.blobs.get_at_most("tables/t1/empty", 10) == b""
    with pytest.raises(BlobNotFoundError):
        ports.blobs.get_at_most("tables/t1/missing", 10)


def tags_of(ports: Ports, key: str) -> dict[str, str]:
    if ports.backend is None:
        assert isinstance(ports.blobs, InMemoryBlobStore)
        return ports.blobs.tags[key]
    response = ports.backend.s3.get_object_tagging(Bucket=ports.backend.resources.bucket, Key=key)
    return {tag["Key"]: tag["Value"] for tag in response["TagSet"]}


def test_a_copied_blob_reads_back_the_same_without_the_sources_tags(ports: Ports) -> None:
    ports.blobs.put("tables/t1/requests/r1.json", b"\x00body", tags=REQUEST_BODY_TAGS)

    ports.blobs.copy("tables/t1/requests/r1.json", "tables/t1/log/requests/r1.json")

    assert ports.blobs.get("tables/t1/log/requests/r1.json") == b"\x00body"
    assert tags_of(ports, "tables/t1/requests/r1.json") == REQUEST_BODY_TAGS
    assert tags_of(ports, "tables/t1/log/requests/r1.json") == {}
    with pytest.raises(BlobNotFoundError) as raised:
        ports.blobs.copy("tables/t1/requests/missing", "tables/t1/log/x")
    assert raised.value.key == "tables/t1/requests/missing"


def test_blobs_list_by_prefix_sorted_and_delete_ignores_absent_keys(ports: Ports) -> None:
    for key in ("tables/t1/b", "tables/t1/a", "tables/t10/a", "tables/t2/a"):
        ports.blobs.put(key, b"x")

    assert ports.blobs.list("tables/t1/") == ["tables/t1/a", "tables/t1/b"]

    ports.blobs.delete(["tables/t1/a", "tables/t1/never-there"])
    assert ports.blobs.list("tables/") == ["tables/t1/b", "tables/t10/a", "tables/t2/a"]


# --- table index --------------------------------------------------------------------------------

SCHEMA = Schema.of({"key": "string"}, values={"value": "long"})


def test_a_created_table_is_found_by_id_and_by_name(ports: Ports) -> None:
    table = TableInfo.new("orders", SCHEMA, {"owner": "team-a"})
    ports.table_index.create(table)

    assert ports.table_index.get(table.table_id) == table
    assert ports.table_index.get_by_name("orders") == table
    assert ports.table_index.list() == [table]


def test_a_table_record_keeps_where_its_files_live_through_a_rename(ports: Ports) -> None:
    on_log = TableInfo.new("on-log", SCHEMA)
    in_rows = TableInfo.new("in-rows", SCHEMA, file_store="postgres")
    ports.table_index.create(on_log)
    ports.table_index.create(in_rows)

    assert ports.table_index.get(on_log.table_id).file_store == "log"
    assert ports.table_index.get(in_rows.table_id) == in_rows
    assert ports.table_index.rename(in_rows.table_id, "renamed").file_store == "postgres"
    assert ports.table_index.get_by_name("renamed").file_store == "postgres"


def test_a_property_is_set_changed_and_removed_leaving_the_others(ports: Ports) -> None:
    table = TableInfo.new("orders", SCHEMA, {"owner": "team-a"})
    ports.table_index.create(table)

    on = ports.table_index.set_property(table.table_id, "queryable_view", "true")
    assert on.properties == {"owner": "team-a", "queryable_view": "true"} and on.queryable_view
    assert ports.table_index.get_by_name("orders") == on
    ports.table_index.set_property(table.table_id, "owner", "team-b")
    off = ports.table_index.set_property(table.table_id, "queryable_view", None)
    assert ports.table_index.get(table.table_id) == off
    assert off.properties == {"owner": "team-b"} and not off.queryable_view


def test_a_property_value_the_store_cannot_use_is_refused_and_changes_nothing(ports: Ports) -> None:
    on_log = TableInfo.new("on-log", SCHEMA)
    in_rows = TableInfo.new("in-rows", SCHEMA, file_store="postgres")
    ports.table_index.create(on_log)
    ports.table_index.create(in_rows)

    with pytest.raises(StateStoreError, match="queryable_view='yes' must be true or false"):
        ports.table_index.set_property(on_log.table_id, "queryable_view", "yes")
    with pytest.raises(StateStoreError, match="cannot have a queryable view"):
        ports.table_index.set_property(in_rows.table_id, "queryable_view", "true")
    with pytest.raises(TableNotFoundError):
        ports.table_index.set_property("no-such-id", "queryable_view", "true")

    assert ports.table_index.list() == [in_rows, on_log]


def test_a_property_another_caller_sets_meanwhile_is_kept(
    aws: AwsBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = aws.table_index
    other = DynamoDBTableIndex(aws.dynamodb, index.by_id_table, index.by_name_table)
    table = TableInfo.new("orders", SCHEMA)
    index.create(table)
    read = index.get

    def read_then_another_caller_writes(table_id: str) -> TableInfo:
        found = read(table_id)
        if "owner" not in found.properties:  # between this read and the update, another caller's write
            other.set_property(table_id, "owner", "team-a")
        return found

    monkeypatch.setattr(index, "get", read_then_another_caller_writes)
    changed = index.set_property(table.table_id, "queryable_view", "true")

    assert changed.properties == {"owner": "team-a", "queryable_view": "true"}
    assert other.get(table.table_id) == changed


def test_a_second_table_with_the_same_name_is_refused(ports: Ports) -> None:
    first = TableInfo.new("orders", SCHEMA)
    ports.table_index.create(first)

    with pytest.raises(TableAlreadyExistsError):
        ports.table_index.create(TableInfo.new("orders", SCHEMA))

    assert ports.table_index.list() == [first]


def test_unknown_tables_are_not_found(ports: Ports) -> None:
    with pytest.raises(TableNotFoundError):
        ports.table_index.get("no-such-id")
    with pytest.raises(TableNotFoundError):
        ports.table_index.get_by_name("no-such-name")
    with pytest.raises(TableNotFoundError):
        ports.table_index.rename("no-such-id", "x")
    with pytest.raises(TableNotFoundError):
        ports.table_index.delete("no-such-id")


def test_tables_list_in_name_order(ports: Ports) -> None:
    for name in ("b", "c", "a"):
        ports.table_index.create(TableInfo.new(name, SCHEMA))

    assert [t.table_name for t in ports.table_index.list()] == ["a", "b", "c"]


def test_a_renamed_table_keeps_its_id_and_frees_its_old_name(ports: Ports) -> None:
    table = TableInfo.new("orders", SCHEMA)
    ports.table_index.create(table)

    renamed = ports.table_index.rename(table.table_id, "orders-v2")

    assert renamed == table.renamed("orders-v2")
    assert ports.table_index.get_by_name("orders-v2") == renamed
    assert ports.table_index.get(table.table_id) == renamed
    with pytest.raises(TableNotFoundError):
        ports.table_index.get_by_name("orders")
    ports.table_index.create(TableInfo.new("orders", SCHEMA))


def test_renaming_onto_a_taken_name_is_refused_and_changes_nothing(ports: Ports) -> None:
    a, b = TableInfo.new("a", SCHEMA), TableInfo.new("b", SCHEMA)
    ports.table_index.create(a)
    ports.table_index.create(b)

    with pytest.raises(TableAlreadyExistsError):
        ports.table_index.rename(a.table_id, "b")

    assert ports.table_index.get_by_name("a") == a
    assert ports.table_index.get_by_name("b") == b


def test_a_table_whose_delete_began_reads_back_marked_under_its_id_and_name(ports: Ports) -> None:
    table = TableInfo.new("orders", SCHEMA, {"k": "v"}, allowed_senders=["AROAEXAMPLE0000000001"])
    other = TableInfo.new("other", SCHEMA)
    ports.table_index.create(table)
    ports.table_index.create(other)

    marked = ports.table_index.mark_deleting(table.table_id)

    assert marked == dataclasses.replace(table, deleting=True)
    assert ports.table_index.get(table.table_id) == marked
    assert ports.table_index.get_by_name("orders") == marked
    assert ports.table_index.list() == [marked, other]
    assert ports.table_index.mark_deleting(table.table_id) == marked  # run again: unchanged
    assert ports.table_index.rename(table.table_id, "orders-old").deleting
    assert ports.table_index.get(table.table_id).deleting  # kept by a rename, a property, the senders
    assert ports.table_index.set_property(table.table_id, "k", "w").deleting
    assert ports.table_index.get(table.table_id).deleting
    with pytest.raises(TableBeingDeletedError, match="'orders-old' .* is being deleted"):
        ports.table_index.check_live(table.table_id)
    ports.table_index.check_live(other.table_id)
    assert not ports.table_index.get(other.table_id).deleting
    ports.table_index.delete(table.table_id)
    with pytest.raises(TableNotFoundError):
        ports.table_index.check_live(table.table_id)


def test_marking_an_unknown_table_is_refused_and_writes_nothing(ports: Ports) -> None:
    with pytest.raises(TableNotFoundError):
        ports.table_index.mark_deleting("no-such-table")

    assert ports.table_index.list() == []


def test_a_deleted_table_is_gone_and_its_name_reusable(ports: Ports) -> None:
    table = TableInfo.new("orders", SCHEMA)
    ports.table_index.create(table)

    ports.table_index.delete(table.table_id)

    assert ports.table_index.list() == []
    with pytest.raises(TableNotFoundError):
        ports.table_index.get(table.table_id)
    ports.table_index.create(TableInfo.new("orders", SCHEMA))
