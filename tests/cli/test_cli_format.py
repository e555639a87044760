"""One-line summaries of the claim transactions, as `statestore log` shows them."""

from __future__ import annotations

from statestore.cli_format import summarize
from statestore.transactions import (
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ReleaseClaims,
    TransactionBatch,
)


def test_claims_taken_over_and_released_are_summarised() -> None:
    plain = AssignJobIds((AssignJobIdRequest("j1", "p", ("a", "b")),))
    take_over = AssignJobIds((AssignJobIdRequest("j2", "p", ("c",)),), take_over_claimed_before=0)
    released = ReleaseClaims(("j1", "j2"), claimed_before=5)

    assert summarize(plain) == "assigned 2 files to 1 job"
    assert summarize(take_over) == "assigned 1 file to 1 job (taking over expired claims)"
    assert summarize(released) == "released the claims of 2 jobs"
    batch = TransactionBatch((BatchItem("r1", released), BatchItem("r2", ReleaseClaims(("j3",)))))
    assert summarize(batch) == "2 requests: released the claims of 3 jobs"
