"""The one clock assumption left (any two clocks within ``resources.MAX_CLOCK_SKEW_SECONDS``) and what cleanup
does with it: delays shorter than the skew are refused, and a data file is an orphan only once no commit
request naming it can still be in flight, however far ahead cleanup's clock is."""

from __future__ import annotations

import pytest

from statestore import instance as resources
from statestore.engine.requests import CommitRequest
from statestore.errors import StateStoreError
from statestore.model import layout
from statestore.services.cleanup import cleanup_table
from statestore.services.cleanup_policy import CleanupPolicy, policy_from_environment
from statestore.store.memory import InMemoryBlobStore
from statestore.store.tables import TableInfo
from statestore.transactions import AddFiles
from tests.builders import ref
from tests.committer.harness import FakeClock, Harness, message, outcomes

MINUTE_MS = 60_000
SKEW_MS = resources.MAX_CLOCK_SKEW_SECONDS * 1000


@pytest.mark.parametrize("setting", ["gc_delay_ms", "claim_expiry_ms"])
def test_a_delay_shorter_than_the_clock_skew_assumed_is_refused_naming_it(setting: str) -> None:
    with pytest.raises(ValueError, match=f"{setting} .* is shorter than the clock skew cleanup assumes"):
        CleanupPolicy(**{setting: SKEW_MS - 1})

    CleanupPolicy(**{setting: SKEW_MS})  # as long as the skew: fine
    CleanupPolicy(**{setting: 0, "max_clock_skew_ms": 0})  # every clock the same one: any delay


def test_the_skew_assumed_comes_from_the_environment_like_the_delays() -> None:
    policy = policy_from_environment(
        {"STATESTORE_MAX_CLOCK_SKEW_MINUTES": "0", "STATESTORE_GC_DELAY_MINUTES": "0"}
    )
    assert (policy.max_clock_skew_ms, policy.gc_delay_ms) == (0, 0)
    with pytest.raises(ValueError, match="shorter than the clock skew"):
        policy_from_environment({"STATESTORE_GC_DELAY_MINUTES": "1"})  # 1 minute against 10


def test_a_tables_own_gc_delay_shorter_than_the_skew_stops_its_cleanup_with_a_reason() -> None:
    h = Harness()
    table_id = h.create_table("t", properties={"gc_delay_minutes": "1"})

    with pytest.raises(StateStoreError, match="'t''s gc_delay_minutes .* shorter than the clock skew"):
        cleanup_table(h.store(table_id), h.tables.get(table_id), h.snapshots, h.blobs, now=h.clock.now)


def test_a_file_whose_add_files_is_still_queued_survives_a_cleanup_whose_clock_is_far_ahead() -> None:
    # The job writes its file and queues its AddFiles; the committer is paused (or the message waits in the
    # dead-letter queue for a redrive) while a cleanup whose clock runs ahead sweeps the table.
    clock = FakeClock(step=0)
    blobs = InMemoryBlobStore(clock)
    h = Harness(blobs=blobs, clock=clock)
    table_id = h.create_table("t")
    name = f"{layout.data_prefix(table_id)}root/late.parquet"
    blobs.put(name, b"rows")
    request = CommitRequest.new(table_id, AddFiles((ref(name),)))
    policy = CleanupPolicy(gc_delay_ms=30 * MINUTE_MS)
    info: TableInfo = h.tables.get(table_id)

    for days_later in (1, 10, resources.REQUEST_MAX_LIFETIME_SECONDS // 86_400):
        ahead = days_later * 86_400_000 + SKEW_MS - 1  # the message can still be in flight
        report = cleanup_table(
            h.store(table_id), info, h.snapshots, blobs, policy=policy, now=clock.now + ahead
        )
        assert report.orphan_files_deleted == 0 and blobs.list(name) == [name]

    clock.advance(resources.REQUEST_MAX_LIFETIME_SECONDS * 1000)
    assert outcomes(h.committer().process([message(request)])) == ["committed"]
    assert blobs.list(name) == [name]  # the reference it committed names a file that is there


def test_a_file_nothing_names_once_no_request_can_name_it_any_more_is_swept() -> None:
    clock = FakeClock(step=0)
    blobs = InMemoryBlobStore(clock)
    h = Harness(blobs=blobs, clock=clock)
    table_id = h.create_table("t")
    name = f"{layout.data_prefix(table_id)}root/orphan.parquet"
    blobs.put(name, b"rows")
    policy = CleanupPolicy()
    orphan_delay = policy.orphan_delay_ms(policy.gc_delay_ms)
    assert orphan_delay == (resources.REQUEST_MAX_LIFETIME_SECONDS + resources.MAX_CLOCK_SKEW_SECONDS) * 1000

    report = cleanup_table(
        h.store(table_id),
        h.tables.get(table_id),
        h.snapshots,
        blobs,
        policy=policy,
        now=clock.now + orphan_delay + 1,
    )

    assert report.orphan_files_deleted == 1 and blobs.list(name) == []
