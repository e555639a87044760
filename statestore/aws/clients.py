"""Building boto3 clients, and the one helper that calls them: retries and error translation.

Two retry layers, on purpose: botocore's own (``standard``/``adaptive`` mode) retries quickly inside one
call; :class:`AwsCaller` retries a throttled or failed call again after a longer full-jitter backoff, so a
burst that outlasts botocore's quick retries still gets through. If it never does, the caller sees
:class:`~statestore.errors.StoreUnavailableError`. No botocore exception leaves this package.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

from statestore.errors import StateStoreError, StoreUnavailableError

T = TypeVar("T")

DEFAULT_REGION = "eu-west-2"

# Error codes meaning "try again later", whichever service sends them.
RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
        "RequestThrottled",
        "InternalServerError",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "TransactionInProgressException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# Reasons inside a cancelled DynamoDB transaction that mean the same.
RETRYABLE_CANCELLATION_REASONS = frozenset(
    {"ThrottlingError", "TransactionConflict", "ProvisionedThroughputExceeded"}
)


def make_client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    retry_mode: str = "adaptive",
    max_attempts: int = 5,
    max_pool_connections: int = 32,
    session: Any = None,
) -> Any:
    """A boto3 client for ``service`` with the standard credential chain and throttling-aware retries.

    ``endpoint_url`` points at a local emulator (moto, DynamoDB Local); None means the real AWS endpoint.
    """
    config = Config(
        region_name=region or _default_region(session),
        retries={"mode": retry_mode, "max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        connect_timeout=5,
        read_timeout=30,
    )
    factory = session or boto3.session.Session()
    return factory.client(service, endpoint_url=endpoint_url, config=config)


def _default_region(session: Any) -> str:
    region = session.region_name if session is not None else boto3.session.Session().region_name
    return region or DEFAULT_REGION


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def cancellation_reasons(error: ClientError) -> list[str]:
    """The per-item reason codes of a cancelled TransactWriteItems, in request order ("None" = no problem)."""
    reasons = error.response.get("CancellationReasons")
    if reasons:
        return [str(r.get("Code", "None")) for r in reasons]
    # Some emulators only put them in the message: "... reasons [ConditionalCheckFailed, None]".
    message = str(error.response.get("Error", {}).get("Message", ""))
    start, end = message.rfind("["), message.rfind("]")
    if start == -1 or end < start:
        return []
    return [part.strip() for part in message[start + 1 : end].split(",")]


def _is_retryable(error: ClientError) -> bool:
    code = error_code(error)
    if code in RETRYABLE_CODES:
        return True
    if code == "TransactionCanceledException":
        reasons = set(cancellation_reasons(error)) - {"None", ""}
        return bool(reasons) and reasons <= RETRYABLE_CANCELLATION_REASONS
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return isinstance(status, int) and status >= 500


# ``translate(code, error)`` returns the library error an adapter wants for an expected failure (e.g.
# ConditionalCheckFailedException -> TransactionNumberTakenError), or None to let the caller handle it.
Translate = Callable[[str, ClientError], StateStoreError | None]


@dataclass
class AwsCaller:
    """Calls a boto3 client method, retrying transient failures and translating every botocore error."""

    max_attempts: int = 4
    base_delay: float = 0.05
    max_delay: float = 2.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def __call__(
        self, what: str, method: Callable[..., T], /, translate: Translate | None = None, **kwargs: Any
    ) -> T:
        """``method(**kwargs)``; ``what`` names the operation for error messages ("read the log of t1")."""
        for attempt in range(self.max_attempts):
            try:
                return method(**kwargs)
            except ClientError as e:
                code = error_code(e)
                if translate is not None:
                    translated = translate(code, e)
                    if translated is not None:
                        raise translated from e
                if not _is_retryable(e):
                    message = e.response.get("Error", {}).get("Message", "")
                    raise StateStoreError(f"could not {what}: {code}: {message}") from e
                last: Exception = e
            except (ConnectionError, HTTPClientError) as e:
                last = e
            except BotoCoreError as e:
                raise StateStoreError(f"could not {what}: {e}") from e
            if attempt + 1 < self.max_attempts:
                self.sleep(self.rng.uniform(0.0, min(self.max_delay, self.base_delay * 2**attempt)))
        raise StoreUnavailableError(
            f"could not {what}: the service kept failing after {self.max_attempts} attempts ({last}); "
            "check the endpoint and the table's capacity, then try again"
        ) from last


_BATCH_WRITE_LIMIT = 25  # DynamoDB's BatchWriteItem limit


def batch_delete_items(
    call: AwsCaller, dynamodb: Any, table_name: str, keys: list[dict[str, Any]], what: str
) -> None:
    """Delete items by key in batches of 25, in order, retrying whatever DynamoDB returns unprocessed."""
    for start in range(0, len(keys), _BATCH_WRITE_LIMIT):
        requests: list[dict[str, Any]] = [
            {"DeleteRequest": {"Key": key}} for key in keys[start : start + _BATCH_WRITE_LIMIT]
        ]
        for attempt in range(call.max_attempts * 2):
            response = call(what, dynamodb.batch_write_item, RequestItems={table_name: requests})
            requests = response.get("UnprocessedItems", {}).get(table_name, [])
            if not requests:
                break
            call.sleep(call.rng.uniform(0.0, min(call.max_delay, call.base_delay * 2**attempt)))
        else:
            raise StoreUnavailableError(
                f"could not {what}: DynamoDB kept returning {len(requests)} item(s) unprocessed; "
                "try again later"
            )
