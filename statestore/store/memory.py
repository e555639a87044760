"""In-memory implementations of the ports: used by tests, benchmarks and the in-memory demo.

Thread-safe, so concurrency tests can race several writers on one log.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

from statestore.errors import (
    BlobNotFoundError,
    PreviousEntryGoneError,
    RequestsAlreadyDecidedError,
    StaleSnapshotError,
    StateStoreError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionNotRetainedError,
    TransactionNumberTakenError,
)
from statestore.model.clock import now_millis
from statestore.store.dead_letter_ports import DeadLetter, DeadLetterQueue
from statestore.store.ports import (
    DEAD_LETTER_REASON_ATTRIBUTE,
    LIST_PAGE_SIZE,
    SOURCE_MESSAGE_ID_ATTRIBUTE,
    BlobStore,
    CommitQueue,
    CommitStatus,
    CommitStatusStore,
    LogEntry,
    LogTail,
    QueueMessage,
    RequestKey,
    TableIndex,
    TransactionLogStore,
    one_status_per_request,
)
from statestore.store.snapshot_ports import SnapshotInfo, SnapshotMetadataStore
from statestore.store.switch_ports import CommitterState, CommitterSwitch, QueueDepth
from statestore.store.tables import TableInfo, check_table_name, with_property


class InMemoryTransactionLog(TransactionLogStore):
    """Entries in a dict. Given the ``blobs`` an entry's attachments live in, it reads them from there and
    deletes them with the entry, as the DynamoDB log does; without, it keeps the bytes it was given. It
    writes the outcomes of an entry's requests in ``statuses`` (its own store if not given) with the entry,
    atomically."""

    def __init__(
        self, blobs: BlobStore | None = None, statuses: InMemoryCommitStatusStore | None = None
    ) -> None:
        self._entries: dict[str, dict[int, LogEntry]] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()
        self.blobs = blobs
        self._statuses = InMemoryCommitStatusStore() if statuses is None else statuses

    @property
    def request_statuses(self) -> InMemoryCommitStatusStore:
        return self._statuses

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        with self._lock:
            entries = self._entries.setdefault(table_id, {})
            if entry.transaction_number in entries:
                raise TransactionNumberTakenError(table_id, entry.transaction_number)
            if entry.transaction_number > 1 and entry.transaction_number - 1 not in entries:
                raise PreviousEntryGoneError(table_id, entry.transaction_number)
            with self._statuses._lock:  # always taken after the log's: no deadlock
                decided = self._statuses._final_among(outcomes)
                if decided:
                    raise RequestsAlreadyDecidedError(table_id, decided)
                self._add(table_id, entries, entry)
                self._statuses._put_all(outcomes)

    def _add(self, table_id: str, entries: dict[int, LogEntry], entry: LogEntry) -> None:
        entries[entry.transaction_number] = entry
        self._latest[table_id] = max(self._latest.get(table_id, 0), entry.transaction_number)

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        with self._lock:
            entries = self._entries.get(table_id, {})
            numbers = sorted(n for n in entries if n >= from_number and (to_number is None or n <= to_number))
            found = [entries[n] for n in numbers]
        for entry in found:
            yield self._with_attachments(table_id, entry)

    def read_tail(self, table_id: str, count: int) -> LogTail:
        with self._lock:
            entries = self._entries.get(table_id, {})
            found = [entries[n] for n in sorted(entries)[-count:]] if count > 0 else []
        return LogTail(
            tuple(e.transaction_number for e in found),
            lambda number: [
                self._with_attachments(table_id, e) for e in found if e.transaction_number > number
            ],
        )

    def _with_attachments(self, table_id: str, entry: LogEntry) -> LogEntry:
        if self.blobs is None or not entry.attachments:
            return entry
        try:
            attachments = tuple((key, self.blobs.get(key)) for key, _ in entry.attachments)
        except BlobNotFoundError as e:
            raise TransactionNotRetainedError(
                f"table {table_id!r}: transaction {entry.transaction_number} was deleted by cleanup while "
                "being read"
            ) from e
        return dataclasses.replace(entry, attachments=attachments)

    def latest_number(self, table_id: str) -> int:
        with self._lock:
            return self._latest.get(table_id, 0)

    def delete_up_to(self, table_id: str, transaction_number: int) -> int:
        with self._lock:
            entries = self._entries.get(table_id, {})
            keep_from = min(transaction_number + 1, self._latest.get(table_id, 0))
            doomed = [entries.pop(n) for n in list(entries) if n < keep_from]
        self._delete_attachments(doomed)
        return len(doomed)

    def delete_table(self, table_id: str) -> None:
        with self._lock:
            doomed = list(self._entries.pop(table_id, {}).values())
            self._latest.pop(table_id, None)
        self._delete_attachments(doomed)

    def _delete_attachments(self, entries: list[LogEntry]) -> None:
        keys = [key for entry in entries for key, _ in entry.attachments]
        if self.blobs is not None and keys:
            self.blobs.delete(keys)

    def stored_body_keys(self, table_id: str) -> set[str]:
        with self._lock:
            entries = list(self._entries.get(table_id, {}).values())
        return {key for entry in entries for key, _ in entry.attachments}


class InMemorySnapshotMetadataStore(SnapshotMetadataStore):
    def __init__(self) -> None:
        self._snapshots: dict[str, dict[int, SnapshotInfo]] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, snapshot: SnapshotInfo) -> None:
        with self._lock:
            current = self._latest.get(snapshot.table_id)
            if current is not None and current >= snapshot.transaction_number:
                raise StaleSnapshotError(
                    f"table {snapshot.table_id!r} already has a snapshot at transaction {current}; "
                    f"refusing to move back to {snapshot.transaction_number}"
                )
            self._snapshots.setdefault(snapshot.table_id, {})[snapshot.transaction_number] = snapshot
            self._latest[snapshot.table_id] = snapshot.transaction_number

    def latest(self, table_id: str) -> SnapshotInfo | None:
        with self._lock:
            number = self._latest.get(table_id)
            return None if number is None else self._snapshots[table_id][number]

    def list(self, table_id: str) -> list[SnapshotInfo]:
        with self._lock:
            snapshots = self._snapshots.get(table_id, {})
            return [snapshots[n] for n in sorted(snapshots)]

    def delete(self, table_id: str, transaction_number: int) -> None:
        with self._lock:
            if self._latest.get(table_id) == transaction_number:
                raise StateStoreError(f"refusing to delete the latest snapshot of table {table_id!r}")
            self._snapshots.get(table_id, {}).pop(transaction_number, None)

    def delete_table(self, table_id: str) -> None:
        with self._lock:
            self._snapshots.pop(table_id, None)
            self._latest.pop(table_id, None)


class InMemoryBlobStore(BlobStore):
    """Objects in a dict; ``clock`` (epoch ms) stamps each write with its last-modified time."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or now_millis
        self._objects: dict[str, bytes] = {}
        self._modified: dict[str, int] = {}
        self.tags: dict[str, dict[str, str]] = {}  # what S3 would hold as object tags
        self._keys: list[str] = []
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes, tags: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self.tags[key] = dict(tags or {})
            if key not in self._objects:
                bisect.insort(self._keys, key)
            self._objects[key] = bytes(data)
            self._modified[key] = self._clock()

    def get(self, key: str) -> bytes:
        with self._lock:
            try:
                return self._objects[key]
            except KeyError:
                raise BlobNotFoundError(key) from None

    def copy(self, source: str, destination: str) -> None:
        data = self.get(source)
        self.put(destination, data)

    def delete(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self.tags.pop(key, None)
                self._modified.pop(key, None)
                if self._objects.pop(key, None) is not None:
                    self._keys.remove(key)

    def list_modified(self, prefix: str) -> list[tuple[str, int]]:
        with self._lock:
            return [(key, self._modified[key]) for key in self._keys_under(prefix)]

    def _keys_under(self, prefix: str) -> list[str]:
        start = bisect.bisect_left(self._keys, prefix)
        out = []
        for key in self._keys[start:]:
            if not key.startswith(prefix):
                break
            out.append(key)
        return out

    def list_modified_pages(self, prefix: str, start_after: str = "") -> Iterator[list[tuple[str, int]]]:
        # Like S3: each page is read when asked for, from the last key given out (objects may come and go
        # in between), so a caller that stops early reads no further.
        after = start_after
        while True:
            with self._lock:
                start = max(bisect.bisect_left(self._keys, prefix), bisect.bisect_right(self._keys, after))
                page = [
                    (key, self._modified[key])
                    for key in self._keys[start : start + LIST_PAGE_SIZE]
                    if key.startswith(prefix)
                ]
            if not page:
                return
            yield page
            if len(page) < LIST_PAGE_SIZE:
                return
            after = page[-1][0]

    def list(self, prefix: str) -> list[str]:
        with self._lock:
            return self._keys_under(prefix)


# --- asynchronous commits ------------------------------------------------------------------------------

DEDUPLICATION_WINDOW_MS = 5 * 60 * 1000  # SQS FIFO's


class InMemoryCommitQueue(CommitQueue):
    """A FIFO queue in a list; like SQS FIFO it drops a message whose deduplication id it saw in 5 minutes."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or now_millis
        self._messages: list[QueueMessage] = []
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def send(self, messages: Sequence[QueueMessage]) -> None:
        with self._lock:
            now = self._clock()
            for message in messages:
                seen = self._seen.get(message.deduplication_id)
                if seen is not None and now - seen < DEDUPLICATION_WINDOW_MS:
                    continue
                self._seen[message.deduplication_id] = now
                self._messages.append(message)

    @property
    def messages(self) -> list[QueueMessage]:
        """The messages waiting, oldest first."""
        with self._lock:
            return list(self._messages)

    def take(self, max_messages: int = 10) -> list[QueueMessage]:
        """Remove and return up to ``max_messages`` of the oldest messages."""
        with self._lock:
            taken, self._messages = self._messages[:max_messages], self._messages[max_messages:]
            return taken


class InMemoryCommitStatusStore(CommitStatusStore):
    def __init__(self) -> None:
        self._statuses: dict[RequestKey, CommitStatus] = {}
        self._lock = threading.Lock()

    def record(self, statuses: Sequence[CommitStatus]) -> dict[RequestKey, CommitStatus]:
        kept: dict[RequestKey, CommitStatus] = {}
        with self._lock:
            for status in one_status_per_request(statuses):
                current = self._statuses.get(status.key)
                if current is not None and current.is_final:
                    kept[status.key] = current
                else:
                    self._statuses[status.key] = status
        return kept

    def get(self, table_id: str, request_id: str) -> CommitStatus | None:
        with self._lock:
            return self._statuses.get((table_id, request_id))

    def get_many(self, keys: Iterable[RequestKey]) -> dict[RequestKey, CommitStatus]:
        with self._lock:
            return {key: self._statuses[key] for key in keys if key in self._statuses}

    def _final_among(self, statuses: Sequence[CommitStatus]) -> list[str]:
        """Request ids of ``statuses`` that already have a final status (call under ``_lock``)."""
        return [s.request_id for s in statuses if (current := self._statuses.get(s.key)) and current.is_final]

    def _put_all(self, statuses: Sequence[CommitStatus]) -> None:
        """Store ``statuses`` none of which has a final status (call under ``_lock``)."""
        for status in statuses:
            self._statuses[status.key] = status


class InMemoryDeadLetterQueue(InMemoryCommitQueue, DeadLetterQueue):
    """A dead-letter queue in a list: the committer sends to it (a ``CommitQueue``), an operator lists and
    deletes (a ``DeadLetterQueue``). Each message gets an id when it arrives; the committer's reason and
    source message id come from the attributes it sends. ``messages`` and ``take`` work as on the base."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        super().__init__(clock)
        self._letters: list[DeadLetter] = []  # one per entry of ``_messages``, in the same order

    def send(self, messages: Sequence[QueueMessage]) -> None:
        with self._lock:
            now = self._clock()
            for message in messages:
                seen = self._seen.get(message.deduplication_id)
                if seen is not None and now - seen < DEDUPLICATION_WINDOW_MS:
                    continue
                self._seen[message.deduplication_id] = now
                attributes = dict(message.attributes)
                self._messages.append(message)
                self._letters.append(
                    DeadLetter(
                        message_id=uuid.uuid4().hex,
                        body=message.body,
                        group_id=message.group_id,
                        sent_time=now,
                        reason=attributes.get(DEAD_LETTER_REASON_ATTRIBUTE),
                        source_message_id=attributes.get(SOURCE_MESSAGE_ID_ATTRIBUTE),
                    )
                )

    def peek(self) -> list[DeadLetter]:
        with self._lock:
            return list(self._letters)

    def delete(self, message_ids: Collection[str]) -> list[str]:
        wanted = set(message_ids)
        with self._lock:
            pairs = zip(self._messages, self._letters, strict=True)
            kept = [(m, d) for m, d in pairs if d.message_id not in wanted]
            deleted = [d.message_id for d in self._letters if d.message_id in wanted]
            self._messages = [m for m, _ in kept]
            self._letters = [d for _, d in kept]
            return deleted

    def take(self, max_messages: int = 10) -> list[QueueMessage]:
        with self._lock:
            self._letters = self._letters[max_messages:]
            taken, self._messages = self._messages[:max_messages], self._messages[max_messages:]
            return taken


class InMemoryTableIndex(TableIndex):
    def __init__(self) -> None:
        self._by_id: dict[str, TableInfo] = {}
        self._id_by_name: dict[str, str] = {}
        self._lock = threading.Lock()

    def create(self, table: TableInfo) -> None:
        with self._lock:
            if table.table_name in self._id_by_name:
                raise TableAlreadyExistsError(table.table_name)
            if table.table_id in self._by_id:
                raise StateStoreError(f"table id {table.table_id!r} is already used")
            self._by_id[table.table_id] = table
            self._id_by_name[table.table_name] = table.table_id

    def get(self, table_id: str) -> TableInfo:
        with self._lock:
            try:
                return self._by_id[table_id]
            except KeyError:
                raise TableNotFoundError(table_id) from None

    def get_by_name(self, table_name: str) -> TableInfo:
        with self._lock:
            table_id = self._id_by_name.get(table_name)
            if table_id is None:
                raise TableNotFoundError(table_name)
            return self._by_id[table_id]

    def list(self) -> list[TableInfo]:
        with self._lock:
            return sorted(self._by_id.values(), key=lambda t: t.table_name)

    def rename(self, table_id: str, new_name: str) -> TableInfo:
        check_table_name(new_name)
        with self._lock:
            table = self._by_id.get(table_id)
            if table is None:
                raise TableNotFoundError(table_id)
            if new_name == table.table_name:
                return table
            if new_name in self._id_by_name:
                raise TableAlreadyExistsError(new_name)
            renamed = table.renamed(new_name)
            del self._id_by_name[table.table_name]
            self._id_by_name[new_name] = table_id
            self._by_id[table_id] = renamed
            return renamed

    def set_allowed_senders(self, table_id: str, senders: Sequence[str]) -> TableInfo:
        with self._lock:
            table = self._by_id.get(table_id)
            if table is None:
                raise TableNotFoundError(table_id)
            changed = self._by_id[table_id] = dataclasses.replace(table, allowed_senders=tuple(senders))
            return changed

    def set_property(self, table_id: str, name: str, value: str | None) -> TableInfo:
        with self._lock:
            table = self._by_id.get(table_id)
            if table is None:
                raise TableNotFoundError(table_id)
            changed = with_property(table, name, value)
            self._by_id[table_id] = changed
            return changed

    def mark_deleting(self, table_id: str) -> TableInfo:
        with self._lock:
            table = self._by_id.get(table_id)
            if table is None:
                raise TableNotFoundError(table_id)
            marked = self._by_id[table_id] = dataclasses.replace(table, deleting=True)
            return marked

    def delete(self, table_id: str) -> None:
        with self._lock:
            table = self._by_id.pop(table_id, None)
            if table is None:
                raise TableNotFoundError(table_id)
            del self._id_by_name[table.table_name]


@dataclasses.dataclass
class InMemoryCommitterSwitch(CommitterSwitch):
    """A switch with no committer behind it, for tests: set the queue's depth by hand."""

    paused: bool = False
    queue: QueueDepth = QueueDepth(0, 0)

    def set_paused(self, paused: bool) -> CommitterState:
        self.paused = paused
        return self.state()

    def state(self) -> CommitterState:
        return CommitterState(
            self.paused, "Disabled" if self.paused else "Enabled", dataclasses.replace(self.queue), "memory"
        )
