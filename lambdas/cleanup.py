"""The cleanup Lambda, in two modes: on its schedule it *plans* (queues a cleanup of every table, one
message per table, and of every deleted table with a tombstone); fed by its work queue it cleans up the one
table of each message (old log entries and snapshots, garbage and orphan data files, expired claims; for a
deleted table, what late writers left under its prefix). See :mod:`statestore.services.upkeep`."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from lambdas._runtime import Runtime, cleanup_policy, first_received_at, runtime, upkeep_period_ms
from statestore.services.upkeep import UpkeepKind, UpkeepWork, plan_cleanup, run_cleanup_work

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "statestore"))


class CleanupFailedError(Exception):
    """A table could not be cleaned up; fails the invocation so an alarm sees it and its message is
    retried (then dead-lettered)."""


def plan(rt: Runtime) -> dict[str, Any]:
    made = plan_cleanup(
        rt.tables,
        rt.upkeep_queue(UpkeepKind.CLEANUP),
        period_ms=upkeep_period_ms(UpkeepKind.CLEANUP),
        blobs=rt.blobs,
    )
    metrics.add_metric(name="CleanupTablesPlanned", unit=MetricUnit.Count, value=len(made.planned))
    metrics.add_metric(name="CleanupDeletedTablesPlanned", unit=MetricUnit.Count, value=len(made.leftovers))
    summary = {"planned": list(made.planned), "deleted_tables": list(made.leftovers)}
    logger.info("cleanup plan", extra=summary)
    return summary


def work(rt: Runtime, records: list[dict[str, Any]]) -> dict[str, Any]:
    policy = cleanup_policy()
    outcomes = [
        run_cleanup_work(
            UpkeepWork.from_body(record["body"]),
            rt.tables,
            rt.log,
            rt.snapshots,
            rt.blobs,
            first_received_at=first_received_at(record),
            policy=policy,
            file_store=rt.file_store,
        )
        for record in records
    ]
    reports = [o.report for o in outcomes if o.report is not None]
    errors = {o.table_id: o.error for o in outcomes if o.error is not None}
    totals = {
        "log_entries_deleted": sum(r.log_entries_deleted for r in reports),
        "snapshots_deleted": sum(r.snapshots_deleted for r in reports),
        "data_files_deleted": sum(r.data_files_deleted for r in reports),
        "refused_files": sum(len(r.refused_files) for r in reports),
        "claims_released": sum(r.claims_released for r in reports),
        "orphan_files_deleted": sum(r.orphan_files_deleted for r in reports),
        # What late writers put under deleted tables' prefixes (statestore.services.leftovers).
        "leftover_objects_deleted": sum(o.leftovers.objects_deleted for o in outcomes if o.leftovers),
    }
    for name, value in totals.items():
        metrics.add_metric(
            name="".join(w.title() for w in name.split("_")), unit=MetricUnit.Count, value=value
        )
    for report in reports:
        if report.refused_files:
            logger.warning(
                "unreferenced files outside the table's prefix were not deleted", extra=asdict(report)
            )
        if report.released_jobs:
            logger.warning(
                "released expired claims: their compaction jobs are presumed dead", extra=asdict(report)
            )
    skipped = {o.table_id: o.skipped for o in outcomes if o.skipped is not None}
    summary = {"tables": len(reports), **totals, "skipped": len(skipped), "errors": errors}
    logger.info("cleanup", extra={**summary, "skipped_because": skipped})
    if errors:
        raise CleanupFailedError(f"could not clean up {len(errors)} table(s): {errors}")
    return summary


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rt = runtime()
    return work(rt, event["Records"]) if "Records" in event else plan(rt)
