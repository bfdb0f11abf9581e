"""Which files a vacuum may delete: Delta's rules as Spark and delta-rs apply them. Pure.

Theory of operation (delta-protocol.md §2.12 on tombstones; Spark's ``VacuumCommand``):

- The *cutoff* is ``now - retention``. A tombstone whose ``deletionTimestamp`` is before the
  cutoff has *expired* (a missing timestamp counts as 0, as in Spark and delta-rs); every
  version a reader may still time-travel to was committed after it.
- The *valid* keys are those some version inside the window may read: every live file and its
  DV file, and every tombstone not yet expired and its DV file. A valid key is never deleted.
- *Lite* mode reads only the log: the candidates are the files (and DV files) of expired
  tombstones that are not valid, and the change data files (``cdc`` actions) of the commits
  read since the checkpoint, judged like full mode's listing once their age is known (Spark's
  lite mode deletes old ``_change_data`` files too). *Full* mode walks the table's listing:
  every object that is not valid, not hidden, and last modified before the cutoff (a writer in
  flight keeps its young files; so does a file removed from the log but written after the
  cutoff).
- *Hidden* follows Spark's ``DeltaTableUtils.isHiddenDirectory``, applied to every segment of a
  key: a name starting with ``_`` or ``.`` is hidden (``_delta_log``, ``_rlcd``, ``.crc`` files,
  ``_SUCCESS``), and so is ``metadata``, except ``_change_data`` and ``_delta_index`` (Delta's
  own data folders) and partition folders (``<column>=`` prefixes).
- A path the log names outside the table root (an absolute URI elsewhere, or a relative path
  with a ``..`` segment) is never a key to delete: it is reported, and the rest goes on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from rlcd.delta.actions import AddFile, RemoveFile
from rlcd.delta.intervals import parse_interval
from rlcd.delta.partitions import object_key

__all__ = (
    "RETENTION_PROPERTY",
    "DEFAULT_RETENTION",
    "Candidate",
    "Outside",
    "VacuumRules",
    "parse_interval",
    "parse_retain",
    "is_hidden",
)
__pure__ = True

RETENTION_PROPERTY: Final = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION: Final = "interval 1 week"

_SHORT = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_SHORT_MS: Final[Mapping[str, float]] = {
    "ms": 1,
    "s": 1_000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
}


def parse_retain(text: str) -> int:
    """Milliseconds in a ``--retain`` value: ``168h``, ``7d``, ``30m``, ``0h``, ``1w``,
    combinations (``1d12h``), or a Delta interval (``interval 1 week``).

    Raises:
        ValueError: neither form.
    """
    compact = text.lower().replace(" ", "")
    matches = list(_SHORT.finditer(compact))
    if matches and "".join(m.group(0) for m in matches) == compact:
        return int(sum(float(m.group(1)) * _SHORT_MS[m.group(2)] for m in matches))
    return parse_interval(text)


def is_hidden(key: str, partition_columns: Sequence[str]) -> bool:
    """Whether any segment of ``key`` is hidden from vacuum (module docstring)."""
    return any(_hidden_name(name, partition_columns) for name in key.split("/"))


def _hidden_name(name: str, partition_columns: Sequence[str]) -> bool:
    if name == "metadata":
        return True
    return (
        name.startswith(("_", "."))
        and not name.startswith(("_delta_index", "_change_data"))
        and not any(name.startswith(f"{column}=") for column in partition_columns)
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A key a vacuum deletes, with its size in bytes on storage."""

    key: str
    size: int


