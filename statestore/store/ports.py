"""The small interfaces the engine needs from its backends, each with an in-memory twin in ``memory.py``
(``memory_files.py`` for the file reference store). The adapters (``statestore.adapters``) implement the
same interfaces; one behaviour suite runs against all. Implementations raise only :mod:`statestore.errors`
exceptions, never a backend's own. :class:`TableIndex`'s values are in ``tables.py``. The queryable
view's port is in ``view_ports.py``, the committer switch's in ``switch_ports.py``, the snapshot records' in
``snapshot_ports.py``, the dead-letter queues' in ``dead_letter_ports.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statestore.errors import TransactionValidationError
    from statestore.model.files import TableFile
    from statestore.model.partitions import Partition
    from statestore.model.schema import Schema
    from statestore.store.tables import TableInfo
    from statestore.transactions import Transaction


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One transaction in a table's log: ``body`` is the codec's output, ``compressed`` how to read it.

    ``writer_token`` is unique to the append that wrote the entry: a writer whose put failed ambiguously (the
    response was lost, or a retry of a put that had landed failed its condition) reads the entry back and
    recognises its own by it. Empty on entries written before tokens existed.

    ``attachments`` are ``(key, bytes)`` of bodies the entry's ``body`` names by key instead of holding them
    (a group commit member whose request body was in the bucket): objects under the table's
    ``layout.log_body_prefix`` that belong to the entry. On append they must already be in the blob store
    (the log records their keys and deletes them with the entry); on read the log gives their bytes.

    ``adds_to_leaves``, on an entry that only adds files, names the partitions it adds to if all were leaves
    as it was written (``transactions.leaves_added_to``; else empty); None on any other entry, and on those
    written before it was kept. A reader of some leaves may skip an entry naming none of them (read_about).

    ``most_added`` is what applying the entry adds to a state at most, ``(file references, partitions)``
    (``Transaction.most_added``), written with it; None on entries written before it was kept. A reader that
    keeps other tables in memory makes room for the entry from it before decoding the body: decoding an
    import of a million references costs about as much memory as applying it.

    ``index_leaves`` asks the log to index the entry for read_about, where it can (the entries of a table
    that keeps a queryable view): a reader trusts an index only where it records every entry of the range.
    """

    transaction_number: int
    update_time: int  # epoch milliseconds; every replica stamps the transaction's changes with it
    transaction_type: str
    body: bytes
    compressed: bool = False
    writer_token: str = ""
    attachments: tuple[tuple[str, bytes], ...] = ()
    adds_to_leaves: frozenset[str] | None = None
    most_added: tuple[int, int] | None = None
    index_leaves: bool = field(default=False, compare=False)  # how to write it, not what it holds


@dataclass(frozen=True)
class LogTail:
    """The latest entries of a table's log as one read found them: their ``numbers``, ascending, and the
    entries numbered after a given number, whole (``after``). A store that keeps some bodies aside (in the
    blob store) fetches those only when ``after`` asks for them: a reader wants just the entries past its
    snapshot, which the read was made before knowing."""

    numbers: tuple[int, ...]
    _after: Callable[[int], list[LogEntry]]

    @classmethod
    def of(cls, entries: Sequence[LogEntry]) -> LogTail:
        """The tail of entries already read whole (ascending)."""
        held = tuple(entries)
        return cls(
            tuple(e.transaction_number for e in held),
            lambda number: [e for e in held if e.transaction_number > number],
        )

    def covers_after(self, number: int) -> bool:
        """Whether it holds every entry the log had after ``number`` when read: it reaches back to
        ``number + 1`` or before (a log is contiguous: cleanup deletes only a prefix of it)."""
        return bool(self.numbers) and self.numbers[0] <= number + 1

    def after(self, number: int) -> list[LogEntry]:
        """The entries read numbered above ``number``, in order. May raise TransactionNotRetainedError if
        cleanup deleted one's body since."""
        return self._after(number)


