"""The commit queue's event source mapping, as the local runtime plays it: a poller thread long-polls the
FIFO commit queue, hands up to ten messages to ``lambdas.committer.handler`` as a Lambda-shaped event,
deletes those not reported in ``batchItemFailures`` and makes the others visible again after the retry
delay. Also the Lambda context the handlers are given, and the poller's counts.

:class:`CommitQueueMapping` is a part of :class:`statestore.local.runtime.LocalRuntime` (a base class of
it), kept here so each file reads as one concern; it works on the runtime's queue, settings and counts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from statestore.adapters.aws.committer_switch import is_paused_locally
from statestore.adapters.aws.sqs_queue import SqsCommitQueue
from statestore.errors import StateStoreError
from statestore.instance import COMMITTER_TIMEOUT_SECONDS, ResourceNames

logger = logging.getLogger(__name__)

PAUSED_CHECK_SECONDS = 1.0  # how often a paused poller looks whether it was resumed


def pause_after_failures(failures: int) -> float:
    """Seconds a poller waits after ``failures`` failed rounds in a row: doubling from 0.4 s, at most 5 s
    (a polling pace, not a retry of one call: no jitter, one poller per queue)."""
    return min(5.0, 0.2 * 2**failures)


def invoke(function: Any, event: dict[str, Any], context: FakeLambdaContext) -> Any:
    """Call the Lambda module ``function``'s handler with ``event`` as Lambda would, then drop the metrics
    it recorded. The handlers run here with ``POWERTOOLS_METRICS_DISABLED``, under which Powertools' flush
    prints nothing and clears nothing (it clears only what it prints): without this, a runtime left
    running would keep every invocation's metric values in memory, and a process that later enables the
    metrics would print them all."""
    try:
        return function.handler(event, context)
    finally:
        function.metrics.clear_metrics()


@dataclass
class PollerStats:
    """What the poller has done since the runtime started (counts of messages unless said otherwise)."""

    batches: int = 0  # handler invocations
    received: int = 0
    redelivered: int = 0  # received with ApproximateReceiveCount > 1
    deleted: int = 0
    failed: int = 0  # reported in batchItemFailures, left for redelivery
    unacknowledged: int = 0  # left on the queue by a simulated crash
    committed: int = 0
    rejected: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    handler_errors: int = 0  # invocations that raised
    snapshot_runs: int = 0  # plans (scheduled, or run_snapshots)
    cleanup_runs: int = 0
    schedule_errors: int = 0  # plans that raised
    upkeep_work: int = 0  # tables' work messages handed to the snapshot and cleanup handlers
    upkeep_errors: int = 0  # ... that raised (left for redelivery)


@dataclass
class FakeLambdaContext:
    """The parts of a Lambda context the handlers (and Powertools) read."""

    function_name: str
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = ""
    aws_request_id: str = ""
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    timeout_seconds: float = 120.0
    _started: float = field(default_factory=time.monotonic, repr=False)

    @classmethod
    def for_invocation(cls, function_name: str, region: str, timeout_seconds: float) -> FakeLambdaContext:
        return cls(
            function_name=function_name,
            invoked_function_arn=f"arn:aws:lambda:{region}:000000000000:function:{function_name}",
            aws_request_id=os.urandom(16).hex(),
            log_group_name=f"/aws/lambda/{function_name}",
            timeout_seconds=timeout_seconds,
        )

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


class CommitQueueMapping:
    """The SQS -> committer Lambda event source mapping of a :class:`LocalRuntime`."""

    # The runtime's state this part works on, set by LocalRuntime.__init__ and _start.
    resources: ResourceNames
    region: str
    poll_wait_seconds: int
    retry_delay_seconds: int
    stats: PollerStats
    queue: SqsCommitQueue
    _sqs: Any
    _stop: threading.Event
    _busy: threading.Event
    _stats_lock: threading.Lock
    _crashes_to_simulate: int

    def _poll(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if is_paused_locally(self._sqs, self.queue.queue_url, self.queue.call):
                    # `statestore committer pause` tagged the queue: leave the messages on it.
                    self._stop.wait(PAUSED_CHECK_SECONDS)
                    continue
                event = self.queue.receive_event(10, self.poll_wait_seconds)
                if event["Records"]:
                    self._busy.set()
                    self._deliver(event)
                failures = 0
            except StateStoreError as e:
                failures += 1
                logger.warning("the commit queue poller could not reach the queue (will retry): %s", e)
                self._stop.wait(pause_after_failures(failures))
            except Exception:
                failures += 1
                logger.exception("the commit queue poller failed (will retry)")
                self._stop.wait(pause_after_failures(failures))
            finally:
                self._busy.clear()

    def _deliver(self, event: dict[str, Any]) -> None:
        from lambdas import committer
        from lambdas._runtime import runtime

        records = event["Records"]
        stats = runtime().committer().stats
        before = replace(stats)
        try:
            response = invoke(
                committer,
                event,
                FakeLambdaContext.for_invocation(self._function_name, self.region, COMMITTER_TIMEOUT_SECONDS),
            )
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            handler_error = False
        except Exception:
            # As Lambda does when a function fails: the whole batch is retried.
            logger.exception("the committer handler failed; its %d message(s) will be retried", len(records))
            failed = {r["messageId"] for r in records}
            handler_error = True
        after = stats
        with self._stats_lock:
            crash = self._crashes_to_simulate > 0
            if crash:
                self._crashes_to_simulate -= 1

        if crash:
            self._make_visible([r["receiptHandle"] for r in records], 0)
        else:
            self.queue.delete([r["receiptHandle"] for r in records if r["messageId"] not in failed])
            self._make_visible(
                [r["receiptHandle"] for r in records if r["messageId"] in failed], self.retry_delay_seconds
            )

        with self._stats_lock:
            s = self.stats
            s.batches += 1
            s.received += len(records)
            s.redelivered += sum(
                1 for r in records if int(r["attributes"].get("ApproximateReceiveCount", 1)) > 1
            )
            s.handler_errors += handler_error
            if crash:
                s.unacknowledged += len(records)
            else:
                s.deleted += len(records) - len(failed)
                s.failed += len(failed)
            s.committed += after.committed - before.committed
            s.rejected += after.rejected - before.rejected
            s.duplicates += after.duplicates - before.duplicates
            s.dead_lettered += after.dead_letters - before.dead_letters
        logger.info(
            "committer batch of %d: %d committed, %d rejected, %d duplicate, %d dead-lettered, %d to retry%s",
            len(records),
            after.committed - before.committed,
            after.rejected - before.rejected,
            after.duplicates - before.duplicates,
            after.dead_letters - before.dead_letters,
            len(failed),
            " (simulated crash: not acknowledged)" if crash else "",
        )

    @property
    def _function_name(self) -> str:
        return f"statestore-{self.resources.instance_id}-committer"

    def _make_visible(
        self, receipt_handles: list[str], after_seconds: int, queue: SqsCommitQueue | None = None
    ) -> None:
        """Let messages be received again after ``after_seconds``, not the queue's visibility timeout."""
        queue = queue or self.queue
        for start in range(0, len(receipt_handles), 10):
            chunk = receipt_handles[start : start + 10]
            queue.call(
                f"change the visibility of {len(chunk)} message(s) on {queue.queue_url}",
                self._sqs.change_message_visibility_batch,
                QueueUrl=queue.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": after_seconds}
                    for i, h in enumerate(chunk)
                ],
            )
