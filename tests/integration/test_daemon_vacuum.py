"""The daemon's vacuum job in process, on local and moto-S3 tables, with clocks the test
moves: tombstones older than the retention go, with their DV files; younger ones and live
files stay; the table reads the same through delta-rs, the kernel and ``rlcd verify``; a
table's own retention below an hour is never used."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from rlcd.daemon.config import parse_settings
from rlcd.daemon.supervise import Limits, Supervisor
from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore, S3Client
from rlcd.storage.base import ObjectStore
from rlcd.storage.uri import TableUri
from tests.integration.races import ROWS, RaceTable, batch, dv_delete, insert, judge
from tests.integration.tables import append, delta_rs_rows
from tests.integration.tables import batch as small_batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

HOUR_MS = 3_600_000
WEEK_MS = 7 * 24 * HOUR_MS  # the tables' default delta.deletedFileRetentionDuration

CONFIG = """
[daemon]
poll_interval = "100ms"
[metrics]
listen = ""
[policy]
min_small_files = 2
min_interval = "0s"
min_file_age = "0s"
vacuum_interval = "1d"
[[table]]
uri = "{uri}"
"""


async def _data_keys(table: RaceTable) -> set[str]:
    """Every key of the table outside ``_delta_log`` and rlcd's ``_rlcd``."""
    async with table.store() as store:
        return {m.key async for m in store.list("") if not m.key.startswith("_")}


async def _live_keys(table: RaceTable) -> set[str]:
    """The data and DV files the table's latest version reads."""
    async with table.store() as store:
        snapshot = await load_snapshot(store)
    keys = set()
    for add in snapshot.files.values():
        keys.add(add.path)
        dv = add.deletion_vector
        if dv is not None and dv.storage_type == "u":
            keys.add(str(dv.file_path()))
    return keys


async def test_the_daemon_vacuums_expired_tombstones_and_keeps_the_rest(
    make: Callable[..., RaceTable],
) -> None:
    """A table compacted at wall time W (its sources and a DV file tombstoned then), given new
    files and compacted again at W + 7d - 1h: at W + 7d + 1m, once the vacuum interval has
    passed, the vacuum deletes exactly the first compaction's sources and their DV file. The
    second compaction's sources (an hour inside the retention) and the live output stay; the
    table reads the same; the counters, the events and /healthz say what it did."""
    table = make(files=4)
    version = await dv_delete(table, {0: [1, 2]})  # file 0's DV file goes with its tombstone
    first_keys = await _data_keys(table)  # four sources and a DV file
    expected = [i for i in range(4 * ROWS) if i not in (1, 2)]
    settings = parse_settings(CONFIG.format(uri=table.uri), source="test.toml", base_dir="/")
    wall, clock = [int(time.time() * 1000)], [0.0]
    async with S3Client(table.s3) as client:

        def store_for(uri: TableUri) -> ObjectStore:
            return client.store(uri) if uri.is_s3 else LocalStore(uri.prefix)

        supervisor = Supervisor(
            settings,
            store_for=store_for,
            limits=Limits.of(settings),
            clock=lambda: clock[0],
            wall_ms=lambda: wall[0],
        )
        (name,) = (str(t.uri) for t in settings.tables)
        with capture_logs() as logs:
            await supervisor.run(once=True)  # vacuums at start (nothing to do), compacts
        assert _events(logs, "vacuum_done") == [
            {"files": 0, "bytes": 0, "mode": "lite", "version": version}
        ]
        assert await _data_keys(table) == first_keys | await _live_keys(table)

        for k in range(4, 6):
            await insert(table, batch(k * ROWS), blind=True)
        expected += range(4 * ROWS, 6 * ROWS)
        second_keys = await _data_keys(table)
        wall[0] += WEEK_MS - HOUR_MS
        clock[0] += 3600.0  # within the vacuum interval: no vacuum
        with capture_logs() as logs:
            await supervisor.run(once=True)  # compacts the output and the new files
        assert _events(logs, "vacuum_done") == []
        live = await _live_keys(table)
        assert len(live) == 1 and await _data_keys(table) == first_keys | second_keys | live

        wall[0] += HOUR_MS + 60_000
        clock[0] += 86400.0
        with capture_logs() as logs:
            await supervisor.run(once=True)
        async with table.store() as store:
            version = (await load_snapshot(store)).version
        (done,) = _events(logs, "vacuum_done")
        assert (done["files"], done["version"]) == (len(first_keys), version)
        assert await _data_keys(table) == (second_keys - first_keys) | live
        registry = supervisor.metrics.registry
        labels = {"table": name}
        assert registry.get_sample_value("rlcd_vacuum_files_deleted_total", labels) == len(
            first_keys
        )
        assert (
            registry.get_sample_value("rlcd_vacuum_bytes_reclaimed_total", labels) == done["bytes"]
        )
        last = supervisor.health().tables[name].last_vacuum
        assert last is not None and (last.files, last.version, last.error) == (
            len(first_keys),
            version,
            None,
        )
    await judge(table, expected)


def _events(logs: Sequence[Mapping[str, Any]], name: str) -> list[dict[str, Any]]:
    keys = ("files", "bytes", "mode", "version")
    return [{k: e[k] for k in keys} for e in logs if e["event"] == name]


async def test_a_table_retention_below_an_hour_is_not_vacuumed(tmp_path: Path) -> None:
    """A table whose own retention is 0 seconds is left alone, with one warning however many
    intervals pass; ``vacuum_retain`` (an hour or more) vacuums it at that retention."""
    path = tmp_path / "t"
    zero = {"delta.deletedFileRetentionDuration": "interval 0 seconds"}
    for i in range(3):
        append(path, small_batch(i * 10, 10), configuration=zero if i == 0 else None)
    text = CONFIG.format(uri=path)
    settings = parse_settings(text, source="test.toml", base_dir="/")
    wall, clock = [int(time.time() * 1000)], [0.0]
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: LocalStore(uri.prefix),
        limits=Limits.of(settings),
        clock=lambda: clock[0],
        wall_ms=lambda: wall[0],
    )
    with capture_logs() as logs:
        for _ in range(3):
            await supervisor.run(once=True)
            wall[0] += HOUR_MS
            clock[0] += 86400.0
    rows = delta_rs_rows(path)
    assert len(list(path.glob("*.parquet"))) == 4, "the compaction's sources are all there"
    skipped = [e for e in logs if e["event"] == "vacuum_skipped"]
    assert len(skipped) == 1 and "below the daemon's 1h" in skipped[0]["reason"]
    assert not [e for e in logs if e["event"] == "vacuum_done"]
    (status,) = supervisor.status()
    assert status.last_vacuum is not None and "not vacuumed" in str(status.last_vacuum.error)

    override = '[table.policy]\nvacuum_retain = "1h"\n'
    retained = parse_settings(text + override, source="t.toml", base_dir="/")
    supervisor.apply(retained)
    with capture_logs() as logs:
        await supervisor.run(once=True)
    (done,) = [e for e in logs if e["event"] == "vacuum_done"]
    assert (done["files"], done["retention_ms"]) == (3, HOUR_MS)
    assert len(list(path.glob("*.parquet"))) == 1 and delta_rs_rows(path) == rows
