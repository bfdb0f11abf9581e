"""Prometheus metrics from compaction reports, and the /metrics and /healthz endpoints served
on the event loop."""

from __future__ import annotations

import dataclasses
import math
import socket

import aiohttp
import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlcd.compaction.commit import BinAborted, BinCommitted
from rlcd.compaction.compact import BinFailure, CompactionReport, FailureKind
from rlcd.compaction.plan import Bin
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.rewrite import RewrittenBin
from rlcd.daemon.metrics import Health, Metrics, TableHealth, VacuumRecord, serve_metrics
from rlcd.delta.actions import AddFile
from rlcd.delta.checkpoint_writer import CheckpointWritten
from rlcd.delta.outcome import Abort
from rlcd.errors import ConfigError
from rlcd.reconcile.classify import SOURCE_COMPACTED

T = "s3://lake/orders"


def small_bin(*names: str, size: int = 1000) -> Bin:
    return Bin(
        {}, tuple(AddFile(path=n, size=size) for n in names), size * len(names), False, False
    )


def written(b: Bin, size: int) -> RewrittenBin:
    return RewrittenBin(b, "out.parquet", "out.parquet", size, 0, 10, None, (), (5, 5), (0, 5))


def report() -> CompactionReport:
    """Four bins: one committed, one committed after a remap, one aborted by a winner that
    compacted its sources, one whose source could not be read."""
    ok = written(small_bin("a", "b", "c"), 2500)
    remapped = written(small_bin("d", "e"), 1500)
    lost = written(small_bin("f", "g"), 1200)
    broken = small_bin("h", "i")
    abort = Abort(SOURCE_COMPACTED, "version 8 (OPTIMIZE) removed f")
    return CompactionReport(
        T,
        read_version=7,
        policy=CompactionPolicy(),
        planned=(ok.bin, remapped.bin, lost.bin, broken),
        committed_version=9,
        committed=(ok, remapped),
        failed=(
            BinFailure(broken, "get h: not found", FailureKind.STORAGE),
            BinFailure(lost.bin, str(abort), FailureKind.SUPERSEDED),
        ),
        bin_results=(
            BinCommitted(ok),
            BinCommitted(remapped, remapped_sources=1),
            BinAborted(lost, abort),
        ),
        commit_attempts=2,
    )


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, parsed back by prometheus_client's own parser."""
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_report_becomes_files_bytes_bins_and_conflicts() -> None:
    """Committed files and bytes, bins by outcome and reason, conflicts by kind are counted."""
    m = Metrics()
    m.record_compaction(T, report(), now_s=1_700_000_000.0)
    got = samples(m)
    t = (("table", T),)
    assert got[("rlcd_compacted_files_total", t)] == 5
    assert got[("rlcd_compacted_bytes_total", t)] == 5000
    assert got[("rlcd_written_files_total", t)] == 2
    assert got[("rlcd_written_bytes_total", t)] == 4000
    assert got[("rlcd_commit_attempts_total", t)] == 2
    committed = {
        dict(k[1])["decision"]: v for k, v in got.items() if k[0] == "rlcd_bins_committed_total"
    }
    assert committed == {"committed": 1, "reconciled_by_remap": 1}
    aborted = {dict(k[1])["reason"]: v for k, v in got.items() if k[0] == "rlcd_bins_aborted_total"}
    assert aborted == {"source_compacted": 1, "rewrite_storage": 1}
    conflicts = {
        dict(k[1])["kind"]: v for k, v in got.items() if k[0] == "rlcd_commit_conflicts_total"
    }
    assert conflicts == {"source_compacted": 1, "reconciled_by_remap": 1}
    assert got[("rlcd_table_version", t)] == 9
    assert got[("rlcd_table_last_compaction_timestamp_seconds", t)] == 1_700_000_000.0


def test_a_masked_source_is_not_counted_as_compacted() -> None:
    """A source a winner removed before the commit (masked) is not one the commit removed;
    an output whose every row was deleted is not one it added."""
    masked = written(small_bin("a", "b", "c"), 2500)
    dropped = written(small_bin("d", "e"), 1500)
    m = Metrics()
    results = (
        BinCommitted(masked, masked_sources=1, masked_positions=5, masked=frozenset({"b"})),
        BinCommitted(dropped, masked_sources=2, masked=frozenset({"d", "e"}), output_dropped=True),
    )
    done = CompactionReport(
        T,
        7,
        CompactionPolicy(),
        (masked.bin, dropped.bin),
        committed_version=8,
        committed=(masked, dropped),
        bin_results=results,
    )
    m.record_compaction(T, done, now_s=1.0)
    got = samples(m)
    t = (("table", T),)
    assert (done.files_removed, done.bytes_removed, done.files_added) == (2, 2000, 1)
    assert got[("rlcd_compacted_files_total", t)] == 2
    assert got[("rlcd_compacted_bytes_total", t)] == 2000
    assert got[("rlcd_written_files_total", t)] == 1
    assert got[("rlcd_written_bytes_total", t)] == 2500


