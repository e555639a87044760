"""The queryable view's item values as the DynamoDB adapter stores them: every kind reads back equal, and a
damaged item is a CodecError naming what is wrong."""

from __future__ import annotations

import pytest

from statestore.codec.view_items import view_value_from_json, view_value_to_json
from statestore.errors import CodecError
from statestore.model.files import FileReference, TableFile
from statestore.model.partitions import Partition, Range, Region
from statestore.views.queryable_view import FilePart, FileParts, ViewValue
from statestore.views.view_index import PlacedPartition

REFERENCE = FileReference("tables/t/data/a.parquet", "p1", 12, True, False, "job-ü", 1_767_225_600_000)


@pytest.mark.parametrize(
    "value",
    [
        REFERENCE,
        TableFile(REFERENCE.filename, (REFERENCE, REFERENCE._replace(partition_id="p2", job_id=None)), 5),
        TableFile("tables/t/data/gone.parquet", (), 7),
        FileParts(REFERENCE.filename, 3, 5),
        FilePart(REFERENCE.filename, 2, (REFERENCE, REFERENCE._replace(partition_id="p2", job_id=None))),
        PlacedPartition(
            Partition("p1", Region((Range(b"\x00\xff", b"\x10"), Range(-5))), "root", ("a", "b"), False, 0),
            ("root",),
            b"\x00",
        ),
        PlacedPartition(Partition("root", Region((Range(""),))), (), ""),
        "root",
    ],
    ids=[
        "reference",
        "file",
        "unreferenced file",
        "file in parts",
        "part of a file",
        "bytes and int partition",
        "root partition",
        "root id",
    ],
)
def test_every_kind_of_item_reads_back_equal(value: ViewValue) -> None:
    assert view_value_from_json(view_value_to_json(value)) == value


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ('{"f": {}, "r": {}}', "one kind"),
        ('{"x": 1}', "unknown queryable view item kind 'x'"),
        ('{"root": 3}', "must name a partition id"),
        ('{"fs": {"filename": "a", "parts": "2", "last_update_time": 5}}', r"parts: expected an integer"),
        ('{"fp": {"filename": "a", "number": 0}}', "references"),
        ('{"r": {"filename": "a"}}', "partition_id"),
        ('{"p": {"id": "p1"}}', "missing field 'partition'"),  # a partition as format 1 wrote it
        (
            '{"p": {"partition": {"id": "p", "parent_id": null, "child_ids": [], "leaf": true,'
            ' "dimension": -1, "region": [{"min": "", "max": null}]}, "ancestor_ids": [3], "cell_min": ""}}',
            r"ancestor_ids\[0\]: expected a string",
        ),
    ],
)
def test_a_damaged_item_is_a_codec_error_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(CodecError, match=problem):
        view_value_from_json(text)
