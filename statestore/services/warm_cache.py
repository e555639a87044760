"""Tables kept warm within a memory budget: least recently used evicted first.

A process that commits to or snapshots many tables (the committer, the snapshot worker) keeps each table's
loaded state between calls, so the next call for it reads nothing but the log's tail. Kept without bound,
those states grow with every table the process has seen until it runs out of memory; a thousand tables of
10,000 references each hold more than a 1,024 MB function has. :class:`WarmCache` keeps them within a
budget of *estimated* bytes instead, each state's estimate measured from its size
(:func:`statestore.sizing.warm_state_bytes`: references and partitions times the measured bytes each),
and evicts the least recently used first.

- **Correctness never depends on warmth.** An evicted table is loaded again (snapshot + log) the next time
  it is used; whether a request was applied is answered by its status, written with its log entry.
- **Sizes are measured after use** (:meth:`WarmCache.settle`): a state grows while it is used, and is only
  known once loaded. A table whose state alone is over the budget is used and then dropped (counted as
  *oversized*), never kept at the others' expense.
- **Room is made before a load** (:meth:`WarmCache.make_room`): for a table of known size (seen before, or
  counted in its snapshot's record) the others are evicted until they and the load's transient peak (its
  size times the budget's *load factor*) fit in the budget; a table larger than that empties the cache
  first, so its load has the function's memory to itself. For a table of unknown size they are evicted down
  to a load-factor-th of the budget, the rest being room for its peak (:mod:`statestore.sizing`).
- **Room is made again as a state outgrows it** (:meth:`WarmCache.grown`): a snapshot counts only what was
  before it, and a table's log may have grown by a bulk import since. Before each log entry a load (or a
  catch-up) applies, it tells the cache the state's size and what the entry adds at most; applying it peaks
  at the state plus the load factor times that. Past the peak room was made for (a load's, or the measured
  size of a state kept), room is made again, for an eighth more: a log of many entries makes room a few
  times, not per entry, and a few commits since the snapshot fit in the room of its load.
- **A value may be demoted instead of evicted** (``demote``: the committer drops a table's state and keeps
  its guard, :mod:`statestore.state.file_guard`): the least recently used are demoted first, the newest
  last, and only then are values evicted, the demoted ones first.
- **Freed heap is given back** (:func:`release_freed_heap`) after evictions, demotions and loads have
  freed :data:`TRIM_AFTER_BYTES` between them (:class:`HeapRelease`): freed memory otherwise stays in the
  process (glibc keeps it for reuse), and Lambda counts the resident set. Not after each: ``malloc_trim``
  walks the whole heap (~0.8 ms in a committer holding ~700 MB of tables), and a few megabytes kept are
  reused by the next load.

It is also a ``MutableMapping`` (reads and writes settle the earlier use first), so code that keeps warm
stores in a plain mapping (:func:`statestore.services.snapshot_upkeep.snapshot_table`) takes one unchanged.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from statestore.sizing import warm_state_bytes

logger = logging.getLogger("statestore.warm_cache")

# The environment variable that sets a function's warm budget, in megabytes (lambdas/_runtime.py reads it;
# the stack's ``warm_cache_mb`` setting sets it).
WARM_CACHE_MB_ENV = "STATESTORE_WARM_CACHE_MB"

V = TypeVar("V")

_libc_trim: Callable[[int], int] | None | bool = False  # False: not looked up yet; None: not available


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is none (macOS, musl, Windows)."""
    global _libc_trim
    if _libc_trim is False:
        _libc_trim = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _libc_trim = libc.malloc_trim
            except (OSError, AttributeError):  # not glibc
                _libc_trim = None
    return _libc_trim if callable(_libc_trim) else None


def release_freed_heap() -> bool:
    """Give memory the process freed back to the system where the platform allows: Arrow's pool, then the C
    heap (glibc's ``malloc_trim(0)``). Returns whether the C heap could be trimmed; never raises."""
    try:
        pa.default_memory_pool().release_unused()
    except Exception:  # an allocator without the call: nothing to give back
        logger.debug("Arrow's memory pool could not release unused memory", exc_info=True)
    trim = _malloc_trim()
    if trim is None:
        return False
    try:
        trim(0)
    except Exception:
        logger.debug("malloc_trim failed", exc_info=True)
        return False
    return True


# Freed bytes (estimated) after which the heap is trimmed: a few loads of 10,000-reference tables, or one
# eviction of a larger one. Small beside a function's memory; large beside what one small load frees.
TRIM_AFTER_BYTES = 16 << 20


