"""Compaction through a metering wrapper: the wrapped store's capabilities carry through (a
local store's files are still read and written in place), and every request is counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.storage import LocalStore, open_store
from rlcd.storage.metered import MeteredStore
from tests.integration.tables import S3Mirror, delta_rs_rows, live_files, unpartitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)


async def test_compaction_through_a_metered_local_store(tmp_path: Path) -> None:
    """A metered local store compacts like the local store: sources are opened in place
    (local_read, no get of a data file) and the output is written natively (local_write)."""
    unpartitioned(tmp_path)
    before = delta_rs_rows(tmp_path)
    calls: list[tuple[str, int, int]] = []
    async with MeteredStore(LocalStore(tmp_path), on_request=lambda *c: calls.append(c)) as store:
        report = await compact_table(store, POLICY)
        assert report.committed_version is not None and report.files_removed == 5
        assert store.requests["local_read"] == 5
        assert store.requests["local_write"] == 1
        assert store.bytes["local_write"] == report.bytes_added
        assert store.requests["upload"] == 0
        assert store.requests["put_if_absent"] == 1, "one commit"
        log_gets = report.read_version + 2  # _last_checkpoint (absent) and each commit
        assert store.requests["get"] == log_gets, "no data file read through get"
        assert sum(n for _, _, n in calls) == sum(store.bytes.values())
        assert sum(r for _, r, _ in calls) == sum(store.requests.values())
    assert delta_rs_rows(tmp_path) == before and live_files(tmp_path) == 1


async def test_compaction_through_a_metered_s3_store(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """A metered S3 store streams its output as an upload and counts the bytes it gets."""
    unpartitioned(tmp_path / "src")
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(tmp_path / "src", "tables/m")
    before = delta_rs_rows(tmp_path / "src")
    async with open_store(uri, s3=mirror.config) as inner:
        store = MeteredStore(inner)
        assert store.local_files() is None
        report = await compact_table(store, POLICY)
        assert report.committed_version is not None and report.files_removed == 5
        assert store.requests["local_read"] == store.requests["local_write"] == 0
        assert store.requests["upload"] == 1
        assert store.bytes["upload"] == report.bytes_added
        data_gets = store.requests["get"] - (report.read_version + 2)
        assert data_gets == 5, "each source fetched once"
        assert store.bytes["get"] >= report.bytes_removed
        assert store.requests["put_if_absent"] == 1
    copy = mirror.download("tables/m", tmp_path / "copy")
    assert delta_rs_rows(copy) == before and live_files(copy) == 1
    assert mirror.multipart_uploads() == 0
