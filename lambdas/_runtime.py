"""What a Lambda container's handlers share, built once per container: clients, adapters, warm committer.

Every piece is built on first use, so each handler builds, and its role must allow, only what it uses:
the snapshot and cleanup handlers look up only their own work queue, and only when they plan; only the
committer's role may look up the dead-letter queue. Names come from
``ResourceNames.from_environment()``; endpoints from the standard AWS settings (``AWS_ENDPOINT_URL`` points
every client at a local emulator). Tests and the local runner can
install their own :class:`Runtime` (e.g. :meth:`Runtime.in_memory`) with :func:`use_runtime`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property, partial
from typing import Any

from statestore import sizing
from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.clients import make_client
from statestore.codec.parquet import freeze_loaded_states
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.instance import (
    POSTGRES_HOST_ENV,
    POSTGRES_SECRET_ARN_ENV,
    POSTGRES_SSLMODE_ENV,
    POSTGRES_URL_ENV,
    ResourceNames,
)
from statestore.model.clock import now_millis
from statestore.services.cleanup_policy import CleanupPolicy, policy_from_environment
from statestore.services.committer import BatchCommitter
from statestore.services.upkeep import (
    DEFAULT_UPKEEP_PERIOD_MINUTES,
    UPKEEP_PERIOD_ENV,
    UpkeepKind,
    period_ms_from_minutes,
)
from statestore.services.view_upkeep import views_kept
from statestore.services.warm_cache import WARM_CACHE_MB_ENV, WarmCache
from statestore.sizing import WarmBudget
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.ports import (
    BlobStore,
    CommitQueue,
    CommitStatusStore,
    FileReferenceStore,
    TableIndex,
    TransactionLogStore,
)
from statestore.store.view_ports import QueryableViewStore


class Runtime:
    """The ports the handlers use. Pieces given to the constructor are used as they are; the others are built
    from ``names`` on first use (connecting to ``endpoint_url``, or AWS itself when None)."""

    def __init__(
        self,
        tables: TableIndex | None = None,
        log: TransactionLogStore | None = None,
        snapshots: SnapshotStore | None = None,
        blobs: BlobStore | None = None,
        dead_letters: CommitQueue | None = None,
        upkeep_queues: Mapping[UpkeepKind, CommitQueue] | None = None,
        file_store: FileReferenceStore | None = None,
        queryable_view: QueryableViewStore | None = None,
        *,
        names: ResourceNames | None = None,
        endpoint_url: str | None = None,
    ) -> None:
        self.names = names
        self.endpoint_url = endpoint_url
        given = {
            "tables": tables,
            "log": log,
            "snapshots": snapshots,
            "blobs": blobs,
            "dead_letters": dead_letters,
            "file_store": file_store,
            "queryable_view": queryable_view,
        }
        # A value in the instance's __dict__ takes the place of the cached_property of that name.
        self.__dict__.update({name: piece for name, piece in given.items() if piece is not None})
        self._upkeep_queues: dict[UpkeepKind, CommitQueue] = dict(upkeep_queues or {})
        self._committer: BatchCommitter | None = None

    @cached_property
    def snapshot_stores(self) -> WarmCache[TransactionLogStateStore]:
        """The snapshot worker's tables, kept warm between invocations of the same container within the
        budget :func:`warm_budget` reads from the environment."""
        budget = warm_budget()
        return WarmCache(budget.bytes, _store_bytes, load_factor=budget.load_factor, name="snapshot worker")

    @classmethod
    def for_aws(cls, names: ResourceNames, endpoint_url: str | None = None) -> Runtime:
        """The instance ``names`` on AWS (or an emulator at ``endpoint_url``); nothing connects until used."""
        return cls(names=names, endpoint_url=endpoint_url)

    @classmethod
    def in_memory(cls) -> Runtime:
        """Every piece in memory, for tests."""
        blobs = InMemoryBlobStore()
        return cls(
            tables=InMemoryTableIndex(),
            log=InMemoryTransactionLog(blobs),
            snapshots=SnapshotStore(InMemorySnapshotMetadataStore(), blobs),
            blobs=blobs,
            dead_letters=InMemoryCommitQueue(),
            upkeep_queues={kind: InMemoryCommitQueue() for kind in UpkeepKind},
            queryable_view=InMemoryQueryableViewStore(),
        )

    @cached_property
    def _backend(self) -> AwsBackend:
        # Creating clients and adapters makes no AWS call; only using them does.
        return AwsBackend.connect(self._names(), self.endpoint_url)

    @cached_property
    def tables(self) -> TableIndex:
        return self._backend.table_index

    @cached_property
    def log(self) -> TransactionLogStore:
        return self._backend.log

    @cached_property
    def snapshots(self) -> SnapshotStore:
        return SnapshotStore(self._backend.snapshot_metadata, self._backend.blobs)

    @cached_property
    def blobs(self) -> BlobStore:
        return self._backend.blobs

    @cached_property
    def queryable_view(self) -> QueryableViewStore:
        """The items of the tables' queryable views (beside the snapshot records)."""
        return self._backend.queryable_view

    @property
    def views(self) -> QueryableViewStore | None:
        """The view store when the deployment keeps queryable views (the stack option ``queryable_views``,
        as :func:`statestore.services.view_upkeep.views_kept` reads it), else None."""
        return self.queryable_view if views_kept(os.environ) else None

    @property
    def statuses(self) -> CommitStatusStore:
        """The log's status store, where it writes a committed request's status with its entry."""
        statuses = self.log.request_statuses
        if statuses is None:
            raise RuntimeError("this Runtime's log records no commit statuses")
        return statuses

    @cached_property
    def dead_letters(self) -> CommitQueue:
        """The dead-letter queue: looking it up calls SQS GetQueueUrl, which only the committer may."""
        sqs = make_client("sqs", endpoint_url=self.endpoint_url)
        return self._backend.queue(sqs, self._names().dead_letter_queue)

    @cached_property
    def file_store(self) -> FileReferenceStore | None:
        """The PostgreSQL file-reference store when the function was deployed with the stack's ``postgres``
        option (see :func:`postgres_file_store`), else None: a table whose files are in PostgreSQL is then
        refused with a reason saying so."""
        return postgres_file_store(os.environ, self.endpoint_url)

    def upkeep_queue(self, kind: UpkeepKind) -> CommitQueue:
        """The work queue the ``kind`` plan fills (SQS GetQueueUrl on first use: only that function's role
        may)."""
        if kind not in self._upkeep_queues:
            sqs = make_client("sqs", endpoint_url=self.endpoint_url)
            self._upkeep_queues[kind] = self._backend.queue(sqs, self._names().upkeep_queue(kind.value))
        return self._upkeep_queues[kind]

    def _names(self) -> ResourceNames:
        if self.names is None:
            raise RuntimeError("this Runtime was given its pieces and has no resource names to build others")
        return self.names

    def committer(self) -> BatchCommitter:
        """The container's committer, built on first use and kept warm."""
        if self._committer is None:
            self._committer = BatchCommitter(
                self.tables,
                self.log,
                self.snapshots,
                self.blobs,
                self.dead_letters,
                file_store=self.file_store,
                warm_budget=warm_budget(),
            )
        return self._committer


