"""The job-status model: what the log says became of each compaction job and each committed request."""

from __future__ import annotations

import json

import pytest

from statestore.errors import CodecError, JobNotFoundError
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearFiles,
    ClearTable,
    InitialisePartitions,
    ReleaseClaims,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    Transaction,
    TransactionBatch,
)
from statestore.views.jobs_model import (
    JobsModel,
    JobState,
    fold,
    model_from_json,
    model_to_json,
    seeded_from,
)
from tests.builders import STRING_SCHEMA, ref, tree


class History:
    """A table state and its job model, folded together one validated transaction at a time."""

    def __init__(self) -> None:
        self.state = TableState(STRING_SCHEMA)
        self.model = JobsModel()
        self.commit(InitialisePartitions(tuple(tree(STRING_SCHEMA))), at=1_000)
        self.commit(AddFiles((ref("a", rows=10), ref("b", rows=20), ref("c", rows=30))), at=1_000)

    def commit(self, transaction: Transaction, at: int) -> int:
        transaction.validate(self.state)
        number = self.state.transaction_number + 1
        fold(self.model, self.state, number, at, transaction)
        return number


def claim(job_id: str, *files: str, take_over_before: int | None = None) -> AssignJobIds:
    return AssignJobIds((AssignJobIdRequest(job_id, "root", files),), take_over_before)


def replace(job_id: str, inputs: tuple[str, ...], output: str, rows: int = 5) -> ReplaceFileReferencesJob:
    return ReplaceFileReferencesJob(job_id, "root", inputs, ref(output, rows=rows))


def test_a_claim_records_its_transaction_time_partition_and_input_files() -> None:
    h = History()
    number = h.commit(claim("job-1", "a", "b"), at=2_000)

    (run,) = h.model.job("job-1")
    assert (run.state, run.claim_transaction, run.claim_time) == (JobState.CLAIMED, number, 2_000)
    assert (run.partition_id, run.input_files) == ("root", ("a", "b"))


def test_a_committed_job_records_its_output_file_and_rows() -> None:
    h = History()
    h.commit(claim("job-1", "a", "b"), at=2_000)
    number = h.commit(ReplaceFileReferences((replace("job-1", ("a", "b"), "out", rows=29),)), at=3_000)

    (run,) = h.model.job("job-1")
    assert (run.state, run.output_file, run.output_rows) == (JobState.COMMITTED, "out", 29)
    assert (run.last_event.transaction_number, run.last_event.time) == (number, 3_000)


def test_a_skipped_job_of_a_replace_is_rejected_with_the_reason_and_the_others_commit() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(claim("job-2", "b"), at=2_000)
    h.commit(
        ReplaceFileReferences((replace("job-1", ("a",), "out-1"), replace("job-2", ("c",), "out-2"))),
        at=3_000,
    )

    assert h.model.job("job-1")[-1].state is JobState.COMMITTED
    rejected = h.model.job("job-2")[-1]
    assert rejected.state is JobState.REJECTED and rejected.output_file is None
    assert "'c'" in rejected.last_event.detail and "job-2" in rejected.last_event.detail


def test_a_release_without_a_time_marks_the_job_released_and_a_release_of_nothing_changes_nothing() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(ReleaseClaims(("job-1", "never-claimed")), at=3_000)

    assert h.model.job("job-1")[-1].state is JobState.RELEASED
    with pytest.raises(JobNotFoundError, match="never-claimed"):
        h.model.job("never-claimed")


def test_the_cleanup_sweep_expires_only_claims_made_before_its_time() -> None:
    h = History()
    h.commit(claim("old", "a"), at=2_000)
    h.commit(claim("new", "b"), at=5_000)
    h.commit(ReleaseClaims(("old", "new"), claimed_before=4_000), at=6_000)

    assert h.model.job("old")[-1].state is JobState.EXPIRED
    assert h.model.job("new")[-1].state is JobState.CLAIMED


def test_a_take_over_marks_the_old_job_taken_over_by_the_new_one() -> None:
    h = History()
    h.commit(claim("dead", "a", "b"), at=2_000)
    h.commit(claim("resumed", "a", "b", "c", take_over_before=3_000), at=4_000)

    dead = h.model.job("dead")[-1]
    assert dead.state is JobState.TAKEN_OVER and "'resumed'" in dead.last_event.detail
    assert h.model.job("resumed")[-1].input_files == ("a", "b", "c")


def test_a_late_commit_of_a_taken_over_job_keeps_its_state_and_records_the_rejection() -> None:
    h = History()
    h.commit(claim("dead", "a"), at=2_000)
    h.commit(claim("resumed", "a", take_over_before=3_000), at=4_000)
    h.commit(claim("other", "b"), at=4_000)
    # The batch holds one valid job, so the entry is written and the dead job's part skipped.
    h.commit(
        ReplaceFileReferences((replace("dead", ("a",), "late"), replace("other", ("b",), "out"))), at=5_000
    )

    dead = h.model.job("dead")[-1]
    assert dead.state is JobState.TAKEN_OVER
    assert dead.last_event.kind is JobState.REJECTED and "commit rejected" in dead.last_event.detail


