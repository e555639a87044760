"""Planning a read of the latest state through the table's queryable view, where that is cheaper than a
full load (:mod:`statestore.engine.queryable_view`).

A full load reads the whole snapshot (and the log after it) whatever the region; the view reads the part of
the partition tree above the region's leaves and those partitions' references. So the view pays for reads
of few leaves, and a full load for reads of many: :func:`plan_latest` counts the leaves the read's regions
overlap by walking the view's partition items from the root (stopping as soon as there are more than
``max_leaves``), and plans through the view only at or below that count. The default,
:data:`DEFAULT_VIEW_MAX_LEAVES`, is where the two lines cross in ``benchmarks/bench_view_planning.py``.

The parts planned through the view are the ones :func:`~spark_client.read_plan.plan_read` makes of a full
state at the same transaction (:func:`~spark_client.read_plan.parts_of` makes both): the view's region
query gives every partition overlapping the region with its references, merged with the log entries after
the view's number, and the partitions' regions (which restrict each reference's rows) come from the walk.
Those regions are the answer's only while no entry after the view's number changes the partitions, so an
entry that does (a split, a tree extension, a re-initialisation, a ClearTable) sends the read to a full
load until the view's upkeep moves past it.

The choice never changes the rows: a table with no view (no meta item), a view that cannot answer
(``QueryableViewBusyError``, ``TransactionNotRetainedError``), or an answer that does not fit the walk plans
by a full load, and every fallback from a view that exists is logged as a warning. A view far behind the
log still answers exactly (it merges every entry behind it), only more slowly.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from spark_client.read_plan import ReadPart, parts_of, plan_read
from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_loading import entries_about
from statestore.engine.log_store import TableStateStore
from statestore.engine.queryable_view import Answer, QueryableView
from statestore.errors import (
    DamagedViewItemError,
    QueryableViewBusyError,
    StateStoreError,
    TransactionNotRetainedError,
)
from statestore.model.files import FileReference
from statestore.model.partitions import Partition, Region
from statestore.store.ports import TransactionLogStore
from statestore.store.tables import TableInfo
from statestore.store.view_ports import QueryableViewStore
from statestore.transactions import (
    ClearTable,
    ExtendPartitionTree,
    InitialisePartitions,
    SplitPartition,
    TransactionBatch,
)
from statestore.views.view_index import (
    INDEX_PREFIX,
    PlacedPartition,
    complete_ancestors,
    index_upper_bound,
    leaves_in_region,
)
from statestore.views.view_keys import MissingViewItemError

logger = logging.getLogger(__name__)

# Plan through the view when the read's regions overlap at most this many leaves: where planning through
# the view stops beating a full load in benchmarks/bench_view_planning.py at its default scale (1,000,000
# references over 100,000 leaves). The crossing moves with the table's size (a full load costs it), lower
# on smaller tables: the option viewMaxLeaves overrides it per read.
DEFAULT_VIEW_MAX_LEAVES = 100
# Each region is one view query; they must answer at the same transaction (a commit between two of them
# would mix two states), so a moving log is tried this many times before the read falls back.
ANSWER_ATTEMPTS = 3

_PARTITION_CHANGES = (SplitPartition, ExtendPartitionTree, InitialisePartitions, ClearTable)
_PARTITION_CHANGE_TYPES = frozenset(t.TYPE for t in _PARTITION_CHANGES)


@dataclass(frozen=True)
class PlannedRead:
    """A read's parts at ``transaction_number``; ``through_view``: planned from the queryable view."""

    parts: list[ReadPart]
    transaction_number: int
    through_view: bool


class _Declined(Exception):
    """The view is not used for this read: ``reason`` says why; ``fallback`` (logged as a warning) when
    the view exists and should have answered."""

    def __init__(self, reason: str, *, fallback: bool = False) -> None:
        super().__init__(reason)
        self.fallback = fallback


def table_view(
    info: TableInfo, log: TransactionLogStore, store: QueryableViewStore | None
) -> QueryableView | None:
    """The view to plan ``info``'s reads through, or None: a table whose file references are rows of a
    file store (PostgreSQL) has none on its log for a view to hold."""
    if store is None or info.files_in_rows:
        return None
    return QueryableView(info.table_id, info.schema, log, store)


def plan_latest(
    state_store: TableStateStore,
    view: QueryableView | None,
    regions: Sequence[Region],
    max_leaves: int = DEFAULT_VIEW_MAX_LEAVES,
) -> PlannedRead:
    """The parts to read for the rows in ``regions`` (disjoint boxes) at the log's latest entry: through
    ``view`` if it has a view and the regions overlap at most ``max_leaves`` leaves (0: never), else from a
    full load of ``state_store``. The same parts either way."""
    if view is not None and max_leaves > 0 and regions:
        try:
            # Checked as the store's own reads are: not a table whose delete began meanwhile.
            parts, number = state_store.confirmed(partial(_through_view, view, regions, max_leaves))
            logger.debug("table %r: read planned through the queryable view at %d", view.table_id, number)
            return PlannedRead(parts, number, through_view=True)
        except _Declined as e:
            if e.fallback:
                logger.warning("table %r: planning the read by a full load: %s", view.table_id, e)
            else:
                logger.info("table %r: planning the read by a full load: %s", view.table_id, e)
        except (DamagedViewItemError, MissingViewItemError) as e:  # a rebuild mends it; a full load answers
            logger.warning("table %r: planning the read by a full load: %s", view.table_id, e)
    state = state_store.state()
    return PlannedRead(plan_read(state, regions), state.transaction_number, through_view=False)


