"""One-line summaries of transactions, as `statestore log` shows them."""

from __future__ import annotations

from statestore.cli.output import summarize
from statestore.model.partitions import root_partition
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    BatchItem,
    ClearTable,
    ExtendPartitionTree,
    ReleaseClaims,
    TransactionBatch,
)
from tests.builders import STRING_SCHEMA, ref


def test_claims_taken_over_and_released_are_summarised() -> None:
    plain = AssignJobIds((AssignJobIdRequest("j1", "p", ("a", "b")),))
    take_over = AssignJobIds((AssignJobIdRequest("j2", "p", ("c",)),), take_over_claimed_before=0)
    released = ReleaseClaims(("j1", "j2"), claimed_before=5)

    assert summarize(plain) == "assigned 2 files to 1 job"
    assert summarize(take_over) == "assigned 1 file to 1 job (taking over expired claims)"
    assert summarize(released) == "released the claims of 2 jobs"
    batch = TransactionBatch((BatchItem("r1", released), BatchItem("r2", ReleaseClaims(("j3",)))))
    assert summarize(batch) == "2 requests: released the claims of 3 jobs"


def test_new_partition_and_file_transactions_are_summarised() -> None:
    root, low, high = root_partition(STRING_SCHEMA).split(0, "m", "L", "H")
    low_split, low_low, low_high = low.split(0, "f", "LL", "LH")

    assert summarize(AddFiles((ref("a", "L"), ref("a", "H")), ("b",))) == (
        "added 2 files (2 references, 1 with none, 200 rows)"
    )
    assert summarize(AddFiles((ref("a", "L"),))) == "added 1 file (1 reference, 100 rows)"
    assert summarize(ExtendPartitionTree((root,), (low_split, high, low_low, low_high))) == (
        "extended the tree below 1 leaf (4 new partitions)"
    )
    assert summarize(ClearTable()) == "cleared every file and partition"
