"""Which table to compact next: thresholds, minimum intervals, benefit, fairness and backoff.
Pure: no IO, no clock, no randomness (``now`` and jitter ``draw``\\ s are parameters).

Theory of operation (rlc-design.md §7, Run). The supervisor feeds the schedule what it saw and
did; the schedule answers which tables to start. Per table it keeps a frozen
:class:`TableState`; every call returns a new :class:`Schedule`.

- **Due**: after each poll the table's :class:`Backlog` (what a plan would do now) is observed
  with its :class:`Trigger`. The table is due when some partition holds at least
  ``min_small_files`` files to compact, or those files hold ``min_small_bytes`` bytes together,
  or a bin purges deletion vectors (:data:`DUE_REASONS`).
- **Ready**: due, not running, its last compaction at least ``min_interval_s`` ago, and its
  backoff over.
- **Order**: tables ready for longer than ``max_wait_s`` come first, longest waiting first
  (fairness: no table starves behind better ones); then by benefit, files removed per byte
  rewritten, highest first; ties by waiting time, then URI (deterministic).
- **Backoff**: a failed run or poll, or a run whose bins lost to conflicts, waits
  ``min(cap, base * 2**(failures - 1))`` scaled by ``0.5 + draw / 2`` (equal jitter: at least
  half the ceiling, so a hot conflict is not retried at once, yet spread). Success resets it.
  A table rlcd cannot handle (an unsupported feature) waits the cap: its log still moves, so
  it is looked at again, but its error is reported once, not every time (:meth:`failed`).
- **Quarantine** (:class:`Quarantine`, one per table): a source that failed to read (corrupt,
  truncated, missing, its DV bad) is counted by its ``(path, DV id)`` key; its bin is retried
  with the table's next runs (backing off while nothing commits); after ``quarantine_after``
  failures it is quarantined: the planner leaves it out, so its partition's healthy files are
  compacted again, without waiting out the backoff its failures caused
  (:meth:`Schedule.retry`). It stays until released, or until it leaves the table (removed
  by DML or another compaction: then its key is no longer live). Released ``quarantine_for``
  after it was quarantined (:meth:`Quarantine.expire`), it keeps its count: its next failure
  quarantines it again at once, so a file that stays bad costs one failed bin per period.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

from rlcd.compaction.plan import Bin

__all__ = (
    "Backlog",
    "Trigger",
    "Backoff",
    "TableState",
    "Schedule",
    "RunOutcome",
    "DUE_REASONS",
    "backoff_s",
    "SourceKey",
    "Suspect",
    "Quarantine",
)
__pure__ = True

DUE_REASONS = ("small_files", "small_bytes", "dv_purge")
"""Why a table is due, in the order they are checked."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """What compacting a table now would do, summarised from its planned bins.

    Invariants: counts >= 0; ``max_partition_files <= files``.
    """

    bins: int = 0
    files: int = 0
    bytes: int = 0
    max_partition_files: int = 0
    purges_dvs: bool = False

    def __post_init__(self) -> None:
        if min(self.bins, self.files, self.bytes, self.max_partition_files) < 0:
            raise ValueError(f"negative backlog {self}")
        if self.max_partition_files > self.files:
            raise ValueError(f"a partition holds more files than the backlog: {self}")

    @classmethod
    def of(cls, bins: Sequence[Bin]) -> Backlog:
        """The backlog of a plan."""
        per_partition: dict[tuple[tuple[str, str | None], ...], int] = {}
        for b in bins:
            key = tuple(sorted(b.partition_values.items(), key=lambda item: item[0]))
            per_partition[key] = per_partition.get(key, 0) + b.num_sources
        return cls(
            bins=len(bins),
            files=sum(b.num_sources for b in bins),
            bytes=sum(b.estimated_bytes for b in bins),
            max_partition_files=max(per_partition.values(), default=0),
            purges_dvs=any(b.purges_dvs for b in bins),
        )

    @property
    def files_removed(self) -> int:
        """Files fewer after the compaction: each bin turns its sources into one file (a bin
        whose rows are all deleted into none, which this does not count)."""
        return self.files - self.bins

    @property
    def benefit(self) -> float:
        """Files removed per byte rewritten (a DV purge that removes no file still gains)."""
        gain = self.files_removed if self.files_removed else (1 if self.purges_dvs else 0)
        return gain / max(self.bytes, 1)


@dataclass(frozen=True, slots=True)
class Trigger:
    """When a table is due, and how often it may be compacted (from its policy)."""

    min_small_files: int = 10
    min_small_bytes: int = 256 * 1024 * 1024
    min_interval_s: float = 60.0

    def reason(self, backlog: Backlog) -> str | None:
        """Why ``backlog`` makes the table due (one of :data:`DUE_REASONS`), or None."""
        if backlog.bins == 0:
            return None
        if backlog.max_partition_files >= self.min_small_files:
            return "small_files"
        if backlog.bytes >= self.min_small_bytes:
            return "small_bytes"
        if backlog.purges_dvs:
            return "dv_purge"
        return None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits after failures. Invariant: ``0 < base_s <= cap_s``."""

    base_s: float = 5.0
    cap_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.base_s <= self.cap_s:
            raise ValueError(f"backoff needs 0 < base_s <= cap_s, got {self}")


