"""Tables as a Spark user makes and names them: created from a DataFrame's schema with the row and sort keys
named, and registered for SQL as a temporary view.

::

    spark_client.create_table(df, "events", row_keys=["key"], sort_keys=["ts"])
    spark_client.create_temp_view(spark, "events")            # SELECT ... FROM events; INSERT INTO events ...

Both find the instance as the data source does (its connection options, else the environment
``statestore local`` prints). Spark types map to the table's: ``int``, ``bigint`` (long), ``string``,
``binary`` (bytes) for any column, and ``double``, ``float``, ``boolean`` for values; anything else is
refused, naming the column and the cast to make.

SQL: Spark (4.0 and 4.3 alike) keeps a Python data source's ``OPTIONS`` for ``CREATE TEMPORARY VIEW ...
USING`` but gives it none for a ``CREATE TABLE ... USING`` catalog table, so a statestore table is a
temporary view in SQL: read with ``SELECT``, appended to with ``INSERT INTO``, for the session's lifetime.
Spark 4.0 plans a view's read at every query (each sees the table as it is then); Spark 4.1 and later plan
it once, at the view's first query, and keep that plan (``REFRESH TABLE`` does not renew it): make the view
again to see what was committed since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_client.errors import DataSourceOptionError, SchemaMismatchError
from spark_client.source_options import FORMAT, parse_connection
from statestore.model.schema import Key, Schema
from statestore.store.tables import TableInfo

_TYPES: dict[type[T.DataType], str] = {
    T.IntegerType: "int",
    T.LongType: "long",
    T.StringType: "string",
    T.BinaryType: "bytes",
    T.DoubleType: "double",
    T.FloatType: "float",
    T.BooleanType: "boolean",
}
_KEY_TYPES = {"int", "long", "string", "bytes"}
_CASTS = {
    T.ShortType: "int",
    T.ByteType: "int",
    T.TimestampType: "long (e.g. unix_micros(col)) or string",
    T.TimestampNTZType: "long or string",
    T.DateType: "int (e.g. unix_date(col)) or string",
    T.DecimalType: "double, long or string",
}


def schema_of(
    struct: T.StructType | DataFrame, row_keys: Sequence[str], sort_keys: Sequence[str] = ()
) -> Schema:
    """A table schema from a Spark schema (or a DataFrame's), its columns in that order within row keys
    (in the order named), sort keys (in the order named) and values (the rest, in the DataFrame's order).

    Raises :class:`SchemaMismatchError` naming every key that is not a column, a column named twice, a key
    whose type cannot be a key, and a column whose type the table cannot hold (with the cast to make).
    """
    if isinstance(struct, DataFrame):
        struct = struct.schema
    if isinstance(row_keys, str) or isinstance(sort_keys, str):
        raise TypeError("row_keys and sort_keys are lists of column names, e.g. ['key']")
    types: dict[str, str] = {}
    problems = []
    for field in struct.fields:
        mapped = _TYPES.get(type(field.dataType))
        if mapped is None:
            cast = next((c for t, c in _CASTS.items() if isinstance(field.dataType, t)), None)
            advice = f"cast it to {cast}" if cast else "convert it to one of int, bigint, string, binary"
            problems.append(
                f"column {field.name!r} is {field.dataType.simpleString()}, which a table cannot hold: "
                + advice
            )
        else:
            types[field.name] = mapped
    names = [f.name for f in struct.fields]
    if len(set(names)) != len(names):
        problems.append(f"duplicate column names in {names}")
    if not row_keys:
        problems.append("name at least one row key")
    keys = [*row_keys, *sort_keys]
    if len(set(keys)) != len(keys):
        problems.append(f"a column is named twice among the row and sort keys {keys}")
    for kind, key in [("row key", k) for k in row_keys] + [("sort key", k) for k in sort_keys]:
        if key not in names:
            problems.append(f"{kind} {key!r} is not a column of the DataFrame ({names})")
        elif key in types and types[key] not in _KEY_TYPES:
            problems.append(
                f"{kind} {key!r} is {types[key]}: keys are int, bigint (long), string or binary (bytes)"
            )
    if problems:
        raise SchemaMismatchError("cannot make a table schema: " + "; ".join(problems))
    values = [name for name in names if name not in keys]
    return Schema.of(
        [(k, types[k]) for k in row_keys],
        [(k, types[k]) for k in sort_keys],
        [(v, types[v]) for v in values],
    )


def create_table(
    schema: T.StructType | DataFrame,
    name: str,
    row_keys: Sequence[str],
    sort_keys: Sequence[str] = (),
    *,
    split_points: Sequence[Key] | None = None,
    properties: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
) -> TableInfo:
    """Create table ``name`` with the columns of ``schema`` (a DataFrame or its schema): see
    :func:`schema_of`. ``split_points`` cut its key space on the first row key from the start.

    ``options`` are the data source's connection options (``resources``, ``instance``, ``endpoint``, ...;
    by default those of the environment, as ``statestore local`` prints them). Raises
    :class:`SchemaMismatchError` before anything is created, TableAlreadyExistsError if the name is taken.
    """
    table_schema = schema_of(schema, row_keys, sort_keys)
    client = parse_connection(options or {}).client()
    return client.create_table(name, table_schema, list(split_points or []), properties)


def create_temp_view(spark: SparkSession, view: str, table: str | None = None, **options: str) -> None:
    """Make table ``table`` (default: the view's name) a temporary view ``view`` of ``spark``'s SQL:
    ``SELECT`` reads it (on Spark 4.1+, as it was at the view's first query: call this again to see later
    commits), ``INSERT INTO`` appends (one AddFiles).

    The same as ``CREATE OR REPLACE TEMPORARY VIEW view USING `statestore-table` OPTIONS (table 'name',
    ...)``; ``options`` are the data source's (``committer='sync'``, ``region=...``, connection options).
    """
    from spark_client.datasource import register

    register(spark)  # cheap when already registered
    pairs = {"table": table or view, **options}
    if any(name.lower() == "path" for name in pairs):
        raise DataSourceOptionError("create_temp_view takes the table as 'table', not 'path'")
    rendered = ", ".join(f"`{_identifier(k)}` {_literal(v)}" for k, v in pairs.items())
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{_identifier(view)}` USING `{FORMAT}` OPTIONS ({rendered})")


def _identifier(name: str) -> str:
    return name.replace("`", "``")


def _literal(value: Any) -> str:
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"
