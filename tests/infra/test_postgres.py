"""The optional PostgreSQL file-reference database (``-c postgres=true``), asserted on the synthesised
template: what it builds, who may reach it, and that without the option nothing of it is there."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import assertions

from infra.functions import VPC_ACCESS_ACTIONS
from infra.postgres import HOST_ENV, SECRET_ARN_ENV
from statestore.adapters.postgres.schema import APP_ROLE
from statestore.instance import POSTGRES_MASTER_SECRET_ARN_ENV as MASTER_SECRET_ARN_ENV
from statestore.instance import POSTGRES_SERVER_SETTINGS
from tests.infra.conftest import SynthStack
from tests.infra.test_stack import CLEANUP, COMMITTER, SNAPSHOT, statements_of

Match = assertions.Match

pytestmark = pytest.mark.infra

USERS = (COMMITTER, CLEANUP)  # the functions that use the database
MIGRATION = "lambdas.postgres_schema.handler"
POSTGRES_TYPES = (
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::VPCEndpoint",
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::FlowLog",
    "AWS::RDS::DBCluster",
    "AWS::RDS::DBInstance",
    "AWS::RDS::DBProxy",
    "AWS::SecretsManager::Secret",
)


@pytest.fixture(scope="module")
def with_proxy(postgres_template: Any) -> Any:
    return postgres_template


@pytest.fixture(scope="module")
def pausing(synth_stack: SynthStack) -> Any:
    return assertions.Template.from_stack(
        synth_stack(
            postgres="true", postgres_proxy="false", postgres_max_acu="8", deletion_protection="false"
        )
    )


def function(template: Any, handler: str) -> dict[str, Any]:
    found = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    assert len(found) == 1
    properties: dict[str, Any] = next(iter(found.values()))["Properties"]
    return properties


def one(template: Any, resource_type: str, properties: dict[str, Any] | None = None) -> tuple[str, Any]:
    found = template.find_resources(resource_type, {"Properties": properties or {}})
    assert len(found) == 1, f"expected one {resource_type}, found {len(found)}"
    return next(iter(found.items()))


def group_id(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "GroupId"]}


def ingress_sources(template: Any, group: str, port: int) -> list[Any]:
    """The security groups let in to ``group`` (a logical id) on ``port``: given as a number, or as the
    cluster's ``Endpoint.Port`` (the proxy's own rule), which is the cluster's ``Port``."""
    resources = template.to_json()["Resources"]
    rules = template.find_resources(
        "AWS::EC2::SecurityGroupIngress", {"Properties": {"GroupId": group_id(group)}}
    )
    sources = []
    for rule in rules.values():
        from_port = rule["Properties"]["FromPort"]
        if isinstance(from_port, dict):
            cluster, attribute = from_port["Fn::GetAtt"]
            assert attribute == "Endpoint.Port"
            from_port = resources[cluster]["Properties"]["Port"]
        if from_port == port:
            sources.append(rule["Properties"]["SourceSecurityGroupId"])
    return sources


# --- the cluster ------------------------------------------------------------------------------------------


def test_the_cluster_is_aurora_postgresql_16_serverless_v2_encrypted_with_a_generated_secret(
    with_proxy: Any,
) -> None:
    with_proxy.has_resource_properties(
        "AWS::RDS::DBCluster",
        {
            "Engine": "aurora-postgresql",
            "EngineVersion": Match.string_like_regexp(r"^16\."),
            "StorageEncrypted": True,
            "DeletionProtection": True,
            "Port": 5432,
            "MasterUsername": "statestore",
        },
    )
    with_proxy.has_resource_properties(
        "AWS::RDS::DBInstance", {"DBInstanceClass": "db.serverless", "PubliclyAccessible": False}
    )
    with_proxy.has_resource_properties(
        "AWS::SecretsManager::Secret",
        {"GenerateSecretString": Match.object_like({"GenerateStringKey": "password"})},
    )
    with_proxy.resource_count_is("AWS::RDS::DBInstance", 1)


def test_the_cluster_runs_with_the_planner_settings_the_store_is_planned_for(with_proxy: Any) -> None:
    groups = with_proxy.find_resources("AWS::RDS::DBClusterParameterGroup")
    (group,) = groups.values()
    assert group["Properties"]["Family"] == "aurora-postgresql16"
    assert group["Properties"]["Parameters"] == POSTGRES_SERVER_SETTINGS
    with_proxy.has_resource_properties(
        "AWS::RDS::DBCluster", {"DBClusterParameterGroupName": {"Ref": next(iter(groups))}}
    )


