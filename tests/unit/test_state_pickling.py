"""A state loaded from a snapshot survives pickling, as PySpark ships it to its tasks (plain pickle and the
cloudpickle PySpark uses), and answers every question as the state it was made from does.

A loaded state reads its snapshot's columns through ``memoryview``s, which plain pickle refuses and
cloudpickle turns into ``bytes`` (whose items are single bytes, not offsets or hashes): the data source's
append, which ships the partition tree to its tasks, failed on any table that had a snapshot.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from statestore.model.files import FileReference
from statestore.model.schema import Key, Schema
from statestore.services.client import StateStoreClient
from statestore.state.hash_search import HashSearch
from statestore.state.string_column import StringColumn
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, SplitPartition

SCHEMA = Schema.of({"name": "string", "n": "long"}, values={"v": "bytes"})
ROUND_TRIPS: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda value: pickle.loads(pickle.dumps(value)),
    "cloudpickle": lambda value: pickle.loads(cloudpickle.dumps(value)),
}


def state_loaded_from_a_snapshot(warm: bool) -> tuple[TableState, list[str]]:
    """A table with string and long row keys, split on both, 40 files; its state loaded from a snapshot
    taken between commits (so the log after it is applied over the snapshot's columns), and every file's
    name. ``warm``: look names and ids up first, so the lazily made searches are pickled too."""
    client = StateStoreClient.in_memory()
    table_id = client.create_table("t", SCHEMA, ["g", "p"]).table_id
    leaves = client.state(table_id).partition_tree.leaves()
    names = []
    for i in range(30):
        leaf = leaves[i % len(leaves)]
        names.append(f"tables/{table_id}/data/{leaf.id}/file-{i}.parquet")
        client.commit(table_id, AddFiles((FileReference(names[-1], leaf.id, 10 + i),)))
    client.create_snapshot(table_id)
    parent = client.state(table_id).partition_tree.leaf_for_key(["q", 0])
    split, lower, upper = parent.split(1, 500, "q-low", "q-high")
    client.commit(table_id, SplitPartition(split, (lower, upper)))
    for i in range(30, 40):
        leaf = lower if i % 2 else upper
        names.append(f"tables/{table_id}/data/{leaf.id}/file-{i}.parquet")
        client.commit(table_id, AddFiles((FileReference(names[-1], leaf.id, 10 + i),)))
    state = client.state_store(table_id).load()  # a fresh load: the snapshot's columns, then the log
    if warm:
        assert all(state.files_present(names))
        for partition in state.partitions():
            assert state.has_partition(partition.id)
    return state, names


def answers(state: TableState, names: list[str]) -> dict[str, Any]:
    """What a task or a commit asks of a state, as plain values."""
    tree = state.partition_tree
    keys: list[list[Key]] = [["", -5], ["a", 0], ["g", 7], ["h", 2**40], ["q", 499], ["q", 500], ["zz", 10]]
    return {
        "transaction": state.transaction_number,
        "partitions": sorted(state.partitions(), key=lambda p: p.id),
        "leaves": sorted(p.id for p in tree.leaves()),
        "leaf of key": [tree.leaf_for_key(key).id for key in keys],
        "each partition by id": [state.partition(p.id) for p in state.partitions()],
        "files": sorted((f.filename, f.references) for f in state.files()),
        "each file by name": [state.file(name).references for name in names],
        "present": state.files_present([*names, "tables/none/data/x/missing.parquet"]),
        "by partition": {k: sorted(v) for k, v in state.references_by_partition().items()},
    }


@pytest.mark.parametrize("how", sorted(ROUND_TRIPS))
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_state_loaded_from_a_snapshot_pickles_and_answers_as_before(how: str, warm: bool) -> None:
    state, names = state_loaded_from_a_snapshot(warm)
    expected = answers(state, names)
    shipped = ROUND_TRIPS[how](state)
    assert answers(shipped, names) == expected
    assert ROUND_TRIPS[how](shipped.partition_tree).leaf_for_key(["q", 500]).id == "q-high"


@pytest.mark.parametrize("how", sorted(ROUND_TRIPS))
def test_a_state_unpickled_takes_a_commit_as_the_original_does(how: str) -> None:
    state, names = state_loaded_from_a_snapshot(warm=True)
    shipped = ROUND_TRIPS[how](state)
    leaf = shipped.partition_tree.leaf_for_key(["b", 1])
    new = f"{state.data_prefix}{leaf.id}/new.parquet"  # the loaded state knows its table's data prefix
    assert shipped.data_prefix == state.data_prefix
    added = AddFiles((FileReference(new, leaf.id, 3),))
    for target in (state, shipped):
        added.validate(target)
        added.apply(target, 1_000)
    assert answers(shipped, [*names, new]) == answers(state, [*names, new])


@pytest.mark.parametrize("how", sorted(ROUND_TRIPS))
@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.binary()])
def test_a_string_column_read_through_views_pickles(how: str, kind: pa.DataType) -> None:
    values = ["", "a", "héllo ✓", "x" * 300, "z"]
    array = pa.array([v.encode() if kind == pa.binary() else v for v in values], kind).slice(1)
    shipped = ROUND_TRIPS[how](StringColumn(array))
    assert [shipped.at(row) for row in range(len(array))] == values[1:]


@pytest.mark.parametrize("how", sorted(ROUND_TRIPS))
def test_a_hash_search_pickles_and_finds_what_it_found(how: str) -> None:
    hashes = np.sort(np.random.default_rng(3).integers(0, 2**63, 10_000, np.uint64))
    search = HashSearch(hashes)
    shipped = ROUND_TRIPS[how](search)
    probes = [int(h) for h in hashes[::97]] + [0, 2**64 - 1, int(hashes[5]) + 1]
    assert [shipped.position(h) for h in probes] == [search.position(h) for h in probes]
    assert [shipped.at(p) for p in range(0, 10_000, 501)] == [int(h) for h in hashes[::501]]


_WRITE = """
import pickle, sys
from tests.unit.test_state_pickling import state_loaded_from_a_snapshot
state, _ = state_loaded_from_a_snapshot(warm=False)  # no id looked up yet: none remembered
sys.stdout.buffer.write(pickle.dumps(state))
"""
_READ = """
import json, pickle, sys
state = pickle.loads(sys.stdin.buffer.read())
ids = sorted(p.id for p in state.partitions())
guard = state.file_guard(0)
print(json.dumps({
    "ids": ids,
    "by id": [state.partition(i).id for i in ids],
    "has": [state.has_partition(i) for i in [*ids, "nope"]],
    "guard has": [guard.has_partition(i) for i in [*ids, "nope"]],
}))
"""


def test_a_state_pickled_in_one_process_finds_its_partitions_by_id_in_another() -> None:
    # A Spark task unpickles a state in a process whose ``hash`` of a str differs (PYTHONHASHSEED): the
    # partitions' index, hashed with Python's own, found none of them there.
    def run(program: str, seed: str, given: bytes = b"") -> bytes:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", program], input=given, env=env, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout

    answered = json.loads(run(_READ, "2", run(_WRITE, "1")))

    ids = answered["ids"]
    assert len(ids) == 7 and answered["by id"] == ids  # five in the snapshot, two split since
    assert answered["has"] == answered["guard has"] == [True] * len(ids) + [False]
