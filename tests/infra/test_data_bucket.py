"""The data bucket's deploy-time traps: its name's length, versioning that outlasts point-in-time recovery."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import assertions

from infra.data_bucket import check_bucket_name_length
from statestore import instance as resources
from statestore.model import layout
from tests.infra.conftest import SynthStack

Match = assertions.Match

pytestmark = pytest.mark.infra

LONGEST_ID = "a" * 20  # the longest instance id ResourceNames accepts


def data_bucket(template: Any) -> dict[str, Any]:
    found = template.find_resources("AWS::S3::Bucket", {"Properties": {"BucketName": Match.any_value()}})
    assert len(found) == 1
    properties: dict[str, Any] = next(iter(found.values()))["Properties"]
    return properties


def test_data_bucket_is_versioned_and_keeps_deleted_objects_as_long_as_the_tables_can_be_restored(
    template: Any,
) -> None:
    bucket = data_bucket(template)
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    recovery_days = {
        t["Properties"]["PointInTimeRecoverySpecification"]["RecoveryPeriodInDays"]
        for t in template.find_resources("AWS::DynamoDB::Table").values()
    }
    assert recovery_days == {35}
    noncurrent = [
        r
        for r in bucket["LifecycleConfiguration"]["Rules"]
        if "NoncurrentVersionExpiration" in r and "TagFilters" not in r
    ]
    assert len(noncurrent) == 1, "one rule, for every prefix, expires old versions"
    rule = noncurrent[0]
    assert "Prefix" not in rule
    assert rule["NoncurrentVersionExpiration"]["NoncurrentDays"] >= max(recovery_days)
    assert rule["ExpiredObjectDeleteMarker"] is True and rule["Status"] == "Enabled"


def test_superseded_versions_of_the_latest_snapshot_copies_and_nothing_else_expire_sooner(
    template: Any,
) -> None:
    """They are never read; the snapshots' own objects keep the versions a restored table needs."""
    sooner = [
        r
        for r in data_bucket(template)["LifecycleConfiguration"]["Rules"]
        if r.get("NoncurrentVersionExpiration", {}).get("NoncurrentDays", 35) < 35
    ]
    assert sooner == [
        {
            "Id": "expire-superseded-snapshot-copies",
            "Prefix": "tables/",
            "TagFilters": [{"Key": layout.REQUEST_BODY_TAG_KEY, "Value": layout.LATEST_COPY_TAG_VALUE}],
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
            "Status": "Enabled",
        }
    ]
    assert "Expiration" not in sooner[0] and "ExpirationInDays" not in sooner[0]  # the current copy stays


def test_the_existing_expiry_rules_are_kept_alongside_versioning(template: Any) -> None:
    rules = {r["Id"]: r for r in data_bucket(template)["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-commit-request-bodies"]["ExpirationInDays"] == resources.REQUEST_BODY_EXPIRY_DAYS
    assert rules["expire-spark-job-logs"]["ExpirationInDays"] == 30
    assert rules["abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_no_policy_in_the_stack_may_delete_an_object_version(template: Any) -> None:
    documents = [
        *(p["Properties"]["PolicyDocument"] for p in template.find_resources("AWS::IAM::Policy").values()),
        *(
            p["Properties"]["PolicyDocument"]
            for p in template.find_resources("AWS::IAM::ManagedPolicy").values()
        ),
    ]
    actions = {
        action
        for document in documents
        for statement in document["Statement"]
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    }
    assert "s3:DeleteObject" in actions
    assert not [a for a in actions if a.startswith("s3:DeleteObject") and a != "s3:DeleteObject"]
    assert "s3:*" not in json.dumps([a for a in actions if a.startswith("s3:")])


@pytest.mark.parametrize(("instance_id", "region"), [(LONGEST_ID, "us-east-1"), ("a" * 18, None)])
def test_bucket_names_that_fit_s3s_63_characters_pass(instance_id: str, region: str | None) -> None:
    check_bucket_name_length(instance_id, region)


@pytest.mark.parametrize(
    ("region", "expected"),
    [("ap-southeast-5", "at most 19 characters"), (None, "synthesise with the target region set")],
)
def test_a_bucket_name_over_63_characters_is_refused_naming_the_limit_and_the_name(
    region: str | None, expected: str
) -> None:
    with pytest.raises(ValueError, match="limit of 63") as error:
        check_bucket_name_length(LONGEST_ID, region)
    assert f"statestore-{LONGEST_ID}-data-" in str(error.value)
    assert expected in str(error.value)


def test_synth_refuses_an_instance_id_too_long_for_the_cli_region(
    synth_stack: SynthStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDK_DEFAULT_REGION", "ap-southeast-5")
    with pytest.raises(ValueError, match=r"instance_id=.*over S3's limit of 63"):
        synth_stack(instance_id=LONGEST_ID)
