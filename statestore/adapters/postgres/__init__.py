"""PostgreSQL adapter: a table's file references as rows (design record 002, option 3), behind the
:class:`~statestore.store.ports.FileReferenceStore` port. The only package that imports psycopg; its errors
never leave it.

What this backend supports: every row transaction (AddFiles, AssignJobIds, ReleaseClaims,
ReplaceFileReferences, SplitFileReferences, DeleteFiles) decided by :mod:`statestore.views.row_decisions` with
the transactions' own rules, groups of them committed all or nothing, exactly-once request ids, clearing a
table, two-phase garbage collection, and a consistent read of a table's files. Commits on different
references of the same files (compactions of many partitions at once) do not contend.

What it does not: partitions (they stay on the log), time travel (only the current rows are kept: no
``load(as_of=N)``), and a log of file transactions, so incremental reads and the compaction job history,
which read the log, need the log backend.
"""

from statestore.adapters.postgres.file_store import PostgresFileReferenceStore
from statestore.adapters.postgres.schema import ensure_schema
from statestore.adapters.postgres.tls import conninfo_from_secret

__all__ = ["PostgresFileReferenceStore", "conninfo_from_secret", "ensure_schema"]
