"""One compaction run over one table: load, gate, plan, rewrite the bins, commit.

Bins are rewritten with bounded concurrency; a bin whose source is corrupt or missing fails on
its own (its output was aborted, nothing is left behind) and the other bins still commit. The
result is a :class:`CompactionReport`, values only: the CLI prints it, the daemon turns it into
metrics and logs.
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import anyio
import structlog

from rlcd._tasks import gather
from rlcd.compaction._copy import FooterCache
from rlcd.compaction.cleanup import CleanupReport, clean_table
from rlcd.compaction.commit import (
    BinCommitted,
    BinResult,
    CommitOutcome,
    commit_bins,
    discard_outputs,
)
from rlcd.compaction.plan import Bin, plan_bins
from rlcd.compaction.policy import CompactionPolicy, effective_policy
from rlcd.compaction.rewrite import (
    CopySummary,
    PartitionColumn,
    RewriteSettings,
    RewrittenBin,
    handoff_bytes,
    layouts_of,
    may_copy,
    plan_bin_copies,
    rewrite_bin,
)
from rlcd.compaction.source import ReadOptions
from rlcd.delta.actions import AddFile
from rlcd.delta.checkpoint_writer import CheckpointWritten
from rlcd.delta.coordination import external_commit_temp, refuse_external_commits
from rlcd.delta.load import load_snapshot, read_commits_after, table_config
from rlcd.delta.protocol import TableConfig
from rlcd.delta.replay import Snapshot
from rlcd.delta.schema import (
    ColumnMappingMode,
    column_mapping_mode,
    parse_schema,
    physical_partition_columns,
    to_arrow_schema,
)
from rlcd.delta.stats_spec import stats_spec
from rlcd.errors import (
    ConcurrentModificationError,
    CorruptDataError,
    CorruptLogError,
    DeletionVectorError,
    RlcdError,
    StorageError,
    TableError,
    TransientStorageError,
)
from rlcd.reconcile.classify import SOURCE_COMPACTED
from rlcd.storage.base import ObjectStore

__all__ = (
    "CompactionReport",
    "BinFailure",
    "FailureKind",
    "compact_table",
    "plan_table",
    "rewrite_settings",
)

log = structlog.get_logger(__name__)


class FailureKind(enum.Enum):
    """Why a bin did not commit, as the CLI's exit code needs it."""

    STORAGE = "storage"
    """The store failed: refused a request, or kept failing through the retries."""
    CONFLICT = "conflict"
    """Another writer's commit touched the bin's files, or the commit races were lost."""
    SUPERSEDED = "superseded"
    """Another compaction removed the bin's sources first (abort reason ``source_compacted``):
    it did this bin's work, so nothing is wrong and nothing is left to do."""
    DATA = "data"
    """A source is corrupt, missing or unusable (names the file)."""
    INTERNAL = "internal"
    """A bug in rlcd."""

    @classmethod
    def of(cls, exc: Exception) -> FailureKind:
        """The kind of a rewrite's failure."""
        if isinstance(exc, ConcurrentModificationError):
            return cls.CONFLICT
        if isinstance(exc, TableError):
            return cls.DATA
        if isinstance(exc, StorageError):
            return cls.STORAGE
        return cls.INTERNAL


