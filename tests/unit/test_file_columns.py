"""The column-wise files of a state: name lookups (collisions too), the overlay, folding and undo."""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from statestore.codec import parquet as parquet_codec
from statestore.codec.parquet import state_from_parquet, state_to_parquet
from statestore.errors import FileNotFoundInStateError
from statestore.model.files import TableFile
from statestore.state import file_columns
from statestore.state import table_state as state_module
from statestore.state.file_columns import FileColumns, split_filenames
from statestore.state.string_column import split_filename
from statestore.state.table_state import TableState
from tests.builders import new_state, ref


def files_named(names: list[str]) -> list[TableFile]:
    return [TableFile(name, (ref(name, "root", rows=i + 1),), 1_000 + i) for i, name in enumerate(names)]


def hash_of_name(name: str) -> int:
    """A name's hash computed one name at a time, as a lookup on the commit path does."""
    directory, base_name = split_filename(name)
    return file_columns._hash_of(directory, base_name.encode(), file_columns.ALL_HASH_BITS)


NAMES = [f"tables/t/data/partition=p{i % 7}/{i:04d}.parquet" for i in range(200)] + ["bare.parquet"]


def folded_state(references_per_file: int = 1) -> TableState:
    state = new_state(split_points=["m"], references=[ref("a", "p1"), ref("b", "p2"), ref("c", "p1")])
    state.put_file(TableFile("d", (ref("d", "p1"), ref("d", "p2", whole_file=False)), 2_000))
    state.file_columns()  # fold: the base holds every file, the overlay none
    return state


def test_a_filename_splits_into_its_directory_and_base_name() -> None:
    assert split_filename("tables/t/data/partition=p/f.parquet") == (
        "tables/t/data/partition=p/",
        "f.parquet",
    )
    assert split_filename("f.parquet") == ("", "f.parquet")


def test_names_split_again_after_the_list_they_came_in_changed() -> None:
    names = ["a/b.parquet", "c/d.parquet"]
    assert split_filenames(names).base_names.to_pylist() == ["b.parquet", "d.parquet"]
    names[0] = "a/changed.parquet"
    assert split_filenames(names).base_names.to_pylist() == ["changed.parquet", "d.parquet"]


def test_names_split_as_a_column_as_they_do_one_by_one() -> None:
    names = [
        "a/b/c.x",
        "c",
        "/d",
        "e/",
        "x//y",
        "dir/é€𝄞.parquet",
        "𝄞/",
        "tables/t/data/partition=p/f.parquet",
    ]
    split = split_filenames(names)
    directories = split.directories.take(pa.array(split.directory_codes)).to_pylist()
    assert list(zip(directories, split.base_names.to_pylist(), strict=True)) == [
        split_filename(name) for name in names
    ]
    assert len(set(split.directories.to_pylist())) == len(split.directories)  # each directory once
    assert split.hashes.tolist() == [hash_of_name(name) for name in names]
    assert split.hashes[split.order].tolist() == sorted(split.hashes.tolist())


@pytest.mark.parametrize("hash_mask", [(1 << 64) - 1, 0x3, 0x0])
def test_every_name_is_found_at_its_row_and_no_other_name_is_found_even_when_hashes_collide(
    monkeypatch: pytest.MonkeyPatch, hash_mask: int
) -> None:
    monkeypatch.setattr(file_columns, "HASH_MASK", hash_mask)  # 0x3: four hash values; 0: one
    columns = FileColumns.from_table_files(files_named(NAMES))
    for row, name in enumerate(NAMES):
        assert columns.row_of(name) == row
        assert columns.filename(row) == name
    absent = ["tables/t/data/partition=p0/9999.parquet", "0001.parquet", "tables/t/data/0001.parquet"]
    assert [columns.row_of(name) for name in absent] == [None, None, None]
    assert columns.rows_of([*NAMES[:3], *absent]) == [0, 1, 2, None, None, None]
    assert columns.duplicate_filename() is None


