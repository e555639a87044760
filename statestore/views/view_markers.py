"""The queryable view's markers of the partitions above the leaves that hold references.

A region's answer includes the partitions above its leaves, which hold references only between a split and
those references being split down: usually none do. Reading each one's references (one Query each, 17 at
100,000 leaves) would bound a one-leaf query, so the view keeps one item per partition that is not a leaf
and holds at least one reference::

    a#<partition id> -> the partition id

A query reads the markers of the leaves' ancestors in one read of keys and the references of the marked
ones only. A marker says the partition held references at the view's number; the entries behind the view
are merged on top, as for every item.

**Upkeep.** A marker can change only where a run of entries puts or deletes a reference (``r#`` item) of
a partition or changes the partition itself (a split makes a leaf a parent). :func:`marker_changes`
re-decides exactly those partitions: a partition that is not a leaf is marked if the run puts a reference
in it, or if the view holds one of its references the run does not delete (a read that stops at the first
such item). A leaf is never marked. After a clear of the files or a replacement of the tree no reference of
the view survives the run (a tree is replaced only while the table has no files), so every marker the view
held is dropped and only those the run's own references call for are written.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from statestore.model.files import FileReference
from statestore.model.partitions import Partition
from statestore.state.table_state import TableState
from statestore.views.view_keys import sized

MARKER_PREFIX = "a#"


def marker_key(partition_id: str) -> str:
    return MARKER_PREFIX + sized(partition_id)


def markers_of_state(state: TableState) -> dict[str, str]:
    """The markers of a full state: one per partition that is not a leaf and holds a reference."""
    held: set[str] = set()
    for table_file in state.files_by_name.values():
        held.update(r.partition_id for r in table_file.references)
    partitions = state.partitions_by_id
    return {marker_key(p): p for p in held if p in partitions and not partitions[p].leaf}


def marker_changes(
    *,
    gained: Collection[str],
    lost: Collection[str],
    touched: Mapping[str, Partition],
    view_survives: bool,
    old_markers: Mapping[str, object],
    partition_of: Callable[[Collection[str]], Mapping[str, Partition]],
    holds_in_view: Callable[[str], bool],
) -> tuple[dict[str, str], set[str]]:
    """The marker puts and deletes (keys) that follow a run's changes.

    ``gained`` / ``lost``: the partitions the run puts / deletes ``r#`` items of; ``touched``: the
    partitions the replay holds (as they are after the run); ``view_survives``: False after a clear of the
    files or a replacement of the tree. ``old_markers`` holds the view's markers of every candidate (of
    every partition when the view does not survive). ``partition_of`` reads the partitions of the view the
    run left alone (after a replacement of the tree, none: every partition is in ``touched``);
    ``holds_in_view(p)`` says whether the view holds a reference of ``p`` the run does not delete.
    """
    candidates = {*gained, *lost, *touched}
    unknown = [p for p in candidates if p not in touched]
    partitions = {**(partition_of(unknown) if unknown else {}), **touched}
    wanted: dict[str, str] = {}
    for partition_id in sorted(candidates):
        partition = partitions.get(partition_id)
        if partition is None or partition.leaf:
            continue
        if partition_id in gained or (view_survives and holds_in_view(partition_id)):
            wanted[marker_key(partition_id)] = partition_id
    puts = {key: value for key, value in wanted.items() if old_markers.get(key) != value}
    return puts, set(old_markers.keys() - wanted.keys())


def reference_partitions(items: Mapping[str, object], reference_prefix: str) -> set[str]:
    """The partitions of the ``r#`` items among ``items`` (keyed as the view keys them)."""
    return {
        v.partition_id
        for k, v in items.items()
        if k.startswith(reference_prefix) and isinstance(v, FileReference)
    }
