"""Which of rlcd's own files a killed or failed run left behind. Pure: listings in, a verdict
out; :mod:`rlcd.compaction.cleanup` does the listing, the log reading and the deleting.

A run killed mid-write leaves unfinished writes (S3 multipart uploads, local temp files); one
killed between writing and committing leaves complete outputs no commit names. Neither is ever
read, and no Delta vacuum removes them: vacuum only deletes what it finds unreferenced *and*
older than its retention, and an unfinished upload is not even listed. rlcd removes them
itself, under three rules:

- **only its own**: a data or DV file whose name carries an rlcd UUID
  (:func:`rlcd.delta.names.rlcd_file_uuid`), an unfinished upload to such a name, or a temp file
  the backend named (``rlcd_named``); another writer's file is never touched, whatever its age;
- **only when old**: past the grace period (default an hour) since it was written or the upload
  began, so a run still writing or about to commit keeps its files. The grace must exceed the
  longest time a run of rlcd holds an uncommitted output;
- **never a referenced file**: a path any commit, log compaction, checkpoint part or sidecar
  still in ``_delta_log`` names, as an add, a remove, a CDC file or a DV file, is kept, live or
  tombstoned (time travel may still read it; vacuum decides its fate).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rlcd.delta.dv.descriptor import DeletionVectorDescriptor
from rlcd.delta.log_path import LOG_DIR, SIDECAR_DIR, LogKind, LogPath
from rlcd.delta.names import rlcd_file_uuid
from rlcd.delta.partitions import decode_uri_path, object_key
from rlcd.storage.base import ObjectMeta, PendingUpload

__all__ = (
    "DEFAULT_GRACE_S",
    "FileReference",
    "is_own_file",
    "is_own_upload",
    "expired_upload",
    "expired_file",
    "log_file_format",
    "json_references",
    "References",
    "referenced",
    "unreferenced",
)
__pure__ = True

DEFAULT_GRACE_S = 3600.0
"""How old a leftover must be before it is removed: one hour."""

_STAGED_DIR = f"{LOG_DIR}/_staged_commits"

FileReference = tuple[str, Mapping[str, Any] | None]
"""A path as a log action writes it, and the ``deletionVector`` object it carries (if any)."""


def _name(key: str) -> str:
    return key.rpartition("/")[2]


def is_own_file(key: str) -> bool:
    """A data or DV file rlcd named, outside ``_delta_log``."""
    return not key.startswith(f"{LOG_DIR}/") and rlcd_file_uuid(_name(key)) is not None


def is_own_upload(upload: PendingUpload) -> bool:
    """An unfinished write of rlcd's: a temp file the backend named, or an upload to a name
    rlcd gives its files."""
    return upload.rlcd_named or rlcd_file_uuid(_name(upload.key)) is not None


def expired_upload(upload: PendingUpload, *, now_ms: int, grace_s: float) -> bool:
    """An unfinished write of rlcd's begun at least ``grace_s`` before ``now_ms``. It needs no
    log check: an unfinished write is no object yet, so no commit can name it."""
    return is_own_upload(upload) and now_ms - upload.initiated_ms >= grace_s * 1000


def expired_file(meta: ObjectMeta, *, now_ms: int, grace_s: float) -> bool:
    """A file of rlcd's written at least ``grace_s`` before ``now_ms``: a candidate, which the
    log must then clear (:func:`unreferenced`)."""
    return is_own_file(meta.key) and now_ms - meta.last_modified_ms >= grace_s * 1000


def log_file_format(key: str) -> Literal["json", "parquet"] | None:
    """How to read a ``_delta_log`` file that can reference data files, or None for one that
    cannot (checksums, ``_last_checkpoint``, other writers' temp files).

    Commits, log compactions and checkpoints (classic, multi-part, V2) in the log directory;
    V2 sidecars; and staged commits, which a coordinator may still ratify.
    """
    directory, _, name = key.rpartition("/")
    if directory == LOG_DIR:
        parsed = LogPath.parse(name)
        if parsed is None or parsed.kind is LogKind.CHECKSUM:
            return None
        if parsed.kind in (LogKind.COMMIT, LogKind.COMPACTION):
            return "json"
        return "json" if parsed.fmt == "json" else "parquet"
    if directory in (SIDECAR_DIR, _STAGED_DIR) and not name.startswith("."):
        if name.endswith(".parquet"):
            return "parquet"
        if name.endswith(".json"):
            return "json"
    return None


_FILE_ACTIONS = ("add", "remove", "cdc")


def json_references(data: bytes | bytearray) -> Iterator[FileReference]:
    """The files a JSON log file (commit, log compaction, V2 checkpoint or sidecar) names.

    Deliberately lenient about everything but the paths: a commit rlcd could not replay still
    protects the files it names.

    Raises:
        ValueError: a line is not JSON (the caller then removes nothing).
    """
    for line in data.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError(f"a log line is not a JSON object: {line[:80]!r}")
        for kind in _FILE_ACTIONS:
            action = obj.get(kind)
            if isinstance(action, dict) and isinstance(action.get("path"), str):
                dv = action.get("deletionVector")
                yield action["path"], dv if isinstance(dv, Mapping) else None


def _dv_path(dv: Mapping[str, Any]) -> str | None:
    descriptor = DeletionVectorDescriptor.from_json(dv)
    return (
        descriptor.path_or_inline_dv if descriptor.storage_type == "p" else descriptor.file_path()
    )


@dataclass(frozen=True, slots=True)
class References:
    """The files the log names: their store keys, and their decoded base names.

    rlcd's names hold 96 random bits, so a reference with the same base name is a reference to
    the same file, whatever form its path takes (absolute, another scheme, another encoding):
    a file is kept when either matches.
    """

    keys: frozenset[str]
    names: frozenset[str]

    def name(self, key: str) -> bool:
        """Whether the log names the file at ``key``."""
        return key in self.keys or _name(key) in self.names


def referenced(root: str, references: Iterable[FileReference]) -> References:
    """What the references (paths as the log writes them) name under ``root``.

    Raises:
        ValueError: a path does not decode or a DV descriptor is malformed (the caller then
            removes nothing).
    """
    keys: set[str] = set()
    names: set[str] = set()
    for path, dv in references:
        dv_path = _dv_path(dv) if dv is not None else None
        for each in (path,) if dv_path is None else (path, dv_path):
            names.add(_name(decode_uri_path(each)))
            key = object_key(root, each)
            if key is not None:
                keys.add(key)
    return References(frozenset(keys), frozenset(names))


def unreferenced(candidates: Iterable[ObjectMeta], refs: References) -> tuple[ObjectMeta, ...]:
    """The candidates no log file names: the orphans to delete."""
    return tuple(m for m in candidates if not refs.name(m.key))
