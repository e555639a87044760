"""``statestore``: tables, partitions, files, the log, commit requests, snapshots, cleanup, the local runtime.

Human-readable tables by default, ``--json`` for scripts. Results go to stdout, progress and errors to
stderr; the exit code says what happened (see :data:`EPILOG`). Expected errors print one line saying what
was wrong and what to do; only a bug prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO
from urllib.parse import urlsplit

from statestore import cli_committer, cli_ops
from statestore import cli_format as fmt
from statestore.catalog import TableInfo
from statestore.errors import (
    CodecError,
    CommitConflictError,
    InvalidKeyError,
    InvalidSchemaError,
    SnapshotNotFoundError,
    StateStoreError,
    StoreUnavailableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionNotRetainedError,
    TransactionValidationError,
)
from statestore.ports import CommitOutcome, CommitStatus
from statestore.resources import ResourceNames

if TYPE_CHECKING:  # AWS modules are imported when a command needs them: `--help` stays fast
    from statestore.aws.backend import AwsBackend
    from statestore.client import StateStoreClient
    from statestore.commit_requests import CommitSender
    from statestore.ports import CommitStatusStore

EXIT_OK = 0
EXIT_FAILED = 1  # the operation was refused or failed: a rejected commit, a validation error, a name taken
EXIT_USAGE = 2  # bad usage or input: unknown option, missing file, invalid schema or transaction JSON
EXIT_NOT_FOUND = 3  # no such table, request or log entry
EXIT_UNAVAILABLE = 4  # the backend cannot be reached or is not set up (no endpoint, no resources, throttled)
EXIT_PENDING = 5  # waited, but the request has no outcome yet
EXIT_INTERNAL = 70  # a bug: the traceback is printed
EXIT_INTERRUPTED = 130

EPILOG = """\
exit codes:
  0    ok
  1    the operation was refused or failed: a commit rejected or dead-lettered, a name already taken,
       a transaction that does not apply to the table
  2    bad usage or input: unknown option, missing or unreadable file, invalid schema, split points or
       transaction JSON
  3    not found: no such table, no status for the request id, log entries deleted by cleanup
  4    backend unavailable: nothing listens at the endpoint, the instance's resources do not exist,
       no credentials, or the service kept failing
  5    commit --wait: no outcome within the time given (the request may still be committed)
  70   internal error (a bug: please report it with the traceback)
  130  interrupted (Ctrl-C)

environment:
  AWS_ENDPOINT_URL           default for --endpoint-url (e.g. http://127.0.0.1:4566 from `statestore local`)
  AWS_ENDPOINT_URL_DYNAMODB  default for --dynamodb-endpoint-url (:4567 from `statestore local`)
  STATESTORE_INSTANCE_ID     default for --instance (else "local")
  STATESTORE_RESOURCES       default for --resources-json (the stack's output)
"""

# How long the CLI waits for a commit outcome when --wait is given without a number.
DEFAULT_WAIT_SECONDS = 60.0


class CliError(Exception):
    """An expected failure: printed as one line, the process exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --- output -------------------------------------------------------------------------------------------


@dataclass
class Output:
    """Where results (stdout) and progress (stderr) go, and in which form."""

    json_mode: bool = False
    quiet: bool = False
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    def result(self, data: Any, human: Callable[[], str]) -> None:
        """Print ``data`` as JSON, or ``human()`` as text."""
        text = json.dumps(data, indent=2, sort_keys=False) if self.json_mode else human()
        if text:
            print(text, file=self.stdout, flush=True)

    def progress(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stderr, flush=True)


# --- connecting ---------------------------------------------------------------------------------------


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
        raw = self.args.resources_json or (
            None if self.args.instance else os.environ.get("STATESTORE_RESOURCES")
        )
        if raw:
            return _parse_resources(raw)
        instance = self.args.instance or os.environ.get("STATESTORE_INSTANCE_ID") or "local"
        try:
            return ResourceNames.for_instance(instance)
        except ValueError as e:
            raise CliError(f"--instance: {e}", EXIT_USAGE) from None

    @cached_property
    def backend(self) -> AwsBackend:
        from statestore.aws.backend import AwsBackend

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
        from statestore.client import StateStoreClient

        b = self.backend
        return StateStoreClient(b.table_index, b.log, b.snapshot_metadata, b.blobs)

    @property
    def statuses(self) -> CommitStatusStore:
        return self.backend.commit_statuses

    @cached_property
    def sender(self) -> CommitSender:
        from statestore.aws.clients import make_client

        return self.backend.commit_sender(
            make_client("sqs", endpoint_url=self.endpoint_url, region=self.args.region)
        )

    def _check_endpoint(self, url: str | None, option: str) -> None:
        """Fail fast (not after minutes of retries) when a local endpoint is down; give a local endpoint
        fake credentials if none are configured (emulators accept any)."""
        if url is None:
            return
        parts = urlsplit(url)
        if not parts.scheme or not parts.hostname:
            raise CliError(
                f"{option.split(' ')[0]} {url!r} is not a URL; give one like http://127.0.0.1:4566",
                EXIT_USAGE,
            )
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname, port), timeout=3.0):
                pass
        except OSError as e:
            raise CliError(
                f"nothing answers at {url} ({e.strerror or e}); start the local runtime with "
                f"`statestore local`, or fix {option}",
                EXIT_UNAVAILABLE,
            ) from None
        import boto3

        if boto3.session.Session().get_credentials() is None:
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

    def table(self, name: str) -> TableInfo:
        """The table's info (by name, else id). Raises TableNotFoundError."""
        return self.client.get_table(name)

    def where(self) -> str:
        return self.endpoint_url or "AWS"


