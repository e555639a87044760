"""A table schema as Spark and Arrow see it, and the check that a DataFrame matches it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_client.errors import SchemaMismatchError
from statestore.model.partitions import Region
from statestore.model.schema import Field, Schema

_SPARK_TYPES: dict[str, T.DataType] = {
    "int": T.IntegerType(),
    "long": T.LongType(),
    "string": T.StringType(),
    "bytes": T.BinaryType(),
    "double": T.DoubleType(),
    "float": T.FloatType(),
    "boolean": T.BooleanType(),
}
_ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int32(),
    "long": pa.int64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
}


def spark_schema(schema: Schema) -> T.StructType:
    """The Spark schema of a table's rows: row keys, then sort keys, then values; row keys not null."""
    row_keys = {f.name for f in schema.row_keys}
    return T.StructType(
        [
            T.StructField(f.name, _SPARK_TYPES[f.type], nullable=f.name not in row_keys)
            for f in schema.all_fields
        ]
    )


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of a table's data files, in the same column order as :func:`spark_schema`."""
    row_keys = {f.name for f in schema.row_keys}
    return pa.schema(
        [pa.field(f.name, _ARROW_TYPES[f.type], nullable=f.name not in row_keys) for f in schema.all_fields]
    )


def field_type(type_name: str) -> pa.DataType:
    """The Arrow type of a schema field type (``"long"`` -> ``int64``, ...)."""
    return _ARROW_TYPES[type_name]


def sort_columns(schema: Schema) -> list[str]:
    """The columns a data file is sorted by: row keys, then sort keys."""
    return [f.name for f in schema.row_keys + schema.sort_keys]


def check_columns(df: DataFrame, schema: Schema) -> None:
    """Raise :class:`SchemaMismatchError` naming every column of ``df`` that does not match ``schema``.

    The DataFrame must have exactly the schema's columns (any order) with exactly its types. This reads
    no data; :func:`check_no_null_keys` is the check that does.
    """
    check_struct(df.schema, schema)


def check_struct(struct: T.StructType, schema: Schema) -> None:
    """:func:`check_columns` for a Spark schema: exactly the table's columns (any order) and types."""
    expected = {f.name: f for f in schema.all_fields}
    actual = {f.name: f.dataType for f in struct.fields}
    names = [f.name for f in struct.fields]
    problems = []
    missing = [name for name in expected if name not in actual]
    if missing:
        problems.append(f"missing column(s) {missing}")
    extra = [name for name in actual if name not in expected]
    if extra:
        problems.append(f"column(s) not in the table schema {extra}")
    if len(names) != len(set(names)):
        problems.append(f"duplicate column names in {names}")
    problems.extend(_type_problems(actual, expected, "cast it first"))
    if problems:
        raise SchemaMismatchError(
            "the DataFrame does not match the table schema: " + "; ".join(problems) + ". Nothing was written."
        )


def check_read_schema(struct: T.StructType, schema: Schema) -> list[str]:
    """The columns to read for a schema a reader asked for: a subset of the table's, with the same types.

    Raises :class:`SchemaMismatchError` naming each unknown or mistyped column.
    """
    expected = {f.name: f for f in schema.all_fields}
    actual = {f.name: f.dataType for f in struct.fields}
    names = [f.name for f in struct.fields]
    problems = []
    unknown = [name for name in names if name not in expected]
    if unknown:
        problems.append(f"column(s) not in the table {unknown}; its columns are {list(expected)}")
    if len(names) != len(set(names)):
        problems.append(f"duplicate column names in {names}")
    problems.extend(_type_problems(actual, expected, "ask for the table's type"))
    if problems:
        raise SchemaMismatchError(
            "the schema given to read the table does not match it: " + "; ".join(problems)
        )
    return names


def _type_problems(actual: dict[str, T.DataType], expected: dict[str, Field], advice: str) -> list[str]:
    return [
        f"column {name!r} is {actual[name].simpleString()} but the schema says {field.type} "
        f"({_SPARK_TYPES[field.type].simpleString()}); {advice}"
        for name, field in expected.items()
        if name in actual and actual[name] != _SPARK_TYPES[field.type]
    ]


def check_no_null_keys(df: DataFrame, schema: Schema) -> None:
    """Raise :class:`SchemaMismatchError` if any row has a null row key (one pass over the data)."""
    counts = df.select(
        *[F.sum(F.col(f.name).isNull().cast("long")).alias(f.name) for f in schema.row_keys]
    ).first()
    nulls = {name: int(count or 0) for name, count in (counts.asDict() if counts else {}).items()}
    bad = {name: count for name, count in nulls.items() if count}
    if bad:
        detail = ", ".join(f"{count} row(s) with a null {name!r}" for name, count in bad.items())
        raise SchemaMismatchError(f"row keys must not be null: {detail}. Nothing was written.")


def region_filter(schema: Schema, region: Region) -> pc.Expression:
    """An Arrow expression keeping the rows whose row key lies in ``region``."""
    expression = pc.scalar(True)
    for field, key_range in zip(schema.row_keys, region.ranges, strict=True):
        column = pc.field(field.name)
        if key_range.min != field.key_type.minimum:
            expression = expression & (column >= _arrow_scalar(key_range.min, field.type))
        if key_range.max is not None:
            expression = expression & (column < _arrow_scalar(key_range.max, field.type))
    return expression


def _arrow_scalar(value: object, type_name: str) -> pa.Scalar:
    return pa.scalar(value, type=_ARROW_TYPES[type_name])
