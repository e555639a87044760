"""The committer on in-memory ports: group commit, exactly once, rejections, dead letters, retries."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from statestore.codec.transaction_json import decode_entry
from statestore.engine.requests import CommitRequest, encode_request
from statestore.errors import StoreUnavailableError
from statestore.model import layout
from statestore.services.committer import REASON_ATTRIBUTE, MessageOutcome
from statestore.store.memory import InMemoryCommitQueue, InMemoryCommitStatusStore, InMemoryTransactionLog
from statestore.store.ports import CommitOutcome, CommitStatus, LogEntry
from statestore.store.tables import TableInfo
from statestore.transactions import (
    AssignJobIdRequest,
    AssignJobIds,
    ClearFiles,
    InitialisePartitions,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
    request_ids_of,
)
from tests.builders import INT_SCHEMA, data_key, data_keys, ref, tree
from tests.committer.harness import Harness, add_files, message, outcomes, redelivered


@pytest.fixture
def h() -> Harness:
    return Harness()


def entries(h: Harness, table_id: str) -> list[LogEntry]:
    return list(h.log.read(table_id, 1))


def dead_letters(h: Harness) -> list[tuple[str, dict[str, str]]]:
    assert isinstance(h.dead_letters, InMemoryCommitQueue)
    return [(m.body, dict(m.attributes)) for m in h.dead_letters.messages]


def assert_status(
    h: Harness, table_id: str, request_id: str, outcome: CommitOutcome, transaction_number: int | None
) -> CommitStatus:
    status = h.statuses.get(table_id, request_id)
    assert status is not None
    assert (status.outcome, status.transaction_number) == (outcome, transaction_number)
    return status


# --- group commit ---------------------------------------------------------------------------------------


def test_ten_valid_requests_for_one_table_become_one_log_entry(h: Harness) -> None:
    table = h.create_table("t")
    requests = [add_files(table, f"f{i}") for i in range(10)]

    results = h.committer().process([message(r) for r in requests])

    assert outcomes(results) == ["committed"] * 10
    assert {r.transaction_number for r in results} == {2}
    assert h.log_length(table) == 2
    batch = decode_entry(entries(h, table)[-1])
    assert list(request_ids_of(batch)) == [r.request_id for r in requests]
    assert sorted(h.state(table).files_by_name) == sorted(data_key(table, f"f{i}") for i in range(10))
    for r in requests:
        assert_status(h, table, r.request_id, CommitOutcome.COMMITTED, 2)


def test_mixed_valid_and_invalid_requests_commit_the_valid_ones_as_one_entry(h: Harness) -> None:
    table = h.create_table("t")
    good1, bad, good2 = add_files(table, "a"), add_files(table, "a"), add_files(table, "b")

    results = h.committer().process([message(good1), message(bad), message(good2)])

    assert outcomes(results) == ["committed", "rejected", "committed"]
    assert h.log_length(table) == 2
    assert list(request_ids_of(decode_entry(entries(h, table)[-1]))) == [good1.request_id, good2.request_id]
    rejected = h.statuses.get(table, bad.request_id)
    assert rejected is not None and rejected.outcome is CommitOutcome.REJECTED
    assert rejected.reason == f"file already exists: '{data_key(table, 'a')}'"
    assert results[1].reason == f"file already exists: '{data_key(table, 'a')}'"


def test_each_request_is_validated_against_the_state_changed_by_those_before_it(h: Harness) -> None:
    table = h.create_table("t")
    h.store(table).commit(add_files(table, "in1", "in2").transaction)
    inputs = tuple(data_keys(table, "in1", "in2"))
    assign = CommitRequest.new(table, AssignJobIds((AssignJobIdRequest("job", "root", inputs),)))
    compact = CommitRequest.new(
        table,
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("job", "root", inputs, ref(data_key(table, "out"))),)
        ),
    )

    results = h.committer().process([message(assign), message(compact)])

    assert outcomes(results) == ["committed", "committed"]
    assert sorted(f.filename for f in h.state(table).files() if f.references) == [data_key(table, "out")]


def test_a_table_with_only_rejected_requests_writes_nothing(h: Harness) -> None:
    table = h.create_table("t")
    compact = CommitRequest.new(
        table,
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("job", "root", ("nope",), ref(data_key(table, "out"))),)
        ),
    )

    results = h.committer().process([message(compact)])

    assert outcomes(results) == ["rejected"]
    assert "file not found: 'nope'" in (results[0].reason or "")
    assert h.log_length(table) == 1


# --- exactly once ---------------------------------------------------------------------------------------


def test_the_same_request_sent_twice_is_applied_once(h: Harness) -> None:
    table = h.create_table("t")
    request = add_files(table, "a")
    committer = h.committer()

    first = committer.process([message(request)])
    second = committer.process([message(request)])  # a resend after the queue's deduplication window

    assert outcomes(first) == ["committed"]
    assert outcomes(second) == ["duplicate"]
    assert second[0].transaction_number == 2
    assert h.log_length(table) == 2
    assert_status(h, table, request.request_id, CommitOutcome.COMMITTED, 2)


def test_the_same_request_twice_in_one_batch_is_applied_once(h: Harness) -> None:
    table = h.create_table("t")
    request = add_files(table, "a")

    results = h.committer().process([message(request), message(request)])

    assert outcomes(results) == ["committed", "duplicate"]
    assert h.log_length(table) == 2


def test_a_resend_is_recognised_by_a_cold_committer_through_the_status_store(h: Harness) -> None:
    table = h.create_table("t")
    request = add_files(table, "a")
    h.committer().process([message(request)])

    results = h.committer().process([message(request)])

    assert outcomes(results) == ["duplicate"]
    assert h.log_length(table) == 2


class FailingOnce(InMemoryCommitStatusStore):
    """A status store whose next ``record`` fails (the committer's own write of the statuses that are not
    written with a log entry: rejections, dead letters)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next_record = False

    def record(self, statuses: Sequence[CommitStatus]) -> dict[tuple[str, str], CommitStatus]:
        if self.fail_next_record:
            self.fail_next_record = False
            raise StoreUnavailableError("status table throttled")
        return super().record(statuses)


