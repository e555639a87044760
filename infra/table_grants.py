"""Grants on one table of an instance: what :class:`infra.grants.StateStoreGrants` gives for every table,
narrowed to a table id.

The instance's tables, bucket and queue are shared by every statestore table, so a grant on one table is a
condition on the shared resource, not a resource of its own:

- DynamoDB: the items of the log, snapshot and table-record tables are keyed by ``table_id`` first, so reads
  are allowed only where every partition key the request names is the table's
  (``ForAllValues:StringEquals`` on ``dynamodb:LeadingKeys``). ``Scan`` is not granted: a scan names no
  partition key, and ``ForAllValues`` over no values is true, so it would read every table. The commit
  status table is conditioned the same way once its key starts with the table id (``resources``), and is
  readable whole while statuses are keyed by request id alone.
- S3: objects under the table's own prefixes only, and listing the bucket only with an ``s3:prefix`` under
  them (``StringLike``: a listing without a prefix, or of another table's, is denied).
- The commit queue: SQS has no condition on a message's group, so whoever may send to the queue may send a
  request for any table. The committer closes that gap for tables that list their allowed senders
  (``statestore.services.committer.senders``): a request from anyone else is refused there.

Looking a table up by name stays open (``tables_by_name`` maps a name to an id and holds nothing else):
a grantee may learn another table's id, and can read nothing with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast

from aws_cdk import CfnElement, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.commit_queue import CommitQueue
from infra.data_bucket import DataBucket
from infra.nag import acknowledge
from infra.state import StateTables
from statestore.model import layout

# Reads that name the partition key (the table id): never Scan, which names none.
KEYED_READS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
OBJECT_READ = ("s3:GetObject",)
OBJECT_WRITE = ("s3:PutObject", "s3:PutObjectTagging", "s3:AbortMultipartUpload")
OBJECT_DELETE = ("s3:DeleteObject",)
# A table id as TableInfo makes them (a UUID), or any id without what IAM or S3 keys would read specially.
_TABLE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_table_id(table_id: str) -> str:
    """``table_id`` if a grant can be scoped to it; raises ValueError naming it otherwise (a ``*``, ``?``,
    ``/`` or ``$`` would widen an IAM pattern or a key prefix to other tables)."""
    if not _TABLE_ID.match(table_id):
        raise ValueError(
            f"cannot scope a grant to table id {table_id!r}: expected letters, digits, '.', '_' or '-' "
            "(the id `statestore tables show` prints)"
        )
    return table_id


def grant_keyed_reads(tables: Sequence[dynamodb.Table], grantee: iam.IGrantable, table_id: str) -> None:
    """Read the items of ``tables`` whose partition key is ``table_id``, and no others."""
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(KEYED_READS),
        resource_arns=[t.table_arn for t in tables],
        conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [table_id]}},
    )


def grant_objects(
    data: DataBucket, grantee: iam.IGrantable, actions: Sequence[str], prefixes: Sequence[str]
) -> None:
    """``actions`` on the objects under ``prefixes`` (a table's own)."""
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=list(actions),
        resource_arns=[data.bucket.arn_for_objects(f"{prefix}*") for prefix in prefixes],
    )
    # The findings are on the principal's policy (a role's), or on the grantee itself when it is a managed
    # policy (whose grant principal is no construct).
    principal = grantee.grant_principal
    target = principal if isinstance(principal, Construct) else grantee
    if isinstance(target, Construct):
        acknowledge_prefixes(target, data, prefixes)


def grant_listing(data: DataBucket, grantee: iam.IGrantable, prefixes: Sequence[str]) -> None:
    """List the bucket under ``prefixes`` only."""
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["s3:ListBucket"],
        resource_arns=[data.bucket.bucket_arn],
        conditions={"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in prefixes]}},
    )


def acknowledge_prefixes(target: Construct, data: DataBucket, prefixes: Sequence[str]) -> None:
    """Acknowledge the cdk-nag IAM5 findings of object grants under ``prefixes`` (a wildcard after a table's
    own prefix is the narrowest S3 can say) on ``target``, the role or managed policy holding them."""
    bucket = f"<{Stack.of(data).get_logical_id(cast(CfnElement, data.bucket.node.default_child))}.Arn>"
    acknowledge(
        target,
        "Objects are granted under one table's own prefixes (statestore.model.layout): the wildcard after "
        "the prefix covers that table's objects of one kind and nothing of another table.",
        *(f"AwsSolutions-IAM5[Resource::{bucket}/{prefix}*]" for prefix in prefixes),
    )


class TableGrants:
    """The read-state, commit and data grants on the table ``table_id`` of an instance."""

    def __init__(self, state: StateTables, data: DataBucket, commits: CommitQueue, table_id: str) -> None:
        self.state = state
        self.data = data
        self.commits = commits
        self.table_id = check_table_id(table_id)

    def grant_read_state(self, grantee: iam.IGrantable) -> None:
        """Find the table (by name or id) and load its state: its record, its log entries and snapshot
        records, and the objects under its ``snapshots/`` and ``log/`` prefixes."""
        table_id, state = self.table_id, self.state
        grant_keyed_reads((state.tables_by_id, state.transaction_log, state.snapshots), grantee, table_id)
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["dynamodb:GetItem"], resource_arns=[state.tables_by_name.table_arn]
        )
        prefixes = (layout.snapshot_prefix(table_id), layout.log_body_prefix(table_id))
        grant_objects(self.data, grantee, OBJECT_READ, prefixes)
        grant_listing(self.data, grantee, prefixes)

    def grant_commit(self, grantee: iam.IGrantable) -> None:
        """Send commit requests for the table (a large body goes under its ``requests/`` prefix first) and
        read their outcomes. Sending reaches the shared queue: see the module's docstring."""
        self.commits.queue.grant_send_messages(grantee)
        grant_objects(self.data, grantee, OBJECT_WRITE, (layout.request_body_prefix(self.table_id),))
        # Statuses are keyed by (table id, request id): the table's own only.
        grant_keyed_reads((self.state.commit_status,), grantee, self.table_id)

    def grant_data(self, grantee: iam.IGrantable) -> None:
        """Read, write, delete and list the table's data files (under its ``data/`` prefix)."""
        prefix = layout.data_prefix(self.table_id)
        grant_objects(self.data, grantee, (*OBJECT_READ, *OBJECT_WRITE, *OBJECT_DELETE), (prefix,))
        grant_listing(self.data, grantee, (prefix,))
