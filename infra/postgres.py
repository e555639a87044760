"""The optional PostgreSQL database for file references (design record 002): Aurora PostgreSQL Serverless v2
in a VPC of its own, with the network the functions that use it need to still reach AWS.

Built only with the ``postgres`` context key. What is here:

- A VPC over two AZs with isolated subnets only: no NAT gateway, which would cost about as much at rest as
  the database does (per AZ, per hour, whether used or not). The functions reach AWS through endpoints:
  gateway endpoints for DynamoDB and S3 (free), interface endpoints for SQS (the committer's dead letters,
  the cleanup's plan) and Secrets Manager (the database credentials). CloudWatch Logs and X-Ray need none:
  the Lambda service delivers a function's output to Logs (Powertools metrics are log lines, EMF, not
  PutMetricData calls), and the X-Ray SDK sends its segments over UDP to the daemon Lambda runs beside the
  function (link-local ``AWS_XRAY_DAEMON_ADDRESS``), which Lambda uploads; no other AWS API is called.
- The cluster: one Serverless v2 writer, storage encrypted, credentials generated into Secrets Manager.
- Two database users: the master user (its secret readable only by the schema migration, a function the
  deploy runs through a CDK trigger: it creates the schema and the app role) and the app role
  ``statestore_app`` the committer and the cleanup connect as (its own generated secret), which may read
  and write the store's rows and nothing else (``statestore.adapters.postgres.schema``).
- With ``proxy`` (the default) an RDS Proxy in front, requiring TLS and authenticating clients with the same
  secret: Lambda invocations come and go, the proxy keeps their connections pooled. Auto-pause does not work
  with a proxy (it holds connections to the instance), so the cluster's least capacity is then 0.5 ACU;
  without the proxy it is 0 ACU, pausing after :data:`AUTO_PAUSE` without connections, and the functions
  connect to the cluster's endpoint directly (their concurrency caps bound the connections).
- Security groups: :attr:`clients` is the only group let in to the database's front (proxy or cluster) on
  its port, and to the interface endpoints on 443. The functions that use the database get it; the snapshot
  function does not (it only touches partitions, which stay on the log) and stays outside the VPC.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, triggers
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from constructs import Construct

from infra.functions import FunctionNetwork
from infra.nag import acknowledge
from statestore.adapters.postgres.schema import APP_ROLE
from statestore.instance import (
    POSTGRES_DATABASE_NAME,
    POSTGRES_HOST_ENV,
    POSTGRES_MASTER_SECRET_ARN_ENV,
    POSTGRES_SECRET_ARN_ENV,
    POSTGRES_SERVER_SETTINGS,
)

# The newest Aurora PostgreSQL 16 that aws-cdk-lib offers; auto-pause needs 16.3 or later.
ENGINE_VERSION = rds.AuroraPostgresEngineVersion.VER_16_13
PORT = 5432
DATABASE_NAME = POSTGRES_DATABASE_NAME
MASTER_USERNAME = "statestore"
# With the proxy the cluster cannot pause, and 0.5 ACU is Serverless v2's least running capacity.
MIN_CAPACITY_WITH_PROXY = 0.5
MIN_CAPACITY_PAUSING = 0.0
# Idle time before a cluster without a proxy pauses (5 minutes to 1 day): longer than the gap between a
# burst of commits, shorter than the hourly cleanup's period, so it sleeps between cleanups.
AUTO_PAUSE = Duration.minutes(10)
# Environment variables of the functions that use the database.
SECRET_ARN_ENV = POSTGRES_SECRET_ARN_ENV
HOST_ENV = POSTGRES_HOST_ENV


class PostgresDatabase(Construct):
    """The VPC, the cluster, its secret, the proxy (``proxy``) and the endpoints; :meth:`connect` lets a
    function in. ``host`` is the endpoint clients connect to (the proxy's, or the cluster's writer)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance_id: str,
        proxy: bool,
        max_capacity_acu: int,
        deletion_protection: bool,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        isolated = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
            ],
            gateway_endpoints={
                "DynamoDb": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.DYNAMODB),
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
            },
        )
        # Rejected traffic only: what a wrong security group drops, for the price of almost nothing at rest.
        self.vpc.add_flow_log(
            "RejectedTraffic",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(
                logs.LogGroup(self, "FlowLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY)
            ),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )
        self.subnets = isolated
        self.clients = ec2.SecurityGroup(
            self,
            "ClientsSecurityGroup",
            vpc=self.vpc,
            description=f"statestore {instance_id}: functions that use the file-reference database",
            # Isolated subnets route nowhere but the VPC and its gateway endpoints (whose prefix lists a
            # narrower rule would have to name), so outbound is left open.
            allow_all_outbound=True,
        )
        for name, service in (
            ("Sqs", ec2.InterfaceVpcEndpointAwsService.SQS),
            ("SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER),
        ):
            endpoint = self.vpc.add_interface_endpoint(
                name, service=service, subnets=isolated, private_dns_enabled=True, open=False
            )
            endpoint.connections.allow_default_port_from(self.clients, f"statestore {instance_id} functions")

        self.cluster_security_group = ec2.SecurityGroup(
            self,
            "ClusterSecurityGroup",
            vpc=self.vpc,
            description=f"statestore {instance_id}: the file-reference database cluster",
            allow_all_outbound=False,
        )
        self.cluster = rds.DatabaseCluster(
            self,
            "Cluster",
            engine=rds.DatabaseClusterEngine.aurora_postgres(version=ENGINE_VERSION),
            writer=rds.ClusterInstance.serverless_v2("Writer", auto_minor_version_upgrade=True),
            serverless_v2_min_capacity=MIN_CAPACITY_WITH_PROXY if proxy else MIN_CAPACITY_PAUSING,
            serverless_v2_max_capacity=max_capacity_acu,
            serverless_v2_auto_pause_duration=None if proxy else AUTO_PAUSE,
            credentials=rds.Credentials.from_generated_secret(MASTER_USERNAME),
            default_database_name=DATABASE_NAME,
            parameters=dict(POSTGRES_SERVER_SETTINGS),  # a cluster parameter group of the planner's settings
            storage_encrypted=True,
            vpc=self.vpc,
            vpc_subnets=isolated,
            security_groups=[self.cluster_security_group],
            port=PORT,
            # Protected: the cluster cannot be deleted (``cdk destroy`` stops at it) until deployed with
            # deletion_protection=false; deleting it then leaves a final snapshot. Unprotected: disposable.
            deletion_protection=deletion_protection,
            removal_policy=RemovalPolicy.SNAPSHOT if deletion_protection else RemovalPolicy.DESTROY,
            backup=rds.BackupProps(retention=Duration.days(7)),
        )
        assert self.cluster.secret is not None  # generated credentials always make one
        self.master_secret = self.cluster.secret
        # The app role's credentials: what the functions read; the schema migration sets its password.
        self.secret = rds.DatabaseSecret(
            self, "AppSecret", username=APP_ROLE, master_secret=self.master_secret
        )
        self.proxy: rds.DatabaseProxy | None = None
        if proxy:
            proxy_security_group = ec2.SecurityGroup(
                self,
                "ProxySecurityGroup",
                vpc=self.vpc,
                description=f"statestore {instance_id}: RDS Proxy of the file-reference database",
                allow_all_outbound=False,
            )
            self.proxy = rds.DatabaseProxy(
                self,
                "Proxy",
                proxy_target=rds.ProxyTarget.from_cluster(self.cluster),
                db_proxy_name=f"statestore-{instance_id}-postgres",  # unique per account and region
                secrets=[self.master_secret, self.secret],
                vpc=self.vpc,
                vpc_subnets=isolated,
                security_groups=[proxy_security_group],
                require_tls=True,
                iam_auth=False,  # clients present the secret's credentials, over TLS
            )
            # The proxy -> cluster rules (the cluster group's ingress, the proxy group's egress, on the
            # cluster's endpoint port) are the DatabaseProxy's own: adding them here too would give EC2 each
            # rule twice, which it refuses (InvalidPermission.Duplicate) and the deploy with it.
            proxy_security_group.add_ingress_rule(self.clients, ec2.Port.tcp(PORT), "functions to the proxy")
            self.host = self.proxy.endpoint
        else:
            self.cluster_security_group.add_ingress_rule(
                self.clients, ec2.Port.tcp(PORT), "functions to the cluster"
            )
            self.host = self.cluster.cluster_endpoint.hostname
        self._acknowledge(deletion_protection)

    def connect(self, function: lambda_.Function) -> None:
        """Let ``function`` (placed in :attr:`vpc` with :attr:`clients`) use the database: read the secret,
        and find it and the host in its environment."""
        self.secret.grant_read(function)
        function.add_environment(SECRET_ARN_ENV, self.secret.secret_arn)
        function.add_environment(HOST_ENV, self.host)

    def migrate_with(self, function: lambda_.Function) -> triggers.Trigger:
        """Run ``function`` (``lambdas.postgres_schema.handler``, placed in :attr:`vpc` with :attr:`clients`)
        at every deploy that changes it, once the database (and its proxy) exist: it alone reads the master
        secret, and sets up the schema and the app role with the app secret's password."""
        self.master_secret.grant_read(function)
        self.secret.grant_read(function)
        function.add_environment(POSTGRES_MASTER_SECRET_ARN_ENV, self.master_secret.secret_arn)
        function.add_environment(SECRET_ARN_ENV, self.secret.secret_arn)
        function.add_environment(HOST_ENV, self.host)
        after: list[Construct] = [self.cluster, self.secret]
        if self.proxy is not None:
            after.append(self.proxy)
        trigger = triggers.Trigger(
            self,
            "SchemaMigration",
            handler=function,
            execute_after=after,
            execute_on_handler_change=True,
            timeout=Duration.minutes(5),
        )
        return trigger

    @property
    def network(self) -> FunctionNetwork:
        """Where a function that uses the database runs: the isolated subnets, as a client."""
        return FunctionNetwork(vpc=self.vpc, subnets=self.subnets, security_groups=(self.clients,))

    def _acknowledge(self, deletion_protection: bool) -> None:
        acknowledge(
            self.cluster,
            "Clients authenticate with the generated Secrets Manager credentials (through the proxy, TLS "
            "required); IAM database authentication would add a token per connection and no control.",
            "AwsSolutions-RDS6",
        )
        acknowledge(
            self.cluster,
            "PostgreSQL's default port: a different number hides nothing; only the clients security group "
            "reaches the database.",
            "AwsSolutions-RDS11",
        )
        acknowledge(
            self.cluster,  # its generated secret is a child (``cluster.secret`` is the attachment)
            "Rotation needs a rotation function in the VPC and every client to re-read the secret on an "
            "authentication failure; not built yet, the master secret is read by the schema migration only.",
            "AwsSolutions-SMG4",
        )
        acknowledge(
            self.secret,
            "Rotation needs a rotation function in the VPC and every client to re-read the secret on an "
            "authentication failure; not built yet, the app secret is read by the two functions only.",
            "AwsSolutions-SMG4",
        )
        if not deletion_protection:
            acknowledge(
                self.cluster,
                "deletion_protection=false asks for a disposable instance: the cluster goes with the stack "
                "like the tables do.",
                "AwsSolutions-RDS10",
            )
