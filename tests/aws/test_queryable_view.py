"""The queryable view on each store (in memory, moto, DynamoDB Local): its upkeep writes what changed, a
query is never answered from items an upkeep is writing, a view behind the log's trimmed point or left half
written is rebuilt, and the DynamoDB items live beside the snapshot records without disturbing them. The
random-history property runs on DynamoDB Local at the end."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import AwsCaller
from statestore.adapters.aws.dynamodb_view import DynamoDBQueryableViewStore
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.queryable_view import QueryableView
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    QueryableViewBusyError,
    QueryableViewConflictError,
    ThrottledError,
    TransactionNotRetainedError,
)
from statestore.model.files import FileReference
from statestore.model.partitions import Partition, Range, Region
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.ports import CommitStatus, LogEntry, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotInfo
from statestore.store.view_ports import QueryableViewStore
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    InitialisePartitions,
    ReleaseClaims,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
)
from statestore.views.queryable_view import Merged, ViewMeta, ViewValue, references_prefix
from statestore.views.view_index import INDEX_PREFIX, PlacedPartition, index_key
from tests.aws.backends import open_ports
from tests.builders import STRING_SCHEMA, data_key, ref, tree
from tests.property.test_queryable_view import run_view_history

TABLE = "table-1"


class Table:
    """A table on an in-memory log, with its view on ``items``."""

    def __init__(self, items: QueryableViewStore, split_points: tuple[str, ...] = ("m",)) -> None:
        clock = itertools.count(1_000, 7)
        self.log = InMemoryTransactionLog()
        self.store = TransactionLogStateStore(
            TABLE,
            STRING_SCHEMA,
            self.log,
            SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore()),
            clock=lambda: next(clock),
        )
        self.items = items
        self.view = QueryableView(TABLE, STRING_SCHEMA, self.log, items, sleep=lambda _: None)
        self.store.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA, split_points))))

    def update(self) -> int:
        return self.view.update(self.store.load).writes


def test_an_upkeep_writes_at_most_two_items_per_reference_added(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    table.update()
    leaves = sorted(p.id for p in table.store.state().leaf_partitions())
    added = [ref(data_key(TABLE, f"f{i}"), leaves[i % 2], 10) for i in range(60)]
    table.store.commit(AddFiles(tuple(added)))

    writes = table.update()

    assert writes == 2 * len(added)
    assert table.view.references_in_partition(leaves[0]).value == sorted(
        table.store.state().references_in_partition(leaves[0])
    )
    assert len(table.view.references_in_partition(leaves[0]).value) == 30


def test_a_claim_and_its_release_write_only_the_claimed_files_items(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    names = [data_key(TABLE, f"f{i}") for i in range(30)]
    leaf = sorted(p.id for p in table.store.state().leaf_partitions())[0]
    table.store.commit(AddFiles(tuple(ref(n, leaf) for n in names)))
    table.update()

    table.store.commit(AssignJobIds((AssignJobIdRequest("job-1", leaf, tuple(names[:3])),)))
    # Each claimed file: its f# and r# item rewritten, its j# item added.
    assert table.update() == 9
    assert [r.filename for r in table.view.claimed_references("job-1").value] == names[:3]

    table.store.commit(ReleaseClaims(("job-1",)))
    assert table.update() == 9  # f# and r# rewritten, j# deleted
    assert table.view.claimed_references("job-1").value == []


def test_a_query_answers_with_the_entries_after_the_view_merged_in(view_store: QueryableViewStore) -> None:
    table = Table(view_store, ("d", "m", "t"))
    table.update()
    state = table.store.state()
    leaves = {p.id: p for p in state.leaf_partitions()}
    for i, leaf in enumerate(sorted(leaves)):
        table.store.commit(AddFiles((ref(data_key(TABLE, f"f{i}"), leaf),)))
    table.store.commit(ClearFiles())
    kept = ref(data_key(TABLE, "after-clear"), sorted(leaves)[0])
    table.store.commit(AddFiles((kept,)))

    region = Region((Range("a", "c"),))  # inside the first leaf
    answer = table.view.references_in_region(region)

    latest = table.store.state()
    assert answer.transaction_number == latest.transaction_number
    expected = {p.id: latest.references_in_partition(p.id) for p in latest.partition_tree.overlapping(region)}
    assert answer.value == expected
    assert [r.filename for r in answer.value[kept.partition_id]] == [kept.filename]


def test_a_query_never_uses_items_an_upkeep_is_writing(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    table.update()
    number = table.log.latest_number(TABLE)
    # An upkeep that stopped half way: the meta says the items are being written.
    view_store.replace_meta(TABLE, ViewMeta(number, writing_to=number + 1), ViewMeta(number))

    with pytest.raises(QueryableViewBusyError, match="being written"):
        table.view.references_in_partition("root")

    # The next upkeep rebuilds it from a full load, and queries read it again.
    result = table.view.update(table.store.load)
    assert result.rebuilt
    assert view_store.meta(TABLE) == ViewMeta(number)
    assert table.view.references_in_partition("root").value == []


def test_a_query_reads_again_when_an_upkeep_moved_the_view_meanwhile() -> None:
    items = InMemoryQueryableViewStore()
    table = Table(items)
    table.update()
    leaf = sorted(p.id for p in table.store.state().leaf_partitions())[0]
    added = ref(data_key(TABLE, "f"), leaf)
    table.store.commit(AddFiles((added,)))
    reads = []
    real_meta = items.meta

    def meta(table_id: str) -> ViewMeta | None:
        reads.append(real_meta(table_id))
        if len(reads) == 2:  # between the query's two reads of the meta, an upkeep runs
            table.update()
        return real_meta(table_id)

    items.meta = meta  # type: ignore[method-assign]
    merges: list[int] = []
    real_merge = table.view._merge_about

    def merge(view_number: int, latest: Future[int], partition_ids: Collection[str]) -> Merged:
        merges.append(view_number)
        return real_merge(view_number, latest, partition_ids)

    table.view._merge_about = merge  # type: ignore[method-assign]
    answer = table.view.references_in_partition(leaf)
    assert answer.value == table.store.state().references_in_partition(leaf)
    # Merged first from the view's old number, then (the view moved meanwhile) again from its new one.
    assert merges == [reads[0].transaction_number, table.log.latest_number(TABLE)]  # type: ignore[union-attr]


def test_two_upkeeps_never_write_at_once(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    table.update()
    number = table.log.latest_number(TABLE)
    view_store.replace_meta(TABLE, ViewMeta(number, writing_to=number + 1), ViewMeta(number))

    with pytest.raises(QueryableViewConflictError):
        view_store.replace_meta(TABLE, ViewMeta(number, writing_to=number + 1), ViewMeta(number))
    with pytest.raises(QueryableViewConflictError):
        view_store.replace_meta(TABLE, ViewMeta(number), None)


def test_a_view_is_never_rebuilt_from_an_older_state(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    older = table.store.load()
    table.store.commit(AddFiles((ref(data_key(TABLE, "f"), "root"),)))
    table.update()

    with pytest.raises(QueryableViewConflictError, match="older state"):
        table.view.rebuild(older)
    assert view_store.meta(TABLE) == ViewMeta(table.log.latest_number(TABLE))


def test_a_view_behind_the_trimmed_log_is_rebuilt(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    table.update()
    leaf = sorted(p.id for p in table.store.state().leaf_partitions())[0]
    for i in range(3):
        table.store.commit(AddFiles((ref(data_key(TABLE, f"f{i}"), leaf),)))
    table.store.create_snapshot()
    table.log.delete_up_to(TABLE, table.log.latest_number(TABLE) - 1)

    with pytest.raises(TransactionNotRetainedError):
        table.view.references_in_partition(leaf)

    assert table.view.update(table.store.load).rebuilt
    assert table.view.references_in_partition(leaf).value == sorted(
        table.store.state().references_in_partition(leaf)
    )


def test_long_names_are_keyed_by_their_hash(view_store: QueryableViewStore) -> None:
    table = Table(view_store)
    leaf = sorted(p.id for p in table.store.state().leaf_partitions())[0]
    long_name = data_key(TABLE, "x" * 900)
    job = "j" * 500
    table.store.commit(AddFiles((ref(long_name, leaf),)))
    table.store.commit(AssignJobIds((AssignJobIdRequest(job, leaf, (long_name,)),)))
    table.update()

    assert table.view.file(long_name).value == table.store.state().file(long_name)
    assert [r.filename for r in table.view.claimed_references(job).value] == [long_name]


def test_the_view_beside_the_snapshot_records(aws: AwsBackend) -> None:
    records, items = aws.snapshot_metadata, aws.queryable_view
    table = Table(items)
    table.update()
    records.record(SnapshotInfo(TABLE, 1, 5, "p", "f"))

    assert [s.transaction_number for s in records.list(TABLE)] == [1]
    assert items.meta(TABLE) == ViewMeta(1)
    records.delete_table(TABLE)  # deleting a table's snapshot records deletes its view with them
    assert items.meta(TABLE) is None
    assert items.with_prefix(TABLE, "") == {}


class _OneTablePerExample(QueryableViewStore):
    """A store shared by many examples, each example's table under an id of its own."""

    def __init__(self, store: QueryableViewStore, suffix: str) -> None:
        self.store, self.suffix = store, suffix

    def meta(self, table_id: str) -> ViewMeta | None:
        return self.store.meta(table_id + self.suffix)

    def replace_meta(self, table_id: str, new: ViewMeta, expected: ViewMeta | None) -> None:
        self.store.replace_meta(table_id + self.suffix, new, expected)

    def replace_damaged_meta(self, table_id: str, new: ViewMeta) -> None:
        self.store.replace_damaged_meta(table_id + self.suffix, new)

    def get(self, table_id: str, keys: Collection[str]) -> dict[str, ViewValue]:
        return self.store.get(table_id + self.suffix, keys)

    def with_prefix(self, table_id: str, prefix: str) -> dict[str, ViewValue]:
        return self.store.with_prefix(table_id + self.suffix, prefix)

    def with_prefixes(self, table_id: str, prefixes: Sequence[str]) -> list[dict[str, ViewValue]]:
        return self.store.with_prefixes(table_id + self.suffix, prefixes)

    def descending(self, table_id: str, low: str, high: str) -> Iterator[ViewValue]:
        return self.store.descending(table_id + self.suffix, low, high)

    def write(self, table_id: str, puts: Mapping[str, ViewValue], deletes: Collection[str]) -> None:
        self.store.write(table_id + self.suffix, puts, deletes)

    def delete_table(self, table_id: str) -> None:
        self.store.delete_table(table_id + self.suffix)


