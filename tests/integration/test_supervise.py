"""The supervisor in process on local tables: a failing table is reported and backs off
without stopping the others; a run honours the shared limits; a bin's duration is its own; a
run superseded by another compaction is no failure; a table another run leases is skipped; a
quarantined source is released after its period; over the snapshot budget, the idle table's
snapshot is released and loaded again when it changes; loads keep within the budget (a table
bigger than it loads alone), a due table keeps its snapshot, and a commit is seen before its
load."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import deltalake
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

from rlcd.compaction.compact import compact_table
from rlcd.compaction.lease import LeaseHold, take_lease
from rlcd.compaction.policy import CompactionPolicy
from rlcd.daemon import _watch, supervise
from rlcd.daemon._snapshots import load_peak
from rlcd.daemon.config import parse_settings
from rlcd.daemon.metrics import QuarantinedFile
from rlcd.daemon.supervise import Limits, Supervisor, TableStatus
from rlcd.delta.load import load_snapshot
from rlcd.delta.replay import Snapshot
from rlcd.storage import LocalStore
from rlcd.storage.base import ObjectMeta
from rlcd.storage.uri import TableUri
from tests.integration.races import HoldingStore
from tests.integration.tables import append, batch, delta_rs_rows, live_files, partitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

CONFIG = """
[daemon]
poll_interval = "100ms"
[metrics]
listen = ""
[[discover]]
prefix = "tables"
[discover.policy]
min_small_files = 2
min_interval = "0s"
min_file_age = "0s"
"""


def _tables(root: Path) -> dict[str, Path]:
    paths = {name: root / "tables" / name for name in ("good", "corrupt", "unsupported")}
    for path in paths.values():
        for i in range(3):
            append(path, batch(i * 10, 10))
    (paths["corrupt"] / "_delta_log" / f"{1:020d}.json").write_text("{not json\n")
    commit = paths["unsupported"] / "_delta_log" / f"{0:020d}.json"
    lines = [json.loads(line) for line in commit.read_text().splitlines()]
    for line in lines:
        if "protocol" in line:
            line["protocol"] = {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["someFutureFeature"],
            }
    commit.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return paths


async def test_one_failing_table_does_not_stop_the_others(tmp_path: Path) -> None:
    """A corrupt log and an unsupported feature are each reported (naming the file, and the
    feature) and their tables back off; the healthy table is compacted in the same pass."""
    paths = _tables(tmp_path)
    before = delta_rs_rows(paths["good"])
    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    with capture_logs() as logs:
        await supervisor.run(once=True)
    assert live_files(paths["good"]) == 1 and delta_rs_rows(paths["good"]) == before
    failed = {e["table"]: e for e in logs if e["event"] in {"table_failed", "table_unsupported"}}
    corrupt = str(TableUri.parse(str(paths["corrupt"])))
    unsupported = str(TableUri.parse(str(paths["unsupported"])))
    assert set(failed) == {corrupt, unsupported}
    assert failed[corrupt]["event"] == "table_failed"
    assert f"{1:020d}.json" in failed[corrupt]["error"]
    assert failed[unsupported]["event"] == "table_unsupported"
    assert "someFutureFeature" in failed[unsupported]["error"]
    health = supervisor.health()
    assert health.tables[corrupt].last_error and health.tables[unsupported].last_error
    assert health.tables[str(TableUri.parse(str(paths["good"])))].last_error is None


async def test_a_stopped_supervisor_returns(tmp_path: Path) -> None:
    """stop() ends a running supervisor's loop; nothing is left running."""
    _tables(tmp_path)
    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    limits = Limits.of(settings)
    supervisor = Supervisor(settings, store_for=lambda uri: LocalStore(uri.prefix), limits=limits)
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.run)
        await anyio.sleep(0.5)
        supervisor.stop()
    assert supervisor.health().status == "stopping"
    assert limits.bins.borrowed_tokens == limits.memory.borrowed_tokens == 0


