"""Every blob store says when each object was last written (what the orphan sweep's delay counts from)."""

from __future__ import annotations

import time

from tests.aws.backends import Ports


def test_listing_with_times_gives_each_objects_last_write_sorted_by_key(ports: Ports) -> None:
    before = time.time_ns() // 1_000_000 - 1000  # S3 keeps seconds
    ports.blobs.put("t/data/b.parquet", b"b")
    ports.blobs.put("t/data/a.parquet", b"a")
    ports.blobs.put("t/other/c.parquet", b"c")
    after = time.time_ns() // 1_000_000 + 1000

    listed = ports.blobs.list_modified("t/data/")

    assert [key for key, _ in listed] == ["t/data/a.parquet", "t/data/b.parquet"]
    assert all(before <= modified <= after for _, modified in listed)
    assert [key for key, _ in listed] == ports.blobs.list("t/data/")
