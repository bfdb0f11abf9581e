"""``rlcd vacuum``: delete the data and DV files no version inside the retention window reads.

The rules are :mod:`rlcd.operations._vacuum_rules`, which does no IO; this module does it: load the
snapshot (with its tombstones), refuse a table rlcd cannot write (the protocol gate also
covers ``vacuumProtocolCheck``, which asks exactly that of a vacuum), list the table in full
mode, or in lite mode read every commit the log still holds for its change data files (as
Spark's lite mode does: a checkpoint holds no ``cdc`` actions), then record the run as Spark
does: a ``VACUUM START`` commit, the deletes in batches of at most
:data:`~rlcd.storage.base.DELETE_BATCH` keys, a ``VACUUM END`` commit (status ``COMPLETED``, or
``FAILED`` when a delete failed, before the error is raised).

A failure midway leaves nothing inconsistent: every file deleted was unreferenced by every
version inside the window, so a file is either still there or read by nobody. A run with
nothing to delete writes no commit (delta-rs does the same), so a periodic vacuum does not
grow the log.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

import anyio
import anyio.to_thread
import structlog

from rlcd._tasks import gather
from rlcd.delta.actions import Action, AddCdcFile, CommitInfo
from rlcd.delta.checkpoint_writer import CheckpointWritten
from rlcd.delta.load import list_log, load_snapshot, read_commit, table_config
from rlcd.delta.log_path import LogKind
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import Snapshot, replay
from rlcd.delta.transaction import Winner, run_transaction
from rlcd.delta.write import make_commit_info
from rlcd.errors import (
    ConfigError,
    CorruptLogError,
    NotFoundError,
    RlcdError,
    StorageError,
)
from rlcd.operations._vacuum_rules import (
    DEFAULT_RETENTION,
    RETENTION_PROPERTY,
    Candidate,
    Outside,
    VacuumRules,
    parse_interval,
    parse_retain,
)
from rlcd.storage.base import DELETE_BATCH, ObjectStore

__all__ = (
    "Candidate",
    "Outside",
    "VacuumMode",
    "VacuumReport",
    "parse_retain",
    "reclaimable_bytes",
    "table_retention_ms",
    "vacuum_table",
)

VacuumMode = Literal["lite", "full"]
T = TypeVar("T")
R = TypeVar("R")

_ISOLATION: Final = "SnapshotIsolation"
"""What Spark records for a commit that changes no data (its VACUUM commits)."""

_CONCURRENCY: Final = 16
"""Requests in flight at once when lite mode reads the commits and checks its candidates."""

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class VacuumReport:
    """What a vacuum of ``table`` planned from ``version`` did, or with ``dry_run`` would do.

    ``files`` are the keys deleted (or to delete); ``deleted`` counts those the store confirmed
    (all of them unless a delete failed). ``outside`` are paths of expired tombstones outside
    the table, never deleted. ``start_version``/``end_version`` are the VACUUM START and END
    commits (None in a dry run or when there was nothing to delete); ``checkpoints`` the versions
    of the checkpoints written after them (one landed on a multiple of the interval).
    ``warnings`` say why the run deserves a second look (a retention below the table's).
    """

    table: str
    version: int
    mode: VacuumMode
    dry_run: bool
    retention_ms: int
    table_retention_ms: int
    files: tuple[Candidate, ...]
    outside: tuple[Outside, ...]
    deleted: int
    start_version: int | None
    end_version: int | None
    warnings: tuple[str, ...] = ()
    checkpoints: tuple[int, ...] = ()

    @property
    def bytes(self) -> int:
        """Bytes of the files (their sizes on storage)."""
        return sum(f.size for f in self.files)


def table_retention_ms(snapshot: Snapshot) -> int:
    """The table's ``delta.deletedFileRetentionDuration`` (default one week), in ms.

    Raises:
        CorruptLogError: the property is not an interval of fixed-length units.
    """
    text = table_config(snapshot).properties.get(RETENTION_PROPERTY, DEFAULT_RETENTION)
    try:
        return parse_interval(text)
    except ValueError as exc:
        raise CorruptLogError(
            f"table property {RETENTION_PROPERTY}: {exc}",
            table=snapshot.table,
            version=snapshot.version,
        ) from exc


def reclaimable_bytes(snapshot: Snapshot, *, now_ms: int) -> int:
    """Bytes a vacuum with the table's retention would free now, from the log alone
    (:meth:`~rlcd.operations._vacuum_rules.VacuumRules.reclaimable_bytes`): no IO and Arrow
    compute over the snapshot's columns (no object per file), so the daemon can report it
    after every poll.

    Raises:
        CorruptLogError: the table's retention property is not an interval.
    """
    return _rules(snapshot, now_ms, table_retention_ms(snapshot)).reclaimable_bytes()


def _rules(
    snapshot: Snapshot, now_ms: int, retention_ms: int, cdc_files: Sequence[str] = ()
) -> VacuumRules:
    """Vacuum's rules for ``snapshot`` (its files' and tombstones' columns) and ``cdc_files``."""
    return VacuumRules.of(
        snapshot.table,
        partition_columns=snapshot.metadata.partition_columns,
        files=snapshot.adds,
        tombstones=snapshot.tombstone_rows,
        cdc_files=cdc_files,
        now_ms=now_ms,
        retention_ms=retention_ms,
    )


async def vacuum_table(
    store: ObjectStore,
    *,
    mode: VacuumMode = "lite",
    retain_ms: int | None = None,
    allow_short_retention: bool = False,
    dry_run: bool = False,
    now_ms: int | None = None,
) -> VacuumReport:
    """Delete the files no version inside the retention window reads (module docstring).

    Args:
        mode: ``lite`` reads only the log (expired tombstones); ``full`` also lists the table
            and deletes unreferenced files older than the retention.
        retain_ms: the retention; default the table's ``delta.deletedFileRetentionDuration``.
        allow_short_retention: allow ``retain_ms`` below the table's retention (logged as a
            warning): time travel to older versions and writers in flight may then break.
        now_ms: the clock, for tests.

    Raises:
        ConfigError: ``retain_ms`` is below the table's retention and not allowed, or negative.
        UnsupportedFeatureError: rlcd cannot write the table.
        ConcurrentModificationError: the VACUUM START commit lost every attempt.
        StorageError: a listing or a delete failed (after VACUUM END recorded ``FAILED``).
    """
    snapshot = await load_snapshot(store)
    table_config(snapshot).ensure_writable()
    table_ms = table_retention_ms(snapshot)
    retention = table_ms if retain_ms is None else retain_ms
    warnings = _check_retention(store.root, retention, table_ms, allow_short_retention)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    cdc_files = await _cdc_files(store, snapshot.version) if mode == "lite" else ()
    rules = _rules(snapshot, now, retention, cdc_files)
    # the rules' passes over the files and tombstones run off the event loop, which a daemon
    # shares: the valid keys for full mode's listing, lite mode's candidates, what is outside
    outside = await anyio.to_thread.run_sync(rules.outside)
    if mode == "full":
        await anyio.to_thread.run_sync(lambda: rules.valid)
        files = [
            Candidate(meta.key, meta.size)
            async for meta in store.list("")
            if rules.listed(meta.key, meta.last_modified_ms)
        ]
    else:
        files = await _present(store, rules, await anyio.to_thread.run_sync(rules.lite_candidates))
    report = VacuumReport(
        table=store.root,
        version=snapshot.version,
        mode=mode,
        dry_run=dry_run,
        retention_ms=retention,
        table_retention_ms=table_ms,
        files=tuple(files),
        outside=tuple(outside),
        deleted=0,
        start_version=None,
        end_version=None,
        warnings=warnings,
    )
    for elsewhere in report.outside:
        _log.warning("vacuum_path_outside_table", table=store.root, path=elsewhere.path)
    if not dry_run and files:
        report = await _run(store, snapshot, report, retain_ms, checked=not allow_short_retention)
    _log.info(
        "vacuum_finished",
        table=store.root,
        mode=mode,
        dry_run=dry_run,
        files=len(report.files),
        deleted=report.deleted,
        bytes=report.bytes,
    )
    return report


async def _each(items: Sequence[T], call: Callable[[T], Awaitable[R]]) -> list[R]:
    """``call`` of each item, in order, at most :data:`_CONCURRENCY` at once (and at most
    :data:`~rlcd.storage.base.DELETE_BATCH` tasks alive)."""
    limiter = anyio.CapacityLimiter(_CONCURRENCY)

    async def limited(item: T) -> R:
        async with limiter:
            return await call(item)

    found: list[R] = []
    for first in range(0, len(items), DELETE_BATCH):
        found.extend(await gather(*(limited(i) for i in items[first : first + DELETE_BATCH])))
    return found


async def _cdc_files(store: ObjectStore, version: int) -> list[str]:
    """The change data files named by the commits the log still holds, up to ``version``.

    Spark's lite mode reads these commits, not only those after the checkpoint; their files
    are judged by age like any other (:meth:`VacuumRules.lite_candidates`).
    """
    versions = [
        p.version
        for p in await list_log(store)
        if p.kind is LogKind.COMMIT and p.version <= version
    ]

    async def named(version: int) -> list[str]:
        actions = await read_commit(store, version, table=store.root)
        return [a.path for a in actions if isinstance(a, AddCdcFile)]

    return [path for paths in await _each(versions, named) for path in paths]


async def _present(
    store: ObjectStore, rules: VacuumRules, candidates: Sequence[str]
) -> list[Candidate]:
    """The lite candidates still on storage, with their sizes, by a HEAD each (at most
    :data:`_CONCURRENCY` at once): a rerun does not report, nor record, files an earlier
    run deleted, and a file written after the cutoff stays, as full mode's listing would
    judge it. Tombstones stay in the log until a checkpoint drops the expired ones, so until
    then each run heads them again."""

    async def head(key: str) -> Candidate | None:
        try:
            meta = await store.head(key)
        except NotFoundError:
            return None
        return Candidate(meta.key, meta.size) if rules.old(meta.last_modified_ms) else None

    return [c for c in await _each(candidates, head) if c is not None]


def _check_retention(table: str, retention: int, table_ms: int, allowed: bool) -> tuple[str, ...]:
    """The warnings a retention earns, or the refusal of one below the table's."""
    if retention < 0:
        raise ConfigError("the vacuum retention cannot be negative")
    if retention >= table_ms:
        return ()
    hours = f"{retention / 3_600_000:g}h below the table's {table_ms / 3_600_000:g}h"
    if not allowed:
        raise ConfigError(
            f"{table}: a retention of {hours} ({RETENTION_PROPERTY}) breaks time travel to "
            "older versions and can delete the files of a writer in flight; pass "
            "--force-short-retention if no other writer or reader needs them"
        )
    warning = f"retention {hours}: older versions can no longer be read"
    _log.warning("vacuum_short_retention", table=table, retention_ms=retention)
    return (warning,)


async def _run(
    store: ObjectStore,
    snapshot: Snapshot,
    report: VacuumReport,
    retain_ms: int | None,
    *,
    checked: bool,
) -> VacuumReport:
    """Record VACUUM START, delete in batches, record VACUUM END; the finished report.

    ``checked``: whether the retention check was on (Spark's ``retentionCheckEnabled``).
    """
    parameters = {
        "retentionCheckEnabled": "true" if checked else "false",
        "specifiedRetentionMillis": str(retain_ms) if retain_ms is not None else None,
        "defaultRetentionMillis": str(report.table_retention_ms),
        "vacuumType": report.mode.upper(),
    }
    start_metrics = {"numFilesToDelete": len(report.files), "sizeOfDataToDelete": report.bytes}
    start, after_start, at_start = await _record(
        store,
        snapshot,
        "VACUUM START",
        {k: v for k, v in parameters.items() if v is not None},
        start_metrics,
    )
    deleted = 0
    keys = [f.key for f in report.files]
    try:
        for first in range(0, len(keys), DELETE_BATCH):
            batch = keys[first : first + DELETE_BATCH]
            await store.delete_many(batch)
            deleted += len(batch)
    except StorageError:
        try:
            await _record(
                store,
                after_start,
                "VACUUM END",
                {"status": "FAILED"},
                {"numDeletedFiles": deleted, "numVacuumedDirectories": 0},
            )
        except RlcdError as exc:  # the delete's error is the one to raise
            _log.warning("vacuum_end_not_recorded", table=store.root, error=str(exc))
        raise
    end, _, at_end = await _record(
        store,
        after_start,
        "VACUUM END",
        {"status": "COMPLETED"},
        {"numDeletedFiles": deleted, "numVacuumedDirectories": 0},
    )
    checkpoints = tuple(c.version for c in (at_start, at_end) if c is not None)
    return dataclasses.replace(
        report, deleted=deleted, start_version=start, end_version=end, checkpoints=checkpoints
    )


async def _record(
    store: ObjectStore,
    snapshot: Snapshot,
    operation: str,
    parameters: Mapping[str, str],
    metrics: Mapping[str, int],
) -> tuple[int, Snapshot, CheckpointWritten | None]:
    """Commit a commitInfo-only commit of ``operation``; its version, the snapshot after it and
    the checkpoint written after it.

    Any winner is fine (the commit changes nothing), so a lost race is simply retried on top.
    """

    async def build(
        _state: Sequence[Action], current: Snapshot, txn_id: str
    ) -> tuple[Sequence[Action], Sequence[Action]]:
        info = make_commit_info(
            operation=operation,
            parameters=parameters,
            read_version=current.version,
            previous_ict=current.in_commit_timestamp,
            isolation_level=_ISOLATION,
            is_blind_append=True,
            metrics=metrics,
            txn_id=txn_id,
            now_ms=int(time.time() * 1000),
            in_commit_timestamps=table_config(current).in_commit_timestamps,
        )
        actions: list[CommitInfo] = [info]
        return actions, actions

    async def rebase(
        state: Sequence[Action], _current: Snapshot, _winners: Sequence[Winner]
    ) -> Sequence[Action] | Abort:
        return state

    nothing: Sequence[Action] = ()
    result = await run_transaction(
        store, snapshot, nothing, build=build, rebase=rebase, txn_id=str(uuid.uuid4())
    )
    version = result.version(f"{operation} did not commit")
    after = replay(store.root, [(version, result.state)], base=result.snapshot)
    return version, after, result.checkpoint
