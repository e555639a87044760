"""Planning a Spark read through the queryable view against a full load, by the leaves the region covers.

A table of ``--references`` file references over ``--leaves`` leaves (``bench_model.big_state``) is
written as a snapshot (S3 on a moto server) and as a view (DynamoDB Local, the instance's snapshots table).
Then, in one run and one process, the read of a region covering 1, 10, 100, 1,000 ... leaves is planned
both ways, as the data source plans it (:func:`spark_client.view_plan.plan_latest`):

- through the view: the leaves counted from the view's index (each leaf's item names the partitions above
  it), the view's region query (the index again, the markers of the partitions above the leaves, a Query
  per leaf's and marked partition's references) and the log after the view (through the log's leaf
  index for up to 8 leaves: the table's entries ask for it, as a table with a view's do);
- by a full load: the snapshot and the log after it, then :func:`spark_client.read_plan.plan_read`.

Either way the plan ends by reading the table's record, as the data source's state store does (a table whose
delete began is refused, not read as what is left of it).

Each pair is checked to give the same parts. The script prints both times per leaf count and where the
lines cross (interpolated between the counts measured, on log scales): the leaf count above which a full
load is cheaper, which ``DEFAULT_VIEW_MAX_LEAVES`` should not pass. With ``--behind`` log entries after the
view (and the snapshot), the one-leaf plan is measured again both ways.

What bounds the figures: through the view, round trips to DynamoDB Local in a row (a few per region, one
per overlapping leaf's references); the full load, the snapshot's bytes (read from moto's S3 and
decoded, CPU). The machine is shared and loaded, so the figures move with it; both lines are measured in
the same run, alternately, so their crossing moves less than either.

    python benchmarks/bench_view_planning.py [--references 1000000] [--leaves 100000] [--behind 1000]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_model import SCHEMA, big_state  # noqa: E402
from bench_queryable_view import endpoints  # noqa: E402
from results import Figure, record  # noqa: E402

from spark_client.read_plan import ReadPart, plan_read  # noqa: E402
from spark_client.view_plan import DEFAULT_VIEW_MAX_LEAVES, plan_latest  # noqa: E402
from statestore.adapters.aws.backend import AwsBackend  # noqa: E402
from statestore.codec.transaction_json import encode_transaction  # noqa: E402
from statestore.engine.log_store import TransactionLogStateStore  # noqa: E402
from statestore.engine.queryable_view import QueryableView  # noqa: E402
from statestore.engine.snapshots import SnapshotStore  # noqa: E402
from statestore.instance import ResourceNames  # noqa: E402
from statestore.model import layout  # noqa: E402
from statestore.model.files import FileReference  # noqa: E402
from statestore.model.partitions import Partition, Range, Region  # noqa: E402
from statestore.store.ports import LogEntry  # noqa: E402
from statestore.store.tables import TableInfo  # noqa: E402
from statestore.transactions import AddFiles, ClearFiles  # noqa: E402

TABLE = "bench-view-planning"
UNLIMITED = 10**9


def region_of_leaves(leaves: list[Partition], start: int, count: int) -> Region:
    """The region exactly covering ``count`` leaves (in key order) from ``start``."""
    low = leaves[start].region.ranges[0].min
    high = leaves[start + count - 1].region.ranges[0].max
    return Region((Range(low, high),))


def timed(plan: Callable[[], tuple[list[ReadPart], bool]], repeat: int) -> tuple[float, list[ReadPart], bool]:
    """The median seconds of ``repeat`` plans, the last plan's parts and whether it went through the view."""
    times = []
    parts: list[ReadPart] = []
    through_view = False
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        parts, through_view = plan()
        times.append(time.perf_counter() - start)
    return statistics.median(times), parts, through_view