@pytest.mark.parametrize("hash_mask", [(1 << 64) - 1, 0x3])
def test_columns_taken_and_joined_find_every_name_they_hold_without_hashing_again(
    monkeypatch: pytest.MonkeyPatch, hash_mask: int
) -> None:
    monkeypatch.setattr(file_columns, "HASH_MASK", hash_mask)
    columns = FileColumns.from_table_files(files_named(NAMES[:150]))
    # A fold derives its index: building one by hashing every name would fail.
    monkeypatch.setattr(FileColumns, "_build_index", None)
    kept_rows = np.arange(0, 150, 3)
    kept = columns.take_files(kept_rows)
    monkeypatch.undo()
    monkeypatch.setattr(file_columns, "HASH_MASK", hash_mask)
    added = FileColumns.from_table_files(files_named(NAMES[150:]))
    nothing = FileColumns.from_table_files([])
    monkeypatch.setattr(FileColumns, "_build_index", None)
    joined = kept.concat(added)
    expected = [NAMES[i] for i in kept_rows.tolist()] + NAMES[150:]
    for row, name in enumerate(expected):
        assert joined.row_of(name) == row
        assert joined.filename(row) == name
    dropped = [NAMES[i] for i in range(150) if i % 3]
    assert joined.rows_of(dropped) == [None] * len(dropped)
    assert joined.duplicate_filename() is None
    assert kept.concat(nothing).rows_of(expected) == [*range(len(kept_rows)), *[None] * 51]


@pytest.mark.parametrize("hash_mask", [(1 << 64) - 1, 0x3])
def test_columns_appended_keep_their_rows_and_find_every_name_without_hashing_the_first_again(
    monkeypatch: pytest.MonkeyPatch, hash_mask: int
) -> None:
    monkeypatch.setattr(file_columns, "HASH_MASK", hash_mask)
    first = FileColumns.from_table_files(files_named(NAMES[:120]))
    names = NAMES[120:]
    referenced = len(names) - 2
    added = FileColumns.of_new_files(
        names[:referenced],
        ["root", "p9"] * (referenced // 2) + ["root"] * (referenced % 2),
        [5] * referenced,
        [True] * referenced,
        [False] * referenced,
        names[referenced:],
        9_000,
    )
    nothing = FileColumns.empty()
    monkeypatch.setattr(FileColumns, "_build_index", None)  # the two indexes are merged, not rebuilt

    joined = first.append(added)

    assert joined.table_files() == [*first.table_files(), *added.table_files()]
    for row, name in enumerate(NAMES):
        assert joined.row_of(name) == row
    assert joined.rows_of(NAMES) == list(range(len(NAMES)))
    assert joined.partition_ids == ["root", "p9"]  # the first's dictionary, extended by what it lacked
    assert joined.table_file(120) == TableFile(
        names[0],
        (ref(names[0], "root", rows=5, approximate=True, whole_file=False)._replace(last_update_time=9_000),),
        9_000,
    )
    assert joined.table_file(len(NAMES) - 1) == TableFile(NAMES[-1], (), 9_000)
    assert nothing.append(added).table_files() == added.table_files()


def test_a_name_that_is_not_utf_8_is_held_by_no_columns_and_looking_it_up_says_so() -> None:
    state = new_state(split_points=["m"], references=[ref("a", "p1")])
    state.file_columns()
    for strange in ("tables/t/data/\udc80.parquet", "tables/\udc80/data/a.parquet"):  # as JSON escapes carry
        assert strange not in state.files_by_name
        assert state.files_present([strange]) == [False]
        assert state.files_present([strange, *NAMES[:100]]) == [False] * 101
        with pytest.raises(FileNotFoundInStateError):
            state.file(strange)


def test_a_name_held_twice_is_reported_even_among_colliding_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_columns, "HASH_MASK", 0x1)
    columns = FileColumns.from_table_files(files_named([*NAMES[:20], NAMES[5]]))
    assert columns.duplicate_filename() == NAMES[5]


def test_the_columns_give_back_the_files_they_were_built_from() -> None:
    files = [
        TableFile("tables/t/x/a", (ref("tables/t/x/a", "p1", job_id="j"), ref("tables/t/x/a", "p2")), 5),
        TableFile("tables/t/y/b", (), 6),
        TableFile("c", (ref("c", "p2", rows=7, approximate=True, whole_file=False),), 8),
    ]
    columns = FileColumns.from_table_files(files)
    assert columns.table_files() == files
    assert columns.table_file(1) == files[1]
    assert columns.take_files(np.array([2, 0])).table_files() == [files[2], files[0]]
    assert columns.concat(FileColumns.from_table_files(files_named(["z"]))).table_files() == [
        *files,
        *files_named(["z"]),
    ]


