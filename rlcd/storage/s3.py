"""The S3 backend over aiobotocore: the only module that imports botocore or aiohttp.

- **Errors** cross one edge, :func:`_translate`: a 404 becomes
  :class:`~rlcd.errors.NotFoundError`; throttling, 5xx, resets and timeouts become
  :class:`~rlcd.errors.TransientStorageError` (the codes are the tables below); anything else is
  a plain :class:`~rlcd.errors.StorageError`. Each is raised ``from`` the botocore exception.
- **Retries** are ours (:mod:`rlcd.storage.retry`), one loop per store call; botocore's are off
  so that the two never multiply.
- **Configuration**: every :class:`S3Config` field left unset defers to botocore's own chain
  (``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``…, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3``,
  ``AWS_ENDPOINT_URL``, shared config files, SSO, container and instance credentials), plus
  ``AWS_REGION``, which botocore alone would ignore.
- **Sharing**: an :class:`S3Client` owns one aiobotocore client, hence one connection pool and
  one credential cache; a daemon opens one and makes a cheap :class:`S3Store` per table.
- **Integrity**: every request body carries ``x-amz-checksum-crc32`` computed by us (zlib, off
  the GIL) over exactly the bytes sent, and S3 refuses a body that does not match it before
  storing anything; bodies are neither SHA-256 signed (the CRC32 guards them, and SigV4 still
  signs every header) nor aws-chunked. Responses are not CRC32-checked by botocore (its
  "flexible checksums" are off: they cost a pass over every body in the event loop, and a
  multipart object's checksum is a checksum of parts botocore cannot check anyway): a body is
  protected in transit by TLS's per-record authentication, its length is checked against
  ``Content-Length`` (a short body is retried), and a source file is then parsed by the Parquet
  decoder, which refuses a broken footer, page header or compressed page, and whose row count
  is checked against the footer's. delta-rs (object_store) sends and checks no checksum at all.
- **One path**: every request, the data requests (the GET of every source, the UploadPart of
  every part) included, goes through aiobotocore's public client API, with the client's
  timeouts and connection limit; no private attribute of botocore or aiobotocore is read.
- **Conditional writes**: ``put_if_absent`` is ``PutObject`` with ``If-None-Match: *``. A 412
  means the key is taken, and the stored bytes decide whether by us: a write can land while
  its answer is lost, and then our retry, or aiohttp's own silent resend of the idempotent
  PUT, meets our own object. A 409 ``ConditionalRequestConflict`` (a racing conditional write)
  is retried, and the retry re-checks. ``put_if_match`` is ``PutObject`` with ``If-Match`` (a
  412, or a 404 for a key gone, is a mismatch unless the stored bytes are ours, for the same
  reason), and ``delete_if_match`` is ``DeleteObject`` with ``If-Match``; the ETag is S3's.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager, suppress
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import cache, partial
from typing import Any, Self, TypeVar, cast

import aiohttp
import anyio.to_thread
import botocore
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.exceptions import (
    BotoCoreError,
    ChecksumError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    SSLError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.loaders import JSONFileLoader, Loader, create_loader
from botocore.utils import parse_timestamp

from rlcd import __version__
from rlcd.errors import (
    ConfigError,
    CopyRefusedError,
    InternalError,
    NotFoundError,
    StorageError,
    TransientStorageError,
)
from rlcd.storage._keys import check_batch, check_key, check_prefix, check_range
from rlcd.storage._multipart import CopyingWriter, Pieces
from rlcd.storage.base import (
    AlreadyExists,
    Mismatch,
    ObjectMeta,
    PendingUpload,
    PutResult,
    SwapResult,
    Versioned,
    Written,
)
from rlcd.storage.retry import retrying
from rlcd.storage.s3config import AddressingStyle, S3Config
from rlcd.storage.uri import TableUri

__all__ = ("S3Config", "S3Client", "S3Store", "AddressingStyle")

_T = TypeVar("_T")

# Error codes by what we do about them (botocore's standard retry mode lists the same ones).
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchUpload"})
_THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "ProvisionedThroughputExceededException",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "ConditionalRequestConflict",  # 409: a racing conditional write; the retry re-checks
        "OperationAborted",  # 409: "a conflicting conditional operation is in progress"
    }
)
# Failures of the connection rather than of the request. SSLError (a certificate problem) is
# caught before these: retrying would not fix it.
_TRANSIENT_EXCEPTIONS = (
    HTTPClientError,  # resets, closed connections, read timeouts, broken response streams
    BotoConnectionError,  # connect failures and timeouts
    IncompleteReadError,
    ChecksumError,  # a response corrupted in transit
    aiohttp.ClientError,
    OSError,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@cache
def _loader(data_path: str | None) -> Loader:
    """botocore's data loader for ``data_path`` (the session's ``AWS_DATA_PATH``), one per
    process: it parses the S3 service model and endpoint rules once and caches them, where
    each new session would parse them again (most of the quarter second a client takes to
    create; :class:`_JsonFiles` parses them). It holds only that data, no credentials or
    connections, so clients of any config and event loop can share it."""
    loader = create_loader(data_path)
    loader.file_loader = _JsonFiles()
    return loader


class _JsonFiles(JSONFileLoader):  # type: ignore[misc]
    """botocore's model files parsed into plain dicts, which keep the order of their keys as
    well: its own parser builds an ``OrderedDict`` per JSON object, which is slower."""

    def load_file(self, file_path: str) -> Any:
        for suffix, open_file in ((".json", open), (".json.gz", gzip.open)):
            if os.path.isfile(file_path + suffix):
                with open_file(file_path + suffix, "rb") as f:
                    return json.loads(f.read().decode("utf-8"))
        return None


def _load_models(loader: Loader) -> None:
    """Parse into ``loader``'s cache the models an S3 client is made from, as botocore asks
    for them, so that making the client parses nothing (run in a thread: it is CPU work).
    aiobotocore's ``warm_up_loader_caches`` also loads S3's paginators, waiters and examples,
    which rlcd never uses."""
    loader.load_data_with_path("endpoints")
    for name in ("sdk-default-configuration", "partitions", "_retry"):
        loader.load_data(name)
    for type_name in ("service-2", "endpoint-rule-set-1"):
        loader.load_service_model("s3", type_name, api_version=None)


def _timestamp(value: Any) -> datetime:
    """A timestamp in a response, parsed far more cheaply than by botocore's dateutil parser
    (where a listing's CPU, and a millisecond of every GET and HEAD, went): an HTTP date (the
    ``Last-Modified`` header: ``Sat, 05 Dec 2026 12:36:50 GMT``) by the standard library's
    ``parsedate_to_datetime``, an ISO 8601 date-time (S3's XML bodies:
    ``2026-12-03T17:22:38.000Z``) by ``datetime.fromisoformat``; anything else (epoch seconds)
    as botocore parses it."""
    if isinstance(value, str):
        with suppress(ValueError):
            if value.endswith(" GMT"):
                return parsedate_to_datetime(value)
            if "T" in value:
                parsed = datetime.fromisoformat(value)
                return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return cast(datetime, parse_timestamp(value))


class S3Client:
    """One aiobotocore client (connection pool, credential cache) shared by many stores.

    Use as an async context manager, then make a store per table with :meth:`store`. Stores
    refuse use once their client is closed; closing a store leaves the client open.
    """

    def __init__(self, config: S3Config | None = None) -> None:
        self.config = config if config is not None else S3Config()
        self._stack = AsyncExitStack()
        self._api: Any = None
        self._closed = False

    async def __aenter__(self) -> Self:
        if self._api is not None or self._closed:
            raise InternalError("an S3Client is opened once")
        try:
            session = AioSession(profile=self.config.profile)
            loader = _loader(session.get_config_variable("data_path"))
            session.register_component("data_loader", loader)
            session.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=_timestamp
            )
            await anyio.to_thread.run_sync(_load_models, loader)
            self._api = await self._stack.enter_async_context(
                session.create_client("s3", **_client_args(self.config))
            )
        except (BotoCoreError, ValueError) as exc:
            await self._stack.aclose()
            raise ConfigError(f"s3: cannot create the client: {exc}") from exc
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; every store made from this client stops working."""
        self._closed = True
        await self._stack.aclose()

    def store(self, uri: TableUri) -> S3Store:
        """A store rooted at ``s3://bucket/prefix``, sharing this client."""
        if not uri.is_s3:
            raise ConfigError(f"{uri} is not an s3:// URI")
        self._raw("open", str(uri))
        return S3Store(self, uri.bucket, uri.prefix)

    def _raw(self, operation: str, key: str) -> Any:
        """The aiobotocore client, for this module's stores only."""
        if self._closed or self._api is None:
            raise StorageError("S3 client is not open", operation=operation, key=key)
        return self._api