def test_a_job_id_claimed_again_after_its_run_ended_starts_a_new_run() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(ReleaseClaims(("job-1",)), at=3_000)
    h.commit(claim("job-1", "a", "b"), at=4_000)

    first, second = h.model.job("job-1")
    assert (first.state, second.state) == (JobState.RELEASED, JobState.CLAIMED)
    assert second.claim_time == 4_000 and second.input_files == ("a", "b")


def test_clearing_the_files_ends_the_claims_held() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(ClearFiles(), at=3_000)

    assert h.model.job("job-1")[-1].state is JobState.CLEARED


def test_clearing_the_table_ends_the_claims_held() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(ClearTable(), at=3_000)

    assert h.model.job("job-1")[-1].state is JobState.CLEARED


def test_a_request_adding_files_with_no_references_records_them() -> None:
    h = History()
    add = AddFiles((ref("d", rows=7),), unreferenced_files=("w",))
    number = h.commit(TransactionBatch((BatchItem("req", add),)), at=2_000)

    added = h.model.requests["req"]
    assert (added.transaction_number, added.files_added, added.rows_added) == (number, ("d", "w"), 7)


def test_each_request_of_a_group_commit_records_its_transaction_and_what_it_added() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    batch = TransactionBatch(
        (
            BatchItem("req-add", AddFiles((ref("d", rows=7), ref("e", rows=8)))),
            BatchItem("req-compact", ReplaceFileReferences((replace("job-1", ("a",), "out", rows=10),))),
        )
    )
    number = h.commit(batch, at=3_000)

    added = h.model.requests["req-add"]
    assert (added.transaction_number, added.time, added.transaction_type) == (number, 3_000, "AddFiles")
    assert (added.files_added, added.rows_added) == (("d", "e"), 15)
    compacted = h.model.requests["req-compact"]
    assert (compacted.files_added, compacted.rows_added, compacted.job_ids) == (("out",), 10, ("job-1",))


def test_the_requests_of_a_batch_are_folded_against_the_state_the_requests_before_them_left() -> None:
    h = History()
    batch = TransactionBatch(
        (
            BatchItem("req-add", AddFiles((ref("d"),))),
            BatchItem("req-claim", claim("job-1", "d")),
        )
    )
    h.commit(batch, at=3_000)

    assert h.model.job("job-1")[-1].input_files == ("d",)


def test_transactions_that_do_not_concern_jobs_only_move_the_position() -> None:
    h = History()
    before = h.model.copy()
    h.commit(AddFiles((ref("d"),)), at=3_000)

    assert h.model.transaction_number == before.transaction_number + 1
    assert (h.model.runs, h.model.requests) == (before.runs, before.requests)


def test_folding_an_entry_out_of_order_is_refused() -> None:
    h = History()
    with pytest.raises(ValueError, match="cannot fold entry 5 into a model at 2"):
        fold(h.model, h.state, 5, 1, claim("job-1", "a"))


def test_find_runs_filters_by_state_job_and_time() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(claim("job-2", "b"), at=5_000)
    h.commit(ReleaseClaims(("job-1",)), at=6_000)

    assert [r.job_id for r in h.model.find_runs(states=[JobState.CLAIMED])] == ["job-2"]
    assert [r.job_id for r in h.model.find_runs(job_id="job-1")] == ["job-1"]
    assert [r.job_id for r in h.model.find_runs(since=4_000, until=5_500)] == ["job-2"]
    assert [r.job_id for r in h.model.find_runs(since=5_500)] == ["job-1"]
    assert h.model.find_runs(job_id="nobody") == []


def test_a_model_seeded_from_a_state_knows_the_claims_it_holds_and_where_its_history_starts() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)

    seeded = seeded_from(h.state)
    (run,) = seeded.job("job-1")
    assert (run.state, run.claim_time, run.claim_transaction) == (JobState.CLAIMED, 2_000, None)
    assert seeded.history_from == h.state.transaction_number + 1
    with pytest.raises(JobNotFoundError, match="since transaction 4"):
        seeded.job("older")


def test_the_model_survives_its_json_form() -> None:
    h = History()
    h.commit(claim("job-1", "a"), at=2_000)
    h.commit(
        TransactionBatch((BatchItem("r", ReplaceFileReferences((replace("job-1", ("a",), "o"),))),)), at=3
    )

    assert model_from_json(json.loads(json.dumps(model_to_json(h.model)))) == h.model


def test_a_malformed_saved_model_is_a_codec_error_naming_the_problem() -> None:
    with pytest.raises(CodecError, match="format"):
        model_from_json({"format": 99})
    with pytest.raises(CodecError, match="malformed.*runs"):
        model_from_json({"format": 1, "transaction_number": 1, "history_from": 1})