def crossover(points: list[tuple[int, float, float]]) -> float | None:
    """The leaf count where the view's time meets the full load's, interpolated on log scales between
    the two counts measured around it; None if the view is faster at every count (or slower at every)."""
    for (k0, v0, f0), (k1, v1, f1) in zip(points, points[1:], strict=False):
        d0, d1 = math.log(v0 / f0), math.log(v1 / f1)
        if d0 <= 0 < d1:
            share = -d0 / (d1 - d0)
            return math.exp(math.log(k0) + share * (math.log(k1) - math.log(k0)))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--references", type=int, default=1_000_000)
    parser.add_argument("--leaves", type=int, default=100_000)
    parser.add_argument("--counts", default="1,10,100,1000", help="leaf counts of the regions planned")
    parser.add_argument("--behind", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-2")
    counts = sorted({int(c) for c in args.counts.split(",")})
    if counts[-1] > args.leaves:
        parser.error(f"--counts go up to {counts[-1]} leaves; the table has {args.leaves}")
    judge = args.references >= 100_000
    figures: list[Figure] = []

    with endpoints() as (s3, dynamodb):
        resources = ResourceNames.for_instance(f"plan{uuid.uuid4().hex[:8]}")
        backend = AwsBackend.connect(resources, s3, dynamodb_endpoint_url=dynamodb)
        backend.provision()
        state = big_state(1, args.leaves, args.references)
        body, compressed = encode_transaction(ClearFiles())
        backend.log.append(TABLE, LogEntry(1, state.last_update_time or 1, ClearFiles.TYPE, body, compressed))
        snapshots = SnapshotStore(backend.snapshot_metadata, backend.blobs)
        snapshots.write(TABLE, state, created_time=1)
        view = QueryableView(TABLE, SCHEMA, backend.log, backend.queryable_view)
        started = time.perf_counter()
        built = view.rebuild(state)
        print(f"view written: {built.writes:,} items in {time.perf_counter() - started:.0f} s")
        leaves = sorted(state.leaf_partitions(), key=lambda p: p.region.ranges[0].min)
        del state
        calls: list[int] = []
        backend.dynamodb.meta.events.register("before-call.dynamodb", lambda **_: calls.append(1))

        backend.table_index.create(TableInfo(TABLE, TABLE, SCHEMA))

        def store() -> TransactionLogStateStore:
            made = TransactionLogStateStore(TABLE, SCHEMA, backend.log, snapshots, index_leaves=True)
            # As the client's stores: each plan ends by reading the table's record (is its delete begun?).
            made.table_check = partial(backend.table_index.check_live, TABLE)
            return made

        def through_view(region: Region) -> Callable[[], tuple[list[ReadPart], bool]]:
            def plan() -> tuple[list[ReadPart], bool]:
                planned = plan_latest(store(), view, [region], UNLIMITED)
                return planned.parts, planned.through_view

            return plan

        def full_load(region: Region) -> Callable[[], tuple[list[ReadPart], bool]]:
            def plan() -> tuple[list[ReadPart], bool]:
                return plan_read(store().state(), [region]), False

            return plan

        def measure(count: int, label: str) -> tuple[float, float]:
            region = region_of_leaves(leaves, (len(leaves) - count) // 2, count)
            full, full_parts, _ = timed(full_load(region), max(1, min(args.repeat, 3)))
            calls.clear()
            repeat = args.repeat if count <= 100 else 1
            by_view, view_parts, used = timed(through_view(region), repeat)
            assert used, f"{count} leaves were not planned through the view"
            assert view_parts == full_parts, f"{count} leaves: the view's plan differs from the full load's"
            print(
                f"{label}{count:>6,} leaves: through the view {by_view * 1000:8.1f} ms "
                f"({len(calls) / repeat:.0f} DynamoDB calls), full load {full * 1000:8.1f} ms, "
                f"{len(view_parts):,} parts"
            )
            return by_view, full

        points = []
        for count in counts:
            by_view, full = measure(count, "")
            points.append((count, by_view, full))
            figures += [
                Figure(
                    f"plan through the view, {count:,} leaves", by_view * 1000, "ms",
                    bound_by="round trips to DynamoDB Local: a few per region, one per overlapping leaf",
                ),
                Figure(
                    f"plan by a full load, {count:,} leaves", full * 1000, "ms",
                    bound_by="the snapshot's bytes read from moto's S3 and decoded (CPU)",
                ),
            ]  # fmt: skip
        cross = crossover(points)
        if cross is None:
            faster = points[0][1] < points[0][2]
            print(f"the lines do not cross between {counts[0]} and {counts[-1]} leaves "
                  f"({'the view' if faster else 'a full load'} is faster throughout)")  # fmt: skip
        else:
            print(f"the lines cross at about {cross:,.0f} leaves (DEFAULT_VIEW_MAX_LEAVES is "
                  f"{DEFAULT_VIEW_MAX_LEAVES})")  # fmt: skip
            figures.append(
                Figure(
                    "crossover: leaves above which a full load plans faster", cross, "leaves",
                    bound_by="the two lines above: the table's size against round trips per leaf",
                )
            )  # fmt: skip
        at_default = min(points, key=lambda p: abs(math.log(p[0] / DEFAULT_VIEW_MAX_LEAVES)))
        figures.append(
            Figure.judged(
                f"full load / plan through the view at {at_default[0]:,} leaves (the default limit's decade)",
                at_default[2] / at_default[1], "x",
                bound_by="the two lines above, in the same run", at_least=1, judge=judge,
            )
        )  # fmt: skip

        if args.behind:
            writer = store()
            for i in range(args.behind):
                leaf = leaves[i * 7 % len(leaves)].id
                refs = tuple(
                    FileReference(f"{layout.data_prefix(TABLE)}behind-{i}-{j}.parquet", leaf, 100)
                    for j in range(10)
                )
                writer.commit(AddFiles(refs))
            by_view, full = measure(1, f"{args.behind:,} entries behind: ")
            figures += [
                Figure(
                    f"plan through the view, 1 leaf, {args.behind:,} entries behind", by_view * 1000, "ms",
                    bound_by="the entries read from the log and replayed, read twice (the view's query, "
                    "the check for partition changes)",
                ),
                Figure(
                    f"plan by a full load, 1 leaf, {args.behind:,} entries behind", full * 1000, "ms",
                    bound_by="the snapshot and the entries after it",
                ),
            ]  # fmt: skip

    for figure in figures:
        print(f"{figure.verdict:<12} {figure.name}: {figure.value:,.1f} {figure.unit} ({figure.target})")
    record(__file__, figures)


if __name__ == "__main__":
    main()