async def test_a_reload_adds_and_removes_tables(tmp_path: Path) -> None:
    """Settings applied while running take effect: the tables the new file no longer names
    are dropped, the ones it adds are watched; each reload logs what changed and the tables
    watched after it, named and discovered."""
    paths = _tables(tmp_path)
    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    good = str(TableUri.parse(str(paths["good"])))
    only_good = f'[metrics]\nlisten = ""\n[[table]]\nuri = "{paths["good"]}"\n'
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            with anyio.fail_after(30):
                await _until(lambda: len(supervisor.status()) == 3)
                supervisor.apply(parse_settings(only_good, source="new.toml", base_dir="/"))
                await _until(lambda: [s.table for s in supervisor.status()] == [good])
                supervisor.apply(settings)
                await _until(lambda: len(supervisor.status()) == 3)
                await _until(lambda: sum(e["event"] == "config_reloaded" for e in logs) == 2)
            supervisor.stop()
    prefix = str(TableUri.parse(str(tmp_path / "tables")))
    first, second = (e for e in logs if e["event"] == "config_reloaded")
    assert (first["path"], first["tables"], first["named"], first["discovered"]) == (
        "new.toml",
        1,
        1,
        0,
    )
    assert first["tables_added"] == (good,) and first["discover_removed"] == (prefix,)
    assert "metrics.listen" not in first.get("changed", ())
    assert (second["tables"], second["named"], second["discovered"]) == (3, 0, 3)
    assert second["tables_removed"] == (good,) and second["discover_added"] == (prefix,)
    assert "daemon.poll_interval" in second["changed"]


async def _until(check: Callable[[], bool]) -> None:
    while True:
        if check():
            return
        await anyio.sleep(0.05)


class _ReadsTakeTime(LocalStore):
    """A local store whose every data-file read moves ``clock`` on by ten seconds (and read
    through :meth:`get`, not in place, so each read is seen)."""

    def __init__(self, root: str, clock: list[float]) -> None:
        super().__init__(root)
        self._clock = clock

    def local_files(self) -> None:
        return None

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        if key.endswith(".parquet"):
            self._clock[0] += 10.0
        return await super().get(key, start=start, end=end)


async def test_a_bins_duration_runs_from_its_own_start(tmp_path: Path) -> None:
    """With one bin in flight at a time, each of two bins reading four files observes its own
    40 clock seconds: the second's wait for the first is not counted in its duration."""
    partitioned(tmp_path / "tables" / "t")  # two partitions of four small files: two bins
    text = CONFIG.replace("[daemon]\n", "[daemon]\nbins_in_flight = 1\n")
    settings = parse_settings(text, source="test.toml", base_dir=str(tmp_path))
    now = [0.0]
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: _ReadsTakeTime(uri.prefix, now),
        limits=Limits.of(settings),
        clock=lambda: now[0],
    )
    await supervisor.run(once=True)
    assert live_files(tmp_path / "tables" / "t") == 2
    registry = supervisor.metrics.registry
    assert registry.get_sample_value("rlcd_bin_duration_seconds_count") == 2
    assert registry.get_sample_value("rlcd_bin_duration_seconds_sum") == 80.0


class _SlowListings(LocalStore):
    """A local store whose every listing of the log moves ``offset`` (added to the
    supervisor's clock) on by 0.4 s, noting that clock when it starts."""

    def __init__(self, root: str, offset: list[float], starts: list[float]) -> None:
        super().__init__(root)
        self._offset, self._starts = offset, starts

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        if prefix.startswith("_delta_log"):
            self._starts.append(time.monotonic() + self._offset[0])
            self._offset[0] += 0.4
        return super().list(prefix, start_after=start_after)


async def test_the_poll_interval_runs_from_each_pass_start(tmp_path: Path) -> None:
    """Passes that take 0.4 s of a 0.5 s interval start 0.5 s apart, not 0.9 s: a slow
    pass does not delay the next, so a commit is seen by the first pass after it."""
    append(tmp_path / "tables" / "t", batch(0, 10))
    text = CONFIG.replace('"100ms"', '"500ms"').replace(
        "[discover.policy]\n", "[discover.policy]\nvacuum = false\n"
    )
    settings = parse_settings(text, source="test.toml", base_dir=str(tmp_path))
    offset, starts = [0.0], []
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: _SlowListings(uri.prefix, offset, starts),
        limits=Limits.of(settings),
        clock=lambda: time.monotonic() + offset[0],
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.run)
        await _until(lambda: len(starts) >= 6)  # the first pass's, then idle passes' one each
        supervisor.stop()
    idle = starts[-3:]
    assert all(0.45 < b - a < 0.7 for a, b in itertools.pairwise(idle)), starts


