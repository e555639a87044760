"""The data source's options: which table, which instance and where its endpoints are, where the data is.

The source's planning runs in Python worker processes that get only these strings, so everything it needs
is named here or found in the environment the way the ``statestore`` CLI finds it:

==================  ==========================================================================================
option              meaning (default)
==================  ==========================================================================================
``table``           the table's name or id (or ``load("name")`` / ``save("name")``); required
``resources``       the instance's resources: the stack's ``StatestoreResources`` JSON, or a file holding it
                    (``STATESTORE_RESOURCES``)
``instance``        the instance id, when ``resources`` is not given (``STATESTORE_INSTANCE_ID``, else
                    ``local``)
``endpoint``        a local endpoint for S3, SQS and DynamoDB, e.g. ``http://127.0.0.1:4566``
                    (``AWS_ENDPOINT_URL``; unset: AWS itself)
``dynamodbEndpoint`` DynamoDB's own endpoint (``AWS_ENDPOINT_URL_DYNAMODB``; unset: ``endpoint``)
``awsRegion``       the AWS region (the standard chain: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, profile)
``data``            where the data files are: ``s3://bucket`` or a local directory (``s3://`` + the
                    instance's bucket, through ``endpoint``)
``region``          read only rows whose row keys lie in this region: JSON ``{"key": [min, max]}``, min
                    inclusive, max exclusive, null unbounded, bytes in base64 (the whole table)
``asOf``            read the table as of this transaction number (now)
``timestampAsOf``   read the table as it was at this time: ISO 8601 with a zone, or epoch ms (now)
``startingTransaction``  read only the rows added by transactions from this one (inclusive) ...
``endingTransaction``    ... to this one (inclusive; the latest when the read is planned)
``startingTimestamp``    ... or from the first transaction committed at or after this time ...
``endingTimestamp``      ... to the last committed at or before this time
``rowsPerTask``     rows per read task, from the references' row counts (1000000)
``viewMaxLeaves``   plan a read of the latest state through the table's queryable view when its regions
                    overlap at most this many leaves, else by a full load of the state; 0: never through
                    the view (:data:`spark_client.view_plan.DEFAULT_VIEW_MAX_LEAVES`)
``rowKeys``         on an append to a table that does not exist yet: create it from the DataFrame's
                    schema with these row keys (comma-separated); on one that does, they must be its own
``sortKeys``        with ``rowKeys``: the sort keys (none)
``committer``       how an append commits: ``queue`` (the commit queue and the committer Lambda) or
                    ``sync`` (a conditional put from the driver) (``queue``)
``commitTimeout``   seconds an append waits for its commit's outcome (120)
==================  ==========================================================================================

Option names are case-insensitive (Spark lower-cases them). A write refuses the options only reads take; a
read ignores the write's own (``committer``, ``commitTimeout``, ``rowKeys``, ``sortKeys``), so one set of
options serves a temporary view's ``SELECT`` and ``INSERT INTO``. A read with a starting option returns the
rows added in that range with two more columns, ``_transaction_number`` and ``_commit_timestamp`` (see
:mod:`spark_client.changes_reader`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_client.committer import JobCommitter, QueueCommitter, SyncCommitter
from spark_client.data_store import DataStore
from spark_client.errors import DataSourceOptionError
from spark_client.log_times import parse_timestamp
from spark_client.read_plan import region_of
from spark_client.view_plan import DEFAULT_VIEW_MAX_LEAVES
from statestore.errors import StateStoreError
from statestore.instance import ResourceNames, ResourcesSettingError, resolve_resources
from statestore.model.partitions import Region
from statestore.model.schema import Schema

if TYPE_CHECKING:
    from statestore.engine.requests import CommitSender
    from statestore.services.client import StateStoreClient
    from statestore.store.view_ports import QueryableViewStore

FORMAT = "statestore-table"
# Spark lower-cases option names; these are the lower-cased names this source knows.
KNOWN_OPTIONS = {
    "table": "table",
    "path": "path",
    "resources": "resources",
    "instance": "instance",
    "endpoint": "endpoint",
    "dynamodbendpoint": "dynamodbEndpoint",
    "awsregion": "awsRegion",
    "data": "data",
    "region": "region",
    "asof": "asOf",
    "timestampasof": "timestampAsOf",
    "startingtransaction": "startingTransaction",
    "endingtransaction": "endingTransaction",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "rowspertask": "rowsPerTask",
    "viewmaxleaves": "viewMaxLeaves",
    "rowkeys": "rowKeys",
    "sortkeys": "sortKeys",
    "committer": "committer",
    "committimeout": "commitTimeout",
}
# Each task of a Python data source pays a fixed cost (about 0.2 s on this project's 2-core machine, for
# a trivial source too), so a task reads many rows: about what a 128 MB split of Spark's file sources holds.
DEFAULT_ROWS_PER_TASK = 1_000_000
DEFAULT_COMMIT_TIMEOUT_SECONDS = 120.0
# The options of a bounded incremental read (the rows added in a range of transactions).
RANGE_OPTIONS = ("startingtransaction", "endingtransaction", "startingtimestamp", "endingtimestamp")


@dataclass(frozen=True)
class Connection:
    """How to reach one instance: its resource names and endpoints. Small and picklable."""

    resources: ResourceNames
    endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    aws_region: str | None = None

    def client(self) -> StateStoreClient:
        """A client for the instance, built once per process (its AWS clients are thread-safe)."""
        return _client(self)

    def view_store(self) -> QueryableViewStore:
        """The instance's queryable view items, through a backend built once per process."""
        return _view_store(self)

    def commit_sender(self) -> CommitSender:
        """A sender of commit requests to the instance's queue."""
        from statestore.adapters.aws.backend import AwsBackend
        from statestore.adapters.aws.clients import make_client

        backend = AwsBackend.connect(
            self.resources,
            self.endpoint_url,
            region=self.aws_region,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
        )
        return backend.commit_sender(
            make_client("sqs", endpoint_url=self.endpoint_url, region=self.aws_region)
        )


