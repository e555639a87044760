"""Resource names, key schemas and shared settings, defined once for the CDK stacks and the embedded mode.

Everything is derived from an *instance id* (``[a-z0-9-]``, 1-20 chars), so several instances can share
an account. Pure data: no AWS imports here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

_INSTANCE_ID = re.compile(r"^[a-z][a-z0-9-]{0,19}$")

# Attribute names, shared by the adapters and the stacks.
TABLE_ID = "table_id"
TABLE_NAME = "table_name"
TRANSACTION_NUMBER = "transaction_number"
SNAPSHOT_KEY = "snapshot_key"
REQUEST_ID = "request_id"
EXPIRES_AT = "expires_at"  # TTL attribute of the commit status table (epoch seconds)


@dataclass(frozen=True)
class KeySchema:
    """A DynamoDB key: ``(name, type)`` pairs, type ``S`` or ``N``."""

    hash_key: tuple[str, str]
    range_key: tuple[str, str] | None = None


TRANSACTION_LOG_KEYS = KeySchema((TABLE_ID, "S"), (TRANSACTION_NUMBER, "N"))
# One item per snapshot (``snapshot#<number, zero padded>``) and one ``latest`` pointer per table.
SNAPSHOTS_KEYS = KeySchema((TABLE_ID, "S"), (SNAPSHOT_KEY, "S"))
TABLES_BY_ID_KEYS = KeySchema((TABLE_ID, "S"))
TABLES_BY_NAME_KEYS = KeySchema((TABLE_NAME, "S"))
# Request ids are scoped to their table: a status is keyed by both, so no table's request can stand for
# another's.
COMMIT_STATUS_KEYS = KeySchema((TABLE_ID, "S"), (REQUEST_ID, "S"))


@dataclass(frozen=True)
class ResourceNames:
    """The names of one instance's tables, bucket and queues.

    Environment variable ``STATESTORE_RESOURCES`` (JSON of this class) lets Lambdas and jobs find them
    without rebuilding names; :meth:`for_instance` builds them from an instance id.
    """

    instance_id: str
    transaction_log_table: str
    snapshots_table: str
    tables_by_id_table: str
    tables_by_name_table: str
    commit_status_table: str
    bucket: str
    commit_queue: str
    dead_letter_queue: str
    # The committer Lambda's name; None in resources JSON written before it was added (redeploy the stack).
    committer_function: str | None = None
    # The FIFO queues of per-table upkeep work (one message per table) and their shared dead-letter queue;
    # None in resources JSON written before they were added (redeploy the stack).
    snapshot_queue: str | None = None
    cleanup_queue: str | None = None
    upkeep_dead_letter_queue: str | None = None
    # The PostgreSQL file-reference database (the stack's ``postgres`` option): the host clients connect to
    # (the RDS Proxy's endpoint, or the cluster's) and the Secrets Manager secret of its credentials; None
    # when the instance has no database (the default) and in resources JSON written before they existed.
    postgres_host: str | None = None
    postgres_secret_arn: str | None = None

    @classmethod
    def for_instance(cls, instance_id: str, bucket: str | None = None) -> ResourceNames:
        if not _INSTANCE_ID.match(instance_id):
            raise ValueError(
                f"instance id {instance_id!r} must be 1-20 characters of a-z, 0-9 and '-', "
                "starting with a letter"
            )
        prefix = f"statestore-{instance_id}"
        return cls(
            instance_id=instance_id,
            transaction_log_table=f"{prefix}-transaction-log",
            snapshots_table=f"{prefix}-snapshots",
            tables_by_id_table=f"{prefix}-tables-by-id",
            tables_by_name_table=f"{prefix}-tables-by-name",
            # The table keyed by request id alone was "-commit-status"; a key schema cannot change in place,
            # so the one keyed by (table, request) has a new name.
            commit_status_table=f"{prefix}-commit-statuses",
            # Bucket names are global: a deployment passes one with its account and region in it.
            bucket=bucket or f"{prefix}-data",
            commit_queue=f"{prefix}-commits.fifo",
            dead_letter_queue=f"{prefix}-commits-dlq.fifo",
            committer_function=f"{prefix}-committer",
            snapshot_queue=f"{prefix}-snapshot-work.fifo",
            cleanup_queue=f"{prefix}-cleanup-work.fifo",
            upkeep_dead_letter_queue=f"{prefix}-upkeep-dlq.fifo",
        )

    def to_json(self) -> str:
        """JSON of every name; the PostgreSQL fields only when set, so an instance without the database
        writes exactly what it wrote before they existed."""
        fields = {
            key: value
            for key, value in asdict(self).items()
            if value is not None or key not in _ABSENT_WHEN_UNSET
        }
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ResourceNames:
        data = json.loads(text)  # JSON without a newer field (committer_function, ...) gets its default
        return cls(**data)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ResourceNames:
        """From the environment alone (see :func:`resolve_resources`)."""
        return resolve_resources(environ=environ)

    def upkeep_queue(self, kind: str) -> str:
        """The work queue of ``kind`` (``snapshot`` or ``cleanup``); raises ValueError, saying to redeploy,
        for resources written before the upkeep queues existed."""
        name = {"snapshot": self.snapshot_queue, "cleanup": self.cleanup_queue}[kind]
        if name is None:
            raise ValueError(
                f"the resources of instance {self.instance_id!r} name no {kind} work queue: they predate "
                "per-table upkeep; redeploy the stack and use its new StatestoreResources output"
            )
        return name

    @property
    def table_key_schemas(self) -> dict[str, KeySchema]:
        """Every DynamoDB table of the instance with its key schema."""
        return {
            self.transaction_log_table: TRANSACTION_LOG_KEYS,
            self.snapshots_table: SNAPSHOTS_KEYS,
            self.tables_by_id_table: TABLES_BY_ID_KEYS,
            self.tables_by_name_table: TABLES_BY_NAME_KEYS,
            self.commit_status_table: COMMIT_STATUS_KEYS,
        }


_ABSENT_WHEN_UNSET = frozenset({"postgres_host", "postgres_secret_arn"})

# Bodies above this many bytes go to the bucket, the log item holding only the key. DynamoDB's item
# limit is 400 KB including attribute names; this leaves ample room.
MAX_INLINE_BODY_BYTES = 300 * 1024
# SQS's message limit is 256 KiB; a commit request bigger than this goes to the bucket first.
MAX_INLINE_REQUEST_BYTES = 200 * 1024


# --- settings the CDK stack and the embedded mode share -----------------------------------------------
# One definition each: ``infra/`` builds the deployed functions and queues from these, and the embedded
# mode creates its queues from them (``statestore.adapters.aws.sqs_queue``); ``tests/infra`` checks that the
# synthesized template holds these values. Durations in seconds.

MINUTE_SECONDS = 60
DAY_SECONDS = 24 * 3600

# The one assumption about clocks: any two of the clocks that stamp or judge the log's times (writers',
# committers', cleanup's, the object store's last-modified times) differ by at most this. Log times never run
# backwards whatever the clocks say; what remains is cleanup's delays measured against its own clock, which
# must exceed it (statestore.services.cleanup_policy.CleanupPolicy refuses less).
MAX_CLOCK_SKEW_SECONDS = 10 * MINUTE_SECONDS

# The Lambda functions' timeouts.
COMMITTER_TIMEOUT_SECONDS = 1 * MINUTE_SECONDS
SNAPSHOT_TIMEOUT_SECONDS = 5 * MINUTE_SECONDS
CLEANUP_TIMEOUT_SECONDS = 10 * MINUTE_SECONDS


def visibility_timeout_seconds(function_timeout_seconds: int) -> int:
    """A queue's visibility timeout for its consuming function's timeout: AWS recommends at least six times
    it, so a message is not handed out again while a throttled or retried invocation still holds it."""
    return 6 * function_timeout_seconds


# The commit queue: a request waits at most this long; one received this many times without success
# moves to the dead-letter queue (the stack's ``dlq_max_receive_count`` context key overrides the count).
COMMIT_QUEUE_VISIBILITY_TIMEOUT_SECONDS = visibility_timeout_seconds(COMMITTER_TIMEOUT_SECONDS)
COMMIT_QUEUE_RETENTION_SECONDS = 4 * DAY_SECONDS
COMMIT_MAX_RECEIVE_COUNT = 5
# The per-table snapshot and cleanup work queues: a table's work is tried this many times.
WORK_QUEUE_VISIBILITY_TIMEOUT_SECONDS = {
    "snapshot": visibility_timeout_seconds(SNAPSHOT_TIMEOUT_SECONDS),
    "cleanup": visibility_timeout_seconds(CLEANUP_TIMEOUT_SECONDS),
}
WORK_QUEUE_RETENTION_SECONDS = 1 * DAY_SECONDS
WORK_MAX_RECEIVE_COUNT = 3
# Every dead-letter queue keeps a message for the longest SQS allows.
DEAD_LETTER_RETENTION_SECONDS = 14 * DAY_SECONDS
# The longest a commit request's message can live: on the commit queue, then on its dead-letter queue, then
# on the commit queue again once redriven (SQS restarts a FIFO message's retention when it moves queues).
REQUEST_MAX_LIFETIME_SECONDS = 2 * COMMIT_QUEUE_RETENTION_SECONDS + DEAD_LETTER_RETENTION_SECONDS
# A commit status outlives every message that can carry its request, so a redelivery, a resend or a redrive
# of a committed request always finds it (a request resent after this is a new request).
COMMIT_STATUS_RETENTION_SECONDS = REQUEST_MAX_LIFETIME_SECONDS + DAY_SECONDS
# The bucket expires a stray commit-request body after this many days: longer than any message can carry
# its request, so a request can still be redriven.
REQUEST_BODY_EXPIRY_DAYS = REQUEST_MAX_LIFETIME_SECONDS // DAY_SECONDS + 1
# Reasons stored with an outcome: a commit status's (a DynamoDB attribute, far below the 400 KB item limit)
# and a dead letter's (an SQS message attribute, which counts towards the 256 KiB message limit).
MAX_STATUS_REASON_CHARS = 16_000
MAX_DEAD_LETTER_REASON_CHARS = 2_000

# The PostgreSQL file-reference database (the stack's ``postgres`` option): the database the stack creates,
# and the environment variables that tell a function where it is (the host: the RDS Proxy's endpoint or the
# cluster's) and which Secrets Manager secret holds its credentials.
POSTGRES_DATABASE_NAME = "statestore"
POSTGRES_HOST_ENV = "STATESTORE_POSTGRES_HOST"
POSTGRES_SECRET_ARN_ENV = (
    "STATESTORE_POSTGRES_SECRET_ARN"  # the app role's (statestore.adapters.postgres.schema)
)
# The master user's secret: only the schema migration (lambdas/postgres_schema.py) is given it.
POSTGRES_MASTER_SECRET_ARN_ENV = "STATESTORE_POSTGRES_MASTER_SECRET_ARN"
# libpq's sslmode for that connection: "verify-full" (the default: the certificate is checked against the
# bundled RDS certificate authorities, statestore/adapters/postgres/tls.py); "disable" for a
# local server without TLS.
POSTGRES_SSLMODE_ENV = "STATESTORE_POSTGRES_SSLMODE"
# A PostgreSQL connection URL (libpq conninfo): where tables whose files are in PostgreSQL keep them, for
# the CLI, the embedded runtime and self-managed databases (the stack's functions use the two above).
POSTGRES_URL_ENV = "STATESTORE_POSTGRES_URL"
# Server settings the file-reference store is planned for, set by the stack's cluster parameter group and
# by the throwaway servers of the tests and benchmarks. random_page_cost: the planner's default (4) prices a
# random read as a spinning disk's, so a commit's lookup of 1,000 files by name (an index scan on the
# primary key, 5 ms) lost to a sequential scan of every file row of every table (20 ms at 100,000 rows,
# and growing with the database); 1.1 is the usual value for SSD storage, which Aurora's is.
POSTGRES_SERVER_SETTINGS: dict[str, str] = {"random_page_cost": "1.1"}


# --- whose resources -------------------------------------------------------------------------------------

RESOURCES_ENV = "STATESTORE_RESOURCES"  # the stack's StatestoreResources output (JSON)
INSTANCE_ENV = "STATESTORE_INSTANCE_ID"
BUCKET_ENV = "STATESTORE_BUCKET"  # an instance id's bucket, where it is not the default name


class ResourcesSettingError(ValueError):
    """A setting naming an instance's resources is wrong; the message names the setting (an option, an
    argument, an environment variable) and says what is wrong with it."""


def resolve_resources(
    resources_json: str | None = None,
    instance: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    resources_setting: str = "resources",
    instance_setting: str = "instance",
) -> ResourceNames:
    """Whose resources the library, the CLI, the Spark data source and the Spark jobs use, by one rule: the
    resources' JSON given (or the file it names, when it is not JSON), else the instance id given, else
    ``$STATESTORE_RESOURCES``, else ``$STATESTORE_INSTANCE_ID``, else the instance ``local``. An instance
    id's bucket is ``$STATESTORE_BUCKET`` where that is set (a deployed bucket's name has its account and
    region in it). ``resources_setting`` and ``instance_setting`` name the two given values in errors
    (``--instance``, ``option 'instance'``...).

    Raises ResourcesSettingError naming the setting that is wrong (or the file that cannot be read)."""
    env = os.environ if environ is None else environ
    text, where = None, resources_setting
    if resources_json:
        text = _json_or_file(resources_json, resources_setting)
    elif instance:
        where = instance_setting
    elif env.get(RESOURCES_ENV):
        text, where = env[RESOURCES_ENV], f"${RESOURCES_ENV}"
    else:
        instance, where = env.get(INSTANCE_ENV) or "local", f"${INSTANCE_ENV}"
    if text is not None:
        try:
            return ResourceNames.from_json(text)
        except (ValueError, TypeError) as e:
            raise ResourcesSettingError(
                f"{where} is not the stack's StatestoreResources JSON ({e}); copy it from `cdk deploy`'s "
                "outputs"
            ) from None
    assert instance is not None
    try:
        return ResourceNames.for_instance(instance, env.get(BUCKET_ENV) or None)
    except ValueError as e:
        raise ResourcesSettingError(f"{where}: {e}") from None


def _json_or_file(given: str, setting: str) -> str:
    """``given`` when it is JSON (an object), else the text of the file it names."""
    if given.lstrip().startswith("{"):
        return given
    try:
        return Path(given).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResourcesSettingError(f"{setting}: file {given!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ResourcesSettingError(f"{setting}: cannot read {given!r}: {e}") from None
