"""Where a table's objects live in the bucket. Everything of a table sits under its own prefix, so cleanup
and table deletion can never touch another table's objects."""

from __future__ import annotations

import calendar
import re
import time
import uuid

TABLES_PREFIX = "tables/"


def table_prefix(table_id: str) -> str:
    return f"{TABLES_PREFIX}{table_id}/"


# A deleted table's tombstone, written by its delete just before the last step (its record's removal), kept
# outside every table's prefix: the durable fact that lets cleanup delete what a late writer still put under
# the table's prefix after the delete's pass (:mod:`statestore.services.leftovers`).
DELETED_TABLES_PREFIX = "deleted-tables/"


def deleted_table_key(table_id: str) -> str:
    return f"{DELETED_TABLES_PREFIX}{table_id}.json"


def deleted_table_id(key: str) -> str | None:
    """The table id a tombstone's key names, or None for a key that is no tombstone."""
    if not key.startswith(DELETED_TABLES_PREFIX) or not key.endswith(".json"):
        return None
    table_id = key[len(DELETED_TABLES_PREFIX) : -len(".json")]
    return table_id if table_id and "/" not in table_id else None


def data_prefix(table_id: str) -> str:
    return f"{table_prefix(table_id)}data/"


# New data files are keyed by the hour (UTC, by the writer's clock) their key was made in:
# ``tables/<id>/data/written/<YYYY-MM-DDTHH>/<uuid>.parquet``. Keys then sort by when they were written, so
# the orphan sweep can list just the hours written since its last run (:mod:`statestore.engine.orphan_sweep`)
# instead of the whole data prefix. The partition is not in the key (the state says which partitions
# reference a file, and a compaction's output may serve several): a state keeps one directory string per
# distinct directory (:mod:`statestore.state.file_columns`), and one per hour stays few. Any other key under
# the data prefix is still a valid name (older files, names a writer chose itself); the sweep's slow full
# pass covers those.
WRITTEN_SEGMENT = "written"
HOUR_MS = 3_600_000
_HOUR_FORMAT = "%Y-%m-%dT%H"
_HOUR_PATTERN = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2})/")


def written_prefix(table_id: str) -> str:
    """Where data keys made by :func:`new_data_key` live, sorted by the hour they were made in."""
    return f"{data_prefix(table_id)}{WRITTEN_SEGMENT}/"


