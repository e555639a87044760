"""The transaction log on DynamoDB: one item per transaction, bodies too large for an item in S3."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from botocore.exceptions import ClientError

from statestore import instance
from statestore.adapters.aws import log_leaf_index
from statestore.adapters.aws.clients import (
    BATCH_GET_LIMIT,
    TRANSACT_WRITE_LIMIT,
    AwsCaller,
    Translate,
    batch_delete_items,
    batch_get_items,
    cancellation_reasons,
    pages,
)
from statestore.adapters.aws.commit_status import DynamoDBCommitStatusStore
from statestore.adapters.aws.log_items import (
    ADDS_ONLY,
    ADDS_TO_LEAVES,
    ATTACHMENTS,
    BODY,
    BODY_KEY,
    COMPRESSED,
    MOST_ADDED,
    NUMBER,
    TABLE_ID,
    TYPE,
    UPDATE_TIME,
    WRITER,
    body_value,
    entry_of,
    most_added_value,
    object_keys,
)
from statestore.errors import (
    PreviousEntryGoneError,
    RequestsAlreadyDecidedError,
    StateStoreError,
    TransactionNumberTakenError,
    TransactionTooLargeError,
)
from statestore.model import layout
from statestore.store.ports import BlobStore, CommitStatus, LogEntry, LogTail, TransactionLogStore

# The most partition ids a read_about filters on in DynamoDB (its expression is capped at 4 KB); asked about
# more, it reads every entry and drops what it does not need.
_FILTERED_PARTITIONS_AT_MOST = 40
# The most partition ids a read_about reads the leaf index for (a Query each), and the most entries it then
# reads by key; beyond either, the range is read (one filtered Query).
_INDEXED_PARTITIONS_AT_MOST = 8
_READ_BY_NUMBER_AT_MOST = 2 * BATCH_GET_LIMIT

# The attributes a projection of the log's items may name, by placeholder.
_PROJECTED = {
    "#k": BODY_KEY,
    "#a": ATTACHMENTS,
    "#l": ADDS_TO_LEAVES,
    "#i": log_leaf_index.INDEXED,
}

S3_SINGLE_PUT_LIMIT = 5 * 1024**3  # S3 refuses a single PUT above 5 GB
_DELETE_CHUNK = 100  # log items deleted per step (items, then their bodies)
_DELETE_PASSES = 10  # deleting a table's log: passes until one finds nothing (see delete_table)


class _ChainBrokenError(StateStoreError):
    """The leaf index's chain does not end at the entry before the one appended (nothing was written)."""


