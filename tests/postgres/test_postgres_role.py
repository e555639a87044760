"""The role the deployed functions connect as (``statestore.adapters.postgres.schema.APP_ROLE``) does the
store's work and nothing else, on the real throwaway server."""

from __future__ import annotations

import psycopg
import pytest

from statestore.adapters.postgres import PostgresFileReferenceStore
from statestore.adapters.postgres.schema import APP_ROLE, migrate
from statestore.errors import AccessDeniedError
from statestore.store.ports import FileCommitMember
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds, DeleteFiles
from tests.builders import STRING_SCHEMA, data_keys, ref, tree
from tests.fixtures.postgres import SUPERUSER

PARTITIONS = {p.id: p for p in tree(STRING_SCHEMA)}


def as_app_role(conninfo: str) -> str:
    return conninfo.replace(f"user={SUPERUSER}", f"user={APP_ROLE}")


@pytest.fixture
def migrated(fresh_postgres_conninfo: str) -> str:
    migrate(fresh_postgres_conninfo, app_password="app-password")
    migrate(fresh_postgres_conninfo, app_password="app-password")  # again: nothing to do, nothing fails
    return fresh_postgres_conninfo


def test_the_app_role_commits_reads_collects_garbage_and_clears(migrated: str) -> None:
    with PostgresFileReferenceStore.connect(as_app_role(migrated), ensure_schema=False) as store:

        def commit(transaction: object, request_id: str) -> tuple[int, ...]:
            members = [FileCommitMember(transaction, request_id)]  # type: ignore[arg-type]
            return store.commit("t", STRING_SCHEMA, PARTITIONS, members, 1_000).committed

        a, b, c = data_keys("t", "a", "b", "c")
        assert commit(AddFiles((ref(a, "root"), ref(b, "root"))), "r1") == (0,)
        assert commit(AssignJobIds((AssignJobIdRequest("j", "root", (a,)),)), "r2") == (0,)
        assert commit(AddFiles((), (c,)), "r3") == (0,)
        store.mark_unreferenced("t", now=2_000)
        assert store.files_ready_for_gc("t", before=3_000) == [c]
        assert commit(DeleteFiles((c,)), "r4") == (0,)
        assert set(store.committed_requests("t", ["r1", "r4"])) == {"r1", "r4"}
        assert store.forget_requests("t", before=10**15) == 4
        store.clear("t")
        store.delete_table("t")


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE statestore.files",
        "TRUNCATE statestore.file_references",
        "CREATE TABLE statestore.extra (x int)",
        "ALTER TABLE statestore.files ADD COLUMN x int",
        "CREATE ROLE intruder",
        "CREATE SCHEMA elsewhere",
    ],
)
def test_the_app_role_may_not_change_the_schema_nor_make_roles(migrated: str, statement: str) -> None:
    with (
        psycopg.connect(as_app_role(migrated), autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement)


def test_the_app_role_cannot_create_the_schema_so_the_functions_do_not_try(
    fresh_postgres_conninfo: str,
) -> None:
    migrate(fresh_postgres_conninfo)  # the role exists, in this database and the server
    other = fresh_postgres_conninfo
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("DROP SCHEMA statestore CASCADE")

    with pytest.raises(AccessDeniedError):
        PostgresFileReferenceStore.connect(as_app_role(other), ensure_schema=True)
