"""One hash at a time in a sorted uint64 array: the answer NumPy's search gives, for every shape of array."""

from __future__ import annotations

import numpy as np
import pytest

from statestore.state.hash_search import HashSearch

TOP = (1 << 64) - 1


def searched(values: list[int]) -> tuple[HashSearch, np.ndarray]:
    hashes = np.sort(np.array(values, np.uint64))
    return HashSearch(hashes), hashes


def probes(hashes: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Every held value, its neighbours, both ends of the range and random values."""
    held = [int(h) for h in hashes]
    near = [v + d for v in held for d in (-1, 1) if 0 <= v + d <= TOP]
    return held + near + [0, 1, TOP - 1, TOP] + [int(v) for v in rng.integers(0, TOP, 500, np.uint64)]


@pytest.mark.parametrize(
    "values",
    [
        [],
        [7],
        [0, TOP],
        [5] * 10,  # every hash the same: one name's collisions
        [0, 1, 2, 3] * 50,  # a narrowed mask: all in the first bucket
        list(range(1 << 60, (1 << 60) + 1000)),  # crowded into one bucket among empty ones
    ],
    ids=["empty", "one", "ends", "all-equal", "narrow-mask", "one-crowded-bucket"],
)
def test_the_position_of_a_hash_is_numpys_search_of_it(values: list[int]) -> None:
    search, hashes = searched(values)
    rng = np.random.default_rng(1)
    assert len(search) == len(hashes)
    for h in probes(hashes, rng):
        position = search.position(h)
        assert position == int(hashes.searchsorted(np.uint64(h))), h
        if position < len(hashes):
            assert search.at(position) == int(hashes[position])


def test_a_million_random_hashes_are_found_where_they_are() -> None:
    rng = np.random.default_rng(2)
    search, hashes = searched(list(rng.integers(0, TOP, 1_000_000, np.uint64, endpoint=True)))
    for h in probes(hashes[::9_973], rng):
        assert search.position(h) == int(hashes.searchsorted(np.uint64(h)))
