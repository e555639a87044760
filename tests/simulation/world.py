"""A deterministic fault-injection simulation of the commit path, in the spirit of FoundationDB's.

Everything runs in one thread on the in-memory ports, under a simulated clock and one seeded RNG, so a seed
replays exactly. Actors share a few tables:

- **producers** write a data file, then send a commit request to a FIFO queue model (per-group order,
  in-flight messages hidden for the visibility timeout, redelivery, a dead-letter queue after 5 receives,
  SQS's 5-minute deduplication window); they also send duplicates (resends of any request, those whose
  message went to the dead-letter queue included: none is held back), stray copies in the wrong group or
  naming no table, requests that must be rejected, and garbage, and redrive dead letters as new messages;
- **committers** (1-3 instances; a crashed one is replaced by a cold one, and half the time a snapshot is
  taken before anything else, between a commit that may have landed and its redelivery) take batches and
  report results;
- **synchronous writers** commit directly; **compaction jobs** claim files (some resuming: taking over
  claims older than the expiry) and replace them, or release their claims when their merge fails or their
  replace is rejected;
- the **snapshot** and **cleanup** jobs run over every table; cleanup also sweeps expired claims, and
  deletes what late writers put under deleted tables' prefixes (on the word of their tombstones);
- a **vandal** truncates a snapshot object or flips a bit in it, where an intact snapshot before it and the
  log after that still cover the state (never inside another actor's call: damage between cleanup's check
  of its base and its trimming of the log cannot be survived by anything);
- an **operator** deletes a table as ``statestore tables delete`` does (running an interrupted delete again
  until it finishes) and creates another, half the time under the deleted one's name; producers go on
  sending to deleted tables now and then, and writers and committers keep what they held of them.

Faults are injected at every port call of every actor: throttling before a call, a lost response after a
write that landed (seen as a connection error, or as botocore's retry failing the condition), a crash
before or after any call (so between any two writes), and **preemption**: another actor's whole step runs
inside the call, so actors interleave at every port call. Each actor's clock is off by up to 10 minutes
either way, and jumps within that.

After every step the invariants of DESIGN.md are checked against an oracle that saw every log entry ever
appended (cleanup deletes entries from the log, not from the oracle):

1. every entry is valid against exactly the state after the entry before it;
2. a request is in at most one entry; one reported committed at N is in entry N (its status is written
   with the entry); one reported rejected is in none; a synchronous commit of a new file is never refused
   as invalid;
3. a final status never changes;
4. a fresh load (snapshot + tail) equals the full replay, a damaged snapshot notwithstanding; numbers have
   no gaps;
5. no data file the state references is deleted; no claim outlives its job for ever: once a cleanup of a
   table succeeds, the table holds no claim older than the expiry it swept with;
6. log update times never run backwards, whatever the writers' clocks say;
7. nothing is appended to a table's log once its delete has deleted the log;
8. once a table's delete has begun, a read of it through the client raises TableNotFoundError: it never
   answers with what a partly deleted log and snapshots hold;
9. cleanup deletes what is under a table's prefix as leftovers only for a table whose delete finished.

Invariants 4 and 5 are checked on the tables not being deleted; the others on every table. Cleanup
outcomes are checked (5) whenever cleanup reports one: a cleanup the delete of its table overtook says so.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from statestore import instance as resources
from statestore.codec.transaction_json import decode_entry, transaction_to_json
from statestore.engine import overlap
from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.engine.requests import CommitRequest, body_key, encode_request, new_request_id
from statestore.engine.snapshots import Copy, SnapshotStore
from statestore.errors import (
    CommitConflictError,
    StateStoreError,
    StoreUnavailableError,
    TableNotFoundError,
    TransactionNumberTakenError,
    TransactionValidationError,
)
from statestore.model import layout
from statestore.model.files import FileReference
from statestore.model.partition_tree import partitions_from_split_points
from statestore.model.schema import Schema
from statestore.services.cleanup import cleanup_tables
from statestore.services.cleanup_policy import CleanupPolicy
from statestore.services.client import StateStoreClient
from statestore.services.committer import BatchCommitter, MessageOutcome, ReceivedMessage
from statestore.services.committer.batch import DEFAULT_WARM_BUDGET
from statestore.services.leftovers import delete_leftovers, deleted_tables
from statestore.services.snapshot_upkeep import snapshot_tables
from statestore.sizing import WarmBudget
from statestore.state import file_guard
from statestore.state.table_state import TableState
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.ports import (
    BlobStore,
    CommitOutcome,
    CommitQueue,
    CommitStatus,
    CommitStatusStore,
    LogEntry,
    QueueMessage,
    RequestKey,
    TransactionLogStore,
)
from statestore.store.snapshot_ports import SnapshotInfo, SnapshotMetadataStore
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitPartition,
    TransactionBatch,
    request_ids_of,
)

# A warm budget that keeps one table's state (~2-3 KB here) and the others' guards, counted without their
# fixed overhead (tests/simulation/conftest.py, run_for_summary).
GUARD_BUDGET_BYTES = 3_000

T = TypeVar("T")

SCHEMA = Schema.of({"key": "long"})
SECOND = 1000
MINUTE = 60 * SECOND
VISIBILITY_TIMEOUT_MS = resources.COMMIT_QUEUE_VISIBILITY_TIMEOUT_SECONDS * SECOND  # the stack's
MAX_RECEIVES = resources.COMMIT_MAX_RECEIVE_COUNT
DEDUPLICATION_WINDOW_MS = 5 * MINUTE
MAX_CLOCK_SKEW_MS = 10 * MINUTE  # each actor's clock is off by up to this, either way
CLAIM_EXPIRY_MS = 60 * MINUTE  # longer than two clocks can differ, so a fresh claim never looks expired
CLEANUP = CleanupPolicy(
    log_min_snapshot_age_ms=40 * MINUTE,
    snapshot_retention_ms=80 * MINUTE,
    gc_delay_ms=30 * MINUTE,
    claim_expiry_ms=CLAIM_EXPIRY_MS,
)


class Crash(BaseException):
    """The actor's process dies here: nothing after this point of its step happens."""


