"""A committer wired to in-memory ports with a fake clock, and helpers to make queue messages."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.engine.requests import CommitRequest, encode_request
from statestore.engine.snapshots import SnapshotStore
from statestore.services.committer import BatchCommitter, MessageResult, ReceivedMessage
from statestore.state.table_state import TableState
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitQueue,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.ports import BlobStore, CommitQueue, TableIndex, TransactionLogStore
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles, InitialisePartitions, Transaction
from tests.builders import INT_SCHEMA, data_key, ref, tree


class FakeClock:
    """Epoch milliseconds that move only when told to (or by ``step`` on each reading)."""

    def __init__(self, start: int = 1_700_000_000_000, step: int = 1) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> int:
        self.now += self.step
        return self.now

    def advance(self, millis: int) -> None:
        self.now += millis


_message_ids = itertools.count(1)


def message(
    request: CommitRequest | str,
    *,
    group_id: str | None = None,
    receive_count: int = 1,
    sent: int = 1_700_000_000_000,
    message_id: str | None = None,
) -> ReceivedMessage:
    """A received message holding ``request`` (or a raw body string)."""
    body = request if isinstance(request, str) else encode_request(request)
    group = (
        group_id if group_id is not None else (request.table_id if isinstance(request, CommitRequest) else "")
    )
    return ReceivedMessage(message_id or f"m-{next(_message_ids)}", body, group, receive_count, sent)


def redelivered(m: ReceivedMessage) -> ReceivedMessage:
    return ReceivedMessage(m.message_id, m.body, m.group_id, m.receive_count + 1, m.sent_timestamp)


@dataclass
class Harness:
    """In-memory ports for a committer. ``log`` defaults to one that writes statuses to ``statuses``; with a
    log given, ``statuses`` is the log's."""

    tables: TableIndex = field(default_factory=InMemoryTableIndex)
    log: TransactionLogStore = None  # type: ignore[assignment]  # built in __post_init__ when not given
    snapshot_metadata: InMemorySnapshotMetadataStore = field(default_factory=InMemorySnapshotMetadataStore)
    blobs: BlobStore = field(default_factory=InMemoryBlobStore)
    statuses: InMemoryCommitStatusStore = field(default_factory=InMemoryCommitStatusStore)
    dead_letters: CommitQueue = field(default_factory=InMemoryCommitQueue)
    clock: FakeClock = field(default_factory=FakeClock)

    def __post_init__(self) -> None:
        if self.log is None:
            self.log = InMemoryTransactionLog(None, self.statuses)
        else:  # the log given writes statuses where it was built to
            self.statuses = self.log.request_statuses  # type: ignore[assignment]

    @property
    def snapshots(self) -> SnapshotStore:
        return SnapshotStore(self.snapshot_metadata, self.blobs)

    def committer(self, **kwargs: object) -> BatchCommitter:
        return BatchCommitter(
            self.tables,
            self.log,
            self.snapshots,
            self.blobs,
            self.dead_letters,
            retry_policy=RetryPolicy(max_attempts=5, base_delay=0.0, max_delay=0.0),
            clock=self.clock,
            sleep=lambda _: None,
            **kwargs,  # type: ignore[arg-type]
        )

    def create_table(
        self, name: str, split_points: Sequence[int] = (), properties: dict[str, str] | None = None
    ) -> str:
        """A table with partitions ``root`` (+ ``p1``... for split points), committed as transaction 1."""
        info = TableInfo.new(name, INT_SCHEMA, properties)
        self.tables.create(info)
        self.store(info.table_id).commit(InitialisePartitions(tuple(tree(INT_SCHEMA, split_points))))
        return info.table_id

    def store(self, table_id: str) -> TransactionLogStateStore:
        """A fresh, independent state store for the table (another writer, or a reader)."""
        return TransactionLogStateStore(
            table_id, self.tables.get(table_id).schema, self.log, self.snapshots, clock=self.clock
        )

    def state(self, table_id: str) -> TableState:
        return self.store(table_id).load()

    def log_length(self, table_id: str) -> int:
        return self.log.latest_number(table_id)


def add_files(
    table_id: str, *names: str, partition_id: str = "root", request_id: str | None = None
) -> CommitRequest:
    """A request adding the data files ``names``: their keys under the table's data prefix
    (:func:`tests.builders.data_key`)."""
    transaction: Transaction = AddFiles(tuple(ref(data_key(table_id, n), partition_id) for n in names))
    if request_id is None:
        return CommitRequest.new(table_id, transaction)
    return CommitRequest(request_id, table_id, transaction)


def outcomes(results: Sequence[MessageResult]) -> list[str]:
    return [r.outcome.value for r in results]
