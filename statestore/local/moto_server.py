"""moto in server mode on this machine: the embedded default's S3 and SQS, optionally keeping S3 on disk.

It serves this machine only: bound to ``host`` (127.0.0.1), and behind
:class:`statestore.local.local_only.LocalOnly`, which refuses requests with a foreign ``Host`` or ``Origin``.

moto keeps everything in memory. With a ``mirror_dir``, every successful S3 write or delete is copied to
that directory *before* the client is told it succeeded (write-through: a request whose copy fails gets a
500 and is retried by the client), and :func:`restore_s3` loads the copy into a fresh server. The copy holds
object bytes only: no metadata, tags, ACLs or versions.

Objects are files under ``DIR/<bucket>/``: each key segment but the last is a directory, the last is a file
named ``@`` + the segment; segments are %-quoted (``""`` as ``%``, ``.``/``..`` as ``%2E``/``%2E%2E``),
so any key maps to one path and a key and its "sub-keys" (``a`` and ``a/b``) never collide. Directories are
created 0700 and files 0600: the objects are the user's data.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from statestore.errors import EndpointUnavailableError
from statestore.local.data_dir import make_private_dirs
from statestore.local.dynamodb_local import check_port_free, free_port
from statestore.local.local_only import LocalOnly

logger = logging.getLogger(__name__)

_TEMP_PREFIX = ".tmp-"  # never a key's file (those start with "@") nor a segment (never starts with ".")
_RESERVED_SEGMENTS = {"": "%", ".": "%2E", "..": "%2E%2E"}
_STATUS_TEXT = "500 Internal Server Error"


class MotoServer:
    """A moto server on ``host:port`` in a thread of this process. Build with :meth:`start`."""

    def __init__(self, server: Any, thread: threading.Thread, endpoint_url: str, mirror: S3Mirror | None):
        """Use :meth:`start`."""
        self._server = server
        self._thread = thread
        self.endpoint_url = endpoint_url
        self.mirror = mirror

    @classmethod
    def start(cls, host: str = "127.0.0.1", port: int = 0, *, mirror_dir: Path | None = None) -> MotoServer:
        """Serve on ``host:port`` (0: a free port); with ``mirror_dir``, copy S3 objects there as they are
        written. Raises EndpointUnavailableError if moto is not installed or the port is taken."""
        try:
            from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
            from werkzeug.serving import make_server
        except ImportError as e:  # pragma: no cover - depends on the installation
            raise EndpointUnavailableError(
                "the local runtime needs moto's server mode: "
                "install the 'local' extra (pip install 'statestore[local]')"
            ) from e
        port = port or free_port(host)
        check_port_free(host, port, "the local endpoint (moto)")
        # werkzeug logs every request at INFO; the endpoint serves thousands, which would bury the output.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        endpoint_url = f"http://{host}:{port}"
        app: Any = DomainDispatcherApplication(create_backend_app)
        mirror = None
        if mirror_dir is not None:
            mirror = S3Mirror(app, mirror_dir, endpoint_url)
            app = mirror
        app = LocalOnly(app, host)
        server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
        thread = threading.Thread(target=server.serve_forever, name="statestore-moto-server", daemon=True)
        thread.start()
        return cls(server, thread, endpoint_url, mirror)

    def stop(self) -> None:
        """Stop serving (everything not mirrored is gone). Safe to call more than once."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None


