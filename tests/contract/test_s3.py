"""What only the S3 backend has: client sharing, prefixes, configuration from the environment."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rlcd.errors import ConfigError, InternalError, NotFoundError, StorageError
from rlcd.storage import LocalStore, S3Client, S3Config, TableUri, open_store
from tests.contract.support import boto_client, moto_config

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_stores_share_one_client(moto_endpoint: str, s3_bucket: str) -> None:
    """Stores made from one client are isolated by prefix, close independently, and stop when
    the client closes."""
    async with S3Client(moto_config(moto_endpoint)) as client:
        a = client.store(TableUri.parse(f"s3://{s3_bucket}/tables/a"))
        b = client.store(TableUri.parse(f"s3://{s3_bucket}/tables/ab"))
        await a.put("_delta_log/0.json", b"a")
        await b.put("_delta_log/0.json", b"b")
        assert [m.key async for m in a.list("")] == ["_delta_log/0.json"]
        assert await b.get("_delta_log/0.json") == b"b"
        assert a.root == f"s3://{s3_bucket}/tables/a"
        await a.aclose()
        with pytest.raises(StorageError, match="store is closed"):
            await a.get("_delta_log/0.json")
        assert await b.get("_delta_log/0.json") == b"b"
    with pytest.raises(StorageError, match="client is not open"):
        await b.get("_delta_log/0.json")
    with pytest.raises(StorageError, match="client is not open"):
        client.store(TableUri.parse(f"s3://{s3_bucket}/tables/c"))


async def test_bucket_root_and_foreign_objects(moto_endpoint: str, s3_bucket: str) -> None:
    """A store at the bucket root sees every key; "folder" markers are not objects; a store at a
    prefix sees only its own keys."""
    boto = boto_client(moto_endpoint)
    boto.put_object(Bucket=s3_bucket, Key="table/folder/", Body=b"")
    boto.put_object(Bucket=s3_bucket, Key="table/x", Body=b"x")
    boto.put_object(Bucket=s3_bucket, Key="tablex", Body=b"not ours")
    config = moto_config(moto_endpoint)
    async with open_store(f"s3://{s3_bucket}", s3=config) as root:
        assert [m.key async for m in root.list("")] == ["table/x", "tablex"]
    async with open_store(f"s3://{s3_bucket}/table/", s3=config) as table:
        assert [m.key async for m in table.list("")] == ["x"]
        assert table.root == f"s3://{s3_bucket}/table"


async def test_missing_bucket_is_not_a_missing_object(moto_endpoint: str) -> None:
    """A wrong bucket is a configuration problem, not a NotFoundError the caller might ignore."""
    async with open_store("s3://no-such-bucket-rlcd/t", s3=moto_config(moto_endpoint)) as store:
        with pytest.raises(StorageError, match="NoSuchBucket") as info:
            await store.get("k")
    assert not isinstance(info.value, NotFoundError)


@pytest.fixture
def clean_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No endpoint, region or profile from the machine running the tests."""
    for name in (
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    return monkeypatch


@pytest.mark.parametrize("endpoint_var", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
async def test_unset_settings_come_from_the_environment(
    clean_aws_env: pytest.MonkeyPatch, moto_endpoint: str, s3_bucket: str, endpoint_var: str
) -> None:
    """With an empty S3Config, endpoint, region and credentials come from AWS_* variables."""
    clean_aws_env.setenv(endpoint_var, moto_endpoint)
    clean_aws_env.setenv("AWS_DEFAULT_REGION", "us-west-2")
    clean_aws_env.setenv("AWS_REGION", "eu-central-1")  # the SDK variable wins, as elsewhere
    async with S3Client(S3Config()) as client:
        assert client._raw("test", "").meta.region_name == "eu-central-1"
        async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
            await store.put("k", b"v")
            assert await store.get("k") == b"v"


async def test_unset_settings_come_from_the_profile(
    clean_aws_env: pytest.MonkeyPatch, moto_endpoint: str, s3_bucket: str, tmp_path: Path
) -> None:
    """AWS_PROFILE selects a shared-config profile with its endpoint, region and style."""
    (tmp_path / "aws-config").write_text(
        "[profile rlcd-test]\n"
        "region = ap-south-1\n"
        f"endpoint_url = {moto_endpoint}\n"
        "aws_access_key_id = testing\n"
        "aws_secret_access_key = testing\n"
        "s3 =\n"
        "  addressing_style = path\n"
    )
    clean_aws_env.setenv("AWS_PROFILE", "rlcd-test")
    async with S3Client() as client:
        assert client._raw("test", "").meta.region_name == "ap-south-1"
        async with open_store(f"s3://{s3_bucket}/t", client=client) as store:
            await store.put("k", b"v")
            assert await store.get("k") == b"v"


@pytest.mark.usefixtures("clean_aws_env")
async def test_unknown_profile_is_a_config_error() -> None:
    """A profile that does not exist fails when the client opens, naming the problem."""
    with pytest.raises(ConfigError, match="no-such-profile"):
        async with S3Client(S3Config(profile="no-such-profile")):
            pass


async def test_client_misuse_is_refused(moto_endpoint: str, tmp_path: Path) -> None:
    """A client opens once and serves only s3:// URIs; open_store wants settings or a client."""
    client = S3Client(moto_config(moto_endpoint))
    with pytest.raises(StorageError, match="not open"):
        client.store(TableUri.parse("s3://bucket/t"))
    async with client:
        with pytest.raises(ConfigError, match="not an s3:// URI"):
            client.store(TableUri.parse(str(tmp_path)))
        with pytest.raises(ValueError, match="not both"):
            async with open_store("s3://bucket/t", s3=S3Config(), client=client):
                pass
    with pytest.raises(InternalError):
        async with client:
            pass


async def test_open_store_dispatches_on_scheme(tmp_path: Path) -> None:
    """Plain paths and file:// URIs open the local backend; S3 settings do not matter to it."""
    async with open_store(str(tmp_path), s3=S3Config(region="x")) as store:
        assert isinstance(store, LocalStore)
        assert store.root == f"file://{tmp_path}"
    async with open_store(TableUri.parse(f"file://{tmp_path}/t")) as store:
        assert store.root == f"file://{tmp_path}/t"


def test_racing_conditional_puts_have_one_winner(
    moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Racing PUTs of one key with ``If-None-Match: *`` have exactly one winner on the test
    server, even when moto dawdles between its absence check and its store (the session's moto
    makes the pair atomic, as S3 is: the Delta log's put-if-absent relies on it)."""
    from moto.s3.models import S3Backend

    store = S3Backend.put_object

    def dawdling(self: S3Backend, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)  # the others' checks would all pass meanwhile
        return store(self, *args, **kwargs)

    monkeypatch.setattr(S3Backend, "put_object", dawdling)
    client = boto_client(moto_endpoint)

    def put(i: int) -> str:
        try:
            client.put_object(Bucket=s3_bucket, Key="k/00.json", Body=str(i), IfNoneMatch="*")
        except client.exceptions.ClientError as exc:
            return str(exc.response["Error"]["Code"])
        return "stored"

    with ThreadPoolExecutor(6) as pool:
        outcomes = sorted(pool.map(put, range(6)))
    assert outcomes == ["PreconditionFailed"] * 5 + ["stored"]
