"""Table schemas: row key fields, sort key fields and value fields, with validation and a JSON form."""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from statestore.errors import InvalidKeyError, InvalidSchemaError

# A key value as Python holds it: ``int`` for int/long fields, ``str`` for string, ``bytes`` for bytes.
Key = int | str | bytes

# What the codecs can hold: Parquet snapshots store ``int`` keys and partition dimensions as int32, and
# ``long`` keys, row counts and update times as int64. JSON holds any integer, so these are the limits.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def integer_problem(value: object, low: int, high: int, stored_as: str) -> str | None:
    """Why ``value`` is not an integer from ``low`` to ``high`` inclusive, or None if it is one.

    ``stored_as`` names the column type that sets the limits (``"int64"``), for the message.

    A bool is an int in Python but not an integer to the codecs (JSON writes ``true``, which no integer
    field reads back), and a float such as ``1.0`` compares equal to an int but is written as ``1.0``.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return f"needs an integer, got {type(value).__name__} {value!r}"
    if not low <= value <= high:
        return f"value {value} is out of range: allowed {low} to {high} ({stored_as})"
    return None


class KeyType(enum.Enum):
    """The types a key field (row or sort) may have."""

    INT = "int"
    LONG = "long"
    STRING = "string"
    BYTES = "bytes"

    @property
    def minimum(self) -> Key:
        """The smallest value of this type: the inclusive minimum of the root partition."""
        minimums: dict[KeyType, Key] = {
            KeyType.INT: INT32_MIN,
            KeyType.LONG: INT64_MIN,
            KeyType.STRING: "",
            KeyType.BYTES: b"",
        }
        return minimums[self]

    def check(self, value: object, field_name: str) -> Key:
        """Return ``value`` if it is a valid value of this type, else raise :class:`InvalidKeyError`."""
        if self in (KeyType.INT, KeyType.LONG):
            # int keys are 32-bit and long keys 64-bit: the widths of their Parquet snapshot columns.
            if self is KeyType.INT:
                problem = integer_problem(value, INT32_MIN, INT32_MAX, "int32")
            else:
                problem = integer_problem(value, INT64_MIN, INT64_MAX, "int64")
            if problem is not None:
                raise InvalidKeyError(f"field {field_name!r} ({self.value}) {problem}")
            return cast(int, value)
        if self is KeyType.STRING:
            if not isinstance(value, str):
                raise InvalidKeyError(f"field {field_name!r} (string) needs a str, got {value!r}")
            return value
        if not isinstance(value, bytes):
            raise InvalidKeyError(f"field {field_name!r} (bytes) needs bytes, got {value!r}")
        return value

    def to_json(self, value: Key | None) -> Any:
        """The JSON form of a key value: bytes are base64, everything else as is."""
        if isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        return value

    def from_json(self, value: Any) -> Key | None:
        if value is None:
            return None
        if self is KeyType.BYTES:
            try:
                return base64.b64decode(value, validate=True)
            except (ValueError, TypeError) as e:
                raise InvalidKeyError(f"invalid base64 for a bytes key: {value!r}") from e
        return value


# Value fields may use any key type plus these.
VALUE_TYPES = frozenset({"int", "long", "string", "bytes", "double", "float", "boolean"})


@dataclass(frozen=True, slots=True)
class Field:
    """One named, typed column."""

    name: str
    type: str

    @property
    def key_type(self) -> KeyType:
        return KeyType(self.type)


@dataclass(frozen=True, slots=True)
class Schema:
    """A table's columns: row keys (partitioning), sort keys (ordering within a file) and values."""

    row_keys: tuple[Field, ...]
    sort_keys: tuple[Field, ...] = ()
    values: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        if not self.row_keys:
            raise InvalidSchemaError("a schema needs at least one row key field")
        seen: set[str] = set()
        for kind, fields in (
            ("row key", self.row_keys),
            ("sort key", self.sort_keys),
            ("value", self.values),
        ):
            for field in fields:
                if not isinstance(field.name, str) or not field.name:
                    raise InvalidSchemaError(f"{kind} field has an empty or non-string name: {field.name!r}")
                if field.name in seen:
                    raise InvalidSchemaError(f"field name {field.name!r} is used more than once")
                seen.add(field.name)
                allowed = VALUE_TYPES if kind == "value" else {t.value for t in KeyType}
                if field.type not in allowed:
                    raise InvalidSchemaError(
                        f"{kind} field {field.name!r} has type {field.type!r}; allowed: {sorted(allowed)}"
                    )

    @classmethod
    def of(
        cls,
        row_keys: Mapping[str, str] | Sequence[tuple[str, str]],
        sort_keys: Mapping[str, str] | Sequence[tuple[str, str]] = (),
        values: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    ) -> Schema:
        """A schema from ``name -> type`` pairs: ``Schema.of({"id": "string"}, values={"v": "long"})``."""

        def fields(pairs: Mapping[str, str] | Sequence[tuple[str, str]]) -> tuple[Field, ...]:
            items = pairs.items() if isinstance(pairs, Mapping) else pairs
            return tuple(Field(name, type_) for name, type_ in items)

        return cls(fields(row_keys), fields(sort_keys), fields(values))

    @property
    def row_key_types(self) -> tuple[KeyType, ...]:
        return tuple(f.key_type for f in self.row_keys)

    @property
    def all_fields(self) -> tuple[Field, ...]:
        return self.row_keys + self.sort_keys + self.values

    def to_json(self) -> dict[str, Any]:
        def encode(fields: tuple[Field, ...]) -> list[dict[str, str]]:
            return [{"name": f.name, "type": f.type} for f in fields]

        return {
            "row_keys": encode(self.row_keys),
            "sort_keys": encode(self.sort_keys),
            "values": encode(self.values),
        }

    @classmethod
    def from_json(cls, data: Any) -> Schema:
        """Parse a schema's JSON form, raising :class:`InvalidSchemaError` naming what is wrong."""
        if isinstance(data, str | bytes):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as e:
                raise InvalidSchemaError(f"schema is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise InvalidSchemaError("a schema must be a JSON object with row_keys, sort_keys and values")
        unknown = set(data) - {"row_keys", "sort_keys", "values"}
        if unknown:
            raise InvalidSchemaError(f"unknown schema keys: {sorted(unknown)}")

        def decode(name: str) -> tuple[Field, ...]:
            raw = data.get(name, [])
            if not isinstance(raw, list):
                raise InvalidSchemaError(f"schema {name!r} must be a list of {{name, type}} objects")
            out = []
            for item in raw:
                if not isinstance(item, dict) or set(item) != {"name", "type"}:
                    raise InvalidSchemaError(f"schema {name!r} entry must be {{name, type}}, got {item!r}")
                out.append(Field(item["name"], item["type"]))
            return tuple(out)

        return cls(decode("row_keys"), decode("sort_keys"), decode("values"))
