"""``rlcd run`` as a subprocess vacuuming a local table: ``kill -9`` in the middle of its
deletes (after VACUUM START and one delete), then a restart, leaves a readable table whose
next vacuum completes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import anyio
import anyio.to_thread
import deltalake
import pyarrow as pa
import pytest

from rlcd.cli.daemon_demo import DaemonProcess
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.storage import LocalStore
from tests.e2e.commit_hold import SITE
from tests.e2e.test_daemon import event, until
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

HOURS_AGO = 3 * 3600

CONFIG = """
[daemon]
poll_interval = "100ms"
lease_ttl = "1s"
[log]
format = "json"
[metrics]
listen = ""
[policy]
vacuum_retain = "1h"
[[table]]
uri = "t"
"""


async def _table_compacted_hours_ago(path: Path) -> set[str]:
    """Four small files compacted into one with tombstones (and file times) three hours old;
    the names of the four sources."""
    for i in range(4):
        append(path, batch(i * 10, 10))
    sources = {p.name for p in path.glob("*.parquet")}
    then = time.time() - HOURS_AGO
    for name in sources:
        os.utime(path / name, (then, then))
    async with LocalStore(str(path)) as store:
        report = await compact_table(store, CompactionPolicy(), now_ms=lambda: int(then * 1000))
    assert report.committed_version == 4
    return sources


def _operations(path: Path) -> list[str]:
    """The operation of each commit, in order."""
    found = []
    for commit in sorted((path / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            if "commitInfo" in line:
                found.append(json.loads(line)["commitInfo"]["operation"])
    return found


def _rows(path: Path) -> list[int]:
    ids = pa.table(deltalake.DeltaTable(str(path)).to_pyarrow_table()).column("id")
    return sorted(ids.to_pylist())


async def test_kill_9_in_the_middle_of_a_vacuum_then_restart(tmp_path: Path) -> None:
    """Held after VACUUM START and the first of four deletes, the daemon is killed: the table
    still reads every row (delta-rs) and its output is untouched; the restarted daemon
    (taking over the dead one's lease at once) vacuums again, VACUUM START and END recorded,
    and leaves the output alone."""
    path = tmp_path / "t"
    sources = await _table_compacted_hours_ago(path)
    expected = _rows(path)
    (output,) = {p.name for p in path.glob("*.parquet")} - sources
    (tmp_path / "rlcd.toml").write_text(CONFIG)
    hold = tmp_path / "hold"
    hold.mkdir()
    root = str(SITE.parents[2])
    env = {"PYTHONPATH": os.pathsep.join([str(SITE), root]), "RLCD_TEST_HOLD_DELETE": str(hold)}
    daemon = DaemonProcess(tmp_path / "rlcd.toml", env=env, log=tmp_path / "killed.log")
    try:
        await until(lambda: (hold / "held").exists(), within_s=60, what="the held delete")
    finally:
        daemon.kill()
    assert _operations(path)[-1] == "VACUUM START"
    left = {p.name for p in path.glob("*.parquet")}
    assert len(sources - left) == 1 and output in left
    assert _rows(path) == expected

    daemon = DaemonProcess(tmp_path / "rlcd.toml", env={}, log=tmp_path / "daemon.log")
    try:
        await until(lambda: event(daemon, "vacuum_done"), within_s=60, what="the vacuum")
        daemon.signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(daemon.wait, 30.0) == 0
    finally:
        daemon.kill()
    (done,) = [e for e in daemon.events() if e.get("event") == "vacuum_done"]
    assert (done["files"], done["mode"]) == (3, "lite")
    assert {p.name for p in path.glob("*.parquet")} == {output}
    assert _operations(path)[-3:] == ["VACUUM START", "VACUUM START", "VACUUM END"]
    assert _rows(path) == expected