@dataclass(frozen=True, slots=True)
class BinFailure:
    """A bin that did not commit, why (for people) and its kind (for exit codes); the
    report's ``bin_results`` hold the commit's reason codes (for metrics)."""

    bin: Bin
    reason: str
    kind: FailureKind
    source: tuple[str, str | None] | None = None
    """The ``(path, DV id)`` key of the source that could not be read (corrupt, truncated,
    missing, or its DV bad), when the error names one of the bin's sources: what a daemon
    counts towards quarantining it."""

    @classmethod
    def of(cls, b: Bin, exc: RlcdError) -> BinFailure:
        """The failure of ``b`` that raised ``exc``."""
        source = None
        if isinstance(exc, CorruptDataError | DeletionVectorError):
            source = next((s.key for s in b.sources if s.path == exc.path), None)
        return cls(b, str(exc), FailureKind.of(exc), source)


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one run planned and did. ``committed_version`` is None when nothing committed;
    ``cleanup`` is what the run removed of earlier runs' leftovers (None: not asked to)."""

    table: str
    read_version: int
    policy: CompactionPolicy
    planned: tuple[Bin, ...]
    dry_run: bool = False
    committed_version: int | None = None
    committed: tuple[RewrittenBin, ...] = ()
    failed: tuple[BinFailure, ...] = field(default=())
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)
    """The snapshot the run planned from (``read_version``)."""
    cleanup: CleanupReport | None = None
    bin_results: tuple[BinResult, ...] = ()  # each rewritten bin's commit decision
    commit_attempts: int = 0
    """Commit puts tried (put-if-absent), the losing ones included."""
    copies: tuple[CopySummary | None, ...] = ()
    """A dry run's copy plan of each planned bin (None: it copies nothing, or its plan was
    not read)."""
    copy_plans_read: int = 0
    """A dry run's bins that may copy a row group whose copy plan was read (the first ones)."""
    copy_plans_unread: int = 0
    """A dry run's bins that may copy a row group whose copy plan was not read (the budget)."""
    layouts_unread: int = 0
    """A dry run's bins that may copy a row group whose sources' layouts were not read (the
    budget): a run may pack their files otherwise (:func:`layouts_of`)."""
    checkpoint: CheckpointWritten | None = None
    """The checkpoint written after the commit (its version a multiple of the interval)."""

    @property
    def superseded(self) -> bool:
        """Some bins did not commit, and each lost only to another compaction of its files:
        that one did the work, so the run failed at nothing."""
        return bool(self.failed) and all(f.kind is FailureKind.SUPERSEDED for f in self.failed)

    @property
    def committed_results(self) -> tuple[BinCommitted, ...]:
        """The committed bins' results, in commit order."""
        return tuple(r for r in self.bin_results if isinstance(r, BinCommitted))

    @property
    def files_removed(self) -> int:
        """Source files the commit removed: a source a winner removed first is not."""
        return sum(len(r.removed) for r in self.committed_results)

    @property
    def files_added(self) -> int:
        return sum(r.files_added for r in self.committed_results)

    @property
    def bytes_removed(self) -> int:
        return sum(s.size for r in self.committed_results for s in r.removed)

    @property
    def bytes_added(self) -> int:
        return sum(r.bytes_added for r in self.committed_results)

    @property
    def untagged(self) -> int:
        """Committed bins whose composition the capture guard could not prove."""
        return sum(1 for b in self.committed if b.path is not None and b.offsets is None)