def test_behind_the_proxy_the_cluster_idles_at_half_an_acu_as_auto_pause_cannot_work(with_proxy: Any) -> None:
    with_proxy.has_resource_properties(
        "AWS::RDS::DBCluster",
        {"ServerlessV2ScalingConfiguration": {"MinCapacity": 0.5, "MaxCapacity": 4}},
    )


def test_without_the_proxy_the_cluster_pauses_at_zero_acu_after_ten_idle_minutes(pausing: Any) -> None:
    pausing.has_resource_properties(
        "AWS::RDS::DBCluster",
        {
            "ServerlessV2ScalingConfiguration": {
                "MinCapacity": 0,
                "MaxCapacity": 8,
                "SecondsUntilAutoPause": 600,
            }
        },
    )
    pausing.resource_count_is("AWS::RDS::DBProxy", 0)


def test_a_protected_cluster_leaves_a_snapshot_and_a_disposable_one_goes_with_the_stack(
    with_proxy: Any, pausing: Any
) -> None:
    _, protected = one(with_proxy, "AWS::RDS::DBCluster")
    assert protected["DeletionPolicy"] == "Snapshot"
    _, disposable = one(pausing, "AWS::RDS::DBCluster")
    assert disposable["DeletionPolicy"] == "Delete"
    assert disposable["Properties"]["DeletionProtection"] is False


# --- the proxy --------------------------------------------------------------------------------------------


def test_the_proxy_requires_tls_and_authenticates_the_master_user_and_the_app_role(with_proxy: Any) -> None:
    _, proxy = one(with_proxy, "AWS::RDS::DBProxy")
    properties = proxy["Properties"]
    assert properties["RequireTLS"] is True
    assert properties["EngineFamily"] == "POSTGRESQL"
    assert properties["DBProxyName"] == "statestore-main-postgres"
    auths = properties["Auth"]
    assert {(a["AuthScheme"], a["IAMAuth"]) for a in auths} == {("SECRETS", "DISABLED")}
    app_secret = function(with_proxy, COMMITTER)["Environment"]["Variables"][SECRET_ARN_ENV]
    master_secret = function(with_proxy, MIGRATION)["Environment"]["Variables"][MASTER_SECRET_ARN_ENV]
    assert [a["SecretArn"] for a in auths] == [master_secret, app_secret]
    assert master_secret != app_secret


# --- the database users -----------------------------------------------------------------------------------


def test_the_app_secret_is_generated_for_the_app_role(with_proxy: Any) -> None:
    secrets = with_proxy.find_resources("AWS::SecretsManager::Secret")
    templates = sorted(
        json.dumps(s["Properties"]["GenerateSecretString"]["SecretStringTemplate"]) for s in secrets.values()
    )
    assert len(templates) == 2
    assert "statestore_app" == APP_ROLE and any(f'\\"username\\":\\"{APP_ROLE}\\"' in t for t in templates)
    assert any('\\"username\\":\\"statestore\\"' in t for t in templates)


@pytest.mark.parametrize("handler", USERS)
def test_the_functions_may_not_read_the_master_secret(with_proxy: Any, handler: str) -> None:
    master = function(with_proxy, MIGRATION)["Environment"]["Variables"][MASTER_SECRET_ARN_ENV]
    assert MASTER_SECRET_ARN_ENV not in function(with_proxy, handler)["Environment"]["Variables"]
    readable = [
        s["Resource"]
        for s in statements_of(with_proxy, handler)
        if "secretsmanager:GetSecretValue" in _actions(s)
    ]
    assert readable and master not in readable


def test_the_schema_migration_runs_at_deploy_once_the_proxy_exists_and_alone_reads_both_secrets(
    with_proxy: Any,
) -> None:
    proxy_id, _ = one(with_proxy, "AWS::RDS::DBProxy")
    variables = function(with_proxy, MIGRATION)["Environment"]["Variables"]
    readable = {
        json.dumps(resource, sort_keys=True)
        for s in statements_of(with_proxy, MIGRATION)
        if "secretsmanager:GetSecretValue" in _actions(s)
        for resource in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    }
    assert readable == {
        json.dumps(variables[name], sort_keys=True) for name in (MASTER_SECRET_ARN_ENV, SECRET_ARN_ENV)
    }
    [(_, trigger)] = with_proxy.find_resources("Custom::Trigger").items()
    assert proxy_id in trigger.get("DependsOn", [])


# --- the network ------------------------------------------------------------------------------------------


