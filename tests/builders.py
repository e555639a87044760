"""Small helpers for building schemas, partition trees, file references and states in tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytest

from statestore.codec.transaction_json import encode_transaction
from statestore.model import layout
from statestore.model.files import FileReference, TableFile
from statestore.model.partition_tree import partitions_from_split_points
from statestore.model.partitions import Partition
from statestore.model.schema import Key, Schema
from statestore.state.file_columns import FileColumns
from statestore.state.table_state import TableState
from statestore.store.memory import InMemoryTransactionLog
from statestore.store.ports import LogEntry, TransactionLogStore
from statestore.transactions import AddFiles, InitialisePartitions, Transaction

if TYPE_CHECKING:
    from statestore.services.client import StateStoreClient

INT_SCHEMA = Schema.of({"key": "int"}, values={"value": "string"})
LONG_SCHEMA = Schema.of({"key": "long"})
STRING_SCHEMA = Schema.of({"key": "string"}, sort_keys={"ts": "long"}, values={"value": "double"})
BYTES_SCHEMA = Schema.of({"key": "bytes"})
TWO_KEY_SCHEMA = Schema.of({"a": "string", "b": "long"})


def data_key(table_id: str, name: str) -> str:
    """The key of data file ``name`` under the table's data prefix: what a store takes as a new file's
    name (a state built by hand, with no data prefix, takes any name)."""
    return f"{layout.data_prefix(table_id)}{name}"


def table_data_key(client: StateStoreClient, table: str, name: str) -> str:
    """:func:`data_key` of the table ``client`` knows by ``table`` (its name or id)."""
    return data_key(client.get_table(table).table_id, name)


def data_keys(table_id: str, *names: str) -> list[str]:
    """The keys of data files ``names`` under the table's data prefix, in the order given."""
    return [data_key(table_id, name) for name in names]


def ref(
    filename: str,
    partition_id: str = "root",
    rows: int = 100,
    *,
    job_id: str | None = None,
    whole_file: bool = True,
    approximate: bool = False,
) -> FileReference:
    """A file reference with sensible defaults."""
    return FileReference(
        filename,
        partition_id,
        rows,
        count_approximate=approximate,
        only_contains_data_for_this_partition=whole_file,
        job_id=job_id,
    )


def tree(schema: Schema, split_points: Sequence[Key] = (), dimension: int = 0) -> list[Partition]:
    """A partition tree with reproducible ids: ``root`` and ``p1``, ``p2``, ... below it."""
    return partitions_from_split_points(schema, split_points, dimension, id_prefix="p")


def commit(state: TableState, transaction: Transaction, update_time: int = 1_000) -> TableState:
    """Validate and apply ``transaction`` as the next transaction, the way the engine does."""
    transaction.validate(state)
    transaction.apply(state, update_time)
    state.transaction_number += 1
    return state


def new_state(
    schema: Schema = STRING_SCHEMA,
    split_points: Sequence[Key] = (),
    references: Sequence[FileReference] = (),
    update_time: int = 1_000,
) -> TableState:
    """A state initialised with ``tree(schema, split_points)`` and, if any, ``references`` added."""
    state = commit(TableState(schema), InitialisePartitions(tuple(tree(schema, split_points))), update_time)
    if references:
        commit(state, AddFiles(tuple(references)), update_time)
    return state


def append_unchecked(
    log: TransactionLogStore, table_id: str, transaction: Transaction, update_time: int
) -> int:
    """Append ``transaction`` as the table's next log entry without validating it, as an entry written
    before a rule it breaks existed (a data file named outside the table's data prefix): a table keeps
    loading such entries. Returns its number."""
    number = log.latest_number(table_id) + 1
    body, compressed = encode_transaction(transaction)
    log.append(table_id, LogEntry(number, update_time, transaction.TYPE, body, compressed))
    return number


def leaf_ids_in_key_order(state: TableState) -> list[str]:
    """Leaf partition ids ordered by the minimum of their first row key range."""
    return [p.id for p in sorted(state.leaf_partitions(), key=lambda p: p.region.ranges[0].min)]


def count_files_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the ``TableFile`` objects made from file columns: the list gets how many each call of
    ``FileColumns.table_files`` made (what a read of a few files of a big table must keep small)."""
    made: list[int] = []
    table_files = FileColumns.table_files

    def counting(self: FileColumns, rows: np.ndarray | None = None) -> list[TableFile]:
        files = table_files(self, rows)
        made.append(len(files))
        return files

    monkeypatch.setattr(FileColumns, "table_files", counting)
    return made


class ReadRecordingLog(InMemoryTransactionLog):
    """The in-memory log, recording the first number of each range read (``reads_from``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads_from: list[int] = []

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        self.reads_from.append(from_number)
        return super().read(table_id, from_number, to_number)
