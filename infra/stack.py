"""One statestore instance: tables, bucket, commit queue, committer, scheduled Lambdas, alarms, the managed
policies for callers outside the stack, the EMR Serverless application for Spark jobs (optional), outputs.

Grants are made here, where the pieces meet, and each function gets only what its handler uses.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack, Token
from constructs import Construct

from infra import data_bucket as objects
from infra.alarms import Alarms
from infra.asset import require_asset
from infra.commit_queue import CommitQueue
from infra.committer import COMMIT_QUEUE_VISIBILITY_TIMEOUT, COMMITTER_TIMEOUT, Committer
from infra.config import InstanceConfig
from infra.dashboard import Dashboard
from infra.data_bucket import DataBucket, check_bucket_name_length
from infra.functions import FunctionNetwork, StatestoreFunction, log_retention
from infra.grants import ManagedPolicies, StateStoreGrants
from infra.postgres import PostgresDatabase
from infra.scheduled import ScheduledFunction, UpkeepQueues
from infra.spark_jobs import SparkJobs
from infra.state import BATCH_WRITE, DELETE, PUT, UPDATE, StateTables, grant_read_and
from infra.table_access import TableAccess
from statestore import instance
from statestore.model import layout
from statestore.services.upkeep import UPKEEP_PERIOD_ENV, UpkeepKind

SNAPSHOT_TIMEOUT = Duration.seconds(instance.SNAPSHOT_TIMEOUT_SECONDS)
CLEANUP_TIMEOUT = Duration.seconds(instance.CLEANUP_TIMEOUT_SECONDS)


class StatestoreStack(Stack):
    """Deploys the instance ``config.instance_id``; synthesising needs the built Lambda asset."""

    def __init__(self, scope: Construct, construct_id: str, *, config: InstanceConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        require_asset(config.lambda_asset)
        names = config.resource_names
        # An environment-agnostic stack deploys to the region the CLI passes as CDK_DEFAULT_REGION.
        region = None if Token.is_unresolved(self.region) else self.region
        check_bucket_name_length(config.instance_id, region or os.environ.get("CDK_DEFAULT_REGION"))

        self.state = StateTables(self, "State", names=names, deletion_protection=config.deletion_protection)
        self.data = DataBucket(
            self,
            "Data",
            bucket_name=names.bucket,
            spark_log_expiry=Duration.days(config.log_retention_days),
        )
        self.commits = CommitQueue(
            self,
            "CommitQueue",
            names=names,
            visibility_timeout=COMMIT_QUEUE_VISIBILITY_TIMEOUT,
            max_receive_count=config.dlq_max_receive_count,
        )
        # The PostgreSQL file-reference database (``postgres``, off by default): its host and secret join the
        # resources every function and the CLI read; the functions that use it run in its VPC.
        self.postgres: PostgresDatabase | None = None
        network: FunctionNetwork | None = None
        if config.postgres:
            self.postgres = PostgresDatabase(
                self,
                "Postgres",
                instance_id=config.instance_id,
                proxy=config.postgres_proxy,
                max_capacity_acu=config.postgres_max_acu,
                deletion_protection=config.deletion_protection,
                log_retention=log_retention(config.log_retention_days),
            )
            names = dataclasses.replace(
                names, postgres_host=self.postgres.host, postgres_secret_arn=self.postgres.secret.secret_arn
            )
            network = self.postgres.network
        self.names = names
        function_settings: dict[str, Any] = {
            "asset_dir": config.lambda_asset,
            "names": names,
            "log_retention_days": config.log_retention_days,
        }
        self.committer = Committer(
            self,
            "Committer",
            queue=self.commits.queue,
            memory_mb=config.committer_memory_mb,
            max_concurrency=config.committer_max_concurrency,
            reserved_concurrency=config.committer_reservation,
            network=network,
            **function_settings,
        )
        self.upkeep = UpkeepQueues(
            self, "Upkeep", names=names, snapshot_timeout=SNAPSHOT_TIMEOUT, cleanup_timeout=CLEANUP_TIMEOUT
        )
        self.snapshot = ScheduledFunction(
            self,
            "Snapshot",
            handler="lambdas.snapshot.handler",
            description="writes a Parquet snapshot of each table whose log has moved, one table per message",
            rate_minutes=config.snapshot_rate_minutes,
            period_variable=UPKEEP_PERIOD_ENV[UpkeepKind.SNAPSHOT],
            timeout=SNAPSHOT_TIMEOUT,
            memory_mb=config.snapshot_memory_mb,
            work_queue=self.upkeep.snapshot_queue,
            max_concurrency=config.upkeep_max_concurrency,
            **function_settings,
        )
        self.cleanup = ScheduledFunction(
            self,
            "Cleanup",
            handler="lambdas.cleanup.handler",
            description="deletes old log entries and snapshots and garbage data files, one table per message",
            rate_minutes=config.cleanup_rate_minutes,
            period_variable=UPKEEP_PERIOD_ENV[UpkeepKind.CLEANUP],
            timeout=CLEANUP_TIMEOUT,
            memory_mb=config.cleanup_memory_mb,
            work_queue=self.upkeep.cleanup_queue,
            max_concurrency=config.upkeep_max_concurrency,
            network=network,
            **function_settings,
        )
        self.functions = {
            "committer": self.committer.lambda_,
            "snapshot": self.snapshot.lambda_,
            "cleanup": self.cleanup.lambda_,
        }
        self.grants = StateStoreGrants(
            self.state,
            self.data,
            self.commits,
            self.upkeep,
            committer_mapping_arn=self.committer.event_source.event_source_mapping_arn,
        )
        for name, value in config.cleanup_environment.items():  # the GC delay and the claim expiry
            self.cleanup.function.add_environment(name, value)
        for name, value in config.snapshot_environment.items():  # whether it keeps queryable views
            self.snapshot.function.add_environment(name, value)
        for name, value in config.warm_cache_environment.items():  # the warm budget, when set
            self.committer.function.add_environment(name, value)
            self.snapshot.function.add_environment(name, value)
        self._grant()
        if self.postgres is not None:
            # The committer applies file-reference transactions; the cleanup marks and collects garbage
            # files. The snapshot function only touches partitions (always on the log): no database.
            self.postgres.connect(self.committer.function)
            self.postgres.connect(self.cleanup.function)
            self.schema_migration = StatestoreFunction(
                self,
                "PostgresSchema",
                handler="lambdas.postgres_schema.handler",
                description="creates the file-reference database's schema and the role the functions use",
                asset_dir=config.lambda_asset,
                names=names,
                memory_mb=256,
                timeout=Duration.minutes(2),
                log_retention_days=config.log_retention_days,
                network=network,
            )
            self.postgres.migrate_with(self.schema_migration.function)
        self.policies = ManagedPolicies(self, "Policies", instance_id=config.instance_id, grants=self.grants)
        self.spark: SparkJobs | None = None
        if config.emr_serverless:
            self.spark = SparkJobs(
                self,
                "Spark",
                instance_id=config.instance_id,
                data=self.data,
                job_policies=self.policies.for_jobs,
                idle_timeout_minutes=config.emr_idle_timeout_minutes,
                max_vcpu=config.emr_max_vcpu,
                max_memory_gb=config.emr_max_memory_gb,
                max_disk_gb=config.emr_max_disk_gb,
                subnet_ids=config.emr_subnet_ids,
                security_group_ids=config.emr_security_group_ids,
            )
        # Callers confined to one table each (``scoped_tables``): its policies, and its Spark job role.
        self.table_access = {
            table_id: TableAccess(
                self,
                f"Table-{table_id}",
                instance_id=config.instance_id,
                table_id=table_id,
                grants=self.grants,
                spark=self.spark,
            )
            for table_id in config.scoped_tables
        }
        self.alarms = Alarms(
            self,
            "Alarms",
            instance_id=config.instance_id,
            commit_queue=self.commits.queue,
            dead_letter_queue=self.commits.dead_letter_queue,
            upkeep_dead_letter_queue=self.upkeep.dead_letter_queue,
            work_queues={
                "snapshot": (self.upkeep.snapshot_queue, config.snapshot_rate_minutes),
                "cleanup": (self.upkeep.cleanup_queue, config.cleanup_rate_minutes),
            },
            functions=self.functions,
            tables=self.state.all_tables,
            oldest_message_seconds=config.oldest_message_alarm_seconds,
            dead_letter_age_hours=config.dead_letter_age_alarm_hours,
            retries_per_5_minutes=config.retries_alarm_per_5_minutes,
            throttles_per_5_minutes=config.throttles_alarm_per_5_minutes,
            memory_percent=config.memory_alarm_percent,
            alarm_email=config.alarm_email,
            queryable_views=config.queryable_views,
        )
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            instance_id=config.instance_id,
            functions=self.functions,
            timeouts={
                "committer": COMMITTER_TIMEOUT,
                "snapshot": SNAPSHOT_TIMEOUT,
                "cleanup": CLEANUP_TIMEOUT,
            },
            commit_queue=self.commits.queue,
            dead_letter_queue=self.commits.dead_letter_queue,
            upkeep=self.upkeep,
            tables=self.state.all_tables,
            alarms=self.alarms.alarms,
        )
        self._outputs()

    def _grant(self) -> None:
        """Each function's grants, from the calls its handler makes through statestore.adapters.aws. Every one
        loads tables, which is :meth:`StateStoreGrants.grant_read_state`; the rest is its own."""
        state, data, commits = self.state, self.data, self.commits

        # Committer: loads a table (index, latest snapshot, log after it), appends one entry per batch and
        # table (a large body goes to the bucket first, and is deleted again if the number was taken),
        # records each request's outcome (conditional puts in one TransactWriteItems: a final status is never
        # overwritten), sends malformed requests to the dead-letter queue with their reason. An entry of a
        # table that keeps a queryable view updates the log's leaf index in the same transaction (its chain
        # item, UpdateItem; its hints, PutItem). Consuming the commit queue is granted by its event source.
        committer = self.committer.function
        self.grants.grant_read_state(committer)
        state.transaction_log.grant(committer, *PUT, *UPDATE)
        grant_read_and(state.commit_status, committer, PUT)
        data.grant_read(committer, objects.REQUEST_BODY_OBJECTS)
        data.grant_put(committer, objects.LOG_BODY_OBJECTS)
        data.grant_delete(committer, objects.LOG_BODY_OBJECTS)
        commits.dead_letter_queue.grant_send_messages(committer)

        # Snapshot: plans (lists the tables, reads each one's log head and latest snapshot record, queues
        # work), then loads one table per message and records a snapshot; it never writes the log. It deletes
        # the objects of a snapshot whose recording lost a race (SnapshotStore.write), and a table's snapshot
        # records and objects (and view items) again when the table's delete began while it wrote them
        # (in batches of 25). The queryable views' items sit beside the snapshot records (view#...), written
        # and deleted in batches too; their meta moves with a conditional PutItem. Consuming its work queue
        # is granted by its event source.
        snapshot = self.snapshot.function
        self.grants.grant_read_state(snapshot)
        self.upkeep.snapshot_queue.grant_send_messages(snapshot)
        state.snapshots.grant(snapshot, *PUT)
        state.snapshots.grant(snapshot, *BATCH_WRITE)
        data.grant_put(snapshot, objects.SNAPSHOT_OBJECTS)
        data.grant_delete(snapshot, objects.SNAPSHOT_OBJECTS)

        # Cleanup: deletes old log entries with their bodies and old snapshots (records and objects),
        # garbage-collects unreferenced data files and stale request bodies, and commits DeleteFiles
        # straight to the log (not through the queue; indexed as the committer's entries are). Its plan lists
        # the tables and queues work.
        cleanup = self.cleanup.function
        self.grants.grant_read_state(cleanup)
        self.upkeep.cleanup_queue.grant_send_messages(cleanup)
        state.transaction_log.grant(cleanup, *PUT, *UPDATE, *BATCH_WRITE)
        state.snapshots.grant(cleanup, *DELETE, *BATCH_WRITE)
        data.grant_put(cleanup, objects.LOG_BODY_OBJECTS, objects.UPKEEP_OBJECTS)
        data.grant_read(cleanup, objects.UPKEEP_OBJECTS)  # the orphan sweep's watermark, read and moved
        # Every object of a table: old log bodies, snapshots, garbage data files, request bodies, the sweep's
        # progress (when the table's delete overtook the cleanup), and anything late writers put under a
        # deleted table's prefix, with that table's tombstone (statestore.services.leftovers).
        data.grant_delete(cleanup, objects.TABLE_OBJECTS, objects.DELETED_TABLE_OBJECTS)

    def _outputs(self) -> None:
        """What the CLI and Spark jobs read from the stack (``aws cloudformation describe-stacks``)."""
        names = self.names
        outputs = {
            "StatestoreResources": (names.to_json(), "STATESTORE_RESOURCES for jobs and the CLI"),
            "TransactionLogTable": (self.state.transaction_log.table_name, "transaction log table"),
            "SnapshotsTable": (self.state.snapshots.table_name, "snapshot metadata table"),
            "TablesByIdTable": (self.state.tables_by_id.table_name, "table index by id"),
            "TablesByNameTable": (self.state.tables_by_name.table_name, "table index by name"),
            "CommitStatusTable": (self.state.commit_status.table_name, "commit request outcomes"),
            "DataBucket": (self.data.bucket.bucket_name, "data files, snapshots, large bodies"),
            "CommitQueueUrl": (self.commits.queue.queue_url, "send commit requests here"),
            "DeadLetterQueueUrl": (self.commits.dead_letter_queue.queue_url, "failed commit requests"),
            "UpkeepDeadLetterQueueUrl": (
                self.upkeep.dead_letter_queue.queue_url,
                "snapshot and cleanup work of tables that failed repeatedly",
            ),
            "AlarmTopicArn": (self.alarms.topic.topic_arn, "subscribe to be told of alarms"),
            "DashboardName": (self.dashboard.dashboard.dashboard_name, "the instance's CloudWatch dashboard"),
            "RequestBodyTag": (
                f"{objects.REQUEST_BODY_TAG_KEY}={objects.REQUEST_BODY_TAG_VALUE}",
                "tag request bodies with this so they expire",
            ),
        }
        policies = self.policies
        outputs.update(
            {
                "ReadStatePolicyArn": (policies.read_state.managed_policy_arn, "find tables, read state"),
                "CommitPolicyArn": (policies.commit.managed_policy_arn, "send commits, read outcomes"),
                "DataPolicyArn": (policies.data.managed_policy_arn, "read/write/delete data files"),
                "AdminPolicyArn": (policies.admin.managed_policy_arn, "everything the statestore CLI does"),
                "SparkArtifactsUri": (
                    self._s3_uri(layout.SPARK_ARTIFACTS_PREFIX),
                    "upload spark-package here",
                ),
                "SparkInputUri": (self._s3_uri(layout.SPARK_INPUT_PREFIX), "stage Spark job input here"),
                "SparkLogsUri": (self._s3_uri(layout.SPARK_LOGS_PREFIX), "Spark job logs"),
            }
        )
        if self.spark is not None:
            outputs["EmrApplicationId"] = (
                self.spark.application.attr_application_id,
                "EMR Serverless application for Spark jobs",
            )
            outputs["EmrJobRoleArn"] = (self.spark.job_role.role_arn, "execution role for its job runs")
            outputs["SparkSubmitPolicyArn"] = (
                self.spark.submit_policy.managed_policy_arn,
                "submit Spark jobs to the application and watch them",
            )
        for index, (table_id, access) in enumerate(self.table_access.items()):
            key = f"ScopedTable{index + 1}"
            outputs[f"{key}Id"] = (table_id, "a table whose callers have access to it alone")
            outputs[f"{key}PolicyArns"] = (
                ",".join(p.managed_policy_arn for p in (access.read_state, access.commit, access.data)),
                "its read-state, commit and data policies",
            )
            if access.job_role is not None and access.submit_policy is not None:
                outputs[f"{key}JobRoleArn"] = (access.job_role.role_arn, "execution role for its Spark jobs")
                outputs[f"{key}JobRoleId"] = (
                    access.job_role.role_id,
                    "give this to the table's allowed senders (statestore tables senders)",
                )
                outputs[f"{key}SparkSubmitPolicyArn"] = (
                    access.submit_policy.managed_policy_arn,
                    "submit its Spark jobs (pass its job role only)",
                )
        if self.postgres is not None:
            outputs["PostgresHost"] = (self.postgres.host, "the file-reference database (from its VPC)")
            outputs["PostgresSecretArn"] = (
                self.postgres.secret.secret_arn,
                "credentials of the app role the functions connect as",
            )
            outputs["PostgresMasterSecretArn"] = (
                self.postgres.master_secret.secret_arn,
                "the master user's (the schema migration alone reads it)",
            )
        for key, (value, description) in outputs.items():
            CfnOutput(self, key, value=value, description=description)

    def _s3_uri(self, prefix: str) -> str:
        return f"s3://{self.data.bucket.bucket_name}/{prefix}"
