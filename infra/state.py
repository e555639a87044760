"""The DynamoDB tables of an instance: transaction log, snapshots, table index and commit status."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from statestore import instance
from statestore.instance import KeySchema, ResourceNames

_ATTRIBUTE_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}

# Writes are granted per action rather than with grant_write_data, so that e.g. the snapshot Lambda can
# neither append to nor delete from the log. These are the calls statestore.adapters.aws makes; a conditional
# put or a TransactWriteItems needs only the per-item actions inside it (ConditionCheckItem comes with reads).
PUT = ("dynamodb:PutItem",)
UPDATE = ("dynamodb:UpdateItem",)
DELETE = ("dynamodb:DeleteItem",)
# The tables can be restored to any second of this many days back (point-in-time recovery; 35 is the most).
POINT_IN_TIME_RECOVERY_DAYS = 35
# BatchWriteItem (batch deletes of log entries and snapshot records) cannot be narrowed to puts or
# deletes in IAM.
BATCH_WRITE = ("dynamodb:BatchWriteItem",)


class StateTables(Construct):
    """One table per entry of ``ResourceNames.table_key_schemas``: on-demand, point-in-time recovery on.

    With ``deletion_protection`` the tables also survive ``cdk destroy`` (removal policy RETAIN); without
    it, the instance is disposable and destroying the stack deletes them.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, names: ResourceNames, deletion_protection: bool
    ) -> None:
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if deletion_protection else RemovalPolicy.DESTROY

        def table(construct_id: str, name: str, keys: KeySchema, ttl: str | None = None) -> dynamodb.Table:
            return dynamodb.Table(
                self,
                construct_id,
                table_name=name,
                partition_key=dynamodb.Attribute(
                    name=keys.hash_key[0], type=_ATTRIBUTE_TYPES[keys.hash_key[1]]
                ),
                sort_key=(
                    dynamodb.Attribute(name=keys.range_key[0], type=_ATTRIBUTE_TYPES[keys.range_key[1]])
                    if keys.range_key
                    else None
                ),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True, recovery_period_in_days=POINT_IN_TIME_RECOVERY_DAYS
                ),
                deletion_protection=deletion_protection,
                time_to_live_attribute=ttl,
                removal_policy=removal,
            )

        self.transaction_log = table(
            "TransactionLog", names.transaction_log_table, instance.TRANSACTION_LOG_KEYS
        )
        self.snapshots = table("Snapshots", names.snapshots_table, instance.SNAPSHOTS_KEYS)
        self.tables_by_id = table("TablesById", names.tables_by_id_table, instance.TABLES_BY_ID_KEYS)
        self.tables_by_name = table("TablesByName", names.tables_by_name_table, instance.TABLES_BY_NAME_KEYS)
        # A request's outcome is kept until expires_at (epoch seconds), then DynamoDB deletes it.
        self.commit_status = table(
            "CommitStatus", names.commit_status_table, instance.COMMIT_STATUS_KEYS, ttl=instance.EXPIRES_AT
        )

    @property
    def all_tables(self) -> tuple[dynamodb.Table, ...]:
        return (
            self.transaction_log,
            self.snapshots,
            self.tables_by_id,
            self.tables_by_name,
            self.commit_status,
        )

    def grant_table_index_read(self, grantee: iam.IGrantable) -> None:
        """Look tables up by id or name."""
        self.tables_by_id.grant_read_data(grantee)
        self.tables_by_name.grant_read_data(grantee)


def grant_read_and(table: dynamodb.Table, grantee: iam.IGrantable, actions: tuple[str, ...]) -> None:
    """Read ``table`` plus exactly ``actions`` on it."""
    table.grant_read_data(grantee)
    table.grant(grantee, *actions)