def test_a_committed_requests_status_is_written_with_its_log_entry() -> None:
    h = Harness(statuses=FailingOnce())
    table = h.create_table("t")
    requests = [add_files(table, f"f{i}") for i in range(3)]
    h.statuses.fail_next_record = True  # type: ignore[attr-defined]  # the committer's own write would fail

    results = h.committer().process([message(r) for r in requests])

    assert outcomes(results) == ["committed"] * 3
    for r in requests:
        assert_status(h, table, r.request_id, CommitOutcome.COMMITTED, 2)
    assert h.statuses.fail_next_record  # type: ignore[attr-defined]  # nothing else was recorded


@pytest.mark.parametrize("warm", [True, False], ids=["same-committer", "new-committer"])
def test_a_batch_redelivered_after_the_log_write_is_applied_once(warm: bool) -> None:
    h = Harness()
    table = h.create_table("t")
    requests = [add_files(table, f"f{i}") for i in range(3)]
    messages = [message(r, sent=h.clock.now) for r in requests]
    first_committer = h.committer()
    first = first_committer.process(messages)  # then the process dies before the queue is told
    assert outcomes(first) == ["committed"] * 3

    h.clock.advance(30_000)  # the visibility timeout
    committer = first_committer if warm else h.committer()
    again = committer.process([redelivered(m) for m in messages])

    assert outcomes(again) == ["duplicate"] * 3
    assert [r.transaction_number for r in again] == [2, 2, 2]
    assert h.log_length(table) == 2


def test_a_redelivered_request_is_found_by_its_status_behind_a_newer_snapshot_and_cleanup(h: Harness) -> None:
    table = h.create_table("t")
    request = add_files(table, "a")
    m = message(request, sent=h.clock.now)
    assert outcomes(h.committer().process([m])) == ["committed"]
    other = h.store(table)
    for i in range(40):  # other writers move on, then a snapshot covers it all and cleanup trims the log
        other.commit(add_files(table, f"later{i}").transaction)
    other.create_snapshot()
    h.log.delete_up_to(table, 41)
    h.clock.advance(7 * 24 * 3600_000)  # a week later (a redrive from the dead-letter queue)

    again = h.committer().process([redelivered(m)])

    assert outcomes(again) == ["duplicate"]
    assert again[0].transaction_number == 2
    assert h.log_length(table) == 42
    assert sorted(h.state(table).files_by_name)[0] == data_key(table, "a")


