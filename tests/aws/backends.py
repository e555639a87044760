"""The ports under test, in memory and on AWS emulators: one behaviour suite runs against each."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from moto import mock_aws

from statestore.adapters.aws.backend import AwsBackend
from statestore.store.memory import (
    InMemoryBlobStore,
    InMemorySnapshotMetadataStore,
    InMemoryTableIndex,
    InMemoryTransactionLog,
)
from statestore.store.ports import BlobStore, TableIndex, TransactionLogStore
from statestore.store.snapshot_ports import SnapshotMetadataStore
from tests.fixtures.aws_servers import unique_resources


@dataclass
class Ports:
    name: str
    log: TransactionLogStore
    snapshot_metadata: SnapshotMetadataStore
    blobs: BlobStore
    table_index: TableIndex
    backend: AwsBackend | None = None


def _aws_ports(name: str, backend: AwsBackend) -> Ports:
    backend.provision()
    return Ports(name, backend.log, backend.snapshot_metadata, backend.blobs, backend.table_index, backend)


@contextlib.contextmanager
def open_ports(kind: str, request: pytest.FixtureRequest) -> Iterator[Ports]:
    """``kind`` is memory, moto (in-process) or dynamodb_local (with S3 on a moto server)."""
    if kind == "memory":
        blobs = InMemoryBlobStore()
        yield Ports(
            "memory",
            InMemoryTransactionLog(blobs),
            InMemorySnapshotMetadataStore(),
            blobs,
            InMemoryTableIndex(),
        )
    elif kind == "moto":
        with mock_aws():
            yield _aws_ports("moto", AwsBackend.connect(unique_resources(), region="eu-west-2"))
    else:
        backend = AwsBackend.connect(
            unique_resources(),
            region="eu-west-2",
            dynamodb_endpoint_url=request.getfixturevalue("dynamodb_local"),
            s3_endpoint_url=request.getfixturevalue("moto_server"),
        )
        yield _aws_ports("dynamodb_local", backend)
