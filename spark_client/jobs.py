"""The Spark jobs as programs: ``spark-submit statestore_job.py JOB ...`` or ``python -m spark_client.jobs``.

Jobs: ``ingest`` (Parquet files into a table), ``compact``, ``split``, ``query`` (a region's rows to Parquet
files) and ``incremental`` (rows added after a watermark to Parquet files). Each takes the table's name and
finds the instance as the ``statestore`` CLI and the data source do, from the first of: ``--resources``
(the stack's ``StatestoreResources`` output: JSON text or a file), ``--stack`` (read from the
CloudFormation stack's outputs), ``--instance``, ``$STATESTORE_RESOURCES``, ``$STATESTORE_INSTANCE_ID``,
else the instance ``local`` (an instance id's bucket is ``$STATESTORE_BUCKET`` if set).
``--endpoint-url`` / ``--dynamodb-endpoint-url`` (``$AWS_ENDPOINT_URL`` / ``$AWS_ENDPOINT_URL_DYNAMODB``)
point at a local endpoint (the embedded mode: the ``export`` lines ``statestore local`` prints are all a
job needs); on AWS nothing else is needed. The driver asks S3 for the bucket's region itself, so the data
files are read and written where they are even when the job runs in another region.

Input and output locations are ``s3://bucket/prefix`` or a local directory, moved with pyarrow inside the
tasks (no Hadoop S3 connector needed). Ingest, compaction and splitting print progress lines (files, rows,
seconds) on stderr unless ``--quiet``. Each job prints ONE JSON line with what it did, and exits 0 when it
did it, 1 when it failed or its commit was rejected, 2 on a usage error, 3 when a commit's outcome is not
known yet (the JSON names the request id to look up with ``statestore status``), and 4 when the instance
cannot be reached (nothing answers at a local endpoint).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from spark_client.committer import CommitReport, QueueCommitter
from spark_client.compaction import compact
from spark_client.data_store import DataStore
from spark_client.errors import CommitPendingError, CommitRejectedError
from spark_client.incremental import read_added_since
from spark_client.ingest import ingest
from spark_client.progress import hide_progress, show_progress
from spark_client.query import query
from spark_client.splitting import split_partitions
from statestore.errors import (
    ConnectionSettingsError,
    EndpointUnavailableError,
    ResourceNotFoundError,
    StateStoreError,
    TableNotFoundError,
)
from statestore.instance import POSTGRES_URL_ENV, ResourceNames, ResourcesSettingError
from statestore.instance import resolve_resources as names_by_the_rule

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PENDING, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4


class JobError(Exception):
    """A job could not run as asked; the message says why."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --- where things are -------------------------------------------------------------------------------