@functools.lru_cache(maxsize=8)
def _client(connection: Connection) -> StateStoreClient:
    from statestore.services.client import StateStoreClient

    return StateStoreClient.for_aws(
        connection.resources,
        connection.endpoint_url,
        region=connection.aws_region,
        dynamodb_endpoint_url=connection.dynamodb_endpoint_url,
    )


@functools.lru_cache(maxsize=8)
def _view_store(connection: Connection) -> QueryableViewStore:
    from statestore.adapters.aws.backend import AwsBackend

    backend = AwsBackend.connect(
        connection.resources,
        connection.endpoint_url,
        region=connection.aws_region,
        dynamodb_endpoint_url=connection.dynamodb_endpoint_url,
    )
    return backend.queryable_view


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of one read or write. Build with :meth:`parse`."""

    table: str
    connection: Connection
    data: DataStore
    region: Mapping[str, Any] | None = None  # parsed JSON, checked against the schema by :meth:`region_in`
    as_of: int | None = None
    timestamp_as_of: int | None = None  # epoch ms
    starting_transaction: int | None = None
    ending_transaction: int | None = None
    starting_time: int | None = None  # epoch ms
    ending_time: int | None = None  # epoch ms
    rows_per_task: int = DEFAULT_ROWS_PER_TASK
    view_max_leaves: int = DEFAULT_VIEW_MAX_LEAVES
    row_keys: tuple[str, ...] | None = None
    sort_keys: tuple[str, ...] = ()
    committer: str = "queue"
    commit_timeout: float = DEFAULT_COMMIT_TIMEOUT_SECONDS

    @property
    def is_range(self) -> bool:
        """Whether this read is of the rows added in a range of transactions."""
        return self.starting_transaction is not None or self.starting_time is not None

    @classmethod
    def parse(cls, options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> SourceOptions:
        """Parse Spark's options, filling the rest from ``environ`` (the process environment).

        Raises :class:`DataSourceOptionError` naming each unknown or malformed option.
        """
        given = _known(options)
        table = given.get("table") or given.get("path")
        if not table:
            raise DataSourceOptionError(
                f"format {FORMAT!r} needs the table: .option('table', 'name or id') or .load('name'). In "
                f"SQL, use CREATE TEMPORARY VIEW v USING `{FORMAT}` OPTIONS (table 'name'): Spark gives a "
                "Python data source none of the OPTIONS of a CREATE TABLE"
            )
        if given.get("table") and given.get("path") and given["table"] != given["path"]:
            raise DataSourceOptionError(
                f"option 'table' is {given['table']!r} but the path is {given['path']!r}: give one of them"
            )
        connection = parse_connection(given, environ)
        committer = given.get("committer", "queue").lower()
        if committer not in ("queue", "sync"):
            raise DataSourceOptionError(f"option 'committer' is 'queue' or 'sync', got {committer!r}")
        parsed = cls(
            table=table,
            connection=connection,
            data=_data_store(given.get("data"), connection),
            region=_region_json(given.get("region")),
            as_of=_integer(given, "asof", minimum=0),
            timestamp_as_of=_timestamp(given, "timestampasof"),
            starting_transaction=_integer(given, "startingtransaction", minimum=1),
            ending_transaction=_integer(given, "endingtransaction", minimum=0),
            starting_time=_timestamp(given, "startingtimestamp"),
            ending_time=_timestamp(given, "endingtimestamp"),
            rows_per_task=_integer(given, "rowspertask", minimum=1) or DEFAULT_ROWS_PER_TASK,
            view_max_leaves=_default(_integer(given, "viewmaxleaves", minimum=0), DEFAULT_VIEW_MAX_LEAVES),
            row_keys=_names(given, "rowkeys"),
            sort_keys=_names(given, "sortkeys") or (),
            committer=committer,
            commit_timeout=_seconds(given.get("committimeout")),
        )
        parsed._check_combinations(given)
        return parsed

    def _check_combinations(self, given: Mapping[str, str]) -> None:
        if self.as_of is not None and self.timestamp_as_of is not None:
            raise DataSourceOptionError("give one of the options 'asOf' and 'timestampAsOf', not both")
        ranged = [KNOWN_OPTIONS[name] for name in RANGE_OPTIONS if name in given]
        if ranged and not self.is_range:
            raise DataSourceOptionError(
                f"option(s) {ranged} need a start: add 'startingTransaction' or 'startingTimestamp'"
            )
        if self.starting_transaction is not None and self.starting_time is not None:
            raise DataSourceOptionError(
                "give one of the options 'startingTransaction' and 'startingTimestamp', not both"
            )
        if self.ending_transaction is not None and self.ending_time is not None:
            raise DataSourceOptionError("give one of the options 'endingTransaction' and 'endingTimestamp'")
        if self.is_range and (self.as_of is not None or self.timestamp_as_of is not None):
            raise DataSourceOptionError(
                "a read of the rows added in a range ('startingTransaction' / 'startingTimestamp') reads no "
                "table as of a time: drop 'asOf' / 'timestampAsOf'"
            )
        if self.sort_keys and self.row_keys is None:
            raise DataSourceOptionError("option 'sortKeys' goes with 'rowKeys' (they create the table)")

    def region_in(self, schema: Schema) -> Region:
        """The ``region`` option as a region of ``schema`` (the whole key space if not given)."""
        if self.region is None:
            return Region.whole(schema)
        ranges = {}
        fields = {f.name: f for f in schema.row_keys}
        for name, bounds in self.region.items():
            if not isinstance(bounds, list) or len(bounds) != 2:
                raise DataSourceOptionError(
                    f"option 'region': {name!r} needs [min, max] (null for unbounded), got {bounds!r}"
                )
            field = fields.get(name)
            key_type = field.key_type if field is not None else None
            try:
                low, high = (None if v is None or key_type is None else key_type.from_json(v) for v in bounds)
            except StateStoreError as e:
                raise DataSourceOptionError(f"option 'region': {e}") from None
            ranges[name] = (low, high)
        try:
            return region_of(schema, ranges)
        except (ValueError, StateStoreError) as e:
            raise DataSourceOptionError(f"option 'region': {e}") from None

    def committer_for(self, client: StateStoreClient) -> JobCommitter:
        """The committer the ``committer`` option names, for the instance of ``client``."""
        if self.committer == "sync":
            return SyncCommitter(client.state_store)
        return QueueCommitter(self.connection.commit_sender(), wait_timeout=self.commit_timeout)


def _known(options: Mapping[str, str]) -> dict[str, str]:
    """The options by lower-cased name; raises naming every unknown one."""
    given = {name.lower(): value for name, value in options.items()}
    unknown = sorted(set(given) - set(KNOWN_OPTIONS))
    if unknown:
        raise DataSourceOptionError(
            f"unknown option(s) {unknown} for format {FORMAT!r}; known options: "
            f"{sorted(KNOWN_OPTIONS.values())}"
        )
    return given


def parse_connection(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Connection:
    """The instance the connection options (``resources``, ``instance``, ``endpoint``, ``dynamodbEndpoint``,
    ``awsRegion``) name, filled from ``environ`` (the process environment) as the CLI does."""
    env = os.environ if environ is None else environ
    given = _known(options)
    return Connection(
        _resources(given, env),
        given.get("endpoint") or env.get("AWS_ENDPOINT_URL") or None,
        given.get("dynamodbendpoint") or env.get("AWS_ENDPOINT_URL_DYNAMODB") or None,
        given.get("awsregion") or None,
    )


def parse_data(options: Mapping[str, str], connection: Connection) -> DataStore:
    """Where the data files are: the ``data`` option, else the instance's bucket."""
    return _data_store(_known(options).get("data"), connection)


