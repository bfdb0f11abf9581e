"""Choose the files that make up a snapshot: newest usable checkpoint plus the commits after it.

Pure: takes a listing of ``_delta_log`` (already parsed into :class:`LogPath`) and returns a
:class:`LogSegment` whose invariants are checked when it is built (delta-protocol.md §1.8):
commits are contiguous, start right after the checkpoint (or at 0 without one) and end at the
requested version; a multi-part checkpoint is used only when every part is listed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from rlcd.delta.log_path import LogKind, LogPath
from rlcd.errors import CorruptLogError

__all__ = ("LogSegment", "build_segment")
__pure__ = True


@dataclass(frozen=True, slots=True)
class LogSegment:
    """The checkpoint files (none, one, or every part) and the commits to replay after them."""

    version: int
    checkpoint: tuple[LogPath, ...]
    commits: tuple[LogPath, ...]

    @property
    def checkpoint_version(self) -> int | None:
        return self.checkpoint[0].version if self.checkpoint else None


def _complete_checkpoints(paths: Iterable[LogPath], upto: int) -> dict[int, tuple[LogPath, ...]]:
    """version -> the files of one complete checkpoint at that version (at most ``upto``)."""
    singles: dict[int, LogPath] = {}
    parts: dict[tuple[int, int], dict[int, LogPath]] = defaultdict(dict)
    for p in paths:
        if p.version > upto or not p.is_checkpoint:
            continue
        if p.kind is LogKind.MULTIPART_CHECKPOINT:
            assert p.part is not None and p.parts is not None
            parts[(p.version, p.parts)][p.part] = p
        # A classic name wins over a UUID name at the same version: both hold the same state.
        elif p.version not in singles or p.kind is LogKind.CHECKPOINT:
            singles[p.version] = p
    found: dict[int, tuple[LogPath, ...]] = {v: (p,) for v, p in singles.items()}
    for (version, n), got in parts.items():
        if len(got) == n and version not in found:
            found[version] = tuple(got[i] for i in range(1, n + 1))
    return found


def build_segment(
    paths: Iterable[LogPath], *, table: str, version: int | None = None
) -> LogSegment:
    """The segment for ``version`` (the latest listed when None).

    Raises:
        CorruptLogError: no commit is listed, the version does not exist, or commits are missing
            between the checkpoint and the version.
    """
    paths = list(paths)
    commits = {p.version: p for p in paths if p.kind is LogKind.COMMIT}
    checkpoints = _complete_checkpoints(paths, version if version is not None else 2**63)
    latest = max([*commits, *checkpoints], default=None)
    if latest is None:
        raise CorruptLogError("no Delta log: _delta_log has no commit or checkpoint", table=table)
    target = latest if version is None else version
    if target > latest or target < 0:
        raise CorruptLogError(
            f"version {target} does not exist (latest is {latest})", table=table, version=target
        )
    usable = [v for v in checkpoints if v <= target]
    cp_version = max(usable, default=None)
    start = 0 if cp_version is None else cp_version + 1
    needed = range(start, target + 1)
    missing = [v for v in needed if v not in commits]
    if missing:
        shown = ", ".join(str(v) for v in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise CorruptLogError(
            f"log is not contiguous: commit(s) {shown} missing after "
            + ("no checkpoint" if cp_version is None else f"checkpoint {cp_version}"),
            table=table,
            version=target,
        )
    return LogSegment(
        version=target,
        checkpoint=checkpoints[cp_version] if cp_version is not None else (),
        commits=tuple(commits[v] for v in needed),
    )
