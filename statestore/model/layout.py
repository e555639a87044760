"""Where a table's objects live in the bucket. Everything of a table sits under its own prefix, so cleanup
and table deletion can never touch another table's objects."""

from __future__ import annotations

import re
import uuid


def table_prefix(table_id: str) -> str:
    return f"tables/{table_id}/"


def data_prefix(table_id: str) -> str:
    return f"{table_prefix(table_id)}data/"


def snapshot_prefix(table_id: str) -> str:
    return f"{table_prefix(table_id)}snapshots/"


def snapshot_keys(table_id: str, transaction_number: int) -> tuple[str, str]:
    """Fresh ``(partitions_key, files_key)`` for a snapshot; a random token keeps racing writers apart."""
    base = f"{snapshot_prefix(table_id)}{transaction_number:012d}-{uuid.uuid4().hex[:12]}"
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
