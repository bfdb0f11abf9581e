"""Storage failures during a compaction on S3: their kind decides the exit code, and an
unknown commit outcome keeps the outputs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlcd.cli.exit_codes import exit_code
from rlcd.compaction.compact import CompactionReport, FailureKind, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.names import rlcd_file_uuid
from rlcd.errors import StorageError
from rlcd.storage import S3Client, open_store
from tests.contract.faultproxy import Fault, FaultProxy
from tests.contract.support import boto_client, moto_config
from tests.integration.tables import S3Mirror, partitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint).running() as running:
        yield running


def _rlcd_files(endpoint: str, bucket: str) -> list[str]:
    listing = boto_client(endpoint).list_objects_v2(Bucket=bucket, Prefix="w/t/")
    keys = [item["Key"] for item in listing.get("Contents", [])]
    return [k for k in keys if rlcd_file_uuid(k.rpartition("/")[2])]


async def _run(tmp_path: Path, bucket: str, endpoint: str, proxy: FaultProxy) -> CompactionReport:
    partitioned(tmp_path / "t")
    uri = S3Mirror(endpoint, bucket).upload(tmp_path / "t", "w/t")
    async with (
        S3Client(moto_config(proxy.url, read_timeout_s=2.0)) as client,
        open_store(uri, client=client) as store,
    ):
        return await compact_table(store, CompactionPolicy(), count_rows=False)


async def test_an_outage_in_the_middle_of_a_run_fails_bins_as_storage(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, proxy: FaultProxy
) -> None:
    """S3 failing (500s through every retry) once the log is loaded fails every bin as a
    storage failure, so the exit code is 4 as when the outage is there at the start."""
    proxy.inject(Fault.INTERNAL, times=None, method="GET", contains=".snappy.parquet")
    report = await _run(tmp_path, s3_bucket, moto_endpoint, proxy)
    assert report.failed and {f.kind for f in report.failed} == {FailureKind.STORAGE}
    assert exit_code(report) == 4
    assert report.committed_version is None


async def test_an_unknown_commit_outcome_keeps_the_outputs_and_says_so(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, proxy: FaultProxy
) -> None:
    """When every commit PUT is cut off before an answer, the commit may have landed: the
    outputs stay for a later cleanup to judge, and the error says so."""
    proxy.inject(Fault.RESET, times=None, method="PUT", contains="/_delta_log/0")
    with pytest.raises(StorageError, match=r"may have landed, so its written outputs \(2\) stay"):
        await _run(tmp_path, s3_bucket, moto_endpoint, proxy)
    assert len(_rlcd_files(moto_endpoint, s3_bucket)) == 2
