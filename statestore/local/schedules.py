"""The snapshot and cleanup schedules, as the local runtime plays them: a scheduler thread invokes
``lambdas.snapshot.handler`` and ``lambdas.cleanup.handler`` with a scheduled event every so many seconds,
as the EventBridge schedules do (each *plans*, queueing one message per table on its FIFO work queue), and
an upkeep poller thread plays the work queues' event source mappings, handing each message alone to the
same handler and letting it be received again after the retry delay when the handler raises.

:class:`UpkeepSchedules` is a part of :class:`statestore.local.runtime.LocalRuntime` (a base class of it);
it works on the runtime's work queues, settings and counts.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statestore.adapters.aws.sqs_queue import SqsCommitQueue
from statestore.errors import StateStoreError
from statestore.instance import ResourceNames
from statestore.local.event_sources import FakeLambdaContext, PollerStats, invoke, pause_after_failures
from statestore.services.upkeep import UpkeepKind

logger = logging.getLogger(__name__)

UPKEEP_IDLE_POLL_SECONDS = 1.0  # how often the upkeep poller looks at empty work queues


def _upkeep_function(kind: UpkeepKind) -> Any:
    """The Lambda module that does ``kind``'s upkeep (imported when first run: the handlers' modules read
    the runtime's environment)."""
    from lambdas import cleanup, snapshot

    return snapshot if kind is UpkeepKind.SNAPSHOT else cleanup


