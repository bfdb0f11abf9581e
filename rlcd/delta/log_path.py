"""Names of the files in ``_delta_log``: parsed once into :class:`LogPath`. Pure.

Grammar (delta-protocol.md §1.1): commits ``%020d.json``; classic checkpoints
``%020d.checkpoint.parquet``; multi-part ``%020d.checkpoint.%010d.%010d.parquet``; UUID-named
(V2) ``%020d.checkpoint.<uuid>.(json|parquet)``; log compactions ``%020d.%020d.compacted.json``;
checksums ``%020d.crc``. Anything else (``_last_checkpoint``, ``.tmp/``, hidden files, sidecars)
is not a versioned log file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ("LogKind", "LogPath", "commit_name", "LOG_DIR", "LAST_CHECKPOINT", "SIDECAR_DIR")
__pure__ = True

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
SIDECAR_DIR = f"{LOG_DIR}/_sidecars"


class LogKind(Enum):
    COMMIT = "commit"
    CHECKPOINT = "checkpoint"  # classic single file
    MULTIPART_CHECKPOINT = "multipart_checkpoint"
    UUID_CHECKPOINT = "uuid_checkpoint"
    COMPACTION = "compaction"
    CHECKSUM = "checksum"


_PATTERNS: tuple[tuple[LogKind, re.Pattern[str]], ...] = (
    (LogKind.COMMIT, re.compile(r"(\d{20})\.json")),
    (LogKind.CHECKPOINT, re.compile(r"(\d{20})\.checkpoint\.parquet")),
    (
        LogKind.MULTIPART_CHECKPOINT,
        re.compile(r"(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet"),
    ),
    (LogKind.UUID_CHECKPOINT, re.compile(r"(\d{20})\.checkpoint\.([^.]+)\.(json|parquet)")),
    (LogKind.COMPACTION, re.compile(r"(\d{20})\.(\d{20})\.compacted\.json")),
    (LogKind.CHECKSUM, re.compile(r"(\d{20})\.crc")),
)


@dataclass(frozen=True, slots=True)
class LogPath:
    """One versioned file of the log.

    ``part``/``parts`` are set for multi-part checkpoints only; ``fmt`` is ``"json"`` or
    ``"parquet"`` for checkpoints; ``end_version`` is set for log compactions only.
    """

    name: str
    version: int
    kind: LogKind
    part: int | None = None
    parts: int | None = None
    fmt: str | None = None
    end_version: int | None = None

    @classmethod
    def parse(cls, name: str) -> LogPath | None:
        """The parsed name (a basename, not a key), or None when it is not a log file."""
        for kind, pattern in _PATTERNS:
            m = pattern.fullmatch(name)
            if m is None:
                continue
            version = int(m.group(1))
            if kind is LogKind.MULTIPART_CHECKPOINT:
                part, parts = int(m.group(2)), int(m.group(3))
                if not 1 <= part <= parts:
                    return None
                return cls(name, version, kind, part=part, parts=parts, fmt="parquet")
            if kind is LogKind.UUID_CHECKPOINT:
                return cls(name, version, kind, fmt=m.group(3))
            if kind is LogKind.CHECKPOINT:
                return cls(name, version, kind, fmt="parquet")
            if kind is LogKind.COMPACTION:
                return cls(name, version, kind, end_version=int(m.group(2)))
            return cls(name, version, kind)
        return None

    @property
    def key(self) -> str:
        """The object key relative to the table root."""
        return f"{LOG_DIR}/{self.name}"

    @property
    def is_checkpoint(self) -> bool:
        return self.kind in (
            LogKind.CHECKPOINT,
            LogKind.MULTIPART_CHECKPOINT,
            LogKind.UUID_CHECKPOINT,
        )


def commit_name(version: int) -> str:
    """The key of the commit file for ``version``."""
    return f"{LOG_DIR}/{version:020d}.json"
