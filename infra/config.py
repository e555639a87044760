"""An instance's settings, read from CDK context (``cdk.json`` or ``cdk deploy -c key=value``).

- ``instance_id`` (``main``): names everything (``statestore-<id>-...``) and the stack.
- ``lambda_asset`` (``build/lambda/asset``): the folder ``make lambda-asset`` builds.
- ``snapshot_rate_minutes`` (15), ``cleanup_rate_minutes`` (60): how often the scheduled Lambdas run.
- ``committer_memory_mb`` (1024), ``snapshot_memory_mb`` (1024), ``cleanup_memory_mb`` (1024): Lambda
  memory; CPU scales with it. A snapshot or cleanup invocation loads one table, so its memory bounds the
  largest table: the defaults hold a table of 1,000,000 file references at the measured ~600 B per
  reference at peak (``statestore/sizing.py``; the README lists what each size holds).
- ``warm_cache_mb`` (unset): megabytes of table state the committer and the snapshot worker each keep
  warm between invocations (``STATESTORE_WARM_CACHE_MB``; 0 keeps none; loads have their room outside
  it), least recently used evicted first. Unset, each function's budget follows its memory
  (``statestore/sizing.py``: about 793 MB at 1,024 MB, each load first making room for its own peak).
  Below the smaller of the two functions' memory.
- ``committer_max_concurrency`` (10): the most committer invocations the commit queue's event source runs
  at once (2 to 1000), the cap AWS recommends for SQS: at the cap, messages wait in the queue instead of
  being throttled back to it (which counts towards the dead-letter queue). FIFO message groups (one per
  table) bound it too: a table is never processed by two invocations at once.
- ``committer_reserved_concurrency`` (``committer_max_concurrency``, i.e. 10): concurrency reserved for the
  committer, so other functions of the account cannot take it all and leave commits waiting; a positive
  whole number, at least ``committer_max_concurrency`` (fewer would throttle invocations the event source
  starts) and at most 1000, or ``none`` to reserve nothing. The default reserves only what the event source
  can use: 10 of an account's default quota of 1,000 leaves 990 to the other functions. AWS refuses a
  reservation that would leave fewer than 100 unreserved, so an account whose quota is below 110 (some new
  accounts start at 10) must deploy with ``none`` or ask for a higher quota.
- ``upkeep_max_concurrency`` (10): the most snapshot (and, apart, cleanup) invocations working on tables at
  once (2 to 1000), the work queues' event source cap; at it, tables' work waits in the queue. One table is
  never worked on by two at once (its FIFO message group). Replaces ``exclusive_scheduled_runs``, which is
  refused: no concurrency is reserved any more.
- ``dlq_max_receive_count`` (5): receives before a commit request moves to the dead-letter queue.
- ``log_retention_days`` (30): retention of the Lambdas' log groups (a value CloudWatch accepts).
- ``deletion_protection`` (true): DynamoDB deletion protection, and the tables survive ``cdk destroy``;
  false makes the instance disposable. The buckets are always retained.
- ``oldest_message_alarm_seconds`` (300): alarm when a commit request has waited this long.
- ``dead_letter_age_alarm_hours`` (24): alarm when the oldest message of a dead-letter queue has waited this
  long (1 to 240). The queues keep a message 14 days; the not-empty alarms fire at the first dead letter,
  and this one again a day later if nobody acted, with 13 days left to fix and redrive.
- ``retries_alarm_per_5_minutes`` (5): alarm when this many commit requests in 5 minutes go back to the
  queue to be retried (the committer's ``RequestsRetry``); each blocks its table for the visibility timeout.
- ``throttles_alarm_per_5_minutes`` (10): alarm when DynamoDB throttles this many reads and writes in 5
  minutes over the instance's tables (on-demand tables throttle on hot partitions or sudden growth).
- ``memory_alarm_percent`` (90): alarm when an invocation of a function used this share of its memory
  size (50 to 100): the state a function loads grows with the table.
- ``postgres`` (false): keep file references of the tables that choose it in Aurora PostgreSQL (design
  record 002; infra/postgres.py): a VPC with isolated subnets and endpoints, an Aurora PostgreSQL
  Serverless v2 cluster with its credentials in Secrets Manager, and the committer and cleanup functions
  placed in the VPC. Off, the stack has none of it and the functions run outside any VPC. It costs money
  at rest (the README's cost section).
- ``postgres_proxy`` (true): put an RDS Proxy (TLS required) in front of the cluster. The cluster then
  idles at 0.5 ACU (auto-pause does not work behind a proxy); false lets it pause at 0 ACU after 10
  minutes without connections, the functions connecting to the cluster directly.
- ``postgres_max_acu`` (4): the cluster's most capacity in ACUs (1 to 256; 1 ACU is about 2 GiB of memory):
  a bound on cost.
- ``gc_delay_minutes`` (720 = 12 hours): how long a data file that left the state (compacted away) is kept
  before garbage collection deletes it. A query reads the file list it planned with, so this must be longer
  than the longest query (EMR Serverless stops a job after 12 hours by default); a table's own
  ``gc_delay_minutes`` property overrides it.
- ``claim_expiry_minutes`` (780 = 13 hours): the cleanup releases compaction claims older than this, their
  job presumed dead; keep it longer than the longest compaction, or a slow job's work is thrown away.
- ``queryable_views`` (true): the snapshot function keeps the queryable view of each table whose property
  ``queryable_view`` is true, after its snapshot (``statestore tables view TABLE --on``; docs/queryable-
  view.md), and its role may write the snapshots table with BatchWriteItem, which the view's items need
  (IAM cannot narrow it to the view's keys: the snapshot records share the table). False: no view is kept,
  the role has no BatchWriteItem, and queries through a view merge ever more of the log until cleanup
  trims what they need.
- ``alarm_email`` (unset): an address subscribed to the alarm topic.
- ``emr_serverless`` (true): an EMR Serverless Spark application and a job execution role for it.
- ``emr_idle_timeout_minutes`` (15): the application stops after this long without jobs (1 to 10080);
  it starts again by itself when a job is submitted.
- ``emr_max_vcpu`` (16), ``emr_max_memory_gb`` (64), ``emr_max_disk_gb`` (200): the most the application
  runs at once, over all its jobs: a bound on cost. The least is one driver and one executor of the
  smallest size (2 vCPU, 4 GB, 40 GB: every worker has at least 20 GB of disk); the upper bounds only catch
  a typo's extra zeros. 16 vCPU is also a new account's default quota.
- ``scoped_tables`` (unset; comma-separated table ids, as ``statestore tables show`` prints them): for
  each, managed policies granting read-state, commit and data on that table only, and with
  ``emr_serverless`` a job role and a submit policy for that table's Spark jobs (infra/table_access.py;
  docs/security.md). Give the job role's id (the stack's output) to the table's allowed senders so the
  committer refuses requests for the table from anyone else.
- ``emr_subnet_ids``, ``emr_security_group_ids`` (unset; comma-separated): run the jobs in these VPC
  subnets with these security groups. Without a VPC, EMR Serverless jobs reach only some services of the
  region (S3, Glue, CloudWatch Logs, KMS, STS, ...); a job commits through SQS and reads DynamoDB, so give
  subnets with a route to both (VPC endpoints for SQS, DynamoDB and S3, or a NAT gateway). Both or neither.

Values given with ``-c`` arrive as strings; they are parsed here and rejected with the key's name if
they do not fit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from infra.asset import DEFAULT_ASSET_DIR, REPO_ROOT
from statestore import instance
from statestore.instance import ResourceNames
from statestore.services.cleanup_policy import (
    CLAIM_EXPIRY_ENV,
    DEFAULT_CLAIM_EXPIRY_MS,
    DEFAULT_GC_DELAY_MS,
    GC_DELAY_ENV,
    MAX_DELAY_MS,
)
from statestore.services.view_upkeep import QUERYABLE_VIEWS_ENV
from statestore.services.warm_cache import WARM_CACHE_MB_ENV
from statestore.sizing import DEFAULT_WORKER_MEMORY_MB


class ContextSource(Protocol):
    def try_get_context(self, key: str) -> Any: ...


# Log retention values CloudWatch accepts, in days, shortest first.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)


@dataclass(frozen=True)
class InstanceConfig:
    """Everything that differs between two deployed instances."""

    instance_id: str = "main"
    lambda_asset: Path = DEFAULT_ASSET_DIR
    snapshot_rate_minutes: int = 15
    cleanup_rate_minutes: int = 60
    committer_memory_mb: int = 1024
    snapshot_memory_mb: int = DEFAULT_WORKER_MEMORY_MB
    cleanup_memory_mb: int = DEFAULT_WORKER_MEMORY_MB
    committer_max_concurrency: int = 10
    committer_reserved_concurrency: int | None = None  # None: the default, committer_max_concurrency
    reserve_committer_concurrency: bool = True  # False: ``committer_reserved_concurrency=none``
    warm_cache_mb: int | None = None
    upkeep_max_concurrency: int = 10
    dlq_max_receive_count: int = instance.COMMIT_MAX_RECEIVE_COUNT
    log_retention_days: int = 30
    deletion_protection: bool = True
    oldest_message_alarm_seconds: int = 300
    dead_letter_age_alarm_hours: int = 24
    retries_alarm_per_5_minutes: int = 5
    throttles_alarm_per_5_minutes: int = 10
    memory_alarm_percent: int = 90
    alarm_email: str | None = None
    emr_serverless: bool = True
    emr_idle_timeout_minutes: int = 15
    emr_max_vcpu: int = 16
    emr_max_memory_gb: int = 64
    emr_max_disk_gb: int = 200
    emr_subnet_ids: tuple[str, ...] = ()
    emr_security_group_ids: tuple[str, ...] = ()
    scoped_tables: tuple[str, ...] = ()
    gc_delay_minutes: int = DEFAULT_GC_DELAY_MS // 60_000
    claim_expiry_minutes: int = DEFAULT_CLAIM_EXPIRY_MS // 60_000
    postgres: bool = False
    postgres_proxy: bool = True
    postgres_max_acu: int = 4
    queryable_views: bool = True

    def __post_init__(self) -> None:
        ResourceNames.for_instance(self.instance_id)  # raises a clear error for a bad id
        for key in ("snapshot_rate_minutes", "cleanup_rate_minutes", "dlq_max_receive_count"):
            _check_range(key, getattr(self, key), 1, 1000 if key == "dlq_max_receive_count" else 7 * 24 * 60)
        for key in ("committer_memory_mb", "snapshot_memory_mb", "cleanup_memory_mb"):
            _check_range(key, getattr(self, key), 128, 10240)
        _check_range("committer_max_concurrency", self.committer_max_concurrency, 2, 1000)
        _check_range("upkeep_max_concurrency", self.upkeep_max_concurrency, 2, 1000)
        if self.committer_reserved_concurrency is not None:
            _check_range("committer_reserved_concurrency", self.committer_reserved_concurrency, 1, 1000)
            if self.committer_reserved_concurrency < self.committer_max_concurrency:
                raise ValueError(
                    f"context key committer_reserved_concurrency={self.committer_reserved_concurrency} is "
                    f"below committer_max_concurrency={self.committer_max_concurrency}: the event source "
                    "would start invocations that are throttled and sent back to the queue; reserve at "
                    "least as many, or lower committer_max_concurrency"
                )
        if self.warm_cache_mb is not None:
            smallest = min(self.committer_memory_mb, self.snapshot_memory_mb)
            _check_range("warm_cache_mb", self.warm_cache_mb, 0, 10240)
            if self.warm_cache_mb >= smallest:
                raise ValueError(
                    f"context key warm_cache_mb={self.warm_cache_mb} is not below the committer's and the "
                    f"snapshot function's memory ({smallest} MB): they would run out of memory before "
                    "evicting a table; leave it unset to follow their memory"
                )
        _check_range("oldest_message_alarm_seconds", self.oldest_message_alarm_seconds, 60, 14 * 24 * 3600)
        _check_range("dead_letter_age_alarm_hours", self.dead_letter_age_alarm_hours, 1, 240)
        for key in ("retries_alarm_per_5_minutes", "throttles_alarm_per_5_minutes"):
            _check_range(key, getattr(self, key), 1, 1_000_000)
        _check_range("memory_alarm_percent", self.memory_alarm_percent, 50, 100)
        _check_range("emr_idle_timeout_minutes", self.emr_idle_timeout_minutes, 1, 7 * 24 * 60)
        _check_range("emr_max_vcpu", self.emr_max_vcpu, 2, 10_000)
        _check_range("emr_max_memory_gb", self.emr_max_memory_gb, 4, 100_000)
        _check_range("emr_max_disk_gb", self.emr_max_disk_gb, 40, 1_000_000)
        _check_ids("emr_subnet_ids", self.emr_subnet_ids, _SUBNET_ID)
        _check_ids("emr_security_group_ids", self.emr_security_group_ids, _SECURITY_GROUP_ID)
        _check_ids("scoped_tables", self.scoped_tables, _TABLE_ID)
        if len(set(self.scoped_tables)) != len(self.scoped_tables):
            raise ValueError(f"context key scoped_tables names a table twice: {list(self.scoped_tables)}")
        if bool(self.emr_subnet_ids) != bool(self.emr_security_group_ids):
            raise ValueError(
                "context keys emr_subnet_ids and emr_security_group_ids go together: a VPC needs both "
                "the subnets and the security groups for the jobs"
            )
        # Cleanup refuses a delay shorter than the clock skew it assumes (a clock that far ahead would see
        # a file or claim made now as that old already): refused here, not on every cleanup run.
        for key in ("gc_delay_minutes", "claim_expiry_minutes"):
            _check_range(
                key, getattr(self, key), instance.MAX_CLOCK_SKEW_SECONDS // 60, MAX_DELAY_MS // 60_000
            )
        _check_range("postgres_max_acu", self.postgres_max_acu, 1, 256)
        if self.log_retention_days not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"context key log_retention_days={self.log_retention_days} is not a retention CloudWatch "
                f"accepts; use one of {LOG_RETENTION_DAYS}"
            )

    @property
    def committer_reservation(self) -> int | None:
        """The committer's reserved concurrency: the setting, else ``committer_max_concurrency``; None when
        ``committer_reserved_concurrency=none``."""
        if not self.reserve_committer_concurrency:
            return None
        return self.committer_reserved_concurrency or self.committer_max_concurrency

    @property
    def warm_cache_environment(self) -> dict[str, str]:
        """The committer's and the snapshot function's warm budget, as the environment they read it from
        (none when unset: each follows its memory)."""
        return {} if self.warm_cache_mb is None else {WARM_CACHE_MB_ENV: str(self.warm_cache_mb)}

    @property
    def snapshot_environment(self) -> dict[str, str]:
        """The snapshot function's settings from this config, as the environment it reads them from."""
        return {QUERYABLE_VIEWS_ENV: "true" if self.queryable_views else "false"}

    @property
    def cleanup_environment(self) -> dict[str, str]:
        """The cleanup Lambda's settings from this config, as the environment it reads them from."""
        return {GC_DELAY_ENV: str(self.gc_delay_minutes), CLAIM_EXPIRY_ENV: str(self.claim_expiry_minutes)}

    @property
    def resource_names(self) -> ResourceNames:
        """Names for the deployed instance; the bucket name carries account and region (bucket names are
        global), so it is a CloudFormation token until deploy time."""
        from aws_cdk import Aws

        return ResourceNames.for_instance(
            self.instance_id, bucket=f"statestore-{self.instance_id}-data-{Aws.ACCOUNT_ID}-{Aws.REGION}"
        )

    @classmethod
    def from_context(cls, context: ContextSource) -> InstanceConfig:
        """Read every key of the table above from CDK context, defaults for those not given."""
        if context.try_get_context(_REMOVED_KEY) is not None:
            raise ValueError(
                f"context key {_REMOVED_KEY} is no longer used: snapshot and cleanup now work one table per "
                "invocation from a FIFO queue, which keeps two runs off one table without reserving "
                "concurrency; remove it (cap parallel tables with upkeep_max_concurrency)"
            )
        defaults = cls()
        values: dict[str, Any] = {}
        for key in cls.__dataclass_fields__:
            if key == "reserve_committer_concurrency":  # set by committer_reserved_concurrency=none
                continue
            raw = context.try_get_context(key)
            if raw is None or raw == "":
                continue
            default = getattr(defaults, key)
            if key == "lambda_asset":
                path = Path(str(raw))
                values[key] = path if path.is_absolute() else REPO_ROOT / path
            elif isinstance(default, bool):
                values[key] = _parse_bool(key, raw)
            elif key in ("instance_id", "alarm_email"):
                values[key] = str(raw)
            elif key in ("emr_subnet_ids", "emr_security_group_ids", "scoped_tables"):
                items = raw if isinstance(raw, list) else str(raw).split(",")
                values[key] = tuple(str(item).strip() for item in items if str(item).strip())
            elif key == "committer_reserved_concurrency":
                if str(raw).strip().lower() == NO_RESERVATION:
                    values["reserve_committer_concurrency"] = False
                else:
                    values[key] = _parse_positive_int(key, raw, f"or {NO_RESERVATION} to reserve nothing")
            elif isinstance(default, int) or key == "warm_cache_mb":
                values[key] = _parse_int(key, raw)
        return cls(**values)


_REMOVED_KEY = "exclusive_scheduled_runs"
NO_RESERVATION = "none"
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8,17}$")
_TABLE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # infra.table_grants.check_table_id's rule


def _check_ids(key: str, ids: tuple[str, ...], pattern: re.Pattern[str]) -> None:
    bad = [i for i in ids if not pattern.match(i)]
    if bad:
        raise ValueError(f"context key {key}: {bad} do not look like {pattern.pattern[1:-1]!r} ids")


def _parse_bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise ValueError(f"context key {key}={raw!r} must be true or false")


def _parse_int(key: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"context key {key}={raw!r} must be a whole number")
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"context key {key}={raw!r} must be a whole number") from None


def _parse_positive_int(key: str, raw: Any, alternative: str) -> int:
    try:
        value = _parse_int(key, raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"context key {key}={raw!r} must be a positive whole number, {alternative}")
    return value


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"context key {key}={value} must be between {low} and {high}")