class InvariantViolation(BaseException):
    """A broken invariant. Not an Exception: it may be found while another actor runs inside the code
    under test (a preemption at a port call), whose handlers of failures (a committer's ``except
    Exception`` around a table, an overlapped read's outcome) must not take it for one and carry on."""


class _MergeFailed(Exception):
    """A compaction job's merge failed after it claimed its inputs."""


@dataclass(frozen=True)
class FaultRates:
    throttle: float = 0.03
    lost_response: float = 0.03
    crash: float = 0.01
    preempt: float = 0.08
    skew_jump: float = 0.05


# --- faults at the ports ---------------------------------------------------------------------------------


class Faults:
    """Decides, from the world's RNG, what goes wrong around each port call of the acting actor."""

    def __init__(self, world: World, rates: FaultRates) -> None:
        self.world = world
        self.rates = rates
        self.injected: dict[str, int] = {}

    def _hit(self, kind: str, rate: float) -> bool:
        if self.world.acting is None or self.world.rng.random() >= rate:
            return False
        self.injected[kind] = self.injected.get(kind, 0) + 1
        return True

    def call(self, fn: Callable[[], T], *, write: bool, lost: Callable[[], BaseException] | None = None) -> T:
        """``fn()``, with whatever fault the RNG picks around it for the acting actor."""
        world = self.world
        if world.acting is not None and world.acting in world.dead:
            raise Crash("a dead process makes no more calls")  # not even from its except/finally blocks
        if world.acting is not None and world.depth == 1 and self._hit("preempt", self.rates.preempt):
            world.preempt()
        if self._hit("crash-before", self.rates.crash):
            world.dead.add(world.acting)
            raise Crash("before a call")
        if self._hit("throttle", self.rates.throttle):
            raise StoreUnavailableError("simulated throttling")
        result = fn()
        if write and self._hit("crash-after", self.rates.crash):
            world.dead.add(world.acting)
            raise Crash("after a write")
        if write and self._hit("lost-response", self.rates.lost_response):
            raise lost() if lost is not None else StoreUnavailableError("simulated lost response")
        return result


class FaultyLog(TransactionLogStore):
    """The log; its request statuses are the world's (faulty) status store, written with each entry."""

    def __init__(self, inner: InMemoryTransactionLog, faults: Faults, world: World) -> None:
        self.inner, self.faults, self.world = inner, faults, world

    @property
    def request_statuses(self) -> CommitStatusStore:
        return self.world.statuses

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        def put() -> None:
            self.inner.append(table_id, entry, outcomes)
            if table_id in self.world.log_deleted:  # 7
                n = entry.transaction_number
                self.world.violation(f"table {table_id}: entry {n} was appended after its log was deleted")
            self.world.oracle(table_id).appended(entry)
            for status in outcomes:
                self.world.saw_status(self.inner.request_statuses.get(status.table_id, status.request_id))

        def lost() -> BaseException:
            if self.world.rng.random() < 0.5:  # botocore retried; the retry failed the condition
                return TransactionNumberTakenError(table_id, entry.transaction_number)
            return StoreUnavailableError("simulated connection reset after the put")

        self.faults.call(put, write=True, lost=lost)

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        return iter(
            self.faults.call(lambda: list(self.inner.read(table_id, from_number, to_number)), write=False)
        )

    def latest_number(self, table_id: str) -> int:
        return self.faults.call(lambda: self.inner.latest_number(table_id), write=False)

    def delete_up_to(self, table_id: str, transaction_number: int) -> int:
        return self.faults.call(lambda: self.inner.delete_up_to(table_id, transaction_number), write=True)

    def delete_table(self, table_id: str) -> None:
        def delete() -> None:
            self.inner.delete_table(table_id)
            if table_id in self.world.deleting:  # not a create undoing its table
                self.world.log_deleted.add(table_id)

        self.faults.call(delete, write=True)

    def stored_body_keys(self, table_id: str) -> set[str]:
        return self.faults.call(lambda: self.inner.stored_body_keys(table_id), write=False)


class FaultySnapshotMetadata(SnapshotMetadataStore):
    def __init__(self, inner: InMemorySnapshotMetadataStore, faults: Faults) -> None:
        self.inner, self.faults = inner, faults

    def record(self, snapshot: SnapshotInfo) -> None:
        self.faults.call(lambda: self.inner.record(snapshot), write=True)

    def latest(self, table_id: str) -> SnapshotInfo | None:
        return self.faults.call(lambda: self.inner.latest(table_id), write=False)

    def list(self, table_id: str) -> list[SnapshotInfo]:
        return self.faults.call(lambda: self.inner.list(table_id), write=False)

    def delete(self, table_id: str, transaction_number: int) -> None:
        self.faults.call(lambda: self.inner.delete(table_id, transaction_number), write=True)

    def delete_table(self, table_id: str) -> None:
        self.faults.call(lambda: self.inner.delete_table(table_id), write=True)