class _OneLogPerExample(TransactionLogStore):
    """A log shared by many examples, each example's table under an id of its own."""

    def __init__(self, log: TransactionLogStore, suffix: str) -> None:
        self.log, self.suffix = log, suffix

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        self.log.append(table_id + self.suffix, entry, outcomes)

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        return self.log.read(table_id + self.suffix, from_number, to_number)

    def read_about(
        self, table_id: str, from_number: int, to_number: int, partition_ids: Collection[str]
    ) -> tuple[list[LogEntry], int]:
        return self.log.read_about(table_id + self.suffix, from_number, to_number, partition_ids)

    def latest_number(self, table_id: str) -> int:
        return self.log.latest_number(table_id + self.suffix)

    def delete_up_to(self, table_id: str, transaction_number: int) -> int:
        return self.log.delete_up_to(table_id + self.suffix, transaction_number)

    def delete_table(self, table_id: str) -> None:
        self.log.delete_table(table_id + self.suffix)

    def stored_body_keys(self, table_id: str) -> set[str]:
        return self.log.stored_body_keys(table_id + self.suffix)


@pytest.fixture
def dynamodb_local_backend(request: pytest.FixtureRequest) -> Iterator[AwsBackend]:
    with open_ports("dynamodb_local", request) as opened:
        assert opened.backend is not None
        yield opened.backend


