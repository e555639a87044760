"""What one batch of the committer did, for the committer Lambda's metrics (no metrics library here).

:class:`BatchStats` is a small immutable value the committer leaves in ``BatchCommitter.last_batch`` after
each call of ``process``; the handler turns it into CloudWatch metrics. Outcome counts are not repeated here:
they are the batch's ``MessageResult`` outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statestore.state.table_state import TableState


@dataclass(frozen=True)
class TableSize:
    """The size of a table's state after a batch committed to it."""

    table_id: str
    references: int
    partitions: int

    @classmethod
    def of(cls, table_id: str, state: TableState) -> TableSize:
        return cls(table_id, state.reference_count(), len(state.partitions_by_id))


@dataclass(frozen=True)
class BatchStats:
    """One batch: its size, lost races appending to the log, and how each table's state was found.

    A *warm* load found the table's state kept from an earlier batch; a *cold* load read it from the latest
    snapshot and the log after it (a new container, a table not seen before, or one dropped after an
    unexpected error), and ``cold_load_ms`` holds how long each took. Warm loads are the warm cache's hits,
    cold loads its misses. ``evictions`` counts the tables evicted to stay within the warm budget and
    ``oversized`` those dropped after use because their state alone was over it; ``warm_tables`` and
    ``warm_bytes`` are what the cache kept after the batch (its estimate, in bytes). ``guarded`` counts the
    tables committed to from what an evicted table keeps (:mod:`statestore.state.file_guard`), neither
    loading nor holding its state, and ``demotions`` the tables whose state was dropped for that guard.
    A table not kept at all may have its guard read from its latest snapshot instead of its state being
    loaded (a large table whose requests only add files): ``cold_guard_ms`` holds how long each such read
    took, and ``guarded_cold`` counts the commits appended from a guard read so (among ``guarded``: cold
    ones, not hits).
    """

    messages: int = 0
    log_append_conflicts: int = 0
    warm_loads: int = 0
    cold_load_ms: tuple[float, ...] = ()
    table_sizes: tuple[TableSize, ...] = ()
    evictions: int = 0
    oversized: int = 0
    warm_tables: int = 0
    warm_bytes: int = 0
    guarded: int = 0
    demotions: int = 0
    cold_guard_ms: tuple[float, ...] = ()
    guarded_cold: int = 0

    @property
    def cold_loads(self) -> int:
        return len(self.cold_load_ms)


@dataclass
class BatchStatsBuilder:
    """Accumulates a :class:`BatchStats` while a batch is processed."""

    messages: int = 0
    log_append_conflicts: int = 0
    warm_loads: int = 0
    cold_load_ms: list[float] = field(default_factory=list)
    table_sizes: dict[str, TableSize] = field(default_factory=dict)
    evictions: int = 0
    oversized: int = 0
    warm_tables: int = 0
    warm_bytes: int = 0
    guarded: int = 0
    demotions: int = 0
    cold_guard_ms: list[float] = field(default_factory=list)
    guarded_cold: int = 0

    def build(self) -> BatchStats:
        return BatchStats(
            self.messages,
            self.log_append_conflicts,
            self.warm_loads,
            tuple(self.cold_load_ms),
            tuple(self.table_sizes.values()),
            self.evictions,
            self.oversized,
            self.warm_tables,
            self.warm_bytes,
            self.guarded,
            self.demotions,
            tuple(self.cold_guard_ms),
            self.guarded_cold,
        )
