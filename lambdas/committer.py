"""The committer Lambda: a batch of commit requests from the SQS FIFO queue -> log entries and statuses.

The whole batch goes to :meth:`statestore.services.committer.BatchCommitter.process` at once (group commit
needs it); the messages it says to retry are reported as ``batchItemFailures``, and with
``skip_group_on_error`` the rest of their table's messages with them, so one table's trouble never holds back
another's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from lambdas._runtime import runtime
from statestore.services.committer import BatchCommitter, MessageOutcome, MessageResult, ReceivedMessage
from statestore.services.committer_stats import BatchStats

logger = Logger()
tracer = Tracer()
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "statestore"))
# The property naming the table in each table's state-size document (infra/dashboard.py queries it).
TABLE_ID_PROPERTY = "TableId"


class RetryLater(Exception):
    """Raised for a message the committer could not process now; it stays on the queue."""


def process_event(event: dict[str, Any], committer: BatchCommitter, context: Any = None) -> dict[str, Any]:
    """Commit an SQS event's messages; returns ``{"batchItemFailures": [...]}``. A local poller calls this."""
    return partial_response(event, run_committer(event, committer), context)


def run_committer(event: dict[str, Any], committer: BatchCommitter) -> list[MessageResult]:
    return committer.process([ReceivedMessage.from_sqs_record(r) for r in event.get("Records", [])])


def partial_response(
    event: dict[str, Any], results: Sequence[MessageResult], context: Any = None
) -> dict[str, Any]:
    by_id = {r.message_id: r for r in results}

    def record_handler(record: SQSRecord) -> str:
        result = by_id[record.message_id]
        if result.retry:
            raise RetryLater(result.reason or "retry")
        return result.outcome.value

    processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    try:
        return dict(
            process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=context
            )
        )
    except BatchProcessingError:  # every message failed: report them all rather than fail the invocation
        return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}


def add_batch_metrics(results: Sequence[MessageResult], batch: BatchStats) -> None:
    """Add a batch's metrics to the invocation's metric set, and emit each table's state size on its own.

    A table's size is a document of its own with the table's id as a *property* (``TableId``), not a
    dimension: its ``StateReferences`` and ``StatePartitions`` go to the one metric of each name the
    service has (their maximum is the largest table's), and the per-table figures stay in the log, where
    a Logs Insights query (the dashboard's) ranks the tables. A dimension would make a custom metric per
    table, each billed every month whether it moves or not.
    """
    for outcome in MessageOutcome:
        count = sum(1 for r in results if r.outcome is outcome)
        if count:
            metrics.add_metric(
                name=f"Requests{outcome.value.title().replace('_', '')}", unit=MetricUnit.Count, value=count
            )
    metrics.add_metric(name="BatchSize", unit=MetricUnit.Count, value=batch.messages)
    metrics.add_metric(name="LogAppendConflicts", unit=MetricUnit.Count, value=batch.log_append_conflicts)
    metrics.add_metric(name="TableLoadsWarm", unit=MetricUnit.Count, value=batch.warm_loads)
    metrics.add_metric(name="TableLoadsCold", unit=MetricUnit.Count, value=batch.cold_loads)
    metrics.add_metric(name="TableCommitsGuarded", unit=MetricUnit.Count, value=batch.guarded)
    for millis in batch.cold_load_ms:
        metrics.add_metric(name="TableLoadTime", unit=MetricUnit.Milliseconds, value=millis)
    # Guards read from a table's snapshot instead of its state (their commits are among the guarded ones).
    metrics.add_metric(name="TableGuardsCold", unit=MetricUnit.Count, value=batch.guarded_cold)
    for millis in batch.cold_guard_ms:
        metrics.add_metric(name="TableGuardReadTime", unit=MetricUnit.Milliseconds, value=millis)
    # The warm cache (hits and misses are the warm and cold loads above).
    metrics.add_metric(name="WarmCacheEvictions", unit=MetricUnit.Count, value=batch.evictions)
    metrics.add_metric(name="WarmCacheDemotions", unit=MetricUnit.Count, value=batch.demotions)
    metrics.add_metric(name="WarmCacheOversized", unit=MetricUnit.Count, value=batch.oversized)
    metrics.add_metric(name="WarmCacheTables", unit=MetricUnit.Count, value=batch.warm_tables)
    metrics.add_metric(name="WarmCacheBytes", unit=MetricUnit.Bytes, value=batch.warm_bytes)
    for size in batch.table_sizes:
        table_metrics = EphemeralMetrics(namespace=metrics.namespace, service=metrics.service)
        table_metrics.add_metadata(key=TABLE_ID_PROPERTY, value=size.table_id)
        table_metrics.add_metric(name="StateReferences", unit=MetricUnit.Count, value=size.references)
        table_metrics.add_metric(name="StatePartitions", unit=MetricUnit.Count, value=size.partitions)
        table_metrics.flush_metrics()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    committer = runtime().committer()
    results = run_committer(event, committer)
    add_batch_metrics(results, committer.last_batch)
    for r in results:
        if r.outcome in (MessageOutcome.DEAD_LETTERED, MessageOutcome.RETRY):
            logger.warning(
                "commit request not committed", extra={"result": r.__dict__ | {"outcome": r.outcome.value}}
            )
    return partial_response(event, results, context)