class TransactionLogStore(ABC):
    """An ordered, append-only log of transactions per table."""

    @abstractmethod
    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        """Store ``entry`` if its number is unused and follows an entry in the log; raise
        TransactionNumberTakenError if it is taken, PreviousEntryGoneError (one) if the entry before it is not
        in the log (number 1 follows nothing). The second is what keeps a writer whose state fell behind
        cleanup from reusing a deleted number, whatever the clocks say: an entry is appended after one that
        exists, so the log never has a hole filled from a state that missed what was there.

        Taken includes "taken by this very entry": a retried put whose first try landed fails its condition.
        StoreUnavailableError means the outcome is unknown (the entry may or may not be stored); putting the
        same entry again is safe. May raise TransactionTooLargeError if the body cannot be stored at all.

        ``outcomes`` are the ``committed`` statuses of the requests the entry holds: they are written in
        :attr:`request_statuses` together with the entry, all or nothing, so a request in the log always has
        its status (a redelivery, resend or redrive finds it there, whatever committer gets it, whenever).
        Where one of those requests already has a final status, nothing is written and
        RequestsAlreadyDecidedError names them. Raises StateStoreError when ``outcomes`` are given to a log
        that records no statuses.
        """

    @property
    def request_statuses(self) -> CommitStatusStore | None:
        """The store the log writes its entries' request outcomes to (see :meth:`append`), or None."""
        return None

    @abstractmethod
    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        """Entries ``from_number <= n <= to_number`` (unbounded if None), in order, strongly consistent."""

    def read_about(
        self, table_id: str, from_number: int, to_number: int, partition_ids: Collection[str]
    ) -> tuple[list[LogEntry], int]:
        """The entries ``from_number <= n <= to_number`` but those that only add references to leaves they
        list, none in ``partition_ids`` (``LogEntry.adds_to_leaves``); and how many entries the range held,
        read or skipped (fewer than its numbers if some were deleted: the caller checks). This one reads
        every entry; a store that can filter (DynamoDB's FilterExpression) sends only those asked for."""
        wanted = set(partition_ids)
        read, held = [], 0
        for entry in self.read(table_id, from_number, to_number):
            held += 1
            if not entry.adds_to_leaves or not entry.adds_to_leaves.isdisjoint(wanted):
                read.append(entry)
        return read, held

    @abstractmethod
    def latest_number(self, table_id: str) -> int:
        """The highest transaction number in the log, 0 if the log has never had an entry."""

    def read_tail(self, table_id: str, count: int) -> LogTail:
        """The log's last ``count`` entries (all it has, if fewer), strongly consistent: what a reader that
        does not yet know where its snapshot is reads at once with it (DynamoDB: one Query, newest first).
        This default reads the latest number, then the entries from ``count - 1`` before it."""
        latest = self.latest_number(table_id)
        return LogTail.of(list(self.read(table_id, max(1, latest - count + 1))))

    @abstractmethod
    def delete_up_to(self, table_id: str, transaction_number: int) -> int:
        """Delete entries numbered ``<= transaction_number`` (with any stored bodies); return how many.

        The table's latest entry is always kept, so ``latest_number`` never goes back and a reader that
        fell behind sees a gap (and reloads from a snapshot) instead of an empty log it could append to.
        """

    @abstractmethod
    def delete_table(self, table_id: str) -> None:
        """Delete every entry of a table."""

    @abstractmethod
    def stored_body_keys(self, table_id: str) -> set[str]:
        """The blob keys the table's entries hold (bodies stored aside and attachments), without reading
        them: what the orphan sweep of the log prefix must keep."""


LIST_PAGE_SIZE = 1000  # S3's most keys per LIST call


