"""``statestore.connect``: the client of one instance, found the way every statestore tool finds it.

Where the instance is, first found wins: the ``instance`` argument (an instance id, the stack's
``StatestoreResources`` JSON, or :class:`~statestore.instance.ResourceNames`), ``$STATESTORE_RESOURCES``,
``$STATESTORE_INSTANCE_ID``, else ``local`` (the embedded default's instance). Where its services answer:
the endpoint arguments, else ``$AWS_ENDPOINT_URL`` / ``$AWS_ENDPOINT_URL_DYNAMODB`` (the lines ``statestore
local`` prints), else AWS itself. The CLI, the Spark data source and the jobs read the same variables, so a
shell set up once serves all of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from statestore.errors import ConnectionSettingsError
from statestore.instance import POSTGRES_URL_ENV, ResourceNames, ResourcesSettingError, resolve_resources
from statestore.services.client import StateStoreClient
from statestore.store.ports import FileReferenceStore

ENDPOINT_ENV = "AWS_ENDPOINT_URL"
DYNAMODB_ENDPOINT_ENV = "AWS_ENDPOINT_URL_DYNAMODB"


def connect(
    instance: str | ResourceNames | None = None,
    *,
    endpoint_url: str | None = None,
    dynamodb_endpoint_url: str | None = None,
    region: str | None = None,
    postgres_url: str | None = None,
    file_store: FileReferenceStore | None = None,
    environ: Mapping[str, str] | None = None,
) -> StateStoreClient:
    """The client of an instance: on AWS by default, or on local endpoints such as ``statestore local``'s.

    ``postgres_url`` (else ``$STATESTORE_POSTGRES_URL``) opens the PostgreSQL file store that holds the files
    of tables created with ``file_store="postgres"``; give ``file_store`` instead to pass one already open.
    Without either, such tables cannot be opened (the client says so when one is asked for).

    Nothing is created: the instance's tables, bucket and queues are the stack's (or the local runtime's).
    Raises :class:`~statestore.errors.ConnectionSettingsError` naming the setting that is wrong.
    """
    env = os.environ if environ is None else environ
    resources = _resources(instance, env)
    endpoint = _endpoint(endpoint_url, env, ENDPOINT_ENV, "endpoint_url")
    dynamodb_endpoint = _endpoint(dynamodb_endpoint_url, env, DYNAMODB_ENDPOINT_ENV, "dynamodb_endpoint_url")
    if file_store is not None and postgres_url is not None:
        raise ConnectionSettingsError("give postgres_url or file_store, not both")
    if file_store is None:
        url = postgres_url or env.get(POSTGRES_URL_ENV) or None
        if url is not None:
            file_store = _postgres_file_store(url)
    return StateStoreClient.for_aws(
        resources,
        endpoint,
        region=region,
        dynamodb_endpoint_url=dynamodb_endpoint,
        file_store=file_store,
    )


def _resources(instance: str | ResourceNames | None, env: Mapping[str, str]) -> ResourceNames:
    if isinstance(instance, ResourceNames):
        return instance
    is_json = instance is not None and instance.lstrip().startswith("{")
    try:
        return resolve_resources(
            instance if is_json else None, None if is_json else instance, environ=env,
            resources_setting="instance", instance_setting="instance",
        )  # fmt: skip
    except ResourcesSettingError as e:
        raise ConnectionSettingsError(str(e)) from None


def _endpoint(given: str | None, env: Mapping[str, str], variable: str, argument: str) -> str | None:
    url = given or env.get(variable) or None
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        where = argument if given else f"${variable}"
        raise ConnectionSettingsError(f"{where} {url!r} is not a URL; give one like http://127.0.0.1:4566")
    return url


def _postgres_file_store(url: str) -> FileReferenceStore:
    try:
        from statestore.adapters.postgres import PostgresFileReferenceStore
    except ImportError as e:
        raise ConnectionSettingsError(
            f"a PostgreSQL URL is given, but the PostgreSQL file store cannot be loaded ({e}); install "
            "statestore with its postgres extra"
        ) from None
    return PostgresFileReferenceStore.connect(url)
