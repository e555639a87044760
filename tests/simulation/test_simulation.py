"""The commit path under faults, in the deterministic simulation (``tests/simulation/world.py``).

A failing seed names the invariant it broke and prints the command that replays it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pytest

from statestore.engine.log_store import TransactionLogStateStore
from statestore.errors import RequestsAlreadyDecidedError, TransactionNumberTakenError
from statestore.model import layout
from statestore.services import cleanup
from statestore.services.client import StateStoreClient
from statestore.services.leftovers import write_tombstone
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.ports import CommitStatus, LogEntry
from statestore.store.tables import TableInfo
from tests.simulation.world import MAX_CLOCK_SKEW_MS, InvariantViolation, run_seed

SEEDS = range(200)  # `make soak` runs many more, and longer
STEPS = 50


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    # The committer and the scheduled jobs log every injected failure; thousands of lines say nothing here.
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_invariant_holds_under_lost_responses_crashes_throttling_redelivery_clock_skew_and_damage(
    seed: int,
) -> None:
    world = run_seed(seed, STEPS)

    assert world.violations == []


def test_the_simulation_exercises_every_kind_of_fault_and_commits_through_every_path() -> None:
    worlds = [run_seed(seed, STEPS) for seed in range(15)]

    faults = {kind for w in worlds for kind in w.faults.injected}
    kinds = {"crash-after", "crash-before", "damaged-snapshot", "lost-response", "preempt", "throttle"}
    assert faults == kinds
    assert sum(w.summary()["entries"] for w in worlds) > 15 * STEPS // 4
    assert any(w.queue.redriven or w.dead_letters.letters for w in worlds)
    assert sum(w.summary()["guarded_commits"] for w in worlds) > 0  # appended from an evicted table's guard
    assert sum(w.summary()["cold_guarded_commits"] for w in worlds) > 0  # from a guard read from a snapshot
    assert sum(w.summary()["deleted_tables"] for w in worlds) > 0


def test_the_simulation_sweeps_what_late_writers_left_of_deleted_tables() -> None:
    # Producers send late to deleted tables: their data files and request bodies land under the prefixes.
    worlds = [run_seed(seed, 250) for seed in range(5)]

    assert sum(w.summary()["leftover_objects_deleted"] for w in worlds) > 0


def test_a_seed_replays_exactly() -> None:
    first, second = run_seed(11, 120), run_seed(11, 120)

    assert first.summary() == second.summary()
    for a, b in zip(first.table_ids, second.table_ids, strict=True):
        assert list(first.raw_log.read(a, 0)) == list(second.raw_log.read(b, 0))


def test_every_entry_is_stamped_by_a_simulated_clock() -> None:
    """No writer stamps an entry with the machine's clock: the world's clocks run in 2023, skewed at most
    MAX_CLOCK_SKEW_MS (a client creating a table mid-run did stamp its first entry with the real time)."""
    world = run_seed(1, 120)

    assert world.summary()["deleted_tables"] > 0
    latest = world.now + MAX_CLOCK_SKEW_MS
    assert all(e.update_time <= latest for t in world.table_ids for e in world.raw_log.read(t, 0))


def violations_in_seeds(seeds: int, steps: int = 150) -> list[str]:
    """What each of the first ``seeds`` seeds stopped at, under the defect a test put in: how a test shows
    the simulation notices it."""
    caught = []
    for seed in range(seeds):
        try:
            run_seed(seed, steps)
        except InvariantViolation as e:
            caught.append(str(e))
    return caught


def test_the_simulation_catches_a_writer_that_does_not_recognise_its_own_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The engine before writer tokens: a put whose response was lost looks like a lost race.
    monkeypatch.setattr(TransactionLogStateStore, "_writer_at", lambda self, number: "another writer")

    caught = violations_in_seeds(40)
    assert caught, "the harness did not notice commits that landed being reported as failed"
    assert "replay: python -m tests.simulation --seed" in caught[0]


def test_the_simulation_catches_a_cleanup_that_leaves_expired_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    # Cleanup before claims could be released: a job that died after claiming held its files for ever.
    monkeypatch.setattr(cleanup, "release_expired_claims", lambda store, before: ((), 0))

    caught = violations_in_seeds(20)
    assert caught, "the harness did not notice claims outliving their job"
    assert "outlives the expiry" in caught[0]


def test_the_simulation_catches_log_times_running_backwards(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine before log times were kept monotonic: each entry stamped with its writer's clock.
    monkeypatch.setattr(TransactionLogStateStore, "_last_update_time", lambda self, state: 0)

    caught = violations_in_seeds(20)
    assert caught, "the harness did not notice an entry stamped before the one it follows"
    assert "is before the previous entry's" in caught[0]


def test_the_simulation_catches_a_committer_that_forgets_statuses_with_the_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The committer before a committed request's status was written with its entry: the statuses came
    # in a write of their own, which a crash or a lost response could lose; a resend was then applied again.
    real_append = InMemoryTransactionLog.append

    def append_without_outcomes(
        self: InMemoryTransactionLog, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()
    ) -> None:
        real_append(self, table_id, entry)

    monkeypatch.setattr(InMemoryTransactionLog, "append", append_without_outcomes)

    caught = violations_in_seeds(40)
    assert caught, "the harness did not notice a request applied twice or reported wrongly"


def test_the_simulation_catches_an_append_to_a_table_whose_log_was_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A log whose appends did not rest on the entry before them: a committer or writer holding a deleted
    # table's state appended its next entry after the delete, and the table's log began again from it.
    def append_anywhere(
        self: InMemoryTransactionLog, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()
    ) -> None:
        with self._lock:
            entries = self._entries.setdefault(table_id, {})
            if entry.transaction_number in entries:
                raise TransactionNumberTakenError(table_id, entry.transaction_number)
            with self._statuses._lock:
                decided = self._statuses._final_among(outcomes)
                if decided:
                    raise RequestsAlreadyDecidedError(table_id, decided)
                self._add(table_id, entries, entry)
                self._statuses._put_all(outcomes)

    monkeypatch.setattr(InMemoryTransactionLog, "append", append_anywhere)

    caught = violations_in_seeds(40)
    assert caught, "the harness did not notice an entry appended to a deleted table"
    assert "was appended after its log was deleted" in caught[0]


def test_the_simulation_catches_a_read_that_answers_for_a_table_being_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The client before a delete marked its table first: a read while the delete ran answered with what the
    # partly deleted log and snapshots held (an empty table, or the table as of its latest snapshot).
    monkeypatch.setattr(TableInfo, "live", lambda self: self)

    caught = violations_in_seeds(20)
    assert caught, "the harness did not notice a read of a table being deleted"
    assert "after its delete began answered" in caught[0]


def test_the_simulation_catches_leftovers_swept_before_the_delete_finished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A delete that wrote its tombstone and removed the record first: cleanup took the table, whose delete
    # a fault interrupted, for a deleted one, and swept its objects while the delete was yet to finish.
    def delete_table(self: StateStoreClient, table: str) -> None:
        info = self.table_index.mark_deleting(self.table_record(table).table_id)
        write_tombstone(self.blobs, info, 0)
        self.table_index.delete(info.table_id)
        self.log.delete_table(info.table_id)
        self.snapshots.delete_table(info.table_id)
        self.blobs.delete(self.blobs.list(layout.table_prefix(info.table_id)))

    monkeypatch.setattr(StateStoreClient, "delete_table", delete_table)

    caught = violations_in_seeds(40)
    assert caught, "the harness did not notice leftovers swept before their table's delete finished"
    assert "its objects are swept as a deleted table's" in caught[0]
