"""Transient S3 failures are retried and persistent ones surface clearly, through real requests.

Each test puts :class:`FaultProxy` between the store and the moto server and breaks chosen
requests: 503 SlowDown, 500, a TCP reset, a hung response (read timeout), a truncated body, a
lost response to a write that did land.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from rlcd.errors import NotFoundError, RetriesExhaustedError, StorageError, TransientStorageError
from rlcd.storage import (
    MIN_PART_SIZE,
    AlreadyExists,
    ObjectStore,
    RetryPolicy,
    S3Client,
    Written,
    open_store,
)
from tests.contract.faultproxy import Fault, FaultProxy, Seen
from tests.contract.support import boto_client, moto_config

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ATTEMPTS = 4


@pytest.fixture(scope="session")
def session_proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint).running() as proxy:
        yield proxy


@pytest.fixture(scope="session")
async def proxy_client(session_proxy: FaultProxy) -> AsyncIterator[S3Client]:
    config = moto_config(
        session_proxy.url,
        read_timeout_s=0.5,
        retry=RetryPolicy(max_attempts=ATTEMPTS, base_s=0.001, cap_s=0.01),
    )
    async with S3Client(config) as client:
        yield client


@pytest.fixture
def proxy(session_proxy: FaultProxy) -> Iterator[FaultProxy]:
    session_proxy.reset()
    yield session_proxy
    session_proxy.reset()


@pytest.fixture
async def store(
    proxy: FaultProxy,  # noqa: ARG001  (requested for its reset before the first put)
    proxy_client: S3Client,
    s3_bucket: str,
) -> AsyncIterator[ObjectStore]:
    async with open_store(f"s3://{s3_bucket}/t", client=proxy_client) as store:
        await store.put("obj", b"payload")
        yield store


async def listing(store: ObjectStore) -> list[str]:
    return [meta.key async for meta in store.list("")]


# operation -> (HTTP method, path substring of its request, the call)
OPERATIONS: dict[str, tuple[str, str, Callable[[ObjectStore], Awaitable[object]]]] = {
    "get": ("GET", "/t/obj", lambda s: s.get("obj")),
    "get_range": ("GET", "/t/obj", lambda s: s.get("obj", start=1, end=3)),
    "head": ("HEAD", "/t/obj", lambda s: s.head("obj")),
    "put": ("PUT", "/t/obj", lambda s: s.put("obj", b"new")),
    "put_if_absent": ("PUT", "/t/fresh", lambda s: s.put_if_absent("fresh", b"x")),
    "delete": ("DELETE", "/t/obj", lambda s: s.delete("obj")),
    "list": ("GET", "list-type=2", listing),
    "delete_many": ("POST", "delete", lambda s: s.delete_many(["obj", "other"])),
}


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_throttling_server_errors_and_resets_are_retried(
    store: ObjectStore, proxy: FaultProxy, operation: str
) -> None:
    """A 503 SlowDown, a 500 and a connection reset in a row are retried to success."""
    method, contains, call = OPERATIONS[operation]
    before = proxy.count(method, contains)
    for fault in (Fault.SLOW_DOWN, Fault.INTERNAL, Fault.RESET):
        proxy.inject(fault, method=method, contains=contains)
    await call(store)
    assert proxy.count(method, contains) - before == 4


async def test_results_after_retries_are_right(store: ObjectStore, proxy: FaultProxy) -> None:
    """What a retried call returns is the real answer, not a leftover of the failed attempts."""
    proxy.inject(Fault.SLOW_DOWN, times=2, method="GET")
    assert await store.get("obj", start=1, end=4) == b"ayl"
    proxy.inject(Fault.RESET, method="PUT")
    assert await store.put_if_absent("fresh", b"x") == Written("fresh")
    proxy.inject(Fault.INTERNAL, method="PUT")
    assert await store.put_if_absent("fresh", b"y") == AlreadyExists("fresh")
    assert await store.get("fresh") == b"x"


async def test_truncated_body_is_retried(store: ObjectStore, proxy: FaultProxy) -> None:
    """A connection reset halfway through a response body is retried, never returned short."""
    await store.put("big", bytes(range(256)) * 1024)
    proxy.inject(Fault.TRUNCATE, method="GET", contains="/t/big")
    assert await store.get("big") == bytes(range(256)) * 1024
    assert proxy.count("GET", "/t/big") == 2


async def test_read_timeout_is_retried(store: ObjectStore, proxy: FaultProxy) -> None:
    """A server that stops answering is given up on after the read timeout, and retried."""
    proxy.inject(Fault.HANG, method="GET", contains="/t/obj")
    assert await store.get("obj") == b"payload"
    assert proxy.count("GET", "/t/obj") == 2


@pytest.mark.parametrize("fault", [Fault.SLOW_DOWN, Fault.RESET])
async def test_exhausted_retries_name_operation_and_key(
    store: ObjectStore, proxy: FaultProxy, fault: Fault
) -> None:
    """When every attempt fails, the error says what was tried on which key, how often, and why."""
    proxy.inject(fault, times=None, method="GET", contains="/t/obj")
    with pytest.raises(RetriesExhaustedError) as info:
        await store.get("obj")
    error = info.value
    assert (error.operation, error.key, error.attempts) == ("get", "obj", ATTEMPTS)
    assert str(error).startswith(f"get obj: gave up after {ATTEMPTS} attempts: ")
    assert isinstance(error.__cause__, TransientStorageError)
    if fault is Fault.SLOW_DOWN:
        assert "SlowDown (HTTP 503)" in str(error)
        assert proxy.count("GET", "/t/obj") == ATTEMPTS
    else:  # aiohttp itself resends an idempotent request once when its connection dies
        assert "connect" in str(error).lower()
        assert ATTEMPTS <= proxy.count("GET", "/t/obj") <= 2 * ATTEMPTS


async def test_client_errors_are_not_retried(store: ObjectStore, proxy: FaultProxy) -> None:
    """A 403 is final: one request, a StorageError that is not transient."""
    before = proxy.count("PUT")
    proxy.inject(Fault.FORBIDDEN, times=None, method="PUT")
    with pytest.raises(StorageError, match=r"put obj: AccessDenied \(HTTP 403\)") as info:
        await store.put("obj", b"x")
    assert not isinstance(info.value, TransientStorageError)
    assert proxy.count("PUT") - before == 1


async def test_a_refused_batch_delete_names_its_first_key(
    store: ObjectStore, proxy: FaultProxy
) -> None:
    """A 403 to DeleteObjects is final and names the operation and the batch's first key;
    nothing was deleted."""
    proxy.inject(Fault.FORBIDDEN, times=None, method="POST", contains="delete")
    with pytest.raises(StorageError, match=r"delete_many obj: AccessDenied \(HTTP 403\)"):
        await store.delete_many(["obj", "other"])
    assert await listing(store) == ["obj"]


async def test_conditional_conflict_is_retried(store: ObjectStore, proxy: FaultProxy) -> None:
    """A 409 ConditionalRequestConflict to put_if_absent is retried, and the retry decides."""
    proxy.inject(Fault.CONFLICT, method="PUT", contains="/t/commit")
    assert await store.put_if_absent("commit", b"ours") == Written("commit")
    proxy.inject(Fault.CONFLICT, method="PUT", contains="/t/commit")
    assert await store.put_if_absent("commit", b"theirs") == AlreadyExists("commit")
    assert proxy.count("PUT", "/t/commit") == 4


async def test_put_if_absent_recognises_its_own_landed_write(
    store: ObjectStore, proxy: FaultProxy
) -> None:
    """A put_if_absent whose write landed but whose answer was lost still reports Written
    (the resend that meets the landed object may be aiohttp's, not ours)."""
    proxy.inject(Fault.LOSE_RESPONSE, method="PUT", contains="/t/commit")
    assert await store.put_if_absent("commit", b"ours") == Written("commit")
    assert await store.get("commit") == b"ours"
    assert await store.put_if_absent("commit", b"theirs") == AlreadyExists("commit")


async def test_put_if_absent_after_a_failure_still_loses_to_others(
    store: ObjectStore, proxy: FaultProxy, s3_bucket: str, moto_endpoint: str
) -> None:
    """After a failed attempt, a key taken by different bytes is still AlreadyExists."""
    boto_client(moto_endpoint).put_object(Bucket=s3_bucket, Key="t/commit", Body=b"theirs")
    proxy.inject(Fault.INTERNAL, method="PUT", contains="/t/commit")
    assert await store.put_if_absent("commit", b"ours") == AlreadyExists("commit")
    assert await store.get("commit") == b"theirs"


def uploads(moto_endpoint: str, bucket: str) -> list[str]:
    listing = boto_client(moto_endpoint).list_multipart_uploads(Bucket=bucket)
    return [upload["Key"] for upload in listing.get("Uploads", [])]


async def test_writer_retries_parts(
    store: ObjectStore, proxy: FaultProxy, s3_bucket: str, moto_endpoint: str
) -> None:
    """Failed part uploads and a failed completion are retried; the object is whole."""
    data = b"".join(bytes([n]) * (MIN_PART_SIZE // 2 + n) for n in range(5))
    proxy.inject(Fault.SLOW_DOWN, times=2, method="PUT", contains="partNumber=")
    proxy.inject(Fault.RESET, method="PUT", contains="partNumber=2")
    proxy.inject(Fault.INTERNAL, method="POST", contains="uploadId=")
    async with store.open_writer("out.parquet") as writer:
        for start in range(0, len(data), 1_000_000):
            await writer.write(data[start : start + 1_000_000])
    assert await store.get("out.parquet") == data
    assert uploads(moto_endpoint, s3_bucket) == []


@pytest.mark.parametrize(
    ("method", "contains", "operation"),
    [("PUT", "partNumber=", "write"), ("POST", "uploadId=", "complete")],
)
async def test_writer_that_cannot_finish_aborts(
    store: ObjectStore,
    proxy: FaultProxy,
    s3_bucket: str,
    moto_endpoint: str,
    method: str,
    contains: str,
    operation: str,
) -> None:
    """A part or a completion that keeps failing aborts the upload: no object, no upload."""
    proxy.inject(Fault.SLOW_DOWN, times=None, method=method, contains=contains)

    async def write() -> None:
        async with store.open_writer("out.parquet") as writer:
            await writer.write(b"x" * (MIN_PART_SIZE + 10))

    with pytest.raises(RetriesExhaustedError) as info:
        await write()
    assert (info.value.operation, info.value.key) == (operation, "out.parquet")
    with pytest.raises(NotFoundError):
        await store.head("out.parquet")
    assert uploads(moto_endpoint, s3_bucket) == []
    assert proxy.count("DELETE", "uploadId=") == 1


async def test_request_bodies_carry_a_crc32_of_their_bytes_and_no_other_digest(
    store: ObjectStore, proxy: FaultProxy
) -> None:
    """Every body sent (a small put, each part of a multipart upload) carries in its headers
    the CRC32 of exactly the bytes that arrived, which S3 checks before storing them, and is
    neither SHA-256 signed nor aws-chunked; downloads ask for no checksum validation."""
    await store.put("small", b"commit")
    async with store.open_writer("big") as writer:
        await writer.write(b"x" * (MIN_PART_SIZE // 2))
        await writer.write(bytes(range(256)) * (MIN_PART_SIZE // 256))
    assert await store.get("small") == b"commit"
    bodies = [s for s in proxy.seen if s.method == "PUT" and "/t/obj" not in s.path]
    assert len(bodies) == 3  # the small put and two parts
    for sent in bodies:
        assert sent.headers["x-amz-checksum-crc32"] == _crc32_header(sent), sent.path
        assert sent.headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD", sent.path
        assert "aws-chunked" not in sent.headers.get("content-encoding", ""), sent.path
    downloads = [s for s in proxy.seen if s.method == "GET"]
    assert downloads and all("x-amz-checksum-mode" not in s.headers for s in downloads)


def _crc32_header(sent: Seen) -> str:
    return base64.b64encode(sent.body_crc32.to_bytes(4, "big")).decode()
