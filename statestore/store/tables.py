"""A table's identity and settings (:class:`TableInfo`), and the checks on them.

The index that holds them is the :class:`statestore.store.ports.TableIndex` port.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from statestore.errors import InvalidSchemaError, StateStoreError
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.model.schema import Schema

MAX_TABLE_NAME_LENGTH = 255
# Where a table's file references live: on its transaction log, or as rows in PostgreSQL (design record 002).
FILE_STORE_LOG = "log"
FILE_STORE_POSTGRES = "postgres"
FILE_STORES = (FILE_STORE_LOG, FILE_STORE_POSTGRES)


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
        return cls(
            str(uuid.uuid4()), table_name, schema, props, now_millis(), file_store, tuple(allowed_senders)
        )

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
