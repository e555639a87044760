"""The queryable view's index of the leaves, keyed for the region query.

A region query must find the leaves a region overlaps without reading the tree level by level (at 100,000
leaves that is 17 levels, two round trips each). The index holds one item per leaf, keyed by an
order-preserving encoding of a lower bound on the first row key field, so one descending range read from
the region's upper bound finds them.

**Trees that split on other fields.** A tree may split on any row key field, and leaves below such a split
share their range on the first field, so a leaf's own lower bound does not order the leaves. Each leaf is
keyed instead by its *cell*: the deepest partition above it (or itself) whose region spans every other
field whole. Cells hold disjoint ranges of the first field and together cover it (a partition spanning the
other fields whole overlaps on the first field only partitions above or below it), so the leaves a region
overlaps are in the cells overlapping it on the first field: read descending from the region's upper bound,
they are every item down to the last of the cell holding the region's lower bound. For a tree split only on
the first field each leaf is its own cell: a one-leaf region reads one item. A tree split on other fields
reads every leaf of each cell it overlaps and keeps those overlapping the region.

**Ancestors.** A region's answer includes the partitions above its leaves (they may hold references not yet
split down). Each leaf's item holds the ids of its nearest ``ANCESTORS_PER_ITEM`` ancestors, so no level of
a balanced tree is read (64 levels hold 2^64 leaves); a partition's ancestors and cell never change once it
exists, so a split derives its children's from the parent's item (:func:`place`). A tree split again and
again at one end (a row key that only grows, split at the median of the newest leaf) is as deep as it has
leaves: whole lists would make the view's items grow with the square of the tree (4,000 partitions in a
chain: 236 MB of items) and pass DynamoDB's 400 KB an item. So a list is cut, and
:func:`complete_ancestors` reads the item of the highest ancestor listed for the ones above it, one read of
keys per 64 levels for all the leaves at once.

**Keys.** A bound is encoded as bytes that sort as the values do (an integer offset to unsigned big-endian,
a string's UTF-8, bytes as they are), each byte written as the character one code point above it plus one
and the whole ended by ``\\x01``, so a key of the snapshots table's string sort key (ordered by its UTF-8
bytes, which order as code points) sorts as the values, and no bound is a prefix of a longer one. A bound
of more than 128 bytes is cut there: keys then order bounds only non-strictly, so reads compare the bounds
the items hold (:func:`leaves_in_region`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from statestore.model.partitions import Partition, Range, Region
from statestore.model.schema import Key, Schema
from statestore.views.view_keys import MissingViewItemError, partition_key, sized

INDEX_PREFIX = "x#"
# A partition's item lists at most this many of its ancestors, the nearest (see the module).
ANCESTORS_PER_ITEM = 64
_LONGEST_BOUND_IN_KEY = 128
_END = "\x01"
_AFTER_EVERY_BOUND = "\U0010ffff"


@dataclass(frozen=True)
class PlacedPartition:
    """A partition, the ids of the partitions above it (the root first; only the nearest
    ``ANCESTORS_PER_ITEM`` when there are more, see :func:`complete_ancestors`), and the lower bound on the
    first row key field of its cell (the deepest partition above it or itself spanning every other field
    whole)."""

    partition: Partition
    ancestor_ids: tuple[str, ...]
    cell_min: Key


def _bound_bytes(value: Key) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")  # orders as code points, as str does
    return (value + 2**63).to_bytes(8, "big")


def _is_cut(value: Key) -> bool:
    return len(_bound_bytes(value)) > _LONGEST_BOUND_IN_KEY


def order_key(value: Key) -> str:
    """``value`` as a key part that sorts as the values do (non-strictly past 128 bytes); see the module."""
    return "".join(chr(b + 2) for b in _bound_bytes(value)[:_LONGEST_BOUND_IN_KEY]) + _END


def index_key(placed: PlacedPartition) -> str:
    return INDEX_PREFIX + order_key(placed.cell_min) + sized(placed.partition.id)


def index_upper_bound(region: Region) -> str:
    """The highest index key a leaf overlapping ``region`` can have: its cell starts below the region's
    upper bound on the first field (the read's range is ``INDEX_PREFIX`` to this, both included)."""
    high = region.ranges[0].max
    if high is None:
        return INDEX_PREFIX + _AFTER_EVERY_BOUND
    # Cells starting at ``high`` do not overlap; a cut bound also keys cells starting below it.
    return INDEX_PREFIX + order_key(high) + (_AFTER_EVERY_BOUND if _is_cut(high) else "")


def spans_other_fields(schema: Schema, region: Region) -> bool:
    """Whether ``region`` holds every value of each row key field but the first."""
    return all(
        r == Range(t.minimum) for r, t in zip(region.ranges[1:], schema.row_key_types[1:], strict=True)
    )


def leaves_in_region(
    schema: Schema, descending: Iterable[PlacedPartition], region: Region
) -> list[PlacedPartition]:
    """The leaves overlapping ``region``, from the index items read from :func:`index_upper_bound` down
    (``descending``, highest key first): reads only as far as it needs, so a paged read stops early."""
    low, high = region.ranges[0].min, region.ranges[0].max
    found: list[PlacedPartition] = []
    last_cell: str | None = None  # the key of the cell holding ``low``, once read
    for placed in descending:
        key = order_key(placed.cell_min)
        if last_cell is not None and key < last_cell:
            break
        below_high = high is None or placed.cell_min < high  # type: ignore[operator]
        if below_high and placed.partition.region.overlaps(region):
            found.append(placed)
        if last_cell is None and placed.cell_min <= low:  # type: ignore[operator]
            last_cell = key
            # A leaf that is its own cell (it spans the other fields whole), keyed exactly: no other item
            # has its key, so nothing below it can overlap.
            if spans_other_fields(schema, placed.partition.region) and not _is_cut(placed.cell_min):
                break
    return found


def place(
    schema: Schema, partitions: Mapping[str, Partition], known: Mapping[str, PlacedPartition]
) -> dict[str, PlacedPartition]:
    """Each of ``partitions`` placed in the tree: from its own ``known`` placement, else from its parent's
    (in ``partitions`` or ``known``; a root is placed alone). Raises ValueError for a partition whose parent
    is in neither."""
    placed: dict[str, PlacedPartition] = {}

    def placement(partition: Partition, parent: PlacedPartition | None) -> PlacedPartition:
        if partition.id in known:
            return PlacedPartition(partition, known[partition.id].ancestor_ids, known[partition.id].cell_min)
        if parent is None:
            return PlacedPartition(partition, (), partition.region.ranges[0].min)
        ancestors = (*parent.ancestor_ids, parent.partition.id)[-ANCESTORS_PER_ITEM:]
        own_cell = parent.partition.dimension == 0 and spans_other_fields(schema, parent.partition.region)
        return PlacedPartition(
            partition, ancestors, partition.region.ranges[0].min if own_cell else parent.cell_min
        )

    for start in partitions.values():
        chain: list[Partition] = []  # from ``start`` up to the first partition that can be placed
        node: Partition | None = start
        while node is not None and node.id not in placed and node.id not in known:
            chain.append(node)
            parent_id = node.parent_id
            if parent_id is None:
                node = None
            elif parent_id in partitions:
                node = partitions[parent_id]
            elif parent_id in known:
                node = known[parent_id].partition
            else:
                raise ValueError(
                    f"partition {node.id!r} cannot be placed: its parent {parent_id!r} is unknown"
                )
        parent = None
        if node is not None:
            parent = placed.get(node.id) or placement(partitions.get(node.id, node), None)
            if node.id in partitions:
                placed[node.id] = parent
        for partition in reversed(chain):
            parent = placed[partition.id] = placement(partition, parent)
    return placed


def complete_ancestors(
    placed: Iterable[PlacedPartition], read: Callable[[list[str]], Mapping[str, PlacedPartition]]
) -> dict[str, tuple[str, ...]]:
    """The ids of all the partitions above each of ``placed`` (root first), by partition id. Where a list
    holds ``ANCESTORS_PER_ITEM`` ids it may be cut: the highest one's placement, from ``read`` (partition ids
    to their placements), holds the next ids up, all the lists' at once. Raises MissingViewItemError if
    ``read`` lacks one."""
    chains = {p.partition.id: p.ancestor_ids for p in placed}
    cut = {pid for pid, chain in chains.items() if len(chain) >= ANCESTORS_PER_ITEM}
    while cut:
        found = read(sorted({chains[pid][0] for pid in cut}))
        for pid in list(cut):
            top = found.get(chains[pid][0])
            if top is None:
                raise MissingViewItemError(partition_key(chains[pid][0]), f"the item of partition {pid!r}")
            chains[pid] = top.ancestor_ids + chains[pid]
            if len(top.ancestor_ids) < ANCESTORS_PER_ITEM:
                cut.discard(pid)
    return chains
