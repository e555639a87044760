"""Claims do not stick: cleanup sweeps claims older than the instance's limit and keeps younger ones, a swept
job can no longer commit, and a release goes through the committer like any other request. Also the
instance's garbage collection delay, which a table's own property overrides."""

from __future__ import annotations

import pytest

from statestore.codec.transaction_json import decode_entry
from statestore.engine.requests import CommitRequest
from statestore.model import layout
from statestore.services.cleanup import CleanupReport, cleanup_table
from statestore.services.cleanup_policy import GC_DELAY_PROPERTY, MAX_DELAY_MS, CleanupPolicy
from statestore.store.ports import CommitOutcome
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from tests.builders import ref
from tests.committer.harness import Harness, message, outcomes

MINUTE = 60_000
HOUR = 60 * MINUTE
POLICY = CleanupPolicy(claim_expiry_ms=HOUR, max_clock_skew_ms=0)  # one fake clock: no skew


def table_with_files(
    h: Harness, count: int, properties: dict[str, str] | None = None
) -> tuple[str, list[str]]:
    table_id = h.create_table("t", properties=properties)
    names = [f"{layout.data_prefix(table_id)}{i}.parquet" for i in range(count)]
    for name in names:
        h.blobs.put(name, b"rows")
    h.store(table_id).commit(AddFiles(tuple(ref(n) for n in names)))
    return table_id, names


def claim(h: Harness, table_id: str, job_id: str, *names: str) -> None:
    h.store(table_id).commit(AssignJobIds((AssignJobIdRequest(job_id, "root", names),)))


def cleanup(h: Harness, table_id: str, policy: CleanupPolicy = POLICY) -> CleanupReport:
    return cleanup_table(
        h.store(table_id), h.tables.get(table_id), h.snapshots, h.blobs, policy=policy, now=h.clock()
    )


def owners(h: Harness, table_id: str) -> dict[str, str | None]:
    return {r.filename: r.job_id for r in h.state(table_id).file_references()}


def test_a_claim_older_than_the_limit_is_swept_and_a_younger_one_is_kept() -> None:
    h = Harness()
    table_id, (a, b, c) = table_with_files(h, 3)
    claim(h, table_id, "dead", a, b)
    h.clock.advance(HOUR)
    claim(h, table_id, "running", c)

    report = cleanup(h, table_id)

    assert (report.released_jobs, report.claims_released) == (("dead",), 2)
    assert owners(h, table_id) == {a: None, b: None, c: "running"}
    # The sweep's transaction names the time it decided on, so replaying it frees exactly those claims.
    (last,) = list(h.log.read(table_id, h.log_length(table_id)))
    sweep = decode_entry(last)
    assert isinstance(sweep, ReleaseClaims) and sweep.job_ids == ("dead",)
    assert sweep.claimed_before is not None and sweep.claimed_before < last.update_time
    # A later compaction can claim the freed files; a second sweep finds nothing more to do.
    claim(h, table_id, "next", a, b)
    assert cleanup(h, table_id).released_jobs == ()
    assert owners(h, table_id) == {a: "next", b: "next", c: "running"}


def test_a_claim_exactly_at_the_limit_is_kept_until_it_is_older() -> None:
    h = Harness()
    table_id, (a,) = table_with_files(h, 1)
    claim(h, table_id, "job", a)
    (claimed,) = h.state(table_id).file_references()
    claimed_at = claimed.last_update_time
    h.clock.step = 0
    h.clock.now = claimed_at + HOUR

    assert cleanup(h, table_id).released_jobs == ()
    h.clock.advance(1)
    assert cleanup(h, table_id).released_jobs == ("job",)


def test_a_swept_job_that_commits_after_all_is_rejected_and_every_row_stays_referenced() -> None:
    h = Harness()
    table_id, names = table_with_files(h, 2)
    claim(h, table_id, "slow", *names)
    h.clock.advance(2 * HOUR)
    cleanup(h, table_id)
    output = f"{layout.data_prefix(table_id)}out.parquet"
    h.blobs.put(output, b"rows")
    late = CommitRequest.new(
        table_id,
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("slow", "root", tuple(names), ref(output, rows=200)),)
        ),
    )

    results = h.committer().process([message(late)])

    assert outcomes(results) == ["rejected"]
    status = h.statuses.get(late.table_id, late.request_id)
    assert status is not None and "is not assigned to job 'slow'" in (status.reason or "")
    state = h.state(table_id)
    assert sorted(r.filename for r in state.file_references()) == sorted(names)
    assert output not in state.files_by_name


def test_a_release_goes_through_the_committer_and_releasing_again_is_committed_as_a_no_op() -> None:
    h = Harness()
    table_id, names = table_with_files(h, 2)
    claim(h, table_id, "failed", *names)
    first = CommitRequest.new(table_id, ReleaseClaims(("failed",)))
    again = CommitRequest.new(table_id, ReleaseClaims(("failed",)))  # e.g. the sweep, after the job's own

    results = h.committer().process([message(first), message(again)])

    assert outcomes(results) == ["committed", "committed"]
    for request in (first, again):
        status = h.statuses.get(request.table_id, request.request_id)
        assert status is not None and status.outcome is CommitOutcome.COMMITTED
    assert owners(h, table_id) == dict.fromkeys(names)


# --- the garbage collection delay -------------------------------------------------------------------------


def compacted_away(h: Harness, table_id: str, names: list[str]) -> str:
    """Replace ``names`` by one output; returns the output. The inputs now have no references."""
    output = f"{layout.data_prefix(table_id)}out.parquet"
    h.blobs.put(output, b"rows")
    claim(h, table_id, "j", *names)
    job = ReplaceFileReferencesJob("j", "root", tuple(names), ref(output))
    h.store(table_id).commit(ReplaceFileReferences((job,)))
    return output


def test_unreferenced_files_wait_out_the_instances_delay_by_default_for_hours() -> None:
    h = Harness()
    table_id, names = table_with_files(h, 2)
    compacted_away(h, table_id, names)
    default = CleanupPolicy()

    h.clock.advance(default.gc_delay_ms - MINUTE)
    kept = cleanup(h, table_id, default)
    h.clock.advance(2 * MINUTE)
    collected = cleanup(h, table_id, default)

    assert default.gc_delay_ms >= 6 * HOUR  # longer than a long query, not minutes
    assert kept.data_files_deleted == 0
    assert collected.data_files_deleted == 2
    assert not set(names) & set(h.state(table_id).files_by_name)


def test_a_tables_own_delay_overrides_the_instances() -> None:
    h = Harness()
    own, own_names = table_with_files(h, 1, {GC_DELAY_PROPERTY: "5"})
    compacted_away(h, own, own_names)
    policy = CleanupPolicy(gc_delay_ms=HOUR, max_clock_skew_ms=0)  # one fake clock: a 5-minute delay holds

    h.clock.advance(6 * MINUTE)

    assert cleanup(h, own, policy).data_files_deleted == 1


@pytest.mark.parametrize(
    ("setting", "value"),
    [("gc_delay_ms", -1), ("gc_delay_ms", MAX_DELAY_MS + 1), ("claim_expiry_ms", -MINUTE)],
    ids=["negative-delay", "delay-beyond-30-days", "negative-expiry"],
)
def test_a_delay_or_expiry_out_of_range_is_refused_naming_it(setting: str, value: int) -> None:
    with pytest.raises(
        ValueError, match=f"{setting} must be from 0 to {MAX_DELAY_MS} .30 days., got {value}"
    ):
        CleanupPolicy(**{setting: value})