class BlobStore(ABC):
    """Named byte objects (S3 in AWS): snapshot files, large transaction bodies."""

    @abstractmethod
    def put(self, key: str, data: bytes, tags: Mapping[str, str] | None = None) -> None:
        """Store ``data`` under ``key`` (replacing it), with object ``tags`` if given."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes; raises BlobNotFoundError if absent."""

    def get_at_most(self, key: str, max_bytes: int) -> bytes | None:
        """The object's bytes if it holds at most ``max_bytes``, else None, having read no more than that
        (S3: a ranged GET); raises BlobNotFoundError if absent. This default reads the whole object."""
        data = self.get(key)
        return data if len(data) <= max_bytes else None

    @abstractmethod
    def copy(self, source: str, destination: str) -> None:
        """Copy object ``source`` to ``destination`` inside the store (S3: server-side, no download), without
        its tags. Raises BlobNotFoundError if ``source`` is absent."""

    @abstractmethod
    def delete(self, keys: list[str]) -> None:
        """Delete objects; absent keys are ignored."""

    @abstractmethod
    def list_modified(self, prefix: str) -> list[tuple[str, int]]:
        """``(key, last modified epoch ms)`` of the keys starting with ``prefix``, sorted by key.

        The time is the store's (S3's ``LastModified``), of the object's last write: how old a file is that a
        job wrote and nothing has committed yet, which the garbage collection delay is measured against.
        """

    def list_modified_pages(self, prefix: str, start_after: str = "") -> Iterator[list[tuple[str, int]]]:
        """What :meth:`list_modified` lists, only the keys sorting after ``start_after``, a page (at most
        :data:`LIST_PAGE_SIZE` keys) at a time, each page fetched when the one before is consumed: a caller
        that stops early lists no further (S3: one LIST call a page, from ``StartAfter``). This default
        filters :meth:`list_modified`."""
        listed = [item for item in self.list_modified(prefix) if item[0] > start_after]
        for start in range(0, len(listed), LIST_PAGE_SIZE):
            yield listed[start : start + LIST_PAGE_SIZE]

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``, sorted."""


# --- asynchronous commits ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """A message for a FIFO queue: kept in order within ``group_id``; dropped if ``deduplication_id`` is a
    repeat from the last five minutes.

    ``attributes`` are string message attributes (the dead-letter queue carries the reason in one).
    """

    body: str
    group_id: str
    deduplication_id: str
    attributes: tuple[tuple[str, str], ...] = ()


# Message attributes the committer sends a dead letter with: why, and the id of the message it came in.
DEAD_LETTER_REASON_ATTRIBUTE = "reason"
SOURCE_MESSAGE_ID_ATTRIBUTE = "source_message_id"


class CommitQueue(ABC):
    """A FIFO queue of commit requests (SQS FIFO in AWS). The dead-letter queue has the same shape."""

    @abstractmethod
    def send(self, messages: Sequence[QueueMessage]) -> None:
        """Send ``messages``, keeping their order within each group.

        Raises StoreUnavailableError if some could not be sent; sending them all again is safe, as the queue
        drops a message whose deduplication id it saw in the last five minutes.
        """


class CommitOutcome(StrEnum):
    COMMITTED = "committed"
    REJECTED = "rejected"
    # Malformed, or for a table that does not exist: moved to the dead-letter queue, where it can be
    # inspected and redriven. Not final, so a redriven request is processed again.
    DEAD_LETTERED = "dead_lettered"
    # Written by committers before a committed request's status was written with its log entry: a
    # redelivered request they could neither find in the log nor rule out. Final, so no copy of it is ever
    # applied. No committer records it any more; old statuses still read.
    UNKNOWN = "unknown"


# A commit request is named by its table and its id: request ids are scoped to their table, so one
# table's request can never stand for, or be mistaken for, another table's.
RequestKey = tuple[str, str]  # (table_id, request_id)


@dataclass(frozen=True, slots=True)
class CommitStatus:
    """What became of a commit request: ``transaction_number`` is the log entry holding it (when committed);
    ``reason`` says why it was rejected or dead-lettered, or, for a committed request, which of its parts
    were skipped and why."""

    request_id: str
    table_id: str
    outcome: CommitOutcome
    recorded_time: int  # epoch ms
    transaction_number: int | None = None
    reason: str | None = None

    @property
    def key(self) -> RequestKey:
        return (self.table_id, self.request_id)

    @property
    def is_final(self) -> bool:
        """Committed, rejected or unknown: processing the request again must not change anything."""
        return self.outcome is not CommitOutcome.DEAD_LETTERED


def one_status_per_request(statuses: Iterable[CommitStatus]) -> list[CommitStatus]:
    """One status per request (table and id), in first-seen order: the first final one, else the last one."""
    chosen: dict[RequestKey, CommitStatus] = {}
    for status in statuses:
        current = chosen.get(status.key)
        if current is None or not current.is_final:
            chosen[status.key] = status
    return list(chosen.values())


class CommitStatusStore(ABC):
    """Outcomes of commit requests by (table id, request id), kept for
    ``resources.COMMIT_STATUS_RETENTION_SECONDS``. A committed request's status is written by the log
    together with its entry (:meth:`TransactionLogStore.append`); the others (rejected, dead-lettered) with
    :meth:`record`."""

    @abstractmethod
    def record(self, statuses: Sequence[CommitStatus]) -> dict[RequestKey, CommitStatus]:
        """Store ``statuses``, except over a final one: a final status never changes.

        A status replaces none or a dead-lettered one; where the request already has a final status, that
        one is kept and returned (by request key) instead. Where ``statuses`` names a request twice, a final
        status wins over a dead-lettered one (see :func:`one_status_per_request`). Each write is
        conditional on what is stored, so racing writers cannot overwrite a final status either.
        Raises StoreUnavailableError.
        """

    @abstractmethod
    def get(self, table_id: str, request_id: str) -> CommitStatus | None:
        """The status of one request of a table, or None if none is recorded (strongly consistent)."""

    @abstractmethod
    def get_many(self, keys: Iterable[RequestKey]) -> dict[RequestKey, CommitStatus]:
        """Statuses by request key for those of ``keys`` that have one (strongly consistent)."""


# --- file references kept as rows ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileCommitMember:
    """One transaction of a commit to a :class:`FileReferenceStore`: a row transaction (see
    ``statestore.views.row_decisions``), with the id of the commit request it came in, recorded with the
    commit so a request is never applied twice."""

    transaction: Transaction
    request_id: str


@dataclass(frozen=True)
class FileCommitOutcome:
    """What a :meth:`FileReferenceStore.commit` did with each member, by position: ``commit_number``
    numbers the commit that wrote the ``committed`` members (None when nothing was written); ``found`` maps
    members whose request id an earlier commit recorded to that commit's number; ``rejected`` holds each
    invalid member's error; ``skipped_parts`` the skipped parts of committed members."""

    commit_number: int | None
    update_time: int
    committed: tuple[int, ...]
    found: Mapping[int, int]
    rejected: Mapping[int, TransactionValidationError]
    skipped_parts: Mapping[int, tuple[tuple[str, str], ...]]


