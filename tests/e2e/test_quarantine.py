"""``rlcd run`` on a local table with one corrupt source among healthy ones in one partition:
the corrupt file is quarantined after ``quarantine_after`` failed runs and left untouched,
the others are compacted, ``rlcd status``, ``/metrics`` and the log say so, and a reload
(SIGHUP) releases it."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path

import deltalake
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlcd.storage.uri import TableUri
from tests.e2e.test_daemon import event, get, rlcd_cli, start, until
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def _free_port() -> int:
    """A port free now, so ``rlcd status`` finds the daemon where the config says."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(port: int) -> str:
    return f"""
[daemon]
poll_interval = "200ms"
[log]
format = "json"
[metrics]
listen = "127.0.0.1:{port}"
[policy]
min_small_files = 3
min_interval = "0s"
min_file_age = "0s"
quarantine_after = 2
[[table]]
uri = "tables/t"
"""


def _added_path(table: Path, version: int) -> str:
    commit = table / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    return str(next(a["add"]["path"] for a in actions if "add" in a))


def _ids(table: Path, *, but: str) -> list[int]:
    """The ids of every live file but ``but`` (which cannot be read), sorted."""
    uris = deltalake.DeltaTable(str(table)).file_uris()
    ids = [
        i
        for uri in uris
        if not uri.endswith(but)
        for i in pq.read_table(uri.removeprefix("file://"), columns=["id"])["id"].to_pylist()
    ]
    return sorted(ids)


def _quarantined_gauge(port: int, table: str) -> float | None:
    _, body = get(port, "/metrics")
    return next(
        (
            s.value
            for f in text_string_to_metric_families(body.decode())
            if f.name == "rlcd_quarantined_files"
            for s in f.samples
            if s.labels.get("table") == table
        ),
        None,
    )


async def test_a_corrupt_source_is_quarantined_and_its_partition_compacted(
    tmp_path: Path,
) -> None:
    """Five small files in one partition, the third truncated: two runs fail on it, it is
    quarantined (one event naming table, file and error; status; the gauge), the four healthy
    files are compacted into one without losing or duplicating a row, the corrupt file's bytes
    are unchanged; SIGHUP releases it (status, gauge) and a new bin tries it again."""
    table = tmp_path / "tables" / "t"
    for i in range(5):
        append(table, batch(i * 10, 10))
    bad = _added_path(table, 2)
    bad_file = table / bad
    bad_bytes = bad_file.read_bytes()[: bad_file.stat().st_size // 2]
    bad_file.write_bytes(bad_bytes)
    name = str(TableUri.parse(str(table)))
    port = _free_port()
    daemon = start(tmp_path, _config(port))
    try:
        await until(
            lambda: event(daemon, "source_quarantined", table=name, file=bad),
            within_s=60,
            what="source_quarantined",
        )
        quarantined = next(e for e in daemon.events() if e["event"] == "source_quarantined")
        assert quarantined["failures"] == 2 and quarantined["dv"] is None
        assert bad in quarantined["error"] and "Parquet" in quarantined["error"]
        failed = [e for e in daemon.events() if e["event"] == "bin_failed"]
        assert len(failed) == 2 and all(bad in e["error"] for e in failed)
        await until(
            lambda: len(deltalake.DeltaTable(str(table)).file_uris()) == 2,
            within_s=30,
            what="the healthy files compacted",
        )
        assert _ids(table, but=bad) == [*range(20), *range(30, 50)]
        assert bad_file.read_bytes() == bad_bytes
        assert _quarantined_gauge(port, name) == 1

        status = rlcd_cli("status", "--config", "rlcd.toml", cwd=tmp_path)
        assert "quarantined files: 1" in status.stdout, status.stdout + status.stderr
        assert f"    {bad}: 2 failed reads, quarantined since " in status.stdout
        assert "daemon's last 3 runs, newest first:" in status.stdout
        runs = status.stdout.split("newest first:")[1].splitlines()[1:4]
        assert "committed: 1 of 1 bins, 4 files -> 1, 0 reconciled" in runs[0]
        # the bins failed on the bad file, with no writer racing: failed runs, not conflicts
        assert all("failed: 0 of 1 bins: " in r and bad in r for r in runs[1:]), runs

        daemon.signal(signal.SIGHUP)
        await until(
            lambda: event(daemon, "config_reloaded") and event(daemon, "quarantine_released"),
            within_s=30,
            what="the reload",
        )
        reloaded = next(e for e in daemon.events() if e["event"] == "config_reloaded")
        assert (reloaded["tables"], reloaded["named"], reloaded["discovered"]) == (1, 1, 0)
        assert "changed" not in reloaded  # the same file: nothing changed
        assert event(daemon, "quarantine_released", table=name, files=1)
        await until(lambda: _quarantined_gauge(port, name) == 0, within_s=30, what="the gauge at 0")
        status = rlcd_cli("status", "--config", "rlcd.toml", cwd=tmp_path)
        assert "quarantined files: none" in status.stdout, status.stdout

        for i in range(5, 7):  # with these the partition makes a bin again: the file with it
            append(table, batch(i * 10, 10))
        await until(
            lambda: sum(e["event"] == "bin_failed" for e in daemon.events()) == 3,
            within_s=30,
            what="the released file tried again",
        )
        assert bad in [e for e in daemon.events() if e["event"] == "bin_failed"][-1]["error"]
        assert bad_file.read_bytes() == bad_bytes
    finally:
        daemon.kill()