def _resources(given: Mapping[str, str], env: Mapping[str, str]) -> ResourceNames:
    try:
        return resolve_resources(
            given.get("resources"), given.get("instance"), environ=env,
            resources_setting="option 'resources'", instance_setting="option 'instance'",
        )  # fmt: skip
    except ResourcesSettingError as e:
        raise DataSourceOptionError(str(e)) from None


def _data_store(raw: str | None, connection: Connection) -> DataStore:
    if not raw:
        return DataStore.s3(
            connection.resources.bucket, endpoint_url=connection.endpoint_url, region=connection.aws_region
        )
    if raw.startswith("s3://"):
        bucket = raw[len("s3://") :].strip("/")
        if not bucket:
            raise DataSourceOptionError(f"option 'data': {raw!r} names no bucket; give s3://bucket")
        return DataStore.s3(bucket, endpoint_url=connection.endpoint_url, region=connection.aws_region)
    path = raw[len("file://") :] if raw.startswith("file://") else raw
    if not os.path.isabs(path):
        raise DataSourceOptionError(
            f"option 'data' is s3://bucket or an absolute local directory, got {raw!r}"
        )
    return DataStore.local(path)


def _region_json(raw: str | None) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise DataSourceOptionError(
            f"option 'region' is the row-key region as JSON, e.g. {{\"key\": [0, 100]}}, not {raw!r} ({e}); "
            "the AWS region is option 'awsRegion'"
        ) from None
    if not isinstance(parsed, dict):
        raise DataSourceOptionError(
            f"option 'region' must be a JSON object of row key -> [min, max], got {raw!r}"
        )
    return parsed


def _integer(given: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = given.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise DataSourceOptionError(
            f"option {KNOWN_OPTIONS[name]!r} must be an integer >= {minimum}, got {raw!r}"
        )
    return value


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def _timestamp(given: Mapping[str, str], name: str) -> int | None:
    raw = given.get(name)
    if raw is None:
        return None
    try:
        return parse_timestamp(raw, KNOWN_OPTIONS[name])
    except ValueError as e:
        raise DataSourceOptionError(str(e)) from None


def _names(given: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    raw = given.get(name)
    if raw is None:
        return None
    names = tuple(part.strip() for part in raw.split(","))
    if not all(names):
        raise DataSourceOptionError(
            f"option {KNOWN_OPTIONS[name]!r} is column names separated by commas, got {raw!r}"
        )
    return names


def _seconds(raw: str | None) -> float:
    if raw is None:
        return DEFAULT_COMMIT_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise DataSourceOptionError(f"option 'commitTimeout' must be a number of seconds > 0, got {raw!r}")
    return value
