"""Incremental reads: the rows added to a table since a consumer's watermark, each exactly once.

A consumer keeps a **watermark**: the number of the last transaction it has consumed. A read takes the
table's latest transaction number ``L``, reads the log entries ``watermark+1 .. L`` and returns the rows of
every file an ``AddFiles`` in them added (also inside a committer's ``TransactionBatch``); the new
watermark is ``L``. Compaction outputs (``ReplaceFileReferences``) hold rows already delivered and are
skipped, as are reference splits, claims and deletions.

Why nothing committed "late" can be missed (the problem of design record 004): that consumer indexed
partitions by *creation time*, and a writer could create at time t, become visible only after a consumer
had scanned past t, and be skipped for ever — so it had to track in-progress transactions. Here the
position of a transaction is its log number, and a number is assigned *at commit*: an entry is written
with a conditional put of ``last + 1``, which succeeds only after entry ``last`` exists. So once the
consumer sees ``L``, every entry ``<= L`` already exists (reads are strongly consistent), and any
transaction not yet committed will get a number ``> L``. There is no in-progress set to carry: the range
``(watermark, L]`` is complete and final when it is read, consecutive ranges never overlap, and so every
added file is returned exactly once.

Files are read from their original objects, named in the log — not from the current references — so a
file compacted away after it was added is still read, as long as garbage collection (which waits its delay
after the last reference went) has not deleted it. A consumer further behind than that gets
:class:`DataFileMissingError`; one behind the log's retention gets ``TransactionNotRetainedError``. Both
mean: start again from a full read of the table.

Bounded ranges (the data source's ``startingTransaction`` ... options) are planned by
:mod:`spark_client.changes`, which this module reads through too.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from spark_client.changes import added_references, changes_between, check_files_present
from spark_client.data_store import DataStore
from spark_client.query import read_parts
from statestore.codec.transaction_json import decode_entry
from statestore.engine.log_store import TableStateStore
from statestore.errors import TransactionNotRetainedError

__all__ = ["IncrementalBatch", "added_references", "files_added_between", "read_added_since"]


@dataclass(frozen=True)
class IncrementalBatch:
    """The rows added in transactions ``from_watermark+1 .. to_watermark``; store ``to_watermark`` next."""

    rows: DataFrame
    from_watermark: int
    to_watermark: int
    files: tuple[str, ...]


def files_added_between(store: TableStateStore, after: int, up_to: int) -> list[str]:
    """Names of the files added by transactions ``after+1 .. up_to``, in commit order.

    Raises TransactionNotRetainedError when cleanup already deleted some of those entries, and
    UnsupportedByFileStoreError for a table whose files are not on its log.
    """
    store.require_file_log("an incremental read")
    files: dict[str, None] = {}
    expected = after + 1
    for entry in store.log.read(store.table_id, after + 1, up_to):
        if entry.transaction_number != expected:
            break
        for ref in added_references(decode_entry(entry, store.table_id)):
            files.setdefault(ref.filename, None)
        expected += 1
    if expected != up_to + 1:
        raise TransactionNotRetainedError(
            f"table {store.table_id!r}: transaction {expected} is no longer in the log, so the rows added "
            f"after watermark {after} cannot all be found; restart the consumer from a full read"
        )
    return list(files)


def read_added_since(
    spark: SparkSession, store: TableStateStore, data: DataStore, watermark: int
) -> IncrementalBatch:
    """The rows of files added after ``watermark`` up to the latest transaction now, and the new watermark.

    Start a new consumer at 0 (everything ever added, while the log and files are retained) or at the
    table's current transaction number (only what comes next). Raises :class:`DataFileMissingError` if a
    file to read was already garbage-collected.
    """
    if watermark < 0:
        raise ValueError(f"a watermark is a transaction number >= 0, got {watermark}")
    store.require_file_log("an incremental read")
    latest = store.log.latest_number(store.table_id)
    if latest < watermark:
        raise ValueError(
            f"watermark {watermark} is ahead of table {store.table_id!r}'s latest transaction {latest}"
        )
    try:
        changes = changes_between(store, watermark + 1, latest)
    except TransactionNotRetainedError as e:
        raise TransactionNotRetainedError(
            f"{e}. The rows added after watermark {watermark} cannot all be found: restart the consumer "
            "from a full read"
        ) from None
    check_files_present(data, changes.files, f"added after watermark {watermark}")
    rows = read_parts(spark, store.schema, data, [(part.filename, part.region) for part in changes.parts])
    return IncrementalBatch(rows, watermark, latest, changes.files)
