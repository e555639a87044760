"""What a table evicted from a committer's warm cache keeps: enough to take new files without its state.

Most commits to most tables only add files (an ingest's ``AddFiles``). Checking one needs three facts of
the state: the table's data prefix, whether each named partition exists (and which are leaves, for the
entry's leaf list), and whether a file of each name is held already. A :class:`FileGuard` keeps exactly
those: the partitions' ids, and the 64-bit hash of every file name the state held (the hashes the state's
own name index was built on, shared, not copied) plus those of the names added since. ~8 bytes a file
where the whole state keeps ~200. The partitions' ids are the snapshot's index of them, shared too, where
the state's partitions are the snapshot's unchanged (:class:`statestore.state.partition_columns.
PartitionIds`); sets of them where partitions changed since.

A guard answers "held?" only when it can be sure: a name whose hash it does not hold is certainly not
held; one whose hash it holds may be (or may collide), so it raises :class:`GuardCannotTell` and the
caller loads the state, which answers exactly. A guard is only as current as the log entry it was made at
(``transaction_number``): an append from it is conditional on the next number, so any entry another writer
appended meanwhile makes the append fail. The caller then reads the entries after the guard and, where they
only add files, has the guard take them (:meth:`FileGuard.take_entry`); any other entry loads the state.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

import numpy as np

from statestore.state.hash_search import HashSearch
from statestore.state.partition_columns import PartitionIds
from statestore.state.string_column import _hash_of, split_filename


class NewFileChecks(Protocol):
    """The facts of a state that checking new files reads (what ``AddFiles`` validates against)."""

    @property
    def data_prefix(self) -> str | None: ...

    def has_partition(self, partition_id: str) -> bool: ...

    def files_present(self, filenames: Sequence[object]) -> list[bool]: ...


class GuardCannotTell(Exception):
    """A guard cannot decide what it was asked (a name whose hash it holds): load the state."""


# Bytes a guard costs beyond its arrays and its partitions' ids (both counted as they are): each name added
# since (a hash in a set), and the guard itself (its objects and the views on its arrays: ~1.6 KB, ~3.6 KB
# with a snapshot's index of its partitions, tests/unit/test_file_guard.py; the fault simulation, whose
# tables are tiny, counts none).
_BYTES_PER_ADDED_NAME = 100
GUARD_OVERHEAD_BYTES = 4_000


class FileGuard:
    """A table's file-name hashes and partition ids as of ``transaction_number`` (see the module's docstring).

    Made by :meth:`statestore.state.table_state.TableState.file_guard`, from the state's sorted hashes or
    its search over them (shared: a million-reference state's is ~1 MB and ~2.4 ms to make); changed only by
    :meth:`keep_pending`, after an append made from it landed.
    """

    __slots__ = (
        "_search",
        "_partition_bytes",
        "_mask",
        "_added",
        "_pending",
        "data_prefix",
        "partition_ids",
        "leaf_ids",
        "transaction_number",
        "last_update_time",
        "references",
        "read_to_end_at",
    )

    def __init__(
        self,
        sorted_hashes: np.ndarray | HashSearch,
        mask: int,
        added_names: Iterable[str],
        *,
        data_prefix: str | None,
        partition_ids: Collection[str],
        leaf_ids: Collection[str],
        transaction_number: int,
        last_update_time: int,
        references: int,
        read_to_end_at: int,
    ) -> None:
        self._search = sorted_hashes if isinstance(sorted_hashes, HashSearch) else HashSearch(sorted_hashes)
        self._mask = mask
        self._added: set[int] = set()
        self._pending: set[int] = set()  # names of a group's earlier members, until it is appended
        self.data_prefix = data_prefix
        self.partition_ids = partition_ids
        self.leaf_ids = leaf_ids
        # Sets of its own are counted once (a snapshot's index of them as asked: it makes its search later).
        own = not isinstance(partition_ids, PartitionIds)
        self._partition_bytes = _bytes_of_sets(partition_ids, leaf_ids) if own else None
        self.transaction_number = transaction_number
        self.last_update_time = last_update_time
        self.references = references
        self.read_to_end_at = read_to_end_at  # when the state was last known current (see LogStateLoading)
        for name in added_names:
            self._added.add(self._hash(name))

    # --- NewFileChecks -------------------------------------------------------------------------------

    def has_partition(self, partition_id: str) -> bool:
        return partition_id in self.partition_ids

    def files_present(self, filenames: Sequence[object]) -> list[bool]:
        """False for each name (a name that is not a string is held by no state), or raises
        GuardCannotTell when one may be held."""
        for name in filenames:
            if type(name) is str and self._may_hold(name):
                raise GuardCannotTell(f"file {name!r} may be held")
        return [False] * len(filenames)

    # --- changes ---------------------------------------------------------------------------------

    def hold_pending(self, filenames: Iterable[str]) -> None:
        """Count ``filenames`` as held until :meth:`drop_pending` (a group's member, seen by the next)."""
        self._pending.update(self._hash(name) for name in filenames)

    def drop_pending(self) -> None:
        self._pending.clear()

    def keep_pending(self, references: int, number: int, update_time: int) -> None:
        """An entry appended from this guard at ``number`` added the names held pending (``references`` of
        them): they are held from now on."""
        self._added |= self._pending
        self._pending.clear()
        self.references += references
        self.transaction_number = number
        self.last_update_time = update_time

    def take_entry(self, filenames: Iterable[str], references: int, number: int, update_time: int) -> None:
        """Another writer's entry at ``number`` (the next one), which only added ``filenames`` with
        ``references`` references between them: held from now on. Raises GuardCannotTell, changing
        nothing, when a name cannot be hashed."""
        if number != self.transaction_number + 1:
            raise ValueError(f"a guard at {self.transaction_number} cannot take entry {number}")
        hashes = [self._hash(name) for name in filenames]
        self._added.update(hashes)
        self.references += references
        self.transaction_number = number
        self.last_update_time = update_time

    # --- size ------------------------------------------------------------------------------------

    @property
    def estimated_bytes(self) -> int:
        """What the guard keeps in memory, estimated as the warm cache counts a state."""
        ids = self.partition_ids
        return (
            self._search.nbytes
            + (ids.nbytes if isinstance(ids, PartitionIds) else self._partition_bytes or 0)
            + _BYTES_PER_ADDED_NAME * len(self._added)
            + GUARD_OVERHEAD_BYTES
        )

    # --- hashing ---------------------------------------------------------------------------------

    def _hash(self, name: str) -> int:
        directory, base_name = split_filename(name)
        try:
            return _hash_of(directory, base_name.encode(), self._mask)
        except UnicodeEncodeError:  # not UTF-8: no state holds it, and the checks refuse it
            raise GuardCannotTell(f"file name {name!r} is not UTF-8") from None

    def _may_hold(self, name: str) -> bool:
        h = self._hash(name)
        if h in self._added or h in self._pending:
            return True
        search = self._search
        position = search.position(h)
        return position < len(search) and search.at(position) == h


def _bytes_of_sets(partition_ids: Collection[str], leaf_ids: Collection[str]) -> int:
    """What a guard's own collections of partition ids cost it, the state they came from being gone: the
    collections and the ids (each leaf's id is one of the partitions')."""
    return (
        sys.getsizeof(partition_ids)
        + sys.getsizeof(leaf_ids)
        + sum(sys.getsizeof(partition_id) for partition_id in partition_ids)
    )
