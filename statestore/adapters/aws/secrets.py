"""The PostgreSQL database's connection settings from Secrets Manager, for the deployed functions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from statestore.adapters.aws.clients import AwsCaller
from statestore.errors import StateStoreError
from statestore.instance import POSTGRES_DATABASE_NAME


def database_settings(
    secrets: Any, secret_arn: str, host: str, caller: AwsCaller | None = None
) -> dict[str, Any]:
    """The fields of the database secret (the JSON RDS writes: username, password, port, dbname...), with
    ``host`` put in place of the secret's own (the secret names the cluster; clients connect to ``host``,
    the RDS Proxy's endpoint when the stack has one) and the stack's database name where it names none.

    Raises the typed errors of :func:`statestore.adapters.aws.clients.translate_error` (AccessDeniedError when
    the role may not read it), StateStoreError when the secret holds no JSON object.
    """
    call = caller or AwsCaller()
    response = call(f"read the database secret {secret_arn}", secrets.get_secret_value, SecretId=secret_arn)
    try:
        fields = json.loads(response["SecretString"])
    except (KeyError, ValueError) as e:
        raise StateStoreError(f"the database secret {secret_arn} holds no JSON string") from e
    if not isinstance(fields, Mapping):
        raise StateStoreError(f"the database secret {secret_arn} holds no JSON object")
    return {**fields, "host": host, "dbname": fields.get("dbname") or POSTGRES_DATABASE_NAME}
