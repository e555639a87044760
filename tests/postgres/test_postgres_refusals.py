"""The PostgreSQL store refuses what it cannot hold as invalid input, never as "unavailable", and a read on
a pooled connection the server dropped is retried, not failed. On the real throwaway server."""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable, Iterator

import pytest

from statestore.adapters.postgres import PostgresFileReferenceStore, storable
from statestore.errors import InvalidTransactionError, UnstorableValueError
from statestore.store.ports import CommitOutcome, FileCommitMember, FileCommitOutcome
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds, Transaction
from tests.builders import STRING_SCHEMA, data_key, ref, tree
from tests.committer.harness import Harness, add_files, message, outcomes
from tests.committer.test_row_files_committer import create_postgres_table
from tests.fixtures.postgres import PostgresServer

PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}
LEAF = "p1"
UNSTORABLE = {
    "a NUL character": "data/a\x00b.parquet",
    "a lone surrogate": "data/a\udcffb.parquet",
    "3,000 characters": "data/" + "x" * 3_000 + ".parquet",
}


@pytest.fixture
def table_id() -> str:
    return f"table-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(postgres_conninfo: str) -> Iterator[PostgresFileReferenceStore]:
    # No pause between attempts: a value the store retried would show as redone attempts, not as time.
    with PostgresFileReferenceStore.connect(postgres_conninfo, ensure_schema=False) as store:
        store._sleep = lambda _: None
        yield store


def commit(store: PostgresFileReferenceStore, table_id: str, *transactions: Transaction) -> FileCommitOutcome:
    members = [FileCommitMember(t, f"request-{i}") for i, t in enumerate(transactions)]
    return store.commit(table_id, STRING_SCHEMA, dict(PARTITIONS), members, 2_000)


@pytest.mark.parametrize("what", sorted(UNSTORABLE))
def test_a_filename_the_store_cannot_hold_is_rejected_and_the_rest_of_the_commit_lands(
    store: PostgresFileReferenceStore, table_id: str, what: str
) -> None:
    outcome = commit(
        store,
        table_id,
        AddFiles((ref(data_key(table_id, "good-1.parquet"), LEAF),)),
        AddFiles((ref(UNSTORABLE[what], LEAF),)),
        AddFiles((ref(data_key(table_id, "good-2.parquet"), LEAF),)),
    )

    assert outcome.committed == (0, 2)
    [(position, error)] = outcome.rejected.items()
    assert position == 1 and isinstance(error, InvalidTransactionError)
    assert "cannot hold" in str(error)
    assert store.redo_count == 0, "an invalid value is not a race to redo"
    assert set(store.files(table_id)) == {
        data_key(table_id, "good-1.parquet"),
        data_key(table_id, "good-2.parquet"),
    }


@pytest.mark.parametrize(
    "claim_in",
    [
        lambda table_id: AssignJobIdRequest("job-1", LEAF, ("data/a\x00.parquet",)),
        lambda table_id: AssignJobIdRequest("job-1", "p\x001", (data_key(table_id, "a.parquet"),)),
        lambda table_id: AssignJobIdRequest("job\udcff", LEAF, (data_key(table_id, "a.parquet"),)),
    ],
    ids=["filename", "partition id", "job id"],
)
def test_a_claim_naming_what_the_store_cannot_hold_is_rejected(
    store: PostgresFileReferenceStore, table_id: str, claim_in: Callable[[str], AssignJobIdRequest]
) -> None:
    commit(store, table_id, AddFiles((ref(data_key(table_id, "a.parquet"), LEAF),)))

    outcome = commit(store, table_id, AssignJobIds((claim_in(table_id),)))

    assert outcome.committed == () and set(outcome.rejected) == {0}
    assert store.files(table_id)[data_key(table_id, "a.parquet")].references[0].job_id is None