class DynamoDBTransactionLog(TransactionLogStore):
    """Items keyed ``(table_id, transaction_number)``; appends are conditional puts.

    A body above ``max_inline_body_bytes`` is uploaded to the blob store first and the item holds its key;
    if the put then loses the race the upload is deleted again. An entry with its requests' outcomes is
    one TransactWriteItems: the entry's put and each status's (in ``statuses``' table), all or nothing;
    so is an entry that asks for the leaf index (``LogEntry.index_leaves``), with its hints
    (``log_leaf_index``), which let :meth:`read_about` read only the entries it needs.
    Deleting an entry removes the item before the body, so a crash can leave an orphan body under the
    table's prefix but never an entry without one.
    """

    def __init__(
        self,
        dynamodb_client: Any,
        table_name: str,
        blobs: BlobStore,
        *,
        caller: AwsCaller | None = None,
        max_inline_body_bytes: int = instance.MAX_INLINE_BODY_BYTES,
        max_blob_bytes: int = S3_SINGLE_PUT_LIMIT,
        page_size: int | None = None,
        statuses: DynamoDBCommitStatusStore | None = None,
    ) -> None:
        self.dynamodb = dynamodb_client
        self.table_name = table_name
        self.blobs = blobs
        self.call = caller or AwsCaller()
        self.max_inline_body_bytes = max_inline_body_bytes
        self.max_blob_bytes = max_blob_bytes
        self.page_size = page_size
        self._statuses = statuses

    @property
    def request_statuses(self) -> DynamoDBCommitStatusStore | None:
        return self._statuses

    # --- writing --------------------------------------------------------------------------------

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if outcomes and self._statuses is None:
            raise StateStoreError(
                f"the log {self.table_name!r} records no commit statuses: give it the status table"
            )
        number = entry.transaction_number
        item: dict[str, Any] = {
            TABLE_ID: {"S": table_id},
            NUMBER: {"N": str(number)},
            UPDATE_TIME: {"N": str(entry.update_time)},
            TYPE: {"S": entry.transaction_type},
            COMPRESSED: {"BOOL": entry.compressed},
        }
        if entry.writer_token:
            item[WRITER] = {"S": entry.writer_token}
        if entry.attachments:
            item[ATTACHMENTS] = {"L": [{"S": key} for key, _ in entry.attachments]}
        if entry.adds_to_leaves is not None:
            item[ADDS_ONLY] = {"BOOL": True}
            if entry.adds_to_leaves:
                item[ADDS_TO_LEAVES] = {"SS": sorted(entry.adds_to_leaves)}
        if entry.most_added is not None:
            item[MOST_ADDED] = most_added_value(entry.most_added)
        body_key: str | None = None
        size = len(entry.body)
        if size > self.max_blob_bytes:
            raise TransactionTooLargeError(
                f"{entry.transaction_type} transaction for table {table_id!r} is {size:,} bytes encoded; the "
                f"largest body the log can hold is {self.max_blob_bytes:,} bytes. Split it into several "
                "smaller transactions."
            )
        if size > self.max_inline_body_bytes:
            body_key = layout.log_body_key(table_id, number)
            self.blobs.put(body_key, entry.body)
            item[BODY_KEY] = {"S": body_key}
        else:
            item[BODY] = body_value(entry.body, entry.compressed)

        def taken(code: str, error: ClientError) -> StateStoreError | None:
            if code == "ConditionalCheckFailedException":
                return TransactionNumberTakenError(table_id, number)
            if code != "TransactionCanceledException":
                return None
            reasons = cancellation_reasons(error)
            if reasons[:1] == ["ConditionalCheckFailed"]:
                return TransactionNumberTakenError(table_id, number)
            if follows and reasons[1:2] == ["ConditionalCheckFailed"]:
                return PreviousEntryGoneError(table_id, number)
            decided = [
                status.request_id
                for status, reason in zip(outcomes, reasons[statuses_at:], strict=False)
                if reason == "ConditionalCheckFailed"
            ]
            if decided:
                return RequestsAlreadyDecidedError(table_id, decided)
            if indexed and reasons[chain_at : chain_at + 1] == ["ConditionalCheckFailed"]:
                return _ChainBrokenError(f"the leaf index of table {table_id!r} does not end at {number - 1}")
            return None

        what = f"append transaction {number} to the log of table {table_id!r}"
        put = {
            "TableName": self.table_name,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#n)",
            "ExpressionAttributeNames": {"#n": NUMBER},
        }
        # The entry's put first, then (past the first entry) the condition that the entry before it is in the
        # log, then its statuses (``taken`` reads the reasons in that order), then the leaf index when asked
        # for and the transaction has room (else readers read the range): the chain going on from entry
        # number - 1 if that one is indexed (a condition), else starting here.
        writes: list[dict[str, Any]] = [{"Put": put}]
        follows = number > 1
        if follows:
            writes.append({"ConditionCheck": self._exists(table_id, number - 1)})
        statuses_at = len(writes)
        if outcomes:
            assert self._statuses is not None
            writes.extend(self._statuses.puts_unless_final(outcomes))
            what += f" with {len(outcomes)} commit status(es)"
        chain_at = len(writes)
        indexed = (
            entry.index_leaves
            and number < log_leaf_index.NUMBERS_AT_MOST
            and chain_at + 2 <= TRANSACT_WRITE_LIMIT
        )
        if indexed:
            item[log_leaf_index.INDEXED] = {"BOOL": True}

        def index(goes_on: bool) -> list[dict[str, Any]]:
            room = TRANSACT_WRITE_LIMIT - chain_at
            return log_leaf_index.index_writes(self.table_name, table_id, entry, room, goes_on)

        try:
            if not indexed:
                self._write(what, put, writes, taken, entry.writer_token)
            else:
                try:
                    self._write(what, put, writes + index(number > 1), taken, entry.writer_token)
                except _ChainBrokenError:  # nothing was written: start the chain at this entry
                    token = f"{entry.writer_token[:30]}-chain" if entry.writer_token else ""
                    self._write(what, put, writes + index(False), taken, token)
        except RequestsAlreadyDecidedError:
            if body_key is not None:  # the transaction wrote nothing
                self.blobs.delete([body_key])
            raise
        except TransactionNumberTakenError:
            # botocore retries a put whose response was lost, and the retry fails the condition on our own
            # item: delete the upload only when another writer's item holds the number.
            if body_key is not None and not self._holds(table_id, number, entry.writer_token):
                self.blobs.delete([body_key])
            raise
        # Any other failure may have written the item anyway, so an uploaded body is kept.

    def _exists(self, table_id: str, number: int) -> dict[str, Any]:
        """A TransactWriteItems condition that entry ``number`` is in the log: what an append at the next
        number rests on (a state behind entries cleanup deleted must not fill one of their numbers)."""
        return {
            "TableName": self.table_name,
            "Key": {TABLE_ID: {"S": table_id}, NUMBER: {"N": str(number)}},
            "ConditionExpression": "attribute_exists(#n)",
            "ExpressionAttributeNames": {"#n": NUMBER},
        }

    def _write(
        self, what: str, put: dict[str, Any], writes: list[dict[str, Any]], taken: Translate, token: str
    ) -> None:
        """``put`` alone as a PutItem, or ``writes`` (``put`` first) as one TransactWriteItems."""
        if len(writes) == 1:
            self.call(what, self.dynamodb.put_item, taken, **put)
            return
        # The token makes botocore's retry of a transaction that landed succeed instead of failing its
        # conditions on its own items.
        extra = {"ClientRequestToken": token[:36]} if token else {}
        self.call(what, self.dynamodb.transact_write_items, taken, TransactItems=writes, **extra)

    def _holds(self, table_id: str, number: int, writer_token: str) -> bool:
        """Whether entry ``number`` was written by ``writer_token`` (False for an entry with no token)."""
        if not writer_token:
            return False
        response = self.call(
            f"read the writer of transaction {number} of table {table_id!r}",
            self.dynamodb.get_item,
            TableName=self.table_name,
            Key={TABLE_ID: {"S": table_id}, NUMBER: {"N": str(number)}},
            ProjectionExpression="#w",
            ExpressionAttributeNames={"#w": WRITER},
            ConsistentRead=True,
        )
        return str(response.get("Item", {}).get(WRITER, {}).get("S", "")) == writer_token

    # --- reading --------------------------------------------------------------------------------

    def read(self, table_id: str, from_number: int, to_number: int | None = None) -> Iterator[LogEntry]:
        if to_number is not None and to_number < from_number:
            return
        for item in self._query(table_id, from_number, to_number):
            yield entry_of(self.blobs, table_id, item)

    def read_about(
        self, table_id: str, from_number: int, to_number: int, partition_ids: Collection[str]
    ) -> tuple[list[LogEntry], int]:
        """As :meth:`TransactionLogStore.read_about`: the entries the leaf index names (``log_leaf_index``)
        read by number where it records the whole range, else the range read with the entries skipped left
        in DynamoDB by a FilterExpression (read there, and counted in the response's ScannedCount, but not
        sent).

        Through the index only the entries named and the range's first are read; if one is gone (cleanup
        deleted it), the range is read as without the index, which counts what it holds."""
        wanted = sorted(set(partition_ids))
        if len(wanted) > _FILTERED_PARTITIONS_AT_MOST or to_number < from_number:
            return super().read_about(table_id, from_number, to_number, wanted)
        if len(wanted) <= _INDEXED_PARTITIONS_AT_MOST:
            numbers = log_leaf_index.numbers_about(
                self.call, self.dynamodb, self.table_name, table_id, from_number, to_number, wanted
            )
            if numbers is not None and len(numbers) < _READ_BY_NUMBER_AT_MOST:
                # The range's first entry read too, after the hints: cleanup deletes a prefix of the log,
                # each entry before its hints, so if it is still there no hint of the range was missing.
                entries = self._entries_numbered(table_id, sorted({from_number, *numbers}))
                if entries is not None:
                    about, named = set(wanted), set(numbers)
                    kept = [  # the first only if named, and not one named by a hash two leaves share
                        e
                        for e in entries
                        if e.transaction_number in named
                        and (not e.adds_to_leaves or not e.adds_to_leaves.isdisjoint(about))
                    ]
                    return kept, to_number - from_number + 1
        names = {"#a": ADDS_TO_LEAVES}
        values = {f":p{i}": {"S": pid} for i, pid in enumerate(wanted)}
        tests = ["attribute_not_exists(#a)", *(f"contains(#a, :p{i})" for i in range(len(wanted)))]
        condition = " OR ".join(tests)
        read: list[LogEntry] = []
        held = 0
        for response in self._pages(table_id, from_number, to_number, filter=(condition, names, values)):
            held += int(response.get("ScannedCount", 0))
            read.extend(entry_of(self.blobs, table_id, item) for item in response.get("Items", []))
        return read, held

    def _entries_numbered(self, table_id: str, numbers: list[int]) -> list[LogEntry] | None:
        """The entries numbered ``numbers`` (ascending), read by key; None if cleanup deleted one."""
        items: dict[int, dict[str, Any]] = {}
        for start in range(0, len(numbers), BATCH_GET_LIMIT):
            keys = [
                {TABLE_ID: {"S": table_id}, NUMBER: {"N": str(n)}}
                for n in numbers[start : start + BATCH_GET_LIMIT]
            ]
            for item in batch_get_items(
                self.call, self.dynamodb, self.table_name, keys, f"read the log of table {table_id!r}"
            ):
                items[int(item[NUMBER]["N"])] = item
        if len(items) < len(numbers):
            return None
        return [entry_of(self.blobs, table_id, items[n]) for n in numbers]

    def latest_number(self, table_id: str) -> int:
        items = self._newest(table_id, 1, f"read the latest transaction number of table {table_id!r}", "#n")
        return int(items[0][NUMBER]["N"]) if items else 0

    def read_tail(self, table_id: str, count: int) -> LogTail:
        """One Query, newest first, of at most ``count`` entries (fewer if they pass a response's 1 MB: the
        tail is then shorter). Bodies kept in the bucket are fetched by ``after``, for the entries it
        gives."""
        items = self._newest(table_id, count, f"read the latest entries of table {table_id!r}")[::-1]
        numbers = tuple(int(item[NUMBER]["N"]) for item in items)
        return LogTail(
            numbers,
            lambda after: [
                entry_of(self.blobs, table_id, i) for i, n in zip(items, numbers, strict=True) if n > after
            ],
        )

    def _newest(self, table_id: str, count: int, what: str, projection: str | None = None) -> list[Any]:
        """The items of the table's newest ``count`` entries, newest first: one strongly consistent page."""
        if count <= 0:
            return []
        extra: dict[str, Any] = {} if projection is None else {"ProjectionExpression": projection}
        response = self.call(
            what,
            self.dynamodb.query,
            TableName=self.table_name,
            # Entries are numbered from 1; the leaf index's items sort below them.
            KeyConditionExpression="#t = :t AND #n > :zero",
            ExpressionAttributeNames={"#t": TABLE_ID, "#n": NUMBER},
            ExpressionAttributeValues={":t": {"S": table_id}, ":zero": {"N": "0"}},
            ScanIndexForward=False,
            Limit=count,
            ConsistentRead=True,
            **extra,
        )
        return list(response.get("Items", []))

    def _query(
        self, table_id: str, from_number: int, to_number: int | None, projection: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Items in number order, one strongly consistent page at a time."""
        for response in self._pages(table_id, from_number, to_number, projection):
            yield from response.get("Items", [])

    def _pages(
        self,
        table_id: str,
        from_number: int,
        to_number: int | None,
        projection: str | None = None,
        filter: tuple[str, dict[str, str], dict[str, Any]] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The responses of a strongly consistent Query of the entries in number order, with ``filter``
        (a FilterExpression, its names and values) if given."""
        from_number = max(from_number, 1)  # entries are numbered from 1; the leaf index sorts below
        if to_number is not None and to_number < from_number:
            return
        names = {"#t": TABLE_ID, "#n": NUMBER}
        values: dict[str, Any] = {":t": {"S": table_id}, ":from": {"N": str(from_number)}}
        if to_number is None:
            condition = "#t = :t AND #n >= :from"
        else:
            condition = "#t = :t AND #n BETWEEN :from AND :to"
            values[":to"] = {"N": str(to_number)}
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        if projection is not None:
            kwargs["ProjectionExpression"] = projection
            for placeholder, name in _PROJECTED.items():
                if placeholder in projection:
                    names[placeholder] = name
        if filter is not None:
            kwargs["FilterExpression"], more_names, more_values = filter
            names.update(more_names)
            values.update(more_values)
        if self.page_size is not None:
            kwargs["Limit"] = self.page_size
        yield from pages(self.call, f"read the log of table {table_id!r}", self.dynamodb.query, kwargs)

    # --- deleting -------------------------------------------------------------------------------

    def delete_up_to(self, table_id: str, transaction_number: int, keep_latest: bool = True) -> int:
        if keep_latest:
            transaction_number = min(transaction_number, self.latest_number(table_id) - 1)
        deleted = 0
        batch: list[dict[str, Any]] = []
        for item in self._query(table_id, 0, transaction_number, projection="#n, #k, #a, #l, #i"):
            batch.append(item)
            if len(batch) == _DELETE_CHUNK:
                deleted += self._delete_items(table_id, batch)
                batch = []
        if batch:
            deleted += self._delete_items(table_id, batch)
        return deleted

    def _delete_items(self, table_id: str, items: list[dict[str, Any]]) -> int:
        """Delete the items, then their leaf index hints, then their bodies: a crash in between orphans
        hints (naming entries that are gone: a reader that needs one is told) or bodies, never loses one."""
        keys = [{TABLE_ID: {"S": table_id}, NUMBER: item[NUMBER]} for item in items]
        what = f"delete log entries of table {table_id!r}"
        batch_delete_items(self.call, self.dynamodb, self.table_name, keys, what)
        # Only once the entries are gone: a hint deleted first would hide its entry from the readers the
        # chain tells to trust the index.
        hints = [
            key
            for item in items
            if log_leaf_index.INDEXED in item
            for key in log_leaf_index.hint_keys(
                table_id, int(item[NUMBER]["N"]), item.get(ADDS_TO_LEAVES, {}).get("SS", ())
            )
        ]
        batch_delete_items(
            self.call,
            self.dynamodb,
            self.table_name,
            hints,
            f"delete the leaf index of log entries of table {table_id!r}",
        )
        body_keys = [key for item in items for key in object_keys(item)]
        if body_keys:
            self.blobs.delete(body_keys)
        return len(items)

    def stored_body_keys(self, table_id: str) -> set[str]:
        return {
            key for item in self._query(table_id, 0, None, projection="#k, #a") for key in object_keys(item)
        }

    def delete_table(self, table_id: str) -> None:
        # A writer that appended while a pass was deleting (the entry before its own not deleted yet) left
        # an entry the pass had not listed. So delete until a pass finds none: then the log is empty, and
        # no append can follow an entry that is not there.
        for _ in range(_DELETE_PASSES):
            if not self.delete_up_to(table_id, 2**63 - 1, keep_latest=False):
                break
        else:
            raise StateStoreError(
                f"table {table_id!r}: writers kept appending to its log while it was deleted "
                f"({_DELETE_PASSES} passes); stop them and delete the table again"
            )
        self._delete_below_entries(table_id)
        # Bodies orphaned by a crash between an upload and its put, or between an item and its body delete.
        self.blobs.delete(self.blobs.list(layout.log_body_prefix(table_id)))

    def _delete_below_entries(self, table_id: str) -> None:
        """Delete the table's leaf index: its chain, and any hint a crash left after its entry was deleted."""
        low, high = log_leaf_index.EVERY_INDEX_KEY
        keys = log_leaf_index.sort_keys(self.call, self.dynamodb, self.table_name, table_id, low, high)
        batch_delete_items(
            self.call,
            self.dynamodb,
            self.table_name,
            [log_leaf_index.key(table_id, sort_key) for sort_key in keys],
            f"delete the leaf index of the log of table {table_id!r}",
        )
