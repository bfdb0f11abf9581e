"""rlcd's deletion-vector writer: deletes rows by position without rewriting data files.

The DML counterpart of compaction (design §5, §6): it writes one DV file for all files it
touches (or inline DVs), then commits ``remove(old key) + add(new DV)`` per file with
``dataChange=true``, through the transaction driver (:mod:`rlcd.delta.transaction`). A file
whose every row is deleted is removed outright.

Losing the race, it rebases onto each winner in turn:
- a winner's change to one of its files: onto a DV update it merges when the deletions are
  disjoint (design §6) and conflicts when they overlap; onto a compaction that tagged the
  file's run (rlcd's, or any engine writing the Databricks tags) it moves its deletions onto
  the output (design §5: ``remove(T) + add(T, DV)``); any other change (a rewrite, an untagged
  source) conflicts;
- the files a winner that read the table added with ``dataChange`` (an ``INSERT ... SELECT``,
  an UPDATE's or MERGE's images, a DV re-added) may hold rows the delete's condition matches:
  the caller's ``matcher`` finds them and the delete extends to them (the serial order is the
  winner, then the delete). With no condition to evaluate (the positions-only API), or one that
  cannot be evaluated on a file, it conflicts as Delta's checker does. A blind append
  (``isBlindAppend``) is ordered after the delete (WriteSerializable): retried past;
- a change to the table's metadata or protocol conflicts.

A conflict raises :class:`ConcurrentModificationError` after deleting the DV files
it wrote: nothing is committed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import structlog
from pyroaring import AbstractBitMap64, BitMap64, FrozenBitMap64

from rlcd.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from rlcd.delta.coordination import ensure_put_if_absent_writers
from rlcd.delta.dv import DeletionVectorDescriptor, encode_dv_file
from rlcd.delta.load import read_deletion_vector, table_config
from rlcd.delta.names import dv_file_name
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import Snapshot, canonical_path
from rlcd.delta.transaction import Winner, discard_files, run_transaction
from rlcd.delta.write import make_commit_info
from rlcd.errors import (
    InternalError,
    RlcdError,
    TableError,
    UnsupportedFeatureError,
)
from rlcd.reconcile.bin_actions import loose_stats
from rlcd.reconcile.classify import Compacted, compaction_runs
from rlcd.reconcile.remap import ROW_ALREADY_DELETED, merge_same_file, reverse_rebase
from rlcd.storage.base import AlreadyExists, ObjectStore

__all__ = (
    "CONCURRENT_APPEND",
    "CONCURRENT_CHANGE",
    "COMPACTION_UNTAGGED",
    "Matcher",
    "delete_rows",
)

CONCURRENT_CHANGE: Final = "concurrent_change"
"""A winner changed a file the delete touches (or the table itself) other than by a DV update
the delete can merge onto."""

COMPACTION_UNTAGGED: Final = "compaction_untagged"
"""A compaction of one of the delete's files recorded no composition (missing or partial
tags): where its rows went is unknown, so the delete cannot follow them (design §5)."""

CONCURRENT_APPEND: Final = "concurrent_append"
"""A winner that was not a blind append added a file whose rows the delete's condition could not
be evaluated on (no condition given, an unreadable file, a value it cannot compare): they might
be rows the delete would have deleted (Delta's ConcurrentAppendException)."""

Matcher = Callable[[AddFile, int], Awaitable[AbstractBitMap64 | Abort]]
"""The physical positions of the live rows of a file a winner committed at the given version
that the delete's condition matches, or an abort naming the version and the file when the
condition cannot be evaluated on it."""

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _File:
    """One file of the delete: its live add (the tombstone's key), the DV that add has, and the
    DV to commit (a superset)."""

    live: AddFile
    base: FrozenBitMap64
    merged: FrozenBitMap64

    @property
    def emptied(self) -> bool:
        return len(self.merged) >= (self.live.num_records or 0)


@dataclass(frozen=True, slots=True)
class _Delete:
    """The transaction's state: the files, and the DVs written for them as they are (None:
    not written yet) with the DV file holding them."""

    files: tuple[_File, ...]
    descriptors: tuple[DeletionVectorDescriptor | None, ...] | None = None
    dv_key: str | None = None


async def _write_dvs(
    store: ObjectStore, files: Sequence[_File], *, inline: bool
) -> tuple[tuple[DeletionVectorDescriptor | None, ...], str | None]:
    """Each file's new DV descriptor (None for an emptied file) and the DV file written."""
    live = [f for f in files if not f.emptied]
    if inline or not live:
        return tuple(
            None if f.emptied else DeletionVectorDescriptor.inline(f.merged) for f in files
        ), None
    dv_id, dv_key = dv_file_name(os.urandom(16))
    data, ranges = encode_dv_file([f.merged for f in live])
    if isinstance(await store.put_if_absent(dv_key, data), AlreadyExists):
        raise InternalError(f"a fresh DV file name is taken: {dv_key}")
    written = iter(ranges)
    descriptors: list[DeletionVectorDescriptor | None] = []
    for f in files:
        if f.emptied:
            descriptors.append(None)
            continue
        offset, size = next(written)
        descriptors.append(
            DeletionVectorDescriptor.for_file(
                uuid=dv_id, offset=offset, size_in_bytes=size, cardinality=len(f.merged)
            )
        )
    return tuple(descriptors), dv_key


def _actions(
    files: Sequence[_File],
    descriptors: Sequence[DeletionVectorDescriptor | None],
    *,
    snapshot: Snapshot,
    read_version: int,
    predicate: str | None,
    txn_id: str,
    now_ms: int,
) -> list[Action]:
    emptied = sum(1 for f in files if f.emptied)
    actions: list[Action] = [
        make_commit_info(
            operation="DELETE",
            # as Spark records it: a JSON list of the condition's text (empty without one)
            parameters={"predicate": json.dumps([] if predicate is None else [predicate])},
            read_version=read_version,
            previous_ict=snapshot.in_commit_timestamp,
            isolation_level="WriteSerializable",
            is_blind_append=False,
            metrics={
                "numDeletedRows": sum(len(f.merged) - len(f.base) for f in files),
                "numRemovedFiles": emptied,
                "numDeletionVectorsAdded": len(files) - emptied,
            },
            txn_id=txn_id,
            now_ms=now_ms,
            in_commit_timestamps=table_config(snapshot).in_commit_timestamps,
        )
    ]
    for f, dv in zip(files, descriptors, strict=True):
        actions.append(f.live.tombstone(now_ms=now_ms, data_change=True))
        if dv is not None:
            actions.append(
                replace(
                    f.live, deletion_vector=dv, data_change=True, stats=loose_stats(f.live.stats)
                )
            )
    return actions


def _touches(
    files: Mapping[str, _File], version: int, actions: Sequence[Action]
) -> dict[str, tuple[list[RemoveFile], list[AddFile]]] | Abort:
    """The winner's removes and adds of each of our files, or an abort for a table change."""
    touched: dict[str, tuple[list[RemoveFile], list[AddFile]]] = {}
    for action in actions:
        if isinstance(action, Metadata | Protocol):
            return Abort(CONCURRENT_CHANGE, f"version {version} changed the table's {action.KIND}")
        if isinstance(action, RemoveFile | AddFile) and canonical_path(action.path) in files:
            removes, adds = touched.setdefault(canonical_path(action.path), ([], []))
            if isinstance(action, RemoveFile):
                removes.append(action)
            else:
                adds.append(action)
    return touched


def _on(version: int, mine: _File, abort: Abort) -> Abort:
    return Abort(abort.reason, f"version {version} on {mine.live.path}: {abort.detail}")


def _blind_append(actions: Sequence[Action]) -> bool:
    """Whether the commit says it is a blind append (it read nothing) and only adds: a missing
    ``isBlindAppend`` is not one, as for Delta's checker."""
    return any(
        isinstance(a, CommitInfo) and a.extra.get("isBlindAppend") is True for a in actions
    ) and not any(isinstance(a, RemoveFile) and a.data_change for a in actions)


def _new_data(
    actions: Sequence[Action], touched: Mapping[str, object]
) -> list[tuple[AddFile, RemoveFile | None]]:
    """The files a winner that read the table added with ``dataChange``, other than the delete's
    own files (their changes are rebased one by one), each with the winner's remove of the same
    path if any (a DV update: see ``_only_deletes``)."""
    if _blind_append(actions):
        return []
    removed = {
        canonical_path(a.path): a for a in actions if isinstance(a, RemoveFile) and a.data_change
    }
    return [
        (a, removed.get(canonical_path(a.path)))
        for a in actions
        if isinstance(a, AddFile) and a.data_change and canonical_path(a.path) not in touched
    ]


def _dv_update(live: AddFile, removes: list[RemoveFile], adds: list[AddFile]) -> AddFile | None:
    """The winner's new add of the file when it only updated the live file's DV, else None."""
    if len(removes) != 1 or len(adds) != 1:
        return None
    remove, add = removes[0], adds[0]
    if remove.dv_unique_id != live.dv_unique_id or not remove.data_change or not add.data_change:
        return None
    return add


async def delete_rows(
    store: ObjectStore,
    snapshot: Snapshot,
    deletions: Mapping[str, Iterable[int]],
    *,
    inline: bool = False,
    predicate: str | None = None,
    matcher: Matcher | None = None,
    now_ms: int | None = None,
    max_attempts: int = 10,
) -> int:
    """Delete rows, given as physical positions per file path, and commit; returns the version.

    ``predicate`` is the condition that chose the rows, recorded in the commit's
    ``operationParameters`` as Spark records a DELETE's. ``matcher`` evaluates it on the files
    a losing race's winners added (module header); without one, any such file conflicts.

    Raises:
        UnsupportedFeatureError: the table does not allow row deletions or new deletion
            vectors, or has writers that do not commit with put-if-absent.
        TableError: a path is not live, lacks ``numRecords``, or a position is out of range.
        ConcurrentModificationError: a winning commit changed one of the files (other than by
            a DV update with disjoint deletions) or the table, added files the condition
            cannot be evaluated on, or every attempt lost.
        StorageError: the store kept failing on the commit put, so whether it landed is not
            known (the DV file is kept).
    """
    config = table_config(snapshot)
    config.ensure_rows_deletable()
    await ensure_put_if_absent_writers(store, version=snapshot.version)
    if not config.deletion_vectors_enabled:
        raise UnsupportedFeatureError(
            "deletion vectors are not enabled (delta.enableDeletionVectors)", table=store.root
        )
    files: list[_File] = []
    live = snapshot.live_files(deletions)
    for path, positions in deletions.items():
        add = live.get(canonical_path(path))
        if add is None:
            raise TableError(
                "not a live file", table=store.root, version=snapshot.version, path=path
            )
        rows = add.num_records
        if rows is None:
            raise TableError(
                "file has no numRecords in its stats; cannot add a deletion vector",
                table=store.root,
                version=snapshot.version,
                path=path,
            )
        new = BitMap64(positions)
        if len(new) and new.max() >= rows:
            raise TableError(
                f"row position {new.max()} is beyond the file's {rows} rows",
                table=store.root,
                version=snapshot.version,
                path=path,
            )
        old = FrozenBitMap64(await read_deletion_vector(store, add, version=snapshot.version))
        if not new.issubset(old):
            files.append(_File(add, old, FrozenBitMap64(old | new)))
    if not files:
        return snapshot.version

    async def build(
        state: _Delete, current: Snapshot, txn_id: str
    ) -> tuple[Sequence[Action], _Delete]:
        if state.descriptors is None:
            descriptors, dv_key = await _write_dvs(store, state.files, inline=inline)
            state = replace(state, descriptors=descriptors, dv_key=dv_key)
        assert state.descriptors is not None
        stamp = now_ms if now_ms is not None else int(time.time() * 1000)
        actions = _actions(
            state.files,
            state.descriptors,
            snapshot=current,
            read_version=snapshot.version,
            predicate=predicate,
            txn_id=txn_id,
            now_ms=stamp,
        )
        return actions, state

    async def onto(
        by_path: dict[str, _File],
        path: str,
        version: int,
        touch: tuple[list[RemoveFile], list[AddFile]],
        runs: Mapping[str, Compacted] | None,
    ) -> Abort | None:
        """Rebase the delete of ``path`` onto what winner ``version`` did to it, in place:
        merge onto a DV update (design §6), or move onto the output of a compaction whose
        tombstone of ``path`` is tagged with its run (§5; the other tombstones do not matter)."""
        mine, (removes, adds) = by_path[path], touch
        theirs = _dv_update(mine.live, removes, adds)
        if theirs is not None:
            winner_dv = await read_deletion_vector(store, theirs, version=version)
            merged = merge_same_file(mine.base, winner_dv, mine.merged)
            if isinstance(merged, Abort):
                return _on(version, mine, merged)
            by_path[path] = _File(theirs, FrozenBitMap64(winner_dv), merged)
            return None
        moved = runs.get(path) if runs is not None else None
        if moved is None or adds or len(removes) != 1:
            compacted = bool(removes) and not any(r.data_change for r in removes)
            return Abort(
                COMPACTION_UNTAGGED if compacted else CONCURRENT_CHANGE,
                f"version {version} "
                + ("compacted without tags in the single-run form " if compacted else "rewrote ")
                + mine.live.path,
            )
        if removes[0].dv_unique_id != mine.live.dv_unique_id or moved.output.num_records is None:
            return Abort(
                CONCURRENT_CHANGE, f"version {version} compacted another version of {path}"
            )
        new = mine.merged - mine.base
        positions = reverse_rebase(mine.base, moved.run.row_offset, moved.run.live, new)
        if isinstance(positions, Abort):
            return _on(version, mine, positions)
        output = canonical_path(moved.output.path)
        target = by_path.get(output)
        if target is None:
            dv = await read_deletion_vector(store, moved.output, version=version)
            target = _File(moved.output, FrozenBitMap64(dv), FrozenBitMap64(dv))
        if positions.intersection_cardinality(target.base):
            return _on(version, mine, Abort(ROW_ALREADY_DELETED, "the output lacks them already"))
        by_path[output] = replace(target, merged=FrozenBitMap64(target.merged | positions))
        del by_path[path]
        return None

    async def only_deletes(version: int, add: AddFile, removed: RemoveFile | None) -> bool | Abort:
        """Whether winner ``version`` re-added ``removed``'s file with a DV that deletes every row
        the removed one did: it added no row, so there is nothing to evaluate. A DV that lost
        positions (a RESTORE) brought rows back, which ``extend`` evaluates."""
        if removed is None:
            return False
        if removed.dv_unique_id == add.dv_unique_id:
            return True
        try:
            before = await read_deletion_vector(store, removed, version=version)
            after = await read_deletion_vector(store, add, version=version)
        except RlcdError as exc:
            return Abort(CONCURRENT_APPEND, f"version {version} re-added {add.path}: {exc}")
        return before.issubset(after)

    async def extend(by_path: dict[str, _File], version: int, add: AddFile) -> Abort | None:
        """Add the rows of ``add`` (new in winner ``version``) the condition matches, in place."""
        if matcher is None:
            return Abort(
                CONCURRENT_APPEND,
                f"version {version} added {add.path} (not a blind append) and the delete has "
                "no condition to evaluate on its rows",
            )
        positions = await matcher(add, version)
        if isinstance(positions, Abort):
            return positions
        if not positions:
            return None
        if add.num_records is None:
            return Abort(
                CONCURRENT_APPEND,
                f"version {version} added {add.path}, which matches, without numRecords: "
                "no deletion vector can be added to it",
            )
        try:
            dv = FrozenBitMap64(await read_deletion_vector(store, add, version=version))
        except RlcdError as exc:
            return Abort(CONCURRENT_APPEND, f"version {version} added {add.path}: {exc}")
        by_path[canonical_path(add.path)] = _File(add, dv, FrozenBitMap64(dv | positions))
        return None

    async def rebase(
        state: _Delete, _current: Snapshot, winners: Sequence[Winner]
    ) -> _Delete | Abort:
        by_path = {canonical_path(f.live.path): f for f in state.files}
        for version, actions in winners:
            touched = _touches(by_path, version, actions)
            if isinstance(touched, Abort):
                return touched
            runs = compaction_runs(actions) if touched else None
            for path, touch in touched.items():
                stop = await onto(by_path, path, version, touch, runs)
                if stop is not None:
                    return stop
            for add, removed in _new_data(actions, touched):
                unchanged = await only_deletes(version, add, removed)
                if isinstance(unchanged, Abort):
                    return unchanged
                stop = None if unchanged else await extend(by_path, version, add)
                if stop is not None:
                    return stop
        files = tuple(by_path.values())
        if files == state.files:
            return state
        # the DVs change: the ones written for the last attempt name nothing
        await discard_files(store, [state.dv_key], what="dv_file")
        return _Delete(files)

    result = await run_transaction(
        store,
        snapshot,
        _Delete(tuple(files)),
        build=build,
        rebase=rebase,
        txn_id=str(uuid.uuid4()),
        max_attempts=max_attempts,
    )
    if isinstance(result.outcome, Abort):
        await discard_files(store, [result.state.dv_key], what="dv_file")
    version = result.version("another writer's commit conflicts")
    log.info(
        "rows_deleted",
        table=store.root,
        version=version,
        files=len(result.state.files),
        attempts=result.attempts,
    )
    return version
