"""Planning a read: which file references to read for rows in some regions of key space, and how to cut
them into tasks. Pure functions of the state, shared by :func:`spark_client.query.query` and the data
source.

Each file reference is read restricted to its partition's region intersected with the query region. The
partitions holding references to one file are disjoint (a split moves a reference down to the children),
so a file referenced from two partitions yields each of its rows once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statestore.model.files import FileReference
from statestore.model.partitions import Partition, Range, Region
from statestore.model.schema import Key, Schema
from statestore.state.table_state import TableState

# One Spark task per part up to this many; beyond it parts share tasks.
MAX_READ_TASKS = 512


def region_of(schema: Schema, ranges: Mapping[str, tuple[Key | None, Key | None]]) -> Region:
    """A region from ``{row_key: (min, max)}``: min inclusive, max exclusive, None = unbounded.

    Row keys not named cover their whole range. :meth:`Region.of`, under the name the Spark side has always
    used: raises InvalidKeyError (a ValueError) naming an unknown key or a bound of the wrong type.
    """
    return Region.of(schema, ranges)


def intersect(a: Region, b: Region) -> Region | None:
    """The region common to ``a`` and ``b``, or None if they do not overlap."""
    if not a.overlaps(b):
        return None
    ranges = []
    for x, y in zip(a.ranges, b.ranges, strict=True):
        low = max(x.min, y.min)
        highs = [h for h in (x.max, y.max) if h is not None]
        ranges.append(Range(low, min(highs) if highs else None))
    return Region(tuple(ranges))


def hull(regions: Sequence[Region]) -> Region:
    """The smallest region holding all of ``regions`` (at least one)."""
    ranges = []
    for dimension in zip(*(r.ranges for r in regions), strict=True):
        low = min(r.min for r in dimension)
        highs = [r.max for r in dimension]
        high = None if any(h is None for h in highs) else max(highs)
        ranges.append(Range(low, high))
    return Region(tuple(ranges))


@dataclass(frozen=True)
class ReadPart:
    """One file reference to read: the file, the region its rows are restricted to (None: every row of the
    file), and the reference's row count."""

    filename: str
    region: Region | None
    rows: int


@dataclass(frozen=True)
class ReadPlan:
    """The ``(filename, region to read)`` parts a query reads, and the state it was planned on."""

    parts: tuple[tuple[str, Region | None], ...]
    transaction_number: int

    @property
    def files(self) -> set[str]:
        return {filename for filename, _ in self.parts}


def plan_query(state: TableState, region: Region) -> ReadPlan:
    """Select the file references whose partition overlaps ``region``, each with the region to read."""
    parts = [(part.filename, part.region) for part in plan_read(state, [region])]
    return ReadPlan(tuple(sorted(parts, key=lambda p: p[0])), state.transaction_number)


def plan_read(state: TableState, regions: Sequence[Region]) -> list[ReadPart]:
    """The references to read for the rows in any of ``regions`` (disjoint boxes), in key order.

    A partition is read if it overlaps one of them, each reference once, restricted to the partition's
    region within the regions' hull; the caller filters the rows by the regions themselves if it needs
    to. A reference whose file holds only its partition's rows, in a partition inside the hull, is read
    whole (no filter to evaluate).
    """
    if not regions:
        return []
    partitions: dict[str, Partition] = {}
    for region in regions:
        for partition in state.partition_tree.overlapping(region):
            partitions[partition.id] = partition
    return parts_of(partitions.values(), state.references_in_partitions(partitions), regions)


def parts_of(
    partitions: Iterable[Partition],
    references: Mapping[str, Iterable[FileReference]],
    regions: Sequence[Region],
) -> list[ReadPart]:
    """The parts :func:`plan_read` makes of ``partitions`` (those overlapping ``regions``) and their
    ``references`` (by partition id), however they were found: from a full state or from the queryable
    view (:mod:`spark_client.view_plan`), which must therefore give the same parts."""
    if not regions:
        return []
    whole = regions[0] if len(regions) == 1 else hull(regions)
    parts = []
    for partition in sorted(partitions, key=_region_order):
        restricted = intersect(partition.region, whole)
        if restricted is None:
            continue
        covered = whole.covers(partition.region)
        for ref in sorted(references.get(partition.id, ()), key=lambda r: r.filename):
            read_all = covered and ref.only_contains_data_for_this_partition
            parts.append(ReadPart(ref.filename, None if read_all else restricted, ref.number_of_rows))
    return parts


def _region_order(partition: Partition) -> tuple[Any, ...]:
    # The id breaks ties (a partition and its first descendants share their lower bounds), so the order
    # does not depend on the order the partitions were found in.
    return (*(r.min for r in partition.region.ranges), partition.id)


def group_parts(
    parts: list[ReadPart], rows_per_task: int, max_tasks: int = MAX_READ_TASKS
) -> list[list[ReadPart]]:
    """``parts`` cut, in order, into about ``rows / rows_per_task`` groups of similar row counts (at most
    ``max_tasks``, at most one per part)."""
    if not parts:
        return []
    total = sum(part.rows for part in parts)
    tasks = max(1, min(len(parts), max_tasks, -(-total // rows_per_task)))
    groups: list[list[ReadPart]] = [[] for _ in range(tasks)]
    before = 0
    for i, part in enumerate(parts):
        # A part goes to the group its middle row falls in; with no row counts, round robin.
        index = min(tasks - 1, (2 * before + part.rows) * tasks // (2 * total)) if total else i % tasks
        groups[index].append(part)
        before += part.rows
    return [group for group in groups if group]
