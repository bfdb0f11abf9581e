"""Committing rewritten bins: the OPTIMIZE commit, and carrying it over the winners on losing.

One commit carries every finished bin (design §7), put through the transaction driver
(:mod:`rlcd.delta.transaction`). When the put loses, each winner is classified against each
bin (:mod:`rlcd.reconcile.classify`) one after the other: a bin no winner touched retries as
it is; a bin whose sources a DML changed is reconciled (:mod:`rlcd.reconcile.bin_actions`: the
winner's deletions remapped, or a rewritten source masked, into the output's DV); any other
bin aborts, and its output is deleted. All or nothing per bin; the other bins still commit.
Each attempt writes the DV file its reconciled outputs need (tiny DVs go inline); a lost
attempt's DV file is deleted before the next. An ambiguous put the store could not settle
raises the storage error and deletes nothing: the commit may have landed.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

import structlog
from pyroaring import AbstractBitMap64

from rlcd.compaction.rewrite import RewrittenBin
from rlcd.delta.actions import Action, AddFile
from rlcd.delta.checkpoint_writer import CheckpointWritten
from rlcd.delta.dv import DeletionVectorDescriptor, encode_dv_file, serialize_bitmap
from rlcd.delta.load import read_deletion_vector, table_config
from rlcd.delta.names import dv_file_name
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import Snapshot, canonical_path
from rlcd.delta.transaction import (
    ATTEMPTS_EXHAUSTED,
    Committed,
    Unknown,
    Winner,
    discard_files,
    run_transaction,
)
from rlcd.delta.write import make_commit_info
from rlcd.errors import InternalError, RlcdError
from rlcd.reconcile.bin_actions import (
    COMPOSITION_UNKNOWN,
    MASK_CEILING_EXCEEDED,
    BinState,
    DvKey,
    Fate,
    apply_steps,
    bin_actions,
    initial_state,
)
from rlcd.reconcile.classify import REASONS, Mask, Reconcile, Remap, Retry, classify_winner
from rlcd.reconcile.remap import POSITION_OUTSIDE_RUN
from rlcd.storage.base import AlreadyExists, ObjectStore

__all__ = (
    "INLINE_DV_MAX_BYTES",
    "NOTHING_TO_COMMIT",
    "DV_UNREADABLE",
    "ABORT_REASONS",
    "BinCommitted",
    "BinAborted",
    "BinResult",
    "CommitOutcome",
    "commit_bins",
    "discard_outputs",
)

INLINE_DV_MAX_BYTES = 40
"""An output DV whose blob is at most this long (a few positions, or one run) is written inline
in the log rather than in a DV file of its own."""
NOTHING_TO_COMMIT = "nothing_to_commit"
DV_UNREADABLE = "dv_unreadable"
ABORT_REASONS: Final = (
    *REASONS,
    POSITION_OUTSIDE_RUN,
    COMPOSITION_UNKNOWN,
    MASK_CEILING_EXCEEDED,
    DV_UNREADABLE,
    ATTEMPTS_EXHAUSTED,
)
"""Every reason code a bin's :class:`BinAborted` can carry (stable metric labels); the
failure text of a bin aborted by the commit starts with the code and a colon."""

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class BinCommitted:
    """A bin that landed; how many of its sources were reconciled, and how.

    ``masked`` are the sources a winner removed first (the commit tombstones them no more);
    ``output_dropped``: every output row was deleted, so the commit adds no file.
    """

    done: RewrittenBin
    remapped_sources: int = 0
    masked_sources: int = 0
    remapped_positions: int = 0
    masked_positions: int = 0
    masked: frozenset[str] = frozenset()
    output_dropped: bool = False

    @property
    def removed(self) -> tuple[AddFile, ...]:
        """The sources the commit tombstones."""
        return tuple(s for s in self.done.bin.sources if s.path not in self.masked)

    @property
    def files_added(self) -> int:
        return int(self.done.path is not None and not self.output_dropped)

    @property
    def bytes_added(self) -> int:
        return self.done.size if self.files_added else 0

    @property
    def decision(self) -> str:
        """``committed``, or ``reconciled_by_mask`` / ``reconciled_by_remap`` (a metric label)."""
        if self.masked_sources:
            return "reconciled_by_mask"
        return "reconciled_by_remap" if self.remapped_sources else "committed"


@dataclass(frozen=True, slots=True)
class BinAborted:
    """A bin that did not commit: ``abort.reason`` is the code, ``abort.detail`` the story."""

    done: RewrittenBin
    abort: Abort

    @property
    def decision(self) -> str:
        return "aborted"


BinResult = BinCommitted | BinAborted


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """``version`` is the commit that landed (None if nothing did); ``results`` holds every
    bin's result, committed ones first; ``checkpoint`` is the one written after the commit."""

    version: int | None
    results: tuple[BinResult, ...]
    attempts: int = 0
    checkpoint: CheckpointWritten | None = None

    @property
    def committed(self) -> tuple[RewrittenBin, ...]:
        return tuple(r.done for r in self.results if isinstance(r, BinCommitted))

    @property
    def aborted(self) -> tuple[BinAborted, ...]:
        return tuple(r for r in self.results if isinstance(r, BinAborted))


