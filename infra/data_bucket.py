"""The instance's bucket: data files, Parquet snapshots, large log bodies and commit-request bodies."""

from __future__ import annotations

from typing import cast

from aws_cdk import CfnElement, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge
from infra.state import POINT_IN_TIME_RECOVERY_DAYS
from statestore import instance
from statestore.model import layout

# The cleanup Lambda deletes stale commit-request bodies (``tables/<id>/requests/``) by the time in their
# key. As a backstop for bodies no cleanup reaches (a deleted table's, say), the bucket also expires them
# itself. S3 lifecycle prefixes cannot wildcard the table id, so it finds them by tag: whoever puts a request
# body tags it with ``layout.REQUEST_BODY_TAGS`` (``Tagging=`` on PutObject), as ``CommitSender`` does.
# A committed request's body lives on as an untagged server-side copy under the log prefix, which its log
# entry points at: this rule never expires a body a log entry needs (cleanup deletes it with the entry).
REQUEST_BODY_TAG_KEY = layout.REQUEST_BODY_TAG_KEY
REQUEST_BODY_TAG_VALUE = layout.REQUEST_BODY_TAG_VALUE
# Longer than a dead-letter queue keeps a message, so a request can still be redriven.
REQUEST_BODY_EXPIRY = Duration.days(instance.REQUEST_BODY_EXPIRY_DAYS)
ACCESS_LOG_EXPIRY = Duration.days(90)
# The bucket is versioned: a delete (cleanup's, a lifecycle expiry's) only adds a delete marker, and the
# object's last version is kept this long. The tables can be restored to any point of their last 35 days
# (point-in-time recovery), and a restored log names the objects it referenced then: they must still exist.
NONCURRENT_VERSION_EXPIRY = Duration.days(POINT_IN_TIME_RECOVERY_DAYS)
# But the versions of a table's latest-snapshot copy that a newer snapshot's copy superseded: no restore
# needs them (the snapshots' own objects are kept), and one a period per table would double what the
# snapshots keep. Found by tag, as the request bodies are.
LATEST_COPY_TAG_VALUE = layout.LATEST_COPY_TAG_VALUE
SUPERSEDED_COPY_EXPIRY = Duration.days(1)
S3_BUCKET_NAME_LIMIT = 63

# Object key patterns for IAM, from the layout every adapter uses (any table id).
_ANY_TABLE = "*"
TABLES_PREFIX = layout.TABLES_PREFIX  # every table's objects
DATA_OBJECTS = layout.data_prefix(_ANY_TABLE) + "*"
SNAPSHOT_OBJECTS = layout.snapshot_prefix(_ANY_TABLE) + "*"
LOG_BODY_OBJECTS = layout.log_body_prefix(_ANY_TABLE) + "*"
REQUEST_BODY_OBJECTS = layout.request_body_prefix(_ANY_TABLE) + "*"
UPKEEP_OBJECTS = layout.upkeep_prefix(_ANY_TABLE) + "*"  # cleanup's progress per table (the orphan sweep's)
TABLE_OBJECTS = TABLES_PREFIX + "*"  # every object of every table
DELETED_TABLE_OBJECTS = layout.DELETED_TABLES_PREFIX + "*"  # deleted tables' tombstones
SPARK_ARTIFACT_OBJECTS = layout.SPARK_ARTIFACTS_PREFIX + "*"
SPARK_INPUT_OBJECTS = layout.SPARK_INPUT_PREFIX + "*"
SPARK_LOG_OBJECTS = layout.SPARK_LOGS_PREFIX + "*"
SPARK_OUTPUT_OBJECTS = layout.SPARK_OUTPUT_PREFIX + "*"