def _parse_resources(raw: str) -> ResourceNames:
    """``--resources-json``: the JSON itself, or a file holding it."""
    text = raw
    if not raw.lstrip().startswith("{"):
        text = _read_text(raw, "--resources-json")
    try:
        return ResourceNames.from_json(text)
    except (ValueError, TypeError) as e:
        raise CliError(
            f"--resources-json is not the stack's STATESTORE_RESOURCES output ({e}); "
            "copy it from `cdk deploy`'s outputs",
            EXIT_USAGE,
        ) from None


def _read_text(path: str, what: str) -> str:
    """A file's text, or stdin's for ``-``. Raises CliError (exit 2) naming the file."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{what}: file {path!r} does not exist", EXIT_USAGE) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{what}: cannot read {path!r}: {e}", EXIT_USAGE) from None


def _read_json(path: str, what: str) -> Any:
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as e:
        source = "stdin" if path == "-" else repr(path)
        raise CliError(f"{what}: {source} is not valid JSON: {e}", EXIT_USAGE) from None


# --- tables -------------------------------------------------------------------------------------------


def cmd_tables_create(s: Session) -> int:
    from statestore.catalog import check_table_name, parse_schema
    from statestore.partitions import partitions_from_split_points

    args = s.args
    try:
        check_table_name(args.name)
    except StateStoreError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        schema = parse_schema(_read_json(args.schema, "--schema"))
    except InvalidSchemaError as e:
        raise CliError(f"invalid schema in {args.schema!r}: {e}", EXIT_USAGE) from None
    points = _split_points(args, schema)
    properties = _properties(args.property or [])
    try:
        partitions = partitions_from_split_points(schema, points)
    except (InvalidKeyError, TransactionValidationError) as e:
        raise CliError(f"invalid split points: {e}", EXIT_USAGE) from None

    s.out.progress(
        f"creating table {args.name!r} with {fmt.plural(len(points), 'split point')} at {s.where()}"
    )
    try:
        table = s.client.create_table(args.name, schema, points, properties)
    except TableAlreadyExistsError as e:
        raise CliError(f"{e}; choose another name, or delete it first (statestore tables delete)") from None
    leaves = sum(1 for p in partitions if p.leaf)
    s.out.result(
        {**fmt.table_json(table), "partitions": len(partitions), "leaf_partitions": leaves},
        lambda: (
            f"created table {table.table_name!r} (id {table.table_id}) with "
            f"{fmt.plural(leaves, 'leaf partition')}"
        ),
    )
    return EXIT_OK


def _split_points(args: argparse.Namespace, schema: Any) -> list[Any]:
    """Split points on the first row key, from ``--split-points FILE`` (a JSON array, or one per line) or
    ``--split-point V`` options, converted to the key's type."""
    field_ = schema.row_keys[0]
    raw: list[Any]
    if args.split_points:
        text = _read_text(args.split_points, "--split-points")
        if text.lstrip().startswith("["):
            try:
                raw = json.loads(text)
            except ValueError as e:
                raise CliError(
                    f"--split-points: {args.split_points!r} is not valid JSON: {e}", EXIT_USAGE
                ) from None
        else:
            raw = [line.strip() for line in text.splitlines() if line.strip()]
    else:
        raw = list(args.split_point or [])
    return [_key_value(v, field_.name, field_.type) for v in raw]


def _key_value(value: Any, field_name: str, key_type: str) -> Any:
    """A split point as the key's type: integers for int/long, text for string, base64 text for bytes."""
    import base64
    import binascii

    try:
        if key_type in ("int", "long"):
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError
            return int(value)
        if key_type == "string":
            if not isinstance(value, str):
                raise ValueError
            return value
        if isinstance(value, dict) and set(value) == {"b64"}:
            value = value["b64"]
        if not isinstance(value, str):
            raise ValueError
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        form = {"int": "an integer", "long": "an integer", "string": "a string"}.get(key_type, "base64 text")
        raise CliError(
            f"split point {value!r} is not a valid {key_type} for row key {field_name!r}; give {form}",
            EXIT_USAGE,
        ) from None


