"""Backends for the contract suite: the local store in a temp dir, and S3 on the moto server.

Each backend comes with a way to see what a failed write may have left behind (temp files,
incomplete multipart uploads), so that the suite can assert that nothing was.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlcd.storage import MIN_PART_SIZE, ObjectStore, RetryPolicy, S3Client, S3Config, open_store
from rlcd.storage.local import is_temp_name

FAST_RETRY = RetryPolicy(max_attempts=3, base_s=0.001, cap_s=0.005)


def moto_config(endpoint: str, **overrides: Any) -> S3Config:
    """Settings for the moto server: path addressing, small parts and pages, quick retries."""
    settings: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "addressing_style": "path",
        "part_size": MIN_PART_SIZE,
        "list_page_size": 7,
        "retry": FAST_RETRY,
    }
    settings.update(overrides)
    return S3Config(**settings)


@functools.cache
def boto_client(endpoint: str) -> Any:
    """A plain boto3 client, for looking behind the store's back."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture(scope="session")
async def moto_client(moto_endpoint: str) -> AsyncIterator[S3Client]:
    """One client for the whole session, as a daemon shares one between its tables (and
    because building a client costs ~0.1 s of model loading)."""
    async with S3Client(moto_config(moto_endpoint)) as client:
        yield client


@dataclass
class Backend:
    name: str
    store: ObjectStore
    leftovers: Callable[[], list[str]]
    """Temp files or incomplete multipart uploads that a finished writer must not leave."""


@dataclass
class Place:
    """Where a backend's store is rooted, before it is opened."""

    name: str
    uri: str
    client: S3Client | None
    leftovers: Callable[[], list[str]]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "local":

        def temp_files() -> list[str]:
            return [str(p) for p in tmp_path.rglob("*") if is_temp_name(p.name)]

        return Place("local", str(tmp_path / "table"), None, temp_files)

    endpoint: str = request.getfixturevalue("moto_endpoint")
    bucket: str = request.getfixturevalue("s3_bucket")
    boto = boto_client(endpoint)

    def uploads() -> list[str]:
        listing = boto.list_multipart_uploads(Bucket=bucket)
        return [upload["Key"] for upload in listing.get("Uploads", [])]

    client: S3Client = request.getfixturevalue("moto_client")
    return Place("s3", f"s3://{bucket}/warehouse/table", client, uploads)


@pytest.fixture
async def backend(place: Place) -> AsyncIterator[Backend]:
    async with open_store(place.uri, client=place.client) as store:
        yield Backend(place.name, store, place.leftovers)
