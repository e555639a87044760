"""What every command works with: the connection to an instance, built on first use from the global
options, and reading the files (or stdin) a command is given."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from statestore.cli.errors import EXIT_UNAVAILABLE, EXIT_USAGE, CliError
from statestore.cli.output import Output
from statestore.errors import ConnectionSettingsError, EndpointUnavailableError
from statestore.instance import POSTGRES_URL_ENV, ResourceNames, ResourcesSettingError, resolve_resources
from statestore.store.tables import TableInfo

if TYPE_CHECKING:  # AWS modules are imported when a command needs them: `--help` stays fast
    from statestore.adapters.aws.backend import AwsBackend
    from statestore.engine.requests import CommitSender
    from statestore.services.client import StateStoreClient
    from statestore.store.ports import CommitStatusStore, FileReferenceStore


class Session:
    """What a command needs, built on first use from the global options."""

    def __init__(self, args: argparse.Namespace, out: Output) -> None:
        self.args = args
        self.out = out

    @cached_property
    def endpoint_url(self) -> str | None:
        url: str | None = self.args.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        return url

    @cached_property
    def dynamodb_endpoint_url(self) -> str | None:
        """DynamoDB's own endpoint if one is set (the local runtime's DynamoDB Local), else None: DynamoDB
        is then at :attr:`endpoint_url`, as the other services."""
        url: str | None = (
            self.args.dynamodb_endpoint_url or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or None
        )
        return url

    @cached_property
    def resources(self) -> ResourceNames:
        raw = self.args.resources_json
        if raw == "-":
            raw = sys.stdin.read()
        try:
            return resolve_resources(
                raw, self.args.instance, resources_setting="--resources-json", instance_setting="--instance"
            )
        except ResourcesSettingError as e:
            raise CliError(str(e), EXIT_USAGE) from None

    @cached_property
    def backend(self) -> AwsBackend:
        from statestore.adapters.aws.backend import AwsBackend

        self._check_endpoint(self.endpoint_url, "--endpoint-url / AWS_ENDPOINT_URL")
        self._check_endpoint(
            self.dynamodb_endpoint_url, "--dynamodb-endpoint-url / AWS_ENDPOINT_URL_DYNAMODB"
        )
        return AwsBackend.connect(
            self.resources,
            self.endpoint_url,
            region=self.args.region,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
        )

    @cached_property
    def client(self) -> StateStoreClient:
        from statestore.services.client import StateStoreClient

        b = self.backend
        return StateStoreClient(
            b.table_index,
            b.log,
            b.snapshot_metadata,
            b.blobs,
            file_store=self.file_store,
            queryable_view=b.queryable_view,
        )

    @cached_property
    def postgres_url(self) -> str | None:
        given: str | None = getattr(self.args, "postgres_url", None)
        if given and has_password(given):
            # A command line is visible to every user of the machine (ps, /proc): no password on it.
            raise CliError(
                "--postgres-url holds a password, which anyone on this machine can read from the command "
                f"line: put the URL in ${POSTGRES_URL_ENV} instead, or keep the password in $PGPASSWORD or "
                "~/.pgpass and leave it out of the URL",
                EXIT_USAGE,
            )
        url: str | None = given or os.environ.get(POSTGRES_URL_ENV) or None
        return url

    @cached_property
    def file_store(self) -> FileReferenceStore | None:
        """The file store of postgres tables, when ``--postgres-url`` (or $STATESTORE_POSTGRES_URL) is set."""
        if self.postgres_url is None:
            return None
        return postgres_file_store(self.postgres_url)

    @property
    def statuses(self) -> CommitStatusStore:
        return self.backend.commit_statuses

    @cached_property
    def sender(self) -> CommitSender:
        from statestore.adapters.aws.clients import make_client

        return self.backend.commit_sender(
            make_client("sqs", endpoint_url=self.endpoint_url, region=self.args.region)
        )

    def _check_endpoint(self, url: str | None, option: str) -> None:
        """Fail fast (not after minutes of retries) when a local endpoint is down; give a local endpoint
        fake credentials if none are configured (emulators accept any)."""
        from statestore.adapters.aws.endpoints import check_endpoint

        try:
            check_endpoint(url, option)
        except ConnectionSettingsError as e:
            raise CliError(str(e), EXIT_USAGE) from None
        except EndpointUnavailableError as e:
            raise CliError(str(e), EXIT_UNAVAILABLE) from None

    def table(self, name: str) -> TableInfo:
        """The table's info (by name, else id). Raises TableNotFoundError."""
        return self.client.get_table(name)

    def where(self) -> str:
        return self.endpoint_url or "AWS"


def postgres_file_store(url: str) -> FileReferenceStore:
    """The file-reference store in the PostgreSQL database at ``url`` (the one place the CLI, and the
    Lambdas through the same call, connect to one). Raises CliError when the PostgreSQL adapter is not
    installed."""
    try:
        from statestore.adapters.postgres import PostgresFileReferenceStore
    except ImportError as e:
        raise CliError(
            "--postgres-url / STATESTORE_POSTGRES_URL is set, but the PostgreSQL file store cannot be "
            f"loaded ({e}); install statestore with its postgres extra, or leave the URL unset to use "
            "only tables whose files are on the log",
            EXIT_USAGE,
        ) from None
    return PostgresFileReferenceStore.connect(url)


def read_text(path: str, what: str) -> str:
    """A file's text, or stdin's for ``-``. Raises CliError (exit 2) naming the file."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{what}: file {path!r} does not exist", EXIT_USAGE) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{what}: cannot read {path!r}: {e}", EXIT_USAGE) from None


def read_json(path: str, what: str) -> Any:
    text = read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as e:
        source = "stdin" if path == "-" else repr(path)
        raise CliError(f"{what}: {source} is not valid JSON: {e}", EXIT_USAGE) from None


def has_password(url: str) -> bool:
    """Whether a libpq URL (``postgresql://user:password@host/db``) or key=value string holds a password."""
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        return bool(parts.password) or "password" in parse_qs(parts.query)
    return bool(re.search(r"(^|\s)password\s*=", url))