def written_hour_prefix(table_id: str, epoch_ms: int) -> str:
    """The prefix of the keys made in the hour (UTC) holding ``epoch_ms``."""
    hour = time.strftime(_HOUR_FORMAT, time.gmtime(epoch_ms // 1000))
    return f"{written_prefix(table_id)}{hour}/"


def new_data_key(table_id: str, now_ms: int) -> str:
    """A fresh key for a data file made at ``now_ms`` (the writer's clock, epoch ms)."""
    return f"{written_hour_prefix(table_id, now_ms)}{uuid.uuid4().hex}.parquet"


def written_hour(table_id: str, key: str) -> int | None:
    """The start (epoch ms) of the hour a key made by :func:`new_data_key` names; None for another key."""
    prefix = written_prefix(table_id)
    if not key.startswith(prefix):
        return None
    match = _HOUR_PATTERN.match(key, len(prefix))
    if match is None:
        return None
    year, month, day, hour = (int(g) for g in match.groups())
    try:
        start = calendar.timegm((year, month, day, hour, 0, 0)) * 1000
        # No such hour (a month 13, a 25th hour): not a key of ours, whatever it looks like.
        return start if key.startswith(written_hour_prefix(table_id, start)) else None
    except (OverflowError, ValueError, OSError):
        return None


def upkeep_prefix(table_id: str) -> str:
    """Where cleanup keeps what it must remember of a table between runs (the orphan sweep's progress)."""
    return f"{table_prefix(table_id)}upkeep/"


def orphan_sweep_key(table_id: str) -> str:
    return f"{upkeep_prefix(table_id)}orphan-sweep.json"


def snapshot_prefix(table_id: str) -> str:
    return f"{table_prefix(table_id)}snapshots/"


def snapshot_keys(table_id: str, transaction_number: int) -> tuple[str, str]:
    """Fresh ``(partitions_key, files_key)`` for a snapshot; a random token keeps racing writers apart."""
    base = f"{snapshot_prefix(table_id)}{transaction_number:012d}-{uuid.uuid4().hex[:12]}"
    return f"{base}/partitions.parquet", f"{base}/files.parquet"


def latest_snapshot_keys(table_id: str) -> tuple[str, str]:
    """``(partitions_key, files_key)`` of the copy of the latest snapshot, overwritten by each new one: a
    key a reader knows before it has read which snapshot is the latest. Only its bytes' checksums, recorded
    with the snapshot, say whose copy it holds."""
    base = f"{snapshot_prefix(table_id)}latest"
    return f"{base}/partitions.parquet", f"{base}/files.parquet"


def log_body_prefix(table_id: str) -> str:
    return f"{table_prefix(table_id)}log/"


def log_body_key(table_id: str, transaction_number: int) -> str:
    return f"{log_body_prefix(table_id)}{transaction_number:012d}-{uuid.uuid4().hex[:12]}.body"


def log_attachment_key(table_id: str, request_id: str) -> str:
    """A fresh key for a commit request's body copied under the log prefix, where its log entry points at
    it; a random token keeps racing committers apart."""
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", request_id)
    return f"{log_body_prefix(table_id)}requests/{safe_id}-{uuid.uuid4().hex[:12]}.json"


# A commit request body is temporary: the bucket's lifecycle rule expires objects with this tag (lifecycle
# prefixes cannot wildcard the table id), and cleanup deletes stale ones by the time in their key.
REQUEST_BODY_TAG_KEY = "statestore-lifecycle"
REQUEST_BODY_TAG_VALUE = "request-body"
REQUEST_BODY_TAGS = {REQUEST_BODY_TAG_KEY: REQUEST_BODY_TAG_VALUE}
# The latest snapshot's copy (latest_snapshot_keys) is overwritten by every snapshot: the versions it
# supersedes are never read (the snapshots' own objects are what a restored table needs), and the bucket
# expires them by this tag long before the versions it keeps for recovery.
LATEST_COPY_TAG_VALUE = "latest-snapshot-copy"
LATEST_COPY_TAGS = {REQUEST_BODY_TAG_KEY: LATEST_COPY_TAG_VALUE}


def request_body_prefix(table_id: str) -> str:
    return f"{table_prefix(table_id)}requests/"


def is_under_table(table_id: str, key: str) -> bool:
    return key.startswith(table_prefix(table_id))


# Spark jobs' objects, outside every table's prefix. ``make spark-package`` output is uploaded to
# ``SPARK_ARTIFACTS_PREFIX`` (the code archive, the packed Python environment and the entry point), job
# input is staged under ``SPARK_INPUT_PREFIX``, jobs write their results under ``SPARK_OUTPUT_PREFIX``, and
# EMR writes job logs under ``SPARK_LOGS_PREFIX``. Only the logs expire.
SPARK_ARTIFACTS_PREFIX = "spark/artifacts/"
SPARK_INPUT_PREFIX = "spark/input/"
SPARK_OUTPUT_PREFIX = "spark/output/"
SPARK_LOGS_PREFIX = "spark/logs/"
SPARK_CODE_ARCHIVE = "statestore-spark.zip"
SPARK_ENVIRONMENT_ARCHIVE = "environment.tar.gz"
SPARK_ENTRY_POINT = "statestore_job.py"


def jobs_model_prefix(table_id: str) -> str:
    """Saved job-status models, beside the state snapshots (so garbage collection never takes them)."""
    return f"{snapshot_prefix(table_id)}jobs/"


def jobs_model_key(table_id: str, transaction_number: int) -> str:
    return f"{jobs_model_prefix(table_id)}{transaction_number:012d}.json"
