"""The warm cache's policy: least recently used evicted first, within a budget of estimated bytes."""

from __future__ import annotations

import pytest

from statestore.services.warm_cache import CacheCounts, HeapRelease, WarmCache, release_freed_heap


class Sized:
    """A value whose estimated size the test sets (as a state grows when it is used)."""

    def __init__(self, size: int) -> None:
        self.size = size


def cache(budget: int, load_factor: float = 1.0) -> tuple[WarmCache[Sized], list[int]]:
    released: list[int] = []  # the bytes freed, each time the cache says

    def release(freed: int | None) -> None:
        assert freed is not None
        released.append(freed)

    return WarmCache(budget, lambda v: v.size, load_factor=load_factor, release=release), released


def fill(into: WarmCache[Sized], **sizes: int) -> None:
    for key, size in sizes.items():
        into[key] = Sized(size)
        into.settle()


def test_the_least_recently_used_table_is_evicted_first_and_a_lookup_makes_a_table_recent() -> None:
    c, released = cache(300)
    fill(c, a=100, b=100, c=100)
    assert c.lookup("a") is not None  # now b is the least recently used

    c["d"] = Sized(100)
    assert c.settle() == ["b"]

    assert list(c) == ["c", "a", "d"]
    assert c.used_bytes == 300
    assert c.counts == CacheCounts(hits=1, misses=0, evictions=1, oversized=0)
    assert released == [100]  # the evicted state's memory is given back


def test_sizes_are_measured_after_use_so_a_grown_table_evicts_others() -> None:
    c, _ = cache(300)
    fill(c, a=100, b=100, c=100)
    c["c"].size = 250  # it grew while it was used

    assert c.settle() == ["a", "b"]
    assert {k: v.size for k, v in c.items()} == {"c": 250}


def test_settling_after_one_tables_use_measures_that_table_alone() -> None:
    c, _ = cache(300)
    fill(c, a=100, b=100)
    c["a"].size, c["b"].size = 150, 250  # b's growth is not seen until b is used

    assert c.settle(["a"]) == []
    assert c.used_bytes == 250
    assert c.settle(["b"]) == ["a"]  # now measured: over the budget with a
    assert list(c) == ["b"]


def test_a_table_over_the_whole_budget_is_dropped_after_use_and_the_others_stay() -> None:
    c, released = cache(300)
    fill(c, a=100, b=100)
    c["huge"] = Sized(301)  # in use until settled: the caller holds it

    assert c.settle() == ["huge"]

    assert list(c) == ["a", "b"]
    assert c.counts.oversized == 1 and c.counts.evictions == 0
    assert released == [301]


def test_room_is_made_for_a_table_of_known_size_before_it_is_loaded_again() -> None:
    c, _ = cache(300)
    fill(c, big=200, a=50, b=50)
    c.settle()
    del c["big"]  # gone (as after an error); its size is remembered
    fill(c, d=100)

    assert c.known_size("big") == 200
    assert c.make_room("big") == ["a", "b"]  # 300 - 200 left for the others: d alone fits
    assert list(c) == ["d"]
    assert c.make_room("never-seen") == []


def test_a_table_known_to_be_over_the_budget_empties_the_cache_before_its_load() -> None:
    c, _ = cache(300)
    fill(c, huge=400)  # dropped after use, its size known
    fill(c, a=100, b=100)

    assert c.make_room("huge") == ["a", "b"]
    assert len(c) == 0


def test_with_a_load_factor_room_is_made_for_the_loads_peak_from_its_measured_or_expected_size() -> None:
    c, _ = cache(900, load_factor=3)
    fill(c, seen=100, a=100, b=100, c=100, d=100, e=100, f=100, g=100, h=100)
    del c["seen"]  # measured at 100: its load peaks at 300

    assert c.make_room("seen") == ["a", "b"]  # 900 - 300 = 600 left for the others
    assert c.make_room("counted", expected=50) == []  # 150 of peak fits beside the 600 kept
    assert c.make_room("counted", expected=250) == ["c", "d", "e", "f", "g"]  # 750 of peak: 150 left
    assert list(c) == ["h"]
    assert c.make_room("seen", expected=1) == []  # the larger of the size measured here and an expected one
    assert c.make_room("seen", expected=300) == ["h"]


def test_with_a_load_factor_a_table_of_unknown_size_gets_the_room_of_one_as_large_as_what_is_kept() -> None:
    c, _ = cache(900, load_factor=3)
    fill(c, a=100, b=100, c=100, d=100, e=100)

    assert c.make_room("never-seen") == ["a", "b"]  # down to 900 / 3
    assert list(c) == ["c", "d", "e"]
    assert c.make_room("its-size-known-here", expected=10) == []  # an expected size is used when given
    with pytest.raises(ValueError, match="load factor"):
        WarmCache(100, lambda v: 0, load_factor=0.5)