@pytest.mark.dynamodb_local
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_every_query_equals_the_full_state_on_dynamodb_local(
    data: st.DataObject, dynamodb_local_backend: AwsBackend
) -> None:
    """The view's random histories with the log on DynamoDB Local too: each commit asks for the leaf index
    or not, so queries read the entries behind through the index, by the range, or both."""
    suffix = f"-{uuid.uuid4().hex}"
    run_view_history(
        data,
        lambda: _OneTablePerExample(dynamodb_local_backend.queryable_view, suffix),
        lambda: _OneLogPerExample(dynamodb_local_backend.log, suffix),
    )


def test_items_by_prefix_are_exactly_those_under_it(view_store: QueryableViewStore) -> None:
    keys = ["a", "ab", "a\U0010ffff", "a\U0010ffffz", "b", "ba", "\U0010ffff"]
    view_store.write(TABLE, {key: f"value of {key}" for key in keys}, ())
    view_store.write("other-table", {"ab": "another table's"}, ())

    for prefix in ["", "a", "ab", "b", "a\U0010ffff", "\U0010ffff", "c"]:
        expected = {key: f"value of {key}" for key in keys if key.startswith(prefix)}
        assert view_store.with_prefix(TABLE, prefix) == expected, prefix


class _UnprocessingDynamoDB:
    """A DynamoDB client that leaves the last item of each batch unprocessed ``times`` times per item."""

    def __init__(self, table_name: str, times: int) -> None:
        self.table_name, self.times = table_name, times
        self.batches: list[int] = []
        self.left: dict[str, int] = {}
        self.stored: dict[str, dict[str, Any]] = {}

    def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        requests = RequestItems[self.table_name]
        self.batches.append(len(requests))
        last = requests[-1]["PutRequest"]["Item"]
        key = last["snapshot_key"]["S"]
        if self.left.setdefault(key, self.times) > 0:
            self.left[key] -= 1
            requests, unprocessed = requests[:-1], [requests[-1]]
        else:
            unprocessed = []
        for request in requests:
            item = request["PutRequest"]["Item"]
            self.stored[item["snapshot_key"]["S"]] = item
        return {"UnprocessedItems": {self.table_name: unprocessed} if unprocessed else {}}

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        request = RequestItems[self.table_name]
        keys = request["Keys"]
        self.batches.append(len(keys))
        key = keys[-1]["snapshot_key"]["S"]
        unprocessed = []
        if self.left.setdefault(key, self.times) > 0:
            self.left[key] -= 1
            keys, unprocessed = keys[:-1], keys[-1:]
        found = [self.stored[k["snapshot_key"]["S"]] for k in keys if k["snapshot_key"]["S"] in self.stored]
        return {
            "Responses": {self.table_name: found},
            "UnprocessedKeys": {self.table_name: {**request, "Keys": unprocessed}} if unprocessed else {},
        }