async def test_a_run_superseded_by_another_compaction_is_no_failure(tmp_path: Path) -> None:
    """Another compaction of the same files commits while the daemon's run holds its commit:
    the run is counted as superseded (its bin too), not as an abort or a table failure, and
    /healthz says what became of the bin."""
    path = tmp_path / "tables" / "t"
    for i in range(3):
        append(path, batch(i * 10, 10))
    before = delta_rs_rows(path)

    async def other_compaction() -> None:
        async with LocalStore(str(path)) as store:
            assert (await compact_table(store, CompactionPolicy())).committed_version == 3

    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    holding = HoldingStore(LocalStore(str(path)), [other_compaction])
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: holding if uri.prefix == str(path) else LocalStore(uri.prefix),  # type: ignore[arg-type,return-value]
        limits=Limits.of(settings),
    )
    await supervisor.run(once=True)
    assert not holding.holds, "the other compaction ran"
    assert live_files(path) == 1 and delta_rs_rows(path) == before
    (status,) = supervisor.status()
    assert (status.bins_committed, status.bins_aborted, status.bins_superseded) == (0, 0, 1)
    assert status.last_error is None and supervisor.failures() == ()
    summary, line = supervisor.health().tables[status.table].last_run
    assert summary == "nothing committed of 1 bin: 1 superseded"
    assert ": superseded (another compaction did its work): source_compacted: version 3" in line
    registry = supervisor.metrics.registry
    runs = {"table": status.table, "outcome": "superseded"}
    assert registry.get_sample_value("rlcd_compaction_runs_total", runs) == 1
    assert registry.get_sample_value("rlcd_table_errors_total", {"table": status.table}) is None


async def _leased_table(tmp_path: Path) -> Path:
    """A table due for compaction whose lease another live run of rlcd holds."""
    path = tmp_path / "tables" / "t"
    for i in range(3):
        append(path, batch(i * 10, 10))
    async with LocalStore(str(path)) as store:
        taken = await take_lease(store, owner="rlcd compact (pid 1 on cron)", ttl_s=3600)
        assert isinstance(taken, LeaseHold)  # held by a run that outlives the test
    return path


async def test_a_table_another_run_leases_is_skipped_not_failed(tmp_path: Path) -> None:
    """The daemon leaves a table whose lease a live run holds: its cleanup, vacuum and
    compaction are each skipped with one event and counted, the table is not failing, and the
    other run's lease stays; once the lease is gone, the next pass compacts and releases its
    own."""
    path = await _leased_table(tmp_path)
    lease = (path / "_rlcd" / "lease").read_bytes()
    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    with capture_logs() as logs:
        await supervisor.run(once=True)
    assert live_files(path) == 3
    leased = [e for e in logs if e["event"] == "table_leased"]
    assert sorted(e["work"] for e in leased) == ["cleanup", "compaction", "vacuum"]
    assert all(e["lease"].startswith("held by rlcd compact (pid 1 on cron) until ") for e in leased)
    (status,) = supervisor.status()
    assert status.last_error is None and supervisor.failures() == ()
    registry = supervisor.metrics.registry
    for work in ("cleanup", "compaction", "vacuum"):
        labels = {"table": status.table, "work": work}
        assert registry.get_sample_value("rlcd_lease_skips_total", labels) == 1
    assert (path / "_rlcd" / "lease").read_bytes() == lease

    (path / "_rlcd" / "lease").unlink()  # the other run ended
    before = delta_rs_rows(path)
    again = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    await again.run(once=True)
    assert live_files(path) == 1 and delta_rs_rows(path) == before
    assert list((path / "_rlcd").iterdir()) == []


async def test_with_the_lease_off_the_daemon_compacts_a_leased_table(tmp_path: Path) -> None:
    """``[daemon] lease = false``: the daemon takes no lease and ignores others' (the log keeps
    the work correct)."""
    path = await _leased_table(tmp_path)
    before = delta_rs_rows(path)
    config = CONFIG.replace("[daemon]\n", "[daemon]\nlease = false\n")
    settings = parse_settings(config, source="test.toml", base_dir=str(tmp_path))
    supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    await supervisor.run(once=True)
    assert live_files(path) == 1 and delta_rs_rows(path) == before


