"""The PostgreSQL schema migration, run by the stack at deploy time (a CDK trigger) in the database's VPC:
as the master user, create or complete the store's schema and the least-privilege role the committer and
the cleanup connect as (``statestore.adapters.postgres.schema.migrate``), with the password of the app secret.
Only this function may read the master secret."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger

from statestore.instance import (
    POSTGRES_HOST_ENV,
    POSTGRES_MASTER_SECRET_ARN_ENV,
    POSTGRES_SECRET_ARN_ENV,
    POSTGRES_SSLMODE_ENV,
)

logger = Logger()


def migrate_from_environment(environ: Mapping[str, str], endpoint_url: str | None = None) -> str:
    """Migrate the database the environment names; returns the role made for the functions."""
    from statestore.adapters.aws.clients import make_client
    from statestore.adapters.aws.secrets import database_settings
    from statestore.adapters.postgres import conninfo_from_secret
    from statestore.adapters.postgres.schema import migrate

    host = environ[POSTGRES_HOST_ENV]
    secrets = make_client("secretsmanager", endpoint_url=endpoint_url)
    master = database_settings(secrets, environ[POSTGRES_MASTER_SECRET_ARN_ENV], host)
    app = database_settings(secrets, environ[POSTGRES_SECRET_ARN_ENV], host)
    sslmode = environ.get(POSTGRES_SSLMODE_ENV) or "verify-full"
    role = str(app["username"])
    migrate(conninfo_from_secret(master, sslmode=sslmode), app_role=role, app_password=str(app["password"]))
    return role


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    role = migrate_from_environment(os.environ)
    logger.info("database schema migrated", extra={"app_role": role})
    return {"app_role": role}
