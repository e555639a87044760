"""What each kind of caller of an instance may do, granted in one place, and exported as managed policies.

Each grant is derived from the calls ``statestore.adapters.aws`` makes for that caller, and is built from the
same per-table and per-prefix grants the Lambdas get, so a Lambda given one of these has exactly the rights it
had before. A grantee is a role, a user, a Lambda function or an ``iam.ManagedPolicy``.

The four grants, exported by :class:`ManagedPolicies` for the CLI's user and for jobs run outside this stack
(EMR on EC2, Glue), and attached to the EMR Serverless job role (infra/spark_jobs.py):

- ``read_state``: look tables up, and load their state (log, snapshots, and the objects of both).
- ``commit``: send commit requests through the queue, and read their outcomes.
- ``data``: read, write and delete the tables' data files.
- ``admin``: everything the ``statestore`` CLI does.

``grant_read_state``, ``grant_commit`` and ``grant_data`` also take a table id: the same rights on that one
table only (:mod:`infra.table_grants` says how a grant on shared resources is narrowed to a table, and what
cannot be: the commit queue, which the committer's sender check covers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import data_bucket as objects
from infra.commit_queue import CommitQueue
from infra.data_bucket import DataBucket
from infra.nag import acknowledge
from infra.state import BATCH_WRITE, DELETE, PUT, UPDATE, StateTables
from infra.table_grants import TableGrants

if TYPE_CHECKING:
    from infra.scheduled import UpkeepQueues


class StateStoreGrants:
    """Grants on one instance's tables, bucket, commit queue and upkeep queues."""

    def __init__(
        self,
        state: StateTables,
        data: DataBucket,
        commits: CommitQueue,
        upkeep: UpkeepQueues,
        *,
        committer_mapping_arn: str | None = None,
    ) -> None:
        """``committer_mapping_arn``: the committer's event source mapping, which the admin may switch."""
        self.state = state
        self.data = data
        self.commits = commits
        self.upkeep = upkeep
        self.committer_mapping_arn = committer_mapping_arn

    def for_table(self, table_id: str) -> TableGrants:
        """The grants on one table (raises ValueError for an id a grant cannot be scoped to)."""
        return TableGrants(self.state, self.data, self.commits, table_id)

    def grant_read_state(self, grantee: iam.IGrantable, table_id: str | None = None) -> None:
        """Find tables by name or id, and load a table's state: the latest snapshot (its record and its two
        Parquet objects) and the log after it, with the bodies too large for an item (``StateStoreClient``,
        ``TransactionLogStateStore.load``). Reads only. With ``table_id``, of that table only."""
        if table_id is not None:
            self.for_table(table_id).grant_read_state(grantee)
            return
        self.state.grant_table_index_read(grantee)
        self.state.transaction_log.grant_read_data(grantee)
        self.state.snapshots.grant_read_data(grantee)
        self.data.grant_read(grantee, objects.SNAPSHOT_OBJECTS, objects.LOG_BODY_OBJECTS)

    def grant_commit(self, grantee: iam.IGrantable, table_id: str | None = None) -> None:
        """Send commit requests as ``CommitSender`` does: a body too large for a message is put (tagged, so it
        expires) under the table's ``requests/`` prefix first, then the request goes to the FIFO queue; the
        outcome is read from the commit status table. The committer does the rest. With ``table_id``, for
        that table only (the queue is shared: see :mod:`infra.table_grants`)."""
        if table_id is not None:
            self.for_table(table_id).grant_commit(grantee)
            return
        self.commits.queue.grant_send_messages(grantee)
        self.data.grant_put(grantee, objects.REQUEST_BODY_OBJECTS)
        self.state.commit_status.grant_read_data(grantee)

    def grant_data(self, grantee: iam.IGrantable, table_id: str | None = None) -> None:
        """Read, write and delete data files under ``tables/<id>/data/``, as every Spark job needs one of:
        ingest writes files, compaction reads its inputs, writes its output and deletes a losing job's
        output, orphan collection lists and deletes, queries read. Listing is granted on the bucket (S3 cannot
        list by a wildcard in the middle of a prefix). Nothing of the state: a job pairs this with
        :meth:`grant_read_state` and :meth:`grant_commit`. With ``table_id``, that table's files only, and
        listing only under its data prefix."""
        if table_id is not None:
            self.for_table(table_id).grant_data(grantee)
            return
        self.data.grant_read(grantee, objects.DATA_OBJECTS)
        self.data.grant_put(grantee, objects.DATA_OBJECTS)
        self.data.grant_delete(grantee, objects.DATA_OBJECTS)

    def grant_admin(self, grantee: iam.IGrantable) -> None:
        """Everything the ``statestore`` CLI does: read and commit as above, and

        - ``tables create``/``rename``/``delete``: the table index (TransactWriteItems of puts, an update of
          the name and deletes); a new table's InitialisePartitions is appended to the log directly (with
          the log's leaf index, an update and puts in the entry's TransactWriteItems, for a table that keeps
          a queryable view);
        - ``tables delete``: every log entry, snapshot record and object of the table (BatchWriteItem, and
          DeleteObjects under ``tables/<id>/``), and its tombstone put (``deleted-tables/<id>.json``);
        - ``snapshot``: record a snapshot (its items and its objects);
        - ``cleanup``: delete old log entries and snapshots, garbage data files and stale request bodies,
          committing DeleteFiles straight to the log, and read and move the orphan sweep's progress
          (``tables/<id>/upkeep/``); for deleted tables, delete what late writers left under their prefixes,
          then their tombstones; ``files --orphans`` lists the data prefix;
        - ``dead-letters``: receive, release (ChangeMessageVisibility) and delete the dead-letter queue's
          messages; redrive sends them to the commit queue, as a commit does. ``dead-letters --queue
          upkeep``: the same on the upkeep dead-letter queue, and redrive sends (SendMessage) fresh work
          to the snapshot and cleanup work queues;
        - ``committer pause|resume|status``: find the committer's event source mapping
          (ListEventSourceMappings, which supports no resource-level permissions), switch it
          (UpdateEventSourceMapping, on that mapping only) and read the commit queue's depth.

        It reads no data files and writes none, and never writes commit statuses (only the committer does).
        """
        self.grant_read_state(grantee)
        self.grant_commit(grantee)
        state, data = self.state, self.data
        state.tables_by_id.grant(grantee, *PUT, *UPDATE, *DELETE)
        state.tables_by_name.grant(grantee, *PUT, *DELETE)
        state.transaction_log.grant(grantee, *PUT, *UPDATE, *BATCH_WRITE)
        state.snapshots.grant(grantee, *PUT, *DELETE, *BATCH_WRITE)
        data.grant_put(
            grantee,
            objects.SNAPSHOT_OBJECTS,
            objects.LOG_BODY_OBJECTS,
            objects.UPKEEP_OBJECTS,
            objects.DELETED_TABLE_OBJECTS,  # a deleted table's tombstone
        )
        data.grant_read(grantee, objects.UPKEEP_OBJECTS)
        data.grant_delete(grantee, objects.TABLE_OBJECTS, objects.DELETED_TABLE_OBJECTS)
        self.commits.dead_letter_queue.grant_consume_messages(grantee)
        self.upkeep.dead_letter_queue.grant_consume_messages(grantee)
        self.upkeep.snapshot_queue.grant_send_messages(grantee)
        self.upkeep.cleanup_queue.grant_send_messages(grantee)
        if self.committer_mapping_arn is not None:
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(actions=["lambda:ListEventSourceMappings"], resources=["*"])
            )
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["lambda:UpdateEventSourceMapping"], resources=[self.committer_mapping_arn]
                )
            )


