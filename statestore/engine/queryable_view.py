"""A table's queryable view on its store: the queries that read only what they need, and the upkeep.

A query reads the view's meta, the log entries after the view's number, the view items those entries read
(:func:`~statestore.views.queryable_view.plan_reads`) and the items of its own keys, replays the entries
on the fetched items and answers as a full load at the log's latest entry would. It then reads the meta
again: if an upkeep started writing meanwhile (the meta changed), the items read may be a mix of two
numbers, and the query reads again (a few times, then raises QueryableViewBusyError).

The upkeep (:meth:`QueryableView.update`) applies the entries since the view's number as item writes:
it marks the meta ``writing_to`` (conditionally, so two upkeeps never write at once), writes, and moves
the meta to the new number. A view that is missing, behind the log's trimmed point, or left half written
by an upkeep that stopped is rebuilt from a full load of the state.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_loading import entries_about, entries_after
from statestore.errors import (
    DamagedViewItemError,
    QueryableViewBusyError,
    QueryableViewConflictError,
    TransactionNotRetainedError,
)
from statestore.model import layout
from statestore.model.files import FileReference, TableFile
from statestore.model.partition_tree import PartitionTree
from statestore.model.partitions import Partition, Region
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.store.ports import LogEntry, TransactionLogStore
from statestore.store.view_ports import QueryableViewStore
from statestore.transactions import AddFiles, Transaction
from statestore.views.pending_adds import PendingAdd
from statestore.views.queryable_view import (
    FILE_PREFIX,
    REFERENCE_PREFIX,
    VIEW_FORMAT,
    Merged,
    ReadPlan,
    ViewChanges,
    ViewMeta,
    ViewValue,
    claims_prefix,
    diff_items,
    file_key,
    files_of,
    items_of_state,
    missing_parts,
    plan_reads,
    references_prefix,
    replay,
    view_changes,
)
from statestore.views.view_index import (
    INDEX_PREFIX,
    PlacedPartition,
    complete_ancestors,
    index_upper_bound,
    leaves_in_region,
)
from statestore.views.view_keys import PARTITION_PREFIX, MissingViewItemError, partition_key, sized
from statestore.views.view_markers import MARKER_PREFIX, marker_changes, marker_key, reference_partitions

T = TypeVar("T")
V = TypeVar("V")
logger = logging.getLogger(__name__)

READ_ATTEMPTS = 5
_AFTER_EVERY_NAME = "\U0010ffff"  # above every character a sized name starts with


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A query's answer, as of the log's entry ``transaction_number`` (``from_full_load``: read from a full
    load of the state rather than through the view)."""

    transaction_number: int
    value: T
    from_full_load: bool = False


@dataclass(frozen=True)
class UpkeepResult:
    """What an upkeep did: moved the view from ``from_number`` to ``to_number`` with ``writes`` item
    writes (``rebuilt``: from a full load)."""

    from_number: int | None
    to_number: int
    writes: int
    rebuilt: bool = False


@dataclass(frozen=True)
class _RegionInView:
    """What a region query reads of the view: its leaves in the region, the ids of the partitions above
    them, and the references the view holds for those of them that hold any, by partition id."""

    leaves: list[PlacedPartition]
    ancestor_ids: list[str]
    held: dict[str, list[FileReference]]


