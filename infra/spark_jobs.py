"""EMR Serverless for the Spark jobs: one Spark application that starts when a job is submitted and stops
when idle, bounded in size, and the role its jobs run as."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aws_cdk import Aws, CfnElement, Stack
from aws_cdk import aws_emrserverless as emrserverless
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import data_bucket as objects
from infra.data_bucket import DataBucket
from infra.nag import acknowledge
from statestore.model import layout

# Spark 4.0, the Spark of the PySpark version pyproject.toml pins.
RELEASE_LABEL = "emr-spark-8.0.0"
# The packed Python environment (spark/artifacts/environment.tar.gz) holds native wheels (pyarrow): it must
# be built for this architecture.
ARCHITECTURE = "X86_64"
SERVICE_PRINCIPAL = "emr-serverless.amazonaws.com"


class SparkJobs(Construct):
    """An EMR Serverless Spark application ``statestore-<instance>``, logging jobs to ``spark/logs/`` of the
    data bucket, and ``job_role`` for its jobs.

    The role holds ``job_policies`` (the read-state, commit and data managed policies), reads the job code
    and environment under ``spark/artifacts/`` and the staged input under ``spark/input/``, and writes job
    logs under ``spark/logs/``. It cannot change the artifacts, so a job cannot replace another's code.
    Only EMR Serverless, for this application in this account, may assume it.

    ``submit_policy`` (``statestore-<instance>-spark-submit-<region>``) is for whoever submits the jobs: start
    job runs on the application as the job role (and pass no other role), watch and cancel them, stage
    input under ``spark/input/`` and read the logs and results. It does not write the artifacts.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_id: str,
        data: DataBucket,
        job_policies: Sequence[iam.IManagedPolicy],
        idle_timeout_minutes: int,
        max_vcpu: int,
        max_memory_gb: int,
        max_disk_gb: int,
        subnet_ids: Sequence[str] = (),
        security_group_ids: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.logs_uri = f"s3://{data.bucket.bucket_name}/{layout.SPARK_LOGS_PREFIX}"
        self.application = emrserverless.CfnApplication(
            self,
            "Application",
            name=f"statestore-{instance_id}",
            release_label=RELEASE_LABEL,
            type="SPARK",
            architecture=ARCHITECTURE,
            # No pre-initialised capacity: nothing runs, and nothing is billed, while no job does.
            auto_start_configuration=emrserverless.CfnApplication.AutoStartConfigurationProperty(
                enabled=True
            ),
            auto_stop_configuration=emrserverless.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=idle_timeout_minutes
            ),
            maximum_capacity=emrserverless.CfnApplication.MaximumAllowedResourcesProperty(
                cpu=f"{max_vcpu} vCPU", memory=f"{max_memory_gb} GB", disk=f"{max_disk_gb} GB"
            ),
            network_configuration=(
                emrserverless.CfnApplication.NetworkConfigurationProperty(
                    subnet_ids=list(subnet_ids), security_group_ids=list(security_group_ids)
                )
                if subnet_ids
                else None
            ),
            monitoring_configuration=emrserverless.CfnApplication.MonitoringConfigurationProperty(
                s3_monitoring_configuration=emrserverless.CfnApplication.S3MonitoringConfigurationProperty(
                    log_uri=self.logs_uri
                )
            ),
        )
        application_arn = self.application.attr_arn
        self.instance_id = instance_id
        self.data = data
        self.job_role = self.new_job_role(
            self,
            "JobRole",
            f"statestore {instance_id}: Spark jobs on EMR Serverless application statestore-{instance_id}",
            job_policies,
        )
        data.grant_read(self.job_role, objects.SPARK_ARTIFACT_OBJECTS, objects.SPARK_INPUT_OBJECTS)
        # EMR writes the logs as the job's role; its documentation grants the log location read as well.
        data.grant_read(self.job_role, objects.SPARK_LOG_OBJECTS)
        data.grant_put(self.job_role, objects.SPARK_LOG_OBJECTS)
        # The query and incremental jobs write their results here (and read them back to check them).
        data.grant_read(self.job_role, objects.SPARK_OUTPUT_OBJECTS)
        data.grant_put(self.job_role, objects.SPARK_OUTPUT_OBJECTS)
        self.submit_policy = self._submit_policy(instance_id, data, application_arn)

    def new_job_role(
        self, scope: Construct, construct_id: str, description: str, policies: Sequence[iam.IManagedPolicy]
    ) -> iam.Role:
        """A role for this application's job runs holding ``policies``: only EMR Serverless, for this
        application in this account, may assume it."""
        application_arn = self.application.attr_arn
        return iam.Role(
            scope,
            construct_id,
            description=description,
            # Against the confused deputy: only this application, in this account. Both the application's
            # ARN and its job runs' ARNs are accepted as the source.
            assumed_by=iam.ServicePrincipal(
                SERVICE_PRINCIPAL,
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": [application_arn, f"{application_arn}/jobruns/*"]},
                },
            ),
            managed_policies=list(policies),
        )

    def _submit_policy(self, instance_id: str, data: DataBucket, application_arn: str) -> iam.ManagedPolicy:
        policy = iam.ManagedPolicy(
            self,
            "SubmitPolicy",
            managed_policy_name=f"statestore-{instance_id}-spark-submit-{Aws.REGION}",
            description=f"statestore {instance_id}: submit Spark jobs to EMR Serverless application "
            f"statestore-{instance_id} and watch them",
        )
        job_runs = f"{application_arn}/jobruns/*"
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
                actions=[
                    "emr-serverless:GetJobRun",
                    "emr-serverless:CancelJobRun",
                    "emr-serverless:GetDashboardForJobRun",
                ],
                resources=[job_runs],
            ),
            # StartJobRun passes the execution role: this one, and only to EMR Serverless.
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[self.job_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": SERVICE_PRINCIPAL}},
            ),
        )
        data.grant_put(policy, objects.SPARK_INPUT_OBJECTS)
        data.grant_read(
            policy, objects.SPARK_INPUT_OBJECTS, objects.SPARK_LOG_OBJECTS, objects.SPARK_OUTPUT_OBJECTS
        )
        application = f"<{Stack.of(self).get_logical_id(cast(CfnElement, self.application))}.Arn>"
        acknowledge(
            policy,
            "A job run's id is known only once it is started: the runs are granted as the application's "
            "jobruns/*, on this application only.",
            f"AwsSolutions-IAM5[Resource::{application}/jobruns/*]",
        )
        return policy
