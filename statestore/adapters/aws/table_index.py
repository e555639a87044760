"""The table index on DynamoDB: ``tables_by_id`` holds each table's record, ``tables_by_name`` maps a name to
its id. Both are written in one TransactWriteItems whose conditions keep names and ids unique."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from statestore import instance
from statestore.adapters.aws.clients import AwsCaller, cancellation_reasons, pages
from statestore.errors import StateStoreError, TableAlreadyExistsError, TableNotFoundError
from statestore.model.schema import Schema
from statestore.store.ports import TableIndex
from statestore.store.tables import FILE_STORE_LOG, TableInfo, check_table_name, with_property

_ID = instance.TABLE_ID
_NAME = instance.TABLE_NAME
_SCHEMA = "schema"  # JSON
_PROPERTIES = "properties"  # JSON object of strings
_CREATED = "created_time"
_FILE_STORE = "file_store"  # absent on records written before tables could keep files in PostgreSQL: "log"
_SENDERS = "allowed_senders"  # JSON list of principal ids; absent: anyone may send
_DELETING = "deleting"  # BOOL true once the table's delete has begun; absent otherwise

_RENAME_ATTEMPTS = 5


class DynamoDBTableIndex(TableIndex):
    def __init__(
        self, dynamodb_client: Any, by_id_table: str, by_name_table: str, caller: AwsCaller | None = None
    ) -> None:
        self.dynamodb = dynamodb_client
        self.by_id_table = by_id_table
        self.by_name_table = by_name_table
        self.call = caller or AwsCaller()

    def create(self, table: TableInfo) -> None:
        def conflict(code: str, error: ClientError) -> StateStoreError | None:
            if code != "TransactionCanceledException":
                return None
            id_reason, name_reason = (cancellation_reasons(error) + ["None", "None"])[:2]
            if name_reason == "ConditionalCheckFailed":
                return TableAlreadyExistsError(table.table_name)
            if id_reason == "ConditionalCheckFailed":
                return StateStoreError(f"table id {table.table_id!r} is already used")
            return None

        self.call(
            f"create table {table.table_name!r}",
            self.dynamodb.transact_write_items,
            conflict,
            TransactItems=[
                {"Put": self._put(self.by_id_table, _record_item(table), _ID)},
                {"Put": self._put(self.by_name_table, _name_item(table.table_name, table.table_id), _NAME)},
            ],
        )

    def get(self, table_id: str) -> TableInfo:
        item = self._get(self.by_id_table, {_ID: {"S": table_id}}, f"read table {table_id!r}")
        if item is None:
            raise TableNotFoundError(table_id)
        return _record(item)

    def get_by_name(self, table_name: str) -> TableInfo:
        item = self._get(self.by_name_table, {_NAME: {"S": table_name}}, f"look up table {table_name!r}")
        if item is None:
            raise TableNotFoundError(table_name)
        table = self._get(self.by_id_table, {_ID: item[_ID]}, f"read table {table_name!r}")
        if table is None or table[_NAME]["S"] != table_name:  # deleted or renamed in between
            raise TableNotFoundError(table_name)
        return _record(table)

    def list(self) -> list[TableInfo]:
        request: dict[str, Any] = {"TableName": self.by_id_table, "ConsistentRead": True}
        tables = [
            _record(item)
            for response in pages(self.call, "list tables", self.dynamodb.scan, request)
            for item in response.get("Items", [])
        ]
        return sorted(tables, key=lambda t: t.table_name)

    def rename(self, table_id: str, new_name: str) -> TableInfo:
        check_table_name(new_name)
        for _ in range(_RENAME_ATTEMPTS):
            table = self.get(table_id)
            if table.table_name == new_name:
                return table
            old_name = table.table_name
            outcome: list[str] = []

            def conflict(
                code: str, error: ClientError, outcome: list[str] = outcome
            ) -> StateStoreError | None:
                if code != "TransactionCanceledException":
                    return None
                reasons = cancellation_reasons(error) + ["None"] * 3
                if reasons[2] == "ConditionalCheckFailed":
                    return TableAlreadyExistsError(new_name)
                if "ConditionalCheckFailed" in reasons:
                    outcome.append("moved")  # renamed or deleted meanwhile: read it again
                    return StateStoreError("table changed during rename")
                return None

            try:
                self.call(
                    f"rename table {old_name!r} to {new_name!r}",
                    self.dynamodb.transact_write_items,
                    conflict,
                    TransactItems=[
                        {
                            "Update": {
                                "TableName": self.by_id_table,
                                "Key": {_ID: {"S": table_id}},
                                "UpdateExpression": "SET #n = :new",
                                "ConditionExpression": "#n = :old",
                                "ExpressionAttributeNames": {"#n": _NAME},
                                "ExpressionAttributeValues": {
                                    ":new": {"S": new_name},
                                    ":old": {"S": old_name},
                                },
                            }
                        },
                        {
                            "Delete": {
                                "TableName": self.by_name_table,
                                "Key": {_NAME: {"S": old_name}},
                                "ConditionExpression": "#i = :id",
                                "ExpressionAttributeNames": {"#i": _ID},
                                "ExpressionAttributeValues": {":id": {"S": table_id}},
                            }
                        },
                        {"Put": self._put(self.by_name_table, _name_item(new_name, table_id), _NAME)},
                    ],
                )
            except StateStoreError:
                if outcome:
                    continue
                raise
            return table.renamed(new_name)
        raise StateStoreError(f"table {table_id!r} kept changing while being renamed; try again")

    def set_allowed_senders(self, table_id: str, senders: Sequence[str]) -> TableInfo:
        table = replace(self.get(table_id), allowed_senders=tuple(senders))  # checks the ids
        what = f"set the allowed senders of table {table.table_name!r}"
        self._set(table_id, what, _SENDERS, {"S": json.dumps(list(table.allowed_senders))})
        return table

    def set_property(self, table_id: str, name: str, value: str | None) -> TableInfo:
        # The properties are one JSON attribute: the update is conditional on the JSON read, so a property
        # another caller set meanwhile is read again and kept, never overwritten.
        for _ in range(_RENAME_ATTEMPTS):
            table = self.get(table_id)
            changed = with_property(table, name, value)
            moved: list[str] = []

            def conflict(code: str, error: ClientError, moved: list[str] = moved) -> StateStoreError | None:
                if code != "ConditionalCheckFailedException":
                    return None
                moved.append("moved")
                return StateStoreError("table changed while its property was set")

            try:
                self.call(
                    f"set property {name!r} of table {table.table_name!r}",
                    self.dynamodb.update_item,
                    conflict,
                    TableName=self.by_id_table,
                    Key={_ID: {"S": table_id}},
                    UpdateExpression="SET #p = :new",
                    ConditionExpression="#p = :old",
                    ExpressionAttributeNames={"#p": _PROPERTIES},
                    ExpressionAttributeValues={
                        ":new": {"S": _properties_json(changed)},
                        ":old": {"S": _properties_json(table)},
                    },
                )
            except StateStoreError:
                if not moved:
                    raise
                continue  # changed (or deleted: the next read says so) meanwhile
            return changed
        raise StateStoreError(
            f"table {table_id!r} kept changing while its property {name!r} was set; try again"
        )

    def mark_deleting(self, table_id: str) -> TableInfo:
        return _record(
            self._set(table_id, f"mark table {table_id!r} as being deleted", _DELETING, {"BOOL": True})
        )

    def _set(self, table_id: str, what: str, attribute: str, value: dict[str, Any]) -> dict[str, Any]:
        """Set one attribute of an existing table's record; returns the record's item after. Raises
        TableNotFoundError for an unknown id (nothing is written)."""

        def missing(code: str, error: ClientError) -> StateStoreError | None:
            return TableNotFoundError(table_id) if code == "ConditionalCheckFailedException" else None

        response = self.call(
            what,
            self.dynamodb.update_item,
            missing,
            TableName=self.by_id_table,
            Key={_ID: {"S": table_id}},
            UpdateExpression="SET #a = :v",
            ConditionExpression="attribute_exists(#i)",
            ExpressionAttributeNames={"#a": attribute, "#i": _ID},
            ExpressionAttributeValues={":v": value},
            ReturnValues="ALL_NEW",
        )
        item: dict[str, Any] = response["Attributes"]
        return item

    def delete(self, table_id: str) -> None:
        table = self.get(table_id)

        def missing(code: str, error: ClientError) -> StateStoreError | None:
            if code == "TransactionCanceledException" and "ConditionalCheckFailed" in cancellation_reasons(
                error
            ):
                return TableNotFoundError(table_id)  # deleted (or renamed) by someone else meanwhile
            return None

        self.call(
            f"delete table {table.table_name!r}",
            self.dynamodb.transact_write_items,
            missing,
            TransactItems=[
                {
                    "Delete": {
                        "TableName": self.by_id_table,
                        "Key": {_ID: {"S": table_id}},
                        "ConditionExpression": "#n = :name",
                        "ExpressionAttributeNames": {"#n": _NAME},
                        "ExpressionAttributeValues": {":name": {"S": table.table_name}},
                    }
                },
                {
                    "Delete": {
                        "TableName": self.by_name_table,
                        "Key": {_NAME: {"S": table.table_name}},
                        "ConditionExpression": "#i = :id",
                        "ExpressionAttributeNames": {"#i": _ID},
                        "ExpressionAttributeValues": {":id": {"S": table_id}},
                    }
                },
            ],
        )

    def _put(self, table_name: str, item: dict[str, Any], key: str) -> dict[str, Any]:
        return {
            "TableName": table_name,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#k)",
            "ExpressionAttributeNames": {"#k": key},
        }

    def _get(self, table_name: str, key: dict[str, Any], what: str) -> dict[str, Any] | None:
        response = self.call(what, self.dynamodb.get_item, TableName=table_name, Key=key, ConsistentRead=True)
        item: dict[str, Any] | None = response.get("Item")
        return item


def _record_item(table: TableInfo) -> dict[str, Any]:
    return {
        _ID: {"S": table.table_id},
        _NAME: {"S": table.table_name},
        _SCHEMA: {"S": json.dumps(table.schema.to_json(), sort_keys=True)},
        _PROPERTIES: {"S": _properties_json(table)},
        _CREATED: {"N": str(table.created_time)},
        _FILE_STORE: {"S": table.file_store},
        **({_SENDERS: {"S": json.dumps(list(table.allowed_senders))}} if table.allowed_senders else {}),
        **({_DELETING: {"BOOL": True}} if table.deleting else {}),
    }


def _properties_json(table: TableInfo) -> str:
    return json.dumps(dict(table.properties), sort_keys=True)


def _name_item(table_name: str, table_id: str) -> dict[str, Any]:
    return {_NAME: {"S": table_name}, _ID: {"S": table_id}}


def _record(item: dict[str, Any]) -> TableInfo:
    return TableInfo(
        table_id=item[_ID]["S"],
        table_name=item[_NAME]["S"],
        schema=Schema.from_json(item[_SCHEMA]["S"]),
        properties=json.loads(item[_PROPERTIES]["S"]),
        created_time=int(item[_CREATED]["N"]),
        file_store=item.get(_FILE_STORE, {}).get("S", FILE_STORE_LOG),
        allowed_senders=tuple(json.loads(item[_SENDERS]["S"])) if _SENDERS in item else (),
        deleting=item.get(_DELETING, {}).get("BOOL") is True,
    )
