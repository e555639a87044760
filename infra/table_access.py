"""Access to one table of the instance, for callers that must not reach the others (the ``scoped_tables``
context key): the read-state, commit and data grants on that table as managed policies, and, with EMR
Serverless, a job role holding them and a submit policy that can pass only that role.

A Spark job for the table runs as its job role, which reads the job code like every job but stages, reads
and writes only under the table's own Spark prefixes: input under ``spark/input/<table id>/``, results
under ``spark/output/<table id>/``, logs under ``spark/logs/<table id>/`` (give that as the job run's
``logUri``: the application's default log location is not the role's to write). So a job submitted with
another table's arguments fails on the first read, and whoever holds the table's submit policy can make
the job role do only that table's work.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import Aws, CfnElement, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import data_bucket as objects
from infra.grants import StateStoreGrants
from infra.nag import acknowledge
from infra.spark_jobs import SERVICE_PRINCIPAL, SparkJobs
from infra.table_grants import OBJECT_READ, OBJECT_WRITE, grant_listing, grant_objects
from statestore.model import layout


def spark_prefixes(table_id: str) -> dict[str, str]:
    """The table's own Spark prefixes: where its jobs' input, results and logs go."""
    return {
        "input": f"{layout.SPARK_INPUT_PREFIX}{table_id}/",
        "output": f"{layout.SPARK_OUTPUT_PREFIX}{table_id}/",
        "logs": f"{layout.SPARK_LOGS_PREFIX}{table_id}/",
    }


class TableAccess(Construct):
    """Managed policies ``statestore-<instance>-table-<table id>-{read-state,commit,data}-<region>``, and with
    ``spark`` the table's ``job_role`` and ``submit_policy``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_id: str,
        table_id: str,
        grants: StateStoreGrants,
        spark: SparkJobs | None,
    ) -> None:
        super().__init__(scope, construct_id)
        table = grants.for_table(table_id)
        self.table_id = table.table_id

        def policy(construct_id: str, grant: str, what: str) -> iam.ManagedPolicy:
            return iam.ManagedPolicy(
                self,
                construct_id,
                managed_policy_name=f"statestore-{instance_id}-table-{table_id}-{grant}-{Aws.REGION}",
                description=f"statestore {instance_id}: {what} of table {table_id} only",
            )

        self.read_state = policy("ReadState", "read-state", "find the table and read its state")
        table.grant_read_state(self.read_state)
        self.commit = policy("Commit", "commit", "send commit requests and read their outcomes")
        table.grant_commit(self.commit)
        self.data = policy("Data", "data", "read, write and delete the data files")
        table.grant_data(self.data)
        self.job_role: iam.Role | None = None
        self.submit_policy: iam.ManagedPolicy | None = None
        if spark is not None:
            self._spark(spark, instance_id)

    def _spark(self, spark: SparkJobs, instance_id: str) -> None:
        table_id, data = self.table_id, spark.data
        prefixes = spark_prefixes(table_id)
        role = spark.new_job_role(
            self,
            "JobRole",
            f"statestore {instance_id}: Spark jobs of table {table_id} on EMR Serverless application "
            f"statestore-{instance_id}",
            (self.read_state, self.commit, self.data),
        )
        iam.Grant.add_to_principal(
            grantee=role,
            actions=list(OBJECT_READ),
            resource_arns=[data.bucket.arn_for_objects(objects.SPARK_ARTIFACT_OBJECTS)],
        )
        grant_objects(data, role, OBJECT_READ, (prefixes["input"], prefixes["output"], prefixes["logs"]))
        grant_objects(data, role, OBJECT_WRITE, (prefixes["output"], prefixes["logs"]))
        grant_listing(data, role, (layout.SPARK_ARTIFACTS_PREFIX, *prefixes.values()))
        self.job_role = role

        policy = iam.ManagedPolicy(
            self,
            "SubmitPolicy",
            managed_policy_name=f"statestore-{instance_id}-table-{table_id}-spark-submit-{Aws.REGION}",
            description=f"statestore {instance_id}: submit Spark jobs of table {table_id} and watch them",
        )
        application_arn = spark.application.attr_arn
        policy.add_statements(
            iam.PolicyStatement(
                actions=[
                    "emr-serverless:StartJobRun",
                    "emr-serverless:ListJobRuns",
                    "emr-serverless:GetApplication",
                ],
                resources=[application_arn],
            ),
            iam.PolicyStatement(
                actions=["emr-serverless:GetJobRun", "emr-serverless:CancelJobRun"],
                resources=[f"{application_arn}/jobruns/*"],
            ),
            # The table's job role, and no other: a run started with this policy works on this table only.
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SERVICE_PRINCIPAL}},
            ),
        )
        grant_objects(data, policy, OBJECT_WRITE, (prefixes["input"],))
        grant_objects(data, policy, OBJECT_READ, (prefixes["input"], prefixes["output"], prefixes["logs"]))
        grant_listing(data, policy, tuple(prefixes.values()))
        acknowledge(
            role,
            "The job code and environment are shared by every table's jobs and only read: the wildcard after "
            "the artifacts prefix covers those two archives and the entry point.",
            f"AwsSolutions-IAM5[Resource::{_bucket(spark)}/{objects.SPARK_ARTIFACT_OBJECTS}]",
        )
        acknowledge(
            policy,
            "A job run's id is known only once it is started: the runs are granted as the application's "
            "jobruns/*, on this application only.",
            f"AwsSolutions-IAM5[Resource::{_application(spark)}/jobruns/*]",
        )
        self.submit_policy = policy


def _bucket(spark: SparkJobs) -> str:
    bucket = spark.data.bucket
    return f"<{Stack.of(spark).get_logical_id(cast(CfnElement, bucket.node.default_child))}.Arn>"


def _application(spark: SparkJobs) -> str:
    return f"<{Stack.of(spark).get_logical_id(spark.application)}.Arn>"
