"""File references and the files they point into.

A data file can be referenced from several partitions (after a split, before compaction). A file with no
references stays in the state until garbage collection deletes it after a delay, so data files are never
lost (deleted while referenced) nor leaked (forgotten while still in S3).

Both classes are immutable tuples: a snapshot of a million references loads quickly, and a state copy only
copies the dictionaries that hold them.
"""

from __future__ import annotations

from typing import NamedTuple


class FileReference(NamedTuple):
    """A reference to the rows of ``filename`` that fall in ``partition_id``.

    ``last_update_time`` is milliseconds since the epoch, taken from the log entry that last changed it.
    ``job_id`` is set while a compaction job owns the reference.
    """

    filename: str
    partition_id: str
    number_of_rows: int
    count_approximate: bool = False
    only_contains_data_for_this_partition: bool = True
    job_id: str | None = None
    last_update_time: int = 0


class TableFile(NamedTuple):
    """A data file with all its references; ``references == ()`` means it awaits garbage collection."""

    filename: str
    references: tuple[FileReference, ...]
    last_update_time: int

    def reference_in(self, partition_id: str) -> FileReference | None:
        for ref in self.references:
            if ref.partition_id == partition_id:
                return ref
        return None

    def without_reference(self, partition_id: str, update_time: int) -> TableFile:
        refs = tuple(r for r in self.references if r.partition_id != partition_id)
        return TableFile(self.filename, refs, update_time)

    def with_references(self, references: tuple[FileReference, ...], update_time: int) -> TableFile:
        return TableFile(self.filename, references, update_time)