def _client_args(config: S3Config) -> dict[str, Any]:
    """``create_client`` arguments: only what the config sets, so botocore's chain fills the
    rest."""
    options: dict[str, Any] = {
        "connect_timeout": config.connect_timeout_s,
        "read_timeout": config.read_timeout_s,
        "max_pool_connections": config.max_connections,
        "retries": {"total_max_attempts": 1},
        # botocore's default "flexible checksums" CRC32 every response body in the event loop
        # (holding the GIL) and send every request body aws-chunked with a CRC32 trailer; our
        # uploads carry a CRC32 header of our own instead (see _checksum), and a response is
        # checked by its length and by the Parquet decoder (see the module docstring)
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
        # our arguments are built by this module, typed: botocore need not check them again
        "parameter_validation": False,
        # a fixed User-Agent: botocore otherwise builds its own twice a request, from a dozen
        # sanitised parts (about a millisecond of event-loop CPU each time)
        "user_agent": f"rlcd/{__version__} botocore/{botocore.__version__}",
    }
    # botocore would SHA-256 every body it signs (always over plain HTTP, and over HTTPS
    # without a checksum header botocore set itself); the CRC32 header already guards it
    s3: dict[str, Any] = {"payload_signing_enabled": False}
    if config.addressing_style is not None:
        s3["addressing_style"] = config.addressing_style
    options["s3"] = s3
    args: dict[str, Any] = {"config": AioConfig(**options)}
    region = config.region or os.environ.get("AWS_REGION")
    if region:
        args["region_name"] = region
    if config.endpoint_url is not None:
        args["endpoint_url"] = config.endpoint_url
    if config.access_key_id is not None:
        args["aws_access_key_id"] = config.access_key_id
        args["aws_secret_access_key"] = config.secret_access_key
        args["aws_session_token"] = config.session_token
    return args


