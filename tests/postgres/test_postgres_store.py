"""What only the PostgreSQL store has: its schema, its connections, COMMITs lost with the connection, errors
translated at the boundary, the secret helper, and bulk writes and reads."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from statestore.adapters.postgres import PostgresFileReferenceStore, conninfo_from_secret
from statestore.adapters.postgres.tls import bundled_ca_file
from statestore.errors import (
    CommitOutcomeUnknownError,
    ResourceNotFoundError,
    StateStoreError,
    StoreUnavailableError,
)
from statestore.store.ports import FileCommitMember, FileCommitOutcome
from statestore.transactions import AddFiles, Transaction
from tests.builders import STRING_SCHEMA, data_key, ref, tree
from tests.fixtures.aws_servers import free_port

PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA, ["m"])}


def commit(
    store: PostgresFileReferenceStore, table_id: str, transaction: Transaction, request_id: str = "req-1"
) -> FileCommitOutcome:
    return store.commit(
        table_id, STRING_SCHEMA, dict(PARTITIONS), [FileCommitMember(transaction, request_id)], 2_000
    )


@pytest.fixture
def table_id() -> str:
    return f"table-{uuid.uuid4().hex[:12]}"


# --- schema ---------------------------------------------------------------------------------------------


def test_the_schema_is_created_once_even_by_several_processes_at_once(fresh_postgres_conninfo: str) -> None:
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            PostgresFileReferenceStore.connect(fresh_postgres_conninfo, max_connections=1).close()
        except BaseException as e:  # collected and asserted on below
            errors.append(e)

    threads = [threading.Thread(target=connect) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    with PostgresFileReferenceStore.connect(fresh_postgres_conninfo) as store:  # and again: nothing to do
        assert commit(store, "t", AddFiles((ref(data_key("t", "a"), "p1"),))).committed == (0,)


def test_the_shared_tables_are_analysed_after_ten_thousand_changed_rows_with_room_for_many_table_ids(
    fresh_postgres_conninfo: str,
) -> None:
    PostgresFileReferenceStore.connect(fresh_postgres_conninfo, max_connections=1).close()
    with psycopg.connect(fresh_postgres_conninfo) as conn:
        for table in ("files", "file_references"):
            options, target = conn.execute(
                "SELECT c.reloptions, a.attstattarget FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid "
                "WHERE n.nspname = 'statestore' AND c.relname = %s AND a.attname = 'table_id'",
                (table,),
            ).fetchone() or (None, None)
            assert set(options) == {"autovacuum_analyze_scale_factor=0", "autovacuum_analyze_threshold=10000"}
            assert target == 1000


def test_a_commit_finds_its_files_by_name_not_by_reading_the_whole_table(
    fresh_postgres_conninfo: str,
) -> None:
    # Analysed, as autovacuum does after 10,000 changed rows, on a server with the stack's planner
    # settings: the lookup of 1,000 of 20,000 files descends the primary key by name. With the planner's
    # default random_page_cost it read every file row of every table (a sequential scan).
    with PostgresFileReferenceStore.connect(fresh_postgres_conninfo, max_connections=1) as store:
        names = [data_key("t", f"f{i:06d}") for i in range(20_000)]
        for start in range(0, len(names), 5_000):
            commit(
                store, "t", AddFiles(tuple(ref(n, "p1") for n in names[start : start + 5_000])), f"r{start}"
            )
    with psycopg.connect(fresh_postgres_conninfo, autocommit=True) as conn:
        conn.execute("ANALYZE statestore.files")
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT filename, added_time, unreferenced_since FROM statestore.files "
                "WHERE table_id = %s AND filename = ANY(%s) ORDER BY filename FOR UPDATE",
                ("t", names[5_000:6_000]),
            )
        )
    assert "Seq Scan" not in plan
    assert "Index Cond: ((table_id = 't'::text) AND (filename = ANY" in plan


def test_a_database_without_the_schema_says_how_to_create_it(fresh_postgres_conninfo: str) -> None:
    with PostgresFileReferenceStore.connect(fresh_postgres_conninfo, ensure_schema=False) as store:
        with pytest.raises(ResourceNotFoundError, match="ensure_schema=True"):
            store.files("t")
        with pytest.raises(ResourceNotFoundError):
            commit(store, "t", AddFiles((ref(data_key("t", "a"), "p1"),)))


# --- connections and errors -----------------------------------------------------------------------------


def test_an_unreachable_database_is_store_unavailable_and_no_psycopg_error_leaks() -> None:
    conninfo = f"host=127.0.0.1 port={free_port()} user=nobody dbname=none connect_timeout=1"
    with PostgresFileReferenceStore.connect(conninfo, ensure_schema=False, connect_timeout=1.0) as store:
        for call in (
            lambda: store.files("t"),
            lambda: store.has_files("t"),
            lambda: commit(store, "t", AddFiles((ref(data_key("t", "a"), "p1"),))),
        ):
            with pytest.raises(StoreUnavailableError) as raised:
                call()
            assert not isinstance(raised.value, psycopg.Error)
    with pytest.raises(StoreUnavailableError):
        PostgresFileReferenceStore.connect(conninfo, connect_timeout=1.0)


def test_the_pool_opens_connections_when_needed_and_closes_idle_ones(postgres_conninfo: str) -> None:
    with PostgresFileReferenceStore.connect(
        postgres_conninfo, ensure_schema=False, max_connections=2, idle_timeout=0.5
    ) as store:
        pool = store._pool
        assert pool.get_stats()["pool_size"] == 0  # nothing opened until used
        store.has_files("t")
        assert pool.get_stats()["pool_size"] == 1
        deadline = time.monotonic() + 10
        while pool.get_stats()["pool_size"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pool.get_stats()["pool_size"] == 0


class LostCommit(PostgresFileReferenceStore):
    """Its first COMMIT fails the way a dropped connection does, after or before reaching the server."""

    def __init__(self, pool: ConnectionPool, *, landed: bool, pool_dies: bool = False) -> None:
        super().__init__(pool, sleep=lambda _: None)
        self.landed, self.pool_dies, self.failed = landed, pool_dies, False

    def _send_commit(self, conn: psycopg.Connection) -> None:
        if self.failed:
            return super()._send_commit(conn)
        self.failed = True
        if self.landed:
            super()._send_commit(conn)
        conn.close()  # a transaction left open is rolled back by the server
        if self.pool_dies:
            self._pool.close()
        raise psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.fixture
def pooled(postgres_conninfo: str) -> Iterator[PostgresFileReferenceStore]:
    with PostgresFileReferenceStore.connect(postgres_conninfo, ensure_schema=False) as store:
        yield store


def lost_commit_store(
    pooled: PostgresFileReferenceStore, *, landed: bool, pool_dies: bool = False
) -> LostCommit:
    return LostCommit(pooled._pool, landed=landed, pool_dies=pool_dies)


def test_a_commit_whose_commit_landed_before_the_connection_dropped_reports_its_outcome(
    pooled: PostgresFileReferenceStore, table_id: str
) -> None:
    store = lost_commit_store(pooled, landed=True)

    outcome = commit(store, table_id, AddFiles((ref(data_key(table_id, "a"), "p1"),)), "req-lost")

    assert outcome.committed == (0,) and store.redo_count == 0
    assert pooled.committed_requests(table_id, ["req-lost"]) == {"req-lost": outcome.commit_number}
    assert set(pooled.files(table_id)) == {data_key(table_id, "a")}


def test_a_commit_whose_commit_did_not_land_is_redone_once(
    pooled: PostgresFileReferenceStore, table_id: str
) -> None:
    store = lost_commit_store(pooled, landed=False)

    outcome = commit(store, table_id, AddFiles((ref(data_key(table_id, "a"), "p1"),)), "req-lost")

    assert outcome.committed == (0,) and store.redo_count == 1
    assert pooled.committed_requests(table_id, ["req-lost"]) == {"req-lost": outcome.commit_number}


def test_a_commit_whose_fate_cannot_be_told_raises_outcome_unknown(
    postgres_conninfo: str, table_id: str
) -> None:
    with PostgresFileReferenceStore.connect(postgres_conninfo, ensure_schema=False) as own:
        store = lost_commit_store(own, landed=True, pool_dies=True)

        with pytest.raises(CommitOutcomeUnknownError, match="req-lost"):
            commit(store, table_id, AddFiles((ref(data_key(table_id, "a"), "p1"),)), "req-lost")

    with PostgresFileReferenceStore.connect(postgres_conninfo, ensure_schema=False) as reader:
        assert set(reader.committed_requests(table_id, ["req-lost"])) == {"req-lost"}  # it had landed


def test_a_closed_store_raises_a_statestore_error(postgres_conninfo: str) -> None:
    store = PostgresFileReferenceStore.connect(postgres_conninfo, ensure_schema=False)
    store.close()
    with pytest.raises(StateStoreError):
        store.has_files("t")


# --- the secret helper ----------------------------------------------------------------------------------


def test_a_conninfo_is_built_from_the_secret_rds_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    secret = {"host": "db.example", "port": 5433, "username": "app", "password": "p w'x", "dbname": "state"}

    conninfo = conninfo_from_secret(json.dumps(secret))

    parsed = psycopg.conninfo.conninfo_to_dict(conninfo)
    assert parsed == {
        "host": "db.example",
        "port": "5433",
        "user": "app",
        "password": "p w'x",
        "dbname": "state",
        "sslmode": "verify-full",
        "sslrootcert": bundled_ca_file(),
    }
    defaults = psycopg.conninfo.conninfo_to_dict(
        conninfo_from_secret({"host": "h", "username": "u", "password": "p"})
    )
    assert defaults["port"] == "5432" and defaults["dbname"] == "postgres"
    with pytest.raises(ValueError, match="password"):
        conninfo_from_secret({"host": "h", "username": "u"})


def test_a_conninfo_from_a_secret_connects(postgres_server: object, postgres_conninfo: str) -> None:
    fields = psycopg.conninfo.conninfo_to_dict(postgres_conninfo)
    secret = {
        "host": fields["host"],
        "port": fields["port"],
        "username": fields["user"],
        "password": "unused",
    }
    secret["dbname"] = fields["dbname"]

    with PostgresFileReferenceStore.connect(conninfo_from_secret(secret, sslmode="disable")) as store:
        assert not store.has_files("nothing")


# --- bulk -----------------------------------------------------------------------------------------------


def test_an_add_of_a_hundred_thousand_references_is_written_and_read_back_in_bulk(
    pooled: PostgresFileReferenceStore, table_id: str
) -> None:
    references = tuple(
        ref(data_key(table_id, f"file-{i:06}"), "p1" if i % 2 else "p2", i) for i in range(100_000)
    )

    started = time.perf_counter()
    outcome = commit(pooled, table_id, AddFiles(references))
    written = time.perf_counter() - started
    started = time.perf_counter()
    files = pooled.files(table_id)
    read = time.perf_counter() - started

    print(f"\nAddFiles of 100,000 references: {written:.2f}s; files() of them: {read:.2f}s")
    assert outcome.committed == (0,) and len(files) == 100_000
    assert files[data_key(table_id, "file-012345")].references == (
        references[12345]._replace(last_update_time=2_000),
    )