def _store_bytes(store: TransactionLogStateStore) -> int:
    """A warm store's estimated bytes: its loaded state's (0 before it is loaded)."""
    state = store.loaded_state
    if state is None:
        return 0
    return sizing.warm_state_bytes(state.reference_count(), len(state.partitions_by_id))


_runtime: Runtime | None = None


def runtime() -> Runtime:
    """This container's runtime, built from the environment on first use.

    A container is a process of ours that keeps loaded states warm for its lifetime: it is where states
    loaded from snapshots are frozen out of the cycle collector's reach (never in a library caller's
    process: see :func:`statestore.codec.parquet.freeze_loaded_states`).
    """
    global _runtime
    if _runtime is None:
        freeze_loaded_states()
        _runtime = Runtime.for_aws(ResourceNames.from_environment())
    return _runtime


def use_runtime(new: Runtime | None) -> None:
    """Install ``new`` as the runtime of every handler (None: build from the environment on next use)."""
    global _runtime
    _runtime = new


def postgres_file_store(
    environ: Mapping[str, str], endpoint_url: str | None = None
) -> FileReferenceStore | None:
    """The PostgreSQL file-reference store the environment names, or None when it names none.

    ``STATESTORE_POSTGRES_URL`` (a libpq URL or conninfo: the embedded runtime, a self-managed database);
    else ``STATESTORE_POSTGRES_HOST`` and ``STATESTORE_POSTGRES_SECRET_ARN``, which the stack sets on the
    functions it places in the database's VPC: the secret is read and the host given wins over the one in
    it; ``STATESTORE_POSTGRES_SSLMODE`` (default ``verify-full``, against the bundled RDS certificate
    authorities or ``PGSSLROOTCERT``; ``disable`` for a server without TLS). A pool of at most two
    connections (one container handles one batch at a time). From a secret the functions connect as the
    app role the schema migration made (lambdas/postgres_schema.py), which may not create the schema:
    it is not tried. Raises
    ValueError when only one of host and secret is set.
    """
    url = environ.get(POSTGRES_URL_ENV)
    host, secret_arn = environ.get(POSTGRES_HOST_ENV), environ.get(POSTGRES_SECRET_ARN_ENV)
    if not url and not host and not secret_arn:
        return None  # no database named: its driver (the `postgres` extra) need not be installed
    from statestore.adapters.postgres import PostgresFileReferenceStore, conninfo_from_secret

    # A paused Aurora cluster (no proxy) takes ~15 s to wake: allow it.
    connect = partial(PostgresFileReferenceStore.connect, max_connections=2, connect_timeout=30.0)
    if url:
        return connect(url)
    if not host or not secret_arn:
        raise ValueError(f"set both {POSTGRES_HOST_ENV} and {POSTGRES_SECRET_ARN_ENV}, or neither")
    from statestore.adapters.aws.secrets import database_settings

    secrets = make_client("secretsmanager", endpoint_url=endpoint_url)
    sslmode = environ.get(POSTGRES_SSLMODE_ENV) or "verify-full"
    settings = database_settings(secrets, secret_arn, host)
    return connect(conninfo_from_secret(settings, sslmode=sslmode), ensure_schema=False)


