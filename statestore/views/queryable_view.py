"""The queryable view: a table's state as items keyed for its queries, kept current from the log.

Design records 000/001 ("parallel models: DynamoDB queries"): a reader that needs a few hundred references
should not load a table of a million. The view stores the state as items a key-value store can fetch by key
or by key prefix, at a recorded transaction number (:class:`ViewMeta`), and a query merges the log entries
written after that number into its answer, so the answer is always the one a full load would give.

Items (keys are strings, one namespace per table)::

    f#<filename>                      -> TableFile       (the file, all its references, its update time)
                                         or FileParts    (a file of many references: its update time)
    f#<filename>#<n>                  -> FilePart        (its references n*64 .. n*64+63, if in parts)
    r#<partition id><filename>        -> FileReference   (one per reference: a partition's references)
    j#<job id><filename><partition id> -> FileReference  (one per claimed reference)
    p#<partition id>                  -> PlacedPartition (the partition, its ancestors' ids, its cell)
    x#<cell's lower bound><leaf id>   -> PlacedPartition (one per leaf: the index the region query reads)
    a#<partition id>                  -> the id         (a partition above the leaves holding references)

where each name is written ``<length>:<name>`` (or ``#<sha-256>`` if long, see
:func:`~statestore.views.view_keys.sized`), the ``x#`` items are keyed as
:mod:`statestore.views.view_index` explains, and the ``a#`` items are kept as
:mod:`statestore.views.view_markers` explains.

The ``r#`` and ``j#`` items are projections of the ``f#`` items, and ``x#`` of the ``p#`` items of leaves:
:func:`items_of_file` and :func:`items_of_partition` derive them, so a change is a diff of derived items.
Adding a file with one reference writes two items (``f#`` and ``r#``). A DynamoDB item holds at most
400 KB, and a file may be referenced in thousands of partitions: a file of more than
``REFERENCES_PER_FILE_ITEM`` references keeps them in parts of their own, read back with its ``f#`` item
(:func:`missing_parts`, :func:`files_of`); a change to a few of them rewrites the parts holding those.

**How entries are merged without the whole state.** A log entry's transaction reads and changes a small,
nameable part of the state: the files it names, the files its released jobs claim, the partitions it names.
:func:`plan_reads` lists those keys for a run of entries; the items at those keys, fetched from the view,
make a *partial* :class:`TableState` on which the transactions themselves are applied (the same ``apply``
a full load runs, so rejected jobs of a ``ReplaceFileReferences`` are decided by the same rules). Every
file or partition a run of entries can change is in that partial state, so after the replay:

* a key the plan names has its current value in the partial state;
* any other key has its current value in the view, unless an entry cleared the files (``ClearFiles``,
  ``ClearTable``) or replaced the partitions (``InitialisePartitions``, ``ClearTable``): then the view's
  items of that kind are all gone, and the partial state holds everything since.

:class:`Merged` answers the queries that way; :func:`view_changes` turns the same replay into the item
puts and deletes that move the view to the new number (what changed, not the table's size, except after a
clear, which deletes every item of what it cleared); :func:`items_of_state` rebuilds from a full state.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from statestore.model.files import FileReference, TableFile
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    ClearTable,
    DeleteFiles,
    ExtendPartitionTree,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionBatch,
)
from statestore.views.pending_adds import PendingAdd, PendingTexts
from statestore.views.view_index import PlacedPartition, index_key, place
from statestore.views.view_keys import MissingViewItemError, partition_key, sized
from statestore.views.view_markers import markers_of_state, reference_partitions


class FileParts(NamedTuple):
    """The ``f#`` item of a file whose references are held in ``parts`` items of their own."""

    filename: str
    parts: int
    last_update_time: int


class FilePart(NamedTuple):
    """Part ``number`` of a file's references (``file_part_key``), 0 first."""

    filename: str
    number: int
    references: tuple[FileReference, ...]


ViewValue = TableFile | FileParts | FilePart | FileReference | PlacedPartition | str

FILE_PREFIX = "f#"
REFERENCE_PREFIX = "r#"
CLAIM_PREFIX = "j#"