class UpkeepSchedules:
    """The EventBridge schedules and the work queues' event source mappings of a :class:`LocalRuntime`."""

    # The runtime's state this part works on, set by LocalRuntime.__init__ and _start.
    resources: ResourceNames
    region: str
    retry_delay_seconds: int
    snapshot_interval: float | None
    cleanup_interval: float | None
    stats: PollerStats
    work_queues: dict[UpkeepKind, SqsCommitQueue]
    _stop: threading.Event
    _upkeep_busy: threading.Event
    _work_ready: threading.Event
    _stats_lock: threading.Lock
    _upkeep_results: list[tuple[UpkeepKind, str, dict[str, Any] | None, str | None]]

    if TYPE_CHECKING:  # LocalRuntime's and CommitQueueMapping's, which this works beside

        def _queued_messages(self, queue: SqsCommitQueue | None = None) -> int: ...

        def _make_visible(
            self, receipt_handles: list[str], after_seconds: int, queue: SqsCommitQueue | None = None
        ) -> None: ...

    def run_snapshots(self, timeout: float = 120.0) -> dict[str, Any]:
        """Run the snapshot schedule now and wait for its work: the plan (raising what it raises), then each
        queued table's snapshot as the upkeep poller delivers it. Returns ``planned`` (table ids), ``written``
        (table id: transaction number), ``skipped`` (tables that needed none, by the plan or on a second
        look), ``errors`` (table id: the failure of its last attempt), and the queryable views the work
        updated (``views``, table id: the transaction number each reached) or failed to (``view_errors``)."""
        start = len(self._upkeep_results)
        plan = self._plan(UpkeepKind.SNAPSHOT)
        works = self._wait_for_work(UpkeepKind.SNAPSHOT, start, timeout)
        return {
            "planned": plan["planned"],
            "written": {t: n for w in works.values() for t, n in w.get("written", {}).items()},
            "skipped": plan["skipped"] + sum(w.get("skipped", 0) for w in works.values()),
            "errors": {t: w["error"] for t, w in works.items() if "error" in w},
            "views": {t: n for w in works.values() for t, n in w.get("views", {}).items()},
            "view_errors": {t: e for w in works.values() for t, e in w.get("view_errors", {}).items()},
        }

    def run_cleanup(self, timeout: float = 120.0) -> dict[str, Any]:
        """Run the cleanup schedule now and wait for its work (see :meth:`run_snapshots`). Returns the tables
        ``planned``, how many were cleaned up (``tables``), the counts summed over them
        (``log_entries_deleted``, ...) and ``errors`` (table id: the failure of its last attempt)."""
        start = len(self._upkeep_results)
        plan = self._plan(UpkeepKind.CLEANUP)
        works = self._wait_for_work(UpkeepKind.CLEANUP, start, timeout)
        done = [w for w in works.values() if "error" not in w]
        counts = (
            "tables", "log_entries_deleted", "snapshots_deleted", "data_files_deleted",
            "refused_files", "claims_released", "orphan_files_deleted", "skipped",
        )  # fmt: skip
        return {
            "planned": plan["planned"],
            **{name: sum(w.get(name, 0) for w in done) for name in counts},
            "errors": {t: w["error"] for t, w in works.items() if "error" in w},
        }

    def _plan(self, kind: UpkeepKind) -> dict[str, Any]:
        """Invoke ``kind``'s handler with a scheduled event (it queues the tables' work), then wake the
        upkeep poller, so the work is delivered at once rather than after its idle wait (work first
        delivered more than a period after its plan is superseded, and local periods can be short)."""
        try:
            return dict(
                invoke(_upkeep_function(kind), {"source": "statestore.local"}, self._context(kind.value))
            )
        finally:
            self._work_ready.set()

    def _wait_for_work(self, kind: UpkeepKind, start: int, timeout: float) -> dict[str, dict[str, Any]]:
        """Wait until ``kind``'s work queue is drained; returns each table's last outcome since ``start``
        (its handler's summary, or ``{"error": ...}``)."""
        deadline = time.monotonic() + timeout
        queue = self.work_queues[kind]
        while self._queued_messages(queue) or self._upkeep_busy.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{kind.value} work still queued on {queue.queue_url} after {timeout:.0f}s"
                )
            time.sleep(0.1)
        with self._stats_lock:
            results = self._upkeep_results[start:]
        outcomes: dict[str, dict[str, Any]] = {}
        for result_kind, table_id, summary, error in results:
            if result_kind is kind:
                outcomes[table_id] = summary if summary is not None else {"error": error}
        return outcomes

    def _context(self, function: str) -> FakeLambdaContext:
        return FakeLambdaContext.for_invocation(
            f"statestore-{self.resources.instance_id}-{function}", self.region, timeout_seconds=900.0
        )

    # --- the work queues' event source mappings ----------------------------------------------------

    def _poll_upkeep(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._work_ready.clear()
                delivered = 0
                for kind, queue in self.work_queues.items():
                    event = queue.receive_event(10, 0)
                    if event["Records"]:
                        self._upkeep_busy.set()
                        for record in event[
                            "Records"
                        ]:  # one table per invocation, as the mapping's batch of 1
                            self._deliver_work(kind, queue, record)
                        delivered += len(event["Records"])
                    self._upkeep_busy.clear()
                failures = 0
                if not delivered:
                    # Idle: look again in a second. Polling moto's queues more often takes CPU from the
                    # committer's poller and the server under load; work waits at most this long.
                    self._work_ready.wait(UPKEEP_IDLE_POLL_SECONDS)
            except StateStoreError as e:
                failures += 1
                logger.warning("the upkeep poller could not reach its queues (will retry): %s", e)
                self._stop.wait(pause_after_failures(failures))
            except Exception:
                failures += 1
                logger.exception("the upkeep poller failed (will retry)")
                self._stop.wait(pause_after_failures(failures))
            finally:
                self._upkeep_busy.clear()

    def _deliver_work(self, kind: UpkeepKind, queue: SqsCommitQueue, record: dict[str, Any]) -> None:
        try:
            table_id = str(json.loads(record["body"]).get("table_id", "?"))
        except (ValueError, AttributeError):
            table_id = "?"
        summary: dict[str, Any] | None = None
        error: str | None = None
        try:
            summary = dict(invoke(_upkeep_function(kind), {"Records": [record]}, self._context(kind.value)))
            queue.delete([record["receiptHandle"]])
        except Exception as e:
            # As the event source mapping does when the function fails: the message is received again.
            logger.warning("%s of table %s failed (will be retried): %s", kind.value, table_id, e)
            error = str(e)
            self._make_visible([record["receiptHandle"]], self.retry_delay_seconds, queue)
        with self._stats_lock:
            self.stats.upkeep_work += 1
            self.stats.upkeep_errors += error is not None
            self._upkeep_results.append((kind, table_id, summary, error))

    # --- the schedules --------------------------------------------------------------------------

    def _run_schedules(self) -> None:
        schedules: list[tuple[str, float, Callable[[], dict[str, Any]]]] = []
        if self.snapshot_interval is not None:
            # As EventBridge does: invoke the function to plan; the upkeep poller delivers the work.
            schedules.append(("snapshot", self.snapshot_interval, lambda: self._plan(UpkeepKind.SNAPSHOT)))
        if self.cleanup_interval is not None:
            schedules.append(("cleanup", self.cleanup_interval, lambda: self._plan(UpkeepKind.CLEANUP)))
        now = time.monotonic()
        due = {name: now + interval for name, interval, _ in schedules}
        while True:
            wait = max(0.0, min(due.values()) - time.monotonic())
            if self._stop.wait(wait):
                return
            for name, interval, run in schedules:
                if time.monotonic() < due[name]:
                    continue
                due[name] = time.monotonic() + interval
                try:
                    summary = run()
                    logger.info("%s: %s", name, summary)
                except Exception as e:
                    with self._stats_lock:
                        self.stats.schedule_errors += 1
                    logger.warning("scheduled %s failed: %s", name, e)
                with self._stats_lock:
                    if name == "snapshot":
                        self.stats.snapshot_runs += 1
                    else:
                        self.stats.cleanup_runs += 1