LAMBDA_MEMORY_ENV = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
DEFAULT_MEMORY_MB = 1024  # the stack's committer and snapshot function, for a budget outside Lambda


def warm_budget(environ: Mapping[str, str] | None = None) -> WarmBudget:
    """How many bytes of table state (estimated) a function keeps warm between invocations.

    ``STATESTORE_WARM_CACHE_MB`` when set (0 keeps no table warm: the state kept, a load's room being outside
    it); else the sizing rule's budget for the function's memory, ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE`` (which
    Lambda sets), or 1,024 MB (the stack's default) outside Lambda, each load making room for its peak
    within it (:func:`statestore.sizing.warm_budget`). Raises ValueError naming the variable whose value is
    not a number of MB.
    """
    env = os.environ if environ is None else environ
    raw = env.get(WARM_CACHE_MB_ENV, "").strip()
    if raw:
        try:
            megabytes = float(raw)
        except ValueError:
            megabytes = -1.0
        if not megabytes >= 0 or megabytes == float("inf"):
            raise ValueError(
                f"{WARM_CACHE_MB_ENV}={raw!r} must be a number of megabytes (MiB) of table state to keep "
                "warm, 0 or more"
            )
        return WarmBudget(int(megabytes * (1 << 20)))
    memory = env.get(LAMBDA_MEMORY_ENV, "").strip()
    if memory:
        try:
            memory_mb = int(memory)
        except ValueError:
            memory_mb = 0
        if memory_mb <= 0:
            raise ValueError(f"{LAMBDA_MEMORY_ENV}={memory!r} must be the function's memory size in MB")
    else:
        memory_mb = DEFAULT_MEMORY_MB
    return sizing.warm_budget(memory_mb)


def snapshot_min_transactions(environ: Mapping[str, str] | None = None) -> int:
    """``STATESTORE_SNAPSHOT_MIN_TRANSACTIONS``: how far a log must move before a new snapshot (default 1)."""
    env = os.environ if environ is None else environ
    value = int(env.get("STATESTORE_SNAPSHOT_MIN_TRANSACTIONS", "1"))
    if value < 1:
        raise ValueError(f"STATESTORE_SNAPSHOT_MIN_TRANSACTIONS must be at least 1, got {value}")
    return value


def upkeep_period_ms(kind: UpkeepKind, environ: Mapping[str, str] | None = None) -> int:
    """The period of ``kind``'s schedule from ``STATESTORE_<KIND>_PERIOD_MINUTES`` (defaults 15 and 60)."""
    env = os.environ if environ is None else environ
    variable = UPKEEP_PERIOD_ENV[kind]
    raw = env.get(variable)
    try:
        return period_ms_from_minutes(float(raw) if raw else DEFAULT_UPKEEP_PERIOD_MINUTES[kind])
    except ValueError:
        raise ValueError(f"{variable}={raw!r} must be a positive number of minutes") from None


def cleanup_policy(environ: Mapping[str, str] | None = None) -> CleanupPolicy:
    """The cleanup policy from the environment (see
    :func:`statestore.services.cleanup_policy.policy_from_environment`)."""
    return policy_from_environment(os.environ if environ is None else environ)


def first_received_at(record: Mapping[str, Any]) -> int:
    """When SQS first delivered an event's record (epoch ms): how long its work waited behind its table's."""
    raw = record.get("attributes", {}).get("ApproximateFirstReceiveTimestamp")
    return int(raw) if raw else now_millis()