class S3Store:
    """Objects under ``s3://bucket/prefix``; keys are relative to the prefix.

    Cheap: it holds no connection of its own. Safe to share between tasks.
    """

    def __init__(self, client: S3Client, bucket: str, prefix: str) -> None:
        self._client = client
        self._bucket = bucket
        self._prefix = prefix
        self._base = f"{prefix}/" if prefix else ""
        self._policy = client.config.retry
        self._closed = False

    @property
    def root(self) -> str:
        return str(TableUri("s3", self._bucket, self._prefix))

    async def get(
        self, key: str, *, start: int | None = None, end: int | None = None
    ) -> bytes | bytearray:
        self._key("get", key)
        first, last = check_range("get", key, start, end)
        if last == first:
            await self.head(key)  # an empty range still says whether the object exists
            return b""
        if first == 0 and last is None:
            extra = {}
        else:
            extra = {"Range": f"bytes={first}-{'' if last is None else last - 1}"}
        return await self._retry("get", key, partial(self._get_once, key, extra))

    async def head(self, key: str) -> ObjectMeta:
        s3key = self._key("head", key)

        async def once() -> ObjectMeta:
            with _translate("head", key):
                response = await self._api("head", key).head_object(Bucket=self._bucket, Key=s3key)
            size, modified = int(response["ContentLength"]), _ms(response["LastModified"])
            return ObjectMeta(key, size, modified, response.get("ETag"))

        return await self._retry("head", key, once)

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        self._api("list", prefix)
        check_prefix("list", prefix)
        return self._list(prefix, start_after)

    async def put(self, key: str, data: bytes) -> ObjectMeta:
        s3key = self._key("put", key)

        async def once() -> None:
            with _translate("put", key):
                await self._api("put", key).put_object(
                    Bucket=self._bucket, Key=s3key, **_body((data,))
                )

        await self._retry("put", key, once)
        return await self.head(key)

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        s3key = self._key("put_if_absent", key)

        async def once() -> PutResult:
            try:
                with _translate("put_if_absent", key):
                    response = await self._api("put_if_absent", key).put_object(
                        Bucket=self._bucket, Key=s3key, IfNoneMatch="*", **_body((data,))
                    )
            except _PreconditionFailed:
                return await self._ours(key, data) or AlreadyExists(key)
            return Written(key, response["ETag"])

        return await self._retry("put_if_absent", key, once)

    async def get_versioned(self, key: str) -> Versioned:
        self._key("get_versioned", key)

        async def once() -> Versioned:
            current = await self._current(key)
            if current is None:
                raise NotFoundError(operation="get_versioned", key=key)
            return current

        return await self._retry("get_versioned", key, once)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> SwapResult:
        s3key = self._key("put_if_match", key)

        async def once() -> SwapResult:
            try:
                with _translate("put_if_match", key):
                    response = await self._api("put_if_match", key).put_object(
                        Bucket=self._bucket, Key=s3key, IfMatch=etag, **_body((data,))
                    )
            except (_PreconditionFailed, NotFoundError):
                return await self._ours(key, data) or Mismatch(key)
            return Written(key, response["ETag"])

        return await self._retry("put_if_match", key, once)

    async def delete(self, key: str) -> None:
        s3key = self._key("delete", key)

        async def once() -> None:
            try:
                with _translate("delete", key):
                    await self._api("delete", key).delete_object(Bucket=self._bucket, Key=s3key)
            except NotFoundError:
                pass  # S3 answers 204 anyway; some compatible stores say NoSuchKey

        await self._retry("delete", key, once)

    async def delete_many(self, keys: Sequence[str]) -> None:
        """One ``DeleteObjects`` request (quiet: only failures come back); a retry sends only
        the keys that failed. A per-key error is judged by its code like any other answer,
        so ``SlowDown`` and ``InternalError`` are retried and ``AccessDenied`` is not."""
        check_batch("delete_many", keys)
        if not keys:
            return
        s3keys = {self._key("delete_many", key): key for key in keys}
        remaining = list(s3keys)

        async def once() -> None:
            with _translate("delete_many", s3keys[remaining[0]]):
                reply = await self._api("delete_many", keys[0]).delete_objects(
                    Bucket=self._bucket,
                    Delete={"Objects": [{"Key": k} for k in remaining], "Quiet": True},
                )
            failed = [e for e in reply.get("Errors", []) if e.get("Code") not in _NOT_FOUND_CODES]
            remaining[:] = [str(e["Key"]) for e in failed]
            if failed:
                first = failed[0]
                key = s3keys.get(first["Key"], str(first["Key"]))
                more = f" (and {len(failed) - 1} more keys)" if len(failed) > 1 else ""
                code = str(first.get("Code", ""))
                raise _error(code, 200, str(first.get("Message", "")) + more, "delete_many", key)

        await self._retry("delete_many", keys[0], once)

    async def delete_if_match(self, key: str, etag: str) -> bool:
        s3key = self._key("delete_if_match", key)

        async def once() -> bool:
            try:
                with _translate("delete_if_match", key):
                    await self._api("delete_if_match", key).delete_object(
                        Bucket=self._bucket, Key=s3key, IfMatch=etag
                    )
            except NotFoundError:
                return True  # gone already (our own delete, if its answer was lost)
            except _PreconditionFailed:
                return False
            return True

        return await self._retry("delete_if_match", key, once)

    def open_writer(self, key: str) -> CopyingWriter:
        """A multipart upload that also takes ranges of this store's objects, copied by S3
        (``UploadPartCopy``): see :class:`~rlcd.storage.base.PartCopier`."""
        self._key("open_writer", key)
        return CopyingWriter(key, _S3Parts(self), part_size=self._client.config.part_size)

    def list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        self._api("list_uploads", prefix)
        check_prefix("list_uploads", prefix)
        return self._list_uploads(prefix)

    async def abort_upload(self, key: str, upload_id: str) -> None:
        self._key("abort_upload", key)
        await _S3Parts(self).abort_upload(key, upload_id)

    def local_files(self) -> None:
        """None: S3 objects are not local files."""

    async def aclose(self) -> None:
        """Refuse further use; the shared client stays open."""
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()

    def _api(self, operation: str, key: str) -> Any:
        if self._closed:
            raise StorageError("store is closed", operation=operation, key=key)
        return self._client._raw(operation, key)

    def _key(self, operation: str, key: str) -> str:
        """The bucket key for ``key``, after checking the store is open and the key valid."""
        self._api(operation, key)
        return self._base + check_key(operation, key)

    async def _retry(self, operation: str, key: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        return await retrying(self._policy, operation, key, attempt)

    async def _current(self, key: str) -> Versioned | None:
        """The object with its ETag, or None when missing (one attempt: the caller retries).
        Through botocore, which returns the ETag: the objects read so are small."""
        try:
            with _translate("get_versioned", key):
                response = await self._api("get_versioned", key).get_object(
                    Bucket=self._bucket, Key=self._base + key
                )
                async with response["Body"] as body:
                    data = bytes(await body.read())
        except NotFoundError:
            return None
        return Versioned(key, data, response["ETag"])

    async def _ours(self, key: str, data: bytes) -> Written | None:
        """:class:`Written` when the object holds exactly ``data`` (a conditional write of ours
        landed while its answer was lost), else None; one attempt: the caller retries."""
        current = await self._current(key)
        return Written(key, current.etag) if current is not None and current.data == data else None

    async def _get_once(self, key: str, extra: dict[str, str]) -> bytes:
        try:
            with _translate("get", key):
                response = await self._api("get", key).get_object(
                    Bucket=self._bucket, Key=self._base + key, **extra
                )
                async with response["Body"] as body:
                    data = cast(bytes, await body.read())
            _check_range(extra, "ContentRange" in response, key)
            return data
        except _RangeNotSatisfiable:
            return b""  # the range starts at or past the end: clipped, like a slice

    async def _list(self, prefix: str, start_after: str | None) -> AsyncIterator[ObjectMeta]:
        request: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": self._base + prefix,
            "MaxKeys": self._client.config.list_page_size,
        }
        if start_after is not None:
            request["StartAfter"] = self._base + start_after
        while True:
            page = await self._retry("list", prefix, partial(self._list_page, prefix, request))
            for item in page.get("Contents", ()):
                key = item["Key"][len(self._base) :]
                if key and not key.endswith("/"):  # "folder" markers are not objects
                    yield ObjectMeta(key, int(item["Size"]), _ms(item["LastModified"]))
            if not page.get("IsTruncated"):
                return
            request.pop("StartAfter", None)
            request["ContinuationToken"] = page["NextContinuationToken"]

    async def _list_page(self, prefix: str, request: dict[str, Any]) -> dict[str, Any]:
        with _translate("list", prefix):
            return cast(dict[str, Any], await self._api("list", prefix).list_objects_v2(**request))

    async def _list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        """``ListMultipartUploads`` pages (S3 orders them by key, then by initiation)."""
        request: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": self._base + prefix,
            "MaxUploads": self._client.config.list_page_size,
        }

        async def page_once() -> dict[str, Any]:
            with _translate("list_uploads", prefix):
                api = self._api("list_uploads", prefix)
                return cast(dict[str, Any], await api.list_multipart_uploads(**request))

        while True:
            page = await self._retry("list_uploads", prefix, page_once)
            for item in page.get("Uploads", ()):
                key = item["Key"][len(self._base) :]
                yield PendingUpload(key, str(item["UploadId"]), _ms(item["Initiated"]))
            if not page.get("IsTruncated"):
                return
            request["KeyMarker"] = page["NextKeyMarker"]
            request["UploadIdMarker"] = page["NextUploadIdMarker"]


