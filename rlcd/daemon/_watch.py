"""Per-table log tail: a long-lived snapshot moved forward by polling (rlc-design.md §7, Watch).

Theory of operation. The first poll lists the log from the newest checkpoint (so the table's
version is known before the load, which may wait for the snapshot budget), then loads the
snapshot from that checkpoint. Every later poll is one LIST of ``_delta_log`` starting after the
held version: an idle table costs exactly that. New commits are read by key and replayed onto
the held snapshot (:func:`rlcd.delta.load.advance_snapshot`). When the listing shows the table
has moved far past the snapshot — a checkpoint newer than it and more than ``replay_limit``
commits to replay, or the commits right after it already cleaned up by log retention — the
snapshot is reloaded from that checkpoint instead (:func:`rlcd.delta.load.load_snapshot`). The
log is never re-read from its start while tailing. The watch also knows the version of the
table's newest checkpoint (listed before the first load, then seen in the polls' listings), for
the daemon's checkpoint lag.

Released while idle (``[daemon] snapshot_memory``, ``snapshot_idle``): the supervisor may
:meth:`TableWatch.release` the snapshot; the watch then keeps only its version and live file
count. Its polls stay one LIST after that version; the first that sees a commit (or that the
supervisor asks to ``load``) loads the table from its newest checkpoint, as on the first poll.
Until then a poll returns no snapshot.

Hooks for the supervisor (:meth:`TableWatch.poll`): ``seen`` is told a newer version (on the
first poll, the table's version) as soon as the listing shows it, before the commits are
replayed or the table loaded; ``gate`` is entered around every load from a checkpoint (the
snapshot budget, :func:`rlcd.daemon._snapshots.admit`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass

import structlog

from rlcd.delta.load import advance_snapshot, list_log, load_snapshot, newest_checkpoint
from rlcd.delta.log_path import LogKind, LogPath
from rlcd.delta.replay import Snapshot
from rlcd.storage.base import ObjectStore

__all__ = ("TableWatch", "Poll", "LoadGate", "REPLAY_LIMIT")

REPLAY_LIMIT = 100
"""Commits past a newer checkpoint worth replaying one by one rather than reloading."""

LoadGate = Callable[[], AbstractAsyncContextManager[object]]
"""Entered around a load from a checkpoint (the default admits every load at once)."""

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Poll:
    """What one poll saw: the snapshot now held (None: released, and the table did not move),
    the version held before (None on the first poll) and whether it was (re)loaded from a
    checkpoint rather than advanced."""

    snapshot: Snapshot | None
    previous: int | None
    reloaded: bool

    @property
    def changed(self) -> bool:
        return self.snapshot is not None and self.previous != self.snapshot.version


@dataclass(frozen=True, slots=True)
class _Released:
    """What a watch keeps of a released snapshot."""

    version: int
    files: int
    nbytes: int


class TableWatch:
    """One table's held snapshot. Not shared between tasks: one poller owns it."""

    def __init__(self, store: ObjectStore, *, replay_limit: int = REPLAY_LIMIT) -> None:
        self.store = store
        self._replay_limit = replay_limit
        self._snapshot: Snapshot | None = None
        self._checkpoint: int | None = None
        self._released: _Released | None = None
        self._listed: int | None = None  # the first poll's listing, until a load ends

    @property
    def snapshot(self) -> Snapshot | None:
        """The snapshot of the last poll (None before the first, and while released)."""
        return self._snapshot

    @property
    def released(self) -> bool:
        """Whether the snapshot was released and not loaded again since."""
        return self._released is not None

    @property
    def version(self) -> int | None:
        """The version held, released or not; before the first load ends, the one the first
        poll listed (None before that)."""
        if self._released is not None:
            return self._released.version
        return self._snapshot.version if self._snapshot is not None else self._listed

    @property
    def files(self) -> int:
        """The live files of :attr:`version` (0 before the first poll)."""
        if self._released is not None:
            return self._released.files
        return self._snapshot.num_files if self._snapshot is not None else 0

    def held_bytes(self) -> int:
        """What the held snapshot costs (:meth:`Snapshot.held_bytes`; 0 when none is held)."""
        return self._snapshot.held_bytes() if self._snapshot is not None else 0

    @property
    def footprint(self) -> int | None:
        """What the snapshot held costs, or cost when it was released (None: never loaded)."""
        if self._released is not None:
            return self._released.nbytes
        return self._snapshot.held_bytes() if self._snapshot is not None else None

    def release(self) -> int:
        """Drop the held snapshot, keeping its version and file count; returns its bytes (0
        when none is held). Whoever still uses the snapshot keeps it alive until done."""
        held = self._snapshot
        if held is None:
            return 0
        nbytes = held.held_bytes()
        self._released = _Released(held.version, held.num_files, nbytes)
        self._snapshot = None
        return nbytes

    @property
    def checkpoint(self) -> int | None:
        """The newest checkpoint's version seen (None: none, or no poll yet)."""
        return self._checkpoint

    def saw_checkpoint(self, version: int) -> None:
        """A checkpoint of ``version`` was written (by the daemon, at the held version: the
        next poll's listing starts after it)."""
        self._checkpoint = max(version, self._checkpoint if self._checkpoint is not None else -1)

    async def poll(
        self,
        *,
        load: bool = False,
        seen: Callable[[int], object] | None = None,
        gate: LoadGate = nullcontext,
    ) -> Poll:
        """Move the held snapshot to the table's latest version; ``load``: load a released
        one even when the table did not move. ``seen`` is called with the newest commit's
        version when the listing shows one (on the first poll, with the table's version);
        ``gate`` is entered around each load.

        Raises:
            CorruptLogError, UnsupportedFeatureError: as :func:`load_snapshot`; the held
                snapshot is kept, so a later poll starts from it again.
            StorageError: the store failed.
        """
        held = self._snapshot
        if held is None and self._released is not None:
            return await self._poll_released(self._released.version, load, seen, gate)
        if held is None:
            return await self._first(seen, gate)
        paths = await list_log(self.store, after_version=held.version + 1)
        commits = self._new_commits(paths, seen)
        if not commits:
            return Poll(held, held.version, reloaded=False)
        newer_checkpoint = any(p.is_checkpoint and p.version > held.version for p in paths)
        behind = len(commits) > self._replay_limit or commits[0] != held.version + 1
        if newer_checkpoint and behind:
            async with gate():
                self._snapshot = await load_snapshot(self.store)
            log.info(
                "snapshot_reloaded",
                table=self.store.root,
                version=self._snapshot.version,
                previous=held.version,
            )
            return Poll(self._snapshot, held.version, reloaded=True)
        self._snapshot = await advance_snapshot(self.store, held, paths)
        return Poll(self._snapshot, held.version, reloaded=False)

    async def _first(self, seen: Callable[[int], object] | None, gate: LoadGate) -> Poll:
        """The first poll: list from the newest checkpoint (the version told to ``seen``),
        then load."""
        self._checkpoint = await newest_checkpoint(self.store)
        paths = await list_log(self.store, after_version=self._checkpoint)
        versions = [p.version for p in paths if p.kind is LogKind.COMMIT or p.is_checkpoint]
        if versions:
            self._listed = max(versions)
            if seen is not None:
                seen(self._listed)
        async with gate():
            self._snapshot = await load_snapshot(self.store)
        self._listed = None
        return Poll(self._snapshot, None, reloaded=True)

    def _new_commits(self, paths: list[LogPath], seen: Callable[[int], object] | None) -> list[int]:
        """The versions of the commits a listing shows (the newest told to ``seen``), its
        checkpoints noted."""
        for p in paths:
            if p.is_checkpoint:
                self.saw_checkpoint(p.version)
        commits = [p.version for p in paths if p.kind is LogKind.COMMIT]
        if commits and seen is not None:
            seen(commits[-1])
        return commits

    async def _poll_released(
        self, version: int, load: bool, seen: Callable[[int], object] | None, gate: LoadGate
    ) -> Poll:
        """One LIST after the released ``version``; a load when it shows a commit (or when
        asked)."""
        commits = self._new_commits(await list_log(self.store, after_version=version + 1), seen)
        if not load and not commits:
            return Poll(None, version, reloaded=False)
        async with gate():
            self._snapshot = await load_snapshot(self.store)
        self._released = None
        log.info(
            "snapshot_reloaded",
            table=self.store.root,
            version=self._snapshot.version,
            previous=version,
            reason="changed" if self._snapshot.version != version else "needed",
        )
        return Poll(self._snapshot, version, reloaded=True)
