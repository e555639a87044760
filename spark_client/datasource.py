"""A Spark data source for statestore tables (Spark's Python Data Source API)::

    spark_client.register(spark)
    df = spark.read.format("statestore-table").load("events")           # or .option("table", "events")
    df.write.format("statestore-table").mode("append").save("events")   # ONE AddFiles, from the driver

The name is not ``statestore``: Spark ships a built-in source of that name (it reads Structured
Streaming's state), and a Python source cannot take a built-in's name.

**Reading.** Planning (:meth:`StatestoreDataSource.schema`, :meth:`~StatestoreDataSource.reader`,
:meth:`StatestoreReader.partitions`) runs in a Python worker on the driver: it builds the state store from
the options (:mod:`spark_client.source_options`), loads the table's state and picks the file references
whose partitions overlap the query's regions of key space, exactly as :func:`spark_client.query.query`
does. Each input partition carries a few ``(filename, region, rows)`` parts; a task streams each file with
pyarrow, keeping only the rows of the reference's partition (so a file referenced from two partitions
yields each row once) that pass the pushed filters, reads only the columns asked for, and hands Spark
Arrow batches.

Regions come from the ``region`` option and, on Spark 4.1+, from the filters Spark pushes
(:mod:`spark_client.pushdown`; :func:`register` turns ``spark.sql.python.filterPushdown.enabled`` on).
Spark 4.0 — the engine of EMR Serverless emr-spark-8.0.0 — has no Python filter pushdown: there the
``region`` option is the way to prune. No Spark version lets a Python source see which columns a query
uses; give a schema (``spark.read.format("statestore-table").schema("key long, value string")``) to read
fewer.

:func:`spark_client.query.query` reads through the same Arrow path: it plans on the driver (its store may
live only there) and hands the plan, as JSON, to the internal ``statestore-table-parts`` source.

**Appending.** :meth:`StatestoreDataSource.writer` checks the DataFrame's columns against the table's
schema before any file is written. Each task splits its rows by leaf partition, sorts each leaf's rows by
row and sort keys and writes one file per leaf (more if its input is larger than
:data:`WRITE_BUFFER_BYTES`). :meth:`StatestoreWriter.commit` sends ONE AddFiles through the committer the
options name (the commit queue by default), with :func:`spark_client.ingest.commit_files`, the
code :func:`~spark_client.ingest.ingest` commits with. Overwrite is refused.

If a task fails, Spark calls :meth:`StatestoreWriter.abort`, which deletes the files the other tasks
wrote (the failed task deletes its own). If the commit is rejected the files are deleted; if its outcome
is unknown (no answer in ``commitTimeout``) they are kept, since it may still be committed, and left to
garbage collection should it not be.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_client.arrow_reader import ArrowPartsReader, ReadTask
from spark_client.changes import Changes
from spark_client.changes_reader import ChangesReader, changes_schema, plan_changes
from spark_client.columns import arrow_schema, check_struct, sort_columns, spark_schema
from spark_client.data_store import DataStore
from spark_client.errors import (
    CommitRejectedError,
    DataSourceOptionError,
    SchemaMismatchError,
)
from spark_client.file_io import DataFileWriter
from spark_client.ingest import commit_files
from spark_client.leaves import rows_by_leaf
from spark_client.log_times import LogTimes
from spark_client.pushdown import key_regions, push
from spark_client.read_plan import ReadPart, plan_read
from spark_client.source_options import (
    DEFAULT_ROWS_PER_TASK,
    FORMAT,
    KNOWN_OPTIONS,
    RANGE_OPTIONS,
    SourceOptions,
)
from spark_client.tables import schema_of
from spark_client.view_plan import plan_latest, table_view
from statestore.errors import TableAlreadyExistsError, TableNotFoundError
from statestore.model.files import FileReference
from statestore.model.partition_tree import PartitionTree
from statestore.model.partitions import Range, Region
from statestore.model.schema import Schema
from statestore.services.client import StateStoreClient
from statestore.store.tables import TableInfo

# Internal: reads parts planned on the driver, for the functional query().
PARTS_FORMAT = "statestore-table-parts"
# Whether this PySpark offers filters to Python data sources (Spark 4.1+), and the switch that turns it on.
FILTER_PUSHDOWN_AVAILABLE = hasattr(DataSourceReader, "pushFilters")
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# A write task sorts and writes its rows whenever it holds this many bytes of them, bounding its memory.
WRITE_BUFFER_BYTES = 256 * 1024 * 1024

_READ_ONLY_OPTIONS = ("region", "asof", "timestampasof", "rowspertask", "viewmaxleaves", *RANGE_OPTIONS)


def register(spark: SparkSession) -> None:
    """Make ``format("statestore-table")`` available in ``spark``, with filter pushdown where Spark has it."""
    spark.dataSource.register(StatestoreDataSource)
    spark.dataSource.register(PlannedPartsSource)
    if FILTER_PUSHDOWN_AVAILABLE:
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")


class StatestoreDataSource(DataSource):
    """``format("statestore-table")``: see the module's docstring and :mod:`spark_client.source_options`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        options = self._parse((), "reads")
        client = options.connection.client()
        info = client.get_table(options.table)
        if options.is_range:
            # Planned here, once: Spark hands this object, pickled, to reader(), so the rows read are the
            # range the schema's summary describes.
            self._changes = plan_changes(options, client.state_store(info.table_id))
            return changes_schema(info.schema, self._changes)
        return spark_schema(info.schema)

    def reader(self, schema: StructType) -> ArrowPartsReader:
        options = self._parse((), "reads")
        client = options.connection.client()
        info = client.get_table(options.table)
        if options.is_range:
            changes: Changes | None = getattr(self, "_changes", None)
            if changes is None:  # a schema was given, so schema() was not called
                changes = plan_changes(options, client.state_store(info.table_id))
            return ChangesReader(options, info.schema, schema, changes)
        return StatestoreReader(options, info, schema)

    def writer(self, schema: StructType, overwrite: bool) -> StatestoreWriter:
        if overwrite:
            raise DataSourceOptionError(
                f"format {FORMAT!r} only appends: use mode('append'); to replace rows, write them to a "
                "new table. Nothing was written"
            )
        options = self._parse(_READ_ONLY_OPTIONS, "writes")
        client = options.connection.client()
        info = _table_to_append_to(client, options, schema)
        check_struct(schema, info.schema)
        state = client.state_store(info.table_id).state()
        # The tasks need the partitions only: a tree over the state would take every file reference with it.
        tree = PartitionTree({p.id: p for p in state.partitions()})
        return StatestoreWriter(options, info.table_id, info.schema, tree)

    def _parse(self, not_for: tuple[str, ...], what: str) -> SourceOptions:
        """The options; a write refuses those only reads take (a read ignores the write's own, so that a
        temporary view's options serve its INSERTs too)."""
        if "provider" in self.options and any(name.startswith("option.") for name in self.options):
            # A catalog table's properties: Spark calls schema() with them once, at CREATE TABLE, and gives
            # every later read or write of the table no options at all.
            raise DataSourceOptionError(
                f"CREATE TABLE ... USING `{FORMAT}` cannot work: Spark gives a Python data source none of a "
                "catalog table's OPTIONS when it is read or written. Use CREATE TEMPORARY VIEW name USING "
                f"`{FORMAT}` OPTIONS (table 'name', ...) (or spark_client.create_temp_view): SELECT and "
                "INSERT INTO work on it"
            )
        wrong = sorted(KNOWN_OPTIONS[name.lower()] for name in self.options if name.lower() in not_for)
        if wrong:
            raise DataSourceOptionError(f"option(s) {wrong} do not apply to {what}")
        return SourceOptions.parse(self.options)