async def test_metrics_show_footprint_reclaimable_bytes_success_and_failures(
    tmp_path: Path,
) -> None:
    """After a compaction and the next poll, a table's live files and bytes are the output's,
    and its removed sources (their tombstones past a zero retention) are what a vacuum would
    free; its last success is stamped and its failures are 0. A corrupt table counts one
    failure per pass, and its last success stays when it began to be watched."""
    good, corrupt = tmp_path / "tables" / "good", tmp_path / "tables" / "corrupt"
    zero = {"delta.deletedFileRetentionDuration": "interval 0 seconds"}
    for i in range(3):
        append(good, batch(i * 10, 10), configuration=zero if i == 0 else None)
        append(corrupt, batch(i * 10, 10))
    (corrupt / "_delta_log" / f"{1:020d}.json").write_text("{not json\n")
    sources = sum(p.stat().st_size for p in good.glob("*.parquet"))
    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    wall = [1_000_000]
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: LocalStore(uri.prefix),
        limits=Limits.of(settings),
        # the poll interval never passes within a run: a slow compaction does not make the
        # first run poll its commit again at the commit's own wall ms (tombstones not yet
        # past the zero retention), which would leave the second poll no change to measure
        clock=lambda: 0.0,
        wall_ms=lambda: wall[0],
    )
    await supervisor.run(once=True)  # polls once, compacts the good table
    wall[0] += 1_000
    await supervisor.run(once=True)  # polls again: the new version, nothing due
    assert live_files(good) == 1
    output = sum(p.stat().st_size for p in good.glob("*.parquet")) - sources  # not vacuumed

    def value(name: str, path: Path, **labels: str) -> float | None:
        table = str(TableUri.parse(str(path)))
        return supervisor.metrics.registry.get_sample_value(name, {"table": table, **labels})

    assert value("rlcd_table_live_files", good) == 1
    assert value("rlcd_table_live_bytes", good) == output
    assert value("rlcd_table_vacuum_reclaimable_bytes", good) == sources
    assert value("rlcd_table_last_success_timestamp_seconds", good) == 1_001
    assert value("rlcd_table_consecutive_failures", good) == 0
    assert value("rlcd_compaction_runs_total", good, outcome="committed") == 1
    assert value("rlcd_table_consecutive_failures", corrupt) == 1  # backing off: polled once
    assert value("rlcd_table_last_success_timestamp_seconds", corrupt) == 1_000
    assert value("rlcd_table_live_files", corrupt) is None


QUARANTINE = """
[daemon]
poll_interval = "100ms"
[metrics]
listen = ""
[policy]
min_small_files = 2
min_interval = "0s"
min_file_age = "0s"
quarantine_after = 2
quarantine_for = "1h"
[[table]]
uri = "tables/t"
"""


