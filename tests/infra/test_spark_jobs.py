"""The EMR Serverless application, its job role, the Spark prefixes of the bucket, and the flag that turns
them off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from aws_cdk import assertions

from statestore.model import layout
from tests.infra.conftest import SynthStack
from tests.infra.permissions import (
    OBJECT_PUT,
    OBJECT_READ,
    allows,
    managed_policy,
    permissions,
    role_permissions,
)

Match = assertions.Match

pytestmark = pytest.mark.infra

EMR = "emr-serverless.amazonaws.com"
APPLICATION = "AWS::EMRServerless::Application"


@pytest.fixture(scope="module")
def template_json(template: Any) -> dict[str, Any]:
    result: dict[str, Any] = template.to_json()
    return result


@pytest.fixture(scope="module")
def configured(synth_stack: SynthStack) -> assertions.Template:
    """Every EMR setting given, and a shorter log retention."""
    return assertions.Template.from_stack(
        synth_stack(
            emr_idle_timeout_minutes="5",
            emr_max_vcpu=8,
            emr_max_memory_gb="32",
            emr_max_disk_gb="100",
            log_retention_days="7",
        )
    )


def only(template_json: dict[str, Any], resource_type: str) -> str:
    found = [k for k, r in template_json["Resources"].items() if r["Type"] == resource_type]
    assert len(found) == 1, f"expected one {resource_type}, found {len(found)}"
    return found[0]


def job_role(template_json: dict[str, Any]) -> str:
    found = [
        logical_id
        for logical_id, r in template_json["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
        and r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"].get("Service") == EMR
    ]
    assert len(found) == 1, f"expected one role for {EMR}, found {len(found)}"
    return found[0]


def bucket_ref(template_json: dict[str, Any]) -> dict[str, str]:
    [bucket] = [
        k
        for k, r in template_json["Resources"].items()
        if r["Type"] == "AWS::S3::Bucket" and "BucketName" in r["Properties"]
    ]
    return {"Ref": bucket}


def s3_uri(template_json: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {"Fn::Join": ["", ["s3://", bucket_ref(template_json), f"/{prefix}"]]}


# --- the application ------------------------------------------------------------------------------------


def test_application_is_spark_on_the_pinned_release_starting_and_stopping_by_itself(
    template: Any, template_json: dict[str, Any]
) -> None:
    template.resource_count_is(APPLICATION, 1)
    template.has_resource_properties(
        APPLICATION,
        {
            "Name": "statestore-main",
            "ReleaseLabel": "emr-spark-8.0.0",
            "Type": "SPARK",
            "Architecture": "X86_64",
            "AutoStartConfiguration": {"Enabled": True},
            "AutoStopConfiguration": {"Enabled": True, "IdleTimeoutMinutes": 15},
            "MaximumCapacity": {"Cpu": "16 vCPU", "Memory": "64 GB", "Disk": "200 GB"},
            "MonitoringConfiguration": {
                "S3MonitoringConfiguration": {"LogUri": s3_uri(template_json, layout.SPARK_LOGS_PREFIX)}
            },
        },
    )
    # No pre-initialised workers: nothing is billed while no job runs.
    properties = template_json["Resources"][only(template_json, APPLICATION)]["Properties"]
    assert "InitialCapacity" not in properties


def test_idle_timeout_and_maximum_capacity_come_from_context(configured: assertions.Template) -> None:
    configured.has_resource_properties(
        APPLICATION,
        {
            "AutoStopConfiguration": {"Enabled": True, "IdleTimeoutMinutes": 5},
            "MaximumCapacity": {"Cpu": "8 vCPU", "Memory": "32 GB", "Disk": "100 GB"},
        },
    )


# --- the job role ---------------------------------------------------------------------------------------


def test_only_emr_serverless_for_this_application_and_account_may_assume_the_job_role(
    template_json: dict[str, Any],
) -> None:
    application = only(template_json, APPLICATION)
    application_arn = {"Fn::GetAtt": [application, "Arn"]}
    trust = template_json["Resources"][job_role(template_json)]["Properties"]["AssumeRolePolicyDocument"]
    assert trust["Statement"] == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": EMR},
            "Condition": {
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                "ArnLike": {
                    "aws:SourceArn": [application_arn, {"Fn::Join": ["", [application_arn, "/jobruns/*"]]}]
                },
            },
        }
    ]


def test_the_job_role_holds_the_job_policies_and_the_spark_prefixes_and_nothing_else(
    template_json: dict[str, Any],
) -> None:
    role = job_role(template_json)
    attached = [p["Ref"] for p in template_json["Resources"][role]["Properties"]["ManagedPolicyArns"]]
    names = sorted(
        template_json["Resources"][p]["Properties"]["ManagedPolicyName"]["Fn::Join"][1][0] for p in attached
    )
    assert names == ["statestore-main-commit-", "statestore-main-data-", "statestore-main-read-state-"]

    from_policies = set().union(*(managed_policy(template_json, p) for p in attached))
    spark = allows(
        OBJECT_READ,
        "bucket",
        f"bucket/{layout.SPARK_ARTIFACTS_PREFIX}*",
        f"bucket/{layout.SPARK_INPUT_PREFIX}*",
        f"bucket/{layout.SPARK_LOGS_PREFIX}*",
        f"bucket/{layout.SPARK_OUTPUT_PREFIX}*",
    ) | allows(OBJECT_PUT, f"bucket/{layout.SPARK_LOGS_PREFIX}*", f"bucket/{layout.SPARK_OUTPUT_PREFIX}*")
    allowed = role_permissions(template_json, role)
    assert allowed == from_policies | spark
    # A job can never replace the code or the environment other jobs run.
    artifacts = f"bucket/{layout.SPARK_ARTIFACTS_PREFIX}*"
    assert not [a for a, r in allowed if r == artifacts and a not in OBJECT_READ]


# --- submitting jobs ------------------------------------------------------------------------------------


def submit_policy(template_json: dict[str, Any]) -> str:
    name = {"Fn::Join": ["", ["statestore-main-spark-submit-", {"Ref": "AWS::Region"}]]}
    found = [
        logical_id
        for logical_id, r in template_json["Resources"].items()
        if r["Type"] == "AWS::IAM::ManagedPolicy" and r["Properties"]["ManagedPolicyName"] == name
    ]
    assert len(found) == 1, f"expected one spark-submit managed policy, found {len(found)}"
    return found[0]


def test_the_submit_policy_runs_jobs_on_this_application_as_the_job_role_and_nothing_more(
    template_json: dict[str, Any],
) -> None:
    statements = template_json["Resources"][submit_policy(template_json)]["Properties"]["PolicyDocument"][
        "Statement"
    ]
    [pass_role] = [s for s in statements if s["Action"] == "iam:PassRole"]
    # StartJobRun passes the execution role: only the job role, and only to EMR Serverless.
    assert pass_role == {
        "Action": "iam:PassRole",
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [job_role(template_json), "Arn"]},
        "Condition": {"StringEquals": {"iam:PassedToService": EMR}},
    }
    application = "emr-application:statestore-main"
    runs = f"{application}/jobruns/*"
    expected = (
        allows(
            ("emr-serverless:StartJobRun", "emr-serverless:ListJobRuns", "emr-serverless:GetApplication"),
            application,
        )
        | allows(
            (
                "emr-serverless:GetJobRun",
                "emr-serverless:CancelJobRun",
                "emr-serverless:GetDashboardForJobRun",
            ),
            runs,
        )
        | allows(OBJECT_PUT, f"bucket/{layout.SPARK_INPUT_PREFIX}*")
        | allows(
            OBJECT_READ,
            "bucket",
            f"bucket/{layout.SPARK_INPUT_PREFIX}*",
            f"bucket/{layout.SPARK_LOGS_PREFIX}*",
            f"bucket/{layout.SPARK_OUTPUT_PREFIX}*",
        )
    )
    allowed = permissions(template_json, [s for s in statements if s is not pass_role])
    assert sorted(allowed - expected) == [], "more than submitting and watching jobs"
    assert sorted(expected - allowed) == [], "less than submitting and watching jobs"


def test_the_submit_policy_arn_is_an_output(template_json: dict[str, Any]) -> None:
    assert template_json["Outputs"]["SparkSubmitPolicyArn"]["Value"] == {"Ref": submit_policy(template_json)}


# --- the bucket's Spark prefixes -------------------------------------------------------------------------


def lifecycle_rules(template_json: Mapping[str, Any]) -> list[dict[str, Any]]:
    [rules] = [
        r["Properties"]["LifecycleConfiguration"]["Rules"]
        for r in template_json["Resources"].values()
        if r["Type"] == "AWS::S3::Bucket" and "BucketName" in r["Properties"]
    ]
    return list(rules)


def test_spark_logs_expire_with_the_log_retention_and_artifacts_and_input_never_do(
    template_json: dict[str, Any], configured: assertions.Template
) -> None:
    for rules, days in ((lifecycle_rules(template_json), 30), (lifecycle_rules(configured.to_json()), 7)):
        [logs] = [r for r in rules if r.get("Prefix") == layout.SPARK_LOGS_PREFIX]
        assert logs == {
            "Id": "expire-spark-job-logs",
            "Prefix": layout.SPARK_LOGS_PREFIX,
            "ExpirationInDays": days,
            "Status": "Enabled",
        }
        kept = [
            layout.SPARK_ARTIFACTS_PREFIX + layout.SPARK_CODE_ARCHIVE,
            layout.SPARK_ARTIFACTS_PREFIX + layout.SPARK_ENVIRONMENT_ARCHIVE,
            layout.SPARK_INPUT_PREFIX + "rows.parquet",
        ]
        for rule in rules:
            if "ExpirationInDays" not in rule or "TagFilters" in rule:
                continue  # a tag filter expires only request bodies, which carry the tag
            assert "Prefix" in rule, f"rule {rule['Id']} expires every object"
            assert not [key for key in kept if key.startswith(rule["Prefix"])], rule["Id"]


# --- outputs and the flag -------------------------------------------------------------------------------


def test_outputs_give_the_application_the_role_and_the_spark_locations(template_json: dict[str, Any]) -> None:
    outputs = template_json["Outputs"]
    assert outputs["EmrApplicationId"]["Value"] == {
        "Fn::GetAtt": [only(template_json, APPLICATION), "ApplicationId"]
    }
    assert outputs["EmrJobRoleArn"]["Value"] == {"Fn::GetAtt": [job_role(template_json), "Arn"]}
    for key, prefix in (
        ("SparkArtifactsUri", layout.SPARK_ARTIFACTS_PREFIX),
        ("SparkInputUri", layout.SPARK_INPUT_PREFIX),
        ("SparkLogsUri", layout.SPARK_LOGS_PREFIX),
    ):
        assert outputs[key]["Value"] == s3_uri(template_json, prefix)


def test_with_the_flag_off_there_is_no_emr_application_nor_job_role(synth_stack: SynthStack) -> None:
    off = assertions.Template.from_stack(synth_stack(emr_serverless="false"))
    off.resource_count_is(APPLICATION, 0)
    roles = off.find_resources("AWS::IAM::Role")
    assert roles and not [
        r for r in roles.values() if EMR in str(r["Properties"]["AssumeRolePolicyDocument"])
    ]
    outputs = off.to_json()["Outputs"]
    assert not {"EmrApplicationId", "EmrJobRoleArn", "SparkSubmitPolicyArn"} & set(outputs)
    # The policies for jobs run elsewhere, and the bucket's Spark prefixes, stay.
    off.resource_count_is("AWS::IAM::ManagedPolicy", 4)
    assert {"SparkArtifactsUri", "SparkInputUri", "SparkLogsUri", "DataPolicyArn"} <= set(outputs)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("emr_serverless", "maybe"),
        ("emr_idle_timeout_minutes", "0"),
        ("emr_idle_timeout_minutes", "soon"),
        ("emr_max_vcpu", "1"),
        ("emr_max_memory_gb", "2"),
        ("emr_max_disk_gb", "20"),
        ("emr_max_disk_gb", "2000000"),
    ],
)
def test_bad_emr_settings_fail_synth_naming_the_key(synth_stack: SynthStack, key: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"context key {key}="):
        synth_stack(**{key: value})


def test_without_a_vpc_the_application_has_no_network_configuration(template_json: dict[str, Any]) -> None:
    properties = template_json["Resources"][only(template_json, APPLICATION)]["Properties"]
    assert "NetworkConfiguration" not in properties


def test_subnets_and_security_groups_from_context_put_the_jobs_in_that_vpc(synth_stack: SynthStack) -> None:
    in_vpc = assertions.Template.from_stack(
        synth_stack(
            emr_subnet_ids="subnet-0123456789abcdef0, subnet-0fedcba9876543210",
            emr_security_group_ids="sg-0a1b2c3d4e5f60718",
        )
    )
    in_vpc.has_resource_properties(
        APPLICATION,
        {
            "NetworkConfiguration": {
                "SubnetIds": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
                "SecurityGroupIds": ["sg-0a1b2c3d4e5f60718"],
            }
        },
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"emr_subnet_ids": "subnet-0123456789abcdef0"}, "go together"),
        ({"emr_security_group_ids": "sg-0a1b2c3d4e5f60718"}, "go together"),
        (
            {"emr_subnet_ids": "vpc-0123456789abcdef0", "emr_security_group_ids": "sg-0a1b2c3d4e5f60718"},
            r"emr_subnet_ids: \['vpc-0123456789abcdef0'\] do not look like",
        ),
    ],
)
def test_a_half_or_malformed_vpc_setting_fails_synth_naming_the_key(
    synth_stack: SynthStack, settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        synth_stack(**settings)
