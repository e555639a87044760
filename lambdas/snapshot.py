"""The snapshot Lambda (scheduled): snapshot every table whose log moved since its latest snapshot."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from lambdas._runtime import runtime, snapshot_min_transactions
from statestore.cleanup import snapshot_tables

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "statestore"))


class TablesFailedError(Exception):
    """Some tables could not be snapshotted (the others were); fails the invocation so an alarm sees it."""


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rt = runtime()
    outcomes = snapshot_tables(
        rt.tables,
        rt.log,
        rt.snapshots,
        min_transactions=snapshot_min_transactions(),
        stores=rt.snapshot_stores,
    )
    written = {o.table_id: o.snapshot.transaction_number for o in outcomes if o.snapshot is not None}
    errors = {o.table_id: o.error for o in outcomes if o.error is not None}
    skipped = sum(1 for o in outcomes if o.skipped)
    metrics.add_metric(name="SnapshotsWritten", unit=MetricUnit.Count, value=len(written))
    metrics.add_metric(name="SnapshotTablesSkipped", unit=MetricUnit.Count, value=skipped)
    summary = {"written": written, "skipped": skipped, "errors": errors}
    logger.info("snapshots", extra=summary)
    if errors:
        raise TablesFailedError(f"could not snapshot {len(errors)} table(s): {errors}")
    return summary