class HeapRelease:
    """Calls ``release`` (:func:`release_freed_heap`) once at least ``threshold`` bytes were freed since it
    last did. ``None`` freed bytes means unknown: released at once."""

    def __init__(
        self, threshold: int = TRIM_AFTER_BYTES, release: Callable[[], object] = release_freed_heap
    ) -> None:
        self.threshold = threshold
        self._release = release
        self._freed = 0

    def __call__(self, freed_bytes: int | None) -> None:
        self._freed += self.threshold if freed_bytes is None else max(0, freed_bytes)
        if self._freed >= self.threshold:
            self._freed = 0
            self._release()


@dataclass(frozen=True)
class CacheCounts:
    """What a cache did since it was made (cumulative): lookups that found a table or not, tables evicted
    to stay within the budget, tables dropped after use because their state alone was over it, and tables
    demoted (kept smaller) to stay within the budget."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    oversized: int = 0
    demotions: int = 0


class WarmCache(MutableMapping[str, V]):
    """Values by table id, least recently used first, whose estimated bytes stay within ``budget_bytes``.

    ``size_of`` estimates a value's bytes now (0 for one not loaded yet); ``demote``, where given, makes a
    value smaller in place and says whether it did. Not thread-safe: one per process, used by one caller at
    a time, as the committer and the workers are.
    """

    def __init__(
        self,
        budget_bytes: int,
        size_of: Callable[[V], int],
        *,
        load_factor: float = 1.0,
        demote: Callable[[V], bool] | None = None,
        release: Callable[[int | None], object] | None = None,
        name: str = "warm cache",
    ) -> None:
        if budget_bytes < 0:
            raise ValueError(f"a warm cache's budget must not be negative, got {budget_bytes} bytes")
        if not load_factor >= 1:
            raise ValueError(f"a load's peak is at least the state it keeps: load factor {load_factor}")
        self.budget_bytes = budget_bytes
        self.load_factor = load_factor
        self._demote = demote
        self._size_of = size_of
        self._release = HeapRelease() if release is None else release  # given the bytes freed
        self._name = name
        self._values: OrderedDict[str, V] = OrderedDict()
        self._sizes: dict[str, int] = {}  # estimated bytes of each kept value, as last measured
        self._known: dict[str, int] = {}  # the last measured size of every table seen (a few bytes each)
        # The peak the others leave room for beside each kept or loading value: its load's (when room was
        # made), or its measured size (see grown).
        self._peak: dict[str, int] = {}
        # Kept values ``demote`` was tried on since they were last used: a demoted value cannot be made
        # smaller again until it is used (a table's state is loaded only then), so making room passes over
        # them without a call, rather than trying every value kept each time (~1,000 tables).
        self._tried: set[str] = set()
        self._hits = self._misses = self._evictions = self._oversized = self._demotions = 0

    # --- what it holds --------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        """The estimated bytes of the values kept, as last measured."""
        return sum(self._sizes.values())

    @property
    def counts(self) -> CacheCounts:
        return CacheCounts(self._hits, self._misses, self._evictions, self._oversized, self._demotions)

    def known_size(self, key: str) -> int | None:
        """The table's estimated bytes when it was last measured here (kept or not), or None."""
        return self._known.get(key)

    def peek(self, key: str) -> V | None:
        """The value kept for ``key``, or None; counts nothing and changes no order."""
        return self._values.get(key)

    def lookup(self, key: str) -> V | None:
        """The value kept for ``key`` (made the most recently used), counting a hit or a miss."""
        value = self._values.get(key)
        if value is None:
            self._misses += 1
            return None
        self._hits += 1
        self._values.move_to_end(key)
        self._tried.discard(key)
        return value

    # --- the policy -----------------------------------------------------------------------------

    def make_room(self, key: str, expected: int | None = None) -> list[str]:
        """Before ``key`` is loaded: evict the least recently used others until its load's peak fits beside
        them (all of them when it is over the budget), its size being the larger of the last measured here
        and ``expected`` (its snapshot's counts, or what its demoted value knows); down to a load-factor-th
        of the budget when neither is known. Returns the keys evicted, oldest first."""
        known = self._known.get(key)
        size = expected if known is None else known if expected is None else max(known, expected)
        if size is None:
            room = math.floor(self.budget_bytes / self.load_factor)
        else:
            room = self.budget_bytes - math.ceil(size * self.load_factor)
        self._peak[key] = self.budget_bytes - room
        evicted, freed = self._evict_until(room, keep=key)
        if freed:  # a state dropped for its guard frees memory too
            self._release(freed)
        return evicted

    def grown(self, key: str, size: int, added: int) -> list[str]:
        """Before a log entry is applied to ``key``'s state (loading or catching up): the state's estimated
        ``size`` and the bytes the entry adds at most. Applying it peaks at ``size`` plus the load factor
        times ``added``; past the peak the others leave room for, they are evicted until they leave room
        for an eighth more (:meth:`make_room`). Returns the keys evicted, oldest first."""
        peak = size + math.ceil(added * self.load_factor)
        if peak <= self._peak.get(key, 0):
            return []
        return self.make_room(key, math.ceil((peak + peak // 8) / self.load_factor))

    def growth_watch(self, key: str) -> Callable[[int, int, int, int], object]:
        """A store's ``growth_watch`` for ``key`` (``LogStateLoading.growth_watch``): its state's file
        references and partitions and what an entry adds, counted in bytes as a warm state is
        (:func:`statestore.sizing.warm_state_bytes`), told to :meth:`grown`. It holds the cache weakly: the
        cache holds the store, and a cycle through frozen states (``freeze_loaded_states``) would keep a
        dropped cache's tables for good."""
        cache = weakref.ref(self)

        def grown(references: int, partitions: int, added_references: int, added_partitions: int) -> None:
            kept = cache()
            if kept is not None:
                size = warm_state_bytes(references, partitions)
                kept.grown(key, size, warm_state_bytes(added_references, added_partitions))

        return grown

    def settle(self, used: Iterable[str] | None = None) -> list[str]:
        """After use: measure the kept values ``used`` (every one when None; a value only changes while it is
        used), drop one whose estimate alone is over the budget, and evict the least recently used until the
        rest fit. Returns the keys dropped or evicted, oldest first."""
        dropped: list[str] = []
        freed = 0
        measured = (
            list(self._values.items())
            if used is None
            else [(key, self._values[key]) for key in used if key in self._values]
        )
        for key, value in measured:
            self._tried.discard(key)
            size = self._sizes[key] = self._size_of(value)
            self._known[key] = self._peak[key] = size
            if size > self.budget_bytes:
                del self._values[key], self._sizes[key], self._peak[key]
                self._oversized += 1
                dropped.append(key)
                freed += size
                logger.info(
                    "%s: table %r's state (~%d MB) is over the budget (%d MB): used, then dropped",
                    self._name, key, size >> 20, self.budget_bytes >> 20,
                )  # fmt: skip
        evicted, freed_evicting = self._evict_until(self.budget_bytes)
        dropped += evicted
        if freed or freed_evicting:
            self._release(freed + freed_evicting)
        return dropped

    def _evict_until(self, limit: int, keep: str | None = None) -> tuple[list[str], int]:
        """Until the kept values' bytes are within ``limit``, least recently used first: values are demoted
        where ``demote`` can (it makes a value smaller in place: kept, at its new size), the most recent one
        last; then what is left is evicted, the most recent one last. Returns the keys evicted and the
        estimated bytes freed."""
        evicted: list[str] = []
        # Making room for ``keep``: what it holds now is part of the size room is made for, not the others'.
        used = before = self.used_bytes - (0 if keep is None else self._sizes.get(keep, 0))
        if used <= limit:
            return evicted, 0
        newest = next(reversed(self._values), None)
        passes: list[tuple[bool, bool]] = []  # (demote, include the newest)
        if self._demote is not None:
            passes.append((True, False))
        passes.append((False, False))
        if self._demote is not None:
            passes.append((True, True))
        passes.append((False, True))
        for demoting, newest_too in passes:
            for key in list(self._values):
                if used <= limit:
                    break
                if key == keep or (key == newest and not newest_too):
                    continue
                size = self._sizes[key]
                if demoting:
                    if self._demote is not None and key not in self._tried:
                        self._tried.add(key)
                        if self._demote(self._values[key]):
                            smaller = self._sizes[key] = self._size_of(self._values[key])
                            used -= size - smaller
                            self._demotions += 1
                    continue
                used -= self._sizes.pop(key)
                del self._values[key]
                self._peak.pop(key, None)
                self._tried.discard(key)
                self._evictions += 1
                evicted.append(key)
        if evicted:
            logger.debug("%s: evicted %d table(s) to stay within %d bytes", self._name, len(evicted), limit)
        return evicted, before - used

    # --- MutableMapping -------------------------------------------------------------------------

    def __getitem__(self, key: str) -> V:
        return self._values[key]

    def get(self, key: str, default: V | None = None) -> V | None:  # type: ignore[override]
        """The value kept for ``key``, settling the earlier use first (so a plain-mapping user is bounded
        too), counting a hit or a miss."""
        self.settle()
        found = self.lookup(key)
        if found is None:
            self.make_room(key)
            return default
        return found

    def __setitem__(self, key: str, value: V) -> None:
        """Keep ``value`` as the most recently used; measured at the next :meth:`settle`."""
        self._values[key] = value
        self._values.move_to_end(key)
        self._sizes.setdefault(key, 0)
        self._tried.discard(key)

    def __delitem__(self, key: str) -> None:
        """Forget ``key``'s value (not counted as an eviction: the caller chose to drop it)."""
        del self._values[key]
        self._sizes.pop(key, None)
        self._peak.pop(key, None)
        self._tried.discard(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
