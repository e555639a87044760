"""One instance's AWS adapters, built from its :class:`~statestore.instance.ResourceNames`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statestore.adapters.aws.clients import AwsCaller, make_client
from statestore.adapters.aws.commit_status import DynamoDBCommitStatusStore
from statestore.adapters.aws.dynamodb_log import DynamoDBTransactionLog
from statestore.adapters.aws.dynamodb_snapshots import DynamoDBSnapshotMetadataStore
from statestore.adapters.aws.dynamodb_view import DynamoDBQueryableViewStore
from statestore.adapters.aws.provision import provision
from statestore.adapters.aws.s3_blobs import S3BlobStore
from statestore.adapters.aws.sqs_dead_letters import SqsDeadLetterQueue
from statestore.adapters.aws.sqs_queue import SqsCommitQueue
from statestore.adapters.aws.table_index import DynamoDBTableIndex
from statestore.engine.requests import CommitSender
from statestore.instance import ResourceNames


@dataclass
class AwsBackend:
    """The clients and the port adapters of one instance. Clients are thread-safe; share one backend."""

    resources: ResourceNames
    dynamodb: Any
    s3: Any
    caller: AwsCaller = field(default_factory=AwsCaller)

    def __post_init__(self) -> None:
        r = self.resources
        self.blobs = S3BlobStore(self.s3, r.bucket, self.caller)
        self.commit_statuses = DynamoDBCommitStatusStore(self.dynamodb, r.commit_status_table, self.caller)
        # The log writes a committed request's status with its entry, in one transaction.
        self.log = DynamoDBTransactionLog(
            self.dynamodb,
            r.transaction_log_table,
            self.blobs,
            caller=self.caller,
            statuses=self.commit_statuses,
        )
        self.snapshot_metadata = DynamoDBSnapshotMetadataStore(self.dynamodb, r.snapshots_table, self.caller)
        # The queryable view's items share the snapshots table, under their own key prefix.
        self.queryable_view = DynamoDBQueryableViewStore(self.dynamodb, r.snapshots_table, self.caller)
        self.table_index = DynamoDBTableIndex(
            self.dynamodb, r.tables_by_id_table, r.tables_by_name_table, self.caller
        )

    def queue(self, sqs: Any, queue_name: str) -> SqsCommitQueue:
        """One of the instance's queues (the commit queue or the dead-letter queue) through ``sqs``."""
        return SqsCommitQueue.named(sqs, queue_name, self.caller)

    def dead_letter_queue(self, sqs: Any) -> SqsDeadLetterQueue:
        """The instance's dead-letter queue, for listing, redriving and purging its messages."""
        return SqsDeadLetterQueue.named(sqs, self.resources.dead_letter_queue, self.caller)

    def upkeep_dead_letter_queue(self, sqs: Any) -> SqsDeadLetterQueue:
        """The dead-letter queue of the snapshot and cleanup work queues. Raises ValueError, saying to
        redeploy, for resources written before the upkeep queues existed."""
        name = self.resources.upkeep_dead_letter_queue
        if name is None:
            raise ValueError(
                f"the resources of instance {self.resources.instance_id!r} name no upkeep dead-letter queue: "
                "they predate per-table upkeep; redeploy the stack and use its new StatestoreResources output"
            )
        return SqsDeadLetterQueue.named(sqs, name, self.caller)

    def commit_sender(self, sqs: Any) -> CommitSender:
        """A sender of commit requests to the instance's queue, with its status table and bucket."""
        return CommitSender(self.queue(sqs, self.resources.commit_queue), self.commit_statuses, self.blobs)

    @classmethod
    def connect(
        cls,
        resources: ResourceNames,
        endpoint_url: str | None = None,
        *,
        region: str | None = None,
        dynamodb_endpoint_url: str | None = None,
        s3_endpoint_url: str | None = None,
        max_pool_connections: int = 32,
    ) -> AwsBackend:
        """Clients for ``endpoint_url`` (one local endpoint for both services, e.g. a moto server), or per
        service endpoints, or AWS itself when none is given."""
        dynamodb = make_client(
            "dynamodb",
            endpoint_url=dynamodb_endpoint_url or endpoint_url,
            region=region,
            max_pool_connections=max_pool_connections,
        )
        s3 = make_client(
            "s3",
            endpoint_url=s3_endpoint_url or endpoint_url,
            region=region,
            max_pool_connections=max_pool_connections,
        )
        return cls(resources, dynamodb, s3)

    def provision(self) -> None:
        """Create the instance's tables and bucket where missing (embedded mode and tests)."""
        provision(self.resources, self.dynamodb, self.s3)