# --- reading --------------------------------------------------------------------------------------


class StatestoreReader(ArrowPartsReader):
    """Plans a read from the table's state, in a Python worker on the driver."""

    def __init__(self, options: SourceOptions, info: TableInfo, requested: StructType) -> None:
        super().__init__(info.schema, options.data, requested, options.rows_per_task)
        self.options = options
        self.info = info
        self.table_id = info.table_id
        self.region = options.region_in(info.schema)

    def pushFilters(self, filters: list[Any]) -> list[Any]:  # noqa: N802 (Spark's name)
        """Take the filters pyarrow evaluates exactly; hand the rest back to Spark (Spark 4.1+)."""
        self.predicates, rest = push(filters, self.table_schema)
        return rest

    def regions(self) -> list[Region]:
        """The boxes of key space the query can touch (none: it matches no row)."""
        return key_regions(self.predicates, self.table_schema, self.region)

    def partitions(self) -> list[ReadTask]:
        """The read's tasks; the latest state's through the queryable view where that pays
        (:func:`spark_client.view_plan.plan_latest`), a past state's from a full load."""
        client = self.options.connection.client()
        store = client.state_store(self.table_id)
        as_of = self.options.as_of
        if self.options.timestamp_as_of is not None:
            as_of = LogTimes(store.log, store.table_id).latest_at(
                self.options.timestamp_as_of, "timestampAsOf"
            )
        if as_of is None:
            view = table_view(self.info, client.log, self.options.connection.view_store())
            planned = plan_latest(store, view, self.regions(), self.options.view_max_leaves)
            return self.tasks(planned.parts, planned.transaction_number)
        state = store.load(as_of)
        return self.tasks(plan_read(state, self.regions()), state.transaction_number)