class FaultyBlobs(BlobStore):
    def __init__(self, inner: InMemoryBlobStore, faults: Faults) -> None:
        self.inner, self.faults = inner, faults

    def put(self, key: str, data: bytes, tags: Any = None) -> None:
        self.faults.call(lambda: self.inner.put(key, data, tags), write=True)

    def get(self, key: str) -> bytes:
        return self.faults.call(lambda: self.inner.get(key), write=False)

    def copy(self, source: str, destination: str) -> None:
        self.faults.call(lambda: self.inner.copy(source, destination), write=True)

    def delete(self, keys: list[str]) -> None:
        self.faults.call(lambda: self.inner.delete(keys), write=True)

    def list_modified(self, prefix: str) -> list[tuple[str, int]]:
        return self.faults.call(lambda: self.inner.list_modified(prefix), write=False)

    def list(self, prefix: str) -> list[str]:
        return self.faults.call(lambda: self.inner.list(prefix), write=False)


class FaultyStatuses(CommitStatusStore):
    """Also watches invariant 3: after every write, no request's final status differs from its first."""

    def __init__(self, inner: InMemoryCommitStatusStore, faults: Faults, world: World) -> None:
        self.inner, self.faults, self.world = inner, faults, world

    def record(self, statuses: Sequence[CommitStatus]) -> dict[RequestKey, CommitStatus]:
        def write() -> dict[RequestKey, CommitStatus]:
            kept = self.inner.record(statuses)
            for status in statuses:
                self.world.saw_status(self.inner.get(status.table_id, status.request_id))
            return kept

        return self.faults.call(write, write=True)

    def get(self, table_id: str, request_id: str) -> CommitStatus | None:
        return self.faults.call(lambda: self.inner.get(table_id, request_id), write=False)

    def get_many(self, keys: Any) -> dict[RequestKey, CommitStatus]:
        wanted = list(keys)
        return self.faults.call(lambda: self.inner.get_many(wanted), write=False)


class FaultyDeadLetters(CommitQueue):
    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.letters: list[QueueMessage] = []

    def send(self, messages: Sequence[QueueMessage]) -> None:
        self.faults.call(lambda: self.letters.extend(messages), write=True)


# --- the queue and the event source mapping --------------------------------------------------------------


@dataclass
class _Message:
    message_id: str
    body: str
    group_id: str
    sent: int
    receives: int = 0
    visible_at: int = 0
    in_flight: bool = False


class SimFifoQueue:
    """SQS FIFO as the committer sees it: per-group order, a group blocked while a message of it is in
    flight, visibility timeouts, receive counts, redrive to a dead-letter list, a deduplication window."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.messages: list[_Message] = []
        self.redriven: list[_Message] = []
        self._dedup: dict[str, int] = {}
        self._ids = 0

    def send(self, body: str, group_id: str, deduplication_id: str) -> None:
        now = self.world.now
        seen = self._dedup.get(deduplication_id)
        if seen is not None and now - seen < DEDUPLICATION_WINDOW_MS:
            return
        self._dedup[deduplication_id] = now
        self._ids += 1
        self.messages.append(_Message(f"msg-{self._ids}", body, group_id, now))

    def receive(self, max_messages: int = 10) -> list[_Message]:
        now = self.world.now
        for m in self.messages:
            if m.in_flight and m.visible_at <= now:
                m.in_flight = False  # the consumer died or gave it back: visible again
        blocked = {m.group_id for m in self.messages if m.in_flight}
        batch: list[_Message] = []
        for m in list(self.messages):
            if len(batch) == max_messages:
                break
            if m.group_id in blocked or m.visible_at > now:
                blocked.add(m.group_id)  # keep each group's order
                continue
            if m.receives >= MAX_RECEIVES:
                self.messages.remove(m)
                self.redriven.append(m)
                continue
            m.receives += 1
            m.in_flight = True
            m.visible_at = now + VISIBILITY_TIMEOUT_MS
            batch.append(m)
        return batch

    def delete(self, message: _Message) -> None:
        if message in self.messages:
            self.messages.remove(message)

    def give_back(self, message: _Message) -> None:
        """A batchItemFailure: the message stays in flight until its visibility timeout ends."""


# --- the oracle ------------------------------------------------------------------------------------------


class Oracle:
    """Every entry ever appended to one table's log, replayed as it arrives (invariants 1, 2 and 4)."""

    def __init__(self, world: World, table_id: str) -> None:
        self.world = world
        self.table_id = table_id
        self.pending: dict[int, LogEntry] = {}
        self.state = TableState(SCHEMA)
        self.last_update_time = 0
        self.requests: dict[str, int] = {}
        # Files an AddFiles named after their object was gone (a request re-adding a collected file's name,
        # which the sim sends on purpose): their missing data is not the store's doing.
        self.added_without_data: set[str] = set()

    def appended(self, entry: LogEntry) -> None:
        self.pending[entry.transaction_number] = entry

    def advance(self) -> None:
        while self.pending:
            number = min(self.pending)
            if number != self.state.transaction_number + 1:
                self.world.violation(
                    f"table {self.table_id}: entry {number} appended after {self.state.transaction_number}"
                )
            entry = self.pending.pop(number)
            if entry.update_time < self.last_update_time:
                self.world.violation(
                    f"table {self.table_id}: entry {number}'s time {entry.update_time} is before the "
                    f"previous entry's {self.last_update_time}"
                )
            self.last_update_time = entry.update_time
            transaction = decode_entry(entry)
            try:
                transaction.validate(self.state)
            except TransactionValidationError as e:
                self.world.violation(
                    f"table {self.table_id}: entry {number} is invalid against the state before it: {e}"
                )
            for request_id in request_ids_of(transaction):
                if request_id in self.requests:
                    self.world.violation(
                        f"request {request_id} is in entries {self.requests[request_id]} and {number}"
                    )
                self.requests[request_id] = number
            if isinstance(transaction, TransactionBatch):
                for item in transaction.items:
                    if isinstance(item.transaction, AddFiles):
                        self.added_without_data.update(
                            r.filename
                            for r in item.transaction.references
                            if not self.world.raw_blobs.list(r.filename)
                        )
            transaction.apply(self.state, entry.update_time)
            self.state.transaction_number = number