async def test_a_quarantined_source_is_released_after_its_period(tmp_path: Path) -> None:
    """Two failed runs quarantine a truncated source and the healthy ones are compacted; it is
    still left out 3599 s (wall clock) later, released by the poll at 3600 s and tried once
    more in its partition's next bin: that one failed read quarantines it again, for another
    hour, and the rest is compacted. The file's bytes never change; no healthy row is lost."""
    path = tmp_path / "tables" / "t"
    for i in range(5):
        append(path, batch(i * 10, 10))
    commit = (path / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    bad = next(a["add"]["path"] for a in map(json.loads, commit) if "add" in a)
    bad_bytes = (path / bad).read_bytes()[: (path / bad).stat().st_size // 2]
    (path / bad).write_bytes(bad_bytes)
    settings = parse_settings(QUARANTINE, source="test.toml", base_dir=str(tmp_path))
    mono, wall = [0.0], [1_800_000_000_000]
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: LocalStore(uri.prefix),
        limits=Limits.of(settings),
        clock=lambda: mono[0],
        wall_ms=lambda: wall[0],
    )

    async def run_at(wall_s: float) -> None:
        mono[0] += 1000.0  # past any backoff
        wall[0] = 1_800_000_000_000 + int(wall_s * 1000)
        await supervisor.run(once=True)

    def quarantined() -> tuple[QuarantinedFile, ...]:
        (status,) = supervisor.status()
        return status.quarantined

    with capture_logs() as logs:
        await run_at(0)  # the first failed read
        await run_at(60)  # the second: quarantined, then the healthy files are compacted
        assert live_files(path) == 2
        (q,) = quarantined()
        assert (q.path, q.failures, q.since, q.until) == (bad, 2, 1_800_000_060, 1_800_003_660)
        await run_at(60 + 3599)
        assert [f.path for f in quarantined()] == [bad]
        assert not [e for e in logs if e["event"] == "quarantine_released"]
        for i in range(5, 7):  # with these the partition makes a bin again (the output is settled)
            append(path, batch(i * 10, 10))
        await run_at(60 + 3600)  # released, tried once more, quarantined again at once
    (q,) = quarantined()
    assert (q.failures, q.since, q.until) == (3, 1_800_003_660, 1_800_007_260)
    (released,) = (e for e in logs if e["event"] == "quarantine_released")
    assert (released["files"], released["reason"]) == (1, "expired")
    events = [e for e in logs if e["event"] in {"bin_failed", "source_quarantined"}]
    assert [(e["event"], e.get("failures")) for e in events] == [
        ("bin_failed", None),
        ("bin_failed", None),
        ("source_quarantined", 2),
        ("bin_failed", None),
        ("source_quarantined", 3),
    ]
    assert (path / bad).read_bytes() == bad_bytes
    ids = sorted(
        i
        for uri in deltalake.DeltaTable(str(path)).file_uris()
        if not uri.endswith(bad)
        for i in pq.read_table(uri.removeprefix("file://"), columns=["id"])["id"].to_pylist()
    )
    assert ids == [*range(20), *range(30, 70)] and live_files(path) == 2
    registry = supervisor.metrics.registry
    table = str(TableUri.parse(str(path)))
    assert registry.get_sample_value("rlcd_quarantined_files", {"table": table}) == 1


async def test_a_lagging_checkpoint_is_written_whoever_committed(tmp_path: Path) -> None:
    """Versions 0..8 were committed without a checkpoint: the lag (8) passes twice the
    interval (3), so a poll writes the checkpoint of 8 (counted, one event) under the lease;
    the next pass finds nothing to do. A table within twice its interval gets none."""
    lagging, fresh = tmp_path / "tables" / "lagging", tmp_path / "tables" / "fresh"
    for i in range(8):
        append(lagging, batch(i * 10, 10))
    for i in range(5):
        append(fresh, batch(i * 10, 10))
    deltalake.DeltaTable(str(lagging)).alter.set_table_properties({"delta.checkpointInterval": "3"})
    log = lagging / "_delta_log"  # as a writer that does not checkpoint leaves it (delta-rs
    for file in [*log.glob("*.checkpoint.parquet"), log / "_last_checkpoint"]:  # did, at 8)
        file.unlink()
    config = CONFIG.replace("min_small_files = 2", "min_small_files = 1000")
    settings = parse_settings(config, source="test.toml", base_dir=str(tmp_path))
    supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )

    def value(name: str, path: Path) -> float | None:
        table = str(TableUri.parse(str(path)))
        return supervisor.metrics.registry.get_sample_value(name, {"table": table})

    with capture_logs() as logs:
        await supervisor.run(once=True)
        await supervisor.run(once=True)
    written = [e for e in logs if e["event"] == "checkpoint_written"]
    assert [(e["version"], e["table"]) for e in written] == [(8, str(TableUri.parse(str(lagging))))]
    assert (lagging / "_delta_log" / f"{8:020d}.checkpoint.parquet").is_file()
    assert value("rlcd_checkpoints_written_total", lagging) == 1
    assert value("rlcd_checkpoint_lag_versions", lagging) == 0
    assert value("rlcd_checkpoints_written_total", fresh) is None
    assert value("rlcd_checkpoint_lag_versions", fresh) == 4
    assert not list((fresh / "_delta_log").glob("*.checkpoint*"))
    assert list((lagging / "_rlcd").iterdir()) == []  # the lease was released