def test_runs_are_counted_by_outcome() -> None:
    """A run superseded by another compaction is counted apart from conflicted ones."""
    m = Metrics()
    for outcome in ("committed", "superseded", "superseded", "conflicted", "failed"):
        m.count_run(T, outcome)
    runs = {
        dict(k[1])["outcome"]: v
        for k, v in samples(m).items()
        if k[0] == "rlcd_compaction_runs_total"
    }
    assert runs == {"committed": 1, "superseded": 2, "conflicted": 1, "failed": 1}


def test_a_dry_run_counts_nothing() -> None:
    """A planning-only report changes no counter."""
    m = Metrics()
    m.record_compaction(T, CompactionReport(T, 3, CompactionPolicy(), (), dry_run=True), now_s=1)
    assert not [k for k in samples(m) if k[1] and k[1][-1] == ("table", T)]


def test_gauges_errors_and_requests() -> None:
    """Backlog gauges, errors by type and S3 requests and bytes by operation are exposed."""
    m = Metrics()
    m.set_backlog(T, version=12, small_files=40, pending_bytes=4_000_000)
    m.record_error(T, TimeoutError("secret detail"), now_s=5.0)
    m.observe_bin(3.0)
    m.count_request("list", 1, 0)
    m.count_request("list", 1, 0)
    m.count_request("upload", 1, 0)
    m.count_request("upload", 0, 8_000_000)
    got = samples(m)
    t = (("table", T),)
    assert got[("rlcd_table_small_files", t)] == 40
    assert got[("rlcd_table_pending_bytes", t)] == 4_000_000
    assert got[("rlcd_table_version", t)] == 12
    assert got[("rlcd_table_errors_total", (("error", "TimeoutError"), *t))] == 1
    assert got[("rlcd_table_last_error_timestamp_seconds", t)] == 5.0
    assert got[("rlcd_bin_duration_seconds_count", ())] == 1
    assert got[("rlcd_bin_duration_seconds_bucket", (("le", "5.0"),))] == 1
    assert got[("rlcd_s3_requests_total", (("operation", "list"),))] == 2
    assert got[("rlcd_s3_requests_total", (("operation", "upload"),))] == 1
    assert got[("rlcd_s3_bytes_total", (("operation", "upload"),))] == 8_000_000
    assert got[("rlcd_build_info", (("version", "0.1.0"),))] == 1
    assert "secret detail" not in m.render().decode()


def test_footprint_success_and_consecutive_failures() -> None:
    """Live files and bytes and what a vacuum would free (NaN when unknown); failures count up
    until the table is in hand again, which stamps its last success; a watched table starts
    in hand; the process's start time is there to tell restarts."""
    m = Metrics()
    m.watch_table(T, now_s=10.0)
    m.set_footprint(T, live_files=3, live_bytes=3000, reclaimable_bytes=700)
    m.set_snapshot_bytes(T, 123_456)
    for _ in range(2):
        m.record_error(T, TimeoutError(), now_s=20.0)
    got = samples(m)
    t = (("table", T),)
    assert got[("rlcd_table_live_files", t)] == 3
    assert got[("rlcd_table_live_bytes", t)] == 3000
    assert got[("rlcd_table_vacuum_reclaimable_bytes", t)] == 700
    assert got[("rlcd_table_snapshot_bytes", t)] == 123_456
    assert got[("rlcd_table_last_success_timestamp_seconds", t)] == 10.0
    assert got[("rlcd_table_consecutive_failures", t)] == 2
    assert got[("process_start_time_seconds", ())] > 0
    m.record_success(T, now_s=30.0)
    m.set_footprint(T, live_files=1, live_bytes=900, reclaimable_bytes=None)
    got = samples(m)
    assert got[("rlcd_table_consecutive_failures", t)] == 0
    assert got[("rlcd_table_last_success_timestamp_seconds", t)] == 30.0
    assert math.isnan(got[("rlcd_table_vacuum_reclaimable_bytes", t)])


def test_vacuums_add_up_files_and_bytes() -> None:
    """Each vacuum adds the files it deleted and their bytes to the table's counters, and the
    checkpoints written after its commits to the checkpoints written."""
    m = Metrics()
    m.record_vacuum(T, files=3, nbytes=3000, checkpoints=1)
    m.record_vacuum(T, files=0, nbytes=0, checkpoints=0)
    m.record_vacuum(T, files=2, nbytes=500, checkpoints=2)
    got = samples(m)
    t = (("table", T),)
    assert got[("rlcd_vacuum_files_deleted_total", t)] == 5
    assert got[("rlcd_vacuum_bytes_reclaimed_total", t)] == 3500
    assert got[("rlcd_checkpoints_written_total", t)] == 3