def rewrite_settings(
    snapshot: Snapshot, config: TableConfig, policy: CompactionPolicy, *, count_rows: bool = True
) -> RewriteSettings:
    """How to read and write this table's files, derived from its schema and properties."""
    metadata = snapshot.metadata
    if not metadata.schema_string:
        raise CorruptLogError(
            "metaData has no schemaString", table=snapshot.table, version=snapshot.version
        )
    try:
        schema = parse_schema(metadata.schema_string)
        mode = column_mapping_mode(metadata.configuration)
        partitions = tuple(metadata.partition_columns)
        target = to_arrow_schema(schema, mode=mode, partition_columns=partitions)
        spec = stats_spec(
            schema, mode=mode, partition_columns=partitions, configuration=metadata.configuration
        )
        physical_partitions = physical_partition_columns(schema, partitions, mode)
        every = to_arrow_schema(schema, mode=mode)
        partition_fields = tuple(
            PartitionColumn(every.field(physical), schema.field(logical).type)
            for logical, physical in zip(partitions, physical_partitions, strict=True)
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(
            f"cannot use the table schema: {exc}", table=snapshot.table, version=snapshot.version
        ) from exc
    return RewriteSettings(
        table=snapshot.table,
        version=snapshot.version,
        read=ReadOptions(target=target, by_field_id=mode is ColumnMappingMode.ID),
        stats=spec,
        partition_columns=physical_partitions,
        partition_fields=partition_fields,
        codec=policy.codec,
        row_group_rows=policy.row_group_rows,
        encodings=policy.encodings,
        rewrite=policy.rewrite,
        min_copy_row_group=policy.min_copy_row_group,
        recompress=policy.recompress,
        tight_bounds=True if config.deletion_vectors_supported else None,
        count_rows=count_rows,
        target_file_size=policy.target_file_size,
    )


def _concurrency(bins: int) -> int:
    """How many of ``bins`` bins to rewrite at once by default (:func:`compact_table`)."""
    cores = _cores()
    return bins if cores + 1 < bins <= 2 * cores else cores + 1


def _cores() -> int:
    """The CPUs this process may run on (its affinity, where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


async def compact_table(
    store: ObjectStore,
    policy: CompactionPolicy,
    *,
    dry_run: bool = False,
    count_rows: bool = True,
    bin_concurrency: int | None = None,
    predicate: tuple[str, ...] = (),
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    on_plan: Callable[[Sequence[Bin]], None] | None = None,
    on_bin_start: Callable[[Bin], None] | None = None,
    on_bin_done: Callable[[Bin], None] | None = None,
    snapshot: Snapshot | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    memory: anyio.CapacityLimiter | None = None,
    min_file_age_ms: int = 0,
    exclude: Collection[tuple[str, str | None]] = frozenset(),
    orphan_grace_s: float | None = None,
    copy_plans: int | None = None,
) -> CompactionReport:
    """Compact one table once.

    Up to ``bin_concurrency`` bins are rewritten at once (default: one more than the cores this
    process may use, so a bin waiting on IO leaves no core idle, or every bin when there are
    at most twice as many as cores, so that no lone last bin leaves a core idle: 4 bins of
    the ``random`` shape on 2 cores took 1.84-1.98 s all at once, 2.11-2.55 s three at a
    time). With fewer bins than that, each bin splits its decoding and encoding over two
    threads so the cores stay busy; with more, each bin runs in one thread to its end, which
    costs less CPU and memory. Each bin holds at most one row group and a few batches (see
    :func:`rewrite_bin`).

    A daemon passes the ``snapshot`` it holds (else the latest is loaded), and the limiters it
    shares across all tables: ``limiter`` bounds the bins decoding at once (it replaces
    ``bin_concurrency``), ``memory`` is held by each bin for its whole rewrite (one token per
    bin's bounded memory). Files younger than ``min_file_age_ms`` are left alone, and so are
    the ``(path, DV id)`` keys in ``exclude`` (a daemon's quarantined sources).
    ``on_bin_start`` is called as a bin starts (it holds its memory and its limiter token: it
    stops waiting on the other bins), ``on_bin_done`` as it ends, committed later or not.

    With ``orphan_grace_s``, rlcd's own leftovers older than that are removed first (only
    listed in a dry run), see :mod:`rlcd.compaction.cleanup`: ``rlcd compact`` asks for it; a
    daemon calls :func:`~rlcd.compaction.cleanup.clean_table` on its own schedule instead.

    A dry run reads the copy plans (the sources' footers) of the first ``copy_plans`` bins that
    may copy a row group, in plan order (None: of all), ``bin_concurrency`` bins at a time: at a
    million files reading every footer takes far longer than the plan.

    Raises:
        UnsupportedFeatureError: the table has a feature rlcd cannot write safely, or writers
            that do not commit with put-if-absent (named).
        CorruptLogError: the log or schema cannot be used.
        StorageError: the store failed while loading or committing.
    """
    # the cleanup, the log and the coordination check are independent: one round trip for all
    cleanup, loaded, temp = await gather(
        None
        if orphan_grace_s is None
        else _clean(store, orphan_grace_s, now_ms(), dry_run=dry_run),
        None if snapshot is not None else load_snapshot(store),
        external_commit_temp(store),
    )
    snapshot = snapshot if snapshot is not None else loaded
    config = table_config(snapshot)
    config.ensure_writable()
    refuse_external_commits(temp, table=store.root, version=snapshot.version)
    before_ms = now_ms() - min_file_age_ms if min_file_age_ms else None
    policy, bins = plan_table(snapshot, policy, before_ms=before_ms, exclude=exclude)
    report = CompactionReport(
        store.root,
        snapshot.version,
        policy,
        bins,
        dry_run=dry_run,
        snapshot=snapshot,
        cleanup=cleanup,
    )
    if not bins:
        return report
    settings = rewrite_settings(snapshot, config, policy, count_rows=count_rows)
    asked = int(limiter.total_tokens) if limiter is not None else bin_concurrency
    every = [b for b in bins if may_copy(b, settings)]
    may = every if not dry_run or copy_plans is None else every[:copy_plans]
    report = replace(report, layouts_unread=len(every) - len(may))
    footers = FooterCache(FOOTER_CACHE_BYTES)
    workers = asked if asked is not None else _cores() + 1
    layouts = await layouts_of(store, may, settings, concurrency=workers, footers=footers)
    if any(_mixes(b, layouts) for b in may):  # packed again, each layout apart first
        _, by_layout = plan_table(
            snapshot, policy, before_ms=before_ms, exclude=exclude, layouts=layouts
        )
        log.info(
            "planned_by_layout",
            table=store.root,
            bins=len(by_layout),
            bins_mixed=len(bins),
            sources_of_other_layouts=len(layouts),
        )
        bins = by_layout
        report = replace(report, planned=bins)
    concurrency = asked if asked is not None else _concurrency(len(bins))
    if dry_run:
        return await _with_copy_plans(store, report, settings, copy_plans, concurrency, footers)
    if on_plan is not None:
        on_plan(bins)
    done: list[RewrittenBin] = []
    failed: list[BinFailure] = []
    slots = limiter or anyio.CapacityLimiter(concurrency)
    split = len(bins) < concurrency
    room = handoff_bytes(concurrency, len(bins))

    async def one(b: Bin) -> None:
        try:
            async with memory if memory is not None else contextlib.nullcontext():
                rewritten = await rewrite_bin(
                    store,
                    b,
                    settings,
                    limiter=slots,
                    split=split,
                    handoff_bytes=room,
                    on_start=None if on_bin_start is None else lambda: on_bin_start(b),
                    footers=footers,
                )
            done.append(rewritten)
        except RlcdError as exc:
            failed.append(BinFailure.of(b, exc))
            log.warning("bin_failed", table=store.root, bin=b.bin_id, error=str(exc))
        except Exception as exc:  # one bin's surprise must not sink the whole run
            reason = f"unexpected {type(exc).__name__} while rewriting: {exc}"
            failed.append(BinFailure(b, reason, FailureKind.INTERNAL))
            log.exception("bin_failed", table=store.root, bin=b.bin_id, error=reason)
        if on_bin_done is not None:
            on_bin_done(b)

    try:
        async with anyio.create_task_group() as tg:
            for b in bins:
                tg.start_soon(one, b)
    except BaseException:  # cancelled (or worse) before the commit: no output may stay behind
        with anyio.CancelScope(shield=True):
            await discard_outputs(store, done)
        raise
    order = {b.bin_id: i for i, b in enumerate(bins)}
    done.sort(key=lambda r: order[r.bin.bin_id])
    # shielded: a stop signal now would leave the commit's outcome unknown; it is short
    with anyio.CancelScope(shield=True):
        try:
            outcome: CommitOutcome = await commit_bins(
                store,
                snapshot,
                done,
                predicate=predicate,
                now_ms=now_ms,
                max_masked_ratio=policy.max_masked_ratio,
            )
        except StorageError as exc:
            raise await _failed_commit(store, snapshot.version, done, exc) from exc
    failed.extend(
        BinFailure(
            r.done.bin,
            str(r.abort),
            FailureKind.SUPERSEDED if r.abort.reason == SOURCE_COMPACTED else FailureKind.CONFLICT,
        )
        for r in outcome.aborted
    )
    return CompactionReport(
        store.root,
        snapshot.version,
        policy,
        bins,
        committed_version=outcome.version,
        committed=outcome.committed,
        failed=tuple(failed),
        snapshot=snapshot,
        cleanup=cleanup,
        bin_results=outcome.results,
        commit_attempts=outcome.attempts,
        checkpoint=outcome.checkpoint,
    )


FOOTER_CACHE_BYTES = 8 * 1024 * 1024
"""Footers a run reads while planning by layout and keeps for its bins' rewrites (beyond it,
read again): a few thousand sources' footers."""


def _mixes(bin_: Bin, layouts: Mapping[str, int]) -> bool:
    """Whether the bin holds sources of more than one layout (:func:`layouts_of`)."""
    return len({layouts.get(add.path, 0) for add in bin_.sources}) > 1


async def _with_copy_plans(
    store: ObjectStore,
    report: CompactionReport,
    settings: RewriteSettings,
    budget: int | None,
    concurrency: int,
    footers: FooterCache,
) -> CompactionReport:
    """The dry run's report with the copy plans of the first ``budget`` bins that may copy
    (None: all); a bin of small files has none to read (:func:`may_copy`)."""
    bins = report.planned
    may = [i for i, b in enumerate(bins) if may_copy(b, settings)]
    read = may if budget is None else may[:budget]
    plans = await plan_bin_copies(
        store, [bins[i] for i in read], settings, concurrency=concurrency, footers=footers
    )
    copies: list[CopySummary | None] = [None] * len(bins)
    for i, plan in zip(read, plans, strict=True):
        copies[i] = plan
    return replace(
        report,
        copies=tuple(copies),
        copy_plans_read=len(read),
        copy_plans_unread=len(may) - len(read),
    )


async def _failed_commit(
    store: ObjectStore, read_version: int, done: Sequence[RewrittenBin], exc: StorageError
) -> StorageError:
    """The error to raise when committing failed with ``exc``, after deleting the outputs if
    the commit surely did not land.

    A refused request (access denied, a bad request: not transient) did not land; the log
    after ``read_version`` is read to be sure no commit names an output, and then they are
    deleted. After a transient failure the put may still land, so the outputs stay (a later
    run's cleanup removes them if no commit names them).
    """
    reason = str(exc).removeprefix(f"{exc.operation} {exc.key}: ")
    outputs = [b for b in done if b.key is not None]
    kept = f"the commit may have landed, so its written outputs ({len(outputs)}) stay"
    if not isinstance(exc, TransientStorageError):
        try:
            later = await read_commits_after(
                store, read_version, through=read_version, table=store.root
            )
        except RlcdError as check:
            log.warning("commit_check_failed", table=store.root, error=str(check))
        else:
            ours = {b.path for b in outputs}
            named = {a.path for _, actions in later for a in actions if isinstance(a, AddFile)}
            if not ours & named:
                await discard_outputs(store, outputs)
                kept = f"the commit did not land; its written outputs ({len(outputs)}) were deleted"
    return StorageError(f"{reason}; {kept}", operation=exc.operation, key=exc.key)


async def _clean(
    store: ObjectStore, grace_s: float, now_ms: int, *, dry_run: bool
) -> CleanupReport:
    """The cleanup before a run; a store refusing it (say, no permission to list uploads)
    leaves the leftovers for later but must not stop the compaction."""
    try:
        return await clean_table(store, grace_s=grace_s, now_ms=now_ms, dry_run=dry_run)
    except StorageError as exc:
        log.warning("cleanup_failed", table=store.root, error=str(exc))
        return CleanupReport(store.root, grace_s, dry_run=dry_run, skipped=str(exc))


def plan_table(
    snapshot: Snapshot,
    policy: CompactionPolicy,
    *,
    before_ms: int | None = None,
    exclude: Collection[tuple[str, str | None]] = frozenset(),
    layouts: Mapping[str, int] | None = None,
) -> tuple[CompactionPolicy, tuple[Bin, ...]]:
    """The table's effective policy and its bins, leaving out the files modified at or after
    ``before_ms`` (younger than the minimum file age) and the ``(path, DV id)`` keys
    in ``exclude`` (a daemon's quarantined sources); ``layouts`` as :func:`plan_bins`.
    Pure: the daemon plans every poll.

    Raises:
        UnsupportedFeatureError, ConfigError, TableError: as :func:`plan_bins`.
    """
    config = table_config(snapshot)
    policy = effective_policy(policy, config)
    bins = plan_bins(
        snapshot, config, policy, exclude=exclude, before_ms=before_ms, layouts=layouts
    )
    return policy, tuple(bins)
