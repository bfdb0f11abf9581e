"""Which files of ``_delta_log`` expired log cleanup may delete (issue 41). Pure.

The rule (Spark's metadata cleanup, ``delta.logRetentionDuration``, made safe for time travel):
the files that stay are those of the *kept* checkpoint, the newest complete checkpoint whose
files were all written at or before the cutoff (now minus the retention), and of every version
after it. A version inside the window is then read from that checkpoint or a later one, plus
the commits after it, all of which stay. Deleted: commits, checkpoints (any kind, complete or
not), checksums and log compactions ending before the kept checkpoint, each only when its own
modification time is at or before the cutoff. Never ``_last_checkpoint`` (it is no versioned
file), never the kept checkpoint, never the kept version's commit (a reader of an in-commit
timestamp table takes the version's timestamp from it).

The kept checkpoint is also no newer than the first commit written after the cutoff (clock
skew must not cut a version inside the window off from its checkpoint), and no newer than
``_last_checkpoint`` says (a reader that trusts the hint must find its checkpoint; without a
hint nothing is deleted, as in Spark). The commits from it to the latest must be contiguous:
a gap there is a corrupt log, and cleanup refuses it. Sidecars (V2) are deleted when no
checkpoint that stays names them and they are older than the cutoff, and only in a cleanup
that deleted a checkpoint (Spark's rule: an in-flight checkpoint's sidecars are young).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from rlcd.delta.log_path import LogKind, LogPath
from rlcd.errors import CorruptLogError

__all__ = ("LogFile", "ExpiredLog", "expired_log", "expired_sidecars", "sidecar_sources")
__pure__ = True


@dataclass(frozen=True, slots=True)
class LogFile:
    """A versioned file of the log as listed: its name and modification time (epoch ms)."""

    path: LogPath
    modified_ms: int


@dataclass(frozen=True, slots=True)
class ExpiredLog:
    """What a cleanup deletes: ``keys`` (oldest version first), below the checkpoint of
    ``kept`` (None: nothing has expired); ``checkpoints`` tells whether any is a checkpoint."""

    kept: int | None
    keys: tuple[str, ...]
    checkpoints: bool


NOTHING = ExpiredLog(None, (), False)


def _old_checkpoints(files: Iterable[LogFile], cutoff_ms: int) -> set[int]:
    """Versions with a complete checkpoint every file of which is at or before the cutoff."""
    singles: set[int] = set()
    parts: dict[tuple[int, int], list[LogFile]] = defaultdict(list)
    for f in files:
        p = f.path
        if p.kind is LogKind.MULTIPART_CHECKPOINT:
            assert p.parts is not None
            parts[(p.version, p.parts)].append(f)
        elif p.is_checkpoint and f.modified_ms <= cutoff_ms:
            singles.add(p.version)
    for (version, n), got in parts.items():
        if len({f.path.part for f in got}) == n and all(f.modified_ms <= cutoff_ms for f in got):
            singles.add(version)
    return singles


def _expired(p: LogPath, kept: int) -> bool:
    if p.kind is LogKind.COMPACTION:
        assert p.end_version is not None
        return p.end_version < kept
    return p.version < kept


def expired_log(
    files: Sequence[LogFile], *, cutoff_ms: int, hinted: int | None, table: str
) -> ExpiredLog:
    """The files of a listing of ``_delta_log`` that cleanup deletes with ``cutoff_ms``
    (now minus the log retention), given the version ``_last_checkpoint`` names.

    Raises:
        CorruptLogError: commits are missing between the kept checkpoint and the latest.
    """
    if hinted is None:
        return NOTHING
    commits = {f.path.version: f for f in files if f.path.kind is LogKind.COMMIT}
    young = min((v for v, f in commits.items() if f.modified_ms > cutoff_ms), default=None)
    bound = hinted if young is None else min(hinted, young)
    kept = max((v for v in _old_checkpoints(files, cutoff_ms) if v <= bound), default=None)
    if kept is None:
        return NOTHING
    missing = [v for v in range(kept + 1, max(commits, default=kept) + 1) if v not in commits]
    if missing:
        raise CorruptLogError(
            f"log is not contiguous: commit {missing[0]} is missing after checkpoint {kept}; "
            "expired log cleanup deletes nothing",
            table=table,
            version=missing[0],
        )
    doomed = sorted(
        (f.path for f in files if _expired(f.path, kept) and f.modified_ms <= cutoff_ms),
        key=lambda p: (p.version, p.name),
    )
    return ExpiredLog(kept, tuple(p.key for p in doomed), any(p.is_checkpoint for p in doomed))


def sidecar_sources(files: Iterable[LogFile], kept: int) -> list[LogPath]:
    """The checkpoints that stay and may name sidecars (single files, V2 or classic-named)."""
    return [
        f.path
        for f in files
        if f.path.version >= kept and f.path.kind in (LogKind.CHECKPOINT, LogKind.UUID_CHECKPOINT)
    ]


def expired_sidecars(
    sidecars: Iterable[tuple[str, int]], referenced: Collection[str], *, cutoff_ms: int
) -> list[str]:
    """The sidecar names (``(name, modified_ms)``) no checkpoint that stays ``referenced``
    and written at or before the cutoff."""
    return sorted(n for n, ms in sidecars if n not in referenced and ms <= cutoff_ms)
