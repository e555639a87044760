"""The queryable view under the synthesized policies, IAM enforced in moto (``tests/infra/deployed_iam.py``):
the read-state managed policy (a job's, a reader's) suffices for every query through the view and cannot
write it; the admin policy (the CLI's) suffices for its upkeep. The view lives in the snapshots table, so no
grant names it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statestore.adapters.aws.backend import AwsBackend
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.queryable_view import QueryableView
from statestore.engine.snapshots import SnapshotStore
from statestore.errors import StateStoreError
from statestore.model.partitions import Range, Region
from statestore.state.table_state import TableState
from statestore.transactions import AddFiles, AssignJobIdRequest, AssignJobIds
from tests.builders import INT_SCHEMA, data_key, ref
from tests.infra.deployed_iam import iam_enforced
from tests.infra.test_deployed_access import Instance, instance, policy, template_json  # noqa: F401

pytestmark = pytest.mark.infra


def test_the_read_policy_queries_the_view_and_the_admin_policy_keeps_it(instance: Instance) -> None:  # noqa: F811
    store = instance.create_table("orders")
    store.index_leaves = True  # the entries behind the view are read through the log's leaf index
    table_id = store.table_id
    first, second = data_key(table_id, "a.parquet"), data_key(table_id, "b.parquet")
    store.commit(AddFiles((ref(first), ref(second))))
    admin = instance.caller("admin", policy(instance, "admin")).backend
    reader = instance.caller("reader", policy(instance, "read-state")).backend

    def loader(backend: AwsBackend) -> Callable[[], TableState]:
        snapshots = SnapshotStore(backend.snapshot_metadata, backend.blobs)
        return TransactionLogStateStore(table_id, INT_SCHEMA, backend.log, snapshots).load

    with iam_enforced():
        kept = QueryableView(table_id, INT_SCHEMA, admin.log, admin.queryable_view)
        assert kept.update(loader(admin)).rebuilt
    store.commit(AssignJobIds((AssignJobIdRequest("job-1", "root", (first,)),)))
    with iam_enforced():
        assert kept.update(loader(admin)).writes == 3  # the claimed file's f#, r# and new j# item
    store.commit(AddFiles((ref(data_key(table_id, "c.parquet")),)))

    state = store.state()
    with iam_enforced():
        view = QueryableView(table_id, INT_SCHEMA, reader.log, reader.queryable_view)
        assert view.references_in_partition("root").value == sorted(state.references_in_partition("root"))
        assert view.references_in_region(Region((Range(0, 10),))).value == {
            "root": sorted(state.references_in_partition("root"))
        }
        assert view.claimed_references("job-1").value == state.claimed_references()["job-1"]
        assert view.file(second).value == state.file(second)
        with pytest.raises(StateStoreError, match="AccessDenied"):
            view.update(loader(reader))