class FileReferenceStore(ABC):
    """A table's files and references as rows of a database with transactions (PostgreSQL): the file half
    of a table whose partitions stay on the log. Only the current state is kept (no time travel).

    Commits are decided by ``statestore.views.row_decisions``: the store reads the rows a commit reads,
    locking the reference rows, so concurrent commits that touch different references (compactions of
    different partitions of the same files) never wait for each other, and those that touch the same are
    serialised.
    """

    @abstractmethod
    def commit(
        self,
        table_id: str,
        schema: Schema,
        partitions_by_id: Mapping[str, Partition],
        members: Sequence[FileCommitMember],
        update_time: int,
    ) -> FileCommitOutcome:
        """Decide and write ``members`` atomically, in order.

        A member whose request id is already recorded is found, not applied again; each other member is
        validated against the rows as the members before it changed them (``partitions_by_id``: the table's
        partition tree) and rejected if invalid; the valid ones are written with their request ids under one
        new commit number, all or nothing. A race lost to a concurrent commit is redone inside (bounded),
        against the rows it left. Raises CommitConflictError when every try lost; StoreUnavailableError
        when the database could not be reached (nothing written), CommitOutcomeUnknownError when it failed
        so that it cannot be told (the request ids tell afterwards, see :meth:`committed_requests`).
        ValueError for a member that is not a row transaction.
        """

    @abstractmethod
    def files(self, table_id: str) -> dict[str, TableFile]:
        """Every file of the table with its references, read at one point in time (a consistent view).

        A file with no reference has ``last_update_time`` = when garbage collection marked it (or it was
        added with none), else when it was added."""

    @abstractmethod
    def has_files(self, table_id: str) -> bool:
        """Whether the table has any file (referenced or not)."""

    @abstractmethod
    def committed_requests(self, table_id: str, request_ids: Iterable[str]) -> dict[str, int]:
        """The commit number of each of ``request_ids`` that a commit recorded (for the table)."""

    @abstractmethod
    def clear(self, table_id: str) -> int:
        """Delete every file and reference of the table in one commit; returns its number."""

    @abstractmethod
    def mark_unreferenced(self, table_id: str, now: int) -> int:
        """Garbage collection's first phase: stamp ``now`` (epoch ms) on files that have lost their last
        reference and are not marked yet; returns how many were marked."""

    @abstractmethod
    def files_ready_for_gc(self, table_id: str, before: int, limit: int | None = None) -> list[str]:
        """Garbage collection's second phase: files with no reference, marked (or added with none) before
        ``before`` (epoch ms), oldest first, at most ``limit``. Delete their objects, then commit a
        DeleteFiles of them (which checks again that they have no reference)."""

    @abstractmethod
    def forget_requests(self, table_id: str, before: int) -> int:
        """Forget request ids recorded before ``before`` (epoch ms: older than any redelivery); returns how
        many."""

    @abstractmethod
    def delete_table(self, table_id: str) -> None:
        """Delete every row of the table."""


