"""The memory sizing rule: the largest table a function of a given size loads, and the size a table needs."""

from __future__ import annotations

import math

import pytest

from statestore.sizing import (
    DEFAULT_TABLE_REFERENCES,
    DEFAULT_WORKER_MEMORY_MB,
    LOAD_FACTOR,
    MEASURED_BYTES_PER_REFERENCE,
    RUNTIME_BASELINE_MB,
    USABLE_SHARE,
    WARM_BYTES_PER_PARTITION,
    WARM_BYTES_PER_REFERENCE,
    WarmBudget,
    largest_table_references,
    memory_mb_for,
    warm_budget,
    warm_state_bytes,
)


def test_the_largest_table_is_the_usable_memory_over_the_runtime_divided_by_the_cost_per_reference() -> None:
    # 90% of 2,048 MB less 128 MB of runtime = 1,715.2 MiB, at 1 KiB per reference.
    assert largest_table_references(2048, 1024, baseline_mb=128, usable_share=0.9) == 1_756_364
    assert largest_table_references(128, 1024) == 0  # the runtime alone fills it


def test_a_cheaper_reference_holds_a_proportionally_larger_table() -> None:
    at_measured = largest_table_references(2048, MEASURED_BYTES_PER_REFERENCE)
    at_quarter = largest_table_references(2048, 250)
    assert at_quarter == pytest.approx(at_measured * MEASURED_BYTES_PER_REFERENCE / 250, rel=1e-6)


@pytest.mark.parametrize("references", [1, 250_000, 1_000_000, 3_000_000, 8_000_000])
def test_the_memory_picked_for_a_table_holds_it_and_one_step_less_does_not(references: int) -> None:
    size = memory_mb_for(references)
    assert size % 256 == 0
    assert largest_table_references(size) >= references
    if size > 256:
        assert largest_table_references(size - 256) < references


def test_the_default_worker_memory_holds_the_benchmarks_million_reference_table() -> None:
    assert largest_table_references(DEFAULT_WORKER_MEMORY_MB) >= DEFAULT_TABLE_REFERENCES
    assert DEFAULT_WORKER_MEMORY_MB == memory_mb_for(DEFAULT_TABLE_REFERENCES) == 1024


def test_a_table_beyond_lambdas_largest_size_is_refused_with_the_figures() -> None:
    with pytest.raises(ValueError, match="more than Lambda's largest size"):
        memory_mb_for(20_000_000)
    with pytest.raises(ValueError, match="must be positive"):
        largest_table_references(1024, 0)


def test_the_warm_budget_is_the_usable_memory_and_a_load_of_unknown_size_gets_the_room_it_had() -> None:
    for memory_mb in (512, 1024, 3008, 10_240):
        budget = warm_budget(memory_mb)
        usable = (memory_mb * USABLE_SHARE - RUNTIME_BASELINE_MB) * (1 << 20)
        assert budget.bytes == math.floor(usable)
        assert budget.load_factor == LOAD_FACTOR == MEASURED_BYTES_PER_REFERENCE / WARM_BYTES_PER_REFERENCE
        # Unknown size: what is kept is evicted down to a load-factor-th of the budget, what the rule kept
        # before counts were known; a table as large as that, its size then known, loads beside the others
        # evicted to leave room for its peak.
        kept = math.floor(budget.bytes / budget.load_factor)
        assert kept == math.floor(usable * WARM_BYTES_PER_REFERENCE / MEASURED_BYTES_PER_REFERENCE)
        references = kept // WARM_BYTES_PER_REFERENCE
        room = budget.bytes - math.ceil(references * WARM_BYTES_PER_REFERENCE * budget.load_factor)
        assert room >= 0 and room + references * MEASURED_BYTES_PER_REFERENCE <= usable
    assert warm_budget(128).bytes == 0  # the runtime alone fills it
    with pytest.raises(ValueError, match="negative"):
        WarmBudget(-1)
    with pytest.raises(ValueError, match="load factor"):
        WarmBudget(1, 0.9)


def test_a_warm_states_estimate_counts_its_references_and_partitions() -> None:
    assert warm_state_bytes(0, 0) == 0
    assert warm_state_bytes(1_000, 10) == 1_000 * WARM_BYTES_PER_REFERENCE + 10 * WARM_BYTES_PER_PARTITION
    # A 1,024 MB committer keeps over three million references warm.
    assert warm_budget(1024).bytes // WARM_BYTES_PER_REFERENCE > 3_000_000


def test_the_orphan_sweeps_share_covers_a_slice_of_listed_keys() -> None:
    import tracemalloc
    import uuid

    from statestore.model import layout
    from statestore.sizing import BYTES_PER_LISTED_KEY, ORPHAN_SWEEP_MB, ORPHAN_SWEEP_SLICE_KEYS

    table_id = uuid.uuid4().hex
    tracemalloc.start()
    try:
        listed = [(layout.new_data_key(table_id, 1_764_000_000_000), i) for i in range(10_000)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(listed) == 10_000
    assert held / 10_000 < BYTES_PER_LISTED_KEY
    assert ORPHAN_SWEEP_MB * (1 << 20) >= ORPHAN_SWEEP_SLICE_KEYS * BYTES_PER_LISTED_KEY
    assert largest_table_references(1024, baseline_mb=0, usable_share=1.0) > largest_table_references(1024)
