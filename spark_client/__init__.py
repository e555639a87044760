"""PySpark jobs over a statestore table: ingest, compaction, partition splitting, queries, incremental reads,
and ``format("statestore-table")`` for ``spark.read`` and ``df.write`` (:func:`register`).

Data files move with pyarrow inside the Spark tasks (a local directory or S3 through pyarrow's
``S3FileSystem``); the state changes through a :class:`JobCommitter` (synchronous, or the commit queue).
"""

from spark_client.committer import CommitReport, JobCommitter, QueueCommitter, SyncCommitter
from spark_client.compaction import CompactionResult, compact
from spark_client.data_store import DataStore
from spark_client.datasource import StatestoreDataSource, register
from spark_client.errors import (
    CommitPendingError,
    CommitRejectedError,
    CompactionFailedError,
    DataFileMissingError,
    DataSourceOptionError,
    InvalidDataFileError,
    SchemaMismatchError,
)
from spark_client.gc import delete_orphan_files, find_orphan_files
from spark_client.incremental import IncrementalBatch, read_added_since
from spark_client.ingest import IngestResult, ingest, ingest_request_id
from spark_client.progress import show_progress
from spark_client.query import query, region_of
from spark_client.session import local_session
from spark_client.splitting import SplitDecision, split_partition_at, split_partitions
from spark_client.table_read import read_table
from spark_client.tables import create_table, create_temp_view, schema_of

__all__ = [
    "CommitReport",
    "CommitPendingError",
    "CommitRejectedError",
    "JobCommitter",
    "CompactionFailedError",
    "CompactionResult",
    "DataFileMissingError",
    "DataSourceOptionError",
    "DataStore",
    "InvalidDataFileError",
    "IncrementalBatch",
    "IngestResult",
    "QueueCommitter",
    "SchemaMismatchError",
    "SplitDecision",
    "StatestoreDataSource",
    "SyncCommitter",
    "compact",
    "create_table",
    "create_temp_view",
    "delete_orphan_files",
    "find_orphan_files",
    "ingest",
    "ingest_request_id",
    "local_session",
    "query",
    "read_added_since",
    "read_table",
    "register",
    "region_of",
    "schema_of",
    "show_progress",
    "split_partition_at",
    "split_partitions",
]