def test_reads_of_many_keys_go_in_batches_of_100_at_once_and_unprocessed_keys_are_asked_again() -> None:
    client = _UnprocessingDynamoDB("snapshots", times=0)
    store = DynamoDBQueryableViewStore(client, "snapshots", AwsCaller(sleep=lambda _: None))
    store.write(TABLE, {f"k{i:03d}": f"v{i}" for i in range(250)}, ())
    client.times, client.batches, client.left = 1, [], {}

    found = store.get(TABLE, [f"k{i:03d}" for i in range(260)])

    assert found == {f"k{i:03d}": f"v{i}" for i in range(250)}
    assert sorted(client.batches) == [1, 1, 1, 60, 100, 100]  # each batch's last key asked again


def test_writes_go_in_batches_of_25_and_unprocessed_items_are_sent_again() -> None:
    client = _UnprocessingDynamoDB("snapshots", times=1)
    store = DynamoDBQueryableViewStore(client, "snapshots", AwsCaller(sleep=lambda _: None))
    puts = {f"k{i:03d}": f"v{i}" for i in range(60)}

    store.write(TABLE, puts, ())

    assert len(client.stored) == 60
    assert max(client.batches) == 25
    assert sorted(client.batches) == [1, 1, 1, 10, 25, 25]  # batches go on several threads


def test_items_left_unprocessed_round_after_round_are_an_error_naming_the_table() -> None:
    client = _UnprocessingDynamoDB("snapshots", times=100)
    store = DynamoDBQueryableViewStore(client, "snapshots", AwsCaller(sleep=lambda _: None))

    with pytest.raises(ThrottledError, match="queryable view of table 'table-1'.*unprocessed"):
        store.write(TABLE, {"k": "v"}, ())