def test_a_redelivered_request_that_never_reached_the_log_is_committed(h: Harness) -> None:
    table = h.create_table("t")
    request = add_files(table, "a")

    results = h.committer().process([redelivered(message(request, sent=h.clock.now))])

    assert outcomes(results) == ["committed"]
    assert h.log_length(table) == 2


class StaleOnce(InMemoryCommitStatusStore):
    """A status store whose next batch read returns nothing: the reader looked before another committer
    wrote (two committers given the same messages, a visibility timeout having run out)."""

    def __init__(self) -> None:
        super().__init__()
        self.stale_next_read = False

    def get_many(self, keys: object) -> dict[tuple[str, str], CommitStatus]:
        if self.stale_next_read:
            self.stale_next_read = False
            return {}
        return super().get_many(keys)  # type: ignore[arg-type]


def test_a_committer_that_lost_the_race_recognises_requests_another_one_committed() -> None:
    h = Harness(statuses=StaleOnce())
    table = h.create_table("t")
    requests = [add_files(table, "a"), add_files(table, "b"), add_files(table, "c")]
    slow, fast = h.committer(), h.committer()
    slow.process([message(add_files(table, "warm-up"))])  # slow now has a warm (soon stale) state
    assert outcomes(fast.process([message(r) for r in requests[:2]])) == ["committed"] * 2
    h.statuses.stale_next_read = True  # type: ignore[attr-defined]

    results = slow.process([message(r) for r in requests])

    assert outcomes(results) == ["duplicate", "duplicate", "committed"]
    assert [r.transaction_number for r in results] == [3, 3, 4]
    assert slow.stats.log_append_conflicts == 1
    assert h.log_length(table) == 4
    assert sorted(h.state(table).files_by_name) == data_keys(table, "a", "b", "c", "warm-up")


def test_a_group_whose_requests_another_committer_wrote_meanwhile_writes_only_the_others() -> None:
    # The log refuses an entry holding a request with a final status, even one the state cannot tell
    # (a ClearFiles is valid again after the other committer's).
    h = Harness(statuses=StaleOnce())
    table = h.create_table("t")
    clear = CommitRequest(f"clear-{table}", table, ClearFiles())
    add = add_files(table, "after")
    slow, fast = h.committer(), h.committer()
    slow.process([message(add_files(table, "warm-up"))])
    assert outcomes(fast.process([message(clear)])) == ["committed"]
    h.statuses.stale_next_read = True  # type: ignore[attr-defined]

    results = slow.process([message(clear), message(add)])

    assert outcomes(results) == ["duplicate", "committed"]
    assert results[0].transaction_number == 3
    assert h.log_length(table) == 4
    assert sorted(h.state(table).files_by_name) == [data_key(table, "after")]


def test_a_stale_warm_state_catches_up_and_validates_again(h: Harness) -> None:
    table = h.create_table("t")
    committer = h.committer()
    committer.process([message(add_files(table, "x"))])
    h.store(table).commit(add_files(table, "a").transaction)  # another writer, unseen by the committer

    results = committer.process([message(add_files(table, "a")), message(add_files(table, "b"))])

    assert outcomes(results) == ["rejected", "committed"]
    assert results[1].transaction_number == 4
    assert committer.stats.log_append_conflicts == 1


# --- bad input ------------------------------------------------------------------------------------------


