"""Where data files live: a pyarrow filesystem and a base path (an S3 bucket or a local directory).

A file's name in the state is its key relative to the base, always under
:func:`statestore.model.layout.data_prefix`
(``tables/<table_id>/data/written/<YYYY-MM-DDTHH>/<uuid>.parquet``), so the
same name works for the bucket's own tools (garbage collection deletes ``bucket/<filename>``) and for a
local directory.

Spark has no ``s3a`` connector offline, so the jobs move data themselves with pyarrow inside their tasks.
A :class:`DataStore` is a small frozen value: it is shipped to the tasks, and each Python worker builds
(and caches) its own filesystem from it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pyarrow.fs as pafs

from statestore.model import layout
from statestore.model.clock import now_millis

_FILESYSTEMS: dict[DataStore, pafs.FileSystem] = {}
_FILESYSTEMS_LOCK = threading.Lock()


@dataclass(frozen=True)
class DataStore:
    """A base path on a pyarrow filesystem. Build one with :meth:`local` or :meth:`s3`.

    ``base`` is ``bucket`` for S3 (no scheme, no trailing slash) or an absolute directory for the local
    filesystem. Credentials for S3 come from the standard chain (environment, profile, instance role)
    unless given here.
    """

    kind: str  # "local" or "s3"
    base: str
    endpoint_override: str | None = None
    scheme: str = "https"
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def local(cls, directory: str | os.PathLike[str]) -> DataStore:
        """Data files under a local directory (created on first write)."""
        return cls("local", os.path.abspath(os.fspath(directory)).rstrip("/") or "/")

    @classmethod
    def s3(
        cls,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
    ) -> DataStore:
        """Data files in an S3 bucket; ``endpoint_url`` (``http://127.0.0.1:5000``) for a local emulator."""
        endpoint_override, scheme = None, "https"
        if endpoint_url:
            parsed = urlparse(endpoint_url)
            if not parsed.scheme or not parsed.netloc:
                raise ValueError(f"endpoint_url must look like http://host:port, got {endpoint_url!r}")
            endpoint_override, scheme = parsed.netloc, parsed.scheme
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return cls(
            "s3", bucket.strip("/"), endpoint_override, scheme, region, access_key, secret_key, session_token
        )

    def __post_init__(self) -> None:
        if self.kind not in ("local", "s3"):
            raise ValueError(f"a data store is 'local' or 's3', got {self.kind!r}")
        if not self.base:
            raise ValueError("a data store needs a bucket or a directory")

    # --- names ----------------------------------------------------------------------------------

    def new_data_file(self, table_id: str, partition_id: str) -> str:
        """A fresh file name (relative to the base) for a data file of ``partition_id``: keyed by the hour it
        is made in, not by the partition, so the orphan sweep finds it by time
        (:func:`statestore.model.layout.new_data_key`)."""
        return layout.new_data_key(table_id, now_millis())

    def path(self, filename: str) -> str:
        """The path of ``filename`` on :meth:`filesystem`."""
        return f"{self.base}/{filename.lstrip('/')}"

    def uri(self, filename: str) -> str:
        """A URI for people and other tools, e.g. ``s3://bucket/tables/...``."""
        return f"s3://{self.path(filename)}" if self.kind == "s3" else f"file://{self.path(filename)}"

    # --- I/O ------------------------------------------------------------------------------------

    def filesystem(self) -> pafs.FileSystem:
        """This process's filesystem for the store (built once per process and reused)."""
        with _FILESYSTEMS_LOCK:
            fs = _FILESYSTEMS.get(self)
            if fs is None:
                fs = _FILESYSTEMS[self] = self._build_filesystem()
            return fs

    def _build_filesystem(self) -> pafs.FileSystem:
        if self.kind == "local":
            return pafs.LocalFileSystem()
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            session_token=self.session_token,
            region=self.region,
            endpoint_override=self.endpoint_override,
            scheme=self.scheme,
        )

    def ensure_parent(self, filename: str) -> None:
        """Create the local directory a file goes in (S3 has no directories)."""
        if self.kind == "local":
            os.makedirs(os.path.dirname(self.path(filename)), exist_ok=True)

    def exists(self, filename: str) -> bool:
        info = self.filesystem().get_file_info(self.path(filename))
        return bool(info.type == pafs.FileType.File)

    def delete(self, filenames: list[str]) -> None:
        """Delete data files; ones already gone are ignored."""
        fs = self.filesystem()
        for filename in filenames:
            try:
                fs.delete_file(self.path(filename))
            except FileNotFoundError:
                pass

    def list_data_files(self, table_id: str) -> list[tuple[str, int]]:
        """Every object under the table's data prefix as ``(filename, modified epoch ms)``."""
        prefix = layout.data_prefix(table_id)
        selector = pafs.FileSelector(self.path(prefix), allow_not_found=True, recursive=True)
        out = []
        for info in self.filesystem().get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            filename = info.path[len(self.base) + 1 :] if info.path.startswith(self.base + "/") else info.path
            modified = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
            out.append((filename, modified))
        return sorted(out)
