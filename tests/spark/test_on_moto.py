"""The jobs on the embedded default: data in S3 through pyarrow's S3FileSystem, the state in DynamoDB,
commits through the SQS FIFO queue and the committer Lambda, all on a local moto server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_client.committer import QueueCommitter, SyncCommitter
from spark_client.compaction import compact
from spark_client.data_store import DataStore
from spark_client.datasource import FORMAT
from spark_client.incremental import read_added_since
from spark_client.ingest import ingest
from spark_client.query import query
from spark_client.splitting import split_partitions
from statestore.adapters.aws.clients import make_client
from statestore.adapters.aws.sqs_queue import provision_queues
from statestore.local.runtime import LocalRuntime
from tests.fixtures.aws_servers import moto_server, unique_resources  # noqa: F401  (session fixture)
from tests.spark.conftest import KEY_SCHEMA, Instance, MakeSourceTable, as_tuples, dataframe, key_rows

pytestmark = [pytest.mark.spark, pytest.mark.e2e]


@pytest.fixture
def runtime(moto_server: str) -> Iterator[LocalRuntime]:  # noqa: F811
    """The committer and its poller for a new instance on the session's moto server."""
    resources = unique_resources("spark")
    with LocalRuntime.start(
        resources, endpoint_url=moto_server, snapshot_interval=None, cleanup_interval=None
    ) as rt:
        yield rt


def test_ingest_query_compact_split_and_read_incrementally_through_the_queue(
    spark: SparkSession, runtime: LocalRuntime
) -> None:
    client = runtime.client()
    table_id = client.create_table(f"events-{uuid.uuid4().hex[:6]}", KEY_SCHEMA, [5_000]).table_id
    data = DataStore.s3(runtime.resources.bucket, endpoint_url=runtime.endpoint_url)
    assert data.endpoint_override is not None and data.scheme == "http"
    committer = QueueCommitter(runtime.sender(), wait_timeout=60)
    store = client.state_store(table_id)
    batches = [key_rows(1_500, seed=300), key_rows(1_500, seed=301)]

    for rows in batches:
        result = ingest(dataframe(spark, KEY_SCHEMA, rows), store, data, committer)
        assert result.outcome is not None and result.outcome.committed and result.outcome.request_id
    expected = sorted(batches[0] + batches[1])

    state = client.state_store(table_id).state()
    assert sum(r.number_of_rows for r in state.file_references()) == 3_000
    assert all(data.exists(f.filename) for f in state.files())
    assert all(f.filename.startswith(f"tables/{table_id}/data/") for f in state.files())
    assert as_tuples(query(spark, store, data, {"key": (1_000, 6_000)})) == [
        r for r in expected if 1_000 <= r[0] < 6_000
    ]

    compacted = compact(spark, store, data, committer)
    assert len(compacted.committed) == 2 and compacted.lost == ()
    assert as_tuples(query(spark, store, data)) == expected

    decisions = split_partitions(spark, store, data, SyncCommitter(client.state_store), max_rows=1_000)
    assert all(d.outcome is not None and d.outcome.committed for d in decisions)
    assert as_tuples(query(spark, store, data)) == expected

    incremental = read_added_since(spark, store, data, 0)
    assert as_tuples(incremental.rows) == expected
    assert read_added_since(spark, store, data, incremental.to_watermark).files == ()


def test_a_retried_ingest_with_the_same_idempotency_key_adds_its_rows_once(
    spark: SparkSession, runtime: LocalRuntime
) -> None:
    client = runtime.client()
    table_id = client.create_table(f"reruns-{uuid.uuid4().hex[:6]}", KEY_SCHEMA, [5_000]).table_id
    data = DataStore.s3(runtime.resources.bucket, endpoint_url=runtime.endpoint_url)
    committer = QueueCommitter(runtime.sender(), wait_timeout=60)
    store = client.state_store(table_id)
    rows = key_rows(400, seed=310)
    key = ("daily-load", "batch-0007")

    # The first driver sends its commit and dies before the answer (pending); the retried driver runs the
    # same batch again: its commit is recognised as the same request, and only one copy of the rows lands.
    first = ingest(
        dataframe(spark, KEY_SCHEMA, rows), store, data, committer, wait=False, idempotency_key=key
    )
    assert first.outcome is not None and first.outcome.pending and not first.committed
    retried = ingest(dataframe(spark, KEY_SCHEMA, rows), store, data, committer, idempotency_key=key)
    assert retried.committed and retried.outcome is not None
    assert retried.outcome.request_id == first.outcome.request_id

    # A third run after the commit is known writes nothing at all.
    again = ingest(dataframe(spark, KEY_SCHEMA, rows), store, data, committer, idempotency_key=key)
    assert again.already_committed and again.files == () and again.outcome == retried.outcome

    state = client.state_store(table_id).state()
    assert sum(r.number_of_rows for r in state.file_references()) == 400
    assert as_tuples(query(spark, store, data)) == sorted(rows)
    assert client.log.latest_number(table_id) == retried.outcome.transaction_number


def test_the_data_source_appends_through_the_queue_once_and_reads_back_from_s3(
    spark: SparkSession, runtime: LocalRuntime
) -> None:
    client = runtime.client()
    name = f"source-{uuid.uuid4().hex[:6]}"
    table_id = client.create_table(name, KEY_SCHEMA, [5_000]).table_id
    options = {"resources": runtime.resources.to_json(), "endpoint": runtime.endpoint_url}
    rows = key_rows(2_000, seed=302)
    committed_before = runtime.stats.committed

    dataframe(spark, KEY_SCHEMA, rows).write.format(FORMAT).options(**options).mode("append").save(name)
    # The append returns once the request's status says committed; the poller counts its batch a moment
    # later, after the handler returns. wait_idle waits for that count.
    runtime.wait_idle()

    assert runtime.stats.committed - committed_before == 1  # ONE commit request, applied once
    assert client.log.latest_number(table_id) == 2
    files = client.state_store(table_id).state().files()
    data = DataStore.s3(runtime.resources.bucket, endpoint_url=runtime.endpoint_url)
    assert files and all(data.exists(f.filename) for f in files)  # in the instance's bucket
    assert as_tuples(spark.read.format(FORMAT).options(**options).load(name)) == sorted(rows)


def test_an_append_whose_commit_has_no_outcome_in_time_keeps_its_files(
    spark: SparkSession, make_source_table: MakeSourceTable, source_instance: Instance
) -> None:
    # The instance's queue exists but no committer consumes it: the request stays pending.
    provision_queues(source_instance.resources, make_client("sqs", endpoint_url=source_instance.endpoint_url))
    table = make_source_table(KEY_SCHEMA, [5_000])
    df = dataframe(spark, KEY_SCHEMA, key_rows(500, seed=303))

    with pytest.raises(Exception, match="append of 4 file\\(s\\).* has no outcome yet .*request id"):
        df.write.format(FORMAT).options(**table.options, committer="queue", commitTimeout="1").mode(
            "append"
        ).save()

    assert table.log_length() == 1
    assert len(table.data_files()) == 4  # two tasks x two leaves, kept for the commit still on its way