def test_a_one_leaf_region_query_reads_one_index_item_and_no_level_of_the_tree() -> None:
    items = InMemoryQueryableViewStore()
    points = tuple(f"k{i:03d}" for i in range(1, 200))
    table = Table(items, points)
    table.update()
    leaf = table.store.state().partition_tree.leaf_for_key(["k100x"])
    table.store.commit(AddFiles((ref(data_key(TABLE, "f"), leaf.id),)))
    table.update()
    items.items_read = 0

    answer = table.view.references_in_region(leaf.region)

    # One index item (the leaf's, naming its ancestors) and the one reference: no partition item.
    assert items.items_read == 2
    state = table.store.state()
    assert answer.value == {
        p.id: state.references_in_partition(p.id) for p in state.partition_tree.overlapping(leaf.region)
    }


@pytest.mark.dynamodb_local
def test_a_region_query_is_sent_only_the_entries_behind_that_may_change_its_answer(
    request: pytest.FixtureRequest,
) -> None:
    with open_ports("dynamodb_local", request) as opened:
        backend = opened.backend
        assert backend is not None
        store = TransactionLogStateStore(
            TABLE, STRING_SCHEMA, backend.log, SnapshotStore(backend.snapshot_metadata, backend.blobs)
        )
        view = QueryableView(TABLE, STRING_SCHEMA, backend.log, backend.queryable_view)
        store.commit(
            InitialisePartitions(tuple(tree(STRING_SCHEMA, tuple(f"k{i:02d}" for i in range(1, 40)))))
        )
        view.update(store.load)
        state = store.state()
        leaf = state.partition_tree.leaf_for_key(["k20x"])
        others = sorted(p.id for p in state.leaf_partitions() if p.id != leaf.id)
        sent: list[str] = []  # the type of each log entry a Query of the log sends

        def count(parsed: dict[str, Any], **_: Any) -> None:
            sent.extend(
                i["transaction_type"]["S"] for i in parsed.get("Items", []) if "transaction_type" in i
            )

        backend.dynamodb.meta.events.register("after-call.dynamodb.Query", count)

        def query() -> list[str]:
            sent.clear()
            answer = view.references_in_region(leaf.region)
            latest = store.state()
            assert answer.transaction_number == latest.transaction_number
            assert answer.value == {
                p.id: latest.references_in_partition(p.id)
                for p in latest.partition_tree.overlapping(leaf.region)
            }
            return list(sent)

        # Behind the view: 30 adds elsewhere (one also adding to the leaf), and one to the leaf alone.
        for i, other in enumerate(others[:30]):
            into = (other, leaf.id) if i == 7 else (other,)
            store.commit(AddFiles(tuple(ref(data_key(TABLE, f"f{i}-{p}"), p) for p in into)))
        store.commit(AddFiles((ref(data_key(TABLE, "in-leaf"), leaf.id),)))
        assert query() == ["AddFiles", "AddFiles"]
        # An add to a partition above a leaf lists no leaves, and is sent to every query.
        store.commit(AddFiles((ref(data_key(TABLE, "above"), "root"),)))
        assert query() == ["AddFiles", "AddFiles", "AddFiles"]

        # An entry that is not an add may change anything: sent it with the three adds, the query then reads
        # every entry behind.
        split = state.partitions_by_id[others[0]]
        low = split.region.ranges[0].min
        assert isinstance(low, str)
        parent, left, right = split.split(0, f"{low}5", "left", "right")
        store.commit(SplitPartition(parent, (left, right)))
        assert query() == ["AddFiles"] * 3 + ["SplitPartition"] + ["AddFiles"] * 32 + ["SplitPartition"]

        view.update(store.load)
        assert query() == []