@dataclass(frozen=True, slots=True)
class _Batch:
    """The transaction's state: bins still to commit, bins aborted, and the DV file the last
    attempt wrote (deleted when that attempt lost)."""

    pending: tuple[BinState[RewrittenBin], ...]
    aborted: tuple[BinAborted, ...] = ()
    dv_key: str | None = None


def _metrics(bins: Sequence[BinState[RewrittenBin]]) -> dict[str, int]:
    outputs = [b for b in bins if b.done.path is not None and not b.output_dropped]
    sizes = sorted(b.done.size for b in outputs)

    def quantile(q: float) -> int:
        return sizes[min(len(sizes) - 1, int(q * len(sizes)))] if sizes else 0

    removed = [s.live for b in bins for s in b.sources if s.fate is not Fate.MASKED]
    return {
        "numAddedFiles": len(sizes),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(sizes),
        "numRemovedBytes": sum(s.size for s in removed),
        "minFileSize": sizes[0] if sizes else 0,
        "p25FileSize": quantile(0.25),
        "p50FileSize": quantile(0.5),
        "p75FileSize": quantile(0.75),
        "maxFileSize": sizes[-1] if sizes else 0,
        "numDeletionVectorsRemoved": sum(1 for s in removed if s.deletion_vector is not None),
        "numDeletionVectorsAdded": sum(1 for b in outputs if b.deleted),
        "numReconciledSources": sum(b.remapped + b.masked for b in bins),
        "numRemappedPositions": sum(b.remapped_positions for b in bins),
        "numMaskedPositions": sum(b.masked_positions for b in bins),
    }


async def _write_dvs(
    store: ObjectStore, bins: Sequence[BinState[RewrittenBin]]
) -> tuple[dict[str, DeletionVectorDescriptor], str | None]:
    """The output DV of every reconciled bin with deletions: inline when tiny, else in one new
    DV file for the attempt (its key is returned, to delete if the attempt loses)."""
    descriptors: dict[str, DeletionVectorDescriptor] = {}
    in_file: list[BinState[RewrittenBin]] = []
    for b in bins:
        if not b.deleted or b.output_dropped or b.done.path is None:
            continue
        if len(serialize_bitmap(b.deleted)) <= INLINE_DV_MAX_BYTES:
            descriptors[b.done.bin.bin_id] = DeletionVectorDescriptor.inline(b.deleted)
        else:
            in_file.append(b)
    if not in_file:
        return descriptors, None
    dv_id, key = dv_file_name(os.urandom(16))
    data, ranges = encode_dv_file([b.deleted for b in in_file])
    if isinstance(await store.put_if_absent(key, data), AlreadyExists):
        raise InternalError(f"a fresh DV file name is taken: {key}")
    for b, (offset, size) in zip(in_file, ranges, strict=True):
        descriptors[b.done.bin.bin_id] = DeletionVectorDescriptor.for_file(
            uuid=dv_id, offset=offset, size_in_bytes=size, cardinality=len(b.deleted)
        )
    return descriptors, key


