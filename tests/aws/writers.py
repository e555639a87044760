"""A writer that appends AddFiles to one table's log on a local endpoint: run in threads and in processes."""

from __future__ import annotations

from dataclasses import dataclass

from statestore.adapters.aws.backend import AwsBackend
from statestore.engine.log_store import RetryPolicy, TransactionLogStateStore
from statestore.instance import ResourceNames
from statestore.model import layout
from statestore.model.files import FileReference
from statestore.model.schema import Schema
from statestore.transactions import AddFiles

SCHEMA = Schema.of({"key": "long"})
RETRY = RetryPolicy(max_attempts=100, base_delay=0.002, max_delay=0.1)


@dataclass(frozen=True)
class WriterReport:
    """What one writer saw acknowledged, and its final view of the table."""

    writer: str
    acknowledged: dict[int, tuple[str, ...]]  # transaction number -> the files it added
    final_number: int
    final_files: tuple[str, ...]
    retries: int


def write(
    resources_json: str,
    endpoints: tuple[str, str],
    table_id: str,
    writer: str,
    commits: int,
    files_per_commit: int = 3,
) -> WriterReport:
    """Commit ``commits`` AddFiles with this writer's own file names through its own state store.

    ``endpoints`` is (DynamoDB, S3)."""
    dynamodb_endpoint, s3_endpoint = endpoints
    backend = AwsBackend.connect(
        ResourceNames.from_json(resources_json),
        region="eu-west-2",
        dynamodb_endpoint_url=dynamodb_endpoint,
        s3_endpoint_url=s3_endpoint,
    )
    store = TransactionLogStateStore(table_id, SCHEMA, backend.log, retry=RETRY)
    acknowledged: dict[int, tuple[str, ...]] = {}
    for i in range(commits):
        names = tuple(
            f"{layout.data_prefix(table_id)}{writer}/{i}/{j}.parquet" for j in range(files_per_commit)
        )
        result = store.commit(AddFiles(tuple(FileReference(name, "root", 1) for name in names)))
        acknowledged[result.transaction_number] = names
    final = store.state()
    return WriterReport(
        writer, acknowledged, final.transaction_number, tuple(sorted(final.files_by_name)), store.retries
    )