def resolve_resources(
    resources: str | None,
    stack: str | None,
    region: str | None,
    instance: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ResourceNames:
    """The instance's resource names, from the first of ``--resources``, ``--stack``, ``--instance``,
    ``$STATESTORE_RESOURCES``, ``$STATESTORE_INSTANCE_ID``, else instance ``local`` (as the CLI finds it)."""
    text, where = resources, "--resources"
    if not resources and stack:
        import boto3

        described = boto3.client("cloudformation", region_name=region).describe_stacks(StackName=stack)
        outputs = {o["OutputKey"]: o["OutputValue"] for o in described["Stacks"][0].get("Outputs", [])}
        if "StatestoreResources" not in outputs:
            raise JobError(f"stack {stack!r} has no StatestoreResources output: is it a statestore stack?")
        text, where = outputs["StatestoreResources"], f"stack {stack}'s StatestoreResources"
    try:
        return names_by_the_rule(
            text, instance, environ=environ, resources_setting=where, instance_setting="--instance"
        )
    except ResourcesSettingError as e:
        raise JobError(str(e), EXIT_USAGE) from None


def check_endpoint(url: str | None, option: str) -> None:
    """Fail at once (not after minutes of retries) when nothing answers at a local endpoint, and give a
    local endpoint fake credentials when none are configured (emulators accept any), as the CLI does."""
    from statestore.adapters.aws.endpoints import check_endpoint as check

    try:
        check(url, option)
    except ConnectionSettingsError as e:
        raise JobError(str(e), EXIT_USAGE) from None
    except EndpointUnavailableError as e:
        raise JobError(str(e), EXIT_UNAVAILABLE) from None


def bucket_region(s3: Any, bucket: str) -> str | None:
    """The bucket's region as S3 reports it (``x-amz-bucket-region``), None if S3 does not say."""
    response = s3.head_bucket(Bucket=bucket)
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    region = headers.get("x-amz-bucket-region")
    return str(region) if region else None


@dataclass
class Instance:
    """A statestore instance as a job reaches it: its clients, its committer and its bucket."""

    resources: ResourceNames
    endpoint_url: str | None = None
    dynamodb_endpoint_url: str | None = None
    region: str | None = None
    wait_timeout: float = 600.0

    @cached_property
    def backend(self) -> Any:
        from statestore.adapters.aws.backend import AwsBackend

        return AwsBackend.connect(
            self.resources,
            self.endpoint_url,
            region=self.region,
            dynamodb_endpoint_url=self.dynamodb_endpoint_url,
        )

    @cached_property
    def committer(self) -> QueueCommitter:
        from statestore.adapters.aws.clients import make_client

        sqs = make_client("sqs", endpoint_url=self.endpoint_url, region=self.region)
        return QueueCommitter(self.backend.commit_sender(sqs), wait_timeout=self.wait_timeout)

    @cached_property
    def data(self) -> DataStore:
        """The bucket, in its own region."""
        bucket = self.resources.bucket
        return DataStore.s3(
            bucket,
            endpoint_url=self.endpoint_url,
            region=bucket_region(self.backend.s3, bucket) or self.region,
        )

    @cached_property
    def file_store(self) -> Any:
        """Where tables created with ``file_store="postgres"`` keep their files: the database
        ``STATESTORE_POSTGRES_URL`` names (only the driver connects; executors never read the state), or
        None."""
        url = os.environ.get(POSTGRES_URL_ENV)
        if not url:
            return None
        from statestore.adapters.postgres import PostgresFileReferenceStore

        return PostgresFileReferenceStore.connect(url, max_connections=2)

    def store(self, table: str) -> Any:
        from statestore.services.client import StateStoreClient

        b = self.backend
        client = StateStoreClient(
            b.table_index, b.log, b.snapshot_metadata, b.blobs, file_store=self.file_store
        )
        try:
            return client.state_store(client.get_table(table).table_id)
        except (TableNotFoundError, ResourceNotFoundError) as e:
            where = self.endpoint_url or "AWS"
            raise JobError(
                f"{e} (instance {self.resources.instance_id!r} at {where}): name the instance with "
                "--instance or $STATESTORE_INSTANCE_ID (the export lines `statestore local` prints), or "
                "--resources / $STATESTORE_RESOURCES"
            ) from None

    def location(self, uri: str) -> tuple[DataStore, str]:
        """A data store and the prefix within it for ``s3://bucket/prefix`` or a local directory."""
        parsed = urlparse(uri)
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise JobError(f"{uri!r} names no bucket", EXIT_USAGE)
            store = self.data if parsed.netloc == self.resources.bucket else self._other_bucket(parsed.netloc)
            return store, parsed.path.strip("/")
        if parsed.scheme not in ("", "file"):
            raise JobError(f"{uri!r}: locations are s3://bucket/prefix or a local directory", EXIT_USAGE)
        return DataStore.local(parsed.path if parsed.scheme else uri), ""

    def _other_bucket(self, bucket: str) -> DataStore:
        return DataStore.s3(
            bucket,
            endpoint_url=self.endpoint_url,
            region=bucket_region(self.backend.s3, bucket) or self.region,
        )


# --- moving rows in and out -------------------------------------------------------------------------


def parquet_files(store: DataStore, prefix: str) -> list[str]:
    """The ``.parquet`` files under ``prefix`` (a file itself, or a directory), as names in ``store``."""
    fs = store.filesystem()
    base = store.path(prefix) if prefix else store.base
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.File:
        return [prefix]
    if info.type == pafs.FileType.NotFound:
        raise JobError(f"nothing at {store.uri(prefix)}")
    selector = pafs.FileSelector(base, recursive=True)
    files = [
        i.path[len(store.base) + 1 :]
        for i in fs.get_file_info(selector)
        if i.type == pafs.FileType.File and i.path.endswith(".parquet")
    ]
    if not files:
        raise JobError(f"no .parquet files under {store.uri(prefix)}")
    return sorted(files)


def read_parquet(spark: SparkSession, store: DataStore, files: Sequence[str]) -> DataFrame:
    """A DataFrame of the files' rows, read by pyarrow in the tasks (one file per task)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = pq.read_schema(store.path(files[0]), filesystem=store.filesystem())
    names = spark.createDataFrame([(f,) for f in files], "file string").repartition(len(files))

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for file in batch.column(0).to_pylist():
                table = pq.read_table(store.path(file), filesystem=store.filesystem())
                if not table.schema.equals(schema):
                    raise ValueError(
                        f"{store.uri(file)} has schema {table.schema}, not {schema} as the first"
                    )
                yield from table.to_batches()

    return names.mapInArrow(read, from_arrow_schema(schema))


def write_parquet(df: DataFrame, store: DataStore, prefix: str) -> tuple[int, int]:
    """Write ``df`` as one Parquet file per task under ``prefix``; returns ``(files, rows)``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context else 0
        name = f"{prefix}/part-{part:05d}.parquet" if prefix else f"part-{part:05d}.parquet"
        store.ensure_parent(name)
        rows = 0
        with pq.ParquetWriter(store.path(name), schema, filesystem=store.filesystem()) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        yield pa.RecordBatch.from_pydict({"file": [name], "rows": [rows]})

    written = df.mapInArrow(write, "file string, rows long").collect()
    return len(written), sum(r["rows"] for r in written)


# --- the jobs ---------------------------------------------------------------------------------------


def _outcome(outcome: CommitReport | None) -> dict[str, Any] | None:
    if outcome is None:
        return None
    return {
        "committed": outcome.committed,
        "transaction_number": outcome.transaction_number,
        "request_id": outcome.request_id,
        "reason": outcome.reason,
        "pending": outcome.pending,
    }


def run_ingest(spark: SparkSession, instance: Instance, args: argparse.Namespace) -> dict[str, Any]:
    store = instance.store(args.table)
    source, prefix = instance.location(args.input)
    rows = read_parquet(spark, source, parquet_files(source, prefix))
    result = ingest(rows, store, instance.data, instance.committer, tasks=args.tasks)
    return {"rows": result.rows, "files": len(result.files), "outcome": _outcome(result.outcome)}


def run_compact(spark: SparkSession, instance: Instance, args: argparse.Namespace) -> dict[str, Any]:
    store = instance.store(args.table)
    result = compact(
        spark, store, instance.data, instance.committer, min_files=args.min_files, max_files=args.max_files
    )
    return {
        "references_split": result.references_split,
        "jobs_committed": len(result.committed),
        "rows_compacted": sum(f.rows for f in result.committed),
        "jobs_lost": [{"job_id": job.job_id, "why": why} for job, why in result.lost],
    }


def run_split(spark: SparkSession, instance: Instance, args: argparse.Namespace) -> dict[str, Any]:
    store = instance.store(args.table)
    decisions = split_partitions(spark, store, instance.data, instance.committer, max_rows=args.max_rows)
    return {
        "split": [d.partition_id for d in decisions if d.outcome is not None and d.outcome.committed],
        "not_split": [d.partition_id for d in decisions if d.outcome is None or not d.outcome.committed],
    }


def run_query(spark: SparkSession, instance: Instance, args: argparse.Namespace) -> dict[str, Any]:
    store = instance.store(args.table)
    region = _key_ranges(store.schema, args.key_range)
    target, prefix = instance.location(args.output)
    files, rows = write_parquet(query(spark, store, instance.data, region), target, prefix)
    return {"rows": rows, "files": files, "output": args.output}


def run_incremental(spark: SparkSession, instance: Instance, args: argparse.Namespace) -> dict[str, Any]:
    store = instance.store(args.table)
    batch = read_added_since(spark, store, instance.data, args.since)
    target, prefix = instance.location(args.output)
    files, rows = write_parquet(batch.rows, target, prefix)
    return {"rows": rows, "files": files, "output": args.output, "next_watermark": batch.to_watermark}


def _key_ranges(schema: Any, ranges: Sequence[str]) -> dict[str, tuple[Any, Any]] | None:
    """``KEY=MIN:MAX`` options (either side may be empty: unbounded) as query ranges, typed by the schema."""
    if not ranges:
        return None
    types = {f.name: f.type for f in schema.row_keys}
    out: dict[str, tuple[Any, Any]] = {}
    for item in ranges:
        name, sep, bounds = item.partition("=")
        low, colon, high = bounds.partition(":")
        if not sep or not colon:
            raise JobError(f"--key-range {item!r}: write KEY=MIN:MAX (either side may be empty)", EXIT_USAGE)
        if name not in types:
            raise JobError(
                f"--key-range {item!r}: {name!r} is not a row key of the table ({sorted(types)})", 2
            )
        out[name] = (_typed(low, types[name], item), _typed(high, types[name], item))
    return out


def _typed(text: str, type_name: str, item: str) -> Any:
    if text == "":
        return None
    try:
        return int(text) if type_name in ("int", "long") else text.encode() if type_name == "bytes" else text
    except ValueError:
        raise JobError(f"--key-range {item!r}: {text!r} is not a {type_name}", EXIT_USAGE) from None


JOBS = {
    "ingest": run_ingest,
    "compact": run_compact,
    "split": run_split,
    "query": run_query,
    "incremental": run_incremental,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="statestore_job.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--table", required=True, help="the table's name (or id)")
    common.add_argument("--resources", help="the stack's StatestoreResources output: JSON text or a file")
    common.add_argument("--stack", help="read the resources from this CloudFormation stack's outputs")
    common.add_argument(
        "--instance",
        help="the instance id (default: $STATESTORE_RESOURCES, else $STATESTORE_INSTANCE_ID, else local)",
    )
    common.add_argument("--region", help="the instance's AWS region (default: the usual AWS settings)")
    common.add_argument("--endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL"), help="a local endpoint")
    common.add_argument(
        "--dynamodb-endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"), help="DynamoDB's own"
    )
    common.add_argument(
        "--quiet", action="store_true", help="print no progress lines on stderr (files, rows, seconds)"
    )
    common.add_argument(
        "--wait-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for a commit's outcome (default 600)",
    )
    jobs = p.add_subparsers(dest="job", required=True)
    ingest_p = jobs.add_parser("ingest", parents=[common], help="add Parquet files' rows to the table")
    ingest_p.add_argument("--input", required=True, help="s3://bucket/prefix or a local directory of Parquet")
    ingest_p.add_argument(
        "--tasks", type=_positive, help="write with this many tasks (default: one per file)"
    )
    compact_p = jobs.add_parser("compact", parents=[common], help="merge each busy leaf's files into one")
    compact_p.add_argument("--min-files", type=_positive, default=2)
    compact_p.add_argument("--max-files", type=_positive, default=32)
    split_p = jobs.add_parser(
        "split", parents=[common], help="split leaves holding more than --max-rows rows"
    )
    split_p.add_argument("--max-rows", type=_positive, required=True)
    query_p = jobs.add_parser("query", parents=[common], help="write a region's rows as Parquet")
    query_p.add_argument(
        "--key-range", action="append", default=[], metavar="KEY=MIN:MAX", help="rows with MIN <= KEY < MAX"
    )
    query_p.add_argument("--output", required=True, help="s3://bucket/prefix or a local directory")
    incremental_p = jobs.add_parser("incremental", parents=[common], help="write rows added after --since")
    incremental_p.add_argument(
        "--since", type=int, required=True, help="the watermark (a transaction number)"
    )
    incremental_p.add_argument("--output", required=True, help="s3://bucket/prefix or a local directory")
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.quiet:
        show_progress()
    try:
        return _run(args, spark)
    finally:
        hide_progress()


