"""Data requests (a source's GET, a part's UploadPart) go through aiobotocore's client like
every other request: ranges, clipped ranges, a missing key, a refused request and a store that
ignores ``Range``, through real requests to moto behind the fault proxy."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rlcd.errors import NotFoundError, StorageError, TransientStorageError
from rlcd.storage import MIN_PART_SIZE, S3Client, open_store
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
    """Counts, by operation, the requests the aiobotocore client sends from now on (its public
    event hook ``before-send``)."""
    sent: collections.Counter[str] = collections.Counter()

    def count(event_name: str, **_: Any) -> None:
        sent[event_name.rsplit(".", 1)[-1]] += 1

    client._raw("test", "-").meta.events.register("before-send.s3", count)
    return sent


async def test_gets_and_parts_go_through_the_client(
    client: S3Client, proxy: FaultProxy, moto_endpoint: str, s3_bucket: str
) -> None:
    """Whole and ranged GETs and every UploadPart are sent by the aiobotocore client (with
    rlcd's fixed User-Agent), and read back byte for byte; a range past the end is clipped to
    nothing, a missing key is NotFoundError."""
    data = bytes(range(256)) * (MIN_PART_SIZE // 256) + b"tail"
    sent = botocore_sends(client)
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        async with store.open_writer("big") as writer:
            await writer.write(data)
        assert await store.get("big") == data
        assert await store.get("big", start=5, end=9) == data[5:9]
        assert await store.get("big", start=len(data) - 4) == b"tail"
        assert await store.get("big", start=len(data) + 10) == b""
        with pytest.raises(NotFoundError):
            await store.get("missing")
    body = boto_client(moto_endpoint).get_object(Bucket=s3_bucket, Key="t/big")["Body"]
    assert body.read() == data
    assert sent["UploadPart"] == 2 and sent["GetObject"] == 5
    assert sent["CreateMultipartUpload"] == sent["CompleteMultipartUpload"] == 1
    agents = {s.headers["user-agent"] for s in proxy.seen}
    assert len(agents) == 1 and agents.pop().startswith("rlcd/")


async def test_a_refused_get_is_final_and_named(
    client: S3Client, proxy: FaultProxy, s3_bucket: str
) -> None:
    """A 403 to a GET is the error, sent once: AccessDenied, named operation and key."""
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        await store.put("obj", b"payload")
        proxy.inject(Fault.FORBIDDEN, times=None, method="GET", contains="/t/obj")
        with pytest.raises(StorageError, match=r"get obj: AccessDenied \(HTTP 403\)") as info:
            await store.get("obj")
        assert not isinstance(info.value, TransientStorageError)
        assert proxy.count("GET", "/t/obj") == 1


async def test_a_range_answered_with_the_whole_object_is_refused(
    client: S3Client, proxy: FaultProxy, s3_bucket: str
) -> None:
    """A store that ignores ``Range`` answers with the whole object: refused, never taken for
    the bytes asked for."""
    async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
        await store.put("obj", b"0123456789")
        proxy.inject(Fault.IGNORE_RANGE, times=None, method="GET", contains="/t/obj")
        with pytest.raises(StorageError, match=r"bytes=2-4 with no Content-Range") as info:
            await store.get("obj", start=2, end=5)
        assert not isinstance(info.value, TransientStorageError)
        proxy.reset()
        assert await store.get("obj", start=2, end=5) == b"234"