class _S3Parts:
    """The :class:`~rlcd.storage._multipart.PartCopySink` of an S3 store: a multipart upload."""

    def __init__(self, store: S3Store) -> None:
        self._store = store

    async def put_whole(self, key: str, data: Pieces) -> ObjectMeta:
        store = self._store
        s3key = store._key("put", key)

        async def once() -> None:
            with _translate("put", key):
                api = store._api("put", key)
                await api.put_object(Bucket=store._bucket, Key=s3key, **_body(data))

        await store._retry("put", key, once)
        return await store.head(key)

    async def start_upload(self, key: str) -> str:
        response = await self._call("write", key, "create_multipart_upload")
        return str(response["UploadId"])

    async def upload_part(self, key: str, upload_id: str, number: int, data: Pieces) -> str:
        checksum = await anyio.to_thread.run_sync(_crc32, data)  # zlib lets go of the GIL
        response = await self._call(
            "write",
            key,
            "upload_part",
            UploadId=upload_id,
            PartNumber=number,
            **_body(data, checksum),
        )
        return str(response["ETag"])

    async def copy_part(
        self, key: str, upload_id: str, number: int, source: str, start: int, stop: int
    ) -> str:
        """``UploadPartCopy`` of ``source``'s bytes ``[start, stop)``: no body is sent (S3
        copies the bytes it holds); a 4xx other than throttling or a missing source (the
        copy source's permissions, a store that does not copy) is a refusal."""
        store = self._store
        s3key = store._key("copy", key)
        request = {
            "Bucket": store._bucket,
            "Key": s3key,
            "UploadId": upload_id,
            "PartNumber": number,
            "CopySource": {"Bucket": store._bucket, "Key": store._key("copy", source)},
            "CopySourceRange": f"bytes={start}-{stop - 1}",
        }

        async def once() -> str:
            with _translate("copy", key):
                try:
                    response = await store._api("copy", key).upload_part_copy(**request)
                except ClientError as exc:
                    error = _from_client_error(exc, "copy", key)
                    if type(error) is StorageError and 400 <= _status(exc) < 500:
                        message = f"{source}: {error}"
                        raise CopyRefusedError(message, operation="copy", key=key) from exc
                    raise
            return str(response["CopyPartResult"]["ETag"])

        return await store._retry("copy", key, once)

    async def complete_upload(self, key: str, upload_id: str, tags: Sequence[str]) -> ObjectMeta:
        parts = [{"ETag": tag, "PartNumber": number} for number, tag in enumerate(tags, 1)]
        await self._call(
            "complete",
            key,
            "complete_multipart_upload",
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
        )
        return await self._store.head(key)

    async def abort_upload(self, key: str, upload_id: str) -> None:
        with suppress(NotFoundError):  # already aborted, or an earlier attempt went unheard
            await self._call("abort", key, "abort_multipart_upload", UploadId=upload_id)

    async def _call(self, operation: str, key: str, method: str, **args: Any) -> Any:
        store = self._store
        s3key = store._key(operation, key)

        async def once() -> Any:
            with _translate(operation, key):
                api = store._api(operation, key)
                return await getattr(api, method)(Bucket=store._bucket, Key=s3key, **args)

        return await store._retry(operation, key, once)