def _run(args: argparse.Namespace, spark: SparkSession | None) -> int:
    try:
        check_endpoint(args.endpoint_url, "--endpoint-url / $AWS_ENDPOINT_URL")
        check_endpoint(args.dynamodb_endpoint_url, "--dynamodb-endpoint-url / $AWS_ENDPOINT_URL_DYNAMODB")
        instance = Instance(
            resolve_resources(args.resources, args.stack, args.region, args.instance),
            endpoint_url=args.endpoint_url or None,
            dynamodb_endpoint_url=args.dynamodb_endpoint_url or None,
            region=args.region,
            wait_timeout=args.wait_timeout,
        )
        session = spark or SparkSession.builder.appName(f"statestore-{args.job}").getOrCreate()
        result = JOBS[args.job](session, instance, args)
    except CommitPendingError as e:
        print(json.dumps({"job": args.job, "pending": True, "request_id": e.request_id, "error": str(e)}))
        return EXIT_PENDING
    except CommitRejectedError as e:
        print(json.dumps({"job": args.job, "rejected": True, "error": str(e)}))
        return EXIT_FAILED
    except JobError as e:
        print(f"statestore_job: error: {e}", file=sys.stderr)
        return e.exit_code
    except (StateStoreError, OSError, ValueError) as e:
        print(f"statestore_job: error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps({"job": args.job, "table": args.table, **result}, default=str))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