def test_malformed_messages_are_dead_lettered_with_their_reason_and_others_commit(h: Harness) -> None:
    t1, t2 = h.create_table("t1"), h.create_table("t2")
    good1, good2 = add_files(t1, "a"), add_files(t2, "b")
    unknown_type = json.loads(encode_request(add_files(t1, "c")))
    unknown_type["type"] = "Frobnicate"
    messages = [
        message("{not json", group_id=t1),
        message(good1),
        message(json.dumps(unknown_type), group_id=t1),
        message(json.dumps({"version": 7, "request_id": "r", "table_id": t2, "type": "X"}), group_id=t2),
        message(good2),
        message(encode_request(add_files("no-such-table", "d")), group_id="no-such-table"),
    ]

    results = h.committer().process(messages)

    assert outcomes(results) == [
        "dead_lettered",
        "committed",
        "dead_lettered",
        "dead_lettered",
        "committed",
        "dead_lettered",
    ]
    letters = dead_letters(h)
    assert [body for body, _ in letters] == [messages[i].body for i in (0, 2, 3, 5)]
    reasons = [attributes[REASON_ATTRIBUTE] for _, attributes in letters]
    assert reasons[0].startswith("malformed commit request: commit request is not valid JSON")
    assert "unknown transaction type 'Frobnicate'" in reasons[1]
    assert "unknown commit request version 7" in reasons[2]
    assert "table not found: 'no-such-table'" in reasons[3]
    assert h.state(t1).files_by_name.keys() == {data_key(t1, "a")}
    assert h.state(t2).files_by_name.keys() == {data_key(t2, "b")}


def test_a_request_sent_in_the_wrong_message_group_is_dead_lettered(h: Harness) -> None:
    t1, t2 = h.create_table("t1"), h.create_table("t2")

    results = h.committer().process([message(add_files(t1, "a"), group_id=t2)])

    assert outcomes(results) == ["dead_lettered"]
    assert "was sent in message group" in (results[0].reason or "")
    assert h.log_length(t1) == 1 and h.log_length(t2) == 1


def test_an_invalid_compaction_is_rejected_not_dead_lettered_and_changes_nothing(h: Harness) -> None:
    table = h.create_table("t")
    h.store(table).commit(add_files(table, "in1").transaction)
    before = h.state(table)
    compact = CommitRequest.new(
        table,
        ReplaceFileReferences(
            (ReplaceFileReferencesJob("job", "root", (data_key(table, "in1"),), ref(data_key(table, "out"))),)
        ),
    )

    results = h.committer().process([message(compact)])

    assert outcomes(results) == ["rejected"]
    assert "is not assigned to job 'job'" in (results[0].reason or "")
    status = assert_status(h, table, compact.request_id, CommitOutcome.REJECTED, None)
    assert status.reason == results[0].reason
    assert dead_letters(h) == []
    assert h.state(table) == before


def test_a_dead_lettered_request_is_processed_again_when_redriven(h: Harness) -> None:
    table = h.create_table("t")
    request = add_files(table, "a", request_id="req-1")
    h.tables.delete(table)  # not there yet, as far as the committer can tell
    committer = h.committer()
    assert outcomes(committer.process([message(request)])) == ["dead_lettered"]
    status = h.statuses.get(table, "req-1")
    assert status is not None and status.outcome is CommitOutcome.DEAD_LETTERED

    h.tables.create(h_info := _info_for(table))
    assert h_info.table_id == table
    redriven = committer.process([message(request)])

    assert outcomes(redriven) == ["committed"]
    assert h.statuses.get(table, "req-1").outcome is CommitOutcome.COMMITTED  # type: ignore[union-attr]


def test_a_table_deleted_under_a_warm_committer_has_no_commit_acknowledged_into_it(h: Harness) -> None:
    table = h.create_table("t")
    committer = h.committer()
    assert outcomes(committer.process([message(add_files(table, "a"))])) == ["committed"]
    # Deleted as StateStoreClient.delete_table does it, while the committer keeps the table warm and its
    # record is still fresh (read less than table_info_ttl_ms ago).
    h.log.delete_table(table)
    h.snapshots.delete_table(table)
    h.tables.delete(table)
    late = add_files(table, "b", request_id="late")

    [retried] = committer.process([message(late)])  # the log refused entry 3: 2 is gone, and all after it
    assert retried.outcome is MessageOutcome.RETRY
    assert "no longer holds transaction 2" in (retried.reason or "")  # not "other writers kept taking"
    assert entries(h, table) == []  # nothing landed in the deleted table's log
    assert h.statuses.get(table, "late") is None

    # The committer forgot the table: its next delivery reads the record again, now, and finds it gone.
    assert outcomes(committer.process([message(late)])) == ["dead_lettered"]
    assert entries(h, table) == []