@pytest.mark.parametrize("name", ["plain", 'é "quoted" \\ ünïcode'])
def test_adds_behind_the_view_are_merged_whatever_their_names(
    view_store: QueryableViewStore, name: str
) -> None:
    table = Table(view_store)
    table.update()
    leaves = sorted(p.id for p in table.store.state().leaf_partitions())
    gone, kept = data_key(TABLE, f"{name} gone"), data_key(TABLE, f"{name} kept")
    # Behind the view: an add, a delete naming the added file (applied only if the add was), and an add
    # no other entry names.
    table.store.commit(AddFiles((), unreferenced_files=(gone,)))
    table.store.commit(DeleteFiles((gone,)))
    table.store.commit(AddFiles((ref(kept, leaves[0]),)))

    latest = table.store.state()
    assert table.view.references_in_partition(leaves[0]).value == latest.references_in_partition(leaves[0])
    assert table.view.file(gone).value is None
    assert table.view.file(kept).value == latest.files_by_name[kept]


class PrefixCountingStore(InMemoryQueryableViewStore):
    """The twin, recording the prefixes of the references a query reads (one Query each on DynamoDB)."""

    def __init__(self) -> None:
        super().__init__()
        self.prefixes: list[str] = []

    def with_prefix(self, table_id: str, prefix: str) -> dict[str, ViewValue]:
        self.prefixes.append(prefix)
        return super().with_prefix(table_id, prefix)


def test_a_one_leaf_region_query_reads_references_only_of_the_partitions_holding_some() -> None:
    items = PrefixCountingStore()
    table = Table(items, tuple(f"k{i:03d}" for i in range(1, 200)))
    state = table.store.state()
    leaf = state.partition_tree.leaf_for_key(["k100x"])
    assert len(state.partition_tree.overlapping(leaf.region)) > 5  # the leaf and its ancestors
    table.store.commit(AddFiles((ref(data_key(TABLE, "f"), leaf.id),)))
    table.update()

    def query() -> tuple[dict[str, list[FileReference]], list[str]]:
        items.prefixes.clear()
        answer = table.view.references_in_region(leaf.region).value
        latest = table.store.state()
        assert answer == {
            p.id: latest.references_in_partition(p.id) for p in latest.partition_tree.overlapping(leaf.region)
        }
        return answer, list(items.prefixes)

    # None of the partitions above the leaf holds a reference: only the leaf's are read.
    assert query()[1] == [references_prefix(leaf.id)]

    # The leaf split: it holds its reference until that is split down, and is then read as an ancestor.
    parent, left, right = leaf.split(0, "k100y", "left", "right")
    table.store.commit(SplitPartition(parent, (left, right)))
    for step in ("behind", "updated"):
        answer, read = query()
        assert [r.filename for r in answer[leaf.id]] == [data_key(TABLE, "f")]
        assert references_prefix(leaf.id) in read, step
        table.update()

    table.store.commit(
        SplitFileReferences(
            (SplitFileReferenceRequest(data_key(TABLE, "f"), leaf.id, (ref(data_key(TABLE, "f"), left.id),)),)
        )
    )
    table.update()
    answer, read = query()
    assert answer[leaf.id] == [] and [r.filename for r in answer[left.id]] == [data_key(TABLE, "f")]
    assert sorted(read) == sorted(references_prefix(p.id) for p in (left, right))  # the two leaves only


@pytest.mark.parametrize(
    "values",
    [
        [-(2**63), -(2**31), -1, 0, 1, 255, 256, 2**31 - 1, 2**63 - 1],
        ["", "\x00", "\x01", "a", "a\x00", "ab", "b", "é", "\uffff", "\U00010000", "\U0010ffff"],
        [b"", b"\x00", b"\x00\x00", b"\x01", b"\x7f", b"\x80", b"\xfe", b"\xff", b"\xff\x00"],
    ],
    ids=["int and long", "string", "bytes"],
)
def test_index_keys_sort_as_the_bounds_do_in_every_store(
    view_store: QueryableViewStore, values: list[object]
) -> None:
    leaves = [
        PlacedPartition(Partition(f"leaf-{i}", Region((Range(v),))), ("root",), v)  # type: ignore[arg-type]
        for i, v in enumerate(values)
    ]
    view_store.write(TABLE, {index_key(leaf): leaf for leaf in leaves}, ())

    read = list(view_store.descending(TABLE, INDEX_PREFIX, INDEX_PREFIX + "\U0010ffff"))

    assert read == list(reversed(leaves))
