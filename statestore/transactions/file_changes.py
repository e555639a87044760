"""Transactions that change file references: add, claim, release, replace, split, delete, clear."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, cast

from statestore.errors import (
    AllJobsRejectedError,
    FileAlreadyExistsError,
    FileHasReferencesError,
    FileReferenceAlreadyExistsError,
    FileReferenceAssignedToJobError,
    FileReferenceNotAssignedToJobError,
    FileReferenceNotFoundError,
    InvalidTransactionError,
    PartitionNotFoundError,
    TransactionValidationError,
)
from statestore.model.files import FileReference, TableFile
from statestore.state.cycle_collector import collector_paused
from statestore.state.file_columns import FileColumns, forget_split_filenames
from statestore.state.file_guard import NewFileChecks
from statestore.state.table_state import TableState
from statestore.transactions.base import Transaction
from statestore.transactions.checks import (
    check_epoch_ms,
    check_name,
    check_new_filename,
    check_new_reference,
    reference_in,
    well_formed_names,
)

# Builds a FileReference from a tuple of all its fields, without ``_make``'s Python call per reference.
_new_file_reference = cast(Callable[[Iterable[Any]], FileReference], partial(tuple.__new__, FileReference))


_MANY_REFERENCES = 1_000  # an AddFiles of at least this many references pauses the cycle collector


@dataclass(frozen=True)
class AddFiles(Transaction):
    """Add new data files, each with one or more references (several for a file spanning partitions).

    ``unreferenced_files`` names files added with no reference at all: written but referenced nowhere yet.
    They are ready for garbage collection from the time they are added.

    A bulk AddFiles (``_MANY_REFERENCES`` or more) is checked column by column and, when each file has one
    reference, added to the state as columns (:meth:`TableState.add_new_files`), with no object per file.
    """

    TYPE: ClassVar[str] = "AddFiles"
    references: tuple[FileReference, ...]
    unreferenced_files: tuple[str, ...] = ()

    def _reference_columns(self) -> tuple[tuple[Any, ...], ...]:
        """The references' fields as columns (filenames, partition ids, rows...), transposed once and kept
        until :meth:`apply`: a bulk AddFiles reads them in validate, then in apply. The references are
        FileReferences (their types checked)."""
        columns = self.__dict__.get("_columns")  # not a field: no part of the transaction's value
        if columns is None:
            transposed = tuple(zip(*self.references, strict=True)) or ((),) * len(FileReference._fields)
            columns = self.__dict__["_columns"] = transposed
        return cast(tuple[tuple[Any, ...], ...], columns)

    def most_added(self) -> tuple[int, int]:
        return len(self.references) + len(self.unreferenced_files), 0  # a file held unreferenced costs one

    def validate(self, state: NewFileChecks) -> None:  # a TableState, or what a FileGuard keeps of one
        if not self.references and not self.unreferenced_files:
            raise InvalidTransactionError("AddFiles needs at least one file reference or unreferenced file")
        if len(self.references) < _MANY_REFERENCES:
            self._validate(state)
            return
        with collector_paused():  # as in apply: many short-lived objects
            self._validate(state)

    def _validate(self, state: NewFileChecks) -> None:
        bulk = len(self.references) >= _MANY_REFERENCES
        checked = well_formed_names(state, self.references, self._reference_columns) if bulk else None
        if checked is None:
            # One search of the state for every name (a big AddFiles adds a hundred thousand).
            present = state.files_present([ref.filename for ref in self.references])
            referenced = self._check_each_reference(state, present)
        else:
            filenames, referenced = checked
            present = state.files_present(list(filenames))
            if any(present):  # the only thing left that can be wrong with these references
                raise FileAlreadyExistsError(filenames[present.index(True)])
        unreferenced: set[str] = set()
        for filename in self.unreferenced_files:
            check_new_filename(filename, "an unreferenced file", state.data_prefix)
            if filename in unreferenced or state.files_present([filename])[0]:
                raise FileAlreadyExistsError(filename)
            if filename in referenced:
                raise InvalidTransactionError(
                    f"file {filename!r} is added both with references and as an unreferenced file"
                )
            unreferenced.add(filename)

    def _check_each_reference(self, state: NewFileChecks, present: list[bool]) -> set[str]:
        """Check the references one by one, raising on the first wrong one; returns their filenames."""
        seen: set[tuple[str, str]] = set()
        for ref, exists in zip(self.references, present, strict=True):
            check_new_reference(state, ref)
            if exists:
                raise FileAlreadyExistsError(ref.filename)
            key = (ref.filename, ref.partition_id)
            if key in seen:
                raise FileReferenceAlreadyExistsError(ref.filename, ref.partition_id)
            seen.add(key)
        return {filename for filename, _ in seen}

    def apply(self, state: TableState, update_time: int) -> None:
        if len(self.references) < _MANY_REFERENCES:
            self._apply(state, update_time)
            return
        # A bulk AddFiles makes two objects per reference: see collector_paused.
        with collector_paused():
            self._apply(state, update_time)
        # Their last use: neither the columns nor the split of the names outlive the transaction's apply.
        self.__dict__.pop("_columns", None)
        forget_split_filenames()

    def _apply(self, state: TableState, update_time: int) -> None:
        if len(self.references) >= _MANY_REFERENCES:
            names, partitions, rows, approximate, whole_file, _, _ = self._reference_columns()
            if len(set(names)) == len(names):  # one reference per file: straight into columns
                added = FileColumns.of_new_files(
                    names, partitions, rows, approximate, whole_file, self.unreferenced_files, update_time
                )
                state.add_new_files(added)
                return
        # As ``ref._replace(last_update_time=update_time)``, without its keyword handling per reference.
        stamped = [_new_file_reference((*ref[:6], update_time)) for ref in self.references]
        if len({ref.filename for ref in stamped}) == len(stamped):  # the usual case: one reference per file
            files = [TableFile(ref.filename, (ref,), update_time) for ref in stamped]
        else:
            grouped: dict[str, list[FileReference]] = {}
            for ref in stamped:
                grouped.setdefault(ref.filename, []).append(ref)
            files = [TableFile(filename, tuple(refs), update_time) for filename, refs in grouped.items()]
        files += (TableFile(filename, (), update_time) for filename in self.unreferenced_files)
        state.put_files(files)


@dataclass(frozen=True)
class AssignJobIdRequest:
    """Assign the references of ``filenames`` in ``partition_id`` to compaction job ``job_id``."""

    job_id: str
    partition_id: str
    filenames: tuple[str, ...]


@dataclass(frozen=True)
class AssignJobIds(Transaction):
    """Give compaction jobs ownership of (*claim*) their input references. Fails whole if any is taken.

    A reference's ``last_update_time`` records when it was claimed: nothing else changes a claimed
    reference (a split leaves it, ``ReplaceFileReferences`` removes it, ``ReleaseClaims`` un-assigns it).
    With ``take_over_claimed_before`` (epoch ms) a reference claimed by another job before that time may be
    claimed anyway: that job is presumed dead (a compaction that resumes expired claims). Its claim passes
    atomically to the new job, so no reference is ever held by two jobs, and if the old job still commits,
    its ``ReplaceFileReferences`` is rejected because its inputs are no longer assigned to it.
    """

    TYPE: ClassVar[str] = "AssignJobIds"
    requests: tuple[AssignJobIdRequest, ...]
    take_over_claimed_before: int | None = None

    def validate(self, state: TableState) -> None:
        if not self.requests:
            raise InvalidTransactionError("AssignJobIds needs at least one request")
        check_epoch_ms("take_over_claimed_before", self.take_over_claimed_before)
        claimed: dict[tuple[str, str], str] = {}
        for request in self.requests:
            if not isinstance(request.job_id, str) or not request.job_id:
                raise InvalidTransactionError(f"a job id must be a non-empty string, got {request.job_id!r}")
            check_name(request.job_id, "job id")
            if not request.filenames:
                raise InvalidTransactionError(f"job {request.job_id!r} assigns no files")
            for filename in request.filenames:
                ref = reference_in(state, filename, request.partition_id)
                earlier = claimed.get((filename, request.partition_id))
                if earlier is not None:
                    raise FileReferenceAssignedToJobError(filename, request.partition_id, earlier)
                if ref.job_id is not None:
                    self._check_take_over(ref, ref.job_id)
                claimed[(filename, request.partition_id)] = request.job_id

    def _check_take_over(self, ref: FileReference, owner: str) -> None:
        cutoff = self.take_over_claimed_before
        if cutoff is None:
            raise FileReferenceAssignedToJobError(ref.filename, ref.partition_id, owner)
        if ref.last_update_time >= cutoff:
            raise FileReferenceAssignedToJobError(
                ref.filename,
                ref.partition_id,
                owner,
                f"claimed at {ref.last_update_time}, not before {cutoff}: its job may still be running",
            )

    def apply(self, state: TableState, update_time: int) -> None:
        for request in self.requests:
            for filename in request.filenames:
                table_file = state.files_by_name[filename]
                refs = tuple(
                    r._replace(job_id=request.job_id, last_update_time=update_time)
                    if r.partition_id == request.partition_id
                    else r
                    for r in table_file.references
                )
                state.put_file(table_file.with_references(refs, update_time))


@dataclass(frozen=True)
class ReleaseClaims(Transaction):
    """Un-assign the references claimed by ``job_ids``, so that later compactions can claim them again.

    Used when a compaction job failed after its claim (its merge failed, its commit was rejected) and by the
    cleanup's sweep of claims whose job is presumed dead. With ``claimed_before`` (epoch ms) only claims made
    before that time are released: the sweep decides on a state it read earlier, and a claim made since by a
    job of the same id (ids chosen by other tools may repeat) belongs to a job that may be running.

    Releasing is idempotent: a job that holds nothing (its replace committed, an earlier release or a
    take-over got there first, or a retry after a lost response) is accepted and changes nothing, so a job
    never has to find out which happened before releasing. A released job's ``ReplaceFileReferences`` is
    rejected (its inputs are no longer assigned to it), so a job whose claim was released by mistake loses
    its work, never a row. Released references are stamped with the update time, like every change.
    """

    TYPE: ClassVar[str] = "ReleaseClaims"
    job_ids: tuple[str, ...]
    claimed_before: int | None = None

    def validate(self, state: TableState) -> None:
        if not self.job_ids:
            raise InvalidTransactionError("ReleaseClaims needs at least one job id")
        for job_id in self.job_ids:
            if not isinstance(job_id, str) or not job_id:
                raise InvalidTransactionError(f"a job id must be a non-empty string, got {job_id!r}")
            check_name(job_id, "job id")
        if len(set(self.job_ids)) != len(self.job_ids):
            raise InvalidTransactionError("ReleaseClaims lists a job id more than once")
        check_epoch_ms("claimed_before", self.claimed_before)

    def apply(self, state: TableState, update_time: int) -> None:
        jobs, before = frozenset(self.job_ids), self.claimed_before

        def released(ref: FileReference) -> bool:
            return ref.job_id in jobs and (before is None or ref.last_update_time < before)

        # Only the files holding such a claim are read: a release costs what it changes, not the table.
        state.put_files(
            table_file.with_references(
                tuple(
                    r._replace(job_id=None, last_update_time=update_time) if released(r) else r
                    for r in table_file.references
                ),
                update_time,
            )
            for table_file in state.files_claimed_by(jobs, before)
        )


@dataclass(frozen=True)
class ReplaceFileReferencesJob:
    """One finished compaction job: its inputs in ``partition_id`` are replaced by ``new_reference``."""

    job_id: str
    partition_id: str
    input_files: tuple[str, ...]
    new_reference: FileReference


@dataclass(frozen=True)
class ReplaceFileReferences(Transaction):
    """Commit finished compaction jobs. Each job is checked on its own: invalid ones are skipped."""

    TYPE: ClassVar[str] = "ReplaceFileReferences"
    jobs: tuple[ReplaceFileReferencesJob, ...]

    def most_added(self) -> tuple[int, int]:
        return len(self.jobs), 0  # each job's output

    def validate(self, state: TableState) -> None:
        if not self.jobs:
            raise InvalidTransactionError("ReplaceFileReferences needs at least one job")
        failures = self.rejected_parts(state)
        if len(failures) == len(self.jobs):
            raise AllJobsRejectedError(failures)

    def rejected_parts(self, state: TableState) -> list[tuple[str, TransactionValidationError]]:
        return [(self.jobs[index].job_id, error) for index, error in self._rejected_jobs(state).items()]

    def _rejected_jobs(self, state: TableState) -> dict[int, TransactionValidationError]:
        # Keyed by position, not job id: the same job can appear twice (a redelivered commit), and
        # rejecting the second copy must not skip the first.
        failures: dict[int, TransactionValidationError] = {}
        consumed: set[tuple[str, str]] = set()
        produced: set[str] = set()
        for index, job in enumerate(self.jobs):
            try:
                self._check_job(state, job, consumed, produced)
            except TransactionValidationError as e:
                failures[index] = e
                continue
            consumed.update((f, job.partition_id) for f in job.input_files)
            produced.add(job.new_reference.filename)
        return failures

    @staticmethod
    def _check_job(
        state: TableState, job: ReplaceFileReferencesJob, consumed: set[tuple[str, str]], produced: set[str]
    ) -> None:
        if not job.input_files:
            raise InvalidTransactionError(f"job {job.job_id!r} has no input files")
        if len(set(job.input_files)) != len(job.input_files):
            raise InvalidTransactionError(f"job {job.job_id!r} lists an input file more than once")
        new = job.new_reference
        if new.partition_id != job.partition_id:
            raise InvalidTransactionError(
                f"job {job.job_id!r} output is in partition {new.partition_id!r}, "
                f"not its own {job.partition_id!r}"
            )
        if new.filename in job.input_files:
            raise InvalidTransactionError(
                f"job {job.job_id!r} output {new.filename!r} is also one of its inputs"
            )
        # Inputs before the output: a job committed twice is reported as "already replaced", not as
        # "output file already exists" (its output is in the state from the first commit).
        if job.partition_id not in state.partitions_by_id:
            raise PartitionNotFoundError(job.partition_id)
        for filename in job.input_files:
            if (filename, job.partition_id) in consumed:
                raise FileReferenceNotFoundError(filename, job.partition_id)
            ref = reference_in(state, filename, job.partition_id)
            if ref.job_id != job.job_id:
                raise FileReferenceNotAssignedToJobError(filename, job.partition_id, job.job_id, ref.job_id)
        check_new_reference(state, new)
        if new.filename in state.files_by_name or new.filename in produced:
            raise FileAlreadyExistsError(new.filename)

    def apply(self, state: TableState, update_time: int) -> None:
        rejected = self._rejected_jobs(state)
        for index, job in enumerate(self.jobs):
            if index in rejected:
                continue
            for filename in job.input_files:
                state.put_file(state.files_by_name[filename].without_reference(job.partition_id, update_time))
            new = job.new_reference._replace(last_update_time=update_time)
            state.put_file(TableFile(new.filename, (new,), update_time))


@dataclass(frozen=True)
class SplitFileReferenceRequest:
    """Replace the reference to ``filename`` in ``from_partition_id`` by references lower in the tree."""

    filename: str
    from_partition_id: str
    new_references: tuple[FileReference, ...]


@dataclass(frozen=True)
class SplitFileReferences(Transaction):
    """Push file references down from split partitions to their descendants."""

    TYPE: ClassVar[str] = "SplitFileReferences"
    requests: tuple[SplitFileReferenceRequest, ...]

    def most_added(self) -> tuple[int, int]:
        return sum(len(request.new_references) for request in self.requests), 0

    def validate(self, state: TableState) -> None:
        if not self.requests:
            raise InvalidTransactionError("SplitFileReferences needs at least one request")
        moved: set[tuple[str, str]] = set()
        added: set[tuple[str, str]] = set()
        for request in self.requests:
            key = (request.filename, request.from_partition_id)
            if key in moved:
                raise FileReferenceNotFoundError(*key)
            ref = reference_in(state, request.filename, request.from_partition_id)
            if ref.job_id is not None:
                raise FileReferenceAssignedToJobError(request.filename, request.from_partition_id, ref.job_id)
            if not request.new_references:
                raise InvalidTransactionError(f"split of {request.filename!r} gives no new references")
            source = state.partition(request.from_partition_id)
            table_file = state.files_by_name[request.filename]
            for new in request.new_references:
                if new.filename != request.filename:
                    raise InvalidTransactionError(
                        f"split of {request.filename!r} names another file {new.filename!r}"
                    )
                check_new_reference(state, new)
                target = state.partitions_by_id[new.partition_id]
                if target.id == source.id or not source.region.covers(target.region):
                    raise InvalidTransactionError(
                        f"partition {new.partition_id!r} is not below {source.id!r}, so a reference to "
                        f"{new.filename!r} cannot move there"
                    )
                new_key = (new.filename, new.partition_id)
                if table_file.reference_in(new.partition_id) is not None or new_key in added:
                    raise FileReferenceAlreadyExistsError(*new_key)
                added.add(new_key)
            moved.add(key)

    def apply(self, state: TableState, update_time: int) -> None:
        for request in self.requests:
            table_file = state.files_by_name[request.filename]
            kept = tuple(r for r in table_file.references if r.partition_id != request.from_partition_id)
            new = tuple(r._replace(last_update_time=update_time) for r in request.new_references)
            state.put_file(table_file.with_references(kept + new, update_time))


@dataclass(frozen=True)
class DeleteFiles(Transaction):
    """Garbage collection: forget files that have no references (their objects were deleted first)."""

    TYPE: ClassVar[str] = "DeleteFiles"
    filenames: tuple[str, ...]

    def validate(self, state: TableState) -> None:
        if not self.filenames:
            raise InvalidTransactionError("DeleteFiles needs at least one filename")
        if len(set(self.filenames)) != len(self.filenames):
            raise InvalidTransactionError("DeleteFiles lists a file more than once")
        for filename in self.filenames:
            table_file = state.file(filename)
            if table_file.references:
                raise FileHasReferencesError(filename, len(table_file.references))

    def apply(self, state: TableState, update_time: int) -> None:
        for filename in self.filenames:
            state.remove_file(filename)


@dataclass(frozen=True)
class ClearFiles(Transaction):
    """Forget every file and reference of the table (e.g. before re-initialising partitions)."""

    TYPE: ClassVar[str] = "ClearFiles"

    def validate(self, state: TableState) -> None:
        return None

    def apply(self, state: TableState, update_time: int) -> None:
        state.clear_files()


@dataclass(frozen=True)
class ClearTable(Transaction):
    """Forget every file, reference and partition, so the table can be initialised again.

    The table is left with no partition tree: nothing can be added until an InitialisePartitions.
    """

    TYPE: ClassVar[str] = "ClearTable"

    def validate(self, state: TableState) -> None:
        return None

    def apply(self, state: TableState, update_time: int) -> None:
        state.clear_files()
        state.replace_partitions(())