class ManagedPolicies(Construct):
    """The four grants as customer-managed policies, named ``statestore-<instance>-<grant>-<region>``.

    IAM names are global to the account while an instance is regional, hence the region in the name. Attach
    ``admin`` to whoever runs the CLI; ``read_state`` + ``commit`` + ``data`` to a job's role elsewhere.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, instance_id: str, grants: StateStoreGrants
    ) -> None:
        super().__init__(scope, construct_id)

        def policy(
            construct_id: str, grant: str, what: str, apply: Callable[[iam.IGrantable], None]
        ) -> iam.ManagedPolicy:
            created = iam.ManagedPolicy(
                self,
                construct_id,
                managed_policy_name=f"statestore-{instance_id}-{grant}-{Aws.REGION}",
                description=f"statestore {instance_id}: {what}",
            )
            apply(created)
            return created

        self.read_state = policy(
            "ReadState", "read-state", "find tables and read their state", grants.grant_read_state
        )
        self.commit = policy(
            "Commit", "commit", "send commit requests and read their outcomes", grants.grant_commit
        )
        self.data = policy("Data", "data", "read, write and delete the tables' data files", grants.grant_data)
        self.admin = policy(
            "Admin",
            "admin",
            "everything the statestore CLI does: tables, commits, reads, snapshots, cleanup",
            grants.grant_admin,
        )
        acknowledge(
            self.admin,
            "lambda:ListEventSourceMappings supports no resource-level permissions; the CLI lists the "
            "committer function's mappings to find the one it pauses (UpdateEventSourceMapping is scoped).",
            "AwsSolutions-IAM5[Resource::*]",
        )

    @property
    def for_jobs(self) -> tuple[iam.ManagedPolicy, ...]:
        """What a Spark job needs: read the state, commit through the queue, read and write data files."""
        return (self.read_state, self.commit, self.data)