@dataclass(frozen=True, slots=True)
class Outside:
    """A path the log names that is not a key under the table root: never deleted."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class VacuumRules:
    """The rules for one table at one snapshot: the root, the partition columns, the cutoff
    (``now - retention``, milliseconds), the valid keys and the expired tombstones.

    Build with :meth:`of`; ask :meth:`listed` of each listed object (full mode) or take
    the keys of :meth:`lite_candidates`; :meth:`outside` names what the log points at elsewhere.
    """

    root: str
    partition_columns: tuple[str, ...]
    cutoff_ms: int
    valid: frozenset[str]
    expired: tuple[RemoveFile, ...]
    cdc_files: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        root: str,
        *,
        partition_columns: Sequence[str],
        files: Iterable[AddFile],
        tombstones: Iterable[RemoveFile],
        now_ms: int,
        retention_ms: int,
        cdc_files: Iterable[str] = (),
    ) -> VacuumRules:
        """The rules for live ``files``, ``tombstones`` and the change data files of the
        table at ``root``."""
        cutoff = now_ms - retention_ms
        valid: set[str] = set()
        expired: list[RemoveFile] = []

        def keep(action: AddFile | RemoveFile) -> None:
            for path in _paths(action):
                key = _key(root, path)
                if not isinstance(key, Outside):  # a live file elsewhere is no key of ours
                    valid.add(key)

        for add in files:
            keep(add)
        for tombstone in tombstones:
            if (tombstone.deletion_timestamp or 0) < cutoff:
                expired.append(tombstone)
            else:
                keep(tombstone)
        return cls(
            root,
            tuple(partition_columns),
            cutoff,
            frozenset(valid),
            tuple(expired),
            tuple(sorted(cdc_files)),
        )

    def listed(self, key: str, last_modified_ms: int) -> bool:
        """Whether full mode deletes a listed object."""
        return (
            last_modified_ms < self.cutoff_ms
            and key not in self.valid
            and not is_hidden(key, self.partition_columns)
        )

    def lite_candidates(self) -> list[str]:
        """The keys of the expired tombstones' files (data and DV) that no version in the
        window reads, each once, in log order, then those of the change data files; the
        caller has :meth:`listed` judge each again once its modification time is known."""
        found: dict[str, None] = {}
        paths = [path for tombstone in self.expired for path in _paths(tombstone)]
        for path in [*paths, *self.cdc_files]:
            key = _key(self.root, path)
            if isinstance(key, str) and self.listed(key, self.cutoff_ms - 1):
                found[key] = None
        return list(found)

    def reclaimable(self) -> list[Candidate]:
        """The expired tombstones' data files a lite vacuum would delete, each once, with the
        size its tombstone records (0 where it records none): what a vacuum would free, judged
        from the log alone (a file already deleted counts until a checkpoint drops its
        tombstone; a DV file's size is not in the log)."""
        found: dict[str, int] = {}
        for tombstone in self.expired:
            key = _key(self.root, tombstone.path)
            if isinstance(key, str) and key not in found and self.listed(key, self.cutoff_ms - 1):
                found[key] = tombstone.size or 0
        return [Candidate(key, size) for key, size in found.items()]

    def outside(self) -> list[Outside]:
        """The paths of expired tombstones that lie outside the table: reported, never
        deleted (delta-rs and Spark skip them the same way)."""
        found = (_key(self.root, path) for t in self.expired for path in _paths(t))
        return list({o.path: o for o in found if isinstance(o, Outside)}.values())


def _paths(action: AddFile | RemoveFile) -> list[str]:
    """The data file a file action names, then its DV file when it has one on storage."""
    paths = [action.path]
    dv = action.deletion_vector
    if dv is not None and dv.storage_type == "u":
        relative = dv.file_path()
        assert relative is not None
        paths.append(relative)
    elif dv is not None and dv.storage_type == "p":
        paths.append(dv.path_or_inline_dv)  # an absolute URI, still encoded like a file path
    return paths


def _key(root: str, path: str) -> str | Outside:
    """The store key of a path the log names, or why it is not one."""
    key = object_key(root, path)
    if key is None:
        return Outside(path, "an absolute path outside the table root")
    if key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        return Outside(path, "not a plain relative path under the table root")
    return key