class _PreconditionFailed(StorageError):
    """HTTP 412 to a conditional request: for ``put_if_absent`` the key is taken, for an
    ``If-Match`` request another version is stored."""


class _RangeNotSatisfiable(StorageError):
    """HTTP 416: the requested range starts at or past the end of the object."""


@contextmanager
def _translate(operation: str, key: str) -> Iterator[None]:
    """The edge where botocore and aiohttp exceptions become rlcd errors."""
    try:
        yield
    except ClientError as exc:
        raise _from_client_error(exc, operation, key) from exc
    except SSLError as exc:
        raise StorageError(str(exc), operation=operation, key=key) from exc
    except _TRANSIENT_EXCEPTIONS as exc:
        message = f"{type(exc).__name__}: {exc}"
        raise TransientStorageError(message, operation=operation, key=key) from exc
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise ConfigError(
            f"{operation} {key}: {exc} (the standard AWS chain found none: AWS_PROFILE, "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a web identity or an instance role)"
        ) from exc
    except BotoCoreError as exc:  # parameters, configuration
        raise StorageError(str(exc), operation=operation, key=key) from exc


def _from_client_error(exc: Any, operation: str, key: str) -> StorageError:
    """The rlcd error for a botocore error response."""
    error = exc.response.get("Error", {})
    message = error.get("Message", "")
    return _error(str(error.get("Code", "")), _status(exc), message, operation, key)


