"""The cleanup Lambda (scheduled): old log entries and snapshots, and garbage data files, of every table."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from lambdas._runtime import cleanup_policy, runtime
from statestore.cleanup import cleanup_tables

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "statestore"))


class TablesFailedError(Exception):
    """Some tables could not be cleaned up (the others were); fails the invocation so an alarm sees it."""


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rt = runtime()
    outcomes = cleanup_tables(rt.tables, rt.log, rt.snapshots, rt.blobs, policy=cleanup_policy())
    reports = [o.report for o in outcomes if o.report is not None]
    errors = {o.table_id: o.error for o in outcomes if o.error is not None}
    totals = {
        "log_entries_deleted": sum(r.log_entries_deleted for r in reports),
        "snapshots_deleted": sum(r.snapshots_deleted for r in reports),
        "data_files_deleted": sum(r.data_files_deleted for r in reports),
        "refused_files": sum(len(r.refused_files) for r in reports),
        "claims_released": sum(r.claims_released for r in reports),
        "orphan_files_deleted": sum(r.orphan_files_deleted for r in reports),
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
    summary = {"tables": len(outcomes), **totals, "errors": errors}
    logger.info("cleanup", extra=summary)
    if errors:
        raise TablesFailedError(f"could not clean up {len(errors)} table(s): {errors}")
    return summary