async def test_the_checkpoint_after_a_compaction_is_counted(tmp_path: Path) -> None:
    """The compaction's commit lands on version 4, a multiple of the interval (4): the
    checkpoint written after it in the commit path counts in rlcd_checkpoints_written_total,
    as the lag checkpoint does (none is owed here: the lag was 3)."""
    path = tmp_path / "tables" / "t"
    for i in range(3):
        append(path, batch(i * 10, 10))
    deltalake.DeltaTable(str(path)).alter.set_table_properties({"delta.checkpointInterval": "4"})
    settings = parse_settings(CONFIG, source="test.toml", base_dir=str(tmp_path))
    supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    with capture_logs() as logs:
        await supervisor.run(once=True)
    written = [e["version"] for e in logs if e["event"] == "checkpoint_written"]
    assert written == [4] and live_files(path) == 1
    assert (path / "_delta_log" / f"{4:020d}.checkpoint.parquet").is_file()
    table = str(TableUri.parse(str(path)))
    registry = supervisor.metrics.registry
    assert registry.get_sample_value("rlcd_checkpoints_written_total", {"table": table}) == 1


BUDGET = """
[daemon]
poll_interval = "100ms"
[metrics]
listen = ""
[policy]
min_small_files = 13
min_interval = "0s"
min_file_age = "0s"
[[table]]
uri = "tables/busy"
[[table]]
uri = "tables/quiet"
"""


async def test_over_the_snapshot_budget_the_idle_table_is_released_then_reloaded(
    tmp_path: Path,
) -> None:
    """Two tables hold more than ``snapshot_memory`` (taken on a reload): the one idle longest
    releases its snapshot (one event, its bytes; 0 in the metric, "released" in /healthz)
    and the other keeps its own. Idle polls leave it released; a commit to it makes the next
    poll load it again, and its compaction, now due, keeps every row."""
    busy, quiet = tmp_path / "tables" / "busy", tmp_path / "tables" / "quiet"
    for i in range(2):
        append(busy, batch(i * 10, 10))
    for i in range(12):
        append(quiet, batch(i * 10, 10))
    settings = parse_settings(BUDGET, source="test.toml", base_dir=str(tmp_path))
    mono = [0.0]
    supervisor = Supervisor(
        settings,
        store_for=lambda uri: LocalStore(uri.prefix),
        limits=Limits.of(settings),
        clock=lambda: mono[0],
    )
    busy_uri, quiet_uri = (str(TableUri.parse(str(p))) for p in (busy, quiet))

    def status() -> dict[str, TableStatus]:
        return {s.table: s for s in supervisor.status()}

    def gauge(table: str) -> float | None:
        labels = {"table": table}
        return supervisor.metrics.registry.get_sample_value("rlcd_table_snapshot_bytes", labels)

    await supervisor.run(once=True)  # both loaded; nothing due
    quiet_bytes = status()[quiet_uri].snapshot_bytes
    assert 0 < status()[busy_uri].snapshot_bytes < quiet_bytes == gauge(quiet_uri)
    daemon = dataclasses.replace(settings.daemon, snapshot_memory=quiet_bytes - 1)
    supervisor.apply(dataclasses.replace(settings, daemon=daemon))

    mono[0] = 100.0
    append(busy, batch(20, 10))  # the busy table moves; the quiet one is idle for 100 s
    with capture_logs() as logs:
        await supervisor.run(once=True)
        mono[0] = 200.0
        await supervisor.run(once=True)  # an idle poll: it stays released
    released = [e for e in logs if e["event"] == "snapshot_released"]
    assert [(e["table"], e["reason"], e["bytes"], e["version"]) for e in released] == [
        (quiet_uri, "budget", quiet_bytes, 11)
    ]
    assert not [e for e in logs if e["event"] == "snapshot_reloaded"]
    now = status()
    assert (now[quiet_uri].version, now[quiet_uri].files) == (11, 12)
    assert now[quiet_uri].snapshot_released and now[quiet_uri].snapshot_bytes == 0
    assert gauge(quiet_uri) == 0 and gauge(busy_uri) == now[busy_uri].snapshot_bytes > 0
    assert supervisor.health().tables[quiet_uri].snapshot_released
    assert not now[busy_uri].snapshot_released and now[busy_uri].version == 2

    append(quiet, batch(120, 10))  # its 13th small file: due
    before = delta_rs_rows(quiet)
    mono[0] = 300.0
    with capture_logs() as logs:
        await supervisor.run(once=True)
    (reloaded,) = (e for e in logs if e["event"] == "snapshot_reloaded")
    assert (reloaded["version"], reloaded["previous"], reloaded["reason"]) == (12, 11, "changed")
    (finished,) = (e for e in logs if e["event"] == "compaction_finished")
    assert (finished["table"], finished["read_version"], finished["files_removed"]) == (
        quiet_uri,
        12,
        13,
    )
    assert live_files(quiet) == 1 and delta_rs_rows(quiet) == before


