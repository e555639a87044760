"""File transactions decided on the rows they read: the rules of a file-reference store that keeps rows.

A store that holds file references as rows in a database (PostgreSQL) does not load a whole table per
commit. Each file transaction reads a few rows: :func:`rows_read` names them; the store reads (and locks)
those rows; :func:`decide` validates and applies the transactions on a state holding only those rows, with
the transaction classes' own ``validate`` and ``apply`` (so the rules stay in one place), and returns the
row changes to write.

A file row holds the file's name and times; each reference is a row of its own keyed by (file, partition).
A commit that moves references (a compaction) changes reference rows only, never its input files' rows, so
commits on different partitions of the same files do not contend (design record 002, option 3). A file
whose last reference went is found by garbage collection, which marks it, and deleted after a delay.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from statestore.errors import TransactionValidationError
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIds,
    DeleteFiles,
    ReleaseClaims,
    ReplaceFileReferences,
    SplitFileReferences,
    Transaction,
)

# The file transactions a row store decides with :func:`decide`. ClearFiles and ClearTable change every
# row (the store clears a table in one statement); partition transactions stay on the log.
ROW_TRANSACTION_TYPES: tuple[type[Transaction], ...] = (
    AddFiles,
    AssignJobIds,
    ReleaseClaims,
    ReplaceFileReferences,
    SplitFileReferences,
    DeleteFiles,
)


@dataclass(frozen=True)
class RowsRead:
    """The rows a group of file transactions reads; every other row is left alone.

    ``filenames``: file rows read for whether the file exists (no references needed). ``references``:
    ``(filename, partition_id)`` references read, each with its file's row. ``whole_files``: files read
    with every reference. ``job_ids``: every reference assigned to one of these jobs, with its file's row.
    A store locks the reference rows it reads (and the file rows of ``whole_files``), so two commits that
    read the same reference are serialised; a file that does not exist yet is guarded by its primary key.
    """

    filenames: frozenset[str] = frozenset()
    references: frozenset[tuple[str, str]] = frozenset()
    whole_files: frozenset[str] = frozenset()
    job_ids: frozenset[str] = frozenset()

    def __or__(self, other: RowsRead) -> RowsRead:
        return RowsRead(
            self.filenames | other.filenames,
            self.references | other.references,
            self.whole_files | other.whole_files,
            self.job_ids | other.job_ids,
        )


def is_row_transaction(transaction: Transaction) -> bool:
    """Whether a row store decides ``transaction`` with :func:`decide` (see ``ROW_TRANSACTION_TYPES``)."""
    return isinstance(transaction, ROW_TRANSACTION_TYPES)


def rows_read(transactions: Iterable[Transaction]) -> RowsRead:
    """The rows :func:`decide` needs to validate and apply ``transactions``, all of them row transactions.

    Reads only what a transaction's ``validate`` and ``apply`` look at; a malformed transaction (wrong types
    inside) may name rows it will not get to: its validation fails on its own terms. Raises ValueError for
    a transaction that is not a row transaction.
    """
    filenames: set[str] = set()
    references: set[tuple[str, str]] = set()
    whole_files: set[str] = set()
    job_ids: set[str] = set()
    for transaction in transactions:
        if isinstance(transaction, AddFiles):
            filenames.update(_names(ref.filename for ref in transaction.references))
            filenames.update(_names(transaction.unreferenced_files))
        elif isinstance(transaction, AssignJobIds):
            for request in transaction.requests:
                references.update(_keys(request.filenames, request.partition_id))
        elif isinstance(transaction, ReleaseClaims):
            job_ids.update(_names(transaction.job_ids))
        elif isinstance(transaction, ReplaceFileReferences):
            for job in transaction.jobs:
                references.update(_keys(job.input_files, job.partition_id))
                filenames.update(_names([getattr(job.new_reference, "filename", None)]))
        elif isinstance(transaction, SplitFileReferences):
            whole_files.update(_names(request.filename for request in transaction.requests))
        elif isinstance(transaction, DeleteFiles):
            whole_files.update(_names(transaction.filenames))
        else:
            raise _not_a_row_transaction(transaction)
    return RowsRead(frozenset(filenames), frozenset(references), frozenset(whole_files), frozenset(job_ids))


def _not_a_row_transaction(transaction: Transaction) -> ValueError:
    return ValueError(
        f"{type(transaction).__name__} is not decided on rows: the row store takes "
        + ", ".join(t.TYPE for t in ROW_TRANSACTION_TYPES)
    )


def _names(values: Iterable[object]) -> list[str]:
    return [value for value in values if isinstance(value, str) and value]


def _keys(filenames: Iterable[object], partition_id: object) -> list[tuple[str, str]]:
    if not isinstance(partition_id, str):
        return []
    return [(filename, partition_id) for filename in _names(filenames)]


@dataclass(frozen=True)
class RowChanges:
    """What a decided group writes.

    ``added_files``: new files with all their references (a file added with none awaits garbage collection
    from its ``last_update_time``). ``deleted_files``: files removed with every reference; they are deleted
    before ``added_files`` are inserted (a file deleted and added again in one group is in both). Of the other
    files, ``added_references`` are new reference rows (inserted: a row already there means another writer
    got in first, and the commit must be redone), ``changed_references`` replace rows read (same file and
    partition), ``deleted_references`` are ``(filename, partition_id)`` rows removed. File rows of files that
    stay are never changed.
    """

    added_files: tuple[TableFile, ...] = ()
    deleted_files: tuple[str, ...] = ()
    added_references: tuple[FileReference, ...] = ()
    changed_references: tuple[FileReference, ...] = ()
    deleted_references: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.added_files
            or self.deleted_files
            or self.added_references
            or self.changed_references
            or self.deleted_references
        )


@dataclass(frozen=True)
class RowDecision:
    """The outcome of :func:`decide`, by member position: ``committed`` members in order, ``rejected`` ones
    with their errors, the ``skipped_parts`` of committed ones, and the ``changes`` to write."""

    committed: tuple[int, ...]
    rejected: Mapping[int, TransactionValidationError]
    skipped_parts: Mapping[int, tuple[tuple[str, str], ...]]
    changes: RowChanges


def decide(
    schema: Schema,
    partitions_by_id: Mapping[str, Partition],
    files: Mapping[str, TableFile],
    transactions: Sequence[Transaction],
    update_time: int,
    data_prefix: str | None = None,
) -> RowDecision:
    """Validate each of ``transactions`` against the rows read as changed by the ones before it, apply the
    valid ones, and say what to write.

    ``files`` holds the rows :func:`rows_read` named, as the store read them: each file with the references
    read (a file read for its existence may show none of its references). ``partitions_by_id`` is the
    table's partition tree (from the log); it is not changed. ``data_prefix`` is the table's (see
    :attr:`TableState.data_prefix`). Raises ValueError for a transaction that is not a row transaction.
    """
    for transaction in transactions:
        if not is_row_transaction(transaction):
            raise _not_a_row_transaction(transaction)
    before = dict(files)
    # Row transactions never change partitions, so the caller's tree is used as it is, without a copy.
    state = TableState(schema, partitions_by_id, dict(files))
    state.data_prefix = data_prefix
    committed: list[int] = []
    rejected: dict[int, TransactionValidationError] = {}
    skipped: dict[int, tuple[tuple[str, str], ...]] = {}
    deleted_names: set[str] = set()
    for position, transaction in enumerate(transactions):
        try:
            transaction.validate(state)
        except TransactionValidationError as e:
            rejected[position] = e
            continue
        parts = tuple((part, str(error)) for part, error in transaction.rejected_parts(state))
        if parts:
            skipped[position] = parts
        transaction.apply(state, update_time)
        committed.append(position)
        if isinstance(transaction, DeleteFiles):
            deleted_names.update(transaction.filenames)
    changes = row_changes(before, state.files_by_name, deleted_names)
    return RowDecision(tuple(committed), rejected, skipped, changes)


def row_changes(
    before: Mapping[str, TableFile], after: Mapping[str, TableFile], deleted_names: Collection[str] = ()
) -> RowChanges:
    """The rows to write to turn ``before`` (the rows read) into ``after`` (the same rows, changed).

    ``deleted_names`` names files the changes deleted: one that is in ``after`` again was added anew after its
    deletion (in the same group), so its row is deleted and inserted, not kept with the old file's times.
    """
    added_files = tuple(f for name, f in after.items() if name not in before or name in deleted_names)
    deleted_files = tuple(name for name in before if name not in after or name in deleted_names)
    added: list[FileReference] = []
    changed: list[FileReference] = []
    deleted: list[tuple[str, str]] = []
    for name, old in before.items():
        new = after.get(name)
        if new is None or new is old or name in deleted_names:
            continue
        old_refs = {ref.partition_id: ref for ref in old.references}
        new_refs = {ref.partition_id: ref for ref in new.references}
        for partition_id, ref in new_refs.items():
            previous = old_refs.get(partition_id)
            if previous is None:
                added.append(ref)
            elif previous != ref:
                changed.append(ref)
        deleted.extend((name, partition_id) for partition_id in old_refs if partition_id not in new_refs)
    return RowChanges(added_files, deleted_files, tuple(added), tuple(changed), tuple(deleted))