def _through_view(
    view: QueryableView, regions: Sequence[Region], max_leaves: int
) -> tuple[list[ReadPart], int]:
    meta = view.store.meta(view.table_id)
    if meta is None:
        raise _Declined("the table has no queryable view")
    partitions = overlapping_partitions(view, regions, max_leaves)
    if partitions is None:
        raise _Declined(f"the read's regions overlap more than {max_leaves} leaves (the view's limit)")
    answers = _answers(view, regions)
    number = answers[0].transaction_number
    changed = _partition_change(view, meta.transaction_number, number)
    if changed is not None:
        raise _Declined(
            f"log entry {changed}, after its queryable view's transaction {meta.transaction_number}, changes "
            "the partitions (the view's upkeep has not applied it yet)",
            fallback=True,
        )
    references: dict[str, list[FileReference]] = {}
    for answer in answers:
        references.update(answer.value)
    unknown = sorted(set(references) - set(partitions))
    if unknown:
        raise _Declined(
            f"its queryable view answered with partitions {unknown[:5]} its partition items do not hold",
            fallback=True,
        )
    return parts_of([partitions[pid] for pid in references], references, regions), number


def overlapping_partitions(
    view: QueryableView, regions: Sequence[Region], max_leaves: int
) -> dict[str, Partition] | None:
    """The partitions of the view's items overlapping any of ``regions`` (their leaves and the partitions
    above them), by id; None if they hold more than ``max_leaves`` leaves.

    The leaves come from the view's index (one descending read per region, as the region query reads it,
    ``statestore.views.view_index``), each holding its ancestors' ids (or the nearest 64, in a deep tree:
    ``complete_ancestors``); the ancestors (which contain a leaf overlapping the regions, so overlap them
    too) are then read at once. A region's leaves are read whole before they are counted: an index item is
    small, and a region past the limit is the case planned by a full load anyway.
    """
    found: dict[str, Partition] = {}
    leaves: dict[str, PlacedPartition] = {}
    for region in regions:
        scan = view.store.descending(view.table_id, INDEX_PREFIX, index_upper_bound(region))
        placed = (v for v in scan if isinstance(v, PlacedPartition))
        for leaf in leaves_in_region(view.schema, placed, region):
            found[leaf.partition.id] = leaf.partition
            leaves[leaf.partition.id] = leaf
        if len(leaves) > max_leaves:
            return None
    chains = complete_ancestors(leaves.values(), view.placed)
    above = dict.fromkeys(a for chain in chains.values() for a in chain)
    wanted = [pid for pid in above if pid not in found]
    found.update((pid, placed.partition) for pid, placed in view.placed(wanted).items())
    return found


def _answers(view: QueryableView, regions: Sequence[Region]) -> list[Answer[dict[str, list[FileReference]]]]:
    """One region query per region, all at the same transaction."""
    for _ in range(ANSWER_ATTEMPTS):
        try:
            answers = [view.references_in_region(region) for region in regions]
        except (QueryableViewBusyError, TransactionNotRetainedError) as e:
            raise _Declined(f"its queryable view cannot answer: {e}", fallback=True) from e
        if len({answer.transaction_number for answer in answers}) == 1:
            return answers
    raise _Declined(
        f"the log moved between the view's queries of the read's {len(regions)} regions "
        f"{ANSWER_ATTEMPTS} times",
        fallback=True,
    )


def _partition_change(view: QueryableView, after: int, to_number: int) -> int | None:
    """The first entry in ``after + 1 .. to_number`` that changes the partitions, or None.

    The entries that list the leaves they add to only add files: the log does not send them
    (``TransactionLogStore.read_about`` of no partition), and counts them to show none is missing.
    """
    if to_number <= after:
        return None  # the view is current: no entry to read
    try:
        for entry in entries_about(view.log, view.table_id, after, to_number, (), "queryable view"):
            if entry.transaction_type in _PARTITION_CHANGE_TYPES:
                return entry.transaction_number
            if entry.transaction_type == TransactionBatch.TYPE:
                batch = decode_entry(entry, view.table_id)
                assert isinstance(batch, TransactionBatch)
                if any(isinstance(item.transaction, _PARTITION_CHANGES) for item in batch.items):
                    return entry.transaction_number
    except StateStoreError as e:  # trimmed meanwhile, or unreadable: the full load says which
        raise _Declined(f"its queryable view's log entries cannot be read: {e}", fallback=True) from e
    return None