LOADS = """
[daemon]
poll_interval = "100ms"
snapshot_memory = "{budget}B"
bins_in_flight = 1
[metrics]
listen = ""
[[discover]]
prefix = "tables"
[discover.policy]
min_small_files = {small}
min_interval = "0s"
min_file_age = "0s"
vacuum = {vacuum}
"""


class _Loads:
    """Counts the watch's loads from a checkpoint, and at each one's start what the held
    snapshots, the loads in flight and this one make together (each load ``size`` bytes when
    done, twice that at its peak)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
        self.size = size
        self.count = self.in_flight = self.most_in_flight = 0
        self.peak = 0
        self.at_start: list[Callable[[], None]] = []
        self.supervisor: Supervisor | None = None
        real = _watch.load_snapshot

        async def load(store: LocalStore) -> Snapshot:
            assert self.supervisor is not None
            held = sum(s.snapshot_bytes for s in self.supervisor.status())
            self.count += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.peak = max(self.peak, held + self.in_flight * load_peak(self.size))
            for check in self.at_start:
                check()
            try:
                return await real(store)
            finally:
                self.in_flight -= 1

        monkeypatch.setattr(_watch, "load_snapshot", load)


async def _alike(root: Path, count: int, commits: int) -> tuple[list[str], int]:
    """``count`` identical tables under ``root/tables`` of ``commits`` small files; their URIs
    and what one's snapshot holds."""
    first = root / "tables" / "t0"
    for i in range(commits):
        append(first, batch(i * 10, 10))
    for n in range(1, count):
        shutil.copytree(first, root / "tables" / f"t{n}")
    size = (await load_snapshot(LocalStore(first))).held_bytes()
    return [str(TableUri.parse(str(root / "tables" / f"t{n}"))) for n in range(count)], size


def _supervisor(
    root: Path, loads: _Loads, *, budget: int, small: int, vacuum: bool = False
) -> Supervisor:
    config = LOADS.format(budget=budget, small=small, vacuum=str(vacuum).lower())
    settings = parse_settings(config, source="test.toml", base_dir=str(root))
    loads.supervisor = Supervisor(
        settings, store_for=lambda uri: LocalStore(uri.prefix), limits=Limits.of(settings)
    )
    return loads.supervisor