class TableIndex(ABC):
    """Tables by id and by name. Names are unique; ids never change."""

    @abstractmethod
    def create(self, table: TableInfo) -> None:
        """Add ``table``. Raises TableAlreadyExistsError if its name is taken (nothing is written)."""

    @abstractmethod
    def get(self, table_id: str) -> TableInfo:
        """Raises TableNotFoundError if no table has this id."""

    @abstractmethod
    def get_by_name(self, table_name: str) -> TableInfo:
        """Raises TableNotFoundError if no table has this name."""

    @abstractmethod
    def list(self) -> list[TableInfo]:
        """Every table, ordered by name."""

    @abstractmethod
    def rename(self, table_id: str, new_name: str) -> TableInfo:
        """Give a table a new name; returns the renamed info.

        Raises TableNotFoundError for an unknown id, TableAlreadyExistsError if the name is taken.
        """

    def check_live(self, table_id: str) -> None:
        """Raise TableNotFoundError, or TableBeingDeletedError once the table's delete began (one read)."""
        self.get(table_id).live()

    @abstractmethod
    def mark_deleting(self, table_id: str) -> TableInfo:
        """Mark the table's record: its delete has begun (:attr:`TableInfo.deleting`; marking it again
        changes nothing). Returns the marked info. Raises TableNotFoundError for an unknown id."""

    @abstractmethod
    def delete(self, table_id: str) -> None:
        """Forget a table (its id and its name). Raises TableNotFoundError for an unknown id."""

    @abstractmethod
    def set_allowed_senders(self, table_id: str, senders: Sequence[str]) -> TableInfo:
        """Replace the table's allowed senders (empty: anyone); returns the changed info. Raises
        TableNotFoundError for an unknown id, StateStoreError for an id no sender can have."""

    @abstractmethod
    def set_property(self, table_id: str, name: str, value: str | None) -> TableInfo:
        """Set one of the table's properties (None: remove it), leaving the others as they are, even when
        another caller changes one at the same time; returns the changed info. Raises TableNotFoundError
        for an unknown id, StateStoreError for a value the store cannot use
        (:func:`statestore.store.tables.check_properties`)."""
