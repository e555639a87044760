"""On S3 (moto), the orphan sweep's window is one listing from ``StartAfter``: its LIST calls follow the keys
written since the watermark, not the table's size."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from statestore.adapters.aws.backend import AwsBackend
from statestore.adapters.aws.s3_blobs import S3BlobStore
from statestore.engine.log_store import TransactionLogStateStore
from statestore.engine.orphan_sweep import SweepProgress, load_progress, save_progress, sweep_orphans
from statestore.engine.snapshots import SnapshotStore
from statestore.model import layout
from statestore.transactions import AddFiles, InitialisePartitions
from tests.builders import INT_SCHEMA, ref, tree
from tests.fixtures.aws_servers import unique_resources

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SKEW_MS = 10 * 60_000
PAGE = 100  # keys per LIST call here, so a few thousand keys make many pages
SCHEMA = INT_SCHEMA


class CountingS3:
    """The S3 client, counting ListObjectsV2 calls."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.list_calls = 0

    def list_objects_v2(self, **kwargs: Any) -> Any:
        self.list_calls += 1
        return self._client.list_objects_v2(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def backend() -> Iterator[AwsBackend]:
    with mock_aws():
        opened = AwsBackend.connect(unique_resources(), region="eu-west-2")
        opened.provision()
        yield opened


def test_a_sweep_after_n_new_keys_lists_o_n_keys_on_s3_not_the_whole_prefix(backend: AwsBackend) -> None:
    counting = CountingS3(backend.blobs.s3)
    blobs = S3BlobStore(counting, backend.blobs.bucket, page_size=PAGE)
    table_id = "t-sweep"
    store = TransactionLogStateStore(
        table_id, SCHEMA, backend.log, SnapshotStore(backend.snapshot_metadata, blobs)
    )
    store.commit(InitialisePartitions(tuple(tree(SCHEMA))))
    real_now = time.time_ns() // 1_000_000
    day0 = real_now - 30 * DAY_MS  # the writers' clocks: a month of history, then today's writes
    old = [layout.new_data_key(table_id, day0 + i * 1000) for i in range(2000)]
    for key in old:
        blobs.put(key, b"x")
    store.commit(AddFiles(tuple(ref(k) for k in old)))
    new = [layout.new_data_key(table_id, real_now) for _ in range(150)]
    for key in new:
        blobs.put(key, b"x")
    store.commit(AddFiles(tuple(ref(k) for k in new[50:])))  # 50 orphans

    # The last run was an hour ago (as the sweep sees it: its cutoff is an orphan delay behind it), its full
    # pass done.
    delay = 2 * HOUR_MS
    now = real_now + HOUR_MS + delay
    save_progress(
        blobs,
        table_id,
        SweepProgress(watermark=now - delay - HOUR_MS, full_pass_started=now, full_pass_done=now),
    )
    counting.list_calls = 0
    outcome = sweep_orphans(
        store, backend.snapshot_metadata, blobs, now=now, cutoff=now - delay, max_clock_skew_ms=SKEW_MS,
        max_upload_ms=HOUR_MS, full_pass_interval_ms=7 * DAY_MS, may_delete=lambda _key: True,
    )  # fmt: skip

    assert outcome.deleted == 50
    assert outcome.keys_listed == 150  # the new keys, none of the month's 2,000
    assert counting.list_calls <= 150 // PAGE + 2  # vs 2,150 / 100 = 22 for the whole prefix
    assert load_progress(blobs, table_id).watermark == now - delay
    assert set(blobs.list(layout.data_prefix(table_id))) == set(old) | set(new[50:])


def test_listing_pages_from_a_key_on_s3_gives_the_keys_after_it_a_page_per_call(backend: AwsBackend) -> None:
    counting = CountingS3(backend.blobs.s3)
    blobs = S3BlobStore(counting, backend.blobs.bucket, page_size=PAGE)
    keys = [f"t/data/{i:04d}" for i in range(350)]
    for key in keys:
        blobs.put(key, b"x")
    blobs.put("t/other", b"x")

    counting.list_calls = 0
    pages = blobs.list_modified_pages("t/data/", "t/data/0099")
    first = next(pages)
    assert counting.list_calls == 1  # the next page is not read until asked for
    rest = [item for page in pages for item in page]
    assert [k for k, _ in first + rest] == keys[100:]
    assert counting.list_calls == 3
    assert [k for page in blobs.list_modified_pages("t/data/") for k, _ in page] == keys
