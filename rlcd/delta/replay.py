"""Log replay: fold actions into a :class:`Snapshot`. Pure.

Rules (delta-protocol.md §1.9): the last ``protocol`` and ``metaData`` win; the last ``txn`` per
appId and ``domainMetadata`` per domain win (``removed`` deletes the domain); live files are keyed
by ``(path, DV unique id)``: an ``add`` replaces whatever add the path had, and a ``remove``
removes the live file only when its key matches exactly. Each remove is also kept as a
tombstone under the same key until an add of that key replaces it (Spark's in-memory replay):
vacuum reads their ``deletionTimestamp`` and DVs, and checkpoints carry them forward. The
paths of ``cdc`` actions read since the checkpoint are kept too (checkpoints hold none), for
vacuum's lite mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rlcd.delta.actions import (
    Action,
    AddCdcFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from rlcd.errors import CorruptLogError

__all__ = ("Snapshot", "replay", "canonical_path")
__pure__ = True


def canonical_path(path: str) -> str:
    """The replay key of a file path: absolute local paths in one spelling.

    Spark canonicalises paths to URIs during replay, so ``/x``, ``file:/x`` and ``file:///x`` name
    one file (fixture ``canonicalized-paths-special-a``); relative paths stay as written.
    """
    if path.startswith("/"):
        return "file://" + path
    if path.startswith("file:/") and not path.startswith("file://"):
        return "file://" + path[len("file:") :]
    return path


@dataclass(frozen=True)
class Snapshot:
    """The state of a table at one version.

    ``files`` maps the canonical path (:func:`canonical_path`) to the live add, in the order
    the paths first appeared in the log (the checkpoint's row order, then commit order).
    ``commit_info`` is the commitInfo of ``version`` itself when that commit was read, else None.
    ``tombstones`` maps ``(canonical path, DV unique id)`` to the latest remove of that key that
    no later add re-added (the checkpoint's and the commits'). ``cdc_files`` are the paths of
    the change data files the commits read since the checkpoint (or the log's start) name.
    """

    table: str
    version: int
    protocol: Protocol
    metadata: Metadata
    files: Mapping[str, AddFile]
    txns: Mapping[str, Txn] = field(default_factory=dict)
    domains: Mapping[str, DomainMetadata] = field(default_factory=dict)
    commit_info: CommitInfo | None = None
    tombstones: Mapping[tuple[str, str | None], RemoveFile] = field(default_factory=dict)
    cdc_files: frozenset[str] = frozenset()

    @property
    def in_commit_timestamp(self) -> int | None:
        return self.commit_info.in_commit_timestamp if self.commit_info is not None else None


class _Fold:
    """The mutable accumulator behind :func:`replay`."""

    def __init__(self, table: str, base: Snapshot | None) -> None:
        self.table = table
        self.version = base.version if base else -1
        self.protocol = base.protocol if base else None
        self.metadata = base.metadata if base else None
        self.files: dict[str, AddFile] = dict(base.files) if base else {}
        self.txns: dict[str, Txn] = dict(base.txns) if base else {}
        self.domains: dict[str, DomainMetadata] = dict(base.domains) if base else {}
        self.commit_info: CommitInfo | None = None
        self.tombstones: dict[tuple[str, str | None], RemoveFile] = (
            dict(base.tombstones) if base else {}
        )
        self.cdc_files: set[str] = set(base.cdc_files) if base else set()

    def apply(self, version: int, actions: Sequence[Action], *, checkpoint: bool) -> None:
        if version <= self.version:
            raise CorruptLogError(
                f"commit {version} replayed after {self.version}", table=self.table, version=version
            )
        self.version = version
        self.commit_info = None
        for action in actions:
            match action:
                case AddFile():
                    key = canonical_path(action.path)
                    self.files[key] = action
                    self.tombstones.pop((key, action.dv_unique_id), None)
                case RemoveFile():
                    key = canonical_path(action.path)
                    self.tombstones[key, action.dv_unique_id] = action
                    if checkpoint:
                        continue  # checkpoint tombstones never shadow a live add
                    live = self.files.get(key)
                    if live is not None and live.dv_unique_id == action.dv_unique_id:
                        del self.files[key]
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
                case AddCdcFile():
                    self.cdc_files.add(action.path)
                case CommitInfo():
                    if not checkpoint:
                        self.commit_info = action
                case _:
                    pass  # checkpoint-only and unknown actions do not change the state

    def snapshot(self) -> Snapshot:
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
            files=self.files,
            txns=self.txns,
            domains=self.domains,
            commit_info=self.commit_info,
            tombstones=self.tombstones,
            cdc_files=frozenset(self.cdc_files),
        )


def replay(
    table: str,
    commits: Iterable[tuple[int, Sequence[Action]]],
    *,
    base: Snapshot | None = None,
    checkpoint: tuple[int, Sequence[Action]] | None = None,
) -> Snapshot:
    """Fold a checkpoint (optional) and then commits, in version order, onto ``base``.

    Args:
        table: the table URI, for error messages.
        commits: ``(version, actions)`` pairs in ascending version order.
        base: an earlier snapshot to continue from (incremental update); not modified.
        checkpoint: ``(version, actions)`` of a checkpoint to start from instead of ``base``.
    """
    fold = _Fold(table, base)
    if checkpoint is not None:
        fold.apply(checkpoint[0], checkpoint[1], checkpoint=True)
    for version, actions in commits:
        fold.apply(version, actions, checkpoint=False)
    return fold.snapshot()
