"""Commit requests: what a job sends to the committer through the FIFO queue, and how it learns the outcome.

A request is versioned JSON::

    {"version": 1, "request_id": "...", "table_id": "...", "type": "AddFiles", "transaction": {...}}

or, when that would not fit in a message (``instance.MAX_INLINE_REQUEST_BYTES``), ``"body_key"`` instead of
``"transaction"``: the key of an object under ``layout.request_body_prefix(table_id)`` holding the
transaction's JSON. It is sent with ``MessageGroupId = table_id`` (one ordered stream per table) and
``MessageDeduplicationId = request_id`` (the queue drops a resend within five minutes; the committer
recognises one after that).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statestore import instance
from statestore.codec.transaction_json import transaction_from_json, transaction_to_json
from statestore.errors import BlobNotFoundError, CodecError, StoreUnavailableError
from statestore.model import layout
from statestore.model.clock import now_millis
from statestore.model.names import key_problem, name_problem
from statestore.state.cycle_collector import collector_paused, collector_paused_for_body
from statestore.store.ports import (
    BlobStore,
    CommitQueue,
    CommitStatus,
    CommitStatusStore,
    QueueMessage,
    RequestKey,
)
from statestore.transactions import TRANSACTION_TYPES, Transaction, TransactionBatch

REQUEST_FORMAT_VERSION = 1

# SQS's rule for deduplication ids, which request ids become: 1-128 of these characters.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$")
_FIELDS = frozenset({"version", "request_id", "table_id", "type", "transaction", "body_key"})


def new_request_id() -> str:
    return str(uuid.uuid4())


def check_request_id(request_id: object) -> str:
    """Return ``request_id`` if it can be a request (and deduplication) id, else raise CodecError."""
    if not isinstance(request_id, str) or not _REQUEST_ID.match(request_id):
        raise CodecError(
            f"request id {request_id!r} must be 1-128 characters of letters, digits and ASCII punctuation"
        )
    return request_id


@dataclass(frozen=True)
class CommitRequest:
    """A transaction a job asks the committer to append to ``table_id``'s log."""

    request_id: str
    table_id: str
    transaction: Transaction

    def __post_init__(self) -> None:
        check_request_id(self.request_id)
        if not self.table_id:
            raise CodecError("a commit request needs a table id")
        if isinstance(self.transaction, TransactionBatch):
            raise CodecError("a commit request holds one transaction, not a batch; send one request per part")

    @classmethod
    def new(cls, table_id: str, transaction: Transaction) -> CommitRequest:
        return cls(new_request_id(), table_id, transaction)


@dataclass(frozen=True)
class RequestEnvelope:
    """A commit request as read from a message, before a body stored aside is fetched.

    Reading the envelope is cheap, so the committer can skip a request it already processed without
    fetching its body.
    """

    request_id: str
    table_id: str
    transaction_type: str
    transaction_json: dict[str, Any] | None = None
    body_key: str | None = None

    @property
    def key(self) -> RequestKey:
        """The request's (table id, request id): request ids are scoped to their table."""
        return (self.table_id, self.request_id)

    def read_body(self, blobs: BlobStore) -> bytes:
        """The bytes of the body stored aside at ``body_key``.

        Raises CodecError if it is not in the bucket; StateStoreError if the blob store fails.
        """
        assert self.body_key is not None, "an inline request has no body stored aside"
        try:
            return blobs.get(self.body_key)
        except BlobNotFoundError as e:
            raise CodecError(
                f"commit request {self.request_id!r}: its body {self.body_key!r} is not in the bucket"
            ) from e

    def transaction(self, blobs: BlobStore, body: bytes | None = None) -> Transaction:
        """The request's transaction, fetching its body from ``blobs`` if it was stored aside (unless the
        caller already read it with :meth:`read_body` and passes it as ``body``).

        Raises CodecError if the body is malformed, missing or of another type than the envelope says;
        StateStoreError (e.g. StoreUnavailableError) if the blob store fails.
        """
        if self.transaction_json is not None:
            transaction = transaction_from_json(self.transaction_json)
        else:
            raw = body if body is not None else self.read_body(blobs)
            with collector_paused_for_body(len(raw)):
                try:
                    data = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError) as e:
                    raise CodecError(
                        f"commit request {self.request_id!r}: body {self.body_key!r} is not JSON: {e}"
                    ) from e
                transaction = transaction_from_json(data)
        if transaction.TYPE != self.transaction_type:
            raise CodecError(
                f"commit request {self.request_id!r} says it holds a {self.transaction_type!r} transaction "
                f"but its body is a {transaction.TYPE!r}"
            )
        return transaction

    def to_request(self, blobs: BlobStore) -> CommitRequest:
        return CommitRequest(self.request_id, self.table_id, self.transaction(blobs))


def body_key(table_id: str, request_id: str, sent_time: int) -> str:
    """Where a request body too big for a message goes. The time (epoch ms) leads, so cleanup can age it."""
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", request_id)
    return f"{layout.request_body_prefix(table_id)}{sent_time:013d}-{safe_id}.json"


def body_key_time(key: str) -> int | None:
    """The time a :func:`body_key` was made, or None if ``key`` is not one."""
    name = key.rsplit("/", 1)[-1]
    stamp = name.split("-", 1)[0]
    return int(stamp) if len(stamp) == 13 and stamp.isdigit() else None