def test_the_vpc_has_two_isolated_subnets_and_no_nat_gateway_nor_internet_gateway(with_proxy: Any) -> None:
    with_proxy.resource_count_is("AWS::EC2::Subnet", 2)
    with_proxy.resource_count_is("AWS::EC2::NatGateway", 0)
    with_proxy.resource_count_is("AWS::EC2::InternetGateway", 0)
    with_proxy.has_resource_properties("AWS::EC2::Subnet", {"MapPublicIpOnLaunch": False})


@pytest.mark.parametrize("service", ["dynamodb", "s3"])
def test_dynamodb_and_s3_are_reached_through_free_gateway_endpoints(with_proxy: Any, service: str) -> None:
    route_tables = sorted(with_proxy.find_resources("AWS::EC2::RouteTable"))
    found = [
        endpoint["Properties"]
        for endpoint in with_proxy.find_resources(
            "AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Gateway"}}
        ).values()
        if json.dumps(endpoint["Properties"]["ServiceName"]).endswith(f'.{service}"]]}}')
    ]
    assert len(found) == 1, f"expected one gateway endpoint for {service}"
    assert sorted(t["Ref"] for t in found[0]["RouteTableIds"]) == route_tables  # both subnets route to it


@pytest.mark.parametrize("service", ["sqs", "secretsmanager"])
def test_sqs_and_secrets_manager_are_reached_through_interface_endpoints_only_the_functions_may_use(
    with_proxy: Any, service: str
) -> None:
    found = [
        (logical_id, endpoint)
        for logical_id, endpoint in with_proxy.find_resources(
            "AWS::EC2::VPCEndpoint", {"Properties": {"VpcEndpointType": "Interface"}}
        ).items()
        if json.dumps(endpoint["Properties"]["ServiceName"]).endswith(f'.{service}"]]}}')
    ]
    assert len(found) == 1, f"expected one interface endpoint for {service}"
    properties = found[0][1]["Properties"]
    assert properties["PrivateDnsEnabled"] is True  # the SDK's default endpoint names resolve to it
    [endpoint_group] = properties["SecurityGroupIds"]
    clients = function(with_proxy, COMMITTER)["VpcConfig"]["SecurityGroupIds"]
    assert ingress_sources(with_proxy, endpoint_group["Fn::GetAtt"][0], 443) == clients


def test_no_endpoint_for_logs_or_xray_as_the_lambda_service_delivers_both(with_proxy: Any) -> None:
    services = json.dumps(
        [e["Properties"]["ServiceName"] for e in with_proxy.find_resources("AWS::EC2::VPCEndpoint").values()]
    )
    assert ".logs" not in services and ".xray" not in services and ".monitoring" not in services
    with_proxy.resource_count_is("AWS::EC2::VPCEndpoint", 4)


def test_only_the_functions_reach_the_proxy_and_only_the_proxy_reaches_the_cluster(with_proxy: Any) -> None:
    _, proxy = one(with_proxy, "AWS::RDS::DBProxy")
    [proxy_group] = proxy["Properties"]["VpcSecurityGroupIds"]
    _, cluster = one(with_proxy, "AWS::RDS::DBCluster")
    [cluster_group] = cluster["Properties"]["VpcSecurityGroupIds"]
    clients = function(with_proxy, COMMITTER)["VpcConfig"]["SecurityGroupIds"]

    assert ingress_sources(with_proxy, proxy_group["Fn::GetAtt"][0], 5432) == clients
    assert ingress_sources(with_proxy, cluster_group["Fn::GetAtt"][0], 5432) == [proxy_group]
    open_to_all = [
        group
        for group in with_proxy.find_resources("AWS::EC2::SecurityGroup").values()
        if any(r.get("CidrIp") == "0.0.0.0/0" for r in group["Properties"].get("SecurityGroupIngress", []))
    ]
    assert not open_to_all


def test_without_the_proxy_only_the_functions_reach_the_cluster(pausing: Any) -> None:
    _, cluster = one(pausing, "AWS::RDS::DBCluster")
    [cluster_group] = cluster["Properties"]["VpcSecurityGroupIds"]
    clients = function(pausing, COMMITTER)["VpcConfig"]["SecurityGroupIds"]
    assert ingress_sources(pausing, cluster_group["Fn::GetAtt"][0], 5432) == clients


# --- the functions ----------------------------------------------------------------------------------------


