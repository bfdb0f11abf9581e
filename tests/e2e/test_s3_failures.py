"""The CLI against S3 requests that are refused or fail: exit codes and what stays behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.faultproxy import Fault, FaultProxy
from tests.contract.support import boto_client
from tests.e2e.test_cli import rlcd
from tests.integration.tables import S3Mirror, partitioned

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint).running() as running:
        yield running


def _table(tmp_path: Path, moto_endpoint: str, bucket: str) -> str:
    partitioned(tmp_path / "t")
    return S3Mirror(moto_endpoint, bucket).upload(tmp_path / "t", "w/t")


def _compact(uri: str, proxy: FaultProxy) -> tuple[int, str, str]:
    done = rlcd("compact", uri, "--endpoint-url", proxy.url, "--addressing-style", "path", env=ENV)
    return done.returncode, done.stdout, done.stderr


def _keys(endpoint: str, bucket: str) -> list[str]:
    listing = boto_client(endpoint).list_objects_v2(Bucket=bucket, Prefix="w/t/")
    return [item["Key"] for item in listing.get("Contents", [])]


def test_a_refused_commit_deletes_its_outputs_and_says_so(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, proxy: FaultProxy
) -> None:
    """When the commit PUT is denied (as by an IAM policy on _delta_log/*) while the data
    writes and deletes are allowed, the outputs written for it are deleted, the message says
    the commit did not land and they were deleted, and the exit code is 4."""
    uri = _table(tmp_path, moto_endpoint, s3_bucket)
    before = _keys(moto_endpoint, s3_bucket)
    proxy.inject(Fault.FORBIDDEN, times=None, method="PUT", contains="/_delta_log/0")
    code, _, err = _compact(uri, proxy)
    assert code == 4, err
    assert "AccessDenied" in err and "did not land" in err and "(2) were deleted" in err
    assert proxy.count("PUT", ".zstd.parquet") == 2  # they had been written
    assert _keys(moto_endpoint, s3_bucket) == before
    assert "Traceback" not in err


def test_access_denied_on_data_writes_is_a_storage_failure(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, proxy: FaultProxy
) -> None:
    """Bins whose output PUT is denied fail as storage failures: exit 4 (not 1), the report
    names each bin and the denial, nothing is committed or left behind."""
    uri = _table(tmp_path, moto_endpoint, s3_bucket)
    before = _keys(moto_endpoint, s3_bucket)
    proxy.inject(Fault.FORBIDDEN, times=None, method="PUT", contains=".zstd.parquet")
    code, out, err = _compact(uri, proxy)
    assert code == 4, (out, err)
    assert out.count(": failed: put ") == 2 and "AccessDenied" in out
    assert ": nothing committed; 2 bins: 2 failed\n" in out
    assert _keys(moto_endpoint, s3_bucket) == before


def test_a_denied_vacuum_delete_names_the_table_and_the_file(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, proxy: FaultProxy
) -> None:
    """A vacuum whose DeleteObjects is denied exits 4 with a message naming the table and a
    file of the batch; it deletes nothing, and records VACUUM START and a FAILED END."""
    uri = _table(tmp_path, moto_endpoint, s3_bucket)
    code, _, err = _compact(uri, proxy)
    assert code == 0, err
    before = _keys(moto_endpoint, s3_bucket)
    proxy.inject(Fault.FORBIDDEN, times=None, method="POST", contains="delete")
    done = rlcd(
        "vacuum", uri, "--retain", "0h", "--force-short-retention",
        "--endpoint-url", proxy.url, "--addressing-style", "path", env=ENV,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert f"rlcd: {uri}: delete_many part=" in done.stderr
    assert "AccessDenied" in done.stderr and "Traceback" not in done.stderr
    added = set(_keys(moto_endpoint, s3_bucket)) - set(before)
    assert set(before) <= set(_keys(moto_endpoint, s3_bucket))
    assert all(k.startswith("w/t/_delta_log/") for k in added)
    assert {f"w/t/_delta_log/{v:020d}.json" for v in (9, 10)} <= added