# The view's items as this version writes them (``ViewMeta.format``). A view of another format is rebuilt
# by the next upkeep, and a query will not read it (format 1 had no index of the leaves, format 2 no markers
# of the partitions above the leaves holding references, format 3 held every file in one item and each
# partition's every ancestor).
VIEW_FORMAT = 4

# At most this many references in one item: names may take 1,024 bytes each, so one reference may take
# ~3.2 KB of JSON, and 64 of them stay well under DynamoDB's 400 KB an item.
REFERENCES_PER_FILE_ITEM = 64


def file_key(filename: str) -> str:
    return FILE_PREFIX + sized(filename)


def file_part_key(filename: str, number: int) -> str:
    """The key of a file's part ``number``: no file's own key (``sized`` ends each name where it says)."""
    return f"{file_key(filename)}#{number}"


def references_prefix(partition_id: str) -> str:
    """The prefix of the ``r#`` items of one partition."""
    return REFERENCE_PREFIX + sized(partition_id)


def claims_prefix(job_id: str) -> str:
    """The prefix of the ``j#`` items of one job."""
    return CLAIM_PREFIX + sized(job_id)


def items_of_file(table_file: TableFile) -> dict[str, ViewValue]:
    """The items that hold ``table_file``: its own (and its parts), one per reference, one per claimed
    reference."""
    filename, references = table_file.filename, table_file.references
    items: dict[str, ViewValue] = {}
    if len(references) <= REFERENCES_PER_FILE_ITEM:
        items[file_key(filename)] = table_file
    else:
        # In the order of their partitions: the parts are the same whatever order a replay left them in.
        ordered = sorted(references, key=lambda ref: ref.partition_id)
        size = REFERENCES_PER_FILE_ITEM
        parts = [tuple(ordered[i : i + size]) for i in range(0, len(ordered), size)]
        items[file_key(filename)] = FileParts(filename, len(parts), table_file.last_update_time)
        for number, part in enumerate(parts):
            items[file_part_key(filename, number)] = FilePart(filename, number, part)
    for ref in references:
        items[references_prefix(ref.partition_id) + sized(ref.filename)] = ref
        if ref.job_id is not None:
            items[claims_prefix(ref.job_id) + sized(ref.filename) + sized(ref.partition_id)] = ref
    return items


def missing_parts(items: Mapping[str, ViewValue]) -> list[str]:
    """The keys of the parts of the files held in parts among ``items`` that are not among them."""
    return [
        key
        for value in items.values()
        if isinstance(value, FileParts)
        for key in (file_part_key(value.filename, i) for i in range(value.parts))
        if key not in items
    ]


def files_of(items: Mapping[str, ViewValue]) -> dict[str, TableFile]:
    """The files ``items`` hold, by name: a file held in parts needs all its parts among them (else
    MissingViewItemError)."""
    files = {v.filename: v for v in items.values() if isinstance(v, TableFile)}
    for value in items.values():
        if isinstance(value, FileParts):
            parts = [items.get(file_part_key(value.filename, i)) for i in range(value.parts)]
            for number, part in enumerate(parts):
                if not isinstance(part, FilePart):
                    named_by = f"the item of file {value.filename!r}"
                    raise MissingViewItemError(file_part_key(value.filename, number), named_by)
            references = tuple(ref for part in parts for ref in cast(FilePart, part).references)
            files[value.filename] = TableFile(value.filename, references, value.last_update_time)
    return files


def items_of_partition(placed: PlacedPartition) -> dict[str, ViewValue]:
    """The items that hold a placed partition: its own, and if it is a leaf its index item."""
    items: dict[str, ViewValue] = {partition_key(placed.partition.id): placed}
    if placed.partition.leaf:
        items[index_key(placed)] = placed
    return items


def items_of_state(state: TableState) -> dict[str, ViewValue]:
    """Every item of the view of ``state`` (a rebuild writes these and deletes every other item)."""
    items: dict[str, ViewValue] = dict(markers_of_state(state))
    for placed in place(state.schema, state.partitions_by_id, {}).values():
        items.update(items_of_partition(placed))
    for table_file in state.files_by_name.values():
        items.update(items_of_file(table_file))
    return items


