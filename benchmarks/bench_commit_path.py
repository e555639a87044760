"""CPU per transaction on the commit path: validate + apply of one small transaction on a loaded state.

What the committer pays per request before any I/O, on a table of 1,000,000 references over 100,000 leaves
(``bench_model.big_state``, written to a snapshot and loaded back, as a committer gets it) and, for the
ratio, on a table of 10,000 references over 1,000 leaves. Each transaction runs as the engine runs a group
member: under an undo mark, validated, applied and kept. Kinds: AddFiles of one new file, AssignJobIds of
one file, ReplaceFileReferences of a claimed file by a new one (a compaction's commit), DeleteFiles of one
file, SplitPartition of a leaf. Figures are CPU microseconds of this process (steadier than wall clock on a
shared machine) and the big table over the small one.

    python benchmarks/bench_commit_path.py [--transactions 2000] [--references 1000000]
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence

from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.model.files import FileReference
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIds,
    DeleteFiles,
    ReplaceFileReferences,
    SplitPartition,
    Transaction,
)
from statestore.transactions.file_changes import AssignJobIdRequest, ReplaceFileReferencesJob

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_model import SCHEMA, big_state, data_filename  # noqa: E402
from results import Figure, record  # noqa: E402

KINDS = ("AddFiles", "AssignJobIds", "Replace", "DeleteFiles", "SplitPartition")


def loaded_state(references: int, leaves: int) -> TableState:
    written = big_state(5, leaves, references)
    snapshot = state_to_parquet(written)
    del written
    gc.collect()
    return state_from_parquet(SCHEMA, *snapshot, 1)


def transactions(state: TableState, count: int, seed: int) -> dict[str, Callable[[], list[Transaction]]]:
    """Each kind's transactions, made when asked (the files they name are picked from the state first)."""
    rng = random.Random(seed)
    leaves = [p for p in state.partitions() if p.leaf]
    single = [f for f in state.files() if len(f.references) == 1 and f.references[0].job_id is None]
    picked = rng.sample(single, min(count, len(single)))
    del single

    def add_files() -> list[Transaction]:
        out: list[Transaction] = []
        for leaf in rng.choices(leaves, k=count):
            out.append(AddFiles((FileReference(data_filename(rng, "t", leaf.id), leaf.id, 100),)))
        return out

    def assign() -> list[Transaction]:
        return [
            AssignJobIds((AssignJobIdRequest(f"job-{i}", f.references[0].partition_id, (f.filename,)),))
            for i, f in enumerate(picked)
        ]

    def replace() -> list[Transaction]:
        out: list[Transaction] = []
        for i, f in enumerate(picked):
            partition = f.references[0].partition_id
            output = FileReference(data_filename(rng, "t", partition), partition, 5)
            out.append(
                ReplaceFileReferences(
                    (ReplaceFileReferencesJob(f"job-{i}", partition, (f.filename,), output),)
                )
            )
        return out

    def delete() -> list[Transaction]:
        return [DeleteFiles((f.filename,)) for f in picked]  # replaced above: no references left

    def split() -> list[Transaction]:
        out: list[Transaction] = []
        for leaf in rng.sample(leaves, min(count, len(leaves))):
            low, high = leaf.region.ranges[0].min, leaf.region.ranges[0].max
            point = f"{low!s}m"  # the bench's row key is a string
            if high is not None and not point < str(high):
                continue
            parent, left, right = leaf.split(0, point, str(uuid.uuid4()), str(uuid.uuid4()))
            out.append(SplitPartition(parent, (left, right)))
        return out

    return {
        "AddFiles": add_files,
        "AssignJobIds": assign,
        "Replace": replace,
        "DeleteFiles": delete,
        "SplitPartition": split,
    }


def cpu_per_transaction(state: TableState, batch: Sequence[Transaction]) -> float:
    """CPU microseconds per transaction, each tried and kept as a group member is."""
    gc.collect()
    start = time.process_time()
    for transaction in batch:
        mark = state.begin_changes()
        transaction.validate(state)
        transaction.apply(state, 1)
        state.keep_changes(mark)
    return (time.process_time() - start) / len(batch) * 1e6


def measure(references: int, leaves: int, count: int) -> dict[str, float]:
    state = loaded_state(references, leaves)
    makers = transactions(state, count, seed=references)
    return {kind: cpu_per_transaction(state, makers[kind]()) for kind in KINDS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transactions", type=int, default=2000, help="of each kind (default 2000)")
    parser.add_argument("--references", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    print(f"CPU per transaction (validate + apply, kept), Python {sys.version.split()[0]}")
    small = measure(10_000, 1_000, min(args.transactions, 1_000))
    big = measure(args.references, args.references // 10, args.transactions)
    print(f"  {'kind':<16}{'10k refs (us)':>15}{f'{args.references:,} refs (us)':>20}{'big / small':>13}")
    figures = []
    for kind in KINDS:
        print(f"  {kind:<16}{small[kind]:>15.1f}{big[kind]:>20.1f}{big[kind] / small[kind]:>13.2f}")
        bound = "CPU: Python and NumPy calls per lookup"
        figures += [
            Figure(f"{kind}, one file, on 10,000 references", small[kind], "µs", bound),
            Figure(f"{kind}, one file, on {args.references:,} references", big[kind], "µs", bound),
        ]
    record(__file__, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
