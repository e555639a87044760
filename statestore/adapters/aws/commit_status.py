"""Commit statuses on DynamoDB: one item per (table id, request id), expired by TTL after a retention period.

The log writes a committed request's status in the same TransactWriteItems as its entry, with the item and
condition :meth:`DynamoDBCommitStatusStore.put_unless_final` gives; everything else is written by
:meth:`DynamoDBCommitStatusStore.record`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from statestore import instance
from statestore.adapters.aws.clients import (
    BATCH_GET_LIMIT,
    TRANSACT_WRITE_LIMIT,
    AwsCaller,
    batch_get_items,
    cancellation_reasons,
)
from statestore.errors import StateStoreError, StoreUnavailableError
from statestore.model.clock import now_millis
from statestore.store.ports import (
    CommitOutcome,
    CommitStatus,
    CommitStatusStore,
    RequestKey,
    one_status_per_request,
)

_TABLE_ID = instance.COMMIT_STATUS_KEYS.hash_key[0]
_REQUEST_ID = instance.COMMIT_STATUS_KEYS.range_key[0]  # type: ignore[index]
_OUTCOME = "outcome"
_RECORDED_TIME = "recorded_time"
_TRANSACTION_NUMBER = instance.TRANSACTION_NUMBER
_REASON = "reason"
_EXPIRES_AT = instance.EXPIRES_AT

DEFAULT_RETENTION_SECONDS = instance.COMMIT_STATUS_RETENTION_SECONDS
MAX_REASON_CHARS = instance.MAX_STATUS_REASON_CHARS
_CONDITION_NAMES = {"#r": _REQUEST_ID, "#o": _OUTCOME, "#e": _EXPIRES_AT}


class _FinalStatusPresent(StateStoreError):
    """Some status in a write already had a final status stored (internal to this module)."""


class DynamoDBCommitStatusStore(CommitStatusStore):
    """Writes with conditional TransactWriteItems (100 a call), reads with strongly consistent
    BatchGetItem (100 a call)."""

    def __init__(
        self,
        dynamodb_client: Any,
        table_name: str,
        caller: AwsCaller | None = None,
        *,
        retention_seconds: int = DEFAULT_RETENTION_SECONDS,
        clock: Callable[[], int] = now_millis,
    ) -> None:
        self.dynamodb = dynamodb_client
        self.table_name = table_name
        self.call = caller or AwsCaller()
        self.retention_seconds = retention_seconds
        self._clock = clock

    def record(self, statuses: Sequence[CommitStatus]) -> dict[RequestKey, CommitStatus]:
        """One TransactWriteItems per 100 statuses, each put conditional on no final status being stored.

        When some conditions fail (those requests already have a final status), the transaction wrote
        nothing: the final statuses are read and kept, and the rest written again.
        """
        kept: dict[RequestKey, CommitStatus] = {}
        todo = one_status_per_request(statuses)
        for start in range(0, len(todo), TRANSACT_WRITE_LIMIT):
            chunk = todo[start : start + TRANSACT_WRITE_LIMIT]
            for _ in range(self.call.max_attempts):
                failed = self._write_unless_final(chunk) if chunk else []
                if not failed:
                    break
                finals = self.get_many(s.key for s in failed)
                kept.update({key: status for key, status in finals.items() if status.is_final})
                chunk = [s for s in chunk if s.key not in kept]
            else:
                raise StoreUnavailableError(
                    f"could not record commit statuses in {self.table_name!r}: their conditions kept "
                    "failing while the stored statuses kept changing; try again later"
                )
        return kept

    def _write_unless_final(self, statuses: list[CommitStatus]) -> list[CommitStatus]:
        """Write every status in one transaction; or, if some request has a final status, write nothing and
        return those statuses."""
        failed: list[CommitStatus] = []
        now_seconds = self._clock() // 1000

        def final_present(code: str, error: ClientError) -> StateStoreError | None:
            if code != "TransactionCanceledException":
                return None
            reasons = cancellation_reasons(error)
            if "ConditionalCheckFailed" not in reasons:
                return None
            failed.extend(s for s, r in zip(statuses, reasons, strict=False) if r == "ConditionalCheckFailed")
            return _FinalStatusPresent()

        try:
            self.call(
                f"record {len(statuses)} commit status(es) in {self.table_name!r}",
                self.dynamodb.transact_write_items,
                final_present,
                TransactItems=[self._put_unless_final(status, now_seconds) for status in statuses],
            )
        except _FinalStatusPresent:
            return failed
        return []

    def puts_unless_final(self, statuses: Sequence[CommitStatus]) -> list[dict[str, Any]]:
        """TransactWriteItems ``Put``s of ``statuses`` (what the log writes with an entry), each conditional
        on the request having no final status."""
        now_seconds = self._clock() // 1000
        return [self._put_unless_final(status, now_seconds) for status in statuses]

    def _put_unless_final(self, status: CommitStatus, now_seconds: int) -> dict[str, Any]:
        """A TransactWriteItems ``Put`` of ``status``, conditional on the request having no final status
        (an expired one counts as gone: TTL deletes it some time after expiry)."""
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": self._item(status),
                "ConditionExpression": "attribute_not_exists(#r) OR #o = :dead OR #e < :now",
                "ExpressionAttributeNames": _CONDITION_NAMES,
                "ExpressionAttributeValues": {
                    ":dead": {"S": CommitOutcome.DEAD_LETTERED.value},
                    ":now": {"N": str(now_seconds)},
                },
            }
        }

    def get(self, table_id: str, request_id: str) -> CommitStatus | None:
        response = self.call(
            f"read the status of commit request {request_id!r} of table {table_id!r}",
            self.dynamodb.get_item,
            TableName=self.table_name,
            Key=_key((table_id, request_id)),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return self._status(item) if item else None

    def get_many(self, keys: Iterable[RequestKey]) -> dict[RequestKey, CommitStatus]:
        wanted = list(dict.fromkeys(keys))
        found: dict[RequestKey, CommitStatus] = {}
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            for item in self._read([_key(key) for key in wanted[start : start + BATCH_GET_LIMIT]]):
                status = self._status(item)
                if status is not None:
                    found[status.key] = status
        return found

    def _read(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        what = f"read {len(keys)} commit status(es) from {self.table_name!r}"
        return batch_get_items(self.call, self.dynamodb, self.table_name, keys, what)

    def _item(self, status: CommitStatus) -> dict[str, Any]:
        item: dict[str, Any] = {
            _REQUEST_ID: {"S": status.request_id},
            _TABLE_ID: {"S": status.table_id},
            _OUTCOME: {"S": status.outcome.value},
            _RECORDED_TIME: {"N": str(status.recorded_time)},
            _EXPIRES_AT: {"N": str(status.recorded_time // 1000 + self.retention_seconds)},
        }
        if status.transaction_number is not None:
            item[_TRANSACTION_NUMBER] = {"N": str(status.transaction_number)}
        if status.reason:
            item[_REASON] = {"S": status.reason[:MAX_REASON_CHARS]}
        return item

    def _status(self, item: dict[str, Any]) -> CommitStatus | None:
        """The status an item holds, or None if it expired (TTL deletes items some time after expiry)."""
        try:
            if int(item[_EXPIRES_AT]["N"]) * 1000 < self._clock():
                return None
            return CommitStatus(
                request_id=item[_REQUEST_ID]["S"],
                table_id=item[_TABLE_ID]["S"],
                outcome=CommitOutcome(item[_OUTCOME]["S"]),
                recorded_time=int(item[_RECORDED_TIME]["N"]),
                transaction_number=int(item[_TRANSACTION_NUMBER]["N"])
                if _TRANSACTION_NUMBER in item
                else None,
                reason=item[_REASON]["S"] if _REASON in item else None,
            )
        except (KeyError, ValueError) as e:
            raise StateStoreError(
                f"commit status item in {self.table_name!r} is malformed: {item!r} ({e})"
            ) from e


def _key(key: RequestKey) -> dict[str, Any]:
    table_id, request_id = key
    return {_TABLE_ID: {"S": table_id}, _REQUEST_ID: {"S": request_id}}