def test_a_removed_base_file_is_a_tombstone_gone_from_every_view() -> None:
    state = folded_state()
    state.remove_file("a")
    assert "a" not in state.files_by_name and state.files_by_name.get("a") is None
    assert sorted(state.files_by_name) == ["b", "c", "d"]
    assert state.reference_count() == 4 and len(state.files_by_name) == 3
    with pytest.raises(KeyError):
        state.remove_file("a")
    state.put_file(TableFile("a", (), 3_000))  # back, replacing the tombstone
    assert state.file("a") == TableFile("a", (), 3_000) and state.reference_count() == 4


def test_a_folded_state_equals_the_same_state_unfolded() -> None:
    unfolded = folded_state()
    unfolded.put_file(TableFile("e", (ref("e", "p2"),), 3_000))
    unfolded.remove_file("b")
    unfolded.put_file(TableFile("a", (ref("a", "p1", job_id="job"),), 3_000))
    folded = unfolded.copy()
    folded.file_columns()
    assert folded._overlay == {} and unfolded._overlay != {}
    assert folded == unfolded and unfolded == folded
    assert sorted(folded.files(), key=lambda f: f.filename) == sorted(
        unfolded.files(), key=lambda f: f.filename
    )
    assert folded.reference_count() == unfolded.reference_count() == 5


def test_the_overlay_folds_once_it_outgrows_the_base_and_never_inside_a_journal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state_module, "FOLD_MIN_FILES", 2)
    state = folded_state()
    mark = state.begin_changes()
    state.put_files(files_named(["x1", "x2", "x3", "x4"]))
    assert len(state._overlay) == 4  # a journal is open: no fold
    state.keep_changes(mark)
    assert state._overlay == {} and state._base.file_count == 8  # folded when the journal closed
    state.put_files(files_named(["y1", "y2", "y3"]))
    assert state._overlay == {} and state.file("y3") == files_named(["y1", "y2", "y3"])[2]


def test_undo_after_a_fold_puts_back_the_folded_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "FOLD_MIN_FILES", 2)
    state = folded_state()
    state.put_files(files_named(["x1", "x2", "x3"]))  # folds: no journal is open
    assert state._overlay == {}
    before = state.copy()
    mark = state.begin_changes()
    state.remove_file("x1")
    state.remove_file("a")
    state.put_file(TableFile("x2", (), 9_000))
    state.put_files(files_named(["n1", "n2", "n3"]))
    state.clear_files()
    state.put_files(files_named(["m1"]))
    state.undo_changes(mark)
    assert state == before and state.reference_count() == before.reference_count() == 8


def test_a_snapshot_of_base_and_overlay_loads_as_the_same_state() -> None:
    state = folded_state()
    state.remove_file("a")
    state.put_file(TableFile("e", (), 3_000))
    state.put_file(TableFile("c", (ref("c", "p1", job_id="j1"),), 3_000))
    loaded = state_from_parquet(state.schema, *state_to_parquet(state), state.transaction_number)
    assert loaded == state and loaded.reference_count() == state.reference_count()


def test_a_version_1_snapshot_with_one_filename_column_still_loads() -> None:
    state = folded_state()
    state.put_file(TableFile("tables/t/data/partition=p1/e.parquet", (), 3_000))
    partitions_bytes, files_bytes = state_to_parquet(state)
    v2 = pq.read_table(io.BytesIO(files_bytes))
    filenames = pc.binary_join_element_wise(
        v2.column("directory").cast(pa.string()), v2.column("base_name").cast(pa.string()), ""
    )
    columns = {"filename": filenames.cast(pa.large_string()), "job_id": v2.column("job_id").cast(pa.string())}
    v1 = pa.Table.from_arrays(
        [columns.get(f.name) or v2.column(f.name) for f in parquet_codec._FILES_SCHEMA_V1],
        schema=parquet_codec._FILES_SCHEMA_V1.with_metadata(
            {**(v2.schema.metadata or {}), b"statestore.snapshot.version": b"1"}
        ),
    )
    sink = io.BytesIO()
    pq.write_table(v1, sink)
    loaded = state_from_parquet(state.schema, partitions_bytes, sink.getvalue(), state.transaction_number)
    assert loaded == state


