"""Data requests (GET, UploadPart) go past botocore's request pipeline, on its connection pool,
signed by rlcd; anything but a conclusive answer sends them through botocore instead."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rlcd.errors import NotFoundError, StorageError
from rlcd.storage import MIN_PART_SIZE, S3Client, S3Store, open_store
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