async def test_the_first_pass_loads_within_the_snapshot_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six tables whose snapshots are 1.7 times the budget together: the first pass never
    holds and loads (at their peak) more than the budget at once (it held all six before the
    step's releases), releases the idle longest for the next loads, and still sees every
    table."""
    uris, size = await _alike(tmp_path, 6, 2)
    budget = size * 7 // 2
    loads = _Loads(monkeypatch, size)
    supervisor = _supervisor(tmp_path, loads, budget=budget, small=1000)
    with capture_logs() as logs:
        await supervisor.run(once=True)
    assert loads.peak <= budget and loads.most_in_flight <= 2
    status = supervisor.status()
    assert [(s.table, s.version, s.files) for s in status] == [(u, 1, 2) for u in uris]
    assert sum(s.snapshot_bytes for s in status) == 2 * size
    released = [e for e in logs if e["event"] == "snapshot_released"]
    assert len(released) == 4 and {e["reason"] for e in released} == {"budget"}


async def test_the_first_pass_shows_every_version_before_the_loads_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four tables, two polls at once, each snapshot over the budget (one load at a time): a
    poll waiting for the budget leaves its slot to the others, and each lists its version
    before its load, so the first load, held until every version is in the gauge, ends (it
    waited forever when waiting polls kept their slots); the status has every version then."""
    monkeypatch.setattr(supervise, "_POLLS_AT_ONCE", 2)
    uris, size = await _alike(tmp_path, 4, 2)
    loads = _Loads(monkeypatch, size)
    supervisor = _supervisor(tmp_path, loads, budget=size // 2, small=1000)
    gauge, set_version = (
        supervisor.metrics.registry.get_sample_value,
        supervisor.metrics.set_version,
    )
    counted, listed = _watch.load_snapshot, anyio.Event()
    at_load: list[list[int | None]] = []

    def versions_seen(table: str, version: int) -> None:
        set_version(table, version)
        if None not in (gauge("rlcd_table_version", {"table": u}) for u in uris):
            listed.set()

    async def once_all_listed(store: LocalStore) -> Snapshot:
        with anyio.fail_after(10):
            await listed.wait()
        at_load.append([s.version for s in supervisor.status()])
        return await counted(store)

    monkeypatch.setattr(supervisor.metrics, "set_version", versions_seen)
    monkeypatch.setattr(_watch, "load_snapshot", once_all_listed)
    await supervisor.run(once=True)
    assert loads.count == 4 and loads.most_in_flight == 1
    assert at_load == [[1] * 4] * 4


async def test_a_table_bigger_than_the_budget_loads_alone_and_is_noticed_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each snapshot alone exceeds the budget: the tables load one at a time, all are seen,
    none stays held. A commit to a released one sets the version gauge before its load."""
    uris, size = await _alike(tmp_path, 3, 2)
    loads = _Loads(monkeypatch, size)
    supervisor = _supervisor(tmp_path, loads, budget=size // 2, small=1000)
    await supervisor.run(once=True)
    assert loads.most_in_flight == 1
    status = supervisor.status()
    assert [(s.version, s.snapshot_released) for s in status] == [(1, True)] * 3

    def gauge() -> float | None:
        labels = {"table": uris[1]}
        return supervisor.metrics.registry.get_sample_value("rlcd_table_version", labels)

    seen: list[float | None] = []
    loads.at_start.append(lambda: seen.append(gauge()))
    append(tmp_path / "tables" / "t1", batch(20, 10))
    await supervisor.run(once=True)
    assert seen == [2.0] and gauge() == 2.0


async def test_a_due_table_keeps_its_snapshot_until_its_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zero budget, one bin at a time: the table due while the other runs is not released
    before its own run ends (its compaction would load it again)."""
    uris, size = await _alike(tmp_path, 2, 3)
    supervisor = _supervisor(tmp_path, _Loads(monkeypatch, size), budget=0, small=2)
    with capture_logs() as logs:
        await supervisor.run(once=True)
    events = [(e["event"], e["table"]) for e in logs if e["event"] in _RUN_AND_RELEASE]
    for uri in uris:
        assert events.index(("compaction_finished", uri)) < events.index(("snapshot_released", uri))
    assert [live_files(tmp_path / "tables" / f"t{n}") for n in range(2)] == [1, 1]


async def test_a_table_due_for_vacuum_keeps_its_snapshot_until_its_vacuum_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each snapshot alone exceeds the budget and every table is due for vacuum (its first
    poll): the next table's load releases none whose vacuum has not started (it would be
    skipped, then loaded again). Each table is loaded once and vacuumed in the pass, and its
    snapshot released after."""
    uris, size = await _alike(tmp_path, 3, 2)
    loads = _Loads(monkeypatch, size)
    supervisor = _supervisor(tmp_path, loads, budget=size // 2, small=1000, vacuum=True)
    with capture_logs() as logs:
        await supervisor.run(once=True)
    events = [(e["event"], e["table"]) for e in logs if e["event"] in _VACUUM_AND_RELEASE]
    for uri in uris:
        assert events.index(("vacuum_done", uri)) < events.index(("snapshot_released", uri))
    assert loads.count == 3


_RUN_AND_RELEASE = ("compaction_finished", "snapshot_released")
_VACUUM_AND_RELEASE = ("vacuum_done", "snapshot_released")
