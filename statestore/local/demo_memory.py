"""An in-memory walk-through of a table's life: every transaction type, a snapshot, time travel.

Runs with the core alone (no AWS, no Spark): ``python -m statestore.local.demo_memory``.
"""

from __future__ import annotations

import time
import uuid

from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.snapshots import SnapshotStore
from statestore.model.clock import now_millis
from statestore.model.files import FileReference
from statestore.model.partition_tree import partitions_from_split_points
from statestore.model.schema import Schema
from statestore.store.memory import InMemoryBlobStore, InMemorySnapshotMetadataStore, InMemoryTransactionLog
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    DeleteFiles,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    SplitFileReferenceRequest,
    SplitFileReferences,
    SplitPartition,
)


def run(files_per_partition: int = 200) -> None:
    started = time.perf_counter()
    schema = Schema.of({"key": "long"}, sort_keys={"ts": "long"}, values={"value": "string"})
    log = InMemoryTransactionLog()
    snapshots = SnapshotStore(InMemorySnapshotMetadataStore(), InMemoryBlobStore())
    store = TransactionLogStateStore("demo-table", schema, log, snapshots)

    def step(what: str) -> None:
        state = store.state()
        refs = sum(1 for _ in state.file_references())
        print(
            f"  [{state.transaction_number:>3}] {what:<58} partitions={len(state.partitions_by_id):>3} "
            f"files={len(state.files_by_name):>5} references={refs:>5}"
        )

    print("statestore in-memory walk-through")
    store.commit(InitialisePartitions(tuple(partitions_from_split_points(schema, [0, 1_000, 1_000_000]))))
    step("initialise partitions from split points 0, 1000, 1000000")

    leaves = store.state().leaf_partitions()
    references = tuple(
        FileReference(f"tables/demo-table/data/{leaf.id}/{uuid.uuid4()}.parquet", leaf.id, 1_000 + i)
        for leaf in leaves
        for i in range(files_per_partition)
    )
    result = store.commit(AddFiles(references))
    step(f"add {len(references)} files (one transaction)")

    info = store.create_snapshot()
    assert info is not None
    step(f"snapshot written at transaction {info.transaction_number}")
    print(f"        a second snapshot with no new transactions is skipped: {store.create_snapshot() is None}")

    target = leaves[0]
    inputs = tuple(r.filename for r in store.state().references_in_partition(target.id))[:10]
    store.commit(AssignJobIds((AssignJobIdRequest("job-1", target.id, inputs),)))
    step(f"assign {len(inputs)} files of partition {target.id[:8]} to compaction job-1")

    output = FileReference(f"tables/demo-table/data/{target.id}/{uuid.uuid4()}.parquet", target.id, 10_045)
    bogus = ReplaceFileReferencesJob(
        "job-2", target.id, (inputs[0],), output._replace(filename="other.parquet")
    )
    replaced = store.commit(
        ReplaceFileReferences((ReplaceFileReferencesJob("job-1", target.id, inputs, output), bogus))
    )
    step("commit compaction job-1 (job-2 is invalid and skipped)")
    for job_id, reason in replaced.rejected_parts:
        print(f"        rejected {job_id}: {reason}")

    parent, left, right = (
        store.state().partition(target.id).split(0, -500, str(uuid.uuid4()), str(uuid.uuid4()))
    )
    store.commit(SplitPartition(parent, (left, right)))
    step(f"split partition {target.id[:8]} at key -500")

    pushed = store.state().references_in_partition(target.id)
    store.commit(
        SplitFileReferences(
            tuple(
                SplitFileReferenceRequest(
                    ref.filename,
                    target.id,
                    (
                        FileReference(ref.filename, left.id, ref.number_of_rows // 2, True, False),
                        FileReference(ref.filename, right.id, ref.number_of_rows // 2, True, False),
                    ),
                )
                for ref in pushed
            )
        )
    )
    step(f"push {len(pushed)} references down to the two new leaves")

    garbage = store.state().files_ready_for_gc(before=now_millis() + 1)
    store.commit(DeleteFiles(tuple(garbage)))
    step(f"garbage-collect {len(garbage)} compacted input files")

    past = store.load(as_of=result.transaction_number)
    print(
        f"  time travel: as of transaction {result.transaction_number} "
        f"the table had {len(past.files_by_name)} files"
    )
    replayed = TransactionLogStateStore("demo-table", schema, log).load()
    print(f"  a full replay of the log equals the live state: {replayed == store.state()}")
    print(f"done in {time.perf_counter() - started:.2f}s")


if __name__ == "__main__":
    run()