# --- the actors -------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Actor:
    name: str
    offset: int = 0  # this actor's clock error, ms

    def clock(self, world: World) -> Callable[[], int]:
        return lambda: world.now + self.offset

    def step(self, world: World) -> None:
        raise NotImplementedError

    def crashed(self, world: World) -> None:
        """Forget what the dead process held."""


@dataclass
class Sent:
    request: CommitRequest
    valid_when_sent: bool


@dataclass(eq=False)
class Producer(Actor):
    sent: list[Sent] = field(default_factory=list)

    def step(self, world: World) -> None:
        rng = world.rng
        gone = sorted(world.log_deleted)
        table_id = rng.choice(gone if gone and rng.random() < 0.05 else world.table_ids)  # a job sending late
        roll = rng.random()
        if roll < 0.12 and self.sent:  # the same request again, maybe after the deduplication window
            old = rng.choice(self.sent).request
            if any(old.request_id in m.body for m in world.queue.redriven):
                world.resends_after_redrive += 1  # its message went to the dead-letter queue before
            world.queue.send(encode_request(old), old.table_id, old.request_id)
            return
        if roll < 0.13 and world.queue.redriven:  # an operator redrives a dead letter (a new message)
            letter = rng.choice(world.queue.redriven)
            world.redrives += 1
            world.queue.send(letter.body, letter.group_id, f"redrive-{world.next_id()}")
            return
        if roll < 0.18 and self.sent:  # a stray copy, in another table's group or naming no table
            old = rng.choice(self.sent).request
            group = rng.choice([t for t in [*world.table_ids, "no-such-table"] if t != old.table_id])
            world.queue.send(encode_request(old), group, f"stray-{world.next_id()}")
            return
        if roll < 0.2:
            world.queue.send("{not json", table_id, f"garbage-{world.next_id()}")
            return
        view = world.oracle(table_id).state
        if roll < 0.3 and view.files_by_name:  # a file that already exists: must be rejected
            filename = rng.choice(sorted(view.files_by_name))
        else:
            filename = f"{layout.data_prefix(table_id)}{self.name}-{world.next_id()}.parquet"
            world.blobs.inner.put(filename, b"rows")  # the job wrote its data file first
        leaf = rng.choice(sorted(p.id for p in view.leaf_partitions())) if view.partitions_by_id else "root"
        request = CommitRequest(new_request_id(), table_id, AddFiles((FileReference(filename, leaf, 10),)))
        self.sent.append(Sent(request, True))
        world.requests[request.request_id] = request
        message_body = encode_request(request)
        if rng.random() < 0.15:  # a big request: its body goes to the bucket first
            key = body_key(table_id, request.request_id, world.now)
            world.blobs.inner.put(key, json.dumps(transaction_to_json(request.transaction)).encode())
            message_body = encode_request(request, key)
        world.queue.send(message_body, table_id, request.request_id)


@dataclass(eq=False)
class CommitterActor(Actor):
    committer: BatchCommitter | None = None

    def _committer(self, world: World) -> BatchCommitter:
        if self.committer is None:
            # Half the committers keep little more than guards: evicted tables take new files from them.
            budget = WarmBudget(GUARD_BUDGET_BYTES) if world.rng.random() < 0.5 else DEFAULT_WARM_BUDGET
            # Half read a table's guard from its snapshot (the tables are tiny: any size does), half load it.
            guard_first = 0 if world.rng.random() < 0.5 else 10**12
            self.committer = BatchCommitter(
                world.tables,
                world.log,
                world.snapshots,
                world.blobs,
                world.dead_letters,
                retry_policy=RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0),
                clock=self.clock(world),
                sleep=lambda _: None,
                rng=random.Random(world.rng.random()),
                warm_budget=budget,
                guard_first_references=guard_first,
            )
        return self.committer

    def step(self, world: World) -> None:
        batch = world.queue.receive(world.rng.randint(1, 10))
        if not batch:
            return
        received = [ReceivedMessage(m.message_id, m.body, m.group_id, m.receives, m.sent) for m in batch]
        committer = self._committer(world)
        results = committer.process(received)
        world.guarded_commits += committer.last_batch.guarded
        world.cold_guarded_commits += committer.last_batch.guarded_cold
        for m, result in zip(batch, results, strict=True):
            if result.retry:
                world.queue.give_back(m)
            else:
                world.queue.delete(m)
            world.check_result(result)

    def crashed(self, world: World) -> None:
        self.committer = None  # a new Lambda container: cold
        if world.rng.random() < 0.5:  # a snapshot between the commit that may have landed and its redelivery
            world.snapshot_between()


