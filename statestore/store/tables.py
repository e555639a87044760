"""A table's identity and settings (:class:`TableInfo`), and the checks on them.

The index that holds them is the :class:`statestore.store.ports.TableIndex` port.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from statestore.errors import InvalidSchemaError, StateStoreError, TableBeingDeletedError, TableNotFoundError
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.model.schema import Schema

MAX_TABLE_NAME_LENGTH = 255
# Where a table's file references live: on its transaction log, or as rows in PostgreSQL (design record 002).
FILE_STORE_LOG = "log"
FILE_STORE_POSTGRES = "postgres"
FILE_STORES = (FILE_STORE_LOG, FILE_STORE_POSTGRES)
# The table property that asks the upkeep to keep the table's queryable view current
# (statestore.engine.queryable_view), "true" or "false" (absent: false).
QUERYABLE_VIEW_PROPERTY = "queryable_view"
_SWITCH_VALUES = {"true": True, "false": False}


@dataclass(frozen=True)
class TableInfo:
    """A table's identity: a generated ``table_id`` that never changes, and a unique, renameable name.

    ``file_store`` says where its file references live (:data:`FILE_STORES`), chosen when it is created.
    ``allowed_senders``: the principals whose commit requests the committer accepts for the table (IAM
    unique ids, as SQS reports a message's sender: see :mod:`statestore.services.committer.senders`); empty
    accepts anyone the queue lets send.
    """

    table_id: str
    table_name: str
    schema: Schema
    properties: Mapping[str, str] = field(default_factory=dict)
    created_time: int = 0  # epoch milliseconds
    file_store: str = FILE_STORE_LOG
    allowed_senders: tuple[str, ...] = ()
    # Its delete has begun (the mark is the first thing a delete writes; the record is the last it deletes).
    deleting: bool = False

    def __post_init__(self) -> None:
        check_file_store(self.file_store)
        check_senders(self.allowed_senders)

    @property
    def data_prefix(self) -> str:
        """Where the table's data files go (``tables/<table id>/data/``): a new file's name must be a key
        under it (:mod:`statestore.model.names`)."""
        return layout.data_prefix(self.table_id)

    @property
    def files_in_rows(self) -> bool:
        """Whether the table's file references are rows of a file-reference store, not on its log."""
        return self.file_store != FILE_STORE_LOG

    @property
    def queryable_view(self) -> bool:
        """Whether the upkeep keeps the table's queryable view current (its property
        :data:`QUERYABLE_VIEW_PROPERTY`). Raises StateStoreError naming the value for one that is neither
        ``true`` nor ``false`` (a record written before the property was checked may hold one)."""
        return queryable_view_setting(self.table_name, self.properties.get(QUERYABLE_VIEW_PROPERTY))

    @classmethod
    def new(
        cls,
        table_name: str,
        schema: Schema,
        properties: Mapping[str, str] | None = None,
        file_store: str = FILE_STORE_LOG,
        allowed_senders: Sequence[str] = (),
    ) -> TableInfo:
        """A new table's info with a fresh id, after checking the name, properties, file store and senders."""
        check_table_name(table_name)
        props = dict(properties or {})
        for key, value in props.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise StateStoreError(f"table properties must map strings to strings, got {key!r}: {value!r}")
        check_properties(table_name, props, file_store)
        return cls(
            str(uuid.uuid4()), table_name, schema, props, now_millis(), file_store, tuple(allowed_senders)
        )

    def live(self) -> TableInfo:
        """This record, for a table whose delete has not begun. Raises TableBeingDeletedError otherwise."""
        if self.deleting:
            raise TableBeingDeletedError(self.table_id, self.table_name)
        return self

    def renamed(self, new_name: str) -> TableInfo:
        return replace(self, table_name=new_name)

    def to_json(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "table_name": self.table_name,
            "schema": self.schema.to_json(),
            "properties": dict(self.properties),
            "created_time": self.created_time,
            "file_store": self.file_store,
            "allowed_senders": list(self.allowed_senders),
            **({"deleting": True} if self.deleting else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableInfo:
        try:
            return cls(
                table_id=data["table_id"],
                table_name=data["table_name"],
                schema=Schema.from_json(data["schema"]),
                properties=dict(data.get("properties", {})),
                created_time=int(data.get("created_time", 0)),
                file_store=data.get("file_store", FILE_STORE_LOG),
                allowed_senders=tuple(data.get("allowed_senders", ())),
                deleting=data.get("deleting", False) is True,
            )
        except KeyError as e:
            raise StateStoreError(f"table record is missing {e.args[0]!r}") from e


# An IAM principal's unique id as SQS reports a message's sender (``SenderId``): a user's (``AIDA...``), a
# role's (``AROA...``, then ``:<session name>`` for the session that sent), or an account's root (12 digits).
_SENDER_ID = re.compile(r"^[A-Z0-9]{12,128}(:[\w+=,.@-]{1,64})?$")


def check_sender_id(sender: object) -> None:
    """Raise StateStoreError unless ``sender`` is a principal id a message's sender can match: a user's or
    role's unique id (any session of the role), or ``<role id>:<session name>`` (that session only)."""
    if isinstance(sender, str) and _SENDER_ID.match(sender):
        return
    hint = ""
    if isinstance(sender, str) and sender.startswith("arn:"):
        hint = (
            ": give the principal's unique id, which SQS reports as a message's sender, not its ARN "
            "(aws iam get-role --role-name NAME --query Role.RoleId; the stack outputs each scoped "
            "table's job role id)"
        )
    raise StateStoreError(f"{sender!r} is not an IAM user or role id (AIDA..., AROA...){hint}")


def check_senders(senders: object) -> None:
    """Raise StateStoreError unless ``senders`` is a tuple of principal ids a sender can be matched to."""
    if not isinstance(senders, tuple):
        raise StateStoreError(f"a table's allowed senders must be a tuple of ids, got {senders!r}")
    for sender in senders:
        check_sender_id(sender)


def with_property(table: TableInfo, name: str, value: str | None) -> TableInfo:
    """``table`` with its property ``name`` set to ``value`` (None: removed), checked as at creation.
    Raises StateStoreError for a name or value that is not a string, or a value the store cannot use."""
    if not isinstance(name, str) or not name or not (value is None or isinstance(value, str)):
        raise StateStoreError(f"a table property is a name and a string value, got {name!r}: {value!r}")
    properties = {k: v for k, v in table.properties.items() if k != name}
    if value is not None:
        properties[name] = value
    check_properties(table.table_name, properties, table.file_store)
    return replace(table, properties=properties)


def queryable_view_setting(table_name: str, raw: str | None) -> bool:
    """The value of a table's :data:`QUERYABLE_VIEW_PROPERTY` (None: not set, false). Raises StateStoreError
    naming the table and the value for anything but ``true`` or ``false``."""
    if raw is None:
        return False
    try:
        return _SWITCH_VALUES[raw]
    except KeyError:
        raise StateStoreError(
            f"table {table_name!r}: property {QUERYABLE_VIEW_PROPERTY}={raw!r} must be true or false"
        ) from None


def check_properties(table_name: str, properties: Mapping[str, str], file_store: str) -> None:
    """Raise StateStoreError for a property the store reads that has a value it cannot use: a
    :data:`QUERYABLE_VIEW_PROPERTY` that is not ``true``/``false``, or ``true`` on a table whose file
    references are not on its log (the view is kept from the log's file transactions)."""
    if queryable_view_setting(table_name, properties.get(QUERYABLE_VIEW_PROPERTY)) and (
        file_store != FILE_STORE_LOG
    ):
        raise StateStoreError(
            f"table {table_name!r} keeps its file references in {file_store}: it cannot have a queryable "
            f"view, which is kept from the file transactions of the log (drop {QUERYABLE_VIEW_PROPERTY})"
        )


def check_file_store(file_store: object) -> None:
    """Raise StateStoreError unless ``file_store`` names a place file references can live."""
    if file_store not in FILE_STORES:
        raise StateStoreError(
            f"unknown file store {file_store!r} for a table's file references: use one of "
            + ", ".join(FILE_STORES)
        )


def check_table_name(name: object) -> None:
    """Raise StateStoreError unless ``name`` is a usable table name (non-empty, printable, not too long)."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise StateStoreError(f"a table name must be a non-empty string without surrounding spaces: {name!r}")
    if len(name) > MAX_TABLE_NAME_LENGTH or not name.isprintable():
        raise StateStoreError(
            f"table name {name[:40]!r}... must be printable and at most {MAX_TABLE_NAME_LENGTH} characters"
        )


def parse_schema(schema: Schema | Mapping[str, Any] | str) -> Schema:
    """A :class:`Schema` from itself, its JSON form or a JSON string (raises InvalidSchemaError)."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, Mapping | str | bytes):
        return Schema.from_json(dict(schema) if isinstance(schema, Mapping) else schema)
    raise InvalidSchemaError(f"expected a Schema or its JSON form, got {type(schema).__name__}")


def deleted_meanwhile(table_check: Callable[[], object] | None) -> str | None:
    """Why the table is gone, or is being deleted (``table_check`` raised TableNotFoundError); None when it
    is not, or there is no check."""
    if table_check is None:
        return None
    try:
        table_check()
    except TableNotFoundError as e:
        return str(e)
    return None
