"""How big a table a function of a given memory size can load, from the measured memory per file reference.

A function that loads a table (the committer, the snapshot and cleanup workers) holds the table's whole
state: its memory grows with the number of file references. The rule, per table (each snapshot or cleanup
worker invocation loads exactly one):

    largest table = (memory size x usable share - runtime baseline - orphan sweep) / bytes per reference

- **bytes per reference**: :data:`MEASURED_BYTES_PER_REFERENCE`, the peak a fresh process reaches loading
  a snapshot of 1,000,000 references over 100,000 leaves and writing it again (what a snapshot worker
  does), above what it held before, rounded up: the state itself keeps far less once loaded; the rest is
  the Parquet bytes and the load's temporaries. ``benchmarks/bench_model.py`` measures it (the
  benchmarks page shows the current figure); raise the constant if that figure grows past it.
- **runtime baseline**: :data:`RUNTIME_BASELINE_MB`, the handler's imports (Python 3.12, pyarrow, boto3,
  Powertools) rounded up for the Lambda runtime's own.
- **orphan sweep**: :data:`ORPHAN_SWEEP_MB`, the most the cleanup worker's orphan sweep holds beside the
  state: one slice of listed keys (:data:`ORPHAN_SWEEP_SLICE_KEYS` at :data:`BYTES_PER_LISTED_KEY`), whatever
  the table's size (:mod:`statestore.engine.orphan_sweep`). Counted for every function, as one rule sizes
  all three.
- **usable share**: :data:`USABLE_SHARE`, the memory alarm's default threshold (``memory_alarm_percent``):
  a table that needs more than this sets the alarm off before it runs out.

A process that keeps several tables warm (the committer, the snapshot worker) holds each one's state
between calls, within a budget (:mod:`statestore.services.warm_cache`). The budget rule:

    warm budget = memory size x usable share - runtime baseline

- **warm bytes**: what a loaded state keeps once its load's temporaries are freed and given back
  (:data:`WARM_BYTES_PER_REFERENCE` and :data:`WARM_BYTES_PER_PARTITION`): the resident set a process grows
  by per state it keeps, loading many copies of a snapshot after ``malloc_trim``, with the references'
  and the partitions' shares told apart by states of few and of many partitions, rounded up so that the
  retained memory ``benchmarks/bench_model.py`` measures for its million-reference table is covered too.
  :func:`warm_state_bytes` estimates a state's bytes from its counts.
- **the load's room**: a load's transient peak is its state's warm bytes times a *load factor*,
  :data:`MEASURED_BYTES_PER_REFERENCE` over :data:`WARM_BYTES_PER_REFERENCE` (3). The committer only loads:
  in a fresh process that peaks lower (``benchmarks/bench_model.py`` prints it, ~410 B a reference), but a
  process that has loaded and dropped many tables holds more for the same load (its heap is fragmented:
  ``benchmarks/bench_many_tables.py`` measured a committer at 989 MB of 1,024 with a factor of 2.25), so
  the committer makes the snapshot worker's room. Before a table of known size
  is loaded (measured at an earlier load, or counted in its snapshot's record), the tables kept are evicted
  until they and that peak fit in the budget; a table larger than that loads with the cache emptied, so it
  is bounded by the per-table rule above. Before a table of unknown size is loaded (no snapshot, or one
  recorded before snapshots were counted), they are evicted down to a load-factor-th of the budget: the
  rest is room for the peak of a load of unknown size.

Pure arithmetic: no AWS imports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MEASURED_BYTES_PER_REFERENCE = 600
RUNTIME_BASELINE_MB = 128
USABLE_SHARE = 0.9
# The orphan sweep lists and judges keys a slice at a time: 100 LIST pages. A listed key is a (key, time) pair
# in a list: ~250 B for a ~110-character key (tests/unit/test_sizing.py measures it), rounded up for longer
# names and the sweep's lists of candidates.
ORPHAN_SWEEP_SLICE_KEYS = 100_000
BYTES_PER_LISTED_KEY = 400
ORPHAN_SWEEP_MB = math.ceil(ORPHAN_SWEEP_SLICE_KEYS * BYTES_PER_LISTED_KEY / (1 << 20))
# The table the default worker sizes are chosen for: the benchmark's (1,000,000 references).
DEFAULT_TABLE_REFERENCES = 1_000_000
# Lambda's memory range, in MB (MiB); sizes are picked in steps of this many MB.
LAMBDA_MEMORY_MB = (128, 10_240)
MEMORY_STEP_MB = 256
_MIB = 1 << 20

# What a loaded state keeps per reference and per partition (measured; see the module's docstring).
WARM_BYTES_PER_REFERENCE = 200
WARM_BYTES_PER_PARTITION = 300


def largest_table_references(
    memory_mb: int,
    bytes_per_reference: int = MEASURED_BYTES_PER_REFERENCE,
    *,
    baseline_mb: int = RUNTIME_BASELINE_MB + ORPHAN_SWEEP_MB,
    usable_share: float = USABLE_SHARE,
) -> int:
    """The most file references a table may have for a function of ``memory_mb`` to load it (0 if the
    runtime alone fills the usable memory). Raises ValueError for a non-positive ``bytes_per_reference``."""
    if bytes_per_reference <= 0:
        raise ValueError(f"bytes_per_reference must be positive, got {bytes_per_reference}")
    usable_bytes = (memory_mb * usable_share - baseline_mb) * _MIB
    return max(0, math.floor(usable_bytes / bytes_per_reference))


def memory_mb_for(
    references: int,
    bytes_per_reference: int = MEASURED_BYTES_PER_REFERENCE,
    *,
    baseline_mb: int = RUNTIME_BASELINE_MB + ORPHAN_SWEEP_MB,
    usable_share: float = USABLE_SHARE,
    step_mb: int = MEMORY_STEP_MB,
) -> int:
    """The smallest Lambda memory size, in steps of ``step_mb``, whose function can load a table of
    ``references`` (the inverse of :func:`largest_table_references`). Raises ValueError when even Lambda's
    largest size (10,240 MB) cannot."""
    needed = (references * bytes_per_reference / _MIB + baseline_mb) / usable_share
    size = max(LAMBDA_MEMORY_MB[0], math.ceil(needed / step_mb) * step_mb)
    if size > LAMBDA_MEMORY_MB[1]:
        raise ValueError(
            f"a table of {references:,} references needs about {needed:,.0f} MB at {bytes_per_reference} B "
            f"per reference, more than Lambda's largest size ({LAMBDA_MEMORY_MB[1]:,} MB)"
        )
    return size


def warm_state_bytes(references: int, partitions: int) -> int:
    """The estimated bytes a loaded state of ``references`` file references and ``partitions`` partitions
    keeps in memory."""
    return references * WARM_BYTES_PER_REFERENCE + partitions * WARM_BYTES_PER_PARTITION


# A table's guard read from its latest snapshot instead of its state (statestore.codec.snapshot_guard)
# peaks at the snapshot's files object, held while its name hashes are decoded (~37 B a reference for
# bench_model's names, rounded up for longer ones), and the hashes (8 B a row, 8 a file, a flag a row).
GUARD_READ_BYTES_PER_REFERENCE = 120


def guard_read_bytes(references: int) -> int:
    """The estimated peak of reading the guard of a snapshot of ``references`` file references."""
    return references * GUARD_READ_BYTES_PER_REFERENCE


@dataclass(frozen=True)
class WarmBudget:
    """What a process may keep warm: ``bytes`` of estimated state, and ``load_factor``, a load's transient
    peak over the state it keeps. Before a load of known size the others are evicted until they and its peak
    fit in ``bytes``; before one of unknown size, until they fit in ``bytes / load_factor``. A factor of 1
    counts no load against the budget: its room is outside it (a budget set in megabytes by an operator)."""

    bytes: int
    load_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.bytes < 0:
            raise ValueError(f"a warm budget must not be negative, got {self.bytes} bytes")
        if not self.load_factor >= 1:
            raise ValueError(f"a load's peak is at least the state it keeps: load factor {self.load_factor}")


# A load's transient peak over the warm bytes of the state it leaves (see the module's docstring).
LOAD_FACTOR = MEASURED_BYTES_PER_REFERENCE / WARM_BYTES_PER_REFERENCE


def warm_budget(
    memory_mb: int, *, baseline_mb: int = RUNTIME_BASELINE_MB, usable_share: float = USABLE_SHARE
) -> WarmBudget:
    """The warm budget of a function of ``memory_mb``: its usable memory less the runtime's (0 if the runtime
    alone fills it), each load making room for its peak (see the module's docstring)."""
    usable_bytes = (memory_mb * usable_share - baseline_mb) * _MIB
    return WarmBudget(max(0, math.floor(usable_bytes)), LOAD_FACTOR)


# The default memory of the snapshot and cleanup workers: each loads one table.
DEFAULT_WORKER_MEMORY_MB = memory_mb_for(DEFAULT_TABLE_REFERENCES)