def _table_to_append_to(client: StateStoreClient, options: SourceOptions, struct: StructType) -> TableInfo:
    """The table an append goes to; created from the DataFrame's schema if it does not exist and the
    options name its row keys (``rowKeys``), which must be its own if it does."""
    if options.row_keys is None:
        try:
            return client.get_table(options.table)
        except TableNotFoundError:
            raise DataSourceOptionError(
                f"table {options.table!r} does not exist: create it first (spark_client.create_table(df, "
                "name, row_keys=[...]) or `statestore tables create`), or give the option rowKeys (and "
                "sortKeys) to create it from the DataFrame's schema. Nothing was written"
            ) from None
    wanted = schema_of(struct, options.row_keys, options.sort_keys)
    try:
        info = client.create_table(options.table, wanted)
    except TableAlreadyExistsError:
        info = client.get_table(options.table)
    keys = ([f.name for f in info.schema.row_keys], [f.name for f in info.schema.sort_keys])
    if keys != (list(options.row_keys), list(options.sort_keys)):
        raise DataSourceOptionError(
            f"table {options.table!r} exists with row keys {keys[0]} and sort keys {keys[1]}, not the "
            f"rowKeys {list(options.row_keys)} and sortKeys {list(options.sort_keys)} given. Nothing was "
            "written"
        )
    return info


# --- reading parts planned on the driver (query()) ------------------------------------------------


def can_read_planned(data: DataStore) -> bool:
    """Whether :func:`read_planned` can read from ``data``: credentials must not travel in options."""
    return data.access_key is None and data.secret_key is None and data.session_token is None


def read_planned(
    spark: SparkSession,
    schema: Schema,
    data: DataStore,
    parts: Sequence[ReadPart],
    rows_per_task: int = DEFAULT_ROWS_PER_TASK,
    *,
    planned_at: int | None = None,
) -> DataFrame:
    """A DataFrame of the rows of parts planned here, read by the Arrow path of the data source.

    For :func:`spark_client.query.query`, whose store may live only in this process (in memory): the plan
    travels to the tasks as JSON in an option. ``data`` must pass :func:`can_read_planned`.
    """
    if not can_read_planned(data):
        raise ValueError("read_planned cannot ship explicit credentials to the tasks; use read_parts")
    spark.dataSource.register(PlannedPartsSource)  # cheap when already registered
    plan = {
        "schema": schema.to_json(),
        "data": [data.kind, data.base, data.endpoint_override, data.scheme, data.region],
        "parts": [[p.filename, _region_to_json(schema, p.region), p.rows] for p in parts],
        "rows_per_task": rows_per_task,
        "planned_at": planned_at,
    }
    reader = spark.read.format(PARTS_FORMAT).schema(spark_schema(schema))  # no schema() round trip
    return reader.option("plan", json.dumps(plan)).load()


class PlannedPartsSource(DataSource):
    """``format("statestore-table-parts")``: the parts :func:`read_planned` was given (option ``plan``)."""

    @classmethod
    def name(cls) -> str:
        return PARTS_FORMAT

    def schema(self) -> StructType:
        return spark_schema(Schema.from_json(json.loads(self.options["plan"])["schema"]))

    def reader(self, schema: StructType) -> PlannedReader:
        plan = json.loads(self.options["plan"])
        table_schema = Schema.from_json(plan["schema"])
        parts = tuple(
            ReadPart(filename, _region_from_json(table_schema, region), rows)
            for filename, region, rows in plan["parts"]
        )
        data = DataStore(*plan["data"])
        return PlannedReader(table_schema, data, schema, plan["rows_per_task"], parts, plan.get("planned_at"))


