"""Checks the transactions share: a reference a transaction names, a new reference, a time it carries.

Each raises a precise :class:`~statestore.errors.TransactionValidationError`. Numbers are checked against what
every codec stores (int64 row counts and times in the Parquet snapshots; JSON cannot read a bool or a float
back as an integer), so no accepted transaction can make a table impossible to snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from statestore.errors import (
    FileNotFoundInStateError,
    FileReferenceNotFoundError,
    InvalidTransactionError,
    PartitionNotFoundError,
)
from statestore.model.files import FileReference
from statestore.model.names import MAX_NAME_BYTES, key_problem, name_problem
from statestore.model.schema import INT64_MAX, INT64_MIN, integer_problem
from statestore.state.file_guard import NewFileChecks
from statestore.state.table_state import TableState


def reference_in(state: TableState, filename: str, partition_id: str) -> FileReference:
    """The reference to ``filename`` in ``partition_id``; raises if the file or the reference is missing."""
    table_file = state.files_by_name.get(filename)
    if table_file is None:
        raise FileNotFoundInStateError(filename)
    ref = table_file.reference_in(partition_id)
    if ref is None:
        raise FileReferenceNotFoundError(filename, partition_id)
    return ref


def check_new_filename(filename: object, what: str, data_prefix: str | None) -> None:
    """Check the name of a file a transaction adds: a non-empty string every store can hold
    (:mod:`statestore.model.names`) and, for a state that knows its table's ``data_prefix``, a key under
    it."""
    if not isinstance(filename, str) or not filename:
        raise InvalidTransactionError(f"{what} needs a non-empty filename (a string), got {filename!r}")
    problem = name_problem(filename)
    if problem is None and data_prefix is not None:
        problem = key_problem(filename, data_prefix)
    if problem is not None:
        shown = filename if len(filename) <= 200 else f"{filename[:200]}..."
        raise InvalidTransactionError(f"{what} has filename {shown!r}, which {problem}")


def check_name(value: str, what: str) -> None:
    """Check an id a transaction names (a job id): a name every store can hold."""
    problem = name_problem(value)
    if problem is not None:
        shown = value if len(value) <= 200 else f"{value[:200]}..."
        raise InvalidTransactionError(f"{what} {shown!r} {problem}")


def check_new_reference(state: NewFileChecks, ref: FileReference) -> None:
    """Check a reference a transaction adds: a filename, storable fields, no job, a partition that exists."""
    # Fast path for the shape every well-formed new reference has (exact types: a subclass, such as a bool
    # for an int, takes the precise checks below); a big AddFiles checks a hundred thousand of these.
    filename, partition_id, rows, approximate, whole_file, job_id, update_time = ref
    prefix = state.data_prefix
    if (
        type(filename) is str
        and filename
        and filename.isascii()
        and len(filename) <= MAX_NAME_BYTES
        and "\x00" not in filename
        and (prefix is None or key_problem(filename, prefix) is None)
        and job_id is None
        and type(rows) is int
        and 0 <= rows <= INT64_MAX
        and type(update_time) is int
        and INT64_MIN <= update_time <= INT64_MAX
        and type(partition_id) is str
        and type(approximate) is bool
        and type(whole_file) is bool
    ):
        if not state.has_partition(partition_id):
            raise PartitionNotFoundError(partition_id)
        return
    check_new_filename(ref.filename, "a file reference", prefix)
    check_reference_fields(ref)
    if ref.job_id is not None:
        raise InvalidTransactionError(f"a new reference to {ref.filename!r} cannot already belong to a job")
    if not (isinstance(ref.partition_id, str) and state.has_partition(ref.partition_id)):
        raise PartitionNotFoundError(ref.partition_id)


def check_reference_fields(ref: FileReference) -> None:
    """Check a reference's counts, times and flags have the types and ranges every codec stores.

    Snapshots hold row counts and update times as int64; JSON writes a bool or a float as it is and then
    cannot read it back as an integer field, nor an int back as a flag.
    """
    # The common case in one expression (a bulk commit checks 100,000s of references); the checks below
    # find and name whatever is wrong with the others.
    rows, update_time, job_id = ref.number_of_rows, ref.last_update_time, ref.job_id
    if (
        type(rows) is int
        and 0 <= rows <= INT64_MAX
        and type(update_time) is int
        and INT64_MIN <= update_time <= INT64_MAX
        and type(ref.partition_id) is str
        and type(ref.count_approximate) is bool
        and type(ref.only_contains_data_for_this_partition) is bool
        and (job_id is None or type(job_id) is str)
    ):
        return
    where = f"file {ref.filename!r} in partition {ref.partition_id!r}"
    rows = ref.number_of_rows
    if isinstance(rows, int) and rows < 0:
        raise InvalidTransactionError(f"file {ref.filename!r} has a negative row count {rows}")
    if not isinstance(ref.partition_id, str):
        raise InvalidTransactionError(f"{where}: partition_id must be a string")
    for name, value, low in (
        ("number_of_rows", ref.number_of_rows, 0),
        ("last_update_time", ref.last_update_time, INT64_MIN),
    ):
        problem = integer_problem(value, low, INT64_MAX, "int64")
        if problem is not None:
            raise InvalidTransactionError(f"{where}: {name} {problem}")
    for name, flag in (
        ("count_approximate", ref.count_approximate),
        ("only_contains_data_for_this_partition", ref.only_contains_data_for_this_partition),
    ):
        if not isinstance(flag, bool):
            raise InvalidTransactionError(f"{where}: {name} must be True or False, got {flag!r}")
    if ref.job_id is not None and not isinstance(ref.job_id, str):
        raise InvalidTransactionError(f"{where}: job_id must be a string or None, got {ref.job_id!r}")


def check_epoch_ms(name: str, value: int | None) -> None:
    """Check an optional time a transaction carries (epoch ms) is an int64, as the codecs store it."""
    if value is not None:
        problem = integer_problem(value, INT64_MIN, INT64_MAX, "int64")
        if problem is not None:
            raise InvalidTransactionError(f"{name} (epoch ms) {problem}")


def well_formed_names(
    state: NewFileChecks,
    references: Sequence[object],
    columns: Callable[[], tuple[tuple[Any, ...], ...]],
) -> tuple[tuple[str, ...], set[str]] | None:
    """The filenames of an AddFiles' ``references``, in order and as a set, if each would pass
    :func:`check_new_reference` and no (filename, partition) repeats, checked column by column in C (what a
    bulk AddFiles of good references costs); None: check them one by one, which names what is wrong.
    ``columns`` gives the references' fields as columns (the AddFiles transposes them once)."""
    if set(map(type, references)) != {FileReference}:
        return None
    filenames, partition_ids, rows, approximate, whole_file, job_ids, times = columns()
    if set(map(type, filenames)) != {str}:
        return None
    names = set(filenames)
    count = len(filenames)
    joined = "".join(filenames)
    prefix = state.data_prefix
    # Distinct names (the usual case) cannot repeat a (name, partition) pair.
    well_formed = (
        (len(names) == count or len(set(zip(filenames, partition_ids, strict=True))) == count)
        and "" not in names
        # ASCII names any store can hold, tested on the joined names (isascii is O(1) once joined); others
        # are tested one by one.
        and (
            (joined.isascii() and "\x00" not in joined and max(map(len, names)) <= MAX_NAME_BYTES)
            or not any(map(name_problem, names))
        )
        and (prefix is None or not any(key_problem(name, prefix) for name in names))
        and set(job_ids) == {None}
        and set(map(type, rows)) == {int}
        and 0 <= min(rows)
        and max(rows) <= INT64_MAX
        and set(map(type, times)) == {int}
        and INT64_MIN <= min(times)
        and max(times) <= INT64_MAX
        and set(map(type, approximate)) <= {bool}
        and set(map(type, whole_file)) <= {bool}
        and set(map(type, partition_ids)) == {str}
        and all(map(state.has_partition, set(partition_ids)))
    )
    return (filenames, names) if well_formed else None
