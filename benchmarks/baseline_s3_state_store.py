"""The older design of reference 003, as a baseline: the whole state of a table as one object in S3, rewritten
on every update behind a revision check (a conditional update of a revision item in DynamoDB).

A commit: read the revision item (strongly consistent); if it moved, download and decode the state; validate
and apply the transaction; encode the whole state and upload it under a new key; then move the revision item
from the revision it was based on to the new one. If another writer moved it first, delete the upload, back
off (full jitter, the same policy as the log) and start again. Partitions are not rewritten by AddFiles, so
only the files object is (as Sleeper's store keeps files and partitions apart).

Run with ``python benchmarks/bench_sync_commits.py``, which measures it beside the log.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from statestore.adapters.aws.clients import AwsCaller
from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.engine.log_store import RetryPolicy
from statestore.errors import CommitConflictError, StateStoreError
from statestore.model.schema import Schema
from statestore.state.table_state import TableState
from statestore.transactions import Transaction


class _RevisionMoved(StateStoreError):
    """Another writer updated the state first."""


def create_revision_table(dynamodb: Any, table_name: str) -> None:
    """The one DynamoDB table the baseline needs: one item per table with its current revision."""
    dynamodb.create_table(
        TableName=table_name,
        KeySchema=[{"AttributeName": "table_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "table_id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 1})


@dataclass
class _Revision:
    number: int
    partitions_key: str
    files_key: str


class S3StateStore:
    """One writer's view of a table whose whole state lives in S3 (not thread-safe: one per thread)."""

    def __init__(
        self,
        table_id: str,
        schema: Schema,
        dynamodb: Any,
        s3: Any,
        revision_table: str,
        bucket: str,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.table_id = table_id
        self.schema = schema
        self.dynamodb = dynamodb
        self.s3 = s3
        self.revision_table = revision_table
        self.bucket = bucket
        self.retry = retry or RetryPolicy()
        self.call = AwsCaller()
        self.rng = random.Random()
        self._revision: _Revision | None = None
        self._state: TableState | None = None
        self.retries = 0

    def initialise(self, state: TableState) -> None:
        """Write the first revision of a table (the benchmark's starting point)."""
        revision = self._upload(state, 1, write_partitions=True, partitions_key=None)
        self.dynamodb.put_item(TableName=self.revision_table, Item=self._item(revision))
        self._revision, self._state = revision, state

    def state(self) -> TableState:
        revision = self._read_revision()
        if self._state is None or self._revision is None or revision.number != self._revision.number:
            partitions = self._get(revision.partitions_key)
            files = self._get(revision.files_key)
            self._state = state_from_parquet(self.schema, partitions, files, revision.number)
            self._revision = revision
        return self._state

    def commit(self, transaction: Transaction) -> int:
        """Apply ``transaction`` to the whole state and write it all back; returns the new revision."""
        for attempt in range(self.retry.max_attempts):
            state = self.state().copy()
            base = self._revision
            assert base is not None
            transaction.validate(state)
            transaction.apply(state, time.time_ns() // 1_000_000)
            new = self._upload(
                state, base.number + 1, write_partitions=False, partitions_key=base.partitions_key
            )
            try:
                self._move_revision(base, new)
            except _RevisionMoved:
                self.s3.delete_object(Bucket=self.bucket, Key=new.files_key)
                self.retries += 1
                time.sleep(self.retry.delay(attempt, self.rng))
                continue
            state.transaction_number = new.number
            self._revision, self._state = new, state
            return new.number
        raise CommitConflictError(f"baseline: gave up after {self.retry.max_attempts} attempts")

    def _upload(
        self, state: TableState, number: int, *, write_partitions: bool, partitions_key: str | None
    ) -> _Revision:
        partitions_bytes, files_bytes = state_to_parquet(state)
        base = f"baseline/{self.table_id}/{number:012d}-{uuid.uuid4().hex[:8]}"
        if write_partitions or partitions_key is None:
            partitions_key = f"{base}-partitions.parquet"
            self.s3.put_object(Bucket=self.bucket, Key=partitions_key, Body=partitions_bytes)
        files_key = f"{base}-files.parquet"
        self.s3.put_object(Bucket=self.bucket, Key=files_key, Body=files_bytes)
        return _Revision(number, partitions_key, files_key)

    def _move_revision(self, base: _Revision, new: _Revision) -> None:
        def moved(code: str, _error: Any) -> StateStoreError | None:
            return _RevisionMoved() if code == "ConditionalCheckFailedException" else None

        self.call(
            "move the revision",
            self.dynamodb.put_item,
            moved,
            TableName=self.revision_table,
            Item=self._item(new),
            ConditionExpression="revision = :base",
            ExpressionAttributeValues={":base": {"N": str(base.number)}},
        )

    def _read_revision(self) -> _Revision:
        item = self.dynamodb.get_item(
            TableName=self.revision_table, Key={"table_id": {"S": self.table_id}}, ConsistentRead=True
        )["Item"]
        return _Revision(int(item["revision"]["N"]), item["partitions_key"]["S"], item["files_key"]["S"])

    def _item(self, revision: _Revision) -> dict[str, Any]:
        return {
            "table_id": {"S": self.table_id},
            "revision": {"N": str(revision.number)},
            "partitions_key": {"S": revision.partitions_key},
            "files_key": {"S": revision.files_key},
        }

    def _get(self, key: str) -> bytes:
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()


if __name__ == "__main__":
    import bench_sync_commits

    bench_sync_commits.main(["--only", "baseline"])
