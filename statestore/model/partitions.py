"""Partitions: regions of the key space arranged in one tree that covers it all.

A region holds one range per row key field: ``min`` inclusive, ``max`` exclusive, ``max=None`` unbounded.
A split turns one leaf into two children that meet at the split point on one row key dimension.

This module holds the values (``Range``, ``Region``, ``Partition``) and the checks of one partition; the
tree they form, and the checks of a tree and of its changes, are in :mod:`statestore.model.partition_tree`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from statestore.errors import (
    InvalidKeyError,
    InvalidPartitionSplitError,
    InvalidPartitionTreeError,
)
from statestore.model.names import name_problem
from statestore.model.schema import INT32_MAX, INT32_MIN, Key, Schema, integer_problem


@dataclass(frozen=True, slots=True)
class Range:
    """Values ``v`` with ``min <= v < max``; ``max=None`` means no upper bound."""

    min: Key
    max: Key | None = None

    def __post_init__(self) -> None:
        if self.max is None:
            return
        try:
            ordered = self.min < self.max  # type: ignore[operator]
        except TypeError:
            raise InvalidPartitionTreeError(
                f"range bounds of different types: min {self.min!r}, max {self.max!r}"
            ) from None
        if not ordered:
            raise InvalidPartitionTreeError(f"empty range: min {self.min!r} is not below max {self.max!r}")

    def contains(self, value: Key) -> bool:
        return self.min <= value and (self.max is None or value < self.max)  # type: ignore[operator]

    def overlaps(self, other: Range) -> bool:
        below_other_max = other.max is None or self.min < other.max  # type: ignore[operator]
        above_other_min = self.max is None or other.min < self.max  # type: ignore[operator]
        return below_other_max and above_other_min

    def covers(self, other: Range) -> bool:
        """Whether every value of ``other`` is in this range."""
        if not self.min <= other.min:  # type: ignore[operator]
            return False
        if self.max is None:
            return True
        return other.max is not None and other.max <= self.max  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class Region:
    """One :class:`Range` per row key field, in schema order."""

    ranges: tuple[Range, ...]

    @classmethod
    def whole(cls, schema: Schema) -> Region:
        """The whole key space of a schema: the root partition's region."""
        return cls(tuple(Range(t.minimum) for t in schema.row_key_types))

    @classmethod
    def of(cls, schema: Schema, bounds: Mapping[str, tuple[Key | None, Key | None]]) -> Region:
        """The region ``{row key: (min, max)}`` of ``schema``: min inclusive, max exclusive, None unbounded;
        a row key not named covers its whole range. Raises InvalidKeyError naming an unknown row key or a
        bound of the wrong type, InvalidPartitionTreeError for an empty range."""
        fields = {f.name: f for f in schema.row_keys}
        unknown = sorted(set(bounds) - set(fields))
        if unknown:
            raise InvalidKeyError(f"not row keys of the table: {unknown}; its row keys are {list(fields)}")
        ranges = []
        for field in schema.row_keys:
            low, high = bounds.get(field.name, (None, None))
            key_type = field.key_type
            low = key_type.minimum if low is None else key_type.check(low, field.name)
            ranges.append(Range(low, None if high is None else key_type.check(high, field.name)))
        return cls(tuple(ranges))

    def contains(self, key: Sequence[Key]) -> bool:
        return len(key) == len(self.ranges) and all(
            r.contains(k) for r, k in zip(self.ranges, key, strict=True)
        )

    def overlaps(self, other: Region) -> bool:
        return all(a.overlaps(b) for a, b in zip(self.ranges, other.ranges, strict=True))

    def covers(self, other: Region) -> bool:
        return all(a.covers(b) for a, b in zip(self.ranges, other.ranges, strict=True))

    def with_range(self, dimension: int, new_range: Range) -> Region:
        ranges = list(self.ranges)
        ranges[dimension] = new_range
        return Region(tuple(ranges))


