"""Committing rewritten bins: the OPTIMIZE commit, put-if-absent, and what to do on losing.

One commit carries every finished bin (design §7). When the put loses, the winners are read and
classified (:mod:`rlcd.compaction.classify`): bins no winner touched are retried at the next
version, the others are aborted and their outputs deleted. An ambiguous put (the store failed
after retries, so the commit may or may not have landed) is settled by putting the same bytes
again and comparing the ``txnId`` of whatever holds the version with ours. A commit is never
partial and never names a missing file.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from rlcd.compaction.classify import classify_winners
from rlcd.compaction.rewrite import RewrittenBin
from rlcd.compaction.tags import composition_tags, optimized_tags
from rlcd.delta.actions import Action, AddFile, CommitInfo
from rlcd.delta.load import read_commit, read_commits_after, table_config
from rlcd.delta.replay import Snapshot, replay
from rlcd.delta.write import make_commit_info, write_commit
from rlcd.errors import StorageError
from rlcd.storage.base import ObjectStore, Written

__all__ = ("CommitOutcome", "bin_actions", "commit_bins", "discard_outputs")

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """``version`` is the commit that landed (None if nothing did); ``aborted`` pairs each bin
    that did not commit with the reason."""

    version: int | None
    committed: tuple[RewrittenBin, ...]
    aborted: tuple[tuple[RewrittenBin, str], ...] = field(default=())
    attempts: int = 0


def bin_actions(done: RewrittenBin, *, now_ms: int) -> list[Action]:
    """The output's add (dataChange=false) and one tombstone per source, tagged with where its
    live rows landed when the capture guard held (design §2)."""
    actions: list[Action] = []
    if done.path is not None:
        actions.append(
            AddFile(
                path=done.path,
                partition_values=dict(done.bin.partition_values),
                size=done.size,
                modification_time=done.modification_time,
                data_change=False,
                stats=done.stats,
                tags=optimized_tags(done.target_file_size),
            )
        )
    for i, source in enumerate(done.bin.sources):
        tags = None
        if done.offsets is not None and done.path is not None:
            tags = composition_tags(done.path, done.offsets[i], done.physical_rows[i])
        actions.append(source.tombstone(now_ms=now_ms, data_change=False, tags=tags))
    return actions


def _metrics(bins: Sequence[RewrittenBin]) -> dict[str, int]:
    sizes = sorted(b.size for b in bins if b.path is not None)

    def quantile(q: float) -> int:
        return sizes[min(len(sizes) - 1, int(q * len(sizes)))] if sizes else 0

    sources = [s for b in bins for s in b.bin.sources]
    return {
        "numAddedFiles": len(sizes),
        "numRemovedFiles": len(sources),
        "numAddedBytes": sum(sizes),
        "numRemovedBytes": sum(s.size for s in sources),
        "minFileSize": sizes[0] if sizes else 0,
        "p25FileSize": quantile(0.25),
        "p50FileSize": quantile(0.5),
        "p75FileSize": quantile(0.75),
        "maxFileSize": sizes[-1] if sizes else 0,
        "numDeletionVectorsRemoved": sum(1 for s in sources if s.deletion_vector is not None),
    }


def _actions(
    snapshot: Snapshot,
    read_version: int,
    bins: Sequence[RewrittenBin],
    *,
    predicate: Sequence[str],
    txn_id: str,
    now_ms: int,
) -> list[Action]:
    info = make_commit_info(
        operation="OPTIMIZE",
        parameters={
            "predicate": json.dumps(list(predicate)),
            "zOrderBy": "[]",
            "clusterBy": "[]",
            "auto": False,
        },
        read_version=read_version,
        previous_ict=snapshot.in_commit_timestamp,
        isolation_level="SnapshotIsolation",
        is_blind_append=False,
        metrics=_metrics(bins),
        txn_id=txn_id,
        now_ms=now_ms,
        in_commit_timestamps=table_config(snapshot).in_commit_timestamps,
    )
    return [info, *(a for b in bins for a in bin_actions(b, now_ms=now_ms))]


async def _put(
    store: ObjectStore, version: int, actions: Sequence[Action], txn_id: str, *, tries: int = 3
) -> bool:
    """Try to create ``version``: True if our commit is there, False if another writer's is.

    A store failure (after its own retries) leaves the outcome unknown: the request may still
    land. The same bytes are put again, which the store reports as written when they are
    already there, and the ``txnId`` of whatever holds the version decides (Spark does the
    same). Only repeated failures surface, as the storage error.
    """
    failure: StorageError | None = None
    for _ in range(tries):
        try:
            if isinstance(await write_commit(store, version, actions), Written):
                return True
        except StorageError as exc:
            failure = exc
            continue
        committed = await read_commit(store, version, table=store.root)
        return any(isinstance(a, CommitInfo) and a.txn_id == txn_id for a in committed)
    assert failure is not None
    raise failure


async def discard_outputs(store: ObjectStore, bins: Sequence[RewrittenBin]) -> None:
    """Delete the outputs of bins that will not commit; failures are logged, not raised."""
    for b in bins:
        if b.key is None:
            continue
        try:
            await store.delete(b.key)
        except StorageError as exc:
            log.warning("output_not_deleted", table=store.root, path=b.key, error=str(exc))


async def commit_bins(
    store: ObjectStore,
    snapshot: Snapshot,
    bins: Sequence[RewrittenBin],
    *,
    predicate: Sequence[str] = (),
    now_ms: Callable[[], int],
    max_attempts: int = 10,
) -> CommitOutcome:
    """Commit the bins at the next version, retrying past winners that leave them untouched."""
    table, txn_id, read_version = store.root, str(uuid.uuid4()), snapshot.version
    pending = list(bins)
    aborted: list[tuple[RewrittenBin, str]] = []
    current = snapshot
    for attempt in range(1, max_attempts + 1):
        if not pending:
            return CommitOutcome(None, (), tuple(aborted), attempt - 1)
        version = current.version + 1
        actions = _actions(
            current, read_version, pending, predicate=predicate, txn_id=txn_id, now_ms=now_ms()
        )
        if await _put(store, version, actions, txn_id):
            for b in pending:
                if b.path is not None and b.offsets is None:
                    log.warning(
                        "bin_committed_untagged",
                        table=table,
                        version=version,
                        bin=b.bin.bin_id,
                        runs=len(b.runs),
                        sources=len(b.bin.sources),
                    )
            log.info(
                "bins_committed", table=table, version=version, bins=len(pending), attempts=attempt
            )
            return CommitOutcome(version, tuple(pending), tuple(aborted), attempt)
        winners = await read_commits_after(store, current.version, through=version, table=table)
        current = replay(table, winners, base=current)
        decisions = classify_winners([b.bin for b in pending], winners)
        lost = [b for b in pending if b.bin.bin_id in decisions]
        for b in lost:
            reason = decisions[b.bin.bin_id].reason
            aborted.append((b, reason))
            log.warning("bin_aborted", table=table, bin=b.bin.bin_id, reason=reason)
        await discard_outputs(store, lost)
        pending = [b for b in pending if b.bin.bin_id not in decisions]
        if pending:
            table_config(current).ensure_writable()
    await discard_outputs(store, pending)
    aborted.extend((b, f"gave up after {max_attempts} commit attempts") for b in pending)
    return CommitOutcome(None, (), tuple(aborted), max_attempts)