@dataclass(frozen=True)
class ViewMeta:
    """Where a table's view stands: its items are the state at ``transaction_number``.

    ``writing_to`` is set while an upkeep writes the items of a later number: the items are then a mix of
    the two and no query may use them (a query that sees it, or sees the meta change while it read, reads
    again; an upkeep that finds it left by a writer that stopped rebuilds the view).
    """

    transaction_number: int
    writing_to: int | None = None
    format: int = VIEW_FORMAT


# --- what a run of entries reads ------------------------------------------------------------------


@dataclass
class ReadPlan:
    """The keys a run of log entries reads or changes: fetch these to replay the run on a partial state.

    ``jobs`` are the jobs whose claims a ``ReleaseClaims`` frees: their ``j#`` items name files to fetch
    too. ``clears_files`` / ``replaces_partitions`` say an entry drops every file / partition.
    """

    files: set[str] = field(default_factory=set)
    partitions: set[str] = field(default_factory=set)
    jobs: set[str] = field(default_factory=set)
    clears_files: bool = False
    replaces_partitions: bool = False

    def add(self, transaction: Transaction) -> None:
        """Add what ``transaction`` reads or changes."""
        t = transaction
        if isinstance(t, TransactionBatch):
            for item in t.items:
                self.add(item.transaction)
        elif isinstance(t, AddFiles):
            # Nothing to read: its files are new when it is applied (one the view holds was removed
            # first, by an entry of the run that names it or clears the files), and applying it reads
            # nothing. The replay's state holds them after it.
            pass
        elif isinstance(t, AssignJobIds):
            for request in t.requests:
                self.files.update(request.filenames)
                self.partitions.add(request.partition_id)
        elif isinstance(t, ReleaseClaims):
            self.jobs.update(t.job_ids)
        elif isinstance(t, ReplaceFileReferences):
            for job in t.jobs:
                self.files.update(job.input_files)
                self.files.add(job.new_reference.filename)
                self.partitions.update((job.partition_id, job.new_reference.partition_id))
        elif isinstance(t, SplitFileReferences):
            for split in t.requests:
                self.files.add(split.filename)
                self.partitions.add(split.from_partition_id)
                self.partitions.update(r.partition_id for r in split.new_references)
        elif isinstance(t, DeleteFiles):
            self.files.update(t.filenames)
        elif isinstance(t, ClearFiles):
            self.clears_files = True
        elif isinstance(t, ClearTable):
            self.clears_files = self.replaces_partitions = True
        elif isinstance(t, InitialisePartitions):
            self.replaces_partitions = True
            self.partitions.update(p.id for p in t.partitions)
        elif isinstance(t, SplitPartition):
            self.partitions.update(p.id for p in (t.parent, *t.children))
        elif isinstance(t, ExtendPartitionTree):
            self.partitions.update(p.id for p in (*t.updated_partitions, *t.new_partitions))
        else:  # a new transaction type must say what it reads before the view can follow it
            raise ValueError(f"the queryable view cannot follow a {type(t).__name__} transaction")


def plan_reads(transactions: Iterable[Transaction | PendingAdd]) -> ReadPlan:
    """What ``transactions`` read (an ``AddFiles``, decoded or not, reads nothing)."""
    plan = ReadPlan()
    for transaction in transactions:
        if not isinstance(transaction, PendingAdd):
            plan.add(transaction)
    return plan


# --- the replay on a partial state ----------------------------------------------------------------