def test_a_state_that_outgrows_its_loads_room_has_room_made_again_an_eighth_ahead() -> None:
    c, _ = cache(900, load_factor=3)
    fill(c, a=100, b=100, c=100, d=100, e=100, f=100, g=100, h=100)
    assert c.make_room("loading", expected=30) == []  # its snapshot counts 30: 90 of peak fits beside 800

    assert c.grown("loading", 30, 10) == []  # 30 and 3 x 10 at the entry's peak: within the load's 90
    assert c.grown("loading", 40, 20) == ["a"]  # a peak of 100: room for 112 (100 and an eighth)
    assert c.grown("loading", 60, 10) == []  # 90: within 112
    assert c.grown("loading", 100, 100) == ["b", "c", "d"]  # a peak of 400: room for 450
    assert list(c) == ["e", "f", "g", "h"]


def test_a_kept_value_has_room_made_once_an_entry_takes_it_past_its_measured_size() -> None:
    c, _ = cache(300)
    fill(c, a=100, b=100, c=100)

    assert c.grown("c", 100, 0) == []  # as measured: the others fit beside it
    assert c.grown("c", 100, 50) == ["a"]  # a peak of 150: room for 168, 132 left for the others
    assert c.grown("never-seen", 0, 0) == []


class Demotable(Sized):
    """A value that can be made smaller once (as a table's state is dropped for its guard)."""

    def __init__(self, size: int, demoted: int) -> None:
        super().__init__(size)
        self.demoted = demoted

    def demote(self) -> bool:
        if self.size == self.demoted:
            return False
        self.size = self.demoted
        return True


def test_values_are_demoted_least_recent_first_the_newest_last_before_any_is_evicted() -> None:
    c = WarmCache(300, lambda v: v.size, demote=Demotable.demote, release=lambda _: None)
    for key in ("a", "b", "c"):
        c[key] = Demotable(100, 20)
        c.settle()
    c["d"] = Demotable(100, 20)  # the newest: 400 in all

    assert c.settle() == []
    assert {k: v.size for k, v in c.items()} == {"a": 20, "b": 20, "c": 100, "d": 100}
    assert c.counts.demotions == 2 and c.counts.evictions == 0

    c["e"] = Demotable(250, 20)  # 490: c and d demoted (330), then the oldest demoted ones evicted
    assert c.settle() == ["a", "b"]
    assert {k: v.size for k, v in c.items()} == {"c": 20, "d": 20, "e": 250}
    assert c.make_room("f", expected=280) == ["c", "d"]  # e demoted last, only once the others are gone
    assert {k: v.size for k, v in c.items()} == {"e": 20}


def test_making_room_tries_to_demote_a_value_once_until_it_is_used_again() -> None:
    tried: list[str] = []

    def demote(value: Demotable) -> bool:
        tried.append(next(k for k, v in c.items() if v is value))
        return value.demote()

    c: WarmCache[Demotable] = WarmCache(1000, lambda v: v.size, demote=demote, release=lambda _: None)
    for key in "abcdefghij":
        c[key] = Demotable(100, 10)
        c.settle()

    assert c.make_room("new", expected=500) == []  # 1,000 down to 500: the six oldest demoted
    assert tried == list("abcdef")
    assert c.make_room("other", expected=600) == []  # down to 400: the demoted ones are passed over
    assert tried == list("abcdefg")

    assert c.lookup("a") is not None
    c["a"].size = 100  # used: its state loaded again
    c.settle(["a"])
    c["newest"] = Demotable(10, 10)
    c.settle(["newest"])
    assert c.make_room("third", expected=850) == []  # 470 down to 150: a can be made smaller again
    assert tried == list("abcdefghija")


def test_a_zero_budget_keeps_nothing_and_a_negative_one_is_refused() -> None:
    c, _ = cache(0)
    fill(c, a=1)
    assert len(c) == 0 and c.counts.oversized == 1
    fill(c, unloaded=0)  # a value not loaded yet costs nothing
    assert list(c) == ["unloaded"]
    with pytest.raises(ValueError, match="must not be negative"):
        WarmCache(-1, lambda v: 0)


def test_as_a_mapping_each_read_settles_the_earlier_use_and_counts_hits_and_misses() -> None:
    c, _ = cache(150)
    assert c.get("a") is None
    c["a"] = Sized(100)
    assert c.get("a") is not None
    c["b"] = Sized(100)  # not measured yet: both are kept until the next read

    assert len(c) == 2
    assert c.get("b") is not None  # settling first evicts a
    assert list(c) == ["b"]
    assert c.counts == CacheCounts(hits=2, misses=1, evictions=1, oversized=0)
    assert c.pop("b").size == 100 and len(c) == 0  # forgetting is not an eviction
    assert c.counts.evictions == 1


def test_giving_freed_heap_back_never_fails() -> None:
    assert release_freed_heap() in (True, False)


def test_freed_heap_is_given_back_once_enough_was_freed_and_at_once_when_how_much_is_unknown() -> None:
    trims: list[int] = []
    release = HeapRelease(100, lambda: trims.append(1))

    release(40)
    release(59)
    assert trims == []  # 99 bytes freed: kept for the next load to reuse
    release(1)
    assert trims == [1]
    release(99)
    assert trims == [1]  # counted from the last trim
    release(None)
    assert trims == [1, 1]
    release(-5)  # nothing freed
    release(99)
    assert trims == [1, 1]
