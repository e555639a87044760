"""The partition tree: the checks a tree and its changes must pass, and the trees built from split points.

A table's partitions form one tree covering the whole key space (:class:`PartitionTree` reads one); a split
turns a leaf into two children that meet at the split point (:func:`check_split`), and a tree extension
splits leaves any number of levels deep (:func:`extend_tree`). The values themselves (``Range``, ``Region``,
``Partition``) and the checks of one partition are in :mod:`statestore.model.partitions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from statestore.errors import (
    InvalidPartitionSplitError,
    InvalidPartitionTreeError,
    PartitionAlreadyExistsError,
    PartitionNotFoundError,
    PartitionNotLeafError,
)
from statestore.model.partitions import (
    Partition,
    Region,
    check_partition_for_schema,
    new_partition_id,
    root_partition,
)
from statestore.model.schema import Key, Schema


def check_split(
    parent_before: Partition, parent_after: Partition, children: Sequence[Partition]
) -> tuple[Partition, Partition]:
    """Check that ``children`` are a valid split of leaf ``parent_before`` into ``parent_after``.

    Exactly two children, on an existing row key dimension, meeting at the split point and together
    covering the parent's region. The children may come in either order, in ``children`` and in the
    parent's ``child_ids``: their regions decide which is the lower one. Returns ``(lower, upper)``.
    Raises :class:`InvalidPartitionSplitError` naming the partition that is wrong.
    """
    pid = parent_before.id
    if len(children) != 2:
        raise InvalidPartitionSplitError(
            f"a split of {pid!r} needs exactly two children, got {len(children)}"
        )
    if parent_after.id != pid or parent_after.region != parent_before.region:
        raise InvalidPartitionSplitError(f"the split parent must keep the id and region of {pid!r}")
    if parent_after.leaf:
        raise InvalidPartitionSplitError(f"after a split, partition {pid!r} must not be a leaf")
    first, second = children
    if first.id == second.id:
        raise InvalidPartitionSplitError(f"both children of {pid!r} have the id {first.id!r}")
    if len(parent_after.child_ids) != 2 or set(parent_after.child_ids) != {first.id, second.id}:
        raise InvalidPartitionSplitError(
            f"partition {pid!r} must list its children {first.id!r} and {second.id!r}, "
            f"got {list(parent_after.child_ids)}"
        )
    dim = parent_after.dimension
    ranges = parent_before.region.ranges
    if not 0 <= dim < len(ranges):
        raise InvalidPartitionSplitError(
            f"split dimension {dim} of {pid!r} is not a row key index (0..{len(ranges) - 1})"
        )
    for child in children:
        if child.parent_id != pid:
            raise InvalidPartitionSplitError(f"child {child.id!r} must name {pid!r} as its parent")
        if not child.leaf or child.child_ids or child.dimension != -1:
            raise InvalidPartitionSplitError(
                f"new child {child.id!r} must be a leaf (dimension -1) with no children"
            )
        if len(child.region.ranges) != len(ranges):
            raise InvalidPartitionSplitError(
                f"child {child.id!r} has {len(child.region.ranges)} range(s); {pid!r} has {len(ranges)}"
            )
        for d, (child_range, parent_range) in enumerate(zip(child.region.ranges, ranges, strict=True)):
            if d != dim and child_range != parent_range:
                raise InvalidPartitionSplitError(
                    f"child {child.id!r} differs from {pid!r} on dimension {d}, but the split is on {dim}"
                )
    # The child starting lower is the lower one, whichever order they were listed in.
    lower, upper = sorted(children, key=lambda c: c.region.ranges[dim].min)
    parent_range = ranges[dim]
    lower_range, upper_range = lower.region.ranges[dim], upper.region.ranges[dim]
    if lower_range.min != parent_range.min:
        raise InvalidPartitionSplitError(
            f"child {lower.id!r} starts at {lower_range.min!r} on dimension {dim} but {pid!r} starts at "
            f"{parent_range.min!r}: the children do not cover its range"
        )
    if upper_range.max != parent_range.max:
        raise InvalidPartitionSplitError(
            f"child {upper.id!r} ends at {upper_range.max!r} on dimension {dim} but {pid!r} ends at "
            f"{parent_range.max!r}: the children do not cover its range"
        )
    if lower_range.max is None or lower_range.max != upper_range.min:
        raise InvalidPartitionSplitError(
            f"the children of {pid!r} do not meet at one split point on dimension {dim}: "
            f"{lower.id!r} ends at {lower_range.max!r}, {upper.id!r} starts at {upper_range.min!r}"
        )
    return lower, upper


def with_children_in_key_order(parent: Partition, lower: Partition, upper: Partition) -> Partition:
    """``parent`` listing its children lower first, as the tree's readers expect (a split may list them
    in either order)."""
    return replace(parent, child_ids=(lower.id, upper.id))


def children_in_key_order(partitions: Iterable[Partition]) -> list[Partition]:
    """``partitions`` with every parent listing its children lower first (a tree or a split may list
    them in either order; :meth:`PartitionTree.leaf_for_key` and the jobs read the lower one first)."""
    by_id = {p.id: p for p in partitions}
    out = []
    for p in by_id.values():
        if not p.leaf and len(p.child_ids) == 2 and all(c in by_id for c in p.child_ids):
            first, second = (by_id[c] for c in p.child_ids)
            if second.region.ranges[p.dimension].min < first.region.ranges[p.dimension].min:  # type: ignore[operator]
                p = replace(p, child_ids=(second.id, first.id))
        out.append(p)
    return out


def _as_leaf(partition: Partition) -> Partition:
    return replace(partition, child_ids=(), leaf=True, dimension=-1)


def extend_tree(
    existing: Mapping[str, Partition], updated: Sequence[Partition], new: Sequence[Partition]
) -> list[Partition]:
    """Check that ``updated`` (existing leaves, as they are after being split) and ``new`` (the partitions
    below them, leaves or split again, any number of levels deep) extend the tree ``existing`` validly.

    Returns the partitions to put, each parent listing its children lower first. Raises a
    TransactionValidationError naming the partition that is wrong: PartitionNotFoundError,
    PartitionNotLeafError, PartitionAlreadyExistsError, or InvalidPartitionTreeError.
    """
    if not updated:
        raise InvalidPartitionTreeError("a tree extension needs at least one existing leaf to split")
    new_by_id: dict[str, Partition] = {}
    for partition in new:
        if partition.id in existing:
            raise PartitionAlreadyExistsError(partition.id)
        if partition.id in new_by_id:
            raise InvalidPartitionTreeError(f"new partition {partition.id!r} is listed more than once")
        new_by_id[partition.id] = partition
    updated_ids: set[str] = set()
    for partition in updated:
        before = existing.get(partition.id)
        if before is None:
            raise PartitionNotFoundError(partition.id)
        if not before.leaf:
            raise PartitionNotLeafError(partition.id)
        if partition.id in updated_ids:
            raise InvalidPartitionTreeError(f"partition {partition.id!r} is split more than once")
        if partition.parent_id != before.parent_id:
            raise InvalidPartitionTreeError(f"the extension must not change the parent of {partition.id!r}")
        if partition.leaf:
            raise InvalidPartitionTreeError(f"partition {partition.id!r} is listed as split but is a leaf")
        updated_ids.add(partition.id)
    placed: set[str] = set()
    out: list[Partition] = []
    for node in (*updated, *new):
        if node.leaf:
            if node.child_ids or node.dimension != -1:
                raise InvalidPartitionTreeError(f"leaf partition {node.id!r} must have no children")
            out.append(node)
            continue
        children = []
        for child_id in node.child_ids:
            child = new_by_id.get(child_id)
            if child is None:
                raise InvalidPartitionTreeError(
                    f"partition {node.id!r} names child {child_id!r}, which is not a new partition"
                )
            if child_id in placed:
                raise InvalidPartitionTreeError(f"partition {child_id!r} is the child of two partitions")
            placed.add(child_id)
            children.append(child)
        before = existing[node.id] if node.id in updated_ids else node
        try:
            lower, upper = check_split(_as_leaf(before), node, [_as_leaf(c) for c in children])
        except InvalidPartitionSplitError as e:
            raise InvalidPartitionTreeError(str(e)) from e
        out.append(with_children_in_key_order(node, lower, upper))
    unplaced = [p.id for p in new if p.id not in placed]
    if unplaced:
        raise InvalidPartitionTreeError(
            f"new partition {unplaced[0]!r} is not the child of any partition being split"
        )
    return out


class PartitionTree:
    """A read-only view over a ``{id: Partition}`` mapping that forms one tree.

    ``roots``, if given, returns the partitions with no parent without reading every partition (a state
    held as columns finds them there); by default they are found by a pass over the mapping.
    """

    def __init__(
        self, partitions: Mapping[str, Partition], roots: Callable[[], list[Partition]] | None = None
    ) -> None:
        self._partitions = partitions
        self._roots = roots

    @property
    def root(self) -> Partition:
        if self._roots is not None:
            roots = self._roots()
        else:
            roots = [p for p in self._partitions.values() if p.parent_id is None]
        if len(roots) != 1:
            raise InvalidPartitionTreeError(f"expected exactly one root partition, found {len(roots)}")
        return roots[0]

    def get(self, partition_id: str) -> Partition:
        try:
            return self._partitions[partition_id]
        except KeyError:
            raise PartitionNotFoundError(partition_id) from None

    def leaves(self) -> list[Partition]:
        return [p for p in self._partitions.values() if p.leaf]

    def leaf_for_key(self, key: Sequence[Key]) -> Partition:
        """The leaf partition whose region contains ``key`` (one value per row key field)."""
        node = self.root
        if not node.region.contains(key):
            raise InvalidPartitionTreeError(f"key {list(key)!r} is outside the table's key space")
        while not node.leaf:
            left, right = (self._partitions[c] for c in node.child_ids)
            split_point = left.region.ranges[node.dimension].max
            node = left if key[node.dimension] < split_point else right  # type: ignore[operator]
        return node

    def overlapping(self, region: Region, leaves_only: bool = False) -> list[Partition]:
        """Partitions whose region overlaps ``region``, found by descending only into overlapping subtrees."""
        found: list[Partition] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            if not node.region.overlaps(region):
                continue
            if node.leaf or not leaves_only:
                found.append(node)
            stack.extend(self._partitions[c] for c in node.child_ids)
        return found

    def ancestors(self, partition_id: str) -> Iterator[Partition]:
        node = self.get(partition_id)
        while node.parent_id is not None:
            node = self.get(node.parent_id)
            yield node

    def validate(self) -> None:
        """Check that the partitions form one tree covering the whole key space with valid splits."""
        root = self.root
        seen = {root.id}
        stack = [root]
        while stack:
            node = stack.pop()
            if node.leaf:
                if node.child_ids or node.dimension != -1:
                    raise InvalidPartitionTreeError(f"leaf partition {node.id!r} must have no children")
                continue
            children = []
            for child_id in node.child_ids:
                if child_id not in self._partitions:
                    raise InvalidPartitionTreeError(f"partition {node.id!r} names missing child {child_id!r}")
                if child_id in seen:
                    raise InvalidPartitionTreeError(f"partition {child_id!r} appears twice in the tree")
                seen.add(child_id)
                children.append(self._partitions[child_id])
            before = replace(node, child_ids=(), leaf=True, dimension=-1)
            try:
                check_split(
                    before, node, [replace(c, child_ids=(), leaf=True, dimension=-1) for c in children]
                )
            except InvalidPartitionSplitError as e:
                raise InvalidPartitionTreeError(str(e)) from e
            stack.extend(children)
        unreachable = set(self._partitions) - seen
        if unreachable:
            raise InvalidPartitionTreeError(
                f"partitions not reachable from the root: {sorted(unreachable)[:5]}"
            )


def validate_tree(schema: Schema, partitions: Iterable[Partition]) -> None:
    """Check ``partitions`` form one tree over ``schema``'s key space; raises InvalidPartitionTreeError."""
    by_id: dict[str, Partition] = {}
    for p in partitions:
        check_partition_for_schema(schema, p)
        if p.id in by_id:
            raise InvalidPartitionTreeError(f"partition id {p.id!r} is used more than once")
        by_id[p.id] = p
    if not by_id:
        raise InvalidPartitionTreeError("a table needs at least one partition")
    tree = PartitionTree(by_id)
    if tree.root.region != Region.whole(schema):
        raise InvalidPartitionTreeError("the root partition must cover the whole key space")
    tree.validate()