@dataclass(frozen=True, slots=True)
class Partition:
    """One node of the partition tree. ``dimension`` is the row key index it was split on (-1 if a leaf)."""

    id: str
    region: Region
    parent_id: str | None = None
    child_ids: tuple[str, ...] = ()
    leaf: bool = True
    dimension: int = -1

    def split(
        self, dimension: int, split_point: Key, left_id: str, right_id: str
    ) -> tuple[Partition, Partition, Partition]:
        """Return ``(parent, left, right)`` for splitting this leaf at ``split_point`` on ``dimension``.

        Raises :class:`InvalidPartitionSplitError` if the point is not strictly inside the range.
        """
        if not 0 <= dimension < len(self.region.ranges):
            raise InvalidPartitionSplitError(
                f"cannot split partition {self.id!r} on dimension {dimension}: "
                f"the schema has {len(self.region.ranges)} row key field(s)"
            )
        current = self.region.ranges[dimension]
        try:
            left_range, right_range = Range(current.min, split_point), Range(split_point, current.max)
        except (InvalidPartitionTreeError, TypeError) as e:
            raise InvalidPartitionSplitError(
                f"split point {split_point!r} is not strictly inside partition {self.id!r}'s range "
                f"[{current.min!r}, {current.max!r}) on dimension {dimension}"
            ) from e
        left = Partition(left_id, self.region.with_range(dimension, left_range), parent_id=self.id)
        right = Partition(right_id, self.region.with_range(dimension, right_range), parent_id=self.id)
        parent = replace(self, child_ids=(left_id, right_id), leaf=False, dimension=dimension)
        return parent, left, right


def new_partition_id() -> str:
    return str(uuid.uuid4())


def root_partition(schema: Schema, partition_id: str = "root") -> Partition:
    """The single partition covering a schema's whole key space."""
    return Partition(partition_id, Region.whole(schema))


def check_partition_fields(partition: Partition) -> None:
    """Check ``partition``'s fields have the types and ranges the codecs store (InvalidPartitionTreeError).

    The tree checks compare with ``==``, which lets ``leaf=0``, ``dimension=-1.0`` or ``dimension=True``
    through; JSON would write those as they are and never read them back, and Parquet stores ``dimension``
    as int32. Region bounds are checked against the schema by :func:`check_region_keys`.
    """
    if not isinstance(partition.id, str) or not partition.id:
        raise InvalidPartitionTreeError(f"a partition id must be a non-empty string, got {partition.id!r}")
    if (problem := name_problem(partition.id)) is not None:
        raise InvalidPartitionTreeError(f"partition id {partition.id[:200]!r} {problem}")
    where = f"partition {partition.id!r}"
    if partition.parent_id is not None and not isinstance(partition.parent_id, str):
        raise InvalidPartitionTreeError(
            f"{where}: parent_id must be a string or None, got {partition.parent_id!r}"
        )
    if not isinstance(partition.child_ids, tuple) or not all(isinstance(c, str) for c in partition.child_ids):
        raise InvalidPartitionTreeError(
            f"{where}: child_ids must be a tuple of strings, got {partition.child_ids!r}"
        )
    for other in (partition.parent_id, *partition.child_ids):
        if other is not None and (problem := name_problem(other)) is not None:
            raise InvalidPartitionTreeError(f"{where}: partition id {other[:200]!r} {problem}")
    if not isinstance(partition.leaf, bool):
        raise InvalidPartitionTreeError(f"{where}: leaf must be True or False, got {partition.leaf!r}")
    problem = integer_problem(partition.dimension, INT32_MIN, INT32_MAX, "int32")
    if problem is not None:
        raise InvalidPartitionTreeError(f"{where}: dimension {problem}")
    if not isinstance(partition.region, Region) or not isinstance(partition.region.ranges, tuple):
        raise InvalidPartitionTreeError(f"{where}: region must be a Region of a tuple of ranges")


def check_region_keys(schema: Schema, partition: Partition) -> None:
    """Check every bound of ``partition``'s region is a valid key of its field (raises InvalidKeyError).

    Range checks alone accept e.g. an ``int`` field split at 2**40, at ``True`` or at ``1.5``: a partition
    no valid key can reach, and a bound the snapshot's typed columns cannot hold.
    """
    for field, key_range in zip(schema.row_keys, partition.region.ranges, strict=True):
        for bound in (key_range.min, key_range.max):
            if bound is not None:
                field.key_type.check(bound, field.name)


def check_partition_for_schema(schema: Schema, partition: Partition) -> None:
    """Check a partition's field types, and that its region has one range per row key of ``schema`` with
    bounds of the right key types (raises InvalidPartitionTreeError naming the partition).

    Run first: the structural checks compare with ``==`` and index by dimension.
    """
    check_partition_fields(partition)
    if len(partition.region.ranges) != len(schema.row_keys):
        raise InvalidPartitionTreeError(
            f"partition {partition.id!r} has {len(partition.region.ranges)} range(s); the schema has "
            f"{len(schema.row_keys)} row key field(s)"
        )
    try:
        check_region_keys(schema, partition)
    except InvalidKeyError as e:
        raise InvalidPartitionTreeError(f"partition {partition.id!r} has an invalid bound: {e}") from e
