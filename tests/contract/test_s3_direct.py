"""Data requests (GET, UploadPart) go past botocore's request pipeline and aiohttp, on rlcd's
own connections, signed by rlcd; anything but a conclusive answer sends them through botocore
instead, and so does a proxy between rlcd and the bucket."""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rlcd.errors import NotFoundError, StorageError, TransientStorageError
from rlcd.storage import MIN_PART_SIZE, S3Client, S3Store, open_store
from rlcd.storage.s3 import _Reply, _Route
from tests.contract.faultproxy import Fault, FaultProxy
from tests.contract.support import boto_client, moto_config

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def proxy(moto_endpoint: str) -> Any:
    with FaultProxy(moto_endpoint).running() as proxy:
        yield proxy


@pytest.fixture
async def client(proxy: FaultProxy) -> AsyncIterator[S3Client]:
    async with S3Client(moto_config(proxy.url)) as client:
        yield client


def botocore_sends(client: S3Client) -> collections.Counter[str]:
    """Counts, by operation, the requests botocore's own pipeline sends from now on."""
    sent: collections.Counter[str] = collections.Counter()

    def count(event_name: str, **_: Any) -> None:
        sent[event_name.rsplit(".", 1)[-1]] += 1

    client._raw("test", "-").meta.events.register("before-send.s3", count)
    return sent


async def test_gets_and_parts_skip_botocore(
    client: S3Client, proxy: FaultProxy, moto_endpoint: str, s3_bucket: str
) -> None:
    """Whole and ranged GETs and every UploadPart are sent without botocore's pipeline, signed
    (the store accepts them) and read back byte for byte; control requests still use it."""
    data = bytes(range(256)) * (MIN_PART_SIZE // 256) + b"tail"
    sent = botocore_sends(client)
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        async with store.open_writer("big") as writer:
            await writer.write(data)
        assert await store.get("big") == data
        assert await store.get("big", start=5, end=9) == data[5:9]
        assert await store.get("big", start=len(data) + 10) == b""
        with pytest.raises(NotFoundError):
            await store.get("missing")
    body = boto_client(moto_endpoint).get_object(Bucket=s3_bucket, Key="t/big")["Body"]
    assert body.read() == data
    assert "GetObject" not in sent and "UploadPart" not in sent
    assert sent["CreateMultipartUpload"] == sent["CompleteMultipartUpload"] == 1
    signed = [s for s in proxy.seen if s.method in {"GET", "PUT"} and "/t/big" in s.path]
    assert len(signed) >= 5 and all(
        s.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
        for s in signed
    )


async def test_a_refused_direct_get_is_sent_again_through_botocore(
    client: S3Client, proxy: FaultProxy, s3_bucket: str
) -> None:
    """A direct GET answered other than conclusively (here a 403) is sent again through
    botocore, which has the final word, and the bucket's requests stay with botocore after."""
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        assert isinstance(store, S3Store)
        await store.put("obj", b"payload")
        sent = botocore_sends(client)
        proxy.inject(Fault.FORBIDDEN, times=1, method="GET", contains="/t/obj")
        assert await store.get("obj") == b"payload"
        assert proxy.count("GET", "/t/obj") == 2 and sent["GetObject"] == 1
        assert await store.get("obj") == b"payload"
        assert sent["GetObject"] == 2


async def test_a_persistent_denial_still_surfaces(
    client: S3Client, proxy: FaultProxy, s3_bucket: str
) -> None:
    """A 403 that botocore meets too is the error: AccessDenied, named operation and key."""
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        await store.put("obj", b"payload")
        proxy.inject(Fault.FORBIDDEN, times=None, method="GET", contains="/t/obj")
        with pytest.raises(StorageError, match=r"get obj: AccessDenied \(HTTP 403\)"):
            await store.get("obj")
        assert proxy.count("GET", "/t/obj") == 2


async def test_a_refused_direct_part_is_sent_again_through_botocore(
    client: S3Client, proxy: FaultProxy, moto_endpoint: str, s3_bucket: str
) -> None:
    """A direct UploadPart refused once is sent again through botocore; the object is whole."""
    data = b"z" * (MIN_PART_SIZE + 7)
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        sent = botocore_sends(client)
        proxy.inject(Fault.FORBIDDEN, times=1, method="PUT", contains="partNumber=")
        async with store.open_writer("out") as writer:
            await writer.write(data)
    assert sent["UploadPart"] >= 1
    body = boto_client(moto_endpoint).get_object(Bucket=s3_bucket, Key="t/out")["Body"]
    assert body.read() == data


async def test_kept_alive_connections_stay_within_the_limit(
    client: S3Client, s3_bucket: str
) -> None:
    """More direct requests than the client's connection limit, one after another and at once,
    each get their answer (the fault proxy keeps connections alive, as S3 does), and the pool
    keeps no more idle connections than the limit, none holding a body it received."""
    limit = client.config.max_connections
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        await store.put("obj", b"payload")
        results = [await store.get("obj") for _ in range(limit + 3)]
        results += await asyncio.gather(*(store.get("obj") for _ in range(2 * limit)))
    assert results == [b"payload"] * (3 * limit + 3)
    pool = client._pool
    assert pool is not None
    assert 0 < len(pool._idle) <= limit
    assert all(not conn._body for _, _, conn in pool._idle)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "botocore"])
async def test_a_range_answered_with_the_whole_object_is_refused(
    client: S3Client, proxy: FaultProxy, s3_bucket: str, direct: bool
) -> None:
    """A store that ignores ``Range`` answers with the whole object: refused, never taken for
    the bytes asked for, whichever way the GET went."""
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        await store.put("obj", b"0123456789")
        if not direct:
            client._drop_route(s3_bucket)
        proxy.inject(Fault.IGNORE_RANGE, times=None, method="GET", contains="/t/obj")
        with pytest.raises(StorageError, match=r"bytes=2-4 with no Content-Range") as info:
            await store.get("obj", start=2, end=5)
        assert not isinstance(info.value, TransientStorageError)
        proxy.reset()
        assert await store.get("obj", start=2, end=5) == b"234"


async def test_a_proxy_sends_every_request_through_botocore(
    proxy: FaultProxy, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a proxy configured for the bucket's endpoint (here the standard environment
    variable, pointing at the store itself), rlcd's own connections are not used: botocore,
    which speaks to proxies, sends the data requests too."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with S3Client(moto_config(proxy.url)) as client:
        assert await client._route(s3_bucket) is None
        assert client._pool is None


async def test_https_connections_verify_as_botocore_does() -> None:
    """For an https endpoint the data requests' TLS context is botocore's: certificates and
    host names verified (the default ``verify``). Buckets opened at once share one pool."""
    config = moto_config("https://s3.example.invalid")
    async with S3Client(config) as client:
        routes = await asyncio.gather(*(client._route(f"bucket-{i}") for i in range(5)))
        assert all(r is not None and r.origin.scheme == "https" for r in routes)
        assert {id(r.pool) for r in routes if r is not None} == {id(client._pool)}
        context = client._pool._ssl if client._pool is not None else None
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize(
    ("status", "until_close", "conclusive"),
    [(200, False, True), (206, True, False), (404, False, True), (403, False, False)],
)
def test_a_body_of_unknown_length_is_not_conclusive(
    status: int, until_close: bool, conclusive: bool
) -> None:
    """A success whose body ended with its connection (no length, no chunks) cannot be told
    whole: botocore sends the request again."""
    reply = _Reply(status, {}, bytearray(b"x"), until_close)
    assert _Route.conclusive(reply) is conclusive