@dataclass
class Merged:
    """A run of log entries replayed on the view items they read: the state at ``transaction_number``
    for every key the run touched, and the rules for combining it with the view's other items.

    ``added`` holds the run's ``AddFiles`` entries (update time, transaction) that a query's replay did not
    apply (see :func:`replay`): their files are new, and nothing else in the run names them, so each is
    its references stamped with the entry's update time, read only where a query asks for them.
    """

    state: TableState  # partial: the plan's files and partitions, as of the run's last entry
    touched_files: frozenset[str]
    touched_partitions: frozenset[str]
    clears_files: bool
    replaces_partitions: bool
    placed: Mapping[str, PlacedPartition]  # the view's placements of the partitions fetched
    added: Sequence[PendingAdd] = ()
    _by_partition: dict[str, list[FileReference]] | None = field(default=None, repr=False)
    _added_files: dict[str, TableFile] | None = field(default=None, repr=False)
    _added_by_partition: dict[str, list[tuple[int, FileReference]]] | None = field(default=None, repr=False)
    _added_texts: PendingTexts | None = field(default=None, repr=False)

    @property
    def transaction_number(self) -> int:
        return self.state.transaction_number

    def file(self, filename: str, in_view: TableFile | None) -> TableFile | None:
        """The file's current value, given its ``f#`` item (None if absent)."""
        added = self._files_added().get(filename)
        if added is not None:
            return added
        if filename in self.touched_files:
            return self.state.files_by_name.get(filename)
        return None if self.clears_files else in_view

    def _files_added(self) -> dict[str, TableFile]:
        if self._added_files is None:  # only a file query asks: made on its first use
            self._added_files = {}
            for pending in self.added:
                update_time, add = pending.update_time, pending.transaction
                grouped: dict[str, list[FileReference]] = {}
                for ref in add.references:
                    grouped.setdefault(ref.filename, []).append(ref._replace(last_update_time=update_time))
                for filename in add.unreferenced_files:
                    grouped.setdefault(filename, [])
                for filename, refs in grouped.items():
                    self._added_files[filename] = TableFile(filename, tuple(refs), update_time)
        return self._added_files

    def _added_in(self, partition_id: str) -> list[FileReference]:
        """The references the unapplied ``added`` entries put in ``partition_id``, stamped."""
        if self._added_by_partition is None:
            self._added_by_partition = {}
        if partition_id not in self._added_by_partition:  # decodes only the entries that may add to it
            if self._added_texts is None:
                self._added_texts = PendingTexts(self.added)
            self._added_by_partition[partition_id] = [
                (pending.update_time, ref)
                for pending in self._added_texts.naming(partition_id)
                for ref in pending.transaction.references
                if ref.partition_id == partition_id
            ]
        return [ref._replace(last_update_time=t) for t, ref in self._added_by_partition[partition_id]]

    def references(
        self, in_view: Iterable[FileReference], keep: Iterable[FileReference]
    ) -> list[FileReference]:
        """View references (of untouched files, unless the files were cleared) and the replay's ``keep``."""
        kept = [] if self.clears_files else [r for r in in_view if r.filename not in self.touched_files]
        return sorted([*kept, *keep])

    def references_in(self, partition_id: str, in_view: Iterable[FileReference]) -> list[FileReference]:
        if self._by_partition is None:  # a region query asks for several partitions: group once
            self._by_partition = {}
            for table_file in self.state.files_by_name.values():
                for r in table_file.references:
                    self._by_partition.setdefault(r.partition_id, []).append(r)
        return self.references(
            in_view, [*self._by_partition.get(partition_id, ()), *self._added_in(partition_id)]
        )

    def claims_of(self, job_id: str, in_view: Iterable[FileReference]) -> list[FileReference]:
        files = [*self.state.files_by_name.values(), *(self._files_added().values() if self.added else ())]
        return self.references(in_view, (r for f in files for r in f.references if r.job_id == job_id))

    def partition_is_known(self, partition_id: str) -> bool:
        """Whether the replay decides this partition (else the view's item does)."""
        return self.replaces_partitions or partition_id in self.touched_partitions