def test_a_value_the_server_refuses_past_the_checks_rejects_only_its_member(
    store: PostgresFileReferenceStore, table_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's own refusal (here a NUL the checks were told to let through) is found member by member
    and rejected as invalid: never an outage, never retried."""
    monkeypatch.setattr("statestore.adapters.postgres.file_store.transaction_problem", lambda *_: None)

    outcome = commit(
        store,
        table_id,
        AddFiles((ref(data_key(table_id, "good.parquet"), LEAF),)),
        AddFiles((ref(UNSTORABLE["a NUL character"], LEAF),)),
    )

    assert outcome.committed == (0,)
    assert isinstance(outcome.rejected[1], InvalidTransactionError)
    assert "NUL" in str(outcome.rejected[1])
    assert set(store.files(table_id)) == {data_key(table_id, "good.parquet")}


def test_an_index_entry_too_large_for_the_server_never_reaches_it(
    store: PostgresFileReferenceStore, table_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storable, "MAX_TEXT_BYTES", 10_000)  # the adapter's own check lets it through
    letters = random.Random(7).choices(string.ascii_letters, k=3_200)
    name = data_key(table_id, "".join(letters) + ".parquet")  # too random to compress into an index entry

    outcome = commit(store, table_id, AddFiles((ref(name, LEAF),)))

    # The one rule for names (at most 1,024 bytes, what S3 keys and the index hold) refuses it first.
    assert set(outcome.rejected) == {0} and "a name may have at most 1,024" in str(outcome.rejected[0])
    assert store.redo_count == 0


def test_reads_and_clears_refuse_a_table_id_the_store_cannot_hold_as_invalid_input(
    store: PostgresFileReferenceStore,
) -> None:
    for call in (store.files, store.has_files, store.clear, store.delete_table):
        with pytest.raises(UnstorableValueError, match="NUL"):
            call("table\x00")


def test_a_request_id_no_row_can_hold_was_never_committed(
    store: PostgresFileReferenceStore, table_id: str
) -> None:
    commit(store, table_id, AddFiles((ref(data_key(table_id, "a.parquet"), LEAF),)))

    found = store.committed_requests(table_id, ["request-0", "bad\x00", "bad\udcff"])

    assert set(found) == {"request-0"}


@pytest.mark.parametrize("what", sorted(UNSTORABLE))
def test_through_the_committer_such_a_request_gets_a_final_rejected_status_at_once(
    store: PostgresFileReferenceStore, what: str
) -> None:
    h = Harness()
    table_id = create_postgres_table(h, store)
    good = add_files(table_id, "good.parquet")
    bad = add_files(table_id, UNSTORABLE[what])

    results = h.committer(file_store=store).process([message(good), message(bad)])

    assert outcomes(results) == ["committed", "rejected"]
    status = h.statuses.get(table_id, bad.request_id)
    assert status is not None and status.outcome is CommitOutcome.REJECTED and status.is_final
    assert "cannot hold" in (status.reason or "")
    assert set(store.files(table_id)) == {data_key(table_id, "good.parquet")}


# --- a server restart -------------------------------------------------------------------------------------


def test_a_read_on_a_pooled_connection_the_server_dropped_is_retried_once(
    private_postgres_server: PostgresServer,
) -> None:
    conninfo = private_postgres_server.create_database("restart")
    with PostgresFileReferenceStore.connect(conninfo, max_connections=1) as store:
        commit(store, "t", AddFiles((ref(data_key("t", "a.parquet"), LEAF),)))
        assert set(store.files("t")) == {data_key("t", "a.parquet")}  # the pool now holds an idle connection

        private_postgres_server.restart()

        assert set(store.files("t")) == {data_key("t", "a.parquet")}
        private_postgres_server.restart()
        assert store.has_files("t")
        private_postgres_server.restart()
        assert set(store.committed_requests("t", ["request-0"])) == {"request-0"}
        private_postgres_server.restart()
        assert store.files_ready_for_gc("t", 10**12) == []
        private_postgres_server.restart()
        assert commit(store, "t2", AddFiles((ref(data_key("t2", "b.parquet"), LEAF),))).committed == (0,)