def test_partitions_loaded_as_columns_read_change_and_undo_like_a_dictionary() -> None:
    state = new_state(split_points=["m"], references=[ref("a", "p1")])
    loaded = state_from_parquet(state.schema, *state_to_parquet(state), state.transaction_number)
    assert loaded._partition_base is not None and loaded.partitions_by_id == state.partitions_by_id
    assert "p1" in loaded.partitions_by_id and "nope" not in loaded.partitions_by_id
    assert len(loaded.partitions_by_id) == 3 and loaded.partition("p1") == state.partition("p1")
    before = loaded.copy()
    mark = loaded.begin_changes()
    parent, left, right = loaded.partition("p1").split(0, "f", "p1a", "p1b")
    loaded.put_partitions((parent, left, right))
    assert len(loaded.partitions_by_id) == 5 and loaded.partition("p1") == parent
    assert sorted(loaded.partitions_by_id) == ["p1", "p1a", "p1b", "p2", "root"]
    loaded.replace_partitions(())
    assert len(loaded.partitions_by_id) == 0
    loaded.undo_changes(mark)
    assert loaded == before == state and len(loaded.partitions_by_id) == 3


def test_whether_one_name_is_held_reads_the_overlay_over_the_base() -> None:
    state = folded_state()  # base: a, b, c, d
    state.remove_file("a")  # a tombstone over the base
    state.put_file(TableFile("e", (ref("e", "p1"),), 3_000))  # only in the overlay
    for name, held in [("a", False), ("b", True), ("e", True), ("z", False), (7, False), (None, False)]:
        assert state.files_present([name]) == [held], name
    assert state.files_present(["a", "b", "e", "z", 7]) == [False, True, True, False, False]


def test_a_name_that_is_not_a_string_is_held_by_no_state_as_a_dict_would_say() -> None:
    state = folded_state()
    for name in [7, None, b"a", 1.5]:
        assert state.files_by_name.get(name) is None  # type: ignore[call-overload]
        assert name not in state.files_by_name
        with pytest.raises(FileNotFoundInStateError):
            state.file(name)  # type: ignore[arg-type]


def test_reference_rows_claimed_by_are_the_rows_a_scan_of_the_job_codes_finds() -> None:
    rng = random.Random(11)
    jobs = [None, None, "job-a", "job-b", "job-c", "job-d"]

    def files(prefix: str, count: int) -> list[TableFile]:
        made = []
        for i in range(count):
            name = f"{prefix}/f{i}"
            references = [ref(name, f"p{k}", job_id=rng.choice(jobs)) for k in range(rng.randrange(4))]
            made.append(TableFile(name, tuple(references), 1))
        return made

    first = FileColumns.from_table_files(files("one", 300))
    # Joined columns name jobs through a merged dictionary (a job of both parts keeps one code).
    joined = first.concat(FileColumns.from_table_files(files("two", 200)))
    for columns in (first, joined):
        all_codes = list(range(len(columns.job_ids)))
        twice = [*all_codes, *all_codes]
        for codes in ([], *([c] for c in all_codes), all_codes[:2], all_codes[::-1], twice):
            found = columns.reference_rows_claimed_by(codes)
            assert found.tolist() == np.flatnonzero(np.isin(columns.job_codes, codes)).tolist(), codes
            assert found.dtype == np.int64


def test_job_codes_of_finds_every_code_a_job_id_has_and_none_for_unknown_ids() -> None:
    files = [
        TableFile(name, (ref(name, "root", job_id=job),), 1)
        for name, job in (("a", "job1"), ("b", "job2"), ("c", None), ("d", "job1"))
    ]
    columns = FileColumns.from_table_files(files)
    code = {job: columns.job_ids.index(job) for job in ("job1", "job2")}

    assert columns.job_codes_of(["job1"]) == [code["job1"]]
    assert sorted(columns.job_codes_of(["job2", "job1", "unknown"])) == sorted(code.values())
    assert columns.job_codes_of([]) == [] and columns.job_codes_of(["unknown"]) == []
    # A dictionary that names a job twice (columns joined from parts): both of its codes are found.
    twice = FileColumns.from_table_files(files)
    twice.job_ids.append("job2")
    assert twice.job_codes_of(["job2"]) == [code["job2"], len(twice.job_ids) - 1]
