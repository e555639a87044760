"""The blob store on S3: snapshot files and large transaction bodies."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

from botocore.exceptions import ClientError

from statestore.adapters.aws.clients import AwsCaller, Translate
from statestore.errors import BlobNotFoundError, StateStoreError
from statestore.store.ports import BlobStore

_DELETE_BATCH = 1000  # S3's DeleteObjects limit


def _missing(key: str) -> Translate:
    """The translation of S3's "no such object" answers (a GET's and a HEAD's) into BlobNotFoundError."""

    def translate(code: str, error: ClientError) -> StateStoreError | None:
        return BlobNotFoundError(key) if code in ("NoSuchKey", "404", "NotFound") else None

    return translate


class _NoByteInRange(StateStoreError):
    """A ranged GET of an object with no byte in the range (S3's InvalidRange): an empty object."""


class S3BlobStore(BlobStore):
    """Objects in one bucket, keyed as given (callers use :mod:`statestore.model.layout` for keys)."""

    def __init__(
        self, s3_client: Any, bucket: str, caller: AwsCaller | None = None, *, page_size: int = 1000
    ) -> None:
        self.s3 = s3_client
        self.bucket = bucket
        self.call = caller or AwsCaller()
        self.page_size = page_size

    def put(self, key: str, data: bytes, tags: Mapping[str, str] | None = None) -> None:
        extra: dict[str, Any] = {"Tagging": urlencode(tags)} if tags else {}
        self.call(
            f"write s3://{self.bucket}/{key}",
            self.s3.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=data,
            **extra,
        )

    def get(self, key: str) -> bytes:
        response = self.call(
            f"read s3://{self.bucket}/{key}", self.s3.get_object, _missing(key), Bucket=self.bucket, Key=key
        )
        body = response["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    def get_at_most(self, key: str, max_bytes: int) -> bytes | None:
        """A GET of the first ``max_bytes`` bytes: the object if that is all of it (its size is in the
        response's ``Content-Range``), else None, the rest never sent."""
        if max_bytes <= 0:
            return None

        def translate(code: str, error: ClientError) -> StateStoreError | None:
            if code == "InvalidRange":
                return _NoByteInRange(key)
            return _missing(key)(code, error)

        try:
            response = self.call(
                f"read s3://{self.bucket}/{key}",
                self.s3.get_object,
                translate,
                Bucket=self.bucket,
                Key=key,
                Range=f"bytes=0-{max_bytes - 1}",
            )
        except _NoByteInRange:  # an empty object has no byte 0
            return self.get(key)
        body = response["Body"]
        try:
            size = _object_size(response)
            if size is not None and size > max_bytes:
                return None
            data = bytes(body.read())
            return data if len(data) <= max_bytes else None
        finally:
            body.close()

    def copy(self, source: str, destination: str) -> None:
        # Server-side (up to S3's 5 GB single-copy limit, the same as a single PUT's); REPLACE with no tags so
        # a lifecycle rule keyed on the source's tags does not follow the copy.
        self.call(
            f"copy s3://{self.bucket}/{source} to {destination}",
            self.s3.copy_object,
            _missing(source),
            Bucket=self.bucket,
            Key=destination,
            CopySource={"Bucket": self.bucket, "Key": source},
            TaggingDirective="REPLACE",
            Tagging="",
        )

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start : start + _DELETE_BATCH]
            response = self.call(
                f"delete {len(batch)} object(s) from s3://{self.bucket}",
                self.s3.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise StateStoreError(
                    f"could not delete {len(errors)} object(s) from s3://{self.bucket}, e.g. "
                    f"{first.get('Key')!r}: {first.get('Code')}: {first.get('Message')}"
                )

    def list_modified(self, prefix: str) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": self.page_size}
        while True:
            response = self.call(f"list s3://{self.bucket}/{prefix}", self.s3.list_objects_v2, **kwargs)
            for obj in response.get("Contents", []):
                found.append((obj["Key"], int(obj["LastModified"].timestamp() * 1000)))
            if not response.get("IsTruncated"):
                return sorted(found)
            kwargs["ContinuationToken"] = response["NextContinuationToken"]

    def list_modified_pages(self, prefix: str, start_after: str = "") -> Iterator[list[tuple[str, int]]]:
        # One LIST call per page, made when the page before it is consumed. S3 lists in UTF-8 byte order,
        # which is Python's order of the same strings (code points), so pages come sorted as the port says.
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": self.page_size}
        if start_after:
            kwargs["StartAfter"] = start_after
        while True:
            response = self.call(f"list s3://{self.bucket}/{prefix}", self.s3.list_objects_v2, **kwargs)
            page = [
                (obj["Key"], int(obj["LastModified"].timestamp() * 1000))
                for obj in response.get("Contents", [])
            ]
            if page:
                yield page
            if not response.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = response["NextContinuationToken"]

    def list(self, prefix: str) -> list[str]:
        return [key for key, _ in self.list_modified(prefix)]


def _object_size(response: dict[str, Any]) -> int | None:
    """The whole object's size from a ranged GET's ``Content-Range`` (``bytes 0-99/1234``), or None if the
    store sent the whole object instead (no range in its answer)."""
    content_range = response.get("ContentRange")
    if not content_range or "/" not in content_range:
        return None
    total = content_range.rsplit("/", 1)[1]
    return int(total) if total.isdigit() else None