@dataclass(eq=False)
class SyncWriter(Actor):
    stores: dict[str, TransactionLogStateStore] = field(default_factory=dict)

    def _store(self, world: World, table_id: str) -> TransactionLogStateStore:
        store = self.stores.get(table_id)
        if store is None:
            store = self.stores[table_id] = TransactionLogStateStore(
                table_id,
                SCHEMA,
                world.log,
                world.snapshots,
                retry=RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0),
                clock=self.clock(world),
                sleep=lambda _: None,
                rng=random.Random(world.rng.random()),
            )
            store.table_check = partial(world.tables.check_live, table_id)  # as the client's stores
        return store

    def step(self, world: World) -> None:
        rng = world.rng
        table_id = rng.choice(world.table_ids)
        store = self._store(world, table_id)
        try:
            state = store.state()  # a table whose delete began raises (8)
        except StateStoreError:
            return
        if not state.partitions_by_id:  # 8: only a partly deleted table's log and snapshots hold none
            world.violation(f"table {table_id}: a read after its delete began answered an empty table")
        roll = rng.random()
        if roll < 0.1:
            self._split(world, store, state)
        elif roll < 0.35:
            self._compact(world, store, state)
        elif roll < 0.37:
            try:
                store.commit(ClearFiles())
            except (CommitConflictError, StoreUnavailableError):
                pass
        else:
            filename = f"{layout.data_prefix(table_id)}{self.name}-{world.next_id()}.parquet"
            world.blobs.inner.put(filename, b"rows")
            leaf = rng.choice(sorted(p.id for p in state.leaf_partitions()))
            try:
                store.commit(AddFiles((FileReference(filename, leaf, 10),)))
            except TransactionValidationError as e:
                world.violation(f"{self.name}: a new file {filename} was refused as invalid: {e}")
            except (CommitConflictError, StoreUnavailableError):
                pass

    def _split(self, world: World, store: TransactionLogStateStore, state: TableState) -> None:
        leaf = world.rng.choice(sorted(state.leaf_partitions(), key=lambda p: p.id))
        current = leaf.region.ranges[0]
        low = current.min if isinstance(current.min, int) else -(2**40)
        high = current.max if isinstance(current.max, int) else 2**40
        if high - low < 2:
            return
        point = world.rng.randint(low + 1, high - 1)
        n = world.next_id()
        parent, left, right = leaf.split(0, point, f"{leaf.id}.{n}L", f"{leaf.id}.{n}R")
        try:
            store.commit(SplitPartition(parent, (left, right)))
        except (TransactionValidationError, CommitConflictError, StoreUnavailableError):
            pass

    def _compact(self, world: World, store: TransactionLogStateStore, state: TableState) -> None:
        rng = world.rng
        # A resumed compaction also takes references whose claim has expired (their job presumed dead).
        cutoff = self.clock(world)() - CLAIM_EXPIRY_MS if rng.random() < 0.3 else None
        by_partition: dict[str, list[str]] = {}
        for ref in state.file_references():
            if ref.job_id is None or (cutoff is not None and ref.last_update_time < cutoff):
                by_partition.setdefault(ref.partition_id, []).append(ref.filename)
        if not by_partition:
            return
        partition_id = rng.choice(sorted(by_partition))
        inputs = tuple(sorted(by_partition[partition_id])[:3])
        job_id = f"job-{world.next_id()}"
        try:
            store.commit(AssignJobIds((AssignJobIdRequest(job_id, partition_id, inputs),), cutoff))
        except (TransactionValidationError, CommitConflictError, StoreUnavailableError):
            return  # a claim lost to another job, or of unknown outcome: the sweep releases it if it landed
        try:
            if rng.random() < 0.1:
                raise _MergeFailed  # nothing written: the job releases its claim
            output = f"{layout.data_prefix(store.table_id)}{job_id}.parquet"
            world.blobs.inner.put(output, b"rows")
            new = FileReference(output, partition_id, 10 * len(inputs))
            store.commit(
                ReplaceFileReferences((ReplaceFileReferencesJob(job_id, partition_id, inputs, new),))
            )
        except (_MergeFailed, TransactionValidationError):
            # Final: nothing of this job will be committed (its inputs were taken over, or a ClearFiles
            # removed them). A release of nothing is a no-op; one that fails is the sweep's to redo.
            try:
                store.commit(ReleaseClaims((job_id,)))
            except (CommitConflictError, StoreUnavailableError):
                pass
        except (CommitConflictError, StoreUnavailableError):
            pass  # the replace's outcome is unknown: its claim stays for the sweep

    def crashed(self, world: World) -> None:
        self.stores = {}


@dataclass(eq=False)
class Snapshotter(Actor):
    def step(self, world: World) -> None:
        snapshot_tables(world.tables, world.log, world.snapshots, clock=self.clock(world))