def test_the_committer_and_cleanup_run_in_the_isolated_subnets_and_the_snapshot_function_outside(
    with_proxy: Any,
) -> None:
    subnets = sorted(with_proxy.find_resources("AWS::EC2::Subnet"))
    for handler in USERS:
        vpc_config = function(with_proxy, handler)["VpcConfig"]
        assert sorted(s["Ref"] for s in vpc_config["SubnetIds"]) == subnets
        assert len(vpc_config["SecurityGroupIds"]) == 1
    assert "VpcConfig" not in function(with_proxy, SNAPSHOT)


@pytest.mark.parametrize("handler", USERS)
def test_the_functions_that_use_the_database_find_the_proxy_and_the_secret_in_their_environment(
    with_proxy: Any, handler: str
) -> None:
    proxy_id, _ = one(with_proxy, "AWS::RDS::DBProxy")
    variables = function(with_proxy, handler)["Environment"]["Variables"]
    assert variables[HOST_ENV] == {"Fn::GetAtt": [proxy_id, "Endpoint"]}
    assert SECRET_ARN_ENV in variables
    resources = json.dumps(variables["STATESTORE_RESOURCES"])
    assert "postgres_host" in resources and proxy_id in resources and "postgres_secret_arn" in resources


def test_without_the_proxy_the_functions_connect_to_the_clusters_endpoint(pausing: Any) -> None:
    cluster_id, _ = one(pausing, "AWS::RDS::DBCluster")
    assert function(pausing, COMMITTER)["Environment"]["Variables"][HOST_ENV] == {
        "Fn::GetAtt": [cluster_id, "Endpoint.Address"]
    }


def test_the_snapshot_function_gets_neither_the_secret_nor_the_database_settings(with_proxy: Any) -> None:
    variables = function(with_proxy, SNAPSHOT)["Environment"]["Variables"]
    assert HOST_ENV not in variables and SECRET_ARN_ENV not in variables
    actions = {a for s in statements_of(with_proxy, SNAPSHOT) for a in _actions(s)}
    assert not [a for a in actions if a.startswith(("secretsmanager:", "ec2:"))]


@pytest.mark.parametrize("handler", USERS)
def test_the_functions_that_use_the_database_may_read_its_secret_and_manage_their_network_interfaces(
    with_proxy: Any, handler: str
) -> None:
    secret_arn = function(with_proxy, handler)["Environment"]["Variables"][SECRET_ARN_ENV]
    statements = statements_of(with_proxy, handler)
    assert [
        s
        for s in statements
        if "secretsmanager:GetSecretValue" in _actions(s) and s["Resource"] == secret_arn
    ]
    assert [s for s in statements if set(VPC_ACCESS_ACTIONS) <= set(_actions(s)) and s["Resource"] == "*"]
    # Nothing else of EC2 and no managed policy: only the network-interface actions Lambda needs.
    assert {a for s in statements for a in _actions(s) if a.startswith("ec2:")} == set(VPC_ACCESS_ACTIONS)


def test_outputs_name_the_database_host_and_secret(with_proxy: Any) -> None:
    outputs = with_proxy.to_json()["Outputs"]
    assert {"PostgresHost", "PostgresSecretArn"} <= set(outputs)
    assert "postgres_host" in json.dumps(outputs["StatestoreResources"])


# --- off by default ---------------------------------------------------------------------------------------


def test_by_default_there_is_no_vpc_database_proxy_nor_secret(template: Any) -> None:
    for resource_type in POSTGRES_TYPES:
        template.resource_count_is(resource_type, 0)


def test_by_default_no_function_runs_in_a_vpc_nor_knows_of_a_database(template: Any) -> None:
    for handler in (COMMITTER, SNAPSHOT, CLEANUP):
        properties = function(template, handler)
        assert "VpcConfig" not in properties
        variables = properties["Environment"]["Variables"]
        assert HOST_ENV not in variables and SECRET_ARN_ENV not in variables
        assert "postgres" not in json.dumps(variables["STATESTORE_RESOURCES"])
        assert not [a for s in statements_of(template, handler) for a in _actions(s) if a.startswith("ec2:")]
    assert not {"PostgresHost", "PostgresSecretArn"} & set(template.to_json()["Outputs"])


@pytest.mark.parametrize(
    ("key", "value"), [("postgres", "perhaps"), ("postgres_max_acu", "0"), ("postgres_max_acu", "300")]
)
def test_bad_postgres_context_values_are_rejected_naming_the_key(
    synth_stack: SynthStack, key: str, value: str
) -> None:
    with pytest.raises(ValueError, match=key):
        synth_stack(**{key: value})


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)
