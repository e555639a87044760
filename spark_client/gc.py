"""Orphan data files: objects under a table's data prefix that its state does not name at all.

The store's own garbage collection (``statestore.services.cleanup``) deletes files that are *in* the state
with no references. A file the state never learnt of is different: an ingest or compaction wrote it, then its
commit was rejected, or the job died (or did not wait for an outcome) before it could clean up. Such a
file is found by listing the data prefix and subtracting every filename the state holds; only files older
than ``min_age_ms`` are candidates, because a running job's files are legitimately not in the state yet, and
a commit request naming them may still be in flight: the default is the longest one can be (the commit
queue, its dead-letter queue and a redrive keep it that long), plus the clock skew assumed.

The scheduled cleanup sweeps the orphans of the instance's bucket by itself, after the GC delay
(:mod:`statestore.engine.orphans`). These functions are for data stores the cleanup does not see (a local
directory, another bucket) and for sweeping by hand.
"""

from __future__ import annotations

from spark_client.data_store import DataStore
from statestore import instance
from statestore.engine.log_store import TableStateStore
from statestore.model.clock import now_millis

DEFAULT_MIN_AGE_MS = (instance.REQUEST_MAX_LIFETIME_SECONDS + instance.MAX_CLOCK_SKEW_SECONDS) * 1000


def find_orphan_files(
    store: TableStateStore, data: DataStore, min_age_ms: int = DEFAULT_MIN_AGE_MS
) -> list[str]:
    """Data files of the table not named in its state and last modified more than ``min_age_ms`` ago."""
    cutoff = now_millis() - min_age_ms
    # List first, then read the state: a file committed in between is then seen as known, never as orphan.
    listed = data.list_data_files(store.table_id)
    known = store.state().files_by_name
    return [filename for filename, modified in listed if filename not in known and modified <= cutoff]


def delete_orphan_files(
    store: TableStateStore, data: DataStore, min_age_ms: int = DEFAULT_MIN_AGE_MS
) -> list[str]:
    """Delete the files :func:`find_orphan_files` finds; returns their names."""
    orphans = find_orphan_files(store, data, min_age_ms)
    data.delete(orphans)
    return orphans