def partitions_from_split_points(
    schema: Schema, split_points: Sequence[Key], dimension: int = 0, id_prefix: str | None = None
) -> list[Partition]:
    """Build a balanced tree whose leaves are cut at ``split_points`` (sorted, distinct) on one dimension.

    With no split points the result is the root alone. Ids are ``root`` and, below it, either fresh
    UUIDs or ``{id_prefix}{n}`` when a prefix is given (useful for reproducible trees).
    """
    key_type = schema.row_key_types[dimension] if 0 <= dimension < len(schema.row_keys) else None
    if key_type is None:
        raise InvalidPartitionSplitError(f"dimension {dimension} is not a row key index of the schema")
    points = [key_type.check(p, schema.row_keys[dimension].name) for p in split_points]
    for a, b in zip(points, points[1:], strict=False):
        if not a < b:  # type: ignore[operator]
            raise InvalidPartitionSplitError(f"split points must be sorted and distinct: {a!r} then {b!r}")
    if points and not key_type.minimum < points[0]:  # type: ignore[operator]
        raise InvalidPartitionSplitError(
            f"split point {points[0]!r} is the minimum of its type: nothing below it"
        )

    counter = iter(range(1, 2**62))

    def next_id() -> str:
        return f"{id_prefix}{next(counter)}" if id_prefix is not None else new_partition_id()

    result: list[Partition] = []

    def build(node: Partition, lo: int, hi: int) -> None:
        # ``points[lo:hi]`` fall strictly inside ``node``; split at the middle one and recurse.
        if lo >= hi:
            result.append(node)
            return
        mid = (lo + hi) // 2
        parent, left, right = node.split(dimension, points[mid], next_id(), next_id())
        result.append(parent)
        build(left, lo, mid)
        build(right, mid + 1, hi)

    build(root_partition(schema), 0, len(points))
    return result
