"""Prometheus metrics and the ``/metrics`` + ``/healthz`` endpoints. The only module that
knows Prometheus: the compaction reports values (:class:`CompactionReport`), the daemon hands
them to :class:`Metrics`, which aggregates.

Names follow Prometheus conventions: ``rlcd_`` prefix, base units (``_bytes``, ``_seconds``),
``_total`` on counters, and label values drawn from small fixed sets (a table's URI, an
operation, a reason code), never free text. Each daemon has its own registry, not the
process-global one, so several in one process (tests) do not collide; it also holds the
standard ``process_*`` series (``process_start_time_seconds`` tells restarts). Times are Unix
timestamps (``..._timestamp_seconds``), not ages: Prometheus computes ``time() - x``, and a
timestamp stays right between scrapes. The daemon calls :func:`without_created_series` at its
start, so counters and histograms carry no ``_created`` series.

:func:`serve_metrics` runs an aiohttp server on the daemon's event loop; start it with
``await tg.start(serve_metrics, metrics, health, (host, port))``, which returns the bound
address (port 0 picks a free port) once it listens.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Final

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from rlcd import __version__
from rlcd.compaction.commit import BinAborted
from rlcd.compaction.compact import BinFailure, CompactionReport
from rlcd.errors import ConfigError

__all__ = (
    "BIN_DURATION_BUCKETS",
    "Metrics",
    "RunRecord",
    "QuarantinedFile",
    "TableHealth",
    "VacuumRecord",
    "Health",
    "metrics_app",
    "serve_metrics",
    "without_created_series",
)

BIN_DURATION_BUCKETS: Final = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Seconds, from a small bin on local disk to a 1 GiB bin fetched from S3."""


def without_created_series() -> None:
    """Leave out the ``_created`` series of counters and histograms (a timestamp per series
    that doubles what is scraped and that no dashboard or rule of rlcd uses). It is
    prometheus_client's process-wide switch: the daemon's start calls it, not an import."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped


def _failure_reason(failure: BinFailure) -> str:
    """The label of a bin that failed before its commit: where, and the kind of failure."""
    return f"rewrite_{failure.kind.value}"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One ended run of a table, for its history: ``when`` (Unix seconds), its ``outcome``
    (committed, superseded, conflicted, failed), bins planned and committed, files it removed
    and added, bins committed by reconciling (remap or mask), and a failed run's ``error``."""

    when: float
    outcome: str
    bins: int = 0
    bins_committed: int = 0
    files_in: int = 0
    files_out: int = 0
    reconciled: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class QuarantinedFile:
    """A source left out of bins after ``failures`` failed reads (the last with ``error``),
    from ``since`` until ``until`` (Unix seconds; None: until a reload); ``dv`` is its
    deletion vector's unique id."""

    path: str
    dv: str | None
    failures: int
    error: str
    since: float
    until: float | None = None


@dataclass(frozen=True, slots=True)
class VacuumRecord:
    """One vacuum of a table by the daemon: ``when`` (Unix seconds), its ``mode``, the version
    it left (its VACUUM END commit, or the version it read when it had nothing to delete), the
    ``files`` and ``bytes`` it deleted; or the ``error`` that stopped it (or why it was not
    run)."""

    when: float
    mode: str
    version: int | None = None
    files: int = 0
    bytes: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TableHealth:
    """One table as ``/healthz`` reports it; times are Unix seconds."""

    version: int | None = None
    last_compaction: float | None = None
    last_error: str | None = None
    last_error_time: float | None = None
    last_run: tuple[str, ...] = ()
    """The last compaction run in words: its summary, then one line per bin."""
    history: tuple[RunRecord, ...] = ()
    """The last few runs, oldest first."""
    quarantined: tuple[QuarantinedFile, ...] = ()
    last_vacuum: VacuumRecord | None = None
    snapshot_bytes: int = 0
    """What the table's held snapshot costs (0: none held)."""
    snapshot_released: bool = False
    """The snapshot was released while the table was idle (``[daemon] snapshot_memory``)."""


