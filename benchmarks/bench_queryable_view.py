"""The queryable view on DynamoDB Local: a one-leaf region query against a full load, in one run.

A table of ``--references`` file references over ``--leaves`` leaves (``bench_model.big_state``) is
written as a snapshot (S3 on a moto server) and as a view (DynamoDB Local, the instance's snapshots table).
Then, in one run:

- the latency of a commit of 10 references to 10 leaves, to a table whose entries ask for the log's leaf
  index (as a table with a view) and to one whose entries do not, interleaved;
- the upkeep's item writes per reference added, over entries of 10 one-reference files each;
- a query of one leaf's region through the view, with 0 and then ``--behind`` log entries after the view
  (it merges them), median of ``--repeat`` in a fresh process, and that process's memory above the
  interpreter with the library and its clients loaded;
- a full load of the state (the snapshot and the log after it), the peer the query is compared with, and
  whose answer the query's is checked against.

Targets (issue 34, judged only at its scale of 1,000,000 references over 100,000 leaves): the query
<= 50 ms and >= 20x faster than the full load; <= 2 item writes per reference added; <= 50 MB of memory.
What bounds the query: round trips to DynamoDB Local (the meta twice, the log's latest number, one read of
the index of the leaves, one read of the markers of the partitions above them, the Queries of the
references of the leaf and of the marked partitions) and, with entries behind, the log's leaf index (the
table keeps a view, so its entries are indexed: the chain item, a Query of the wide hints and one of the
leaf's) and one BatchGetItem of the few entries it names. The query reads the log while it reads the view's
items; that read alone is printed as the floor under it, beside its peers: the same read as a range (one
filtered Query, DynamoDB Local reading every entry behind: what a query does where the index does not
cover the entries behind) and the entries read whole.
The view is written by
the rebuild, whose batches go on several threads: at the issue's scale (about 2.5 million items) that is
most of the run.

    python benchmarks/bench_queryable_view.py [--references 1000000] [--leaves 100000] [--behind 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any
from unittest import mock

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_model import SCHEMA, big_state, current_rss_mb, peak_rss_of_this_program_mb  # noqa: E402
from results import Figure, record  # noqa: E402

from statestore.adapters.aws import log_leaf_index  # noqa: E402
from statestore.adapters.aws.backend import AwsBackend  # noqa: E402
from statestore.codec.transaction_json import encode_transaction  # noqa: E402
from statestore.engine.log_store import TransactionLogStateStore  # noqa: E402
from statestore.engine.queryable_view import QueryableView  # noqa: E402
from statestore.engine.snapshots import SnapshotStore  # noqa: E402
from statestore.instance import ResourceNames  # noqa: E402
from statestore.model import layout  # noqa: E402
from statestore.model.files import FileReference  # noqa: E402
from statestore.model.partitions import Region  # noqa: E402
from statestore.store.ports import LogEntry  # noqa: E402
from statestore.transactions import AddFiles, ClearFiles, InitialisePartitions  # noqa: E402

TABLE = "bench-view"


@contextlib.contextmanager
def endpoints() -> Iterator[tuple[str, str]]:
    from statestore.local.dynamodb_local import DynamoDBLocal
    from statestore.local.moto_server import MotoServer

    with contextlib.ExitStack() as stack:
        moto = MotoServer.start()
        stack.callback(moto.stop)
        ddb = stack.enter_context(DynamoDBLocal.start())
        yield moto.endpoint_url, ddb.endpoint_url


def connect(resources: ResourceNames, s3: str, dynamodb: str) -> AwsBackend:
    return AwsBackend.connect(resources, s3, dynamodb_endpoint_url=dynamodb)


def _query_in_child(args: tuple[Any, ...], out: Any) -> None:
    """In a fresh process: the region query ``repeat`` times; its median, answer and memory growth."""
    resources_json, s3, dynamodb, region, repeat = args
    backend = connect(ResourceNames.from_json(resources_json), s3, dynamodb)
    view = QueryableView(TABLE, SCHEMA, backend.log, backend.queryable_view)
    view.store.meta(TABLE)  # the clients' first call made before the baseline
    calls = []
    backend.dynamodb.meta.events.register("before-call.dynamodb", lambda **_: calls.append(1))
    baseline = current_rss_mb()
    times, answer = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        answer = view.references_in_region(region)
        times.append(time.perf_counter() - start)
    memory = peak_rss_of_this_program_mb() - baseline
    calls_per_query = len(calls) / repeat
    # The floor under the query: the log's read of the entries after the view that may concern the leaf,
    # alone (through the log's leaf index: its chain, the wide hints and the leaf's, then the entries named).
    # Its peers: the same read as a range (one filtered Query: DynamoDB Local reads every entry, sends the
    # few), as without the index; and the entries read whole.
    meta = view.store.meta(TABLE)
    assert meta is not None
    after, latest = meta.transaction_number, backend.log.latest_number(TABLE)
    leaves = [leaf.partition.id for leaf in view._leaves_in(region)]
    indexed, ranged, whole = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        backend.log.read_about(TABLE, after + 1, latest, leaves)
        indexed.append(time.perf_counter() - start)
        with mock.patch.object(log_leaf_index, "numbers_about", return_value=None):  # as if not indexed
            start = time.perf_counter()
            backend.log.read_about(TABLE, after + 1, latest, leaves)
            ranged.append(time.perf_counter() - start)
        start = time.perf_counter()
        list(backend.log.read(TABLE, after + 1))
        whole.append(time.perf_counter() - start)
    reads = (statistics.median(indexed), statistics.median(ranged), statistics.median(whole))
    out.put((statistics.median(times), answer, memory, calls_per_query, reads))


def query_in_child(resources: ResourceNames, s3: str, dynamodb: str, region: Region, repeat: int) -> Any:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(
        target=_query_in_child, args=((resources.to_json(), s3, dynamodb, region, repeat), out)
    )
    child.start()
    result = out.get()
    child.join()
    return result


def commit_latencies(backend: AwsBackend, snapshots: SnapshotStore, rounds: int = 200) -> tuple[float, float]:
    """Median latency of committing an AddFiles of 10 references to 10 leaves to a table whose entries do
    not ask for the log's leaf index and to one whose entries do (a table with a view), interleaved; each
    table of 1,000 leaves, kept warm."""
    tree = big_state(1, 1_000, 1_000).partitions_by_id.values()
    stores: list[tuple[str, TransactionLogStateStore, list[str]]] = []
    times: list[list[float]] = []
    for index_leaves in (False, True):
        table = f"bench-commit-{index_leaves}"
        store = TransactionLogStateStore(table, SCHEMA, backend.log, snapshots, index_leaves=index_leaves)
        store.commit(InitialisePartitions(tuple(tree)))
        stores.append((table, store, [p.id for p in store.state().leaf_partitions()]))
        times.append([])
    for i in range(rounds):
        for (table, store, leaves), taken in zip(stores, times, strict=True):
            refs = tuple(
                FileReference(
                    f"{layout.data_prefix(table)}{i}-{j}.parquet", leaves[(i * 10 + j) % len(leaves)], 1
                )
                for j in range(10)
            )
            start = time.perf_counter()
            store.commit(AddFiles(refs))
            taken.append(time.perf_counter() - start)
    plain, indexed = (statistics.median(t[rounds // 10 :]) * 1000 for t in times)
    return plain, indexed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--references", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=100_000)
    parser.add_argument("--behind", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-2")
    judge = args.references >= 1_000_000 and args.leaves >= 100_000
    figures: list[Figure] = []

    with endpoints() as (s3, dynamodb):
        resources = ResourceNames.for_instance(f"view{uuid.uuid4().hex[:8]}")
        backend = connect(resources, s3, dynamodb)
        backend.provision()
        state = big_state(1, args.leaves, args.references)
        body, compressed = encode_transaction(ClearFiles())
        backend.log.append(TABLE, LogEntry(1, state.last_update_time or 1, ClearFiles.TYPE, body, compressed))
        snapshots = SnapshotStore(backend.snapshot_metadata, backend.blobs)
        snapshots.write(TABLE, state, created_time=1)
        view = QueryableView(TABLE, SCHEMA, backend.log, backend.queryable_view)
        started = time.perf_counter()
        built = view.rebuild(state)
        took = time.perf_counter() - started
        print(f"view written: {built.writes:,} items in {took:.0f} s ({built.writes / took:,.0f} items/s)")

        store = TransactionLogStateStore(TABLE, SCHEMA, backend.log, snapshots, index_leaves=True)
        leaves = sorted(state.leaf_partitions(), key=lambda p: p.region.ranges[0].min)
        leaf = leaves[len(leaves) // 2]
        del state

        def add_entries(count: int, tag: str) -> int:
            added = 0
            for i in range(count):
                refs = tuple(
                    FileReference(
                        f"{layout.data_prefix(TABLE)}{tag}-{i}-{j}.parquet",
                        leaves[(i * 10 + j) % len(leaves)].id,
                        100,
                    )
                    for j in range(10)
                )
                store.commit(AddFiles(refs))
                added += len(refs)
            return added

        plain_ms, indexed_ms = commit_latencies(backend, snapshots)
        print(
            f"commit of 10 references to 10 leaves {plain_ms:.1f} ms, with the leaf index {indexed_ms:.1f} ms"
        )
        figures += [
            Figure(
                "commit latency, table without a view", plain_ms, "ms",
                bound_by="one conditional PutItem on DynamoDB Local",
            ),
            Figure(
                "commit latency, table with a view (the log's leaf index)", indexed_ms, "ms",
                bound_by="one TransactWriteItems of 12 items on DynamoDB Local: the entry, the index's chain "
                "and a hint per leaf",
            ),
        ]  # fmt: skip

        added = add_entries(100, "upkeep")
        writes = view.update(store.load).writes
        figures.append(
            Figure.judged(
                "item writes per reference added (upkeep)", writes / added, "",
                bound_by="the items a reference is held in (f# and r#)", at_most=2, judge=judge,
            )
        )  # fmt: skip
        print(f"upkeep: {writes} item writes for {added} references added")

        for behind in (0, args.behind):
            if behind:
                add_entries(behind, "behind")
            median, answer, memory, calls, (log_read, log_range, log_whole) = query_in_child(
                resources, s3, dynamodb, leaf.region, args.repeat
            )
            loads = []
            for _ in range(3):
                start = time.perf_counter()
                full = store.load()
                loads.append(time.perf_counter() - start)
            expected = {
                p.id: sorted(full.references_in_partition(p.id))
                for p in full.partition_tree.overlapping(leaf.region)
            }
            assert answer.value == expected, "the view's answer differs from the full load's"
            load = statistics.median(loads)
            del full
            print(
                f"{behind:>5} entries behind: one-leaf query {median * 1000:.1f} ms "
                f"({sum(map(len, answer.value.values()))} references, {len(answer.value)} partitions), "
                f"full load {load:.2f} s ({load / median:.0f}x), query memory +{memory:.1f} MB, "
                f"{calls:.0f} DynamoDB calls; the entries behind read alone {log_read * 1000:.1f} ms "
                f"(as a range {log_range * 1000:.1f} ms, whole {log_whole * 1000:.1f} ms)"
            )
            figures += [
                Figure.judged(
                    f"one-leaf region query, {behind} entries behind", median * 1000, "ms",
                    bound_by="round trips to DynamoDB Local; reading and decoding the entries behind",
                    at_most=50, judge=judge,
                ),
                Figure(
                    f"DynamoDB calls per one-leaf query, {behind} entries behind", calls, "",
                    bound_by="the meta twice, the log's latest number, the index, the ancestors' markers, "
                    "a Query of the leaf's references (and of each marked ancestor's) and, with entries "
                    "behind, the log's leaf index (its chain, a Query of the wide hints and one of the "
                    "leaf's) and the entries it names (one BatchGetItem)",
                ),
                Figure(
                    f"the {behind} log entries behind the view read alone", log_read * 1000, "ms",
                    bound_by="four round trips to DynamoDB Local: the log's leaf index and the few entries "
                    "it names (a floor under the query behind)",
                ),
                Figure(
                    f"the {behind} log entries behind the view read as a range", log_range * 1000, "ms",
                    bound_by="DynamoDB Local reading every entry and sending those that may concern the "
                    "leaf (the read without the leaf index, the peer of the one above)",
                ),
                Figure(
                    f"the {behind} log entries behind the view read whole", log_whole * 1000, "ms",
                    bound_by="DynamoDB Local reading and sending every entry, botocore converting them "
                    "(what a query reads when an entry behind is not an add)",
                ),
                Figure.judged(
                    f"full load / query, {behind} entries behind", load / median, "x",
                    bound_by="the snapshot's size against the few items the query reads", at_least=20,
                    judge=judge,
                ),
                Figure.judged(
                    f"querying process memory above the interpreter, {behind} entries behind", memory, "MB",
                    bound_by="the entries merged and their decoded transactions", at_most=50, judge=judge,
                ),
            ]  # fmt: skip
    for figure in figures:
        print(f"{figure.verdict:<12} {figure.name}: {figure.value:.2f} {figure.unit} ({figure.target})")
    record(__file__, figures)


if __name__ == "__main__":
    main()