def encode_request(
    request: CommitRequest, body_key: str | None = None, *, transaction_text: str | None = None
) -> str:
    """The message body of ``request``: the transaction inline, or a reference to ``body_key``.

    ``transaction_text`` is the transaction's JSON if the caller already wrote it (:func:`_transaction_text`).
    """
    message: dict[str, Any] = {
        "version": REQUEST_FORMAT_VERSION,
        "request_id": request.request_id,
        "table_id": request.table_id,
        "type": request.transaction.TYPE,
    }
    if body_key is not None:
        message["body_key"] = body_key
        return json.dumps(message, separators=(",", ":"))
    if transaction_text is None:
        transaction_text = _transaction_text(request.transaction)
    # The same text as dumping the message with the transaction as its last field.
    return f'{json.dumps(message, separators=(",", ":"))[:-1]},"transaction":{transaction_text}}}'


def _transaction_text(transaction: Transaction) -> str:
    with collector_paused():  # a bulk AddFiles is written as a list per reference, all short-lived
        return json.dumps(transaction_to_json(transaction), separators=(",", ":"))


def parse_request(body: str) -> RequestEnvelope:
    """Read a commit request message. Raises CodecError saying precisely what is wrong with it."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise CodecError(f"commit request is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise CodecError(f"a commit request must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise CodecError(f"commit request has unknown field(s) {', '.join(map(repr, unknown))}")
    for name in ("version", "request_id", "table_id", "type"):
        if name not in data:
            raise CodecError(f"commit request has no {name!r} field")
    version = data["version"]
    if type(version) is not int or version != REQUEST_FORMAT_VERSION:
        raise CodecError(
            f"unknown commit request version {version!r}; "
            f"this committer reads version {REQUEST_FORMAT_VERSION}"
        )
    request_id = check_request_id(data["request_id"])
    table_id = data["table_id"]
    if not isinstance(table_id, str) or not table_id:
        raise CodecError(
            f"commit request {request_id!r}: table_id must be a non-empty string, got {table_id!r}"
        )
    transaction_type = data["type"]
    if transaction_type not in TRANSACTION_TYPES or transaction_type == TransactionBatch.TYPE:
        known = ", ".join(sorted(t for t in TRANSACTION_TYPES if t != TransactionBatch.TYPE))
        raise CodecError(
            f"commit request {request_id!r}: unknown transaction type {transaction_type!r} (one of: {known})"
        )
    has_inline, has_key = "transaction" in data, "body_key" in data
    if has_inline == has_key:
        raise CodecError(f"commit request {request_id!r} needs exactly one of 'transaction' and 'body_key'")
    if has_key:
        key = data["body_key"]
        prefix = layout.request_body_prefix(table_id)
        if not isinstance(key, str) or (problem := name_problem(key) or key_problem(key, prefix)):
            raise CodecError(
                f"commit request {request_id!r}: body_key {key!r} must be an object under {prefix!r}"
                + (f" ({problem})" if isinstance(key, str) else "")
            )
        return RequestEnvelope(request_id, table_id, transaction_type, body_key=key)
    transaction = data["transaction"]
    if not isinstance(transaction, dict):
        raise CodecError(f"commit request {request_id!r}: 'transaction' must be a JSON object")
    return RequestEnvelope(request_id, table_id, transaction_type, transaction_json=transaction)


class CommitSender:
    """Sends commit requests to the queue (big bodies to the bucket first) and waits for their outcomes."""

    def __init__(
        self,
        queue: CommitQueue,
        statuses: CommitStatusStore,
        blobs: BlobStore,
        *,
        max_inline_bytes: int = instance.MAX_INLINE_REQUEST_BYTES,
        clock: Callable[[], int] = now_millis,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.queue = queue
        self.statuses = statuses
        self.blobs = blobs
        self.max_inline_bytes = max_inline_bytes
        self._clock = clock
        self._sleep = sleep

    def send(self, table_id: str, transaction: Transaction, request_id: str | None = None) -> str:
        """Ask for ``transaction`` to be committed to ``table_id``; returns the request id to wait on.

        Sending the same request id again is safe: it is committed at most once.
        """
        request = CommitRequest(request_id or new_request_id(), table_id, transaction)
        self.send_all([request])
        return request.request_id

    def send_all(self, requests: Sequence[CommitRequest]) -> list[str]:
        """Send several requests (in order within each table); returns their request ids."""
        messages = []
        for request in requests:
            # The transaction is written to JSON once, whether it goes inline or to the bucket: a bulk
            # AddFiles takes about as long to write as to validate.
            transaction = _transaction_text(request.transaction)
            body = encode_request(request, transaction_text=transaction)
            if len(body.encode("utf-8")) > self.max_inline_bytes:
                key = body_key(request.table_id, request.request_id, self._clock())
                self.blobs.put(key, transaction.encode("utf-8"), tags=layout.REQUEST_BODY_TAGS)
                body = encode_request(request, key)
            messages.append(QueueMessage(body, request.table_id, request.request_id))
        self.queue.send(messages)
        return [r.request_id for r in requests]

    def status(self, table_id: str, request_id: str) -> CommitStatus | None:
        """The status of request ``request_id`` of table ``table_id``, or None (request ids are scoped to
        their table: another table's request of the same id is another request)."""
        return self.statuses.get(table_id, request_id)

    def wait(
        self, table_id: str, request_id: str, timeout: float, poll_interval: float = 0.2
    ) -> CommitStatus | None:
        """The request's final status (committed or rejected), or None if there is none after ``timeout``
        seconds. A dead-lettered status is returned at once too: nothing more will happen until someone
        redrives the message.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.statuses.get(table_id, request_id)
            except StoreUnavailableError:
                status = None  # a transient read failure only delays the answer
            if status is not None:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._sleep(min(poll_interval, remaining))