def test_a_table_whose_log_and_snapshots_hold_nothing_gets_no_commit_and_no_rejection(h: Harness) -> None:
    # A table being deleted (its log and snapshots gone, its record not yet) or created (its record written,
    # its first transaction not yet): a cold committer loads an empty state. Its first entry is the table's
    # creation, never a request's, and no request is judged against a table that is not there.
    table = h.create_table("t")
    h.log.delete_table(table)
    h.snapshots.delete_table(table)
    init = CommitRequest("init", table, InitialisePartitions(tuple(tree(INT_SCHEMA, ()))))
    add = add_files(table, "a", request_id="add")
    committer = h.committer()

    results = committer.process([message(init), message(add)])

    assert outcomes(results) == ["retry", "retry"]
    assert all("holds no transaction" in (r.reason or "") for r in results)
    assert entries(h, table) == []  # not committed as entry 1 (before: InitialisePartitions was)
    assert h.statuses.get(table, "init") is None
    assert h.statuses.get(table, "add") is None  # not rejected (before: "partition not found")

    h.tables.delete(table)  # the deletion finishes: the next delivery finds no table
    assert outcomes(committer.process([message(init), message(add)])) == ["dead_lettered", "dead_lettered"]
    assert entries(h, table) == []


def test_a_request_for_a_table_whose_delete_began_is_dead_lettered_saying_so(h: Harness) -> None:
    table = h.create_table("t")
    h.tables.mark_deleting(table)  # the first thing StateStoreClient.delete_table writes
    committer = h.committer()

    [result] = committer.process([message(add_files(table, "a", request_id="late"))])

    assert result.outcome is MessageOutcome.DEAD_LETTERED  # before: committed, then deleted with the table
    assert "'t' " in (result.reason or "") and "is being deleted" in (result.reason or "")
    assert "create the table" not in (result.reason or "")
    assert [e.transaction_number for e in entries(h, table)] == [1]


def test_a_request_judged_against_what_a_table_being_deleted_left_is_not_rejected(h: Harness) -> None:
    table = h.create_table("t")
    committer = h.committer()
    assert outcomes(committer.process([message(add_files(table, "a"))])) == ["committed"]
    # The delete has begun and gone as far as the log, while the committer keeps the table warm and its
    # record fresh: its state still holds file a, and an empty log reads as nothing after it.
    h.tables.mark_deleting(table)
    h.log.delete_table(table)
    again = message(add_files(table, "a", request_id="again"))  # invalid against that state only

    [first] = committer.process([again])

    assert first.outcome is MessageOutcome.RETRY  # before: rejected for good, "file already exists"
    assert "is being deleted" in (first.reason or "")
    assert h.statuses.get(table, "again") is None
    [second] = committer.process([again])  # the committer forgot the table: its record says so
    assert second.outcome is MessageOutcome.DEAD_LETTERED and "is being deleted" in (second.reason or "")


def test_a_request_for_a_table_still_being_created_is_committed_once_its_first_transaction_is(
    h: Harness,
) -> None:
    info = TableInfo.new("t", INT_SCHEMA)
    h.tables.create(info)  # as StateStoreClient.create_table does, before it commits transaction 1
    early = add_files(info.table_id, "a", request_id="early")
    committer = h.committer()
    sent = message(early)
    assert outcomes(committer.process([sent])) == ["retry"]
    assert h.log_length(info.table_id) == 0

    h.store(info.table_id).commit(InitialisePartitions(tuple(tree(INT_SCHEMA, ()))))
    [result] = committer.process([redelivered(sent)])

    assert (result.outcome, result.transaction_number) == (MessageOutcome.COMMITTED, 2)
    assert_status(h, info.table_id, "early", CommitOutcome.COMMITTED, 2)


def _info_for(table_id: str) -> TableInfo:
    return TableInfo(table_id, "t", INT_SCHEMA)