def _status(exc: Any) -> int:
    """The HTTP status of a botocore error response (0 when it has none)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _check_range(request: dict[str, str], ranged: bool, key: str) -> None:
    """Refuse the answer to a ranged GET that is not a range: a store that ignores ``Range``
    sends the whole object, which must never pass for the bytes asked for."""
    if "Range" in request and not ranged:
        message = f"the store answered {request['Range']} with no Content-Range"
        raise StorageError(message, operation="get", key=key)


def _error(code: str, status: int, message: str, operation: str, key: str) -> StorageError:
    """The rlcd error for an error response, by code first and HTTP status second."""
    message = f"{code or 'error'} (HTTP {status}): {message}".rstrip(": ")
    if code in _NOT_FOUND_CODES:
        return NotFoundError(operation=operation, key=key)
    if code == "PreconditionFailed" or status == 412:
        return _PreconditionFailed(message, operation=operation, key=key)
    if code == "InvalidRange" or status == 416:
        return _RangeNotSatisfiable(message, operation=operation, key=key)
    if code in _THROTTLING_CODES or code in _TRANSIENT_CODES or status == 429 or status >= 500:
        return TransientStorageError(message, operation=operation, key=key)
    return StorageError(message, operation=operation, key=key)


def _crc32(pieces: Pieces) -> str:
    """The ``x-amz-checksum-crc32`` of a body sending ``pieces``: S3 checks it before it
    stores the body, and refuses the body on a mismatch."""
    crc = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def _body(pieces: Pieces, checksum: str | None = None) -> dict[str, Any]:
    """botocore's ``Body`` and ``ChecksumCRC32`` arguments of a request sending ``pieces``."""
    return {"Body": b"".join(pieces), "ChecksumCRC32": checksum or _crc32(pieces)}


def _ms(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(milliseconds=1)
