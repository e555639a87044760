"""Filter pushdown for the data source: which filters it takes from Spark, and what they become.

Spark 4.1+ offers a Python data source the filters of a query (``DataSourceReader.pushFilters``); a filter
the source takes is dropped from Spark's own plan, so it must then be applied exactly. The source takes a
filter only when pyarrow evaluates it as Spark would:

- ``=``, ``<=>``, ``<``, ``<=``, ``>``, ``>=`` and ``IN`` on ``int``, ``long``, ``string``, ``bytes`` and
  ``boolean`` columns, ``LIKE 'prefix%'`` on strings, ``IS NULL`` and ``IS NOT NULL`` on any column. A
  comparison with null never holds in either engine. Doubles and floats stay with Spark: it orders NaN above
  every number and holds ``NaN = NaN`` true, where Arrow follows IEEE.
- Anything else (``NOT``, ``OR``, other functions) is handed back and Spark evaluates it after the scan.

Each taken filter becomes a :class:`Predicate`: pyarrow evaluates all of them on every file read (row
groups whose statistics rule them out are skipped), and those on row keys also become the regions of key
space the query can touch (:func:`key_regions`), which select the partitions, hence the files, to read.

Spark 4.0 (the engine of EMR Serverless emr-spark-8.0.0) has no ``pushFilters``; there the ``region``
option gives the regions by hand. Filters are recognised by class name, so this module imports on 4.0,
which has no filter classes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_client.columns import field_type
from statestore.model.partitions import Range, Region
from statestore.model.schema import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, Field, Key, Schema

# Beyond this many boxes (the product of the intervals per row key), planning uses each row key's hull.
MAX_REGIONS = 256

_COMPARISONS = {
    "EqualTo": "eq",
    "EqualNullSafe": "eq",
    "GreaterThan": "gt",
    "GreaterThanOrEqual": "ge",
    "LessThan": "lt",
    "LessThanOrEqual": "le",
    "In": "in",
    "StringStartsWith": "starts_with",
}
# Types whose comparisons pyarrow evaluates exactly as Spark does.
_COMPARABLE = {"int", "long", "string", "bytes", "boolean"}


@dataclass(frozen=True)
class Predicate:
    """One pushed filter: ``column op value``. ``op`` is eq, lt, le, gt, ge, in (``value`` a sorted tuple),
    starts_with, null or not_null."""

    column: str
    op: str
    value: Any = None

    def __str__(self) -> str:
        if self.op in ("null", "not_null"):
            return f"{self.column} {'IS' if self.op == 'null' else 'IS NOT'} NULL"
        return f"{self.column} {self.op} {self.value!r}"


def predicate_of(spark_filter: object, schema: Schema) -> Predicate | None:
    """The predicate for one of Spark's ``pyspark.sql.datasource`` filters, or None to leave it to Spark."""
    kind = type(spark_filter).__name__
    attribute = getattr(spark_filter, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None  # a nested field or not a column filter (e.g. Not)
    field = next((f for f in schema.all_fields if f.name == attribute[0]), None)
    if field is None:
        return None
    if kind == "IsNull":
        return Predicate(field.name, "null")
    if kind == "IsNotNull":
        return Predicate(field.name, "not_null")
    op = _COMPARISONS.get(kind)
    if op is None or field.type not in _COMPARABLE:
        return None
    value = getattr(spark_filter, "value", None)
    if op == "starts_with":
        return Predicate(field.name, op, value) if field.type == "string" and isinstance(value, str) else None
    if op == "in":
        if not isinstance(value, list | tuple):
            return None
        # ``x IN (1, NULL)`` holds only for x = 1: a null in the list never makes a row pass.
        values = [_checked(v, field) for v in value if v is not None]
        if any(v is None for v in values):
            return None
        return Predicate(field.name, op, tuple(sorted(set(values))))
    if value is None:
        # ``x <=> NULL`` is ``x IS NULL``; any other comparison with null holds for no row.
        return Predicate(field.name, "null") if kind == "EqualNullSafe" else None
    checked = _checked(value, field)
    return None if checked is None else Predicate(field.name, op, checked)


def _checked(value: object, field: Field) -> Any:
    """``value`` as a valid value of ``field``'s type, or None if it is not one."""
    if field.type in ("int", "long"):
        low, high = (INT32_MIN, INT32_MAX) if field.type == "int" else (INT64_MIN, INT64_MAX)
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return value if ok else None
    if field.type == "string":
        return value if isinstance(value, str) else None
    if field.type == "bytes":
        return bytes(value) if isinstance(value, bytes | bytearray) else None
    return value if isinstance(value, bool) else None


def push(filters: Iterable[Any], schema: Schema) -> tuple[tuple[Predicate, ...], list[Any]]:
    """``(predicates taken, filters left to Spark)``; the second holds Spark's own objects, unchanged."""
    taken: list[Predicate] = []
    rest = []
    for spark_filter in filters:
        predicate = predicate_of(spark_filter, schema)
        if predicate is None:
            rest.append(spark_filter)
        else:
            taken.append(predicate)
    return tuple(taken), rest


# --- evaluation -----------------------------------------------------------------------------------


def predicates_expression(predicates: Sequence[Predicate], schema: Schema) -> pc.Expression | None:
    """One Arrow expression holding exactly for the rows that pass every predicate (None: no predicate)."""
    types = {f.name: field_type(f.type) for f in schema.all_fields}
    parts = [_expression(p, types[p.column]) for p in predicates]
    return reduce(lambda a, b: a & b, parts) if parts else None


def _expression(p: Predicate, arrow_type: pa.DataType) -> pc.Expression:
    column = pc.field(p.column)
    if p.op == "null":
        return column.is_null()
    if p.op == "not_null":
        return column.is_valid()
    if p.op == "in":
        return column.isin(pa.array(p.value, type=arrow_type))
    if p.op == "starts_with":
        return pc.starts_with(column, pattern=p.value)
    value = pa.scalar(p.value, type=arrow_type)
    comparisons = {
        "eq": column == value,
        "lt": column < value,
        "le": column <= value,
        "gt": column > value,
        "ge": column >= value,
    }
    return comparisons[p.op]


def and_expressions(*expressions: pc.Expression | None) -> pc.Expression | None:
    present = [e for e in expressions if e is not None]
    return reduce(lambda a, b: a & b, present) if present else None


# --- regions of key space -------------------------------------------------------------------------

# A set of keys of one row key: sorted, disjoint ``[low, high)`` intervals; ``high`` None is unbounded.
Interval = tuple[Key, Key | None]


def key_regions(predicates: Sequence[Predicate], schema: Schema, within: Region) -> list[Region]:
    """Regions (boxes of key space, disjoint) that hold every row key passing the predicates in ``within``.

    An empty list means no row can pass. The boxes are exact for comparisons, ``IN`` lists and prefixes
    on row keys; when there would be more than :data:`MAX_REGIONS` of them, each row key's hull is used
    instead (planning then reads more, never less: the predicates are still applied to every row).
    """
    per_key: list[list[Interval]] = []
    for field, key_range in zip(schema.row_keys, within.ranges, strict=True):
        intervals: list[Interval] = [(key_range.min, key_range.max)]
        for predicate in predicates:
            if predicate.column == field.name:
                intervals = _intersect(intervals, _intervals(predicate, field))
        if not intervals:
            return []
        per_key.append(intervals)
    count = 1
    for intervals in per_key:
        count *= len(intervals)
    if count > MAX_REGIONS:
        per_key = [[(intervals[0][0], intervals[-1][1])] for intervals in per_key]
    return [Region(tuple(Range(low, high) for low, high in box)) for box in itertools.product(*per_key)]


def _intervals(p: Predicate, field: Field) -> list[Interval]:
    """The keys of ``field`` for which ``p`` can hold."""
    lowest = field.key_type.minimum
    if p.op == "null":
        return []  # row keys are never null
    if p.op == "not_null":
        return [(lowest, None)]
    if p.op == "eq":
        return [(p.value, _successor(p.value, field))]
    if p.op == "in":
        return _intersect([(lowest, None)], _union([(v, _successor(v, field)) for v in p.value]))
    if p.op == "starts_with":
        return [(p.value, _prefix_end(p.value))]
    if p.op == "ge":
        return [(p.value, None)]
    if p.op == "gt":
        after = _successor(p.value, field)
        return [] if after is None else [(after, None)]
    if p.op == "lt":
        return [(lowest, p.value)] if lowest < p.value else []
    if p.op == "le":
        return [(lowest, _successor(p.value, field))]
    raise ValueError(f"unknown predicate operator {p.op!r}")


def _successor(value: Key, field: Field) -> Key | None:
    """The smallest key above ``value``; None when there is none (the type's maximum)."""
    if isinstance(value, int):
        return None if value >= (INT32_MAX if field.type == "int" else INT64_MAX) else value + 1
    if isinstance(value, str):
        return value + "\0"
    return value + b"\0"


def _prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix``; None if there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code == 0xD800:  # surrogates cannot appear in a str that encodes to UTF-8
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None


def _below(a: Key | None, b: Key | None) -> bool:
    """``a < b`` for upper bounds, where None is unbounded."""
    return b is None if a is None else (b is None or a < b)  # type: ignore[operator]


def _union(intervals: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for low, high in sorted(intervals, key=lambda i: i[0]):
        if out and not _below(out[-1][1], low):  # overlaps or touches the previous one
            previous_low, previous_high = out[-1]
            out[-1] = (previous_low, high if _below(previous_high, high) else previous_high)
        else:
            out.append((low, high))
    return out


def _intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a_low, a_high in a:
        for b_low, b_high in b:
            low = max(a_low, b_low)
            high = a_high if _below(a_high, b_high) else b_high
            if _below(low, high):
                out.append((low, high))
    return out