def replay(
    schema: Schema,
    data_prefix: str | None,
    view_number: int,
    fetched: Mapping[str, ViewValue],
    plan: ReadPlan,
    entries: Sequence[tuple[int, int, Transaction | PendingAdd]],
    *,
    defer_adds: bool = False,
    through: int | None = None,
) -> Merged:
    """Apply ``entries`` (number, update time, transaction; in order, following ``view_number``) to the
    view items ``fetched`` for ``plan`` (``f#`` items of its files and of its jobs' claims, ``p#`` items of
    its partitions; more may be given).

    With ``defer_adds`` (a query's replay), an ``AddFiles`` entry whose files no entry of the run names
    (``plan.files``) is not applied but kept in ``Merged.added``, unless the run clears the files: its
    files are new, so applying it reads nothing and changes nothing another entry reads, and a query
    reads from it only the references of the partitions it asks for. Entries behind the view are mostly
    such adds, and applying each to a state costs far more than the few references a query keeps. An
    entry may come as a :class:`PendingAdd` not decoded yet: it is decoded here only if it may name one of
    the plan's files (or the run clears the files), else kept as it is.

    With ``through``, ``entries`` are those of the run ``view_number + 1 .. through`` that a query of some
    partitions reads (``TransactionLogStore.read_about``): the others only add references to other
    partitions, so the numbers may skip, and the state is at ``through`` after them.
    """
    files = files_of(fetched)
    placed = {v.partition.id: v for v in fetched.values() if isinstance(v, PlacedPartition)}
    partitions = {i: v.partition for i, v in placed.items()}
    state = TableState(schema, partitions, files, view_number)
    state.data_prefix = data_prefix
    defer = defer_adds and not plan.clears_files
    added: list[PendingAdd] = []
    for number, update_time, entry in entries:
        follows = number == state.transaction_number + 1
        if not follows and not (through is not None and state.transaction_number < number <= through):
            raise ValueError(f"entry {number} does not follow {state.transaction_number}")
        if isinstance(entry, PendingAdd):
            if defer and not any(entry.may_name(f) for f in plan.files):
                added.append(entry)
                state.transaction_number, state.last_update_time = number, update_time
                continue
            entry = entry.transaction
        if defer and type(entry) is AddFiles and not _names_any(entry, plan.files):
            added.append(PendingAdd(update_time, None, entry))
        else:
            entry.apply(state, update_time)
        state.transaction_number, state.last_update_time = number, update_time
    if through is not None:
        state.transaction_number = through
    return Merged(
        state,
        frozenset(plan.files | files.keys() | state.files_by_name.keys()),
        frozenset(plan.partitions | partitions.keys() | state.partitions_by_id.keys()),
        plan.clears_files,
        plan.replaces_partitions,
        placed,
        added,
    )


def _names_any(add: AddFiles, filenames: Collection[str]) -> bool:
    if not filenames:
        return False
    return any(r.filename in filenames for r in add.references) or any(
        f in filenames for f in add.unreferenced_files
    )


# --- the changes that move the view ----------------------------------------------------------------


@dataclass(frozen=True)
class ViewChanges:
    """Item puts and deletes (disjoint) that move the view from one number to another."""

    puts: Mapping[str, ViewValue]
    deletes: frozenset[str]
    lost: frozenset[str] = frozenset()  # the partitions whose ``r#`` items are among ``deletes``

    @property
    def writes(self) -> int:
        return len(self.puts) + len(self.deletes)


def view_changes(schema: Schema, before: Mapping[str, ViewValue], merged: Merged) -> ViewChanges:
    """The writes that move the view past the run ``merged`` replayed.

    ``before`` holds the view's items the run can change, as fetched for its plan; after a clear of the
    files (or a replacement of the partitions) it must hold every ``f#`` (``p#``) item of the view, all of
    which the clear deletes.
    """
    old: dict[str, ViewValue] = {}
    for table_file in files_of(before).values():
        old.update(items_of_file(table_file))
    for value in before.values():
        if isinstance(value, PlacedPartition):
            old.update(items_of_partition(value))
    new: dict[str, ViewValue] = {}
    for table_file in merged.state.files_by_name.values():
        new.update(items_of_file(table_file))
    # A replaced tree is all in the replay's state; otherwise a split's parent was fetched, placed.
    known = {} if merged.replaces_partitions else merged.placed
    for placed in place(schema, merged.state.partitions_by_id, known).values():
        new.update(items_of_partition(placed))
    puts = {key: value for key, value in new.items() if old.get(key) != value}
    deletes = frozenset(old.keys() - new.keys())
    return ViewChanges(
        puts, deletes, frozenset(reference_partitions({k: old[k] for k in deletes}, REFERENCE_PREFIX))
    )


def diff_items(current: Mapping[str, ViewValue | None], wanted: Mapping[str, ViewValue]) -> ViewChanges:
    """The writes that make items ``current`` into ``wanted`` (a rebuild); a current value of None (one
    that could not be read) is written again."""
    puts = {key: value for key, value in wanted.items() if current.get(key) != value}
    return ViewChanges(puts, frozenset(current.keys() - wanted.keys()))
