"""Building boto3 clients, and the one helper that calls them: error translation at the boundary.

One retry layer per kind of failure, so attempts never multiply:

- transport failures and throttling: botocore's ``standard`` retry mode, at most
  :data:`BOTOCORE_MAX_ATTEMPTS` attempts of one call (its own capped, jittered exponential backoff);
- lost races (a conditional put of the next log number taken): the engine's loop
  (:class:`statestore.engine.log_store.RetryPolicy`);
- a DynamoDB transaction cancelled only because it met a concurrent one (``TransactionConflict``), which
  botocore does not retry: :class:`AwsCaller`, at most ``AwsCaller.max_attempts`` times;
- unprocessed items of batch APIs: bounded loops of ``AwsCaller.max_attempts`` rounds.

Every backoff of ours is :func:`statestore.model.backoff.full_jitter_delay`. Whatever still fails leaves this
package as a library error from :func:`translate_error` (throttled, unavailable, access denied, not
found, or a plain :class:`~statestore.errors.StateStoreError` naming the code): no botocore exception
leaves this package.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from statestore.adapters.aws import dynamodb_items
from statestore.errors import (
    AccessDeniedError,
    ResourceNotFoundError,
    ResourceSettingsConflictError,
    StateStoreError,
    StoreUnavailableError,
    ThrottledError,
)
from statestore.model.backoff import full_jitter_delay

T = TypeVar("T")

DEFAULT_REGION = "eu-west-2"

# botocore's retries of one call (the first attempt included), for throttling and transport failures.
BOTOCORE_RETRY_MODE = "standard"
BOTOCORE_MAX_ATTEMPTS = 5

# Error codes meaning "slow down", whichever service sends them.
THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
        "RequestThrottled",
        "RequestThrottledException",
        "TransactionInProgressException",
        "KmsThrottled",
    }
)
# Error codes meaning the service failed on its side or timed out.
UNAVAILABLE_CODES = frozenset(
    {
        "InternalServerError",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
# The caller may not do this, or is not who it says: fix IAM or the credentials, do not retry.
ACCESS_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "MissingAuthenticationToken",
        "AuthFailure",
        "KMS.AccessDeniedException",
        "KmsAccessDenied",
    }
)
# A table, queue, bucket or function named by the instance's resources does not exist.
NOT_FOUND_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "AWS.SimpleQueueService.NonExistentQueue",
        "NonExistentQueue",
        "QueueDoesNotExist",
        "NoSuchBucket",
    }
)
# A resource to create exists with other settings (SQS's CreateQueue with other attributes).
SETTINGS_CONFLICT_CODES = frozenset(
    {"QueueAlreadyExists", "QueueNameExists", "AWS.SimpleQueueService.QueueNameExists"}
)
# Reasons inside a cancelled DynamoDB transaction that mean "met another transaction": retried here.
CONFLICT_CANCELLATION_REASONS = frozenset({"TransactionConflict"})
# Reasons that mean the same as throttling.
THROTTLED_CANCELLATION_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})


def make_client(
    service: str,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    retry_mode: str = BOTOCORE_RETRY_MODE,
    max_attempts: int = BOTOCORE_MAX_ATTEMPTS,
    max_pool_connections: int = 32,
    session: Any = None,
) -> Any:
    """A boto3 client for ``service`` with the standard credential chain and botocore's retries of
    throttling and transport failures (``retry_mode``, at most ``max_attempts`` attempts of one call).

    ``endpoint_url`` points at a local emulator (moto, DynamoDB Local); None means the real AWS endpoint.
    A DynamoDB client reads items without botocore's per-attribute parse (:mod:`.dynamodb_items`).
    """
    config = Config(
        region_name=region or _default_region(session),
        # total_max_attempts counts the first attempt (botocore's max_attempts would count only retries).
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        connect_timeout=5,
        read_timeout=30,
    )
    factory = session or boto3.session.Session()
    client = factory.client(service, endpoint_url=endpoint_url, config=config)
    if service == "dynamodb":
        dynamodb_items.register(client)
    return client


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


def _cancellation_reasons_set(error: ClientError) -> set[str]:
    return set(cancellation_reasons(error)) - {"None", ""}


def _is_transaction_conflict(error: ClientError) -> bool:
    if error_code(error) != "TransactionCanceledException":
        return False
    reasons = _cancellation_reasons_set(error)
    return bool(reasons) and reasons <= CONFLICT_CANCELLATION_REASONS | THROTTLED_CANCELLATION_REASONS


def translate_error(what: str, error: Exception) -> StateStoreError:
    """The library error for a botocore failure of the operation ``what`` ("read the log of t1").

    Throttling -> :class:`ThrottledError`; a server-side or transport failure ->
    :class:`StoreUnavailableError`; denied or unauthenticated -> :class:`AccessDeniedError`; a missing
    table, queue, bucket or function -> :class:`ResourceNotFoundError`; a queue existing with other
    settings -> :class:`ResourceSettingsConflictError`; anything else ->
    :class:`StateStoreError`. Each message names the operation and the service's code and message.
    """
    if isinstance(error, ClientError):
        code = error_code(error)
        message = error.response.get("Error", {}).get("Message", "")
        said = f"could not {what}: {code}: {message}"
        metadata = error.response.get("ResponseMetadata", {})
        status = metadata.get("HTTPStatusCode", 0)
        attempts = int(metadata.get("RetryAttempts", 0)) + 1  # botocore's, the first included
        reasons = _cancellation_reasons_set(error) if code == "TransactionCanceledException" else set()
        if code in THROTTLING_CODES or (reasons and reasons <= THROTTLED_CANCELLATION_REASONS):
            return ThrottledError(
                f"{said} (still throttled after {attempts} attempt(s)); try again later or "
                "give the table more capacity"
            )
        if reasons and reasons <= CONFLICT_CANCELLATION_REASONS | THROTTLED_CANCELLATION_REASONS:
            return StoreUnavailableError(f"{said} (kept conflicting with concurrent writes); try again")
        if code in UNAVAILABLE_CODES or (isinstance(status, int) and status >= 500):
            return StoreUnavailableError(
                f"{said} (the service kept failing after {attempts} attempt(s)); try again later"
            )
        if code in ACCESS_DENIED_CODES:
            return AccessDeniedError(
                f"{said}; grant the caller's role the permission, or check the AWS credentials in use"
            )
        if code in NOT_FOUND_CODES:
            return ResourceNotFoundError(said)
        if code in SETTINGS_CONFLICT_CODES:
            return ResourceSettingsConflictError(said)
        return StateStoreError(said)
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return AccessDeniedError(
            f"could not {what}: {error}; configure AWS credentials (e.g. `aws configure`) or use a local "
            "endpoint"
        )
    if isinstance(error, ConnectionError | HTTPClientError):
        return StoreUnavailableError(
            f"could not {what}: the service kept failing ({error}); check the endpoint and try again"
        )
    return StateStoreError(f"could not {what}: {error}")


# ``translate(code, error)`` returns the library error an adapter wants for an expected failure (e.g.
# ConditionalCheckFailedException -> TransactionNumberTakenError), or None for :func:`translate_error`.
Translate = Callable[[str, ClientError], StateStoreError | None]


@dataclass
class AwsCaller:
    """Calls a boto3 client method and translates every botocore error (see :func:`translate_error`).

    botocore retries throttling and transport failures inside the call; this only retries a DynamoDB
    transaction cancelled by a concurrent one (at most ``max_attempts`` calls). ``max_attempts`` also
    bounds the adapters' rounds over unprocessed batch items, with :meth:`backoff` between them.
    """

    max_attempts: int = 4
    base_delay: float = 0.05
    max_delay: float = 2.0
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def __call__(
        self, what: str, method: Callable[..., T], /, translate: Translate | None = None, **kwargs: Any
    ) -> T:
        """``method(**kwargs)``; ``what`` names the operation for error messages ("read the log of t1")."""
        attempt = 0
        while True:
            try:
                return method(**kwargs)
            except ClientError as e:
                if translate is not None:
                    translated = translate(error_code(e), e)
                    if translated is not None:
                        raise translated from e
                if not _is_transaction_conflict(e) or attempt + 1 >= self.max_attempts:
                    raise translate_error(what, e) from e
            except BotoCoreError as e:
                raise translate_error(what, e) from e
            self.backoff(attempt)
            attempt += 1

    def backoff(self, attempt: int) -> None:
        """Sleep before retry ``attempt + 1`` (full jitter,
        :func:`statestore.model.backoff.full_jitter_delay`)."""
        self.sleep(full_jitter_delay(attempt, self.base_delay, self.max_delay, self.rng))


def pages(
    call: AwsCaller,
    what: str,
    method: Callable[..., dict[str, Any]],
    request: dict[str, Any],
    limits: Sequence[int] = (),
) -> Iterator[dict[str, Any]]:
    """Each response of a paged Query or Scan (``method``, e.g. ``dynamodb.query``) of ``request``, the next
    page asked for from the last one's ``LastEvaluatedKey`` until there is none. ``limits``: each page's
    ``Limit`` in turn, the last one repeated (none given: DynamoDB's 1 MB pages, or the request's own)."""
    request = dict(request)
    page = 0
    while True:
        if limits:
            request["Limit"] = limits[min(page, len(limits) - 1)]
        response = call(what, method, **request)
        yield response
        last_key = response.get("LastEvaluatedKey")
        if not last_key:
            return
        request["ExclusiveStartKey"] = last_key
        page += 1


_BATCH_WRITE_LIMIT = 25  # DynamoDB's BatchWriteItem limit
BATCH_GET_LIMIT = 100  # DynamoDB's BatchGetItem limit
TRANSACT_WRITE_LIMIT = 100  # DynamoDB's TransactWriteItems limit (actions in one transaction)


def batch_get_items(
    call: AwsCaller, dynamodb: Any, table_name: str, keys: list[dict[str, Any]], what: str
) -> list[dict[str, Any]]:
    """The items at ``keys`` (at most ``BATCH_GET_LIMIT``) that exist, read strongly consistent, asking
    again (at most ``call.max_attempts`` rounds) for whatever DynamoDB returns unprocessed."""
    items: list[dict[str, Any]] = []
    for attempt in range(call.max_attempts):
        response = call(
            what, dynamodb.batch_get_item, RequestItems={table_name: {"Keys": keys, "ConsistentRead": True}}
        )
        items.extend((response.get("Responses") or {}).get(table_name, []))
        keys = ((response.get("UnprocessedKeys") or {}).get(table_name) or {}).get("Keys", [])
        if not keys:
            return items
        if attempt + 1 < call.max_attempts:
            call.backoff(attempt)
    raise ThrottledError(
        f"could not {what}: DynamoDB kept returning {len(keys)} key(s) unprocessed after {call.max_attempts} "
        "rounds; try again later"
    )


def batch_delete_items(
    call: AwsCaller, dynamodb: Any, table_name: str, keys: list[dict[str, Any]], what: str
) -> None:
    """Delete items by key in batches of 25, in order, retrying (at most ``call.max_attempts`` rounds)
    whatever DynamoDB returns unprocessed."""
    for start in range(0, len(keys), _BATCH_WRITE_LIMIT):
        requests: list[dict[str, Any]] = [
            {"DeleteRequest": {"Key": key}} for key in keys[start : start + _BATCH_WRITE_LIMIT]
        ]
        for attempt in range(call.max_attempts):
            response = call(what, dynamodb.batch_write_item, RequestItems={table_name: requests})
            requests = response.get("UnprocessedItems", {}).get(table_name, [])
            if not requests:
                break
            if attempt + 1 < call.max_attempts:
                call.backoff(attempt)
        else:
            raise ThrottledError(
                f"could not {what}: DynamoDB kept returning {len(requests)} item(s) unprocessed after "
                f"{call.max_attempts} rounds; try again later"
            )