def backoff_s(backoff: Backoff, failures: int, draw: float) -> float:
    """The wait after the ``failures``-th failure in a row (>= 1), given ``draw`` in [0, 1)."""
    if failures < 1 or not 0 <= draw < 1:
        raise ValueError(f"backoff_s needs failures >= 1 and 0 <= draw < 1, got {failures}, {draw}")
    ceiling = backoff.cap_s if failures > 64 else math.ldexp(backoff.base_s, failures - 1)
    return min(backoff.cap_s, ceiling) * (0.5 + draw / 2)


class RunOutcome(Enum):
    """How a compaction run of a table ended, as the schedule cares."""

    COMMITTED = "committed"  # something committed (or there was nothing left to do)
    SUPERSEDED = "superseded"  # what did not commit lost only to another compaction: done
    CONFLICTED = "conflicted"  # nothing committed: every bin lost to a concurrent writer
    FAILED = "failed"  # the run raised, or its bins failed on data or storage (Schedule.failed)


@dataclass(frozen=True, slots=True)
class TableState:
    """The schedule's view of one table."""

    trigger: Trigger = field(default_factory=Trigger)
    backlog: Backlog = field(default_factory=Backlog)
    version: int | None = None
    due_since: float | None = None
    running: bool = False
    last_run: float | None = None
    failures: int = 0
    retry_at: float = -math.inf
    last_error: str | None = None

    @property
    def due(self) -> str | None:
        return self.trigger.reason(self.backlog)

    def ready(self, now: float) -> bool:
        if self.running or self.due is None or now < self.retry_at:
            return False
        return self.last_run is None or now - self.last_run >= self.trigger.min_interval_s

    def next_ready(self) -> float | None:
        """The earliest time the table could be ready, given what is known (None: not due)."""
        if self.running or self.due is None:
            return None
        after = -math.inf if self.last_run is None else self.last_run + self.trigger.min_interval_s
        return max(after, self.retry_at)


@dataclass(frozen=True, slots=True)
class Schedule:
    """Every watched table's :class:`TableState`, by URI; immutable (calls return new ones)."""

    tables: Mapping[str, TableState] = field(default_factory=lambda: MappingProxyType({}))
    backoff: Backoff = field(default_factory=Backoff)
    max_wait_s: float = 600.0

    def _with(self, table: str, state: TableState) -> Schedule:
        return replace(self, tables=MappingProxyType({**self.tables, table: state}))

    def state(self, table: str) -> TableState:
        return self.tables.get(table, TableState())

    def retain(self, tables: Iterable[str]) -> Schedule:
        """Only ``tables`` (a reload removed the others); new ones start afresh when observed."""
        keep = set(tables)
        return replace(
            self, tables=MappingProxyType({t: s for t, s in self.tables.items() if t in keep})
        )

    def observe(
        self, table: str, backlog: Backlog, trigger: Trigger, *, version: int, now: float
    ) -> Schedule:
        """A poll of ``table`` at ``version`` gave ``backlog``. A successful poll clears a poll
        failure's backoff, not a run's (that one clears when a run succeeds)."""
        old = self.state(table)
        due = trigger.reason(backlog) is not None
        since = (old.due_since if old.due_since is not None else now) if due else None
        return self._with(
            table,
            replace(old, trigger=trigger, backlog=backlog, version=version, due_since=since),
        )

    def started(self, table: str) -> Schedule:
        return self._with(table, replace(self.state(table), running=True))

    def finished(self, table: str, outcome: RunOutcome, *, now: float, draw: float) -> Schedule:
        """A run ended (a FAILED one is reported with :meth:`failed` instead)."""
        if outcome is RunOutcome.FAILED:
            raise ValueError("report a failed run with Schedule.failed")
        old = replace(self.state(table), running=False, last_run=now)
        if outcome in (RunOutcome.COMMITTED, RunOutcome.SUPERSEDED):  # no failure: no backoff
            return self._with(
                table,
                replace(
                    old,
                    failures=0,
                    retry_at=-math.inf,
                    last_error=None,
                    due_since=None,
                    backlog=Backlog(),
                ),
            )
        failures = old.failures + 1
        delay = backoff_s(self.backoff, failures, draw)
        return self._with(table, replace(old, failures=failures, retry_at=now + delay))

    def skipped(self, table: str, *, until: float) -> Schedule:
        """A run found ``table`` leased by another run of rlcd: no run, no failure, and no
        new attempt (nor poll) before ``until``; what it saw stays due."""
        return self._with(table, replace(self.state(table), running=False, retry_at=until))

    def retry(self, table: str) -> Schedule:
        """What made ``table``'s runs fail is left out now (a source was quarantined): its
        backoff ends, so the rest of its backlog is compacted without waiting."""
        return self._with(table, replace(self.state(table), failures=0, retry_at=-math.inf))

    def failed(
        self, table: str, error: str, *, unsupported: bool, now: float, draw: float
    ) -> tuple[Schedule, bool]:
        """A poll or run of ``table`` raised ``error``. Returns the new schedule and whether
        the error is news (to be reported): not when the table already failed this way."""
        old = self.state(table)
        failures = old.failures + 1
        delay = self.backoff.cap_s if unsupported else backoff_s(self.backoff, failures, draw)
        state = replace(
            old, running=False, failures=failures, retry_at=now + delay, last_error=error
        )
        return self._with(table, state), old.last_error != error

    def pick(self, now: float, limit: int, *, exclude: Collection[str] = ()) -> list[str]:
        """Up to ``limit`` ready tables, in the order to start them (see the module header),
        leaving out ``exclude`` (tables busy with other work: a vacuum)."""
        ready = [(t, s) for t, s in self.tables.items() if s.ready(now) and t not in exclude]

        def waited(state: TableState) -> float:
            return now - state.due_since if state.due_since is not None else 0.0

        starving = sorted(
            (item for item in ready if waited(item[1]) > self.max_wait_s),
            key=lambda item: (-waited(item[1]), item[0]),
        )
        rest = sorted(
            (item for item in ready if waited(item[1]) <= self.max_wait_s),
            key=lambda item: (-item[1].backlog.benefit, -waited(item[1]), item[0]),
        )
        return [t for t, _ in (starving + rest)[: max(limit, 0)]]

    def next_ready(self) -> float | None:
        """The earliest time some table could become ready without a new poll."""
        times = [t for s in self.tables.values() if (t := s.next_ready()) is not None]
        return min(times, default=None)