async def discard_outputs(store: ObjectStore, bins: Sequence[RewrittenBin]) -> None:
    """Delete the outputs of bins that will not commit; failures are logged, not raised."""
    await discard_files(store, (b.key for b in bins), what="output")


async def _bitmaps(
    store: ObjectStore, state: BinState[RewrittenBin], steps: Sequence[Remap | Mask], version: int
) -> dict[DvKey, AbstractBitMap64]:
    """The DVs the remap steps need: each source's read, live and winner DV."""
    by_path = {canonical_path(s.read.path): s for s in state.sources}
    wanted: list[AddFile] = []
    for step in steps:
        if isinstance(step, Remap):
            source = by_path[step.source]
            wanted += [source.read, source.live, step.winner]
    loaded: dict[DvKey, AbstractBitMap64] = {}
    for add in wanted:
        if add.key not in loaded:
            loaded[add.key] = await read_deletion_vector(store, add, version=version)
    return loaded


async def commit_bins(
    store: ObjectStore,
    snapshot: Snapshot,
    bins: Sequence[RewrittenBin],
    *,
    predicate: Sequence[str] = (),
    now_ms: Callable[[], int],
    max_attempts: int = 10,
    max_masked_ratio: float = 0.5,
) -> CommitOutcome:
    """Commit the bins at the next version, carrying them over the winners that beat them.

    Raises:
        StorageError: the store kept failing on the put, so whether the commit landed is not
            known (nothing is deleted).
        CorruptLogError: a winner cannot be read.
    """
    table, read_version = store.root, snapshot.version

    async def build(
        batch: _Batch, current: Snapshot, txn_id: str
    ) -> tuple[Sequence[Action], _Batch] | Abort:
        if not batch.pending:
            return Abort(NOTHING_TO_COMMIT, "every bin was aborted")
        dvs, dv_key = await _write_dvs(store, batch.pending)
        now = now_ms()
        info = make_commit_info(
            operation="OPTIMIZE",
            parameters={
                "predicate": json.dumps(list(predicate)),
                "zOrderBy": "[]",
                "clusterBy": "[]",
                "auto": False,
            },
            read_version=read_version,
            previous_ict=current.in_commit_timestamp,
            isolation_level="SnapshotIsolation",
            is_blind_append=False,
            metrics=_metrics(batch.pending),
            txn_id=txn_id,
            now_ms=now,
            in_commit_timestamps=table_config(current).in_commit_timestamps,
        )
        actions: list[Action] = [info]
        for b in batch.pending:
            actions += bin_actions(b, now_ms=now, output_dv=dvs.get(b.done.bin.bin_id))
        return actions, replace(batch, dv_key=dv_key)

    async def settle(
        b: BinState[RewrittenBin], version: int, steps: Sequence[Remap | Mask]
    ) -> BinState[RewrittenBin] | Abort:
        try:
            bitmaps = await _bitmaps(store, b, steps, version)
        except RlcdError as exc:
            return Abort(DV_UNREADABLE, f"version {version}: {exc}")
        return apply_steps(b, steps, bitmaps, max_masked_ratio=max_masked_ratio)

    async def rebase(batch: _Batch, current: Snapshot, winners: Sequence[Winner]) -> _Batch:
        await discard_files(
            store, [batch.dv_key], what="dv_file"
        )  # that attempt lost: its DVs name nothing
        pending, aborted = list(batch.pending), list(batch.aborted)
        dvs_enabled = table_config(current).deletion_vectors_enabled
        for version, actions in winners:
            sources = {
                path: (b.done.bin.bin_id, add)
                for b in pending
                for path, add in b.live_sources().items()
            }
            ids = [b.done.bin.bin_id for b in pending]
            decisions = classify_winner(sources, ids, version, actions, dvs_enabled=dvs_enabled)
            kept: list[BinState[RewrittenBin]] = []
            for b in pending:
                decision = decisions[b.done.bin.bin_id]
                if isinstance(decision, Reconcile):
                    settled = await settle(b, version, decision.steps)
                elif isinstance(decision, Retry):
                    settled = b
                else:
                    settled = decision
                if isinstance(settled, Abort):
                    aborted.append(BinAborted(b.done, settled))
                    await discard_outputs(store, [b.done])
                    log.warning(
                        "bin_aborted",
                        table=table,
                        version=version,
                        bin=b.done.bin.bin_id,
                        reason=settled.reason,
                        detail=settled.detail,
                    )
                    continue
                if settled is not b:
                    log.info(
                        "bin_reconciled",
                        table=table,
                        version=version,
                        bin=b.done.bin.bin_id,
                        remapped_sources=settled.remapped,
                        masked_sources=settled.masked,
                        remapped_positions=settled.remapped_positions,
                        masked_positions=settled.masked_positions,
                    )
                kept.append(settled)
            pending = kept
        if pending:
            table_config(current).ensure_writable()
        return _Batch(tuple(pending), tuple(aborted))

    result = await run_transaction(
        store,
        snapshot,
        _Batch(tuple(initial_state(b) for b in bins)),
        build=build,
        rebase=rebase,
        txn_id=str(uuid.uuid4()),
        max_attempts=max_attempts,
    )
    batch, outcome = result.state, result.outcome
    if isinstance(outcome, Unknown):
        raise outcome.error
    if isinstance(outcome, Abort):
        await discard_files(store, [batch.dv_key], what="dv_file")
        await discard_outputs(store, [b.done for b in batch.pending])
        gave_up = tuple(BinAborted(b.done, outcome) for b in batch.pending)
        for b in batch.pending:
            log.warning("bin_aborted", table=table, bin=b.done.bin.bin_id, reason=outcome.reason)
        return CommitOutcome(None, batch.aborted + gave_up, result.attempts)
    assert isinstance(outcome, Committed)
    committed: list[BinResult] = []
    for b in batch.pending:
        done = BinCommitted(
            b.done,
            b.remapped,
            b.masked,
            b.remapped_positions,
            b.masked_positions,
            masked=frozenset(s.read.path for s in b.sources if s.fate is Fate.MASKED),
            output_dropped=b.output_dropped,
        )
        committed.append(done)
        if b.output_dropped:
            await discard_outputs(store, [b.done])  # every row deleted: the add was left out
        if b.done.path is not None and b.done.offsets is None:
            log.warning(
                "bin_committed_untagged",
                table=table,
                version=outcome.version,
                bin=b.done.bin.bin_id,
                runs=len(b.done.runs),
                sources=len(b.done.bin.sources),
            )
        log.info(
            "bin_committed",
            table=table,
            version=outcome.version,
            bin=b.done.bin.bin_id,
            decision=done.decision,
            files=len(b.done.bin.sources),
            bytes_in=sum(s.size for s in b.done.bin.sources),
            bytes_out=b.done.size,
            rows=b.done.rows,
            remapped_sources=done.remapped_sources,
            masked_sources=done.masked_sources,
            remapped_positions=done.remapped_positions,
            masked_positions=done.masked_positions,
            files_removed=len(done.removed),
        )
    log.info(
        "bins_committed",
        table=table,
        version=outcome.version,
        bins=len(batch.pending),
        attempts=result.attempts,
    )
    results = (*committed, *batch.aborted)
    return CommitOutcome(outcome.version, results, result.attempts, result.checkpoint)