@dataclass(eq=False)
class Vandal(Actor):
    """Damages a table's snapshot object (truncated, or a byte flipped), where an intact snapshot before it
    and the log after that still cover the state: the case the store promises to survive."""

    def step(self, world: World) -> None:
        rng = world.rng
        table_id = rng.choice(world.checked_tables())
        recorded = world.raw_snapshot_metadata.list(table_id)
        first = next(world.raw_log.read(table_id, 0), None)
        intact = [s for s in recorded if s.partitions_key not in world.damaged]
        if not intact:
            return
        target = rng.choice(intact)
        covered = first is not None and first.transaction_number == 1  # the whole log is still there
        covered = covered or any(
            s.transaction_number < target.transaction_number
            and first is not None
            and first.transaction_number <= s.transaction_number + 1
            for s in intact
        )
        if not covered:
            return
        key = rng.choice([target.partitions_key, target.files_key])
        data = world.raw_blobs.get(key)
        if rng.random() < 0.5:
            damaged = data[: rng.randrange(len(data))]
        else:
            at = rng.randrange(len(data))
            damaged = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
        world.raw_blobs.put(key, damaged)
        world.damaged.add(target.partitions_key)
        world.faults.injected["damaged-snapshot"] = world.faults.injected.get("damaged-snapshot", 0) + 1


@dataclass(eq=False)
class Cleaner(Actor):
    def step(self, world: World) -> None:
        clock = self.clock(world)
        outcomes = cleanup_tables(
            world.tables, world.log, world.snapshots, world.blobs, policy=CLEANUP, clock=clock
        )
        # 5: a cleanup that succeeded left no claim older than the expiry it swept with.
        cutoff = clock() - CLAIM_EXPIRY_MS
        for outcome in outcomes:
            if outcome.report is None:
                continue
            oracle = world.oracle(outcome.table_id)
            oracle.advance()
            for ref in oracle.state.file_references():
                if ref.job_id is not None and ref.last_update_time < cutoff:
                    world.violation(
                        f"table {outcome.table_id}: after a cleanup, job {ref.job_id}'s claim on "
                        f"{ref.filename} (made at {ref.last_update_time}) outlives the expiry ({cutoff})"
                    )
        # What late writers (a job sending late, a cleanup the delete overtook) put under deleted tables'
        # prefixes, as the cleanup Lambda's work on their tombstones does.
        for table_id in deleted_tables(world.blobs, world.tables.list()):
            if table_id in world.table_ids:  # 9: only a deleted table's objects are swept
                world.violation(f"table {table_id}: its objects are swept as a deleted table's")
            try:
                report = delete_leftovers(table_id, world.blobs, now=clock(), policy=CLEANUP)
            except StateStoreError:
                continue
            world.leftover_objects_deleted += report.objects_deleted if report else 0


@dataclass(eq=False)
class Reader(Actor):
    """Reads a table's state through the client, as a user or a query plan does: any table in the index,
    one being deleted too."""

    def step(self, world: World) -> None:
        client = StateStoreClient(
            world.tables, world.log, world.snapshot_metadata, world.blobs, clock=self.clock(world)
        )
        table_id = world.rng.choice(world.table_ids)
        try:
            state = client.state(table_id)
        except StateStoreError:
            return
        if table_id in world.deleting or table_id in world.log_deleted:  # 8
            world.violation(
                f"table {table_id}: a read that ended after its delete began answered transaction "
                f"{state.transaction_number}"
            )


@dataclass(eq=False)
class Operator(Actor):
    """Deletes a table through the client, as ``statestore tables delete`` does, running a delete a fault
    interrupted again until it finishes; then creates another in its place, half the time under the deleted
    one's name."""

    def step(self, world: World) -> None:
        client = StateStoreClient(
            world.tables, world.log, world.snapshot_metadata, world.blobs, clock=self.clock(world)
        )
        # Deletes now and then (it is also picked to run inside other actors' calls): tables live long
        # enough for snapshots and cleanup to reach them.
        if not world.deleting and len(world.checked_tables()) > 1 and world.rng.random() < 0.3:
            table_id = world.rng.choice(world.checked_tables())
            same_name = world.rng.random() < 0.5
            world.deleting[table_id] = world.tables.get(table_id).table_name if same_name else ""
        for table_id, name in list(world.deleting.items()):
            try:
                client.delete_table(table_id)
            except TableNotFoundError:
                pass  # an earlier run finished it, and was cut short after
            world.log_deleted.add(table_id)  # deleted by now, whichever run did it
            del world.deleting[table_id]
            world.table_ids.remove(table_id)
            world.deleted_tables += 1
            world.to_create.append(name or f"t{world.next_id()}")
        while world.to_create:
            table = client.create_table(world.to_create[0], SCHEMA, [0])
            world.to_create.pop(0)
            world.table_ids.append(table.table_id)


class _DecodedOnce(SnapshotStore):
    """The checker's snapshot reader: each snapshot's Parquet is decoded once (and checked then)."""

    def __init__(self, metadata: SnapshotMetadataStore, blobs: BlobStore) -> None:
        super().__init__(metadata, blobs)
        self._decoded: dict[str, TableState] = {}

    def read(self, info: SnapshotInfo, schema: Schema, copy: Copy | None = None) -> TableState:
        state = self._decoded.get(info.partitions_key)
        if state is None:
            state = self._decoded[info.partitions_key] = super().read(info, schema, copy)
        return state.copy()


# --- the world --------------------------------------------------------------------------------------------


