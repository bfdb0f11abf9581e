"""compact_table as the daemon calls it: with the snapshot it holds, the limiters it shares
across tables, and a minimum file age."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore
from rlcd.storage.metered import MeteredStore
from tests.integration.tables import delta_rs_rows, live_files, partitioned, unpartitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)


async def test_a_held_snapshot_is_not_loaded_again(tmp_path: Path) -> None:
    """Given the snapshot (and no cleanup, which the daemon schedules on its own), the run
    reads no log file; the report carries that snapshot."""
    unpartitioned(tmp_path)
    async with MeteredStore(LocalStore(tmp_path)) as store:
        snapshot = await load_snapshot(store)
        store.reset()
        report = await compact_table(store, POLICY, snapshot=snapshot, orphan_grace_s=None)
        assert report.committed_version == snapshot.version + 1
        assert report.snapshot is snapshot
        assert store.requests["get"] == 0 and store.requests["list"] == 0
    assert live_files(tmp_path) == 1


async def test_tables_share_the_bin_and_memory_limiters(tmp_path: Path) -> None:
    """Two tables compacted at once through one limiter of one token and one memory token
    both commit, and every token is given back."""
    a, b = tmp_path / "a", tmp_path / "b"
    unpartitioned(a)
    partitioned(b)
    before = {p: delta_rs_rows(p) for p in (a, b)}
    bins, memory = anyio.CapacityLimiter(1), anyio.CapacityLimiter(1)
    reports = []

    async def run(path: Path) -> None:
        async with LocalStore(path) as store:
            reports.append(await compact_table(store, POLICY, limiter=bins, memory=memory))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, a)
        tg.start_soon(run, b)
    assert all(r.committed_version is not None and not r.failed for r in reports)
    assert sum(len(r.committed) for r in reports) == 3  # one bin, then one per partition
    assert bins.borrowed_tokens == memory.borrowed_tokens == 0
    assert {p: delta_rs_rows(p) for p in (a, b)} == before


async def test_files_younger_than_the_minimum_age_are_left_alone(tmp_path: Path) -> None:
    """With a minimum file age the fresh files are not planned; once old enough they are."""
    unpartitioned(tmp_path)
    hour = 3600 * 1000
    async with LocalStore(tmp_path) as store:
        young = await compact_table(store, POLICY, min_file_age_ms=hour)
        assert young.planned == ()
        later = int(time.time() * 1000) + 2 * hour
        old = await compact_table(store, POLICY, min_file_age_ms=hour, now_ms=lambda: later)
        assert old.files_removed == 5