class DataBucket(Construct):
    """SSE-S3 encrypted, public access blocked, TLS only, server access logs to a second bucket.

    Both buckets are retained when the stack is destroyed: they hold the tables' data. Objects expire only
    by the rules below: tagged request bodies, and Spark job logs after ``spark_log_expiry``; the Spark
    artifacts and input (``spark/artifacts/``, ``spark/input/``) and everything else are kept.

    The data bucket is versioned. Deleting an object (cleanup, an expiry rule) leaves a delete marker: reads
    and listings no longer see it, and its last version is removed for good ``NONCURRENT_VERSION_EXPIRY``
    later, with the marker. So an expiry rule frees the space that much later, and a table restored from
    point-in-time recovery still finds the files its log names (restore them by deleting the markers, or
    copying the previous versions back). Nothing here may delete a version (``s3:DeleteObjectVersion``).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, bucket_name: str, spark_log_expiry: Duration
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption S3 log delivery supports
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=ACCESS_LOG_EXPIRY)],
        )
        acknowledge(
            self.access_logs,
            "This is the access-log bucket; logging it to itself would loop.",
            "AwsSolutions-S1",
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="data-bucket/",
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-noncurrent-versions",
                    noncurrent_version_expiration=NONCURRENT_VERSION_EXPIRY,
                    expired_object_delete_marker=True,  # a marker left with no version behind it
                ),
                s3.LifecycleRule(
                    id="expire-superseded-snapshot-copies",
                    prefix=TABLES_PREFIX,
                    tag_filters={REQUEST_BODY_TAG_KEY: LATEST_COPY_TAG_VALUE},
                    noncurrent_version_expiration=SUPERSEDED_COPY_EXPIRY,
                ),
                s3.LifecycleRule(
                    id="expire-commit-request-bodies",
                    prefix=TABLES_PREFIX,
                    tag_filters={REQUEST_BODY_TAG_KEY: REQUEST_BODY_TAG_VALUE},
                    expiration=REQUEST_BODY_EXPIRY,
                ),
                s3.LifecycleRule(
                    id="expire-spark-job-logs", prefix=layout.SPARK_LOGS_PREFIX, expiration=spark_log_expiry
                ),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
            ],
        )

    # Grants by object-key pattern. CDK's grant_* use action families (s3:GetObject*, s3:Abort*, ...), and a
    # pattern is a wildcard, so each grant acknowledges exactly the cdk-nag IAM5 findings it causes.
    def grant_read(self, grantee: iam.IGrantable, *patterns: str) -> None:
        """Get objects under ``patterns``; includes s3:List* on the bucket, which listing a prefix needs."""
        for pattern in patterns:
            self.bucket.grant_read(grantee, pattern)
        self._acknowledge(grantee, patterns, "s3:GetObject*", "s3:GetBucket*", "s3:List*")

    def grant_put(self, grantee: iam.IGrantable, *patterns: str) -> None:
        """Put objects (with tags) under ``patterns``."""
        for pattern in patterns:
            self.bucket.grant_put(grantee, pattern)
        self._acknowledge(grantee, patterns, "s3:Abort*")

    def grant_delete(self, grantee: iam.IGrantable, *patterns: str) -> None:
        """Delete objects under ``patterns``: ``s3:DeleteObject`` only, which on this versioned bucket adds a
        delete marker (DeleteObjects needs the same). CDK's grant_delete gives ``s3:DeleteObject*``, whose
        ``s3:DeleteObjectVersion`` would destroy the versions kept for point-in-time recovery."""
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:DeleteObject"],
            resource_arns=[self.bucket.arn_for_objects(pattern) for pattern in patterns],
        )
        self._acknowledge(grantee, patterns)

    def _acknowledge(self, grantee: iam.IGrantable, patterns: tuple[str, ...], *action_families: str) -> None:
        # The findings are on the principal's policy (a function's role), or on the grantee itself when it is
        # a managed policy (whose grant principal is no construct).
        principal = grantee.grant_principal
        target = principal if isinstance(principal, Construct) else grantee
        if not isinstance(target, Construct):
            return
        bucket_arn = (
            f"<{Stack.of(self).get_logical_id(cast(CfnElement, self.bucket.node.default_child))}.Arn>"
        )
        acknowledge(
            target,
            "Object keys are granted by the prefix pattern of one kind of object (statestore.model.layout), "
            "for any table id where the pattern has one, with CDK's grant_* action families on those keys "
            "only.",
            *(f"AwsSolutions-IAM5[Resource::{bucket_arn}/{pattern}]" for pattern in patterns),
            *(f"AwsSolutions-IAM5[Action::{family}]" for family in action_families),
        )


def check_bucket_name_length(instance_id: str, region: str | None) -> None:
    """Raise ``ValueError`` if the data bucket's name (``statestore-<id>-data-<account>-<region>``) would
    exceed S3's 63 characters. The name stays as deployed instances have it; this only refuses an instance
    id that cannot fit. ``region`` None (not known at synth) checks against the longest region CDK knows."""
    from aws_cdk.region_info import RegionInfo

    regions = [region] if region else [r.name for r in RegionInfo.regions]
    longest = max(regions, key=len)
    name = f"statestore-{instance_id}-data-123456789012-{longest}"  # every account id has 12 digits
    if len(name) > S3_BUCKET_NAME_LIMIT:
        where = f"region {region}" if region else f"an unknown region (up to {longest})"
        raise ValueError(
            f"context key instance_id={instance_id!r} makes the data bucket name {name!r} (with your "
            f"12-digit account id) {len(name)} characters long in {where}, over S3's limit of "
            f"{S3_BUCKET_NAME_LIMIT}: use an instance id of at most "
            f"{len(instance_id) - (len(name) - S3_BUCKET_NAME_LIMIT)} characters"
            + ("" if region else ", or synthesise with the target region set (AWS_REGION or --profile)")
        )