class QueryableView:
    """One table's view: queries through it, and its upkeep."""

    def __init__(
        self,
        table_id: str,
        schema: Schema,
        log: TransactionLogStore,
        store: QueryableViewStore,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table_id = table_id
        self.schema = schema
        self.log = log
        self.store = store
        self._sleep = sleep

    # --- queries ----------------------------------------------------------------------------------
    #
    # Each query is two steps: ``from_view`` reads the view's items it needs, which depend only on the
    # question, and runs while the log after the view is read and merged on another thread (the two are
    # round trips to different tables); ``answer`` combines them.

    def file(self, filename: str) -> Answer[TableFile | None]:
        """The file with its references and update time, or None if the table has no such file."""

        def from_view() -> TableFile | None:
            return files_of(self._files_items([filename])).get(filename)

        return self._read(from_view, lambda merged, in_view: merged.file(filename, in_view))

    def references_in_partition(self, partition_id: str) -> Answer[list[FileReference]]:
        """The references in one partition, ordered by filename."""
        return self._read(
            lambda: self._references(references_prefix(partition_id)),
            lambda merged, in_view: merged.references_in(partition_id, in_view),
            about=lambda: [partition_id],
        )

    def claimed_references(self, job_id: str) -> Answer[list[FileReference]]:
        """The references a compaction job holds, ordered by filename and partition."""
        return self._read(
            lambda: self._references(claims_prefix(job_id)),
            lambda merged, in_view: merged.claims_of(job_id, in_view),
        )

    def references_in_region(self, region: Region) -> Answer[dict[str, list[FileReference]]]:
        """The references of every partition overlapping ``region`` (leaves and the partitions above them,
        which hold references not yet split down), by partition id: the files holding the region's rows.

        The leaves come from one read of the view's index (``statestore.views.view_index``), which holds
        each leaf's ancestors too; the partitions' references are then read at once.
        """

        def answer(merged: Merged, in_view: _RegionInView) -> dict[str, list[FileReference]]:
            if merged.replaces_partitions:  # the whole tree is in the replay's state: read for its ids
                current = merged.state.partitions_by_id
                ids = [p.id for p in PartitionTree(current).overlapping(region)] if current else []
                read = [] if merged.clears_files else ids
                held = dict(zip(read, self._with_prefixes(read), strict=True))
            else:
                ids, held = self._overlapping(merged, region, in_view), in_view.held
            return {pid: merged.references_in(pid, held.get(pid, ())) for pid in ids}

        located: list[list[PlacedPartition]] = []

        def about() -> list[str]:
            # The leaves only: an entry that lists what it adds to lists leaves, none of them above a leaf.
            located.append(self._leaves_in(region))
            return [leaf.partition.id for leaf in located[-1]]

        return self._read(lambda: self._region_in_view(located[-1]), answer, about=about)

    def _leaves_in(self, region: Region) -> list[PlacedPartition]:
        """The view's leaves in ``region``: one read of the index."""
        scan = self.store.descending(self.table_id, INDEX_PREFIX, index_upper_bound(region))
        return leaves_in_region(self.schema, (v for v in scan if isinstance(v, PlacedPartition)), region)

    def _region_in_view(self, leaves: list[PlacedPartition]) -> _RegionInView:
        """The references the view holds for ``leaves`` and for the partitions above them that it marks as
        holding some: the leaves' while the markers are read, then the marked partitions'."""
        above = self._above(leaves)
        leaf_ids = [leaf.partition.id for leaf in leaves]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="statestore-view-leaves") as reads:
            of_leaves = reads.submit(self._with_prefixes, leaf_ids)
            marked = self.store.get(self.table_id, [marker_key(a) for a in above])
            holding = [a for a in above if marker_key(a) in marked]
            held = dict(zip(holding, self._with_prefixes(holding), strict=True))
            held.update(zip(leaf_ids, of_leaves.result(), strict=True))
        return _RegionInView(leaves, above, held)

    def _above(self, leaves: list[PlacedPartition]) -> list[str]:
        """The ids of the partitions above ``leaves``, each once, root first: those their items list, and
        where a list was cut (a deep tree), those the items of the partitions above list."""
        chains = complete_ancestors(leaves, self.placed)
        return list(dict.fromkeys(a for leaf in leaves for a in chains[leaf.partition.id]))

    def placed(self, partition_ids: Collection[str]) -> dict[str, PlacedPartition]:
        """The view's placements of ``partition_ids`` (those it holds), by id."""
        found = self.store.get(self.table_id, [partition_key(p) for p in partition_ids]).values()
        return {v.partition.id: v for v in found if isinstance(v, PlacedPartition)}

    def _overlapping(self, merged: Merged, region: Region, in_view: _RegionInView) -> list[str]:
        """The ids of the partitions overlapping ``region`` in the tree as of the merged entries: the view's
        leaves' ancestors, and each leaf or, where the entries split it, what is below it in the region."""
        current = merged.state.partitions_by_id
        found = dict.fromkeys(in_view.ancestor_ids)
        for leaf in in_view.leaves:
            stack = [
                current[leaf.partition.id] if merged.partition_is_known(leaf.partition.id) else leaf.partition
            ]
            while stack:
                node = stack.pop()
                if node.region.overlaps(region):
                    found[node.id] = None
                    stack.extend(current[c] for c in node.child_ids)
        return list(found)

    def _with_prefixes(self, partition_ids: list[str]) -> list[list[FileReference]]:
        prefixes = [references_prefix(i) for i in partition_ids]
        return [
            [v for v in items.values() if isinstance(v, FileReference)]
            for items in self.store.with_prefixes(self.table_id, prefixes)
        ]

    def _references(self, prefix: str) -> list[FileReference]:
        return [
            v for v in self.store.with_prefix(self.table_id, prefix).values() if isinstance(v, FileReference)
        ]

    def _read(
        self,
        from_view: Callable[[], V],
        answer: Callable[[Merged, V], T],
        *,
        about: Callable[[], Collection[str]] | None = None,
    ) -> Answer[T]:
        """``answer`` of the view's items ``from_view`` reads and the log merged after the view, retrying
        while an upkeep writes the items.

        With ``about``, the query asks only about the partitions it returns (read from the view, before
        ``from_view``), and the log is merged for them (:meth:`_merge_about`): ``about`` and the log's latest
        number are read while the meta is, the entries up to that number while ``from_view`` runs.
        """
        for attempt in range(READ_ATTEMPTS):
            # Threads of the query's own (no pool outlives it, or a fork of the process).
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="statestore-view-read") as reads:
                if about is not None:
                    latest, asked = reads.submit(self.log.latest_number, self.table_id), reads.submit(about)
                meta = self.store.meta(self.table_id)
                if meta is not None and meta.format != VIEW_FORMAT:
                    raise QueryableViewBusyError(
                        f"the queryable view of table {self.table_id!r} was written in format {meta.format}, "
                        f"not {VIEW_FORMAT}: the next upkeep (QueryableView.update) rebuilds it; read the "
                        "table through a full load until then"
                    )
                if meta is None or meta.writing_to is None:
                    view_number = 0 if meta is None else meta.transaction_number
                    if about is None:
                        merging = reads.submit(self._merge, view_number)
                    else:
                        merging = reads.submit(self._merge_about, view_number, latest, asked.result())
                    try:
                        try:
                            in_view = from_view()
                        finally:
                            merged = merging.result()
                        value = answer(merged, in_view)
                    except MissingViewItemError as e:  # torn by an upkeep, or damaged if the view is still
                        if self.store.meta(self.table_id) == meta:
                            raise DamagedViewItemError(self.table_id, e.key, str(e)) from None
                    else:
                        if self.store.meta(self.table_id) == meta:
                            return Answer(merged.transaction_number, value)
            self._sleep(0.05 * 2**attempt)
        raise QueryableViewBusyError(
            f"the queryable view of table {self.table_id!r} was being written each of the {READ_ATTEMPTS} "
            "times it was read"
        )

    # --- the merge of the log --------------------------------------------------------------------

    def _entries(self, after: int, to_number: int | None = None) -> list[tuple[int, int, Transaction]]:
        return [
            (entry.transaction_number, entry.update_time, decode_entry(entry, self.table_id))
            for entry in entries_after(self.log, self.table_id, after, to_number, "queryable view")
        ]

    def _fetch(self, plan: ReadPlan, *, everything: bool = False) -> dict[str, ViewValue]:
        """The items ``plan`` reads; with ``everything``, after a clear, every file (or partition) item."""
        fetched: dict[str, ViewValue] = {}
        files = set(plan.files)
        for job_id in sorted(plan.jobs):
            claims = self.store.with_prefix(self.table_id, claims_prefix(job_id)).values()
            files.update(ref.filename for ref in claims if isinstance(ref, FileReference))
        if everything and plan.clears_files:
            fetched.update(self.store.with_prefix(self.table_id, FILE_PREFIX))
        elif files:
            fetched.update(self._files_items(files))
        if everything and plan.replaces_partitions:
            fetched.update(self.store.with_prefix(self.table_id, PARTITION_PREFIX))
        elif plan.partitions:
            fetched.update(self.store.get(self.table_id, [partition_key(p) for p in plan.partitions]))
        return fetched

    def _files_items(self, filenames: Collection[str]) -> dict[str, ViewValue]:
        """The ``f#`` items of ``filenames`` and, of a file held in parts, its parts."""
        found = self.store.get(self.table_id, [file_key(f) for f in filenames])
        missing = missing_parts(found)
        return {**found, **self.store.get(self.table_id, missing)} if missing else found

    def _pending(self, entry: LogEntry) -> tuple[int, int, Transaction | PendingAdd]:
        """An entry for a query: an ``AddFiles`` is decompressed, not decoded (see
        :class:`~statestore.views.pending_adds.PendingAdd`); every other entry is decoded."""
        text = None
        if entry.transaction_type == AddFiles.TYPE and not entry.attachments:
            try:
                text = zlib.decompress(entry.body) if entry.compressed else entry.body
            except zlib.error:
                text = None  # decoded now, which says what is wrong with it
        if text is None:
            return entry.transaction_number, entry.update_time, decode_entry(entry, self.table_id)
        pending = PendingAdd(entry.update_time, text, _decoder(entry, self.table_id))
        return entry.transaction_number, entry.update_time, pending

    def _merge(self, view_number: int) -> Merged:
        """The log after ``view_number`` merged: every entry read."""
        entries = [
            self._pending(entry)
            for entry in entries_after(self.log, self.table_id, view_number, None, "queryable view")
        ]
        plan = plan_reads(t for _, _, t in entries)
        return replay(
            self.schema,
            layout.data_prefix(self.table_id),
            view_number,
            self._fetch(plan),
            plan,
            entries,
            defer_adds=True,
        )

    def _merge_about(self, view_number: int, latest: Future[int], partition_ids: Collection[str]) -> Merged:
        """The log after ``view_number`` merged for a query whose answer, of the entries that only add
        files, only those adding to ``partition_ids`` or to a partition above a leaf can change: read up to
        the log's ``latest`` entry, skipping the entries that add only to leaves they list, none of them in
        ``partition_ids`` (``TransactionLogStore.read_about``; an add to a partition above a leaf lists
        nothing, and is read).

        That is the whole merge when every entry in that range only adds files: then the tree stays the
        view's, nothing in the run reads a file or partition, and a skipped add changes nothing the query
        answers. Otherwise (an entry that may change the tree or name a file, or one written before the log
        listed leaves) it is :meth:`_merge`, every entry read. A range cleanup deleted entries of raises
        TransactionNotRetainedError, as :meth:`_merge` does.
        """
        to_number = latest.result()
        if to_number < view_number:  # the log went back: read it, which says what is wrong
            return self._merge(view_number)
        entries = entries_about(
            self.log, self.table_id, view_number, to_number, partition_ids, "queryable view"
        )
        if any(entry.adds_to_leaves is None for entry in entries):
            return self._merge(view_number)
        read = [self._pending(entry) for entry in entries]
        return replay(
            self.schema,
            layout.data_prefix(self.table_id),
            view_number,
            {},
            ReadPlan(),
            read,
            defer_adds=True,
            through=to_number,
        )

    # --- upkeep ------------------------------------------------------------------------------------

    def update(self, load_state: Callable[[], TableState], to_number: int | None = None) -> UpkeepResult:
        """Bring the view up to ``to_number`` (the log's latest if None) by writing what changed.

        ``load_state`` loads the whole state at the log's latest entry: used only to rebuild a view that
        is missing, half written, or behind the log's trimmed point. Raises QueryableViewConflictError if
        another upkeep moved the view meanwhile (nothing of this one's is written then).
        """
        try:
            meta = self.store.meta(self.table_id)
        except DamagedViewItemError as e:  # derived from the log: made again, the meta with it
            logger.warning("rebuilding the queryable view of table %r: %s", self.table_id, e)
            return self.rebuild(load_state())
        if meta is None or meta.writing_to is not None or meta.format != VIEW_FORMAT:
            return self.rebuild(load_state())
        try:
            entries = self._entries(meta.transaction_number, to_number)
        except TransactionNotRetainedError:
            return self.rebuild(load_state())
        if not entries:
            return UpkeepResult(meta.transaction_number, meta.transaction_number, 0)
        plan = plan_reads(t for _, _, t in entries)
        try:
            before = self._fetch(plan, everything=True)
            merged = replay(
                self.schema, layout.data_prefix(self.table_id), meta.transaction_number, before, plan, entries
            )
            changes = self._with_markers(plan, merged, view_changes(self.schema, before, merged))
        except (DamagedViewItemError, MissingViewItemError) as e:  # derived from the log: made again
            logger.warning("rebuilding the queryable view of table %r: %s", self.table_id, e)
            return self.rebuild(load_state())
        return self._write(meta, merged.transaction_number, changes)

    def _with_markers(self, plan: ReadPlan, merged: Merged, changes: ViewChanges) -> ViewChanges:
        """``changes`` and the marker writes that follow them (``statestore.views.view_markers``)."""
        survives = not (plan.clears_files or plan.replaces_partitions)
        gained = reference_partitions(changes.puts, REFERENCE_PREFIX)
        touched = dict(merged.state.partitions_by_id)
        if survives:
            candidates = {*gained, *changes.lost, *touched}
            old_markers = self.store.get(self.table_id, [marker_key(p) for p in candidates])
        else:
            old_markers = self.store.with_prefix(self.table_id, MARKER_PREFIX)

        def partition_of(ids: Collection[str]) -> dict[str, Partition]:
            if plan.replaces_partitions:
                return {}
            return {pid: placed.partition for pid, placed in self.placed(ids).items()}

        def holds_in_view(partition_id: str) -> bool:
            prefix = references_prefix(partition_id)
            for value in self.store.descending(self.table_id, prefix, prefix + _AFTER_EVERY_NAME):
                if isinstance(value, FileReference) and prefix + sized(value.filename) not in changes.deletes:
                    return True
            return False

        puts, deletes = marker_changes(
            gained=gained,
            lost=changes.lost,
            touched=touched,
            view_survives=survives,
            old_markers=old_markers,
            partition_of=partition_of,
            holds_in_view=holds_in_view,
        )
        return ViewChanges({**changes.puts, **puts}, changes.deletes | deletes, changes.lost)

    def rebuild(self, state: TableState) -> UpkeepResult:
        """Make the view the items of ``state`` (a full load), whatever it held before.

        Raises QueryableViewConflictError for a state older than the view: a view never goes back (a
        query that read it before and after must see it change).
        """
        try:
            meta, damaged = self.store.meta(self.table_id), False
        except DamagedViewItemError:  # where the view stood is unknown: it is written whole from the state
            meta, damaged = None, True
        if meta is not None and state.transaction_number < meta.transaction_number:
            raise QueryableViewConflictError(
                f"the queryable view of table {self.table_id!r} is at transaction {meta.transaction_number}; "
                f"it cannot be rebuilt from an older state (at {state.transaction_number})"
            )
        current: Mapping[str, ViewValue | None]
        try:
            current = self.store.with_prefix(self.table_id, "")
        except DamagedViewItemError:  # every item is written again, and every other one deleted
            current = dict.fromkeys(self.store.keys(self.table_id))
        changes = diff_items(current, items_of_state(state))
        result = self._write(meta, state.transaction_number, changes, meta_damaged=damaged)
        return UpkeepResult(result.from_number, result.to_number, result.writes, rebuilt=True)

    def _write(
        self, meta: ViewMeta | None, to_number: int, changes: ViewChanges, *, meta_damaged: bool = False
    ) -> UpkeepResult:
        from_number = None if meta is None else meta.transaction_number
        writing = ViewMeta(meta.transaction_number if meta else 0, writing_to=to_number)
        if meta_damaged:
            self.store.replace_damaged_meta(self.table_id, writing)
        else:
            self.store.replace_meta(self.table_id, writing, meta)
        self.store.write(self.table_id, changes.puts, changes.deletes)
        self.store.replace_meta(self.table_id, ViewMeta(to_number), writing)
        return UpkeepResult(from_number, to_number, changes.writes)


def _decoder(entry: LogEntry, table_id: str) -> Callable[[], AddFiles]:
    def decode() -> AddFiles:
        transaction = decode_entry(entry, table_id)
        assert isinstance(transaction, AddFiles)  # decode_entry checks the entry's type
        return transaction

    return decode