class S3Mirror:
    """WSGI middleware copying each object an S3 request changed to ``directory`` before answering."""

    def __init__(self, app: Any, directory: Path, endpoint_url: str) -> None:
        self.app = app
        self.directory = directory
        self.endpoint_url = endpoint_url
        self._host = urlsplit(endpoint_url).hostname or ""
        # One copy at a time: each reads the object's current value, so the last copy of a key to run
        # writes its latest value, whatever order concurrent writes to that key finished in.
        self._lock = threading.Lock()
        self._s3: Any = None
        self.paused = False
        make_private_dirs(directory)
        for stale in directory.rglob(_TEMP_PREFIX + "*"):  # left by a crash mid-copy
            stale.unlink()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        target = None if self.paused else self._changed_objects(environ)
        if target is None:
            return self.app(environ, start_response)
        captured: list[Any] = []
        written: list[bytes] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            captured[:] = [status, headers, exc_info]
            return written.append

        body = self.app(environ, capture)
        if captured and captured[0].startswith("2"):
            bucket, keys = target
            try:
                with self._lock:
                    for key in keys(environ):
                        self._copy(bucket, key)
            except Exception as e:
                logger.exception("could not copy S3 object(s) of bucket %r to %s", bucket, self.directory)
                if hasattr(body, "close"):
                    body.close()
                message = f"the local endpoint could not save the object to {self.directory}: {e}"
                error = (
                    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                    f"<Message>{_xml_escape(message)}</Message></Error>"
                ).encode()
                start_response(
                    _STATUS_TEXT, [("Content-Type", "application/xml"), ("Content-Length", str(len(error)))]
                )
                return [error]
        start_response(*captured)
        return [*written, *body] if written else body

    # --- which objects a request changes --------------------------------------------------------

    def _changed_objects(
        self, environ: dict[str, Any]
    ) -> tuple[str, Callable[[dict[str, Any]], list[str]]] | None:
        """(bucket, a function giving the changed keys) for a request that may change objects, else None."""
        method = environ["REQUEST_METHOD"]
        if method not in ("PUT", "POST", "DELETE") or not _is_s3(environ):
            return None
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        bucket, key = self._bucket_and_key(environ)
        if not bucket:
            return None
        if not key:
            if method == "POST" and "delete" in query:  # DeleteObjects: the keys are in the body
                raw = _read_body(environ)
                return bucket, lambda _: _deleted_keys(raw)
            if method == "DELETE" and not query:
                return bucket, lambda _: self._remove_bucket_if_gone(bucket)
            return None
        if "partNumber" in query or "uploads" in query:
            return None  # a part, or the start of an upload: no object changes yet
        if method == "DELETE" and "uploadId" in query:
            return None  # an upload aborted
        return bucket, lambda _: [key]

    def _bucket_and_key(self, environ: dict[str, Any]) -> tuple[str, str]:
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or quote(environ.get("PATH_INFO", ""))
        path = unquote(urlsplit(raw).path)
        host = (environ.get("HTTP_HOST") or "").rsplit(":", 1)[0]
        if host and host != self._host and host.endswith("." + self._host):  # virtual-hosted style
            return host[: -len(self._host) - 1], path[1:]
        bucket, _, key = path[1:].partition("/")
        return bucket, key

    # --- copying ------------------------------------------------------------------------------

    def _client(self) -> Any:
        if self._s3 is None:
            import boto3
            from botocore.config import Config

            self._s3 = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name="us-east-1",
                aws_access_key_id="local",
                aws_secret_access_key="local",
                config=Config(retries={"max_attempts": 3}, s3={"addressing_style": "path"}),
            )
        return self._s3

    def _copy(self, bucket: str, key: str) -> None:
        """Make the file of ``bucket``/``key`` hold the object's current bytes, or remove it if none."""
        path = self.directory / bucket / object_path(key)
        try:
            response = self._client().get_object(Bucket=bucket, Key=key)
        except Exception as e:
            if _error_code(e) not in ("NoSuchKey", "NoSuchBucket", "404"):
                raise
            if path.exists():
                path.unlink()
                _remove_empty_parents(path.parent, self.directory / bucket)
            return
        make_private_dirs(path.parent)
        temp = path.parent / f"{_TEMP_PREFIX}{threading.get_ident()}"
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            shutil.copyfileobj(response["Body"], f)
        os.replace(temp, path)

    def _remove_bucket_if_gone(self, bucket: str) -> list[str]:
        try:
            self._client().head_bucket(Bucket=bucket)
        except Exception as e:
            if _error_code(e) in ("NoSuchBucket", "404"):
                shutil.rmtree(self.directory / bucket, ignore_errors=True)
                return []
            raise
        return []


def restore_s3(directory: Path, s3: Any, region: str, mirror: S3Mirror | None = None) -> int:
    """Put every object copied under ``directory`` into the endpoint behind ``s3``, creating missing
    buckets in ``region``; returns how many objects were restored."""
    if not directory.is_dir():
        return 0
    if mirror is not None:
        mirror.paused = True  # the files are the copy: do not copy them onto themselves
    restored = 0
    try:
        for bucket_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
            bucket = bucket_dir.name
            try:
                options = (
                    {}
                    if region == "us-east-1"
                    else {"CreateBucketConfiguration": {"LocationConstraint": region}}
                )
                s3.create_bucket(Bucket=bucket, **options)
            except Exception as e:
                if _error_code(e) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
            for key, path in _stored_objects(bucket_dir):
                with open(path, "rb") as f:
                    s3.put_object(Bucket=bucket, Key=key, Body=f)
                restored += 1
    finally:
        if mirror is not None:
            mirror.paused = False
    return restored


def object_path(key: str) -> Path:
    """The path, relative to its bucket's directory, of the file holding ``key``."""
    *directories, name = key.split("/")
    return Path(
        *(_RESERVED_SEGMENTS.get(d) or quote(d, safe="") for d in directories), "@" + quote(name, safe="")
    )


def _stored_objects(bucket_dir: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(bucket_dir.rglob("@*")):
        if not path.is_file():
            continue
        directories = path.relative_to(bucket_dir).parts[:-1]
        segments = ["" if d == "%" else unquote(d) for d in directories]
        yield "/".join([*segments, unquote(path.name[1:])]), path


def _remove_empty_parents(directory: Path, stop: Path) -> None:
    while directory != stop and directory.is_relative_to(stop):
        try:
            directory.rmdir()
        except OSError:
            return  # not empty
        directory = directory.parent


def _is_s3(environ: dict[str, Any]) -> bool:
    credential = environ.get("HTTP_AUTHORIZATION", "") or environ.get("QUERY_STRING", "")
    return "/s3/aws4_request" in unquote(credential)


def _read_body(environ: dict[str, Any]) -> bytes:
    """Read the request body, leaving an identical stream for the application."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    return raw


def _deleted_keys(body: bytes) -> list[str]:
    root = ET.fromstring(body)
    return [element.text or "" for element in root.iter() if element.tag.rsplit("}", 1)[-1] == "Key"]


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
