"""Backends for the contract suite: the local store in a temp dir, and S3 on the moto server.

Each backend comes with a way to see what a failed write may have left behind (temp files,
incomplete multipart uploads), so that the suite can assert that nothing was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlcd.storage import S3Client, open_store
from rlcd.storage._local import is_temp_name
from tests.contract.support import Backend, boto_client, moto_config


@pytest.fixture(scope="session")
async def moto_client(moto_endpoint: str) -> AsyncIterator[S3Client]:
    """One client for the whole session, as a daemon shares one between its tables (and
    because building a client costs ~0.1 s of model loading)."""
    async with S3Client(moto_config(moto_endpoint)) as client:
        yield client


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
