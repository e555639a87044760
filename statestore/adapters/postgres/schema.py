"""The PostgreSQL schema of the file-reference store: shared tables keyed by table id (design record 002,
option 3), created idempotently by :func:`ensure_schema`.

One SQL table each for files, references and request ids, shared by every statestore table, so a new table
needs no DDL and the connection's plans are reused across tables. Commit numbers come from a sequence, not a
counter row, which would serialise every commit of every table.

The deployed functions connect as :data:`APP_ROLE`, not as the master user: :func:`migrate` (run as the
master user, by the stack's schema-migration function at deploy time) creates the schema and that role,
which may read and change the rows and draw commit numbers, and nothing else: no DDL, no TRUNCATE, no other
schema, no roles. Its password is set as a SCRAM verifier computed here, so the password itself never
reaches the server or its logs.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

SCHEMA = "statestore"
# The role the functions connect as (the stack's app secret holds its password).
APP_ROLE = "statestore_app"
FILES = f"{SCHEMA}.files"
REFERENCES = f"{SCHEMA}.file_references"
REQUESTS = f"{SCHEMA}.requests"
COMMIT_NUMBERS = f"{SCHEMA}.commit_numbers"

# Any constant: serialises concurrent ensure_schema calls (CREATE ... IF NOT EXISTS is not safe against a
# concurrent CREATE of the same name: the loser fails on the catalogue's unique index).
_DDL_LOCK_KEY = 0x5354_4154_4553_5452  # "STATESTR"

DDL: tuple[str, ...] = (
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"CREATE SEQUENCE IF NOT EXISTS {COMMIT_NUMBERS} AS bigint",
    # unreferenced_since: NULL while the file may have references; set by garbage collection's first phase
    # when the last went (or at the add time for a file added with none). A file never gains a reference
    # once it has none (only a split adds references to an existing file, and it moves one it has).
    f"""CREATE TABLE IF NOT EXISTS {FILES} (
        table_id text NOT NULL,
        filename text NOT NULL,
        added_time bigint NOT NULL,
        unreferenced_since bigint,
        PRIMARY KEY (table_id, filename)
    )""",
    # The primary key's prefix (table_id, filename) is the index of references by file. No foreign key to
    # the file rows: the commit path keeps it (a reference is inserted with its file's row in the same
    # transaction, or by a split that holds the file row's lock; a file's references go before its row),
    # and the per-row check cost 1.5-2 s of a 100,000-reference AddFiles (4.5-5 s with it, 2.8-2.9 without).
    f"""CREATE TABLE IF NOT EXISTS {REFERENCES} (
        table_id text NOT NULL,
        filename text NOT NULL,
        partition_id text NOT NULL,
        number_of_rows bigint NOT NULL,
        count_approximate boolean NOT NULL,
        only_contains_data_for_this_partition boolean NOT NULL,
        job_id text,
        last_update_time bigint NOT NULL,
        PRIMARY KEY (table_id, filename, partition_id)
    )""",
    f"""CREATE INDEX IF NOT EXISTS file_references_by_job ON {REFERENCES} (table_id, job_id)
        WHERE job_id IS NOT NULL""",
    # Garbage collection's second phase: files marked unreferenced, oldest first.
    f"""CREATE INDEX IF NOT EXISTS files_unreferenced ON {FILES} (table_id, unreferenced_since, filename)
        WHERE unreferenced_since IS NOT NULL""",
    f"""CREATE TABLE IF NOT EXISTS {REQUESTS} (
        table_id text NOT NULL,
        request_id text NOT NULL,
        commit_number bigint NOT NULL,
        recorded_time bigint NOT NULL,
        PRIMARY KEY (table_id, request_id)
    )""",
    f"CREATE INDEX IF NOT EXISTS requests_by_time ON {REQUESTS} (table_id, recorded_time)",
    # Statistics that keep up with a new table. Every statestore table shares these SQL tables, so by
    # default they are analysed again only when a tenth of all their rows changed: a table created (or
    # grown) since is in no statistics, the planner expects one row of it, and picked plans that read all
    # its rows per lookup (a commit) or per row (garbage collection's anti-join, 36 s for 2,000 files).
    # Analysed after every 10,000 changed rows instead, with room for 1,000 table ids among the most
    # common values. (Both are per-table storage settings: idempotent, no rewrite, no lock on DML.)
    *(
        statement
        for table in (FILES, REFERENCES)
        for statement in (
            f"ALTER TABLE {table} SET (autovacuum_analyze_scale_factor = 0, "
            "autovacuum_analyze_threshold = 10000)",
            f"ALTER TABLE {table} ALTER COLUMN table_id SET STATISTICS 1000",
        )
    ),
)


def ensure_schema(
    connection: psycopg.Connection, app_role: str | None = None, app_password: str | None = None
) -> None:
    """Create the schema, tables, indexes and sequence that are missing, in one transaction; safe to call
    from several processes at once and again on a database that has them. With ``app_role``, also create
    that role if missing (it needs CREATEROLE) and grant it what the store does, and no more; with
    ``app_password``, let it log in with that password."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
        for statement in DDL:
            connection.execute(statement)
        if app_role is not None:
            _grant_app_role(connection, app_role, app_password)


def _grant_app_role(connection: psycopg.Connection, role: str, password: str | None) -> None:
    name = sql.Identifier(role)
    exists = connection.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if exists is None:
        connection.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(name))
    # Exactly what the store's statements need: rows read, locked (FOR UPDATE needs UPDATE), written by
    # COPY and INSERT, updated and deleted; nextval on the commit numbers.
    connection.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(SCHEMA), name))
    for table in (FILES, REFERENCES, REQUESTS):
        connection.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(_qualified(table), name)
        )
    connection.execute(sql.SQL("GRANT USAGE ON SEQUENCE {} TO {}").format(_qualified(COMMIT_NUMBERS), name))
    if password is not None:
        verifier = connection.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
        connection.execute(
            sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(name, sql.Literal(verifier.decode()))
        )


def _qualified(name: str) -> sql.Composable:
    schema, table = name.split(".")
    return sql.Identifier(schema, table)


def migrate(conninfo: str, app_role: str = APP_ROLE, app_password: str | None = None) -> None:
    """Bring the database ``conninfo`` names (as a user that may create schemas and roles: RDS's master
    user) up to the store's schema, with ``app_role`` for the functions to connect as."""
    from statestore.adapters.postgres.tls import secure_conninfo

    with psycopg.connect(secure_conninfo(conninfo), autocommit=True) as connection:
        ensure_schema(connection, app_role, app_password)
