"""A real compaction's report, fed to the daemon's metrics: the counters agree with the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.daemon.metrics import Metrics
from rlcd.storage import open_store
from tests.integration.tables import live_files, partitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_a_real_run_counts_its_commit_files_and_bytes(tmp_path: Path) -> None:
    """One uncontended commit is one attempt; files and bytes match what the table lost."""
    partitioned(tmp_path)
    before = live_files(tmp_path)
    async with open_store(str(tmp_path)) as store:
        report = await compact_table(store, CompactionPolicy())
    assert report.committed_version is not None and report.commit_attempts == 1
    metrics = Metrics()
    metrics.record_compaction(store.root, report, now_s=1.0)
    got = {
        s.name: s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if s.labels.get("table") == store.root and not s.name.endswith("_created")
    }
    assert got["rlcd_commit_attempts_total"] == 1
    assert got["rlcd_compacted_files_total"] - got["rlcd_written_files_total"] == (
        before - live_files(tmp_path)
    )
    assert got["rlcd_compacted_bytes_total"] == report.bytes_removed > 0
    assert got["rlcd_bins_committed_total"] == len(report.planned)
