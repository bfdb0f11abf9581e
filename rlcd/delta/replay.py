"""Log replay: fold actions into a :class:`Snapshot`. Pure.

Rules (delta-protocol.md §1.9): the last ``protocol`` and ``metaData`` win; the last ``txn`` per
appId and ``domainMetadata`` per domain win (``removed`` deletes the domain); live files are keyed
by ``(path, DV unique id)``: an ``add`` replaces whatever add the path had, and a ``remove``
removes the live file only when its key matches exactly. Each remove is also kept as a
tombstone under the same key until an add of that key replaces it (Spark's in-memory replay):
vacuum reads their ``deletionTimestamp`` and DVs, and checkpoints carry them forward.

The file actions are replayed on Arrow tables (:mod:`rlcd.delta._columnar`, issue 40): a
snapshot holds its live files and tombstones as tables, and makes :class:`AddFile` objects only
for the rows a caller asks for. The other actions are few and folded as objects here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import pyarrow as pa

from rlcd.delta._columnar import (
    ADD_SCHEMA,
    TOMBSTONE_SCHEMA,
    BatchIndex,
    CanonicalPaths,
    FileActions,
    ReplayedFiles,
    add_files,
    canonical_path,
    file_actions_of,
    replay_files,
    rows_of_paths,
    take_rows,
)
from rlcd.delta.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Txn,
)
from rlcd.errors import CorruptLogError, InternalError

__all__ = ("Snapshot", "replay", "replay_columns", "canonical_path")
__pure__ = True

# measured with tracemalloc on bench/snapshot.py's 100k-file table (1.2 KiB)
_ADD_OBJECT_BYTES = 1280
_ACTION_BYTES = 1024
"""A protocol, metaData (besides its schema string), txn or domainMetadata object: a rough
bound; they are few."""


@dataclass(frozen=True)
class Snapshot:
    """The state of a table at one version.

    ``adds`` holds one row per live file (:data:`rlcd.delta._columnar.ADD_SCHEMA`; paths unique
    by :func:`canonical_path`), in the order the paths first appeared in the log (the
    checkpoint's row order, then commit order); ``tombstone_rows`` one row per
    ``(canonical path, DV unique id)`` key whose latest remove no later add re-added
    (:data:`rlcd.delta._columnar.TOMBSTONE_SCHEMA`). Hot paths (the planner, the daemon's
    counts, vacuum, the checkpoint writer) read these columns; :attr:`files` and
    :meth:`live_files` make objects. ``commit_info`` is the commitInfo of ``version`` itself
    when that commit was read, else None. ``paths`` are the rows' canonical paths as the replay
    carries them to the next update (None: not known, spelled again when needed).
    """

    table: str
    version: int
    protocol: Protocol
    metadata: Metadata
    adds: pa.Table = field(default_factory=ADD_SCHEMA.empty_table, repr=False)
    tombstone_rows: pa.Table = field(default_factory=TOMBSTONE_SCHEMA.empty_table, repr=False)
    paths: CanonicalPaths | None = field(default=None, repr=False, compare=False)
    txns: Mapping[str, Txn] = field(default_factory=dict)
    domains: Mapping[str, DomainMetadata] = field(default_factory=dict)
    commit_info: CommitInfo | None = None

    @property
    def in_commit_timestamp(self) -> int | None:
        return self.commit_info.in_commit_timestamp if self.commit_info is not None else None

    @property
    def num_files(self) -> int:
        """The number of live files (no objects made)."""
        return int(self.adds.num_rows)

    def held_bytes(self) -> int:
        """About what holding this snapshot costs, in bytes (the daemon's ``snapshot_memory``
        budget): its Arrow buffers, each counted once (a slice holds its whole buffer), and an
        estimate for its Python objects: the few actions, and :attr:`files` once made. Cheap:
        no pass over the rows."""
        adds, tombstones = self.adds, self.tombstone_rows
        if self.paths is not None and self.paths.adds is not None:
            adds = adds.append_column("canonical_path", self.paths.adds)
        if self.paths is not None and self.paths.tombstones is not None:
            tombstones = tombstones.append_column("canonical_path", self.paths.tombstones)
        held: int = adds.get_total_buffer_size() + tombstones.get_total_buffer_size()
        made = vars(self)  # the cached properties, once made
        held += len(made.get("files", ())) * _ADD_OBJECT_BYTES
        held += len(self.metadata.schema_string)
        return held + _ACTION_BYTES * (2 + len(self.txns) + len(self.domains))

    @cached_property
    def files(self) -> Mapping[str, AddFile]:
        """Every live file as an object, by canonical path, in :attr:`adds` order.

        Costs an :class:`AddFile` per live file, made on first use and then held: about 10 µs
        and 1-2 KiB each, seconds and gigabytes at a million files. For the paths that need
        every file (verify, delete by predicate, the demos); the planner, vacuum, the
        checkpoint writer and the daemon read :attr:`adds`, and a few files are
        :meth:`live_files`.
        """
        return {canonical_path(a.path): a for a in add_files(self.adds)}

    @cached_property
    def _add_batches(self) -> BatchIndex:
        return BatchIndex(self.adds)

    def files_at(self, rows: Sequence[int]) -> list[AddFile]:
        """The live files at these rows of :attr:`adds`, in that order: objects for those only
        (a plan's bins), at a cost in proportion to them (the batches are indexed once)."""
        return add_files(self._add_batches.take(rows))

    def keys_at(self, rows: Sequence[int]) -> tuple[list[str], list[str | None]]:
        """The paths and DV unique ids (the replay keys) of the live files at these rows of
        :attr:`adds`, in that order: two lists, no object per file (a plan's bin ids)."""
        taken = take_rows(self.adds.select(["path", "dv_unique_id"]), rows)
        return taken["path"].to_pylist(), taken["dv_unique_id"].to_pylist()

    def live_files(self, paths: Iterable[str]) -> dict[str, AddFile]:
        """The live files among ``paths``, by canonical path: objects for those rows only, at
        the cost of one pass over the path column."""
        if self.paths is None:
            keys = None
        else:
            keys = self.adds["path"] if self.paths.adds is None else self.paths.adds
        return {canonical_path(a.path): a for a in add_files(rows_of_paths(self.adds, paths, keys))}


class _Fold:
    """The accumulator of the actions that are not file actions, behind :func:`replay`."""

    def __init__(self, table: str, base: Snapshot | None) -> None:
        self.table = table
        self.version = base.version if base else -1
        self.protocol = base.protocol if base else None
        self.metadata = base.metadata if base else None
        self.txns: dict[str, Txn] = dict(base.txns) if base else {}
        self.domains: dict[str, DomainMetadata] = dict(base.domains) if base else {}
        self.commit_info: CommitInfo | None = None

    def apply(self, version: int, actions: Sequence[Action], *, checkpoint: bool) -> None:
        if version <= self.version:
            raise CorruptLogError(
                f"commit {version} replayed after {self.version}", table=self.table, version=version
            )
        self.version = version
        self.commit_info = None
        for action in actions:
            match action:
                case Metadata():
                    self.metadata = action
                case Protocol():
                    self.protocol = action
                case Txn():
                    self.txns[action.app_id] = action
                case DomainMetadata():
                    if action.removed:
                        self.domains.pop(action.domain, None)
                    else:
                        self.domains[action.domain] = action
                case CommitInfo():
                    if not checkpoint:
                        self.commit_info = action
                case _:
                    pass  # file actions are replayed on columns; the rest change nothing

    def snapshot(self, files: ReplayedFiles) -> Snapshot:
        if self.protocol is None or self.metadata is None:
            missing = "protocol" if self.protocol is None else "metaData"
            raise CorruptLogError(
                f"the log has no {missing} action", table=self.table, version=self.version
            )
        return Snapshot(
            table=self.table,
            version=self.version,
            protocol=self.protocol,
            metadata=self.metadata,
            adds=files.adds,
            tombstone_rows=files.tombstones,
            paths=files.paths,
            txns=self.txns,
            domains=self.domains,
            commit_info=self.commit_info,
        )


def replay(
    table: str,
    commits: Iterable[tuple[int, Sequence[Action]]],
    *,
    base: Snapshot | None = None,
    checkpoint: tuple[int, Sequence[Action]] | None = None,
) -> Snapshot:
    """Fold a checkpoint (optional, as objects) and then commits, in version order, onto
    ``base``; see :func:`replay_columns`."""
    files = None if checkpoint is None else (checkpoint[0], [file_actions_of(checkpoint[1])])
    return replay_columns(table, commits, base=base, checkpoint=files)


def replay_columns(
    table: str,
    commits: Iterable[tuple[int, Sequence[Action]]],
    *,
    base: Snapshot | None = None,
    checkpoint: tuple[int, Sequence[FileActions]] | None = None,
) -> Snapshot:
    """Fold a checkpoint (optional) and then commits, in version order, onto ``base``.

    Args:
        table: the table URI, for error messages.
        commits: ``(version, actions)`` pairs in ascending version order.
        base: an earlier snapshot to continue from (incremental update: the cost is in
            proportion to the commits); not modified.
        checkpoint: the version and files (:class:`FileActions`) of a checkpoint to start from
            instead of ``base``.
    """
    if base is not None and checkpoint is not None:
        raise InternalError("a replay starts from a snapshot or from a checkpoint, not both")
    commits = list(commits)
    fold = _Fold(table, base)
    start: list[FileActions] | ReplayedFiles = []
    if checkpoint is not None:
        version, start = checkpoint[0], list(checkpoint[1])
        fold.apply(version, [a for f in start for a in f.others], checkpoint=True)
    elif base is not None:
        start = _files_of(base)
    for version, actions in commits:
        fold.apply(version, actions, checkpoint=False)
    return fold.snapshot(replay_files(start, commits))


def _files_of(snapshot: Snapshot) -> ReplayedFiles:
    """A snapshot's files as a replay's starting state, its paths spelled if not held."""
    if snapshot.paths is None:
        return replay_files([FileActions(snapshot.adds, snapshot.tombstone_rows, ())], [])
    return ReplayedFiles(snapshot.adds, snapshot.tombstone_rows, snapshot.paths)