def test_every_checkpoint_rlcd_writes_is_counted() -> None:
    """The checkpoint written after a compaction's commit counts, as the lag checkpoint does;
    a run with none adds nothing."""
    m = Metrics()
    m.record_compaction(T, report(), now_s=1.0)
    t = (("table", T),)
    assert samples(m).get(("rlcd_checkpoints_written_total", t), 0) == 0
    after = CheckpointWritten(10, "_delta_log/00000000000000000010.checkpoint.parquet", 5, 3, 900)
    m.record_compaction(T, dataclasses.replace(report(), checkpoint=after), now_s=2.0)
    m.count_checkpoint(T)
    assert samples(m)[("rlcd_checkpoints_written_total", t)] == 2


def test_forgetting_a_table_drops_all_its_series() -> None:
    """After a reload drops a table, none of its series remain; other tables keep theirs."""
    m = Metrics()
    other = "s3://lake/other"
    for table in (T, other):
        m.record_compaction(table, report(), now_s=1.0)
        m.set_backlog(table, version=1, small_files=1, pending_bytes=1)
        m.record_error(table, ValueError(), now_s=1.0)
        m.set_footprint(table, live_files=1, live_bytes=1, reclaimable_bytes=1)
        m.record_vacuum(table, files=1, nbytes=1, checkpoints=1)
    m.forget_table(T)
    tables = {dict(labels).get("table") for _, labels in samples(m)}
    assert T not in tables and other in tables


def test_metric_names_follow_prometheus_conventions() -> None:
    """Every family is rlcd_-prefixed snake case (beside the standard process_ ones); counters
    end in _total, units are base units."""
    m = Metrics()
    m.record_compaction(T, report(), now_s=1.0)
    families = list(text_string_to_metric_families(m.render().decode()))
    assert families
    for family in families:
        assert family.name.startswith(("rlcd_", "process_"))
        assert family.name == family.name.lower()
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        assert not family.name.endswith(("_ms", "_milliseconds", "_kb", "_mib"))


def health() -> Health:
    last_run = ("committed version 9: 5 files removed -> 2 files added; 4 bins: ...", "bin 1 ...")
    return Health(
        "ok",
        {
            T: TableHealth(
                version=8,
                last_error="access denied",
                last_error_time=2,
                last_run=last_run,
                last_vacuum=VacuumRecord(3.0, "lite", version=7, files=4, bytes=4096),
                snapshot_released=True,
            )
        },
    )


@pytest.mark.anyio
async def test_the_endpoints_answer_on_the_event_loop() -> None:
    """/metrics parses with prometheus_client's parser and /healthz answers JSON with tables."""
    m = Metrics()
    m.record_compaction(T, report(), now_s=1.0)
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_metrics, m, health, ("127.0.0.1", 0))
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{host}:{port}/metrics") as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/plain")
                names = {f.name for f in text_string_to_metric_families(await r.text())}
            async with http.get(f"http://{host}:{port}/healthz") as r:
                assert r.status == 200
                body = await r.json()
        tg.cancel_scope.cancel()
    assert "rlcd_bins_committed" in names
    assert body == {
        "status": "ok",
        "tables": {
            T: {
                "version": 8,
                "last_compaction": None,
                "last_error": "access denied",
                "last_error_time": 2,
                "last_run": list(health().tables[T].last_run),
                "history": [],
                "quarantined": [],
                "last_vacuum": {
                    "when": 3.0,
                    "mode": "lite",
                    "version": 7,
                    "files": 4,
                    "bytes": 4096,
                    "error": None,
                },
                "snapshot_bytes": 0,
                "snapshot_released": True,
            }
        },
    }
    assert Health.from_json(body) == health()


@pytest.mark.anyio
async def test_health_is_503_while_starting_or_stopping() -> None:
    """Only an ``ok`` daemon answers 200, so a load balancer or probe can tell."""
    state = Health("starting")
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_metrics, Metrics(), lambda: state, ("127.0.0.1", 0))
        async with aiohttp.ClientSession() as http, http.get(f"http://{host}:{port}/healthz") as r:
            assert (r.status, await r.json()) == (503, {"status": "starting", "tables": {}})
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_taken_port_fails_the_start() -> None:
    """If the address is in use, tg.start raises a config error naming the key."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = taken.getsockname()
        error = pytest.RaisesExc(ConfigError, match=r"^metrics\.listen: cannot listen on 127")
        with pytest.RaisesGroup(error):
            async with anyio.create_task_group() as tg:
                await tg.start(serve_metrics, Metrics(), health, address)


def test_a_health_answer_that_is_not_one_is_refused() -> None:
    """``rlcd status`` gets a ValueError for JSON that is not a /healthz answer."""
    with pytest.raises(ValueError, match="not a /healthz answer"):
        Health.from_json({"status": "ok", "tables": {T: {"colour": "red"}}})
    with pytest.raises(ValueError, match="not a /healthz answer"):
        Health.from_json({"tables": []})