@dataclass(frozen=True, slots=True)
class Health:
    """What ``/healthz`` answers: ``status`` is ``starting``, ``ok`` (some tables may be
    failing: see ``tables``) or ``stopping``; only ``ok`` is HTTP 200, the others 503."""

    status: str
    tables: Mapping[str, TableHealth] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "tables": {uri: asdict(t) for uri, t in sorted(self.tables.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Health:
        """Read back what :meth:`to_json` wrote (for ``rlcd status``).

        Raises:
            ValueError: ``data`` is not a health answer.
        """
        status, tables = data.get("status"), data.get("tables")
        if not isinstance(status, str) or not isinstance(tables, dict):
            raise ValueError(f"not a /healthz answer: {data!r:.200}")
        try:
            return cls(
                status,
                {
                    uri: TableHealth(
                        **{
                            **t,
                            "last_run": tuple(t.get("last_run", ())),
                            "history": tuple(RunRecord(**r) for r in t.get("history", ())),
                            "quarantined": tuple(
                                QuarantinedFile(**q) for q in t.get("quarantined", ())
                            ),
                            "last_vacuum": (
                                VacuumRecord(**t["last_vacuum"]) if t.get("last_vacuum") else None
                            ),
                        }
                    )
                    for uri, t in tables.items()
                },
            )
        except TypeError as exc:
            raise ValueError(f"not a /healthz answer: {exc}") from exc


class Metrics:
    """The daemon's metrics, in their own registry (:attr:`registry`).

    The daemon calls :meth:`watch_table` when it starts watching a table,
    :meth:`record_compaction` and :meth:`count_run` after each run,
    :meth:`count_lease_skip` for work another run's lease turned away,
    :meth:`record_vacuum` after each vacuum that ran,
    :meth:`observe_bin` as each bin ends, :meth:`set_backlog` after each poll that planned,
    :meth:`set_footprint` after each poll that measured the table, :meth:`set_snapshot_bytes`
    after each step, :meth:`record_success` when
    the table is in hand, :meth:`record_error` when it fails, :meth:`forget_table` when a
    reload drops one;
    :meth:`count_request` is a :class:`~rlcd.storage.metered.MeteredStore` ``on_request`` hook.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._per_table: list[tuple[Counter | Gauge, tuple[str, ...]]] = []
        self.compacted_files = self._counter(
            "rlcd_compacted_files", "Source files removed by committed bins"
        )
        self.compacted_bytes = self._counter(
            "rlcd_compacted_bytes", "Bytes of the source files committed bins removed"
        )
        self.written_files = self._counter(
            "rlcd_written_files", "Output files committed bins added"
        )
        self.written_bytes = self._counter(
            "rlcd_written_bytes", "Bytes of the output files committed bins added"
        )
        self.bytes_copied = self._counter(
            "rlcd_bytes_copied",
            "Bytes of row groups committed outputs took as they were from their sources, by "
            "where they were copied: local (through rlcd) or server (by the object store)",
            "where",
        )
        self.bytes_reencoded = self._counter(
            "rlcd_bytes_reencoded", "Bytes of row groups committed outputs encoded anew"
        )
        self.bins_committed = self._counter(
            "rlcd_bins_committed", "Bins committed, by decision (reconciled or not)", "decision"
        )
        self.bins_aborted = self._counter(
            "rlcd_bins_aborted", "Bins that did not commit, by reason (outputs deleted)", "reason"
        )
        self.runs = self._counter(
            "rlcd_compaction_runs",
            "Compaction runs that ended, by outcome: committed, superseded (what did not commit "
            "lost only to another compaction of the same files: no failure), conflicted "
            "(nothing committed) or failed (the run raised; its error is in rlcd_table_errors)",
            "outcome",
        )
        self.lease_skips = self._counter(
            "rlcd_lease_skips",
            "Compactions, cleanups, vacuums or checkpoints of the table skipped because another "
            "run of rlcd held its lease, by work (compaction, cleanup, vacuum, checkpoint)",
            "work",
        )
        self.commit_attempts = self._counter(
            "rlcd_commit_attempts", "Commit puts tried (put-if-absent)"
        )
        self.conflicts = self._counter(
            "rlcd_commit_conflicts", "Bins a concurrent commit touched, by the outcome", "kind"
        )
        self.errors = self._counter(
            "rlcd_table_errors", "Failed polls or runs of a table, by error type", "error"
        )
        self.small_files = self._gauge(
            "rlcd_table_small_files",
            "Files a compaction would rewrite now (the small-file backlog, files)",
        )
        self.pending_bytes = self._gauge(
            "rlcd_table_pending_bytes", "Bytes of the files a compaction would rewrite now"
        )
        self.live_files = self._gauge("rlcd_table_live_files", "Files the table's version reads")
        self.live_bytes = self._gauge(
            "rlcd_table_live_bytes", "Bytes of the files the table's version reads"
        )
        self.reclaimable_bytes = self._gauge(
            "rlcd_table_vacuum_reclaimable_bytes",
            "Bytes of removed files past the table's deletedFileRetentionDuration, which a "
            "vacuum would delete (from the log; NaN when the retention cannot be read)",
        )
        self.vacuum_files = self._counter(
            "rlcd_vacuum_files_deleted", "Data and DV files the daemon's vacuums deleted"
        )
        self.vacuum_bytes = self._counter(
            "rlcd_vacuum_bytes_reclaimed", "Bytes of the files the daemon's vacuums deleted"
        )
        self.last_success = self._gauge(
            "rlcd_table_last_success_timestamp_seconds",
            "When the table was last in hand (Unix time): a poll found nothing due or a run "
            "committed or was superseded; until then, when the daemon began watching it",
        )
        self.failures = self._gauge(
            "rlcd_table_consecutive_failures",
            "Failed polls and runs of the table since it was last in hand",
        )
        self.version = self._gauge("rlcd_table_version", "The table's last version seen")
        self.quarantined = self._gauge(
            "rlcd_quarantined_files",
            "Source files left out of bins after failing to read quarantine_after times",
        )
        self.last_compaction = self._gauge(
            "rlcd_table_last_compaction_timestamp_seconds",
            "When rlcd last committed a compaction of the table (Unix time)",
        )
        self.last_error = self._gauge(
            "rlcd_table_last_error_timestamp_seconds",
            "When the table last failed (Unix time; the message is in /healthz)",
        )
        self.checkpoints_written = self._counter(
            "rlcd_checkpoints_written",
            "Checkpoints rlcd wrote: after its commits (compaction, vacuum) at a multiple of "
            "delta.checkpointInterval, and when the table's newest one lagged by more than "
            "twice it",
        )
        self.checkpoint_lag = self._gauge(
            "rlcd_checkpoint_lag_versions",
            "Versions the table's newest checkpoint lags its last version seen (the version "
            "itself when it has none)",
        )
        self.snapshot_bytes = self._gauge(
            "rlcd_table_snapshot_bytes",
            "Bytes the table's snapshot held between polls costs (Arrow buffers and an estimate "
            "of its Python objects); 0 while released (idle, or over [daemon] snapshot_memory)",
        )
        self.bin_duration = Histogram(
            "rlcd_bin_duration_seconds",
            "Time from a bin's start to its end, committed or not",
            registry=self.registry,
            buckets=BIN_DURATION_BUCKETS,
        )
        operation = ("operation",)
        self.s3_requests = Counter(
            "rlcd_s3_requests", "Object-store requests, by operation", operation,
            registry=self.registry,
        )  # fmt: skip
        self.s3_bytes = Counter(
            "rlcd_s3_bytes", "Bytes object-store requests read or wrote, by operation", operation,
            registry=self.registry,
        )  # fmt: skip
        ProcessCollector(registry=self.registry)
        build = Info("rlcd_build", "The running rlcd", registry=self.registry)
        build.info({"version": __version__})

    def _counter(self, name: str, doc: str, *labels: str) -> Counter:
        names = ("table", *labels)
        metric = Counter(name, doc, names, registry=self.registry)
        self._per_table.append((metric, names))
        return metric

    def _gauge(self, name: str, doc: str) -> Gauge:
        metric = Gauge(name, doc, ("table",), registry=self.registry)
        self._per_table.append((metric, ("table",)))
        return metric

    def record_compaction(self, table: str, report: CompactionReport, *, now_s: float) -> None:
        """Count what one run of ``table`` committed and aborted (``now_s``: Unix time).

        A committed bin is counted by its decision (``committed``, ``reconciled_by_remap``,
        ``reconciled_by_mask``); an aborted one by its reason: the abort's code, or
        ``rewrite_<kind>`` when it failed before the commit. A bin a concurrent writer's commit
        touched is a conflict, of the kind its reconciliation or abort says.
        """
        if report.dry_run:
            return
        self.compacted_files.labels(table).inc(report.files_removed)
        self.compacted_bytes.labels(table).inc(report.bytes_removed)
        self.written_files.labels(table).inc(report.files_added)
        self.written_bytes.labels(table).inc(report.bytes_added)
        self.commit_attempts.labels(table).inc(report.commit_attempts)
        for result in report.bin_results:
            if isinstance(result, BinAborted):
                self.bins_aborted.labels(table, result.abort.reason).inc()
                self.conflicts.labels(table, result.abort.reason).inc()
                continue
            self.bins_committed.labels(table, result.decision).inc()
            if result.files_added:
                done = result.done
                self.bytes_copied.labels(table, "server").inc(done.server_copied_bytes)
                self.bytes_copied.labels(table, "local").inc(
                    done.copied_bytes - done.server_copied_bytes
                )
                self.bytes_reencoded.labels(table).inc(done.reencoded_bytes)
            if result.decision != "committed":
                self.conflicts.labels(table, result.decision).inc()
        judged = {r.done.bin.bin_id for r in report.bin_results}
        for failure in report.failed:
            if failure.bin.bin_id not in judged:
                self.bins_aborted.labels(table, _failure_reason(failure)).inc()
        if report.checkpoint is not None:
            self.count_checkpoint(table)
        if report.committed_version is not None:
            self.version.labels(table).set(report.committed_version)
            self.last_compaction.labels(table).set(now_s)

    def count_run(self, table: str, outcome: str) -> None:
        """A run of ``table`` ended with ``outcome`` (a :class:`~rlcd.daemon.schedule.RunOutcome`
        value)."""
        self.runs.labels(table, outcome).inc()

    def count_lease_skip(self, table: str, work: str) -> None:
        """``work`` (``compaction``, ``cleanup``, ``vacuum`` or ``checkpoint``) of ``table``
        was skipped: another run of rlcd held the table's lease."""
        self.lease_skips.labels(table, work).inc()

    def record_vacuum(self, table: str, *, files: int, nbytes: int, checkpoints: int) -> None:
        """A vacuum of ``table`` deleted ``files`` files of ``nbytes`` bytes, and wrote
        ``checkpoints`` after its commits."""
        self.vacuum_files.labels(table).inc(files)
        self.vacuum_bytes.labels(table).inc(nbytes)
        if checkpoints:
            self.count_checkpoint(table, checkpoints)

    def count_checkpoint(self, table: str, checkpoints: int = 1) -> None:
        """rlcd wrote ``checkpoints`` of ``table`` (after a commit, or its lag grew too long)."""
        self.checkpoints_written.labels(table).inc(checkpoints)

    def set_checkpoint_lag(self, table: str, versions: int) -> None:
        """``table``'s newest checkpoint lags its last version seen by ``versions``."""
        self.checkpoint_lag.labels(table).set(versions)

    def observe_bin(self, seconds: float) -> None:
        """One bin ended (committed, aborted or failed) ``seconds`` after it started (not
        after its run started: with bins waiting their turn, that would add their wait)."""
        self.bin_duration.observe(seconds)

    def set_backlog(
        self, table: str, *, version: int, small_files: int, pending_bytes: int
    ) -> None:
        """What a poll of ``table`` saw: its version and what awaits compaction."""
        self.set_version(table, version)
        self.small_files.labels(table).set(small_files)
        self.pending_bytes.labels(table).set(pending_bytes)

    def set_version(self, table: str, version: int) -> None:
        """``table``'s log shows ``version`` (set as soon as a poll lists it, before the
        commits are read or the table loaded and planned)."""
        self.version.labels(table).set(version)

    def set_quarantined(self, table: str, files: int) -> None:
        """``table`` has ``files`` quarantined sources now."""
        self.quarantined.labels(table).set(files)

    def set_footprint(
        self, table: str, *, live_files: int, live_bytes: int, reclaimable_bytes: int | None
    ) -> None:
        """What ``table``'s version reads, and what a vacuum would free (None: unknown)."""
        self.live_files.labels(table).set(live_files)
        self.live_bytes.labels(table).set(live_bytes)
        self.reclaimable_bytes.labels(table).set(
            math.nan if reclaimable_bytes is None else reclaimable_bytes
        )

    def set_snapshot_bytes(self, table: str, nbytes: int) -> None:
        """``table``'s held snapshot costs ``nbytes`` now (0: released)."""
        self.snapshot_bytes.labels(table).set(nbytes)

    def watch_table(self, table: str, *, now_s: float) -> None:
        """The daemon began watching ``table``: its failures and last success start from now,
        so a table never in hand is alerted on like one that stopped being."""
        self.record_success(table, now_s=now_s)

    def record_success(self, table: str, *, now_s: float) -> None:
        """``table`` is in hand: nothing due after a poll, or a run committed or was
        superseded."""
        self.last_success.labels(table).set(now_s)
        self.failures.labels(table).set(0)

    def record_error(self, table: str, error: BaseException, *, now_s: float) -> None:
        """``table`` failed with ``error`` (labelled by its type, never its message)."""
        self.errors.labels(table, type(error).__name__).inc()
        self.last_error.labels(table).set(now_s)
        self.failures.labels(table).inc()

    def forget_table(self, table: str) -> None:
        """Drop every series of a table no longer configured (after a reload)."""
        for metric, names in self._per_table:
            series = {
                tuple(sample.labels[n] for n in names)
                for family in metric.collect()
                for sample in family.samples
                if sample.labels.get("table") == table and all(n in sample.labels for n in names)
            }
            for labels in series:
                metric.remove(*labels)

    def count_request(self, operation: str, requests: int, nbytes: int) -> None:
        """A :data:`~rlcd.storage.metered.RequestHook`: ``requests`` more of ``operation``."""
        if requests:
            self.s3_requests.labels(operation).inc(requests)
        if nbytes:
            self.s3_bytes.labels(operation).inc(nbytes)

    def render(self) -> bytes:
        """The registry in Prometheus's text format."""
        return generate_latest(self.registry)


def metrics_app(metrics: Metrics, health: Callable[[], Health]) -> web.Application:
    """The aiohttp application: ``GET /metrics`` and ``GET /healthz``."""

    async def get_metrics(_: web.Request) -> web.Response:
        response = web.Response(body=metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def get_health(_: web.Request) -> web.Response:
        state = health()
        return web.json_response(
            state.to_json(), status=200 if state.status == "ok" else 503, dumps=_dumps
        )

    app = web.Application()
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/healthz", get_health)
    return app


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


@asynccontextmanager
async def _listening(app: web.Application, host: str, port: int) -> AsyncIterator[tuple[str, int]]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(
                f"metrics.listen: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        bound = runner.addresses[0]
        yield str(bound[0]), int(bound[1])
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()


async def serve_metrics(
    metrics: Metrics,
    health: Callable[[], Health],
    address: tuple[str, int],
    *,
    task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/metrics`` and ``/healthz`` on ``address`` until cancelled.

    Started with ``tg.start``, it returns the bound ``(host, port)`` once it listens.

    Raises:
        ConfigError: it cannot listen there (the port is taken, the host is not local).
    """
    async with _listening(metrics_app(metrics, health), *address) as bound:
        task_status.started(bound)
        await anyio.sleep_forever()
