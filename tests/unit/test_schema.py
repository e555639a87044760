"""Schemas: what a valid schema is, its JSON form, and which key values each type accepts."""

from __future__ import annotations

import json

import pytest

from statestore.errors import InvalidKeyError, InvalidSchemaError, StateStoreError
from statestore.model.schema import Field, KeyType, Schema


def test_schema_of_keeps_fields_in_order_by_kind() -> None:
    schema = Schema.of({"a": "string", "b": "long"}, sort_keys={"ts": "long"}, values={"v": "double"})

    assert [f.name for f in schema.row_keys] == ["a", "b"]
    assert schema.row_key_types == (KeyType.STRING, KeyType.LONG)
    assert [f.name for f in schema.all_fields] == ["a", "b", "ts", "v"]


def test_schema_without_row_keys_is_rejected() -> None:
    with pytest.raises(InvalidSchemaError, match="at least one row key"):
        Schema.of({}, values={"v": "long"})


@pytest.mark.parametrize(
    ("row_keys", "sort_keys", "values"),
    [
        ({"id": "string"}, {"id": "long"}, {}),
        ({"id": "string"}, {}, {"id": "long"}),
        ([("id", "string"), ("id", "long")], {}, {}),
        ({"id": "string"}, {"ts": "long"}, {"ts": "long"}),
    ],
    ids=["row-and-sort", "row-and-value", "two-row-keys", "sort-and-value"],
)
def test_a_field_name_used_twice_is_rejected(
    row_keys: dict[str, str] | list[tuple[str, str]], sort_keys: dict[str, str], values: dict[str, str]
) -> None:
    with pytest.raises(InvalidSchemaError, match="used more than once"):
        Schema.of(row_keys, sort_keys, values)


@pytest.mark.parametrize(
    ("row_keys", "sort_keys", "values", "kind"),
    [
        ({"id": "double"}, {}, {}, "row key"),
        ({"id": "boolean"}, {}, {}, "row key"),
        ({"id": "string"}, {"ts": "float"}, {}, "sort key"),
        ({"id": "String"}, {}, {}, "row key"),
        ({"id": "string"}, {}, {"v": "decimal"}, "value"),
    ],
)
def test_a_field_of_a_type_its_kind_does_not_allow_is_rejected_naming_the_field(
    row_keys: dict[str, str], sort_keys: dict[str, str], values: dict[str, str], kind: str
) -> None:
    with pytest.raises(InvalidSchemaError, match=f"{kind} field .* has type") as caught:
        Schema.of(row_keys, sort_keys, values)

    assert "allowed" in str(caught.value)


def test_value_fields_may_have_non_key_types() -> None:
    schema = Schema.of({"id": "bytes"}, values={"d": "double", "f": "float", "b": "boolean", "i": "int"})

    assert [f.type for f in schema.values] == ["double", "float", "boolean", "int"]


def test_a_field_with_an_empty_name_is_rejected() -> None:
    with pytest.raises(InvalidSchemaError, match="empty or non-string name"):
        Schema((Field("", "string"),))


def test_schema_errors_are_value_errors_and_state_store_errors() -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        Schema(())

    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, StateStoreError)


@pytest.mark.parametrize(
    "schema",
    [
        Schema.of({"id": "string"}),
        Schema.of(
            {"a": "int", "b": "bytes"}, sort_keys={"ts": "long"}, values={"v": "double", "ok": "boolean"}
        ),
    ],
)
def test_schema_json_round_trips_through_dict_and_text(schema: Schema) -> None:
    assert Schema.from_json(schema.to_json()) == schema
    assert Schema.from_json(json.dumps(schema.to_json())) == schema
    assert Schema.from_json(json.dumps(schema.to_json()).encode()) == schema


def test_schema_json_without_sort_keys_or_values_means_none() -> None:
    schema = Schema.from_json({"row_keys": [{"name": "id", "type": "long"}]})

    assert schema == Schema.of({"id": "long"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not valid JSON"),
        ([], "must be a JSON object"),
        ({"row_keys": [{"name": "id", "type": "long"}], "extra": []}, "unknown schema keys"),
        ({"row_keys": {"name": "id", "type": "long"}}, "must be a list"),
        ({"row_keys": [{"name": "id"}]}, "entry must be"),
        ({"row_keys": [{"name": "id", "type": "long", "nullable": True}]}, "entry must be"),
        ({"row_keys": []}, "at least one row key"),
        ({"row_keys": [{"name": "id", "type": "uuid"}]}, "has type 'uuid'"),
    ],
)
def test_malformed_schema_json_is_rejected_saying_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(InvalidSchemaError, match=message):
        Schema.from_json(data)


@pytest.mark.parametrize(
    ("key_type", "value"),
    [
        (KeyType.INT, -(2**31)),
        (KeyType.INT, 2**31 - 1),
        (KeyType.INT, 0),
        (KeyType.LONG, -(2**63)),
        (KeyType.LONG, 2**63 - 1),
        (KeyType.STRING, ""),
        (KeyType.STRING, "héllo"),
        (KeyType.BYTES, b""),
        (KeyType.BYTES, b"\x00\xff"),
    ],
)
def test_key_check_accepts_values_of_the_type_within_range(
    key_type: KeyType, value: int | str | bytes
) -> None:
    assert key_type.check(value, "k") == value


@pytest.mark.parametrize(
    ("key_type", "value", "message"),
    [
        (KeyType.INT, 2**31, "out of range"),
        (KeyType.INT, -(2**31) - 1, "out of range"),
        (KeyType.LONG, 2**63, "out of range"),
        (KeyType.LONG, -(2**63) - 1, "out of range"),
        (KeyType.INT, True, "needs an integer"),
        (KeyType.LONG, 1.0, "needs an integer"),
        (KeyType.LONG, "1", "needs an integer"),
        (KeyType.STRING, b"a", "needs a str"),
        (KeyType.STRING, 1, "needs a str"),
        (KeyType.BYTES, "a", "needs bytes"),
        (KeyType.BYTES, bytearray(b"a"), "needs bytes"),
    ],
)
def test_key_check_rejects_wrong_types_and_out_of_range_values_naming_the_field(
    key_type: KeyType, value: object, message: str
) -> None:
    with pytest.raises(InvalidKeyError, match=message) as caught:
        key_type.check(value, "my_field")

    assert "my_field" in str(caught.value)


def test_each_key_type_minimum_is_the_smallest_valid_value() -> None:
    for key_type in KeyType:
        assert key_type.check(key_type.minimum, "k") == key_type.minimum
    with pytest.raises(InvalidKeyError):
        KeyType.INT.check(KeyType.INT.minimum - 1, "k")  # type: ignore[operator]
    with pytest.raises(InvalidKeyError):
        KeyType.LONG.check(KeyType.LONG.minimum - 1, "k")  # type: ignore[operator]


@pytest.mark.parametrize(
    ("key_type", "value"),
    [(KeyType.BYTES, b"\x00\x01\xfe"), (KeyType.STRING, "abc"), (KeyType.LONG, -5), (KeyType.INT, None)],
)
def test_key_values_round_trip_through_json(key_type: KeyType, value: int | str | bytes | None) -> None:
    encoded = json.loads(json.dumps(key_type.to_json(value)))

    assert key_type.from_json(encoded) == value


def test_bytes_key_with_invalid_base64_is_rejected() -> None:
    with pytest.raises(InvalidKeyError, match="invalid base64"):
        KeyType.BYTES.from_json("not base64!")
