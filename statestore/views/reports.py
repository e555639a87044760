"""Reports on one table's state: files ready for garbage collection, files, references per partition, and
leaf sizes against a split threshold.

Pure functions of a :class:`~statestore.state.table_state.TableState`: the client and the CLI load the state
and call them, so a report reads exactly what the log says. Lists a report caps say how many there are in all,
so a reader knows when there are more than it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from statestore.errors import InvalidQueryError
from statestore.model.files import TableFile
from statestore.model.partitions import Partition
from statestore.state.table_queries import PartitionTotals
from statestore.state.table_state import TableState

_NO_REFERENCES = PartitionTotals(0, 0, 0, False)  # a partition no reference is on


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise InvalidQueryError(f"{name} must be a whole number of 0 or more, got {value!r}")


# --- garbage collection -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GcCandidates:
    """Files with no references, unreferenced since before ``before`` (epoch ms), oldest first."""

    before: int
    files: tuple[TableFile, ...]
    total: int

    @property
    def more(self) -> bool:
        """Whether more files are ready than the limit let through."""
        return self.total > len(self.files)


def files_ready_for_gc(state: TableState, before: int, limit: int | None = None) -> GcCandidates:
    """The files garbage collection may delete: no references, last updated before ``before`` (epoch ms).

    Oldest first (ties by name), at most ``limit`` of them. A file added with no references counts from
    the time it was added; a compacted-away file from the time its last reference went.
    """
    _check_limit("limit", limit)
    # Found on the columns; a TableFile made only for each file found.
    ready = sorted(
        (state.file(filename) for filename in state.files_ready_for_gc(before)),
        key=lambda f: (f.last_update_time, f.filename),
    )
    return GcCandidates(before, tuple(ready if limit is None else ready[:limit]), len(ready))


# --- files --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilesReport:
    """A table's files by name: those with references and those without, each list capped."""

    referenced: tuple[TableFile, ...]
    unreferenced: tuple[TableFile, ...]
    referenced_total: int
    unreferenced_total: int
    reference_total: int

    @property
    def more(self) -> bool:
        """Whether either list holds fewer files than there are."""
        return self.referenced_total > len(self.referenced) or self.unreferenced_total > len(
            self.unreferenced
        )


def files_report(state: TableState, limit: int | None = None) -> FilesReport:
    """Referenced and unreferenced files, by name, at most ``limit`` of each."""
    _check_limit("limit", limit)
    ordered = sorted(state.files_by_name.values(), key=lambda f: f.filename)
    referenced = [f for f in ordered if f.references]
    unreferenced = [f for f in ordered if not f.references]
    return FilesReport(
        referenced=tuple(referenced if limit is None else referenced[:limit]),
        unreferenced=tuple(unreferenced if limit is None else unreferenced[:limit]),
        referenced_total=len(referenced),
        unreferenced_total=len(unreferenced),
        reference_total=sum(len(f.references) for f in referenced),
    )


# --- partitions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionReferences:
    """The references held on one partition, in figures."""

    partition_id: str
    leaf: bool
    references: int
    assigned_to_jobs: int
    rows: int
    rows_approximate: bool


def references_per_partition(state: TableState) -> list[PartitionReferences]:
    """Every partition (tree order: parents before children, lower children first) with its references.

    A partition with none is listed with zeros: a leaf with no references holds no data yet.
    """
    totals = state.reference_totals()
    out = []
    for partition in tree_order(state):
        counted = totals.get(partition.id, _NO_REFERENCES)
        out.append(
            PartitionReferences(
                partition_id=partition.id,
                leaf=partition.leaf,
                references=counted.references,
                assigned_to_jobs=counted.assigned_to_jobs,
                rows=counted.rows,
                rows_approximate=counted.rows_approximate,
            )
        )
    return out


@dataclass(frozen=True)
class LeafSize:
    """A leaf partition's size as its references count it, and whether it is over the split threshold."""

    partition: Partition
    references: int
    rows: int
    rows_approximate: bool
    over_split_threshold: bool


@dataclass(frozen=True)
class PartitionReport:
    """The partition tree in figures: every leaf's size, and which leaves are over ``split_threshold``."""

    partitions: int
    leaves: tuple[LeafSize, ...]
    split_threshold: int | None

    @property
    def leaves_to_split(self) -> tuple[LeafSize, ...]:
        return tuple(leaf for leaf in self.leaves if leaf.over_split_threshold)


def partition_report(state: TableState, split_threshold: int | None = None) -> PartitionReport:
    """Leaf sizes from the references on each leaf; a leaf holding more than ``split_threshold`` rows is
    over it (the rule the splitting job applies). Rows still referenced on an ancestor, not yet split down
    to the leaves, are not counted in any leaf."""
    _check_limit("split_threshold", split_threshold)
    totals = state.reference_totals()
    leaves = []
    for partition in tree_order(state):
        if not partition.leaf:
            continue
        counted = totals.get(partition.id, _NO_REFERENCES)
        leaves.append(
            LeafSize(
                partition=partition,
                references=counted.references,
                rows=counted.rows,
                rows_approximate=counted.rows_approximate,
                over_split_threshold=split_threshold is not None and counted.rows > split_threshold,
            )
        )
    return PartitionReport(len(state.partitions_by_id), tuple(leaves), split_threshold)


def tree_order(state: TableState) -> list[Partition]:
    """The partitions depth first from the root, each parent before its children, lower child first."""
    partitions = state.partitions_by_id
    roots = [p for p in partitions.values() if p.parent_id is None or p.parent_id not in partitions]
    out: list[Partition] = []
    stack = list(reversed(roots))
    while stack:
        partition = stack.pop()
        out.append(partition)
        stack.extend(partitions[c] for c in reversed(partition.child_ids) if c in partitions)
    return out
