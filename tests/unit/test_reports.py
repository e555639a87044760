"""Reports on a table's state: files ready for GC, files, references per partition, leaf sizes."""

from __future__ import annotations

import pytest

from statestore.errors import InvalidQueryError
from statestore.services.client import StateStoreClient
from statestore.state.table_state import TableState
from statestore.transactions import (
    AddFiles,
    AssignJobIdRequest,
    AssignJobIds,
    ReplaceFileReferences,
    ReplaceFileReferencesJob,
)
from statestore.views.reports import (
    files_ready_for_gc,
    files_report,
    partition_report,
    references_per_partition,
)
from tests.builders import STRING_SCHEMA, commit, data_key, new_state, ref


def reported_state() -> TableState:
    """p1 ["", "m"): a (10 rows, claimed by job1), b (20, approximate); p2 ["m", ...): b (30), c (100).
    Unreferenced: old (since 2000), newer (since 3000), compacted (since 4000)."""
    state = new_state(
        STRING_SCHEMA,
        ["m"],
        [
            ref("a", "p1", 10),
            ref("b", "p1", 20, approximate=True, whole_file=False),
            ref("b", "p2", 30, whole_file=False),
            ref("c", "p2", 100),
            ref("d", "p2", 5),
        ],
        update_time=1_000,
    )
    commit(state, AddFiles((), ("old",)), update_time=2_000)
    commit(state, AddFiles((), ("newer",)), update_time=3_000)
    commit(
        state,
        AssignJobIds((AssignJobIdRequest("job1", "p1", ("a",)), AssignJobIdRequest("j2", "p2", ("d",)))),
    )
    commit(
        state,
        ReplaceFileReferences((ReplaceFileReferencesJob("j2", "p2", ("d",), ref("compacted", "p2", 5)),)),
        update_time=4_000,
    )
    return state


def test_files_ready_for_gc_before_a_time_are_listed_oldest_first() -> None:
    state = reported_state()

    assert [f.filename for f in files_ready_for_gc(state, before=10_000).files] == ["old", "newer", "d"]
    assert [f.filename for f in files_ready_for_gc(state, before=3_000).files] == ["old"]
    assert files_ready_for_gc(state, before=2_000).files == ()


def test_files_ready_for_gc_with_a_limit_say_when_there_are_more() -> None:
    state = reported_state()

    limited = files_ready_for_gc(state, before=10_000, limit=2)

    assert [f.filename for f in limited.files] == ["old", "newer"]
    assert limited.total == 3 and limited.more
    assert not files_ready_for_gc(state, before=10_000, limit=3).more


def test_files_report_lists_referenced_and_unreferenced_files_capped_saying_when_there_are_more() -> None:
    state = reported_state()

    full = files_report(state)
    assert [f.filename for f in full.referenced] == ["a", "b", "c", "compacted"]
    assert [f.filename for f in full.unreferenced] == ["d", "newer", "old"]
    assert (full.referenced_total, full.unreferenced_total, full.reference_total) == (4, 3, 5)
    assert not full.more

    capped = files_report(state, limit=2)
    assert [f.filename for f in capped.referenced] == ["a", "b"]
    assert [f.filename for f in capped.unreferenced] == ["d", "newer"]
    assert capped.referenced_total == 4 and capped.more


def test_references_per_partition_count_references_rows_and_claims_in_tree_order() -> None:
    report = {p.partition_id: p for p in references_per_partition(reported_state())}

    assert list(report) == ["root", "p1", "p2"]
    assert report["root"].references == 0 and not report["root"].leaf
    p1, p2 = report["p1"], report["p2"]
    assert (p1.references, p1.rows, p1.rows_approximate, p1.assigned_to_jobs) == (2, 30, True, 1)
    assert (p2.references, p2.rows, p2.rows_approximate, p2.assigned_to_jobs) == (3, 135, False, 0)


def test_partition_report_gives_leaf_sizes_and_the_leaves_over_the_split_threshold() -> None:
    report = partition_report(reported_state(), split_threshold=100)

    assert report.partitions == 3
    assert [(leaf.partition.id, leaf.rows, leaf.references) for leaf in report.leaves] == [
        ("p1", 30, 2),
        ("p2", 135, 3),
    ]
    assert [leaf.partition.id for leaf in report.leaves_to_split] == ["p2"]
    # A leaf holding exactly the threshold is not over it (the splitting job's rule).
    assert partition_report(reported_state(), split_threshold=135).leaves_to_split == ()
    assert partition_report(reported_state()).leaves_to_split == ()


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_a_report_with_a_limit_that_is_not_a_count_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(InvalidQueryError, match="limit must be a whole number"):
        files_report(reported_state(), limit=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidQueryError, match="split_threshold must be a whole number"):
        partition_report(reported_state(), split_threshold=bad)  # type: ignore[arg-type]


def test_the_client_reports_from_the_tables_latest_state() -> None:
    client = StateStoreClient.in_memory()
    table_id = client.create_table("t", STRING_SCHEMA).table_id
    gone = data_key(table_id, "gone")
    client.commit("t", AddFiles((ref(data_key(table_id, "a"), "root", 50),), (gone,)))

    assert [f.filename for f in client.files_ready_for_gc("t", before=2**62, limit=10).files] == [gone]
    assert client.files_report("t").unreferenced_total == 1
    assert [(p.partition_id, p.rows) for p in client.references_per_partition("t")] == [("root", 50)]
    assert [leaf.partition.id for leaf in client.partition_report("t", 49).leaves_to_split] == ["root"]