SourceKey = tuple[str, str | None]
"""A source's log-replay key ``(path, DV unique id)``: a new DV makes it another source."""


@dataclass(frozen=True, slots=True)
class Suspect:
    """A source that failed to read ``failures`` times (>= 1), last at ``last_failed_s`` (Unix
    seconds) with ``error``; quarantined since ``quarantined_s`` (None: not quarantined) once
    the failures reached the table's limit."""

    failures: int
    error: str
    last_failed_s: float
    quarantined_s: float | None = None

    @property
    def quarantined(self) -> bool:
        return self.quarantined_s is not None

    def release_at(self, quarantine_for_s: float | None) -> float | None:
        """When its quarantine ends by itself (None: not quarantined, or only a reload ends it)."""
        if self.quarantined_s is None or quarantine_for_s is None:
            return None
        return self.quarantined_s + quarantine_for_s


@dataclass(frozen=True, slots=True)
class Quarantine:
    """One table's suspect sources, by key; immutable (calls return new ones)."""

    suspects: Mapping[SourceKey, Suspect] = field(default_factory=lambda: MappingProxyType({}))

    def failed(
        self, key: SourceKey, error: str, *, after: int, now_s: float
    ) -> tuple[Quarantine, bool]:
        """``key`` failed to read once more; it is quarantined at its ``after``-th failure.
        Returns the new quarantine and whether this failure quarantined it (to report once)."""
        if after < 1:
            raise ValueError(f"quarantine_after must be >= 1, got {after}")
        old = self.suspects.get(key)
        failures = 1 if old is None else old.failures + 1
        since = old.quarantined_s if old is not None else None
        if since is None and failures >= after:
            since = now_s
        suspect = Suspect(failures, error, now_s, quarantined_s=since)
        new = Quarantine(MappingProxyType({**self.suspects, key: suspect}))
        return new, suspect.quarantined and (old is None or not old.quarantined)

    def expire(
        self, quarantine_for_s: float | None, *, now_s: float
    ) -> tuple[Quarantine, frozenset[SourceKey]]:
        """Release the sources quarantined ``quarantine_for_s`` ago or longer (None: none, a
        reload releases them). A released source keeps its failures, so one more failure
        quarantines it again. Returns the new quarantine and the keys released."""
        if quarantine_for_s is not None and not quarantine_for_s > 0:
            raise ValueError(f"quarantine_for must be > 0 or None, got {quarantine_for_s}")
        released = frozenset(
            k
            for k, s in self.suspects.items()
            if (at := s.release_at(quarantine_for_s)) is not None and at <= now_s
        )
        if not released:
            return self, released
        suspects = {
            k: replace(s, quarantined_s=None) if k in released else s
            for k, s in self.suspects.items()
        }
        return Quarantine(MappingProxyType(suspects)), released

    @property
    def excluded(self) -> frozenset[SourceKey]:
        """The quarantined keys: what the planner leaves out."""
        return frozenset(k for k, s in self.suspects.items() if s.quarantined)

    def retain(self, live: Collection[SourceKey]) -> Quarantine:
        """Only the keys still ``live`` in the table (the others were removed or rewritten)."""
        if all(k in live for k in self.suspects):
            return self
        return Quarantine(MappingProxyType({k: s for k, s in self.suspects.items() if k in live}))
