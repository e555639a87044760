"""The facade users and jobs call: tables by name, and each table's state store.

Built from the ports, so the same code runs in memory (:meth:`StateStoreClient.in_memory`) and on AWS or a
local endpoint (:meth:`StateStoreClient.for_aws`). AWS modules are imported only by ``for_aws``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from statestore.engine.jobs_reader import JobStatusReader, save_job_model_beside_snapshot
from statestore.engine.log_store import CommitResult, RetryPolicy, TableStateStore
from statestore.engine.row_store import open_state_store
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import (
    StateStoreError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedByFileStoreError,
)
from statestore.instance import ResourceNames
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.model.files import TableFile
from statestore.model.partition_tree import partitions_from_split_points
from statestore.model.partitions import Partition
from statestore.model.schema import Key, Schema
from statestore.services.leftovers import write_tombstone
from statestore.services.view_queries import QueryableViewQueries
from statestore.state.table_state import TableState
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemoryCommitStatusStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.memory_view import InMemoryQueryableViewStore
from statestore.store.ports import BlobStore, FileReferenceStore, TableIndex, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotInfo, SnapshotMetadataStore
from statestore.store.tables import FILE_STORE_LOG, TableInfo, parse_schema
from statestore.store.view_ports import QueryableViewStore
from statestore.transactions import InitialisePartitions, Transaction
from statestore.views import reports
from statestore.views.jobs_model import JobRun, JobsModel, JobState

_NO_FILE_STORE = (
    "this client has no file store: give one (the CLI's --postgres-url or STATESTORE_POSTGRES_URL, or "
    "StateStoreClient(..., file_store=...))"
)


class StateStoreClient(QueryableViewQueries):
    """Create, find, rename and delete tables, and open their state stores.

    Tables are named by name or by id wherever ``table`` is asked for; a name is tried first.
    Thread-safe as far as its ports are; each :meth:`state_store` is for one thread.
    ``file_store`` holds the files of tables created with ``file_store="postgres"`` (None: such tables
    cannot be opened). ``queryable_view`` holds the items of the tables' queryable views (None: the
    queries through a view, and its upkeep, are refused). ``clock`` (epoch ms, the system's by default)
    stamps the log entries its state stores write and its tables' tombstones.
    """

    def __init__(
        self,
        table_index: TableIndex,
        log: TransactionLogStore,
        snapshot_metadata: SnapshotMetadataStore,
        blobs: BlobStore,
        *,
        retry: RetryPolicy | None = None,
        file_store: FileReferenceStore | None = None,
        queryable_view: QueryableViewStore | None = None,
        clock: Callable[[], int] = now_millis,
    ) -> None:
        self.table_index = table_index
        self.clock = clock
        self.log = log
        self.snapshots = SnapshotStore(snapshot_metadata, blobs)
        self.blobs = blobs
        self.retry = retry
        self.file_store = file_store
        # The items of the tables' queryable views (None: this client queries no view, and says so).
        self.queryable_view_store = queryable_view

    @classmethod
    def in_memory(cls, file_store: FileReferenceStore | None = None) -> StateStoreClient:
        """Everything in this process: for tests, examples and the in-memory demo. ``file_store`` (e.g. an
        :class:`statestore.store.memory_files.InMemoryFileReferenceStore`) holds the files of postgres
        tables."""
        blobs = InMemoryBlobStore()
        log = InMemoryTransactionLog(blobs, InMemoryCommitStatusStore())
        return cls(
            InMemoryTableIndex(),
            log,
            InMemorySnapshotMetadataStore(),
            blobs,
            file_store=file_store,
            queryable_view=InMemoryQueryableViewStore(),
        )

    @classmethod
    def for_aws(
        cls,
        resources: ResourceNames,
        endpoint_url: str | None = None,
        *,
        region: str | None = None,
        provision: bool = False,
        file_store: FileReferenceStore | None = None,
        **connect: Any,
    ) -> StateStoreClient:
        """The instance named by ``resources`` on AWS, or on a local endpoint such as a moto server.

        ``provision=True`` first creates any missing tables and the bucket (embedded mode and tests).
        ``file_store`` holds the files of postgres tables. Extra keyword arguments go to
        :meth:`statestore.adapters.aws.backend.AwsBackend.connect`.
        """
        from statestore.adapters.aws.backend import AwsBackend

        backend = AwsBackend.connect(resources, endpoint_url, region=region, **connect)
        if provision:
            backend.provision()
        return cls(
            backend.table_index,
            backend.log,
            backend.snapshot_metadata,
            backend.blobs,
            file_store=file_store,
            queryable_view=backend.queryable_view,
        )

    # --- tables ---------------------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: Schema | Mapping[str, Any] | str,
        split_points: Sequence[Key] | None = None,
        properties: Mapping[str, str] | None = None,
        file_store: str = FILE_STORE_LOG,
        allowed_senders: Sequence[str] = (),
    ) -> TableInfo:
        """Add a table and initialise its partitions (cut at ``split_points`` on the first row key).

        ``file_store`` says where its file references live: ``"log"`` (its transaction log) or
        ``"postgres"`` (rows of this client's file store; partitions stay on the log).
        ``allowed_senders``: the IAM principal ids whose queued commit requests the committer accepts for
        the table (empty: anyone the queue lets send; ``statestore.services.committer.senders``).
        ``properties``: e.g. ``{"queryable_view": "true"}`` for a table whose queryable view the upkeep
        keeps current (see :meth:`set_queryable_view`).
        Raises InvalidSchemaError, InvalidKeyError/InvalidPartitionSplitError for bad split points (nothing
        is written), TableAlreadyExistsError if the name is taken, StateStoreError for an unknown file
        store, a postgres table on a client without one, or a property value the store cannot use.
        """
        parsed = parse_schema(schema)
        partitions = partitions_from_split_points(parsed, list(split_points or []))
        table = TableInfo.new(name, parsed, properties, file_store, allowed_senders)
        if table.files_in_rows:
            self._require_file_store(table)
        with self._name_taken(name):
            self.table_index.create(table)
        try:
            self._open(table, creating=True).commit(InitialisePartitions(tuple(partitions)))
        except BaseException:
            # Leave no half-made table: forget it and whatever reached its log.
            self.table_index.delete(table.table_id)
            self.log.delete_table(table.table_id)
            raise
        return table

    def set_allowed_senders(self, table: str, senders: Sequence[str]) -> TableInfo:
        """Replace the allowed senders of the table with this name (or else id); empty lets anyone the
        queue allows send. A committer keeps using a table's record for up to a minute (its
        ``table_info_ttl_ms``) before it sees the change. Raises TableNotFoundError, StateStoreError for an
        id no sender can have."""
        return self.table_index.set_allowed_senders(self.get_table(table).table_id, senders)

    def get_table(self, table: str) -> TableInfo:
        """The table with this name, or else this id. Raises TableNotFoundError, TableBeingDeletedError
        (one of them) once its delete has begun."""
        return self.table_record(table).live()

    def table_record(self, table: str) -> TableInfo:
        """The record of the table with this name, or else this id, its delete begun or not
        (:attr:`TableInfo.deleting`): what running an interrupted delete again needs. Raises
        TableNotFoundError."""
        try:
            return self.table_index.get_by_name(table)
        except TableNotFoundError:
            pass
        try:
            return self.table_index.get(table)
        except TableNotFoundError:
            raise TableNotFoundError(table) from None

    def list_tables(self) -> list[TableInfo]:
        """Every table, ordered by name; a table whose delete began too (:attr:`TableInfo.deleting`)."""
        return self.table_index.list()

    def rename_table(self, table: str, new_name: str) -> TableInfo:
        """Rename; the id (and so the log, snapshots and data) stays. Raises TableAlreadyExistsError."""
        info = self.get_table(table)
        with self._name_taken(new_name):
            return self.table_index.rename(info.table_id, new_name)

    @contextlib.contextmanager
    def _name_taken(self, name: str) -> Iterator[None]:
        """Raise TableAlreadyExistsError saying so where the table holding ``name`` is being deleted."""
        try:
            yield
        except TableAlreadyExistsError:
            try:
                deleting = self.table_index.get_by_name(name).deleting
            except TableNotFoundError:  # deleted since
                deleting = False
            if not deleting:
                raise
            raise TableAlreadyExistsError(name, being_deleted=True) from None

    def delete_table(self, table: str) -> None:
        """Delete a table: first mark its record (from then on, nothing of it is read or written: readers
        are told it is being deleted), then its log with the bodies, its snapshots, every object under its
        prefix, then write its tombstone (cleanup deletes what late writers still put under the prefix:
        :mod:`statestore.services.leftovers`), and last its index entries, so an interrupted delete can
        simply be run again."""
        info = self.table_index.mark_deleting(self.table_record(table).table_id)
        if info.files_in_rows:
            self._require_file_store(info).delete_table(info.table_id)
        self.log.delete_table(info.table_id)
        if self.queryable_view_store is not None:
            self.queryable_view_store.delete_table(info.table_id)
        self.snapshots.delete_table(info.table_id)
        self.blobs.delete(self.blobs.list(layout.table_prefix(info.table_id)))
        write_tombstone(self.blobs, info, self.clock())
        self.table_index.delete(info.table_id)

    # --- state ----------------------------------------------------------------------------------

    def state_store(self, table: str) -> TableStateStore:
        """A state store for one table (give each thread its own)."""
        return self._open(self.get_table(table))

    def _open(self, info: TableInfo, creating: bool = False) -> TableStateStore:
        """The table's state store, whose reads end by checking the table's delete has not begun (one read
        of its record): they never answer with a partly deleted table's state."""
        return open_state_store(
            info,
            self.log,
            self.snapshots,
            self.file_store,
            missing_file_store=_NO_FILE_STORE,
            retry=self.retry,
            creating=creating,
            table_check=partial(self._check_live, info.table_id),
            clock=self.clock,
        )

    def _check_live(self, table_id: str) -> None:
        self.table_index.check_live(table_id)

    def _require_file_store(self, info: TableInfo) -> FileReferenceStore:
        """This client's file store, for a table that keeps its files in one. Raises StateStoreError when
        the client has none."""
        if not info.files_in_rows:
            raise StateStoreError(f"table {info.table_name!r} keeps its files on its transaction log")
        if self.file_store is None:
            raise StateStoreError(
                f"table {info.table_name!r} keeps its file references in {info.file_store}, and "
                + _NO_FILE_STORE
            )
        return self.file_store

    def state(self, table: str, as_of: int | None = None) -> TableState:
        """The table's state now, or as of transaction ``as_of`` while the log still holds it."""
        store = self.state_store(table)
        return store.state() if as_of is None else store.load(as_of)

    def partitions(self, table: str) -> list[Partition]:
        return self.state(table).partitions()

    def leaf_partitions(self, table: str) -> list[Partition]:
        return self.state(table).leaf_partitions()

    def files(self, table: str) -> list[TableFile]:
        return self.state(table).files()

    def is_assigned(self, table: str, job_id: str, partition_id: str, filenames: Sequence[str]) -> bool:
        """Whether job ``job_id`` still holds its claim on ``filenames`` in ``partition_id`` (see
        :meth:`TableState.is_assigned`, which says what it raises)."""
        return self.state(table).is_assigned(job_id, partition_id, filenames)

    def files_ready_for_gc(self, table: str, before: int, limit: int | None = None) -> reports.GcCandidates:
        """Files with no references since before ``before`` (epoch ms), oldest first, at most ``limit``.

        For a table whose files are rows, "since" counts from when garbage collection's first phase marked
        the file (its rows do not say when its last reference went): exactly what cleanup would delete.
        """
        info = self.get_table(table)
        state = self._open(info).state()
        if info.files_in_rows:
            marked = set(self._require_file_store(info).files_ready_for_gc(info.table_id, before))
            state = TableState(
                info.schema,
                dict(state.partitions_by_id),
                {name: f for name, f in state.files_by_name.items() if name in marked},
                state.transaction_number,
            )
        return reports.files_ready_for_gc(state, before, limit)

    def files_report(self, table: str, limit: int | None = None) -> reports.FilesReport:
        """Referenced and unreferenced files, at most ``limit`` of each, with their totals."""
        return reports.files_report(self.state(table), limit)

    def references_per_partition(self, table: str) -> list[reports.PartitionReferences]:
        """Every partition with the count and rows of its references."""
        return reports.references_per_partition(self.state(table))

    def partition_report(self, table: str, split_threshold: int | None = None) -> reports.PartitionReport:
        """Leaf sizes from their references, and which leaves hold more than ``split_threshold`` rows."""
        return reports.partition_report(self.state(table), split_threshold)

    def commit(self, table: str, transaction: Transaction, request_id: str | None = None) -> CommitResult:
        """Commit synchronously (fine for rare writers; jobs use the commit queue). A ``request_id`` makes it
        idempotent: committed once, however often it is sent (see :meth:`TransactionLogStateStore.commit`)."""
        return self.state_store(table).commit(transaction, request_id)

    def create_snapshot(self, table: str) -> SnapshotInfo | None:
        """Snapshot the table's latest state, and save its job model beside it; None when nothing changed
        since the last snapshot."""
        info = self.get_table(table)
        written = self._open(info).create_snapshot()
        # A postgres table's log holds no file transaction, so it has no job history to save.
        if written is not None and not info.files_in_rows:
            save_job_model_beside_snapshot(
                info.table_id, info.schema, self.log, self.snapshots, written.transaction_number
            )
        try:
            self._check_live(info.table_id)
        except TableNotFoundError:  # its delete began meanwhile, and may have swept its snapshots before
            self.snapshots.delete_table(info.table_id)
            raise
        return written

    # --- jobs -----------------------------------------------------------------------------------

    def job_status_reader(self, table: str) -> JobStatusReader:
        """A reader of the table's job-status model (keep it to read only new entries on each call)."""
        info = self.get_table(table)
        if info.files_in_rows:
            raise UnsupportedByFileStoreError(info.table_id, "the job history")
        return JobStatusReader(info.table_id, info.schema, self.log, self.snapshots)

    def jobs(
        self,
        table: str,
        *,
        states: Iterable[JobState] = (),
        job_id: str | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> list[JobRun]:
        """Runs of the table's compaction jobs, filtered as :meth:`JobsModel.find_runs` does."""
        return self._jobs_model(table).find_runs(states=states, job_id=job_id, since=since, until=until)

    def job(self, table: str, job_id: str) -> tuple[JobRun, ...]:
        """Every run of one compaction job, oldest first. Raises JobNotFoundError."""
        return self._jobs_model(table).job(job_id)

    def _jobs_model(self, table: str) -> JobsModel:
        reader = self.job_status_reader(table)
        model = reader.model()
        self._check_live(reader.table_id)  # read from the log: checked as the state stores' reads are
        return model