def test_a_big_request_body_is_read_from_the_bucket(h: Harness) -> None:
    from statestore.engine.requests import CommitSender

    table = h.create_table("t")
    queue = InMemoryCommitQueue()
    sender = CommitSender(queue, h.statuses, h.blobs, max_inline_bytes=100, clock=h.clock)
    request_id = sender.send(table, add_files(table, *(f"file-{i}" for i in range(50))).transaction)
    [sent] = queue.take()
    body_key = json.loads(sent.body)["body_key"]
    # Tagged so the bucket's lifecycle rule expires it even if no cleanup ever reaches it.
    assert h.blobs.tags[body_key] == layout.REQUEST_BODY_TAGS  # type: ignore[attr-defined]

    results = h.committer().process([message(sent.body, group_id=sent.group_id)])

    assert outcomes(results) == ["committed"]
    assert len(h.state(table).files_by_name) == 50
    assert sender.wait(table, request_id, timeout=0) == h.statuses.get(table, request_id)


@pytest.mark.parametrize(
    "key",
    [
        "tables/other/x",
        "tables/{table}/requests/../../other/requests/x.json",
        "tables/{table}/requests//x.json",
    ],
    ids=["another table's", "parent segments", "an empty segment"],
)
def test_a_body_key_outside_the_tables_request_prefix_is_refused(h: Harness, key: str) -> None:
    table = h.create_table("t")
    fields = {"version": 1, "request_id": "r1", "table_id": table, "type": "AddFiles"}
    body = json.dumps({**fields, "body_key": key.format(table=table)})

    results = h.committer().process([message(body, group_id=table)])

    assert outcomes(results) == ["dead_lettered"]
    assert "must be an object under" in (results[0].reason or "")


# --- failures are retried, per table --------------------------------------------------------------------


class FlakyLog(InMemoryTransactionLog):
    """A log whose appends for some tables fail as if DynamoDB throttled them."""

    def __init__(self) -> None:
        super().__init__(None, InMemoryCommitStatusStore())
        self.failing: set[str] = set()

    def append(self, table_id: str, entry: LogEntry, outcomes: Sequence[CommitStatus] = ()) -> None:
        if table_id in self.failing:
            raise StoreUnavailableError(f"throttled writing to {table_id}")
        super().append(table_id, entry, outcomes)


def test_a_throttled_table_retries_its_own_messages_and_others_commit() -> None:
    log = FlakyLog()
    h = Harness(log=log)
    t1, t2 = h.create_table("t1"), h.create_table("t2")
    log.failing.add(t1)
    messages = [message(add_files(t1, "a")), message(add_files(t2, "b")), message("junk", group_id=t1)]

    results = h.committer().process(messages)

    assert outcomes(results) == ["retry", "committed", "retry"]
    assert "throttled writing to" in (results[0].reason or "")
    assert dead_letters(h) == []  # the junk waits with its group, to keep the order
    log.failing.clear()
    again = h.committer().process([redelivered(m) for m in messages[::2]])
    assert outcomes(again) == ["committed", "dead_lettered"]


def test_an_unreadable_status_store_retries_the_whole_batch() -> None:
    class Unreadable(InMemoryCommitStatusStore):
        def get_many(self, keys: object) -> dict[tuple[str, str], CommitStatus]:
            raise StoreUnavailableError("status table unavailable")

    h = Harness(statuses=Unreadable())
    table = h.create_table("t")

    results = h.committer().process([message(add_files(table, "a"))])

    assert outcomes(results) == ["retry"]
    assert h.log_length(table) == 1


def test_a_failing_dead_letter_queue_retries_that_group(h: Harness) -> None:
    class Broken(InMemoryCommitQueue):
        def send(self, messages: object) -> None:
            raise StoreUnavailableError("queue unavailable")

    h.dead_letters = Broken()
    t1, t2 = h.create_table("t1"), h.create_table("t2")

    results = h.committer().process([message("junk", group_id=t1), message(add_files(t2, "b"))])

    assert outcomes(results) == ["retry", "committed"]


def test_stats_count_one_write_per_batch_with_the_statuses_in_it(h: Harness) -> None:
    table = h.create_table("t")
    committer = h.committer()

    for batch in range(3):
        committer.process([message(add_files(table, f"f{batch}-{i}")) for i in range(10)])
    committer.process([message(add_files(table, "f0-0"))])  # rejected: its status is a write of its own

    assert committer.stats.log_appends == 3
    assert committer.stats.status_writes == 1
    assert committer.stats.status_items == 1
    assert committer.stats.committed == 30