class PlannedReader(ArrowPartsReader):
    def __init__(
        self,
        schema: Schema,
        data: DataStore,
        requested: StructType,
        rows_per_task: int,
        parts: tuple[ReadPart, ...],
        planned_at: int | None,
    ) -> None:
        super().__init__(schema, data, requested, rows_per_task)
        self.parts = parts
        self.planned_at = planned_at

    def partitions(self) -> list[ReadTask]:
        return self.tasks(list(self.parts), self.planned_at)


def _region_to_json(schema: Schema, region: Region | None) -> list[list[Any]] | None:
    if region is None:
        return None
    return [
        [f.key_type.to_json(r.min), f.key_type.to_json(r.max)]
        for f, r in zip(schema.row_keys, region.ranges, strict=True)
    ]


def _region_from_json(schema: Schema, ranges: list[list[Any]] | None) -> Region | None:
    if ranges is None:
        return None
    return Region(
        tuple(
            Range(f.key_type.from_json(low), f.key_type.from_json(high))  # type: ignore[arg-type]
            for f, (low, high) in zip(schema.row_keys, ranges, strict=True)
        )
    )


# --- appending ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WrittenFiles(WriterCommitMessage):
    """What one write task wrote: ``(filename, leaf partition id, rows)`` per file."""

    files: tuple[tuple[str, str, int], ...]


class StatestoreWriter(DataSourceArrowWriter):
    """Writes sorted files per leaf in the tasks, and commits them all as ONE AddFiles on the driver."""

    def __init__(self, options: SourceOptions, table_id: str, schema: Schema, tree: PartitionTree) -> None:
        self.options = options
        self.table_id = table_id
        self.schema = schema
        self.tree = tree

    @property
    def data(self) -> DataStore:
        return self.options.data

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenFiles:
        target = arrow_schema(self.schema)
        opened: list[str] = []
        written: list[tuple[str, str, int]] = []
        try:
            buffer: list[pa.Table] = []
            size = 0
            for batch in iterator:
                rows = self._checked_rows(batch, target)
                buffer.append(rows)
                size += rows.nbytes
                if size >= WRITE_BUFFER_BYTES:
                    written.extend(self._write_leaf_files(pa.concat_tables(buffer), target, opened))
                    buffer, size = [], 0
            if buffer:
                written.extend(self._write_leaf_files(pa.concat_tables(buffer), target, opened))
        except BaseException:
            self.data.delete(opened)  # this attempt's files: nothing will ever commit them
            raise
        return WrittenFiles(tuple(written))

    def _checked_rows(self, batch: pa.RecordBatch, target: pa.Schema) -> pa.Table:
        rows = pa.Table.from_batches([batch]).select(target.names)
        nulls = {f.name: rows.column(f.name).null_count for f in self.schema.row_keys}
        bad = {name: count for name, count in nulls.items() if count}
        if bad:
            detail = ", ".join(f"{count} row(s) with a null {name!r}" for name, count in bad.items())
            raise SchemaMismatchError(
                f"row keys must not be null: {detail}. Nothing was committed, and the files this append "
                "wrote are deleted"
            )
        return rows.cast(target)

    def _write_leaf_files(
        self, rows: pa.Table, target: pa.Schema, opened: list[str]
    ) -> list[tuple[str, str, int]]:
        order = [(name, "ascending", "at_start") for name in sort_columns(self.schema)]
        out = []
        for leaf_id, leaf_rows in rows_by_leaf(rows, self.schema, self.tree):
            filename = self.data.new_data_file(self.table_id, leaf_id)
            opened.append(filename)
            writer = DataFileWriter(self.data, filename, target)
            try:
                writer.write_table(leaf_rows.sort_by(order))
            finally:
                writer.close()
            out.append((filename, leaf_id, writer.rows))
        return out

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        references = tuple(
            FileReference(filename, leaf_id, rows)
            for message in messages
            if isinstance(message, WrittenFiles)
            for filename, leaf_id, rows in message.files
        )
        if not references:
            return  # nothing was written: nothing to commit
        committer = self.options.committer_for(self.options.connection.client())
        try:
            commit_files(committer, self.table_id, references, what="append")
        except CommitRejectedError:
            self.data.delete([r.filename for r in references])  # never committed: nothing refers to them
            raise
        # CommitPendingError propagates with the files kept: the commit may still land.

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if all(message is not None for message in messages):
            # Every task succeeded, so Spark aborts because commit() failed. A rejected commit has deleted
            # the files already; any other failure may have left a commit on its way, so keep them.
            return
        self.data.delete(
            [filename for m in messages if isinstance(m, WrittenFiles) for filename, _, _ in m.files]
        )
