"""The daemon's loop over many tables: poll, schedule, compact, drain, reload.

Theory of operation (rlc-design.md §7, Run). One :class:`Supervisor` owns every table's
:class:`~rlcd.daemon._watch.TableWatch` and the pure :class:`~rlcd.daemon.schedule.Schedule`.
Every ``poll_interval`` (from one pass's start to the next's: a pass that takes longer is
followed at once) it polls the tables (one LIST each when idle), plans the changed ones
(:func:`~rlcd.compaction.compact.plan_table`, in a worker thread) and starts the tables the
schedule picks, each a :func:`~rlcd.compaction.compact.compact_table` run in the supervisor's
work task group, all sharing the bin and memory limiters of :class:`Limits` (one root owns
them: :mod:`rlcd.daemon.app`). A table that fails — a corrupt log, access denied, an
unsupported feature — is reported (once for a repeated error), backs off and is tried again;
the others carry on.

- **Tables** are the config's ``[[table]]`` entries and what ``[[discover]]`` finds (again every
  ``interval``), keeping those this shard owns.
- **Stop** (:meth:`Supervisor.stop`): no new run starts; runs in flight get the grace period to
  finish, then are cancelled, and a cancelled run deletes the files its bins wrote.
- **Reload** (:meth:`Supervisor.apply`): new settings take effect between two steps of the
  loop: tables added are polled at once, tables removed are dropped (a run in flight ends
  first), policies and limits change in place (limiters' ``total_tokens``).
- **Orphans**: every table is cleaned when first seen and then every ``orphan_grace``
  (:meth:`Supervisor._clean`).
- **Vacuum**: every table whose policy has ``vacuum`` is vacuumed when first seen and then
  every ``vacuum_interval`` (:meth:`Supervisor._vacuum`), in the work task group beside the
  other tables' runs but never beside its own compaction: a table is in ``_running`` or in
  ``_vacuuming``, never both. It uses the table's retention (or the policy's
  ``vacuum_retain``), never below :data:`~rlcd.daemon.config.MIN_VACUUM_RETAIN_S`.
- **Lease**: a table's compaction, cleanup and vacuum each run inside its advisory lease
  (:mod:`rlcd.compaction.lease`; ``[daemon] lease``). Work another run of rlcd holds the
  lease for is skipped: one ``table_leased`` event and ``rlcd_lease_skips_total``, no failure,
  and the table is not tried again before the next poll.
- **Quarantine**: a bin that fails because one of its sources cannot be read counts a failure
  against that source (:class:`~rlcd.daemon.schedule.Quarantine`); at the policy's
  ``quarantine_after``-th it is quarantined (one ``source_quarantined`` event,
  ``rlcd_quarantined_files``, ``/healthz``) and left out of later plans, so its partition's
  healthy files are compacted again. The file is never changed. The policy's
  ``quarantine_for`` after it was quarantined, a poll releases it (tried once more). Held in
  memory: a restart or a reload (SIGHUP) releases every table's quarantine, and a file that
  leaves the table (DML, another compaction) leaves it.
- **Checkpoints**: after a poll, a table whose newest checkpoint lags its version by more
  than twice ``delta.checkpointInterval`` (whoever committed) gets the checkpoint of the polled
  version, then its expired log cleaned up
  (:func:`~rlcd.delta.checkpoint_writer.checkpoint_and_clean`), under the table's lease and
  never while it is compacted (a poll skips running tables, and no run starts before the polls
  end). A failure is a ``checkpoint_failed`` warning, tried again after :data:`_CLEAN_EVERY_S`.
- **History**: the last :data:`HISTORY` runs of each table (``/healthz``, ``rlcd status``).
- **Snapshots**: after each step, the snapshots of tables idle ``snapshot_idle`` and, while
  the rest exceed ``snapshot_memory``, of the tables idle longest are released
  (:mod:`rlcd.daemon._snapshots`; one ``snapshot_released`` event each); never one whose
  poll, compaction or vacuum runs, that is due (compaction or vacuum), or whose checkpoint is
  owed. A released table is loaded again by the poll that sees a commit, or that needs it: a
  replan, a vacuum due. Each load first reserves its peak (:meth:`Supervisor._load_budget`),
  releasing the idle longest or waiting, out of its poll slot, while the budget cannot take
  it; the listing sets the table's version gauge (a commit's, or on the first poll the
  table's) before the load, the footprint and the plan.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Final

import anyio
import anyio.to_thread
import pyarrow.compute as pc
import structlog

from rlcd.compaction.cleanup import clean_table
from rlcd.compaction.commit import BinCommitted
from rlcd.compaction.compact import CompactionReport, FailureKind, compact_table, plan_table
from rlcd.compaction.lease import Busy, LeaseHold, hold_lease, owner
from rlcd.compaction.plan import Bin
from rlcd.compaction.rewrite import GROWN_ROW_GROUP_BYTES, HANDOFF_BYTES
from rlcd.compaction.summary import bin_lines, run_summary
from rlcd.daemon._snapshots import Held, Release, admit, expected_bytes, load_peak, releases
from rlcd.daemon._watch import TableWatch
from rlcd.daemon.config import (
    MIN_VACUUM_RETAIN_S,
    DiscoverEntry,
    Settings,
    SettingsChanges,
    TablePolicy,
    settings_changes,
)
from rlcd.daemon.discover import EMPTY_PREFIX, discover_tables
from rlcd.daemon.metrics import (
    Health,
    Metrics,
    QuarantinedFile,
    RunRecord,
    TableHealth,
    VacuumRecord,
)
from rlcd.daemon.schedule import (
    Backlog,
    Backoff,
    Quarantine,
    RunOutcome,
    Schedule,
    SourceKey,
    Trigger,
)
from rlcd.delta.checkpoint_writer import (
    CheckpointWritten,
    checkpoint_and_clean,
    checkpoint_interval,
)
from rlcd.delta.replay import Snapshot
from rlcd.errors import CorruptLogError, RlcdError, UnsupportedFeatureError
from rlcd.operations.vacuum import (
    VacuumReport,
    reclaimable_bytes,
    table_retention_ms,
    vacuum_table,
)
from rlcd.storage.base import ObjectStore
from rlcd.storage.uri import TableUri

__all__ = (
    "Limits",
    "TableStatus",
    "Supervisor",
    "StoreFactory",
    "BIN_MEMORY",
    "HISTORY",
    "trigger_for",
)

log = structlog.get_logger(__name__)

BIN_MEMORY: Final = 2 * GROWN_ROW_GROUP_BYTES + HANDOFF_BYTES
"""What one bin in flight may hold (a row group filling, one being written, the batches
between its stages), with row groups at their largest: the memory budget buys this many bytes
per bin (134 MiB: the default 1 GiB admits 7 bins, more than the 4 in flight by default)."""

_POLLS_AT_ONCE: Final = 16
HISTORY: Final = 5
"""Runs of each table kept for ``rlcd status``."""
_CLEAN_EVERY_S: Final = 60.0
"""Cleanup runs at most this often per table, however short the orphan grace."""
_MEASURE_EVERY_S: Final = 60.0
"""An idle table's footprint is measured again this often: its tombstones expire with time."""

