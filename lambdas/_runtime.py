"""What a Lambda container's handlers share, built once per container: clients, adapters, warm committer.

Names come from ``ResourceNames.from_environment()``; endpoints from the standard AWS settings
(``AWS_ENDPOINT_URL`` points every client at a local emulator). Tests and the local runner can install
their own :class:`Runtime` (e.g. :meth:`Runtime.in_memory`) with :func:`use_runtime`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from statestore.aws.backend import AwsBackend
from statestore.aws.clients import make_client
from statestore.catalog import InMemoryTableIndex, TableIndex
from statestore.cleanup import CleanupPolicy
from statestore.committer import Committer
from statestore.engine import TransactionLogStateStore
from statestore.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTransactionLog,
)
from statestore.ports import BlobStore, CommitQueue, CommitStatusStore, TransactionLogStore
from statestore.resources import ResourceNames
from statestore.snapshots import SnapshotStore

_MINUTE_MS = 60_000


@dataclass
class Runtime:
    tables: TableIndex
    log: TransactionLogStore
    snapshots: SnapshotStore
    blobs: BlobStore
    statuses: CommitStatusStore
    dead_letters: CommitQueue
    # Kept warm between invocations of the same container.
    snapshot_stores: dict[str, TransactionLogStateStore] = field(default_factory=dict)
    _committer: Committer | None = field(default=None, repr=False)

    @classmethod
    def for_aws(cls, names: ResourceNames, endpoint_url: str | None = None) -> Runtime:
        backend = AwsBackend.connect(names, endpoint_url)
        sqs = make_client("sqs", endpoint_url=endpoint_url)
        return cls(
            tables=backend.table_index,
            log=backend.log,
            snapshots=SnapshotStore(backend.snapshot_metadata, backend.blobs),
            blobs=backend.blobs,
            statuses=backend.commit_statuses,
            dead_letters=backend.queue(sqs, names.dead_letter_queue),
        )

    @classmethod
    def in_memory(cls) -> Runtime:
        blobs = InMemoryBlobStore()
        return cls(
            tables=InMemoryTableIndex(),
            log=InMemoryTransactionLog(),
            snapshots=SnapshotStore(InMemorySnapshotMetadataStore(), blobs),
            blobs=blobs,
            statuses=InMemoryCommitStatusStore(),
            dead_letters=InMemoryCommitQueue(),
        )

    def committer(self) -> Committer:
        if self._committer is None:
            self._committer = Committer(
                self.tables, self.log, self.snapshots, self.statuses, self.blobs, self.dead_letters
            )
        return self._committer


_runtime: Runtime | None = None


def runtime() -> Runtime:
    """This container's runtime, built from the environment on first use."""
    global _runtime
    if _runtime is None:
        _runtime = Runtime.for_aws(ResourceNames.from_environment())
    return _runtime


def use_runtime(new: Runtime | None) -> None:
    """Install ``new`` as the runtime of every handler (None: build from the environment on next use)."""
    global _runtime
    _runtime = new


def snapshot_min_transactions(environ: Mapping[str, str] | None = None) -> int:
    """``STATESTORE_SNAPSHOT_MIN_TRANSACTIONS``: how far a log must move before a new snapshot (default 1)."""
    env = os.environ if environ is None else environ
    value = int(env.get("STATESTORE_SNAPSHOT_MIN_TRANSACTIONS", "1"))
    if value < 1:
        raise ValueError(f"STATESTORE_SNAPSHOT_MIN_TRANSACTIONS must be at least 1, got {value}")
    return value


def cleanup_policy(environ: Mapping[str, str] | None = None) -> CleanupPolicy:
    """The cleanup policy, with ``STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES`` and
    ``STATESTORE_SNAPSHOT_RETENTION_MINUTES`` overriding the defaults."""
    env = os.environ if environ is None else environ
    default = CleanupPolicy()
    log_age = env.get("STATESTORE_LOG_MIN_SNAPSHOT_AGE_MINUTES")
    retention = env.get("STATESTORE_SNAPSHOT_RETENTION_MINUTES")
    return CleanupPolicy(
        log_min_snapshot_age_ms=int(float(log_age) * _MINUTE_MS)
        if log_age
        else default.log_min_snapshot_age_ms,
        snapshot_retention_ms=int(float(retention) * _MINUTE_MS)
        if retention
        else default.snapshot_retention_ms,
    )