class World:
    def __init__(
        self, seed: int, *, tables: int = 2, committers: int = 2, rates: FaultRates | None = None
    ) -> None:
        self.seed = seed
        self.guarded_commits = 0  # batches a committer appended from an evicted table's guard
        self.cold_guarded_commits = 0  # ... from a guard it read from the table's snapshot
        self.rng = random.Random(seed)
        self.now = 1_700_000_000_000
        self.acting: Actor | None = None
        self.dead: set[Actor | None] = set()  # actors whose process crashed during the current step
        self.depth = 0
        self.steps = 0
        self._ids = 0
        self.violations: list[str] = []
        self.faults = Faults(self, rates or FaultRates())
        self.raw_blobs = InMemoryBlobStore(lambda: self.now)  # the bucket stamps writes with the true time
        self.raw_statuses = InMemoryCommitStatusStore()
        self.raw_log = InMemoryTransactionLog(self.raw_blobs, self.raw_statuses)
        self.raw_snapshot_metadata = InMemorySnapshotMetadataStore()
        self.log = FaultyLog(self.raw_log, self.faults, self)
        self.blobs = FaultyBlobs(self.raw_blobs, self.faults)
        self.snapshot_metadata = FaultySnapshotMetadata(self.raw_snapshot_metadata, self.faults)
        self.snapshots = SnapshotStore(self.snapshot_metadata, self.blobs)
        self.statuses = FaultyStatuses(self.raw_statuses, self.faults, self)
        self.dead_letters = FaultyDeadLetters(self.faults)
        self.tables = InMemoryTableIndex()
        self.queue = SimFifoQueue(self)
        self.requests: dict[str, CommitRequest] = {}
        self.resends_after_redrive = 0  # resends of requests whose message the queue had dead-lettered
        self.redrives = 0  # dead letters sent to the queue again, as `statestore dead-letters redrive` does
        self.first_final: dict[RequestKey, CommitStatus] = {}
        self._oracles: dict[str, Oracle] = {}
        self._loaded: dict[str, tuple[int, str | None, int | None, int]] = {}  # what the last fresh load saw
        self._check_snapshots = _DecodedOnce(self.raw_snapshot_metadata, self.raw_blobs)
        self.table_ids: list[str] = []  # the tables in the index (being deleted or not)
        # Tables whose delete began, and the name to create a table under once it is done ("": a new one).
        self.deleting: dict[str, str] = {}
        self.to_create: list[str] = []  # names of tables to create (a create that failed is made again)
        self.log_deleted: set[str] = set()  # tables whose delete deleted their log (7)
        self.deleted_tables = 0
        self.leftover_objects_deleted = 0
        for i in range(tables):
            self._create_table(f"t{i}")
        self.actors: list[Actor] = [
            *(Producer(f"producer{i}") for i in range(2)),
            *(CommitterActor(f"committer{i}") for i in range(committers)),
            SyncWriter("writer0"),
            SyncWriter("writer1"),
            Snapshotter("snapshot"),
            Cleaner("cleanup"),
            Vandal("vandal"),
            Operator("operator"),
            Reader("reader"),
        ]
        self.weights = [3, 3, *([4] * committers), 2, 2, 1, 1, 0.1, 0.2, 0.5]
        self.damaged: set[str] = set()  # the partitions keys of snapshots whose objects were damaged

    def _create_table(self, name: str) -> None:
        info = TableInfo.new(name, SCHEMA)
        self.tables.create(info)
        self.table_ids.append(info.table_id)
        store = TransactionLogStateStore(info.table_id, SCHEMA, self.log, clock=lambda: self.now)
        store.commit(InitialisePartitions(tuple(partitions_from_split_points(SCHEMA, [0]))))
        self.oracle(info.table_id).advance()

    def checked_tables(self) -> list[str]:
        """The tables whose state invariants 4 and 5 hold: those not being deleted."""
        return [t for t in self.table_ids if t not in self.deleting]

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def oracle(self, table_id: str) -> Oracle:
        oracle = self._oracles.get(table_id)
        if oracle is None:
            oracle = self._oracles[table_id] = Oracle(self, table_id)
        return oracle

    # --- running -------------------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def step(self) -> None:
        self.steps += 1
        self._move_clocks()
        actor = self.rng.choices(self.actors, weights=self.weights)[0]
        self._run(actor)
        self.check()

    def snapshot_between(self) -> None:
        """Run the snapshot job now, as its own process."""
        snapshotter = next(a for a in self.actors if isinstance(a, Snapshotter))
        self._run(snapshotter)

    def preempt(self) -> None:
        """Run another actor's whole step inside the current actor's port call."""
        current = self.acting
        # Not the vandal: damage between cleanup's check that its base is intact and its trimming of the log
        # up to that base is a loss nothing can prevent (the check and the delete are not one operation).
        others = [a for a in self.actors if a is not current and not isinstance(a, Vandal)]
        self._run(self.rng.choice(others))
        self.acting = current

    def _run(self, actor: Actor) -> None:
        previous = self.acting
        self.acting = actor
        self.depth += 1
        try:
            actor.step(self)
        except Crash:
            actor.crashed(self)  # a new process takes its place, knowing nothing it held
        except StateStoreError:
            pass  # a store kept failing: the actor gives up this step, as a job would
        finally:
            self.dead.discard(actor)
            self.depth -= 1
            self.acting = previous
        for oracle in self._oracles.values():
            oracle.advance()

    def _move_clocks(self) -> None:
        rng = self.rng
        self.now += rng.choice([0, 10, 500, 5 * SECOND, 30 * SECOND, 3 * MINUTE, 6 * MINUTE])
        for actor in self.actors:
            if rng.random() < self.faults.rates.skew_jump:  # forward or back, within the tolerated skew
                actor.offset = rng.randint(-MAX_CLOCK_SKEW_MS, MAX_CLOCK_SKEW_MS)

    # --- invariants ----------------------------------------------------------------------------------

    def violation(self, what: str) -> None:
        self.violations.append(f"step {self.steps}: {what}")
        raise InvariantViolation(self.replay_hint(what))

    def replay_hint(self, what: str) -> str:
        return f"{what}\n  replay: python -m tests.simulation --seed {self.seed} --steps {self.steps}"

    def saw_status(self, status: CommitStatus | None) -> None:
        if status is None or not status.is_final:
            return
        first = self.first_final.setdefault(status.key, status)
        if first != status:
            self.violation(f"final status of {status.request_id} changed from {first} to {status}")

    def check_result(self, result: Any) -> None:
        if result.request_id not in self.requests:
            return
        oracle = self.oracle(self.requests[result.request_id].table_id)
        oracle.advance()
        held = oracle.requests.get(result.request_id)
        if result.outcome is MessageOutcome.REJECTED and held is not None:
            self.violation(f"request {result.request_id} was reported rejected but is in entry {held}")
        if result.outcome is MessageOutcome.COMMITTED and held != result.transaction_number:
            # 2, as the committer reports it (a deleted table's statuses may be gone with its log)
            self.violation(
                f"request {result.request_id} was reported committed at {result.transaction_number} "
                f"but the log holds it in {held}"
            )

    def check(self) -> None:
        for table_id in self.checked_tables():
            oracle = self.oracle(table_id)
            oracle.advance()
            # 4: a fresh load (latest snapshot + the log after it) equals the full replay
            # Loading is the costly check: redo it only when what a load reads has changed.
            latest = self.raw_snapshot_metadata.latest(table_id)
            first = next(self.raw_log.read(table_id, 0), None)
            fingerprint = (
                oracle.state.transaction_number,
                latest.partitions_key if latest else None,
                first.transaction_number if first else None,
                len(self.damaged),
            )
            if self._loaded.get(table_id) != fingerprint:
                try:
                    fresh = TransactionLogStateStore(
                        table_id,
                        SCHEMA,
                        self.raw_log,
                        SnapshotStore(self.raw_snapshot_metadata, self.raw_blobs),
                    ).load()
                except StateStoreError as e:
                    self.violation(f"table {table_id}: a fresh load fails: {e}")
                if fresh != oracle.state:
                    self.violation(
                        f"table {table_id}: a fresh load {fresh} differs from the replay {oracle.state}"
                    )
                self._loaded[table_id] = fingerprint
            # 5: no referenced data file is deleted
            for ref in oracle.state.file_references():
                if ref.filename not in oracle.added_without_data and not self.raw_blobs.list(ref.filename):
                    self.violation(f"table {table_id}: referenced data file {ref.filename} was deleted")
        # 8: a table whose delete began is not read as what is left of it
        reader = StateStoreClient(self.tables, self.raw_log, self.raw_snapshot_metadata, self.raw_blobs)
        for table_id in self.deleting:
            try:
                state = reader.state(table_id)
            except TableNotFoundError:
                continue
            number = state.transaction_number
            self.violation(f"table {table_id}: a read after its delete began answered transaction {number}")
        # 2 and 3: statuses agree with the log and never change
        for request_id, request in self.requests.items():
            status = self.raw_statuses.get(request.table_id, request_id)
            if status is None:
                continue
            self.saw_status(status)
            held = self.oracle(request.table_id).requests.get(request_id)
            if status.outcome is CommitOutcome.COMMITTED and held != status.transaction_number:
                self.violation(
                    f"request {request_id} is reported committed at {status.transaction_number} "
                    f"but the log holds it in {held}"
                )
            if status.outcome is CommitOutcome.REJECTED and held is not None:
                self.violation(f"request {request_id} is reported rejected but is in entry {held}")

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "steps": self.steps,
            "entries": sum(o.state.transaction_number for o in self._oracles.values()),
            "requests": len(self.requests),
            "faults": dict(sorted(self.faults.injected.items())),
            "resends_after_redrive": self.resends_after_redrive,
            "redrives": self.redrives,
            "violations": len(self.violations),
            "guarded_commits": self.guarded_commits,
            "cold_guarded_commits": self.cold_guarded_commits,
            "deleted_tables": self.deleted_tables,
            "leftover_objects_deleted": self.leftover_objects_deleted,
        }


def run_seed(seed: int, steps: int, **options: Any) -> World:
    """Run one seed; raises InvariantViolation (with a replay command) at the first broken invariant.

    Ids the library draws from ``uuid.uuid4`` (tables, partitions, requests, writer tokens) come from the
    seed too, so a seed replays exactly.
    """
    ids = random.Random(f"ids-{seed}")
    real_uuid4 = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
    try:
        world = World(seed, **options)
        world.run(steps)
    finally:
        uuid.uuid4 = real_uuid4
    return world


def run_for_summary(job: tuple[int, int, int]) -> dict[str, Any]:
    """``(seed, steps, committers)`` -> the summary of the seed, or its violation (for worker pools)."""
    seed, steps, committers = job
    logging.disable(logging.CRITICAL)  # every injected failure is logged by the code under test
    overlap.both = overlap.in_turn  # one actor at a time, as tests/simulation/conftest.py sets it
    file_guard.GUARD_OVERHEAD_BYTES = 0  # likewise
    try:
        return run_seed(seed, steps, committers=committers).summary()
    except InvariantViolation as e:
        return {"seed": seed, "violation": str(e)}