StoreFactory = Callable[[TableUri], ObjectStore]
"""The store of a table (or of a discover prefix), built by the composition root."""


_LOST_RACE: Final = frozenset((FailureKind.CONFLICT, FailureKind.SUPERSEDED))
"""Why a bin may fail without anything being wrong: another writer's commit came first."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits that hold across all tables, owned by the composition root."""

    bins: anyio.CapacityLimiter
    memory: anyio.CapacityLimiter

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        limits = cls(anyio.CapacityLimiter(1), anyio.CapacityLimiter(1))
        limits.resize(settings)
        return limits

    def resize(self, settings: Settings) -> None:
        """Take the settings' limits (a run in flight keeps what it holds)."""
        self.bins.total_tokens = settings.daemon.bins_in_flight
        self.memory.total_tokens = max(1, settings.daemon.memory_budget // BIN_MEMORY)


@dataclass(frozen=True, slots=True)
class TableStatus:
    """One table as the daemon sees it (``/healthz``, ``rlcd status``, the metrics)."""

    table: str
    version: int | None
    files: int
    small_files: int
    bytes_awaiting: int
    running: bool
    last_compaction_ms: int | None
    last_error: str | None
    bins_committed: int
    bins_aborted: int
    bins_superseded: int
    """Bins that lost only to another compaction of their files (not failures)."""
    last_run: tuple[str, ...]
    """The last run in words: its summary, then each bin's outcome."""
    history: tuple[RunRecord, ...]
    """The last :data:`HISTORY` runs, oldest first."""
    quarantined: tuple[QuarantinedFile, ...]
    """The sources left out of bins, by path."""
    last_vacuum: VacuumRecord | None = None
    """The daemon's last vacuum of the table (None: none since it started)."""
    snapshot_bytes: int = 0
    """What its held snapshot costs (0: none held)."""
    snapshot_released: bool = False
    """Its snapshot was released while it was idle (loaded again when it changes)."""


def trigger_for(policy: TablePolicy) -> Trigger:
    """When a table with ``policy`` is due (the schedule's view of the policy)."""
    return Trigger(policy.min_small_files, policy.min_small_bytes, policy.min_interval_s)


class _Table:
    """A watched table's runtime state (owned by the supervisor's loop)."""

    def __init__(self, uri: TableUri, policy: TablePolicy, store: ObjectStore) -> None:
        self.uri = uri
        self.name = str(uri)
        self.policy = policy
        self.store = store
        self.watch = TableWatch(store)
        self.replan_at_ms: int | None = None  # when a young file comes of age
        self.last_compaction_ms: int | None = None
        self.bins_committed = 0
        self.bins_aborted = 0
        self.bins_superseded = 0
        self.last_run: tuple[str, ...] = ()
        self.history: deque[RunRecord] = deque(maxlen=HISTORY)
        self.quarantine = Quarantine()
        self.clean_at = -math.inf
        self.measure_at = -math.inf
        self.vacuum_at = -math.inf
        self.last_vacuum: VacuumRecord | None = None
        self.short_retention_warned = False
        self.checkpoint_at = -math.inf  # after a failed checkpoint: not before then
        self.active_at = -math.inf  # when it last changed or ended a run or vacuum
        self.removed = False


def _plan(
    policy: TablePolicy, snapshot: Snapshot, now_ms: int, exclude: frozenset[SourceKey]
) -> tuple[Backlog, int | None]:
    """The table's backlog now (without the ``exclude``\\ d, quarantined sources), and when
    it must be planned again though its log did not move (a file younger than the minimum age
    comes of age then). Arrow compute over every live file: run it in a worker thread."""
    if not policy.enabled:
        return Backlog(), None
    age_ms = int(policy.min_file_age_s * 1000)
    before = now_ms - age_ms
    _, bins = plan_table(
        snapshot, policy.compaction, before_ms=before if age_ms else None, exclude=exclude
    )
    if not age_ms:
        return Backlog.of(bins), None
    times = snapshot.adds["modification_time"]
    youngest = pc.min(times.filter(pc.greater_equal(times, before))).as_py()
    return Backlog.of(bins), (youngest + age_ms if youngest is not None else None)


@asynccontextmanager
async def _outside(slots: anyio.CapacityLimiter) -> AsyncIterator[None]:
    """The current task's slot in ``slots`` left to others for a while; taken back after, even
    when cancelled (shielded), since the caller's ``async with`` gives it back."""
    slots.release()
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await slots.acquire()


def _footprint(snapshot: Snapshot, now_ms: int) -> tuple[int, int, int | None]:
    """The live files and bytes, and the bytes a vacuum would free (None when the table's
    retention property cannot be read, or a DV descriptor the rules need is malformed: a metric
    never fails a table). Arrow compute over the files and tombstones: run it in a worker
    thread."""
    try:
        reclaimable: int | None = reclaimable_bytes(snapshot, now_ms=now_ms)
    except CorruptLogError:
        reclaimable = None
    return snapshot.num_files, pc.sum(snapshot.adds["size"]).as_py() or 0, reclaimable


class Supervisor:
    """Runs the tables of ``settings`` until stopped (or, with ``once``, for one pass).

    Args:
        settings: the validated config.
        store_for: builds a table's (or prefix's) store.
        limits: the shared limiters.
        clock: monotonic seconds (scheduling); ``wall_ms``: epoch milliseconds (file ages,
            commit timestamps); ``draw``: uniform jitter in [0, 1).
        metrics: where polls, runs, bins and errors are counted.
        on_status: called with a one-line summary after each step (systemd's STATUS=).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store_for: StoreFactory,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        draw: Callable[[], float] = random.random,
        metrics: Metrics | None = None,
        on_status: Callable[[str], object] | None = None,
    ) -> None:
        self.settings = settings
        self._store_for = store_for
        self._limits = limits
        self._clock = clock
        self._wall_ms = wall_ms
        self._draw = draw
        self.metrics = metrics if metrics is not None else Metrics()
        self._on_status = on_status
        self._schedule = Schedule(backoff=Backoff(cap_s=600.0), max_wait_s=600.0)
        self._tables: dict[str, _Table] = {}
        self._discovered: dict[str, tuple[float, tuple[TableUri, ...]]] = {}
        self._empty_prefixes: set[str] = set()  # warned of; again once they hold objects
        self._running: set[str] = set()  # compacting
        self._vacuuming: set[str] = set()
        self._polling: set[str] = set()  # between a poll's start and its plan
        self._loading: dict[str, int] = {}  # the bytes each load in flight reserved
        self._waiting: set[str] = set()  # polls waiting for the budget to load
        self._freed = anyio.Event()  # set (and replaced) when a load may now fit
        self._stopping = False
        self._started = False
        self._poll_now = False
        self._errors_at: dict[str, float] = {}
        # each table's last error's type, for ``failures`` (not the error: its traceback would
        # keep what the failed run held alive)
        self._error_types: dict[str, type[BaseException]] = {}
        self._wake = anyio.Event()
        self._work: anyio.abc.TaskGroup | None = None
        self._reloaded: SettingsChanges | None = None  # logged once the tables are refreshed

    # --- control (any task) --------------------------------------------------------------

    def stop(self) -> None:
        """Stop planning; runs in flight get the grace period (SIGTERM, SIGINT)."""
        self._stopping = True
        self._wake.set()

    def apply(self, settings: Settings) -> None:
        """Take new settings (SIGHUP): tables, policies, limits; discovery runs again. Every
        quarantined source is released (tried again; quarantined again if it still fails)."""
        self._reloaded = settings_changes(self.settings, settings)
        self.settings = settings
        for t in self._tables.values():
            self._release(t)
        self._limits.resize(settings)
        self._discovered.clear()
        self._empty_prefixes.clear()
        self._poll_now = True
        self._wake.set()

    def health(self) -> Health:
        """What ``/healthz`` answers."""
        status = "stopping" if self._stopping else "ok" if self._started else "starting"
        tables = {
            s.table: TableHealth(
                version=s.version,
                last_compaction=None
                if s.last_compaction_ms is None
                else s.last_compaction_ms / 1000,
                last_error=s.last_error,
                last_error_time=self._errors_at.get(s.table) if s.last_error else None,
                last_run=s.last_run,
                history=s.history,
                quarantined=s.quarantined,
                last_vacuum=s.last_vacuum,
                snapshot_bytes=s.snapshot_bytes,
                snapshot_released=s.snapshot_released,
            )
            for s in self.status()
        }
        return Health(status, tables)

    def failures(self) -> tuple[type[BaseException], ...]:
        """The type of the last error of every watched table failing now, sorted by URI."""
        return tuple(self._error_types[s.table] for s in self.status() if s.last_error is not None)

    def status(self) -> list[TableStatus]:
        """Every watched table, sorted by URI."""
        out = []
        for name in sorted(self._tables):
            t = self._tables[name]
            state = self._schedule.state(name)
            out.append(
                TableStatus(
                    table=name,
                    version=t.watch.version,
                    files=t.watch.files,
                    small_files=state.backlog.files,
                    bytes_awaiting=state.backlog.bytes,
                    running=name in self._running,
                    last_compaction_ms=t.last_compaction_ms,
                    last_error=state.last_error,
                    bins_committed=t.bins_committed,
                    bins_aborted=t.bins_aborted,
                    bins_superseded=t.bins_superseded,
                    last_run=t.last_run,
                    history=tuple(t.history),
                    quarantined=tuple(
                        QuarantinedFile(
                            path,
                            dv,
                            q.failures,
                            q.error,
                            q.quarantined_s,
                            q.release_at(t.policy.quarantine_for_s),
                        )
                        for (path, dv), q in sorted(
                            t.quarantine.suspects.items(),
                            key=lambda item: (item[0][0], item[0][1] or ""),
                        )
                        if q.quarantined_s is not None
                    ),
                    last_vacuum=t.last_vacuum,
                    snapshot_bytes=t.watch.held_bytes(),
                    snapshot_released=t.watch.released,
                )
            )
        return out

    # --- the loop -------------------------------------------------------------------------

    async def run(self, *, once: bool = False) -> None:
        """Run until :meth:`stop` (or one pass with ``once``); then drain and return."""
        next_poll = -math.inf
        async with anyio.create_task_group() as work:
            self._work = work
            while not self._stopping:
                if self._clock() >= next_poll or self._poll_now:
                    # a run that ends only wakes the loop to start the next: the tables are
                    # polled on the interval (or at once after a reload), not per wake-up; it
                    # counts from the pass's start, so a slow pass (tables loaded again) does
                    # not delay the next, and a commit is seen by the first pass after it
                    self._poll_now = False
                    started = self._clock()
                    await self._refresh_tables()
                    self._log_reload()
                    await self._clean_due()
                    await self._poll_all()
                    next_poll = started + self.settings.daemon.poll_interval_s
                self._vacuum_due()  # before compactions: a due vacuum waits for no backlog
                self._start_ready()
                self._hold_snapshots()
                self._started = True
                self._report_status()
                if once and not self._running and not self._vacuuming:
                    break
                await self._sleep(None if once else max(0.0, next_poll - self._clock()))
            await self._drain()
            work.cancel_scope.cancel()

    async def _sleep(self, seconds: float | None) -> None:
        """Until ``seconds`` pass (forever when None) or something wakes the loop."""
        with anyio.move_on_after(math.inf if seconds is None else seconds):
            await self._wake.wait()
        self._wake = anyio.Event()
        if self._stopping:
            self._wake.set()

    async def _drain(self) -> None:
        """Let runs and vacuums in flight finish within the grace period (the caller cancels
        the rest: a vacuum cut short has deleted only files no version in its window reads)."""
        if not self._busy():
            return
        grace = self.settings.daemon.shutdown_grace_s
        log.info("draining", tables=self._busy(), grace_s=grace)
        with anyio.move_on_after(grace):
            while self._busy():
                await self._sleep(None)
        if self._busy():
            log.warning("drain_cancelled", tables=self._busy())

    def _busy(self) -> list[str]:
        """The tables being compacted or vacuumed, sorted."""
        return sorted(self._running | self._vacuuming)

    def _report_status(self) -> None:
        if self._on_status is None:
            return
        states = [self._schedule.state(n) for n in self._tables]
        due = sum(1 for s in states if s.due is not None)
        failing = sum(1 for s in states if s.last_error is not None)
        self._on_status(
            f"{len(self._tables)} tables, {len(self._running)} compacting, {due} due, "
            f"{failing} failing"
        )

    # --- tables ---------------------------------------------------------------------------

    async def _refresh_tables(self) -> None:
        """Bring the watched set in line with the settings and what discovery finds."""
        settings = self.settings
        wanted: dict[str, tuple[TableUri, TablePolicy]] = {}
        for entry in settings.tables:
            wanted[str(entry.uri)] = (entry.uri, settings.policy_for(entry.uri))
        for d in settings.discover:
            for uri in await self._discover(d):
                wanted.setdefault(str(uri), (uri, settings.policy_for(uri)))
        wanted = {k: v for k, v in wanted.items() if settings.shard.owns(v[0])}
        for name, (uri, policy) in wanted.items():
            t = self._tables.get(name)
            if t is None:
                self._tables[name] = _Table(uri, policy, self._store_for(uri))
                self.metrics.set_quarantined(name, 0)
                self.metrics.watch_table(name, now_s=self._wall_ms() / 1000)
                log.info("table_added", table=name)
            else:
                t.removed = False  # removed while it ran, and added back
                if t.policy != policy:
                    t.policy, t.replan_at_ms = policy, 0
        for name in [n for n, t in self._tables.items() if n not in wanted and not t.removed]:
            self._tables[name].removed = True  # a run in flight ends first (see _compact)
            if name not in self._running and name not in self._vacuuming:
                del self._tables[name]
            self.metrics.forget_table(name)
            log.info("table_removed", table=name)
        self._schedule = self._schedule.retain(self._tables)

    def _log_reload(self) -> None:
        """After a reload's tables are refreshed: what changed, and the tables now watched."""
        changes, self._reloaded = self._reloaded, None
        if changes is None:
            return
        named = {str(e.uri) for e in self.settings.tables}
        watched = [n for n, t in self._tables.items() if not t.removed]  # a removed one may run
        log.info(
            "config_reloaded",
            path=self.settings.source,
            tables=len(watched),
            named=sum(1 for n in watched if n in named),
            discovered=sum(1 for n in watched if n not in named),
            **{k: v for k, v in asdict(changes).items() if v},
        )

    async def _discover(self, entry: DiscoverEntry) -> tuple[TableUri, ...]:
        """The tables under the entry's prefix, listed again once its interval passed."""
        key = f"{entry.key}:{entry.prefix}"
        now = self._clock()
        cached = self._discovered.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        previous = cached[1] if cached is not None else ()
        try:
            discovered = await discover_tables(self._store_for(entry.prefix), entry)
        except Exception as exc:  # a listing failure keeps what was found before
            log.warning("discovery_failed", prefix=str(entry.prefix), error=str(exc))
            found = previous
        else:
            found = discovered.tables
            if not discovered.empty:
                self._empty_prefixes.discard(key)
            elif key not in self._empty_prefixes:  # once, not every interval
                self._empty_prefixes.add(key)
                log.warning(
                    "discover_prefix_empty",
                    discover=entry.key,
                    prefix=str(entry.prefix),
                    error=EMPTY_PREFIX,
                )
        self._discovered[key] = (now + entry.interval_s, found)
        return found

    async def _clean_due(self) -> None:
        """Clean the tables not cleaned for ``orphan_grace`` (all of them at start)."""
        now = self._clock()
        limiter = anyio.CapacityLimiter(_POLLS_AT_ONCE)
        async with anyio.create_task_group() as tg:
            for t in list(self._tables.values()):
                busy = t.name in self._running or t.name in self._vacuuming
                if t.clean_at <= now and not busy:
                    t.clean_at = now + max(self.settings.daemon.orphan_grace_s, _CLEAN_EVERY_S)
                    tg.start_soon(self._clean, t, limiter)

    async def _clean(self, t: _Table, limiter: anyio.CapacityLimiter) -> None:
        """Delete the table's orphaned rlcd files and uploads past the grace period; a
        failure is logged and the table is cleaned again next time."""
        async with limiter:
            try:
                async with self._lease(t) as lease:
                    if isinstance(lease, Busy):
                        self._leased(t, lease, "cleanup")
                        return
                    await clean_table(
                        t.store,
                        grace_s=self.settings.daemon.orphan_grace_s,
                        now_ms=self._wall_ms(),
                    )
            except Exception as exc:
                log.warning("cleanup_failed", table=t.name, error=str(exc))

    def _lease(self, t: _Table) -> AbstractAsyncContextManager[LeaseHold | Busy | None]:
        """The table's lease for one piece of work, or none when ``[daemon] lease`` is off."""
        daemon = self.settings.daemon
        if not daemon.lease:
            return nullcontext(None)
        return hold_lease(
            t.store, owner=owner("rlcd run"), ttl_s=daemon.lease_ttl_s, now_ms=self._wall_ms
        )

    def _leased(self, t: _Table, busy: Busy, work: str) -> None:
        """``work`` on ``t`` was skipped: another run of rlcd holds the table's lease."""
        log.info("table_leased", table=t.name, work=work, lease=busy.describe())
        self.metrics.count_lease_skip(t.name, work)

    # --- polls ----------------------------------------------------------------------------

    async def _poll_all(self) -> None:
        now = self._clock()
        limiter = anyio.CapacityLimiter(_POLLS_AT_ONCE)
        async with anyio.create_task_group() as tg:
            for t in list(self._tables.values()):
                state = self._schedule.state(t.name)
                if t.name in self._running or t.removed or now < state.retry_at:
                    continue
                tg.start_soon(self._poll, t, limiter)

    async def _poll(self, t: _Table, limiter: anyio.CapacityLimiter) -> None:
        async with limiter:
            self._polling.add(t.name)
            try:
                self._expire(t, self._wall_ms() / 1000)  # first: its replan needs the snapshot
                poll = await t.watch.poll(
                    load=self._needs_snapshot(t),
                    seen=lambda version: self.metrics.set_version(t.name, version),
                    gate=lambda: self._load_budget(t, limiter),
                )
                now_ms = self._wall_ms()
                if poll.snapshot is None:  # released while idle, and the table did not move
                    self._in_hand(t, now_ms)
                    return
                if poll.changed:
                    t.active_at = self._clock()
                await self._measure(t, poll.snapshot, now_ms, changed=poll.changed)
                await self._checkpoint(t, poll.snapshot, now_ms)
                stale = t.replan_at_ms is not None and now_ms >= t.replan_at_ms
                if not (poll.changed or stale):
                    self._in_hand(t, now_ms)
                    return
                if t.quarantine.suspects:  # a file removed or rewritten is no suspect
                    named = poll.snapshot.live_files(path for path, _ in t.quarantine.suspects)
                    live = {a.key for a in named.values()}
                    self._set_quarantine(t, t.quarantine.retain(live))
                backlog, t.replan_at_ms = await anyio.to_thread.run_sync(
                    _plan, t.policy, poll.snapshot, now_ms, t.quarantine.excluded
                )
            except Exception as exc:
                self._failed(t, exc)
                return
            finally:
                self._polling.discard(t.name)
                self._free()
        self._schedule = self._schedule.observe(
            t.name, backlog, trigger_for(t.policy), version=poll.snapshot.version, now=self._clock()
        )
        self.metrics.set_backlog(
            t.name,
            version=poll.snapshot.version,
            small_files=backlog.files,
            pending_bytes=backlog.bytes,
        )
        self._in_hand(t, now_ms)

    def _needs_snapshot(self, t: _Table) -> bool:
        """Whether the table's next poll needs its snapshot though the log did not move: to
        plan it again (a file came of age, a quarantine ended) or to vacuum it."""
        replan = t.replan_at_ms is not None and self._wall_ms() >= t.replan_at_ms
        return replan or self._vacuum_owed(t)

    def _vacuum_owed(self, t: _Table) -> bool:
        """Whether the table's ``vacuum_interval`` passed (its vacuum starts after the polls)."""
        return t.policy.vacuum and t.vacuum_at <= self._clock()

    def _hold_snapshots(self) -> None:
        """Release the snapshots :func:`~rlcd.daemon._snapshots.releases` picks, and report
        what each table holds."""
        daemon = self.settings.daemon
        for name, reason in releases(
            self._held(), budget=daemon.snapshot_memory, idle_s=daemon.snapshot_idle_s
        ):
            self._release_snapshot(self._tables[name], reason)
        for t in self._tables.values():
            if not t.removed:
                self.metrics.set_snapshot_bytes(t.name, t.watch.held_bytes())

    def _held(self) -> list[Held]:
        """Every snapshot held now: its bytes, its table's idle time, whether it is pinned."""
        now = self._clock()
        return [
            Held(t.name, t.watch.held_bytes(), now - t.active_at, self._pinned(t))
            for t in self._tables.values()
            if t.watch.snapshot is not None
        ]

    def _release_snapshot(self, t: _Table, reason: Release) -> None:
        version = t.watch.version
        nbytes = t.watch.release()
        log.info(
            "snapshot_released", table=t.name, version=version, bytes=nbytes, reason=reason.value
        )
        if not t.removed:
            self.metrics.set_snapshot_bytes(t.name, 0)

    @asynccontextmanager
    async def _load_budget(self, t: _Table, polls: anyio.CapacityLimiter) -> AsyncIterator[None]:
        """Around a load of ``t``: reserve its peak once
        :func:`~rlcd.daemon._snapshots.admit` lets it start (releasing what it picks first);
        until then wait, woken by every load, poll, run or vacuum that ends, leaving the
        poll's slot in ``polls`` to the others (their listings show their versions)."""
        while (admitted := self._admit(t)) is None:  # again once the slot is back
            async with _outside(polls):
                await self._room_for(t)
        picked, want = admitted
        for name in picked:
            self._release_snapshot(self._tables[name], Release.BUDGET)
        self._loading[t.name] = want
        try:
            yield
        finally:
            del self._loading[t.name]
            self._free()

    async def _room_for(self, t: _Table) -> None:
        """Until :meth:`_admit` would let a load of ``t`` start."""
        try:
            while self._admit(t) is None:
                if t.name not in self._waiting:  # a waiting poll makes no room: say so once
                    self._waiting.add(t.name)
                    self._free()
                await self._freed.wait()
        finally:
            self._waiting.discard(t.name)

    def _admit(self, t: _Table) -> tuple[list[str], int] | None:
        """:func:`~rlcd.daemon._snapshots.admit` for a load of ``t`` now, and the bytes it
        reserves: the peak of what it is expected to hold (known better as other loads end).
        What may make room: the loads in flight, and the other polls past their load (they pin
        a snapshot until their plan ends), not those waiting too."""
        budget = self.settings.daemon.snapshot_memory
        others = (o.watch.footprint for o in self._tables.values() if o is not t)
        want = expected_bytes(t.watch.footprint, others, budget=budget)
        settling = {
            o.name
            for o in self._tables.values()
            if o.name in self._polling and o.watch.snapshot is not None
        }
        picked = admit(
            self._held(),
            loading=sum(self._loading.values()),
            pending=len(self._loading) + len(settling - self._waiting - {t.name}),
            want=want,
            budget=budget,
        )
        return None if picked is None else (picked, load_peak(want))

    def _free(self) -> None:
        """Wake the loads waiting for the budget: a poll, run or vacuum ended (a load ended,
        or a snapshot is no longer pinned)."""
        self._freed.set()
        self._freed = anyio.Event()

    def _pinned(self, t: _Table) -> bool:
        """Whether work on the table uses its snapshot: a poll, compaction or vacuum in flight,
        one due or owed (released, it would be loaded twice), or a checkpoint owed (a poll
        writes it from the snapshot, and a released one is not loaded again until the table
        moves)."""
        busy = t.name in self._running or t.name in self._vacuuming or t.name in self._polling
        if busy or self._schedule.state(t.name).due is not None or self._vacuum_owed(t):
            return True
        snapshot, newest = t.watch.snapshot, t.watch.checkpoint
        if snapshot is None:
            return False
        try:
            interval = checkpoint_interval(snapshot.metadata.configuration)
        except ValueError:
            return False  # never written: ``checkpoint_failed`` says why
        return snapshot.version - (newest if newest is not None else 0) > 2 * interval

    async def _measure(self, t: _Table, snapshot: Snapshot, now_ms: int, *, changed: bool) -> None:
        """Report the table's footprint after a change, and every :data:`_MEASURE_EVERY_S`."""
        if not changed and self._clock() < t.measure_at:
            return
        t.measure_at = self._clock() + _MEASURE_EVERY_S
        files, nbytes, reclaimable = await anyio.to_thread.run_sync(_footprint, snapshot, now_ms)
        self.metrics.set_footprint(
            t.name, live_files=files, live_bytes=nbytes, reclaimable_bytes=reclaimable
        )

    async def _checkpoint(self, t: _Table, snapshot: Snapshot, now_ms: int) -> None:
        """Report the table's checkpoint lag, and write the checkpoint of ``snapshot`` when
        the lag exceeds twice the table's interval (a failure is a warning, never the
        table's)."""
        newest = t.watch.checkpoint
        lag = snapshot.version - (newest if newest is not None else 0)
        self.metrics.set_checkpoint_lag(t.name, lag)
        if self._clock() < t.checkpoint_at or t.name in self._vacuuming:  # its lease is held
            return
        try:
            if lag <= 2 * checkpoint_interval(snapshot.metadata.configuration):
                return
            async with self._lease(t) as lease:
                if isinstance(lease, Busy):
                    self._leased(t, lease, "checkpoint")
                    return
                run = await checkpoint_and_clean(t.store, snapshot, now_ms=now_ms)
        except Exception as exc:
            t.checkpoint_at = self._clock() + _CLEAN_EVERY_S
            log.warning("checkpoint_failed", table=t.name, version=snapshot.version, error=str(exc))
            return
        t.watch.saw_checkpoint(snapshot.version)
        self.metrics.set_checkpoint_lag(t.name, 0)
        if isinstance(run.checkpoint, CheckpointWritten):
            self.metrics.count_checkpoint(t.name)

    def _in_hand(self, t: _Table, now_ms: int) -> None:
        """A poll that leaves nothing due is a success (rlcd_table_last_success_...)."""
        if self._schedule.state(t.name).due is None:
            self.metrics.record_success(t.name, now_s=now_ms / 1000)

    def _failed(self, t: _Table, exc: BaseException) -> None:
        now_s = self._wall_ms() / 1000
        self.metrics.record_error(t.name, exc, now_s=now_s)
        self._errors_at[t.name] = now_s
        self._error_types[t.name] = type(exc)
        unsupported = isinstance(exc, UnsupportedFeatureError)
        message = str(exc) or type(exc).__name__
        self._schedule, news = self._schedule.failed(
            t.name, message, unsupported=unsupported, now=self._clock(), draw=self._draw()
        )
        if news:
            event = "table_unsupported" if unsupported else "table_failed"
            if not isinstance(exc, RlcdError):
                log.exception(event, table=t.name, error=message)
            else:
                log.error(event, table=t.name, error=message)

    # --- runs -----------------------------------------------------------------------------

    def _start_ready(self) -> None:
        if self._stopping or self._work is None:
            return
        free = int(self._limits.bins.total_tokens) - len(self._running)
        for name in self._schedule.pick(self._clock(), free, exclude=self._vacuuming):
            t = self._tables[name]
            self._schedule = self._schedule.started(name)
            self._running.add(name)
            self._work.start_soon(self._compact, t)

    async def _compact(self, t: _Table) -> None:
        started: dict[str, float] = {}  # a bin's start, not the run's: bins wait their turn

        def bin_started(b: Bin) -> None:
            started[b.bin_id] = self._clock()

        def bin_done(b: Bin) -> None:
            begun = started.pop(b.bin_id, None)
            if begun is not None:  # a bin that failed before it started took no time
                self.metrics.observe_bin(self._clock() - begun)

        try:
            async with self._lease(t) as lease:
                if isinstance(lease, Busy):
                    self._leased(t, lease, "compaction")
                    until = self._clock() + self.settings.daemon.poll_interval_s
                    self._schedule = self._schedule.skipped(t.name, until=until)
                    return
                report = await compact_table(
                    t.store,
                    t.policy.compaction,
                    snapshot=t.watch.snapshot,
                    limiter=self._limits.bins,
                    memory=self._limits.memory,
                    min_file_age_ms=int(t.policy.min_file_age_s * 1000),
                    exclude=t.quarantine.excluded,
                    now_ms=self._wall_ms,
                    on_bin_start=bin_started,
                    on_bin_done=bin_done,
                    orphan_grace_s=None,  # cleaned on its own schedule (``_clean_due``)
                )
        except Exception as exc:
            t.history.append(
                RunRecord(self._wall_ms() / 1000, RunOutcome.FAILED.value, error=str(exc))
            )
            self.metrics.count_run(t.name, RunOutcome.FAILED.value)
            self._failed(t, exc)
        else:
            self._finished(t, report)
        finally:
            self._running.discard(t.name)
            t.active_at = self._clock()
            if t.removed:
                self._tables.pop(t.name, None)
            self._wake.set()
            self._free()

    def _finished(self, t: _Table, report: CompactionReport) -> None:
        # each bin's outcome is logged once, by the commit (``bin_committed``, ``bin_aborted``)
        superseded = sum(1 for f in report.failed if f.kind is FailureKind.SUPERSEDED)
        t.bins_committed += len(report.committed)
        t.bins_aborted += len(report.failed) - superseded
        t.bins_superseded += superseded
        t.last_run = (run_summary(report), *bin_lines(report))
        if report.committed_version is not None:
            t.last_compaction_ms = self._wall_ms()
        quarantined = self._suspect(t, report)
        log.info(
            "compaction_finished",
            table=t.name,
            version=report.committed_version,
            read_version=report.read_version,
            bins_planned=len(report.planned),
            bins_committed=len(report.committed),
            bins_failed=len(report.failed) - superseded,
            bins_superseded=superseded,
            files_removed=report.files_removed,
            files_added=report.files_added,
        )
        # nothing committed and a bin failed for another reason than a lost race: the run
        # failed (its error is the table's last), not a conflict
        bad = next((f for f in report.failed if f.kind not in _LOST_RACE), None)
        if report.superseded:  # another compaction did the rest: no failure, no backoff
            outcome = RunOutcome.SUPERSEDED
        elif report.committed_version is None and report.failed:
            outcome = RunOutcome.FAILED if bad is not None else RunOutcome.CONFLICTED
        else:
            outcome = RunOutcome.COMMITTED
        if outcome is RunOutcome.FAILED and bad is not None:  # a bin's data or store failed
            self._schedule, _ = self._schedule.failed(
                t.name, bad.reason, unsupported=False, now=self._clock(), draw=self._draw()
            )
        else:
            self._schedule = self._schedule.finished(
                t.name, outcome, now=self._clock(), draw=self._draw()
            )
        if quarantined:
            self._schedule = self._schedule.retry(t.name)
        now_s = self._wall_ms() / 1000
        t.history.append(
            RunRecord(
                when=now_s,
                outcome=outcome.value,
                bins=len(report.planned),
                bins_committed=len(report.committed),
                files_in=report.files_removed,
                files_out=report.files_added,
                reconciled=sum(
                    1
                    for r in report.bin_results
                    if isinstance(r, BinCommitted) and r.decision != "committed"
                ),
                error=bad.reason if outcome is RunOutcome.FAILED and bad is not None else None,
            )
        )
        self.metrics.count_run(t.name, outcome.value)
        self.metrics.record_compaction(t.name, report, now_s=now_s)
        if outcome in (RunOutcome.COMMITTED, RunOutcome.SUPERSEDED):
            self.metrics.record_success(t.name, now_s=now_s)

    # --- vacuum ---------------------------------------------------------------------------

    def _vacuum_due(self) -> None:
        """Start the vacuum of each table whose ``vacuum_interval`` passed (each at its first
        poll), unless it is being compacted (then at the loop's next step after the run)."""
        if self._stopping or self._work is None:
            return
        for t in list(self._tables.values()):
            snapshot = t.watch.snapshot  # None until a poll read the table
            if (
                not self._vacuum_owed(t)
                or t.removed
                or snapshot is None
                or t.name in self._running
                or t.name in self._vacuuming
            ):
                continue
            t.vacuum_at = self._clock() + t.policy.vacuum_interval_s
            self._vacuuming.add(t.name)
            self._work.start_soon(self._vacuum, t, snapshot)

    async def _vacuum(self, t: _Table, snapshot: Snapshot) -> None:
        """Vacuum ``t`` once, inside its lease (skipped, and tried again at the next poll,
        when another run holds it), with the policy's ``vacuum_retain`` or else the table's
        retention as ``snapshot`` (its last poll) has it; a retention below an hour is never
        used. One ``vacuum_done`` or ``vacuum_failed`` event; the table's compactions are not
        affected by either."""
        policy = t.policy
        retain = policy.vacuum_retain_s
        try:
            # Passed explicitly: a table whose retention grew since the poll is refused by
            # vacuum_table (below the table's), one that shrank keeps the longer one.
            retain_ms = table_retention_ms(snapshot) if retain is None else int(retain * 1000)
            if retain_ms < MIN_VACUUM_RETAIN_S * 1000:
                self._short_retention(t, retain_ms)
                return
            t.short_retention_warned = False
            async with self._lease(t) as lease:
                if isinstance(lease, Busy):
                    self._leased(t, lease, "vacuum")
                    t.vacuum_at = self._clock() + self.settings.daemon.poll_interval_s
                    return
                report = await vacuum_table(
                    t.store,
                    mode=policy.vacuum_mode,
                    retain_ms=retain_ms,
                    allow_short_retention=retain is not None,  # vacuum_retain overrides
                    now_ms=self._wall_ms(),
                )
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            when = self._wall_ms() / 1000
            t.last_vacuum = VacuumRecord(when, policy.vacuum_mode, error=message)
            log.warning("vacuum_failed", table=t.name, mode=policy.vacuum_mode, error=message)
        else:
            self._vacuumed(t, report)
        finally:
            self._vacuuming.discard(t.name)
            t.active_at = self._clock()
            if t.removed:
                self._tables.pop(t.name, None)
            self._wake.set()
            self._free()

    def _short_retention(self, t: _Table, retain_ms: int) -> None:
        """The table's own retention is below an hour: not vacuumed; warned of once."""
        hours = f"{retain_ms / 3_600_000:g}h"
        message = f"not vacuumed: the table's retention ({hours}) is below the daemon's 1h"
        t.last_vacuum = VacuumRecord(self._wall_ms() / 1000, t.policy.vacuum_mode, error=message)
        if not t.short_retention_warned:
            t.short_retention_warned = True
            log.warning("vacuum_skipped", table=t.name, retention_ms=retain_ms, reason=message)

    def _vacuumed(self, t: _Table, report: VacuumReport) -> None:
        version = report.end_version if report.end_version is not None else report.version
        t.last_vacuum = VacuumRecord(
            self._wall_ms() / 1000,
            report.mode,
            version=version,
            files=report.deleted,
            bytes=report.bytes,
        )
        self.metrics.record_vacuum(
            t.name, files=report.deleted, nbytes=report.bytes, checkpoints=len(report.checkpoints)
        )
        log.info(
            "vacuum_done",
            table=t.name,
            mode=report.mode,
            version=version,
            files=report.deleted,
            bytes=report.bytes,
            retention_ms=report.retention_ms,
        )

    # --- quarantine -----------------------------------------------------------------------

    def _suspect(self, t: _Table, report: CompactionReport) -> bool:
        """Count each source the run could not read; quarantine those at the limit. Returns
        whether one was quarantined now."""
        quarantine, now_s, quarantined = t.quarantine, self._wall_ms() / 1000, False
        for failure in report.failed:
            if failure.source is None:
                continue
            quarantine, now_quarantined = quarantine.failed(
                failure.source, failure.reason, after=t.policy.quarantine_after, now_s=now_s
            )
            if now_quarantined:
                quarantined = True
                path, dv = failure.source
                log.warning(
                    "source_quarantined",
                    table=t.name,
                    file=path,
                    dv=dv,
                    failures=quarantine.suspects[failure.source].failures,
                    error=failure.reason,
                )
        self._set_quarantine(t, quarantine)
        return quarantined

    def _release(self, t: _Table) -> None:
        """Release every quarantined source of ``t`` (and forget its suspects' failures)."""
        released = len(t.quarantine.excluded)
        if released:
            log.info("quarantine_released", table=t.name, files=released, reason="reload")
        self._set_quarantine(t, Quarantine())

    def _expire(self, t: _Table, now_s: float) -> None:
        """Release the sources of ``t`` quarantined ``quarantine_for`` ago (before planning:
        a change replans the table)."""
        quarantine, released = t.quarantine.expire(t.policy.quarantine_for_s, now_s=now_s)
        if released:
            log.info("quarantine_released", table=t.name, files=len(released), reason="expired")
            self._set_quarantine(t, quarantine)

    def _set_quarantine(self, t: _Table, quarantine: Quarantine) -> None:
        """Take ``quarantine``; when what is left out changed, plan the table again."""
        before = t.quarantine.excluded
        t.quarantine = quarantine
        if quarantine.excluded != before:
            t.replan_at_ms = 0
            self.metrics.set_quarantined(t.name, len(quarantine.excluded))
