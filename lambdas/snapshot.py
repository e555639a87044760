"""The snapshot Lambda, in two modes: on its schedule it *plans* (queues a snapshot of every table whose log
moved, one message per table, checked without loading any); fed by its work queue it snapshots the one table
of each message (the event source hands it one at a time), then updates its queryable view if it keeps one.
See :mod:`statestore.services.upkeep`."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from lambdas._runtime import (
    Runtime,
    first_received_at,
    runtime,
    snapshot_min_transactions,
    upkeep_period_ms,
)
from statestore.services.upkeep import UpkeepKind, UpkeepWork, plan_snapshots, run_snapshot_work
from statestore.services.view_upkeep import VIEW_FAILURES_METRIC

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "statestore"))


class SnapshotFailedError(Exception):
    """A table could not be checked or snapshotted; fails the invocation so an alarm sees it (and, for work
    from the queue, so its message is retried, then dead-lettered)."""


def plan(rt: Runtime) -> dict[str, Any]:
    made = plan_snapshots(
        rt.tables,
        rt.log,
        rt.snapshots,
        rt.upkeep_queue(UpkeepKind.SNAPSHOT),
        period_ms=upkeep_period_ms(UpkeepKind.SNAPSHOT),
        min_transactions=snapshot_min_transactions(),
        views=rt.views,
    )
    metrics.add_metric(name="SnapshotTablesPlanned", unit=MetricUnit.Count, value=len(made.planned))
    metrics.add_metric(name="SnapshotTablesSkipped", unit=MetricUnit.Count, value=len(made.skipped))
    summary = {"planned": list(made.planned), "skipped": len(made.skipped), "errors": made.errors}
    logger.info("snapshot plan", extra=summary)
    if made.errors:
        raise SnapshotFailedError(f"could not check {len(made.errors)} table(s): {made.errors}")
    return summary


def work(rt: Runtime, records: list[dict[str, Any]]) -> dict[str, Any]:
    outcomes = [
        run_snapshot_work(
            UpkeepWork.from_body(record["body"]),
            rt.tables,
            rt.log,
            rt.snapshots,
            first_received_at=first_received_at(record),
            min_transactions=snapshot_min_transactions(),
            stores=rt.snapshot_stores,
            views=rt.views,
        )
        for record in records
    ]
    rt.snapshot_stores.settle()  # a table over the warm budget is dropped now, not kept until the next
    written = {o.table_id: o.snapshot.transaction_number for o in outcomes if o.snapshot is not None}
    errors = {o.table_id: o.error for o in outcomes if o.error is not None}
    skipped = {o.table_id: o.skipped for o in outcomes if o.skipped is not None}
    metrics.add_metric(name="SnapshotsWritten", unit=MetricUnit.Count, value=len(written))
    metrics.add_metric(name="SnapshotTablesSkipped", unit=MetricUnit.Count, value=len(skipped))
    views = [o.view for o in outcomes if o.view is not None]
    moved = {v.table_id: v.result.to_number for v in views if v.result is not None}
    view_errors = {v.table_id: v.error for v in views if v.error is not None}
    if views:
        # A failed view update fails nothing: the snapshot stands, and the next plan queues the table again.
        # The failure count is what the view's alarm watches.
        metrics.add_metric(name="QueryableViewsUpdated", unit=MetricUnit.Count, value=len(moved))
        metrics.add_metric(name=VIEW_FAILURES_METRIC, unit=MetricUnit.Count, value=len(view_errors))
        metrics.add_metric(
            name="QueryableViewItemWrites",
            unit=MetricUnit.Count,
            value=sum(v.result.writes for v in views if v.result is not None),
        )
    summary = {
        "written": written,
        "skipped": len(skipped),
        "errors": errors,
        "views": moved,
        "view_errors": view_errors,
    }
    logger.info("snapshots", extra={**summary, "skipped_because": skipped})
    if errors:
        raise SnapshotFailedError(f"could not snapshot {len(errors)} table(s): {errors}")
    return summary


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rt = runtime()
    return work(rt, event["Records"]) if "Records" in event else plan(rt)