def _properties(pairs: Sequence[str]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--property {pair!r}: give it as NAME=VALUE", EXIT_USAGE)
        properties[name] = value
    return properties


def cmd_tables_list(s: Session) -> int:
    tables = s.client.list_tables()
    latest = {t.table_id: s.client.log.latest_number(t.table_id) for t in tables}
    s.out.result(
        [{**fmt.table_json(t), "transaction_number": latest[t.table_id]} for t in tables],
        lambda: (
            fmt.render_table(
                ["NAME", "TABLE ID", "ROW KEYS", "TRANSACTIONS", "CREATED"],
                [
                    [
                        t.table_name,
                        t.table_id,
                        fmt.schema_text(t.schema.row_keys),
                        latest[t.table_id],
                        fmt.format_time(t.created_time),
                    ]
                    for t in tables
                ],
            )
            if tables
            else f"no tables in instance {s.resources.instance_id!r} (add one: `statestore tables create`)"
        ),
    )
    return EXIT_OK


def cmd_tables_show(s: Session) -> int:
    table = s.table(s.args.name)
    state = s.client.state(table.table_id)
    snapshots = s.client.snapshots.metadata.list(table.table_id)
    latest_snapshot = s.client.snapshots.metadata.latest(table.table_id)
    references = list(state.file_references())
    rows = sum(r.number_of_rows for r in references)
    approximate = any(r.count_approximate for r in references)
    unreferenced = len(state.unreferenced_files())
    leaves = len(state.leaf_partitions())
    data = {
        **fmt.table_json(table),
        "transaction_number": state.transaction_number,
        "partitions": len(state.partitions_by_id),
        "leaf_partitions": leaves,
        "files": len(state.files_by_name),
        "file_references": len(references),
        "unreferenced_files": unreferenced,
        "rows": rows,
        "rows_approximate": approximate,
        "snapshots": len(snapshots),
        "latest_snapshot": fmt.snapshot_json(latest_snapshot),
    }

    def human() -> str:
        snapshot = (
            f"at transaction {latest_snapshot.transaction_number}, "
            f"{fmt.format_time(latest_snapshot.created_time)} ({len(snapshots)} kept)"
            if latest_snapshot
            else "none yet"
        )
        properties = ", ".join(f"{k}={v}" for k, v in sorted(table.properties.items())) or "-"
        return fmt.render_fields(
            [
                ("name", table.table_name),
                ("table id", table.table_id),
                ("created", fmt.format_time(table.created_time)),
                ("row keys", fmt.schema_text(table.schema.row_keys)),
                ("sort keys", fmt.schema_text(table.schema.sort_keys)),
                ("values", fmt.schema_text(table.schema.values)),
                ("properties", properties),
                ("transaction", state.transaction_number),
                ("partitions", f"{len(state.partitions_by_id)} ({fmt.plural(leaves, 'leaf', 'leaves')})"),
                ("files", f"{len(state.files_by_name)} ({unreferenced} awaiting garbage collection)"),
                ("references", len(references)),
                ("rows", fmt.rows_text(rows, approximate)),
                ("snapshot", snapshot),
            ]
        )

    s.out.result(data, human)
    return EXIT_OK


def cmd_tables_rename(s: Session) -> int:
    from statestore.catalog import check_table_name

    try:
        check_table_name(s.args.new_name)
    except StateStoreError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        table = s.client.rename_table(s.args.name, s.args.new_name)
    except TableAlreadyExistsError as e:
        raise CliError(f"{e}; choose another name") from None
    s.out.result(
        fmt.table_json(table),
        lambda: f"renamed table {s.args.name!r} to {table.table_name!r} (id {table.table_id})",
    )
    return EXIT_OK


def cmd_tables_delete(s: Session) -> int:
    table = s.table(s.args.name)
    if not s.args.yes:
        if not sys.stdin.isatty():
            raise CliError(
                f"refusing to delete table {table.table_name!r} without --yes (no terminal to ask on)",
                EXIT_USAGE,
            )
        answer = input(
            f"Delete table {table.table_name!r} ({table.table_id}) with its log, snapshots and every data "
            "file under its prefix? This cannot be undone. Type the table name to confirm: "
        )
        if answer.strip() != table.table_name:
            raise CliError("not deleted: the name typed did not match")
    s.out.progress(f"deleting table {table.table_name!r}: log, snapshots, objects, then its name")
    s.client.delete_table(table.table_id)
    s.out.result(
        {"deleted": True, **fmt.table_json(table)},
        lambda: f"deleted table {table.table_name!r} (id {table.table_id})",
    )
    return EXIT_OK


# --- partitions, files, log ---------------------------------------------------------------------------


def cmd_partitions(s: Session) -> int:
    table = s.table(s.args.table)
    state = s.client.state(table.table_id)
    by_partition = state.references_by_partition()
    schema = table.schema
    ordered = _tree_order(dict(state.partitions_by_id))
    if s.args.leaves:
        ordered = [(p, 0) for p, _ in ordered if p.leaf]

    def human() -> str:
        rows = []
        for partition, depth in ordered:
            refs = by_partition.get(partition.id, [])
            rows.append(
                [
                    "  " * depth + partition.id,
                    partition.leaf,
                    "-" if partition.leaf else schema.row_keys[partition.dimension].name,
                    fmt.format_region(partition, schema),
                    len(refs),
                    fmt.rows_text(
                        sum(r.number_of_rows for r in refs), any(r.count_approximate for r in refs)
                    ),
                ]
            )
        return fmt.render_table(["PARTITION", "LEAF", "SPLIT ON", "REGION", "FILES", "ROWS"], rows)

    s.out.result(
        [fmt.partition_json(p, schema, by_partition.get(p.id, [])) for p, _ in ordered],
        human,
    )
    return EXIT_OK


def _tree_order(partitions: dict[str, Any]) -> list[tuple[Any, int]]:
    """Partitions depth first from the root(s), each with its depth; children in region order."""
    roots = [p for p in partitions.values() if p.parent_id is None or p.parent_id not in partitions]
    out: list[tuple[Any, int]] = []
    stack = [(p, 0) for p in reversed(roots)]
    while stack:
        partition, depth = stack.pop()
        out.append((partition, depth))
        children = [partitions[c] for c in partition.child_ids if c in partitions]
        stack.extend((c, depth + 1) for c in reversed(children))
    return out


def cmd_files(s: Session) -> int:
    if s.args.orphans:
        return cli_ops.cmd_orphan_files(s)
    table = s.table(s.args.table)
    state = s.client.state(table.table_id)
    files = sorted(state.files_by_name.values(), key=lambda f: f.filename)
    if s.args.unreferenced:
        files = [f for f in files if not f.references]

    def human() -> str:
        if not files:
            return "no unreferenced files" if s.args.unreferenced else "no files"
        if s.args.unreferenced:
            return fmt.render_table(
                ["FILE", "UNREFERENCED SINCE"],
                [[f.filename, fmt.format_time(f.last_update_time)] for f in files],
            )
        rows: list[list[object]] = []
        for f in files:
            for r in f.references or [None]:
                if r is None:
                    rows.append([f.filename, "-", "-", "-", fmt.format_time(f.last_update_time)])
                else:
                    rows.append(
                        [
                            f.filename,
                            r.partition_id,
                            fmt.rows_text(r.number_of_rows, r.count_approximate),
                            r.job_id,
                            fmt.format_time(r.last_update_time),
                        ]
                    )
        return fmt.render_table(["FILE", "PARTITION", "ROWS", "JOB", "UPDATED"], rows)

    s.out.result([fmt.file_json(f) for f in files], human)
    return EXIT_OK


def cmd_log(s: Session) -> int:
    from statestore.codec.transaction_json import decode_entry
    from statestore.transactions import request_ids_of

    table = s.table(s.args.table)
    latest = s.client.log.latest_number(table.table_id)
    start = s.args.from_number if s.args.from_number is not None else max(1, latest - s.args.limit + 1)
    entries = list(s.client.log.read(table.table_id, start, start + s.args.limit - 1))
    if entries and entries[0].transaction_number > start:
        s.out.progress(
            f"note: entries {start}..{entries[0].transaction_number - 1} were deleted by cleanup "
            "(a snapshot covers them)"
        )
    elif not entries and start <= latest:
        raise CliError(
            f"table {table.table_name!r}: log entries from {start} were deleted by cleanup; "
            "they are covered by a snapshot",
            EXIT_NOT_FOUND,
        )

    items: list[dict[str, Any]] = []
    for entry in entries:
        try:
            transaction = decode_entry(entry)
            request_ids = list(request_ids_of(transaction))
            summary = fmt.summarize(transaction)
        except CodecError as e:
            request_ids, summary = [], f"cannot decode: {e}"
        items.append(
            {
                "transaction_number": entry.transaction_number,
                "update_time": entry.update_time,
                "type": entry.transaction_type,
                "request_ids": request_ids,
                "summary": summary,
                "body_bytes": len(entry.body),
                "compressed": entry.compressed,
            }
        )

    def human() -> str:
        if not items:
            return f"no log entries from {start} (the latest is {latest})"
        rows = []
        for item in items:
            ids = item["request_ids"]
            requests = "-" if not ids else ids[0] if len(ids) == 1 else f"{ids[0]} (+{len(ids) - 1})"
            rows.append(
                [
                    item["transaction_number"],
                    fmt.format_time(item["update_time"]),
                    item["type"],
                    requests,
                    item["summary"],
                ]
            )
        return fmt.render_table(["NUMBER", "TIME", "TYPE", "REQUESTS", "SUMMARY"], rows)

    s.out.result(items, human)
    return EXIT_OK


# --- commit requests ----------------------------------------------------------------------------------


def cmd_commit(s: Session) -> int:
    from statestore.codec.transaction_json import transaction_from_json
    from statestore.commit_requests import CommitRequest, check_request_id, new_request_id

    data = _read_json(s.args.file, "transaction")
    try:
        transaction = transaction_from_json(data)
        request_id = check_request_id(s.args.request_id) if s.args.request_id else new_request_id()
    except CodecError as e:
        raise CliError(f"invalid transaction in {_source(s.args.file)}: {e}", EXIT_USAGE) from None
    table = s.table(s.args.table)
    try:
        CommitRequest(request_id, table.table_id, transaction)
    except CodecError as e:
        raise CliError(f"invalid transaction in {_source(s.args.file)}: {e}", EXIT_USAGE) from None

    s.sender.send(table.table_id, transaction, request_id)
    s.out.progress(f"sent {transaction.TYPE} request {request_id} for table {table.table_name!r}")
    if s.args.wait is None:
        s.out.result(
            {
                "request_id": request_id,
                "table_id": table.table_id,
                "table_name": table.table_name,
                "outcome": None,
            },
            lambda: request_id,
        )
        return EXIT_OK

    s.out.progress(f"waiting up to {s.args.wait:g}s for the committer...")
    status = s.sender.wait(request_id, timeout=s.args.wait)
    if status is None:
        s.out.result(
            {
                "request_id": request_id,
                "table_id": table.table_id,
                "table_name": table.table_name,
                "outcome": None,
            },
            lambda: f"{request_id} pending",
        )
        raise CliError(
            f"request {request_id} has no outcome after {s.args.wait:g}s: is the committer running? "
            f"Check later with `statestore status {request_id}`",
            EXIT_PENDING,
        )
    s.out.result(
        {**fmt.status_json(status), "table_name": table.table_name},
        lambda: f"{request_id} {_outcome_text(status)}",
    )
    return _status_exit_code(status)


def _source(path: str) -> str:
    return "stdin" if path == "-" else repr(path)


def _outcome_text(status: CommitStatus) -> str:
    if status.outcome is CommitOutcome.COMMITTED:
        note = f" ({status.reason})" if status.reason else ""
        return f"committed at transaction {status.transaction_number}{note}"
    return f"{status.outcome.value.replace('_', '-')}: {status.reason or 'no reason given'}"


def _status_exit_code(status: CommitStatus) -> int:
    """0 for a committed request; a request not committed is a failure, said on stderr as every other."""
    if status.outcome is CommitOutcome.COMMITTED:
        return EXIT_OK
    raise CliError(f"request {status.request_id} {_outcome_text(status)}", EXIT_FAILED)


def cmd_status(s: Session) -> int:
    status = s.statuses.get(s.args.request_id)
    if status is None:
        raise CliError(
            f"no status for request {s.args.request_id!r}: not processed yet, expired, or never sent",
            EXIT_NOT_FOUND,
        )
    try:
        table_name: str | None = s.client.table_index.get(status.table_id).table_name
    except TableNotFoundError:
        table_name = None
    s.out.result(
        {**fmt.status_json(status), "table_name": table_name},
        lambda: fmt.render_fields(
            [
                ("request", status.request_id),
                ("table", f"{table_name} ({status.table_id})" if table_name else status.table_id),
                ("outcome", status.outcome.value),
                ("transaction", status.transaction_number),
                ("recorded", fmt.format_time(status.recorded_time)),
                ("reason", status.reason),
            ]
        ),
    )
    return _status_exit_code(status)


# --- upkeep -------------------------------------------------------------------------------------------


def cmd_snapshot(s: Session) -> int:
    table = s.table(s.args.table)
    s.out.progress(f"writing a snapshot of table {table.table_name!r}")
    snapshot = s.client.create_snapshot(table.table_id)
    if snapshot is None:
        latest = s.client.snapshots.metadata.latest(table.table_id)
        at = latest.transaction_number if latest else 0
        s.out.result(
            {"written": False, "table_name": table.table_name, "latest_snapshot": fmt.snapshot_json(latest)},
            lambda: (
                f"no snapshot written: table {table.table_name!r} has no transactions since its "
                f"latest snapshot (at transaction {at})"
            ),
        )
        return EXIT_OK
    s.out.result(
        {"written": True, "table_name": table.table_name, "snapshot": fmt.snapshot_json(snapshot)},
        lambda: (
            f"snapshot of table {table.table_name!r} at transaction {snapshot.transaction_number} written"
        ),
    )
    return EXIT_OK


def cmd_cleanup(s: Session) -> int:
    from statestore.cleanup import cleanup_table, policy_from_environment

    # The same defaults as the cleanup Lambda of the local runtime: the library's, or the environment's.
    options = {
        "log_min_snapshot_age_ms": s.args.log_min_snapshot_age,
        "snapshot_retention_ms": s.args.snapshot_retention,
        "gc_delay_ms": s.args.gc_delay,
        "claim_expiry_ms": s.args.claim_expiry,
    }
    try:
        policy = policy_from_environment(
            overrides={
                setting: int(minutes * 60_000) for setting, minutes in options.items() if minutes is not None
            }
        )
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    tables = [s.table(s.args.table)] if s.args.table else s.client.list_tables()
    reports, errors = [], {}
    for table in tables:
        s.out.progress(f"cleaning up table {table.table_name!r}")
        try:
            report = cleanup_table(
                s.client.state_store(table.table_id), table, s.client.snapshots, s.client.blobs, policy=policy
            )
        except StoreUnavailableError:
            raise
        except StateStoreError as e:
            errors[table.table_name] = str(e)
            s.out.progress(f"could not clean up table {table.table_name!r}: {e}")
            continue
        reports.append((table, report))

    def human() -> str:
        if not reports:
            return "no tables cleaned up"
        return fmt.render_table(
            ["TABLE", "LOG ENTRIES", "SNAPSHOTS", "DATA FILES", "REQUEST BODIES", "REFUSED FILES", "CLAIMS"],
            [
                [
                    t.table_name,
                    r.log_entries_deleted,
                    r.snapshots_deleted,
                    r.data_files_deleted,
                    r.request_bodies_deleted,
                    len(r.refused_files),
                    r.claims_released,
                ]
                for t, r in reports
            ],
        )

    s.out.result(
        {
            "tables": [
                {
                    "table_name": t.table_name,
                    "table_id": t.table_id,
                    "log_entries_deleted": r.log_entries_deleted,
                    "log_retained_from": r.log_retained_from,
                    "snapshots_deleted": r.snapshots_deleted,
                    "data_files_deleted": r.data_files_deleted,
                    "delete_files_commits": r.delete_files_commits,
                    "request_bodies_deleted": r.request_bodies_deleted,
                    "refused_files": list(r.refused_files),
                    "claims_released": r.claims_released,
                    "released_jobs": list(r.released_jobs),
                    "orphan_files_deleted": r.orphan_files_deleted,
                }
                for t, r in reports
            ],
            "errors": errors,
        },
        human,
    )
    if errors:
        raise CliError(f"could not clean up {fmt.plural(len(errors), 'table')}: {', '.join(errors)}")
    return EXIT_OK


# --- the local runtime --------------------------------------------------------------------------------


def cmd_local(s: Session) -> int:
    import logging

    from statestore.local_runtime import LocalRuntime

    args = s.args
    if not args.quiet:
        handler = logging.StreamHandler(s.out.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        runtime_logger = logging.getLogger("statestore.local_runtime")
        runtime_logger.addHandler(handler)
        runtime_logger.setLevel(logging.INFO)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines

    # Attach only to endpoints named on the command line: AWS_ENDPOINT_URL(_DYNAMODB) are often left over
    # from the last run, printed by this very command.
    where = args.endpoint_url or f"{args.host}:{args.port}"
    s.out.progress(f"starting the local runtime for instance {s.resources.instance_id!r} at {where}...")
    if args.data_dir is None:
        s.out.progress(
            "no --data-dir: tables, log, snapshots and data live in memory and are DELETED when it stops; "
            "give --data-dir DIR to keep them across restarts"
        )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            runtime = LocalRuntime.start(
                s.resources,
                endpoint_url=args.endpoint_url,
                dynamodb_endpoint_url=args.dynamodb_endpoint_url,
                port=args.port,
                dynamodb_port=args.dynamodb_port,
                host=args.host,
                data_dir=args.data_dir,
                region=args.region,
                max_receive_count=args.max_receive_count,
                poll_wait_seconds=args.poll_interval,
                snapshot_interval=args.snapshot_interval or None,
                cleanup_interval=args.cleanup_interval or None,
            )
        except ValueError as e:
            raise CliError(str(e), EXIT_USAGE) from None
        with runtime as rt:
            exports = {
                "AWS_ENDPOINT_URL": rt.endpoint_url,
                "AWS_ENDPOINT_URL_DYNAMODB": rt.dynamodb_endpoint_url,
                "STATESTORE_INSTANCE_ID": rt.resources.instance_id,
                "AWS_DEFAULT_REGION": rt.region,
            }
            if os.environ.get("AWS_ACCESS_KEY_ID") == "testing":
                exports |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
            s.out.result(
                {
                    "endpoint_url": rt.endpoint_url,
                    "dynamodb_endpoint_url": rt.dynamodb_endpoint_url,
                    "data_dir": str(rt.data_dir) if rt.data_dir is not None else None,
                    "instance_id": rt.resources.instance_id,
                    "region": rt.region,
                    "resources": json.loads(rt.resources.to_json()),
                    "environment": exports,
                },
                lambda: "\n".join(
                    [
                        f"statestore local runtime: instance {rt.resources.instance_id!r}: S3 and SQS at "
                        f"{rt.endpoint_url}, DynamoDB at {rt.dynamodb_endpoint_url}",
                        f"  state kept in {rt.data_dir} across restarts (queued commit requests are not)"
                        if rt.data_dir is not None
                        else "  state in memory only: everything is deleted when it stops (no --data-dir)",
                        f"  commit queue {rt.resources.commit_queue}, "
                        f"dead letters {rt.resources.dead_letter_queue}",
                        "  snapshots "
                        + (f"every {args.snapshot_interval:g}s" if args.snapshot_interval else "off")
                        + ", cleanup "
                        + (f"every {args.cleanup_interval:g}s" if args.cleanup_interval else "off"),
                        "Use it from another shell with:",
                        *(f"  export {name}={value}" for name, value in exports.items()),
                        "Press Ctrl-C to stop.",
                    ]
                ),
            )
            while not stop.wait(0.5):
                pass
            s.out.progress("stopping...")
    finally:
        for sig, handler_ in previous.items():
            signal.signal(sig, handler_)
    s.out.progress("stopped")
    return EXIT_OK


# --- the parser ---------------------------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after the command name."""
    default: Any = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--endpoint-url",
        metavar="URL",
        default=default,
        help="a local endpoint such as http://127.0.0.1:4566 (default: $AWS_ENDPOINT_URL, else AWS itself "
        "through the standard AWS configuration)",
    )
    group.add_argument(
        "--dynamodb-endpoint-url",
        metavar="URL",
        default=default,
        help="DynamoDB's own endpoint, such as the local runtime's DynamoDB Local at http://127.0.0.1:4567 "
        "(default: $AWS_ENDPOINT_URL_DYNAMODB, else --endpoint-url)",
    )
    group.add_argument(
        "--instance",
        metavar="ID",
        default=default,
        help="the instance whose resources to use (default: $STATESTORE_INSTANCE_ID, else 'local')",
    )
    group.add_argument(
        "--resources-json",
        metavar="JSON|FILE",
        default=default,
        help="the stack's STATESTORE_RESOURCES output, or a file holding it (default: $STATESTORE_RESOURCES)",
    )
    group.add_argument("--region", metavar="REGION", default=default, help="AWS region (default: AWS config)")
    group.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS if suppress else False, help="JSON output"
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="no progress messages on stderr",
    )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        where = self.prog.removeprefix("statestore").strip()  # the subcommand, e.g. "tables create"
        self.exit(EXIT_USAGE, f"statestore: error: {where + ': ' if where else ''}{message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="statestore",
        description="The state store of sorted data-lake tables: tables, partitions, files, the transaction "
        "log, asynchronous commits, snapshots, cleanup, and a local runtime.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _global_options(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"statestore {cli_ops.version()}")
    common = _Parser(add_help=False)
    _global_options(common, suppress=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    def command(sub: Any, name: str, help_: str, run: Callable[[Session], int]) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(
            name,
            help=help_,
            description=help_,
            parents=[common],
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(run=run)
        return p

    tables = commands.add_parser("tables", help="create, list, show, rename and delete tables")
    table_commands = tables.add_subparsers(
        dest="tables_command", metavar="ACTION", required=True, parser_class=_Parser
    )
    p = command(table_commands, "create", "create a table and its initial partitions", cmd_tables_create)
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--schema",
        metavar="FILE",
        required=True,
        help='JSON schema: {"row_keys": [{"name": "key", "type": "long"}], "sort_keys": [], "values": []}',
    )
    points = p.add_mutually_exclusive_group()
    points.add_argument(
        "--split-points",
        metavar="FILE",
        help="split points on the first row key: a JSON array, or one per line (bytes as base64)",
    )
    points.add_argument(
        "--split-point", metavar="V", action="append", help="a split point (repeat for several)"
    )
    p.add_argument("--property", metavar="NAME=VALUE", action="append", help="a table property (repeatable)")
    command(table_commands, "list", "list the tables", cmd_tables_list)
    p = command(table_commands, "show", "a table's schema, properties and state in figures", cmd_tables_show)
    p.add_argument("name", metavar="TABLE")
    p = command(table_commands, "rename", "rename a table (its id, log and data stay)", cmd_tables_rename)
    p.add_argument("name", metavar="TABLE")
    p.add_argument("new_name", metavar="NEW_NAME")
    p = command(
        table_commands, "delete", "delete a table with its log, snapshots and data files", cmd_tables_delete
    )
    p.add_argument("name", metavar="TABLE")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = command(commands, "partitions", "a table's partition tree", cmd_partitions)
    p.add_argument("table", metavar="TABLE")
    p.add_argument("--leaves", action="store_true", help="only the leaf partitions")

    from statestore.cli_reports import add_report_commands  # imports this module: not at the top

    add_report_commands(commands, command)

    p = command(commands, "files", "a table's files and their references", cmd_files)
    p.add_argument("table", metavar="TABLE")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--unreferenced", action="store_true", help="only files awaiting garbage collection")
    shown.add_argument(
        "--orphans", action="store_true", help="data objects no file names, older than the GC delay"
    )

    p = command(commands, "log", "a table's transaction log", cmd_log)
    p.add_argument("table", metavar="TABLE")
    p.add_argument(
        "--from", dest="from_number", type=int, metavar="N", help="first transaction (default: the tail)"
    )
    p.add_argument("--limit", type=int, default=20, metavar="N", help="at most N entries (default 20)")

    from statestore.cli_jobs import add_commands as add_job_commands

    add_job_commands(commands, command)

    p = command(commands, "commit", "send a commit request to the committer's queue", cmd_commit)
    p.add_argument("table", metavar="TABLE")
    p.add_argument(
        "file", metavar="FILE|-", help="the transaction as JSON (as the codec writes it), or - for stdin"
    )
    p.add_argument(
        "--wait",
        type=float,
        nargs="?",
        const=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"wait for the outcome (default {DEFAULT_WAIT_SECONDS:g}s)",
    )
    p.add_argument(
        "--request-id", metavar="ID", help="the request id (default: a new UUID); resending is safe"
    )

    p = command(commands, "status", "what became of a commit request", cmd_status)
    p.add_argument("request_id", metavar="REQUEST_ID")

    p = command(commands, "snapshot", "write a snapshot of a table now", cmd_snapshot)
    p.add_argument("table", metavar="TABLE")

    p = command(
        commands, "cleanup", "delete old log entries, old snapshots and garbage data files", cmd_cleanup
    )
    p.add_argument("table", metavar="TABLE", nargs="?", help="one table (default: every table)")
    p.add_argument(
        "--log-min-snapshot-age",
        type=float,
        metavar="MINUTES",
        help="delete log entries covered by a snapshot at least this old (default 1 day)",
    )
    p.add_argument(
        "--snapshot-retention",
        type=float,
        metavar="MINUTES",
        help="delete snapshots older than this, except the latest (default 2 days)",
    )
    p.add_argument(
        "--gc-delay",
        type=float,
        metavar="MINUTES",
        help="delete data files that have had no references for this long (default "
        "$STATESTORE_GC_DELAY_MINUTES, else 12 hours; a table's gc_delay_minutes property overrides it)",
    )
    p.add_argument(
        "--claim-expiry",
        type=float,
        metavar="MINUTES",
        help="release compaction claims older than this: their jobs are presumed dead (default "
        "$STATESTORE_CLAIM_EXPIRY_MINUTES, else 13 hours)",
    )

    p = command(
        commands,
        "local",
        "run the local runtime in the foreground: DynamoDB Local for the tables, a moto endpoint for the "
        "bucket and queues, the instance's resources, the committer and the schedules",
        cmd_local,
    )
    p.add_argument(
        "--port", type=int, default=4566, help="port of the S3/SQS endpoint (default 4566; 0 = any free)"
    )
    p.add_argument(
        "--dynamodb-port",
        type=int,
        metavar="PORT",
        help="port of DynamoDB Local (default: --port + 1, any free one when --port is 0)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep tables, log, snapshots and data files in DIR across restarts (default: in memory only, "
        "deleted on stop)",
    )
    p.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    p.add_argument(
        "--poll-interval",
        type=int,
        default=1,
        metavar="S",
        help="long-poll wait of the commit queue poller, 0-20 seconds (default 1)",
    )
    p.add_argument(
        "--snapshot-interval",
        type=float,
        default=60.0,
        metavar="S",
        help="snapshot every S seconds (0 = off)",
    )
    p.add_argument(
        "--cleanup-interval",
        type=float,
        default=300.0,
        metavar="S",
        help="clean up every S seconds (0 = off)",
    )
    p.add_argument(
        "--max-receive-count",
        type=int,
        default=5,
        metavar="N",
        help="receives before the queue moves a message to the dead-letter queue (default 5)",
    )
    cli_ops.register(commands, command)
    cli_committer.register(commands, command)
    return parser


# --- main ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see :data:`EPILOG`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    for name in ("endpoint_url", "dynamodb_endpoint_url", "instance", "resources_json", "region"):
        setattr(args, name, getattr(args, name, None))
    args.json = getattr(args, "json", False)
    args.quiet = getattr(args, "quiet", False)
    out = Output(json_mode=args.json, quiet=args.quiet)
    session = Session(args, out)
    try:
        _check_options(args)
        code: int = args.run(session)
        return code
    except CliError as e:
        return _fail(out, str(e), e.exit_code)
    except StateStoreError as e:
        return _fail(out, *_describe(e, session))
    except KeyboardInterrupt:
        return _fail(out, "interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # e.g. `statestore log t | head`
        return EXIT_OK
    except Exception:
        traceback.print_exc(file=out.stderr)
        return _fail(out, "internal error (a bug); please report it with the traceback above", EXIT_INTERNAL)


# Numeric options and what each must be: checked before a command sends, reads or starts anything
# (``commit --wait -5`` used to send its request and only then give up waiting at once).
_NUMERIC_OPTIONS: tuple[tuple[str, str, float, float | None, str], ...] = (
    # (attribute, option, lowest, highest or None, what it counts)
    ("wait", "--wait", 0, None, " seconds"),
    ("limit", "--limit", 1, None, " entries"),
    ("from_number", "--from", 1, None, ""),
    ("log_min_snapshot_age", "--log-min-snapshot-age", 0, None, " minutes"),
    ("snapshot_retention", "--snapshot-retention", 0, None, " minutes"),
    ("gc_delay", "--gc-delay", 0, 30 * 24 * 60, " minutes"),
    ("claim_expiry", "--claim-expiry", 0, 30 * 24 * 60, " minutes"),
    ("port", "--port", 0, 65535, ""),
    ("poll_interval", "--poll-interval", 0, 20, " seconds (SQS's long-poll limit)"),
    ("snapshot_interval", "--snapshot-interval", 0, None, " seconds"),
    ("cleanup_interval", "--cleanup-interval", 0, None, " seconds"),
    ("max_receive_count", "--max-receive-count", 1, 1000, " receives (SQS's limit)"),
)


def _check_options(args: argparse.Namespace) -> None:
    """Raise CliError (exit 2) naming the first numeric option out of its range, NaN or infinite."""
    for attribute, option, lowest, highest, unit in _NUMERIC_OPTIONS:
        value = getattr(args, attribute, None)
        if value is None:
            continue
        finite = value == value and value not in (float("inf"), float("-inf"))
        if not finite or value < lowest or (highest is not None and value > highest):
            allowed = f"from {lowest:g} to {highest:g}" if highest is not None else f"{lowest:g} or more"
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            raise CliError(f"{option} must be {allowed}{unit}, got {shown}", EXIT_USAGE)


def _fail(out: Output, message: str, code: int) -> int:
    print(f"statestore: error: {message}", file=out.stderr, flush=True)
    return code


_MISSING_RESOURCE_CODES = (
    "ResourceNotFoundException",
    "NonExistentQueue",
    "NoSuchBucket",
    "QueueDoesNotExist",
)
_NO_CREDENTIALS = ("Unable to locate credentials", "UnrecognizedClientException", "InvalidClientTokenId")


def _describe(error: StateStoreError, session: Session) -> tuple[str, int]:
    """The one-line message and exit code for a library error."""
    message = str(error)
    if isinstance(error, TableNotFoundError):
        return f"{message}; list the tables with `statestore tables list`", EXIT_NOT_FOUND
    if isinstance(error, TransactionNotRetainedError | SnapshotNotFoundError):
        return message, EXIT_NOT_FOUND
    if isinstance(error, InvalidSchemaError | InvalidKeyError | CodecError):
        return message, EXIT_USAGE
    if isinstance(error, TransactionValidationError | TableAlreadyExistsError | CommitConflictError):
        return message, EXIT_FAILED
    if isinstance(error, StoreUnavailableError):
        return message, EXIT_UNAVAILABLE
    if any(code in message for code in _MISSING_RESOURCE_CODES):
        instance = session.resources.instance_id
        return (
            f"instance {instance!r} is not set up at {session.where()} ({message}); start "
            f"`statestore local --instance {instance}`, deploy the stack, or pass the right "
            "--instance / --resources-json / --endpoint-url",
            EXIT_UNAVAILABLE,
        )
    if any(text in message for text in _NO_CREDENTIALS):
        return (
            f"{message}; configure AWS credentials (e.g. `aws configure`) or use a local endpoint",
            EXIT_UNAVAILABLE,
        )
    return message, EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
