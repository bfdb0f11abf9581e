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
- The rules read the snapshot's columns (issue 40), never an object per file: tombstones are
  split by ``deletionTimestamp`` with Arrow compute, and the keys being judged (the expired
  tombstones' files, the change data files) are valid when ``is_in`` finds them among the kept
  files' keys. A path that is plainly relative (no escape, scheme, empty, ``.`` or ``..``
  segment: most are) is its own key; only the others are normalised in Python. A ``u`` DV's
  file is named by its descriptor, in Python, so only the DVs that may name a key being judged
  are: those whose ``pathOrInlineDv`` ends in the Z85 of the UUID of a key named like a DV
  file. Full mode, which lists every object anyway, makes the whole valid set once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.delta.dv import DeletionVectorDescriptor, z85_encode
from rlcd.delta.intervals import parse_interval
from rlcd.delta.partitions import object_key
from rlcd.errors import CorruptLogError

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

_STR = pa.string()
_INT = pa.int64()
_NOT_PLAIN = r"[%:]|^/|^$|//|/$|(^|/)\.\.?(/|$)"
"""A path that may not be its own key: an escape, a scheme, an empty, ``.`` or ``..`` segment
(one regex, so one pass over the paths)."""
_MAYBE_HIDDEN = r"(^|/)([_.]|metadata(/|$))"
"""A key :func:`is_hidden` may hide; no other is."""
_DV_NAME = (
    r"(?:^|/)deletion_vector_"
    r"(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.bin$"
)
"""The name :meth:`DeletionVectorDescriptor.file_path` gives a ``u`` DV's file."""
_UUID_CHARS: Final = 20
"""The Z85 of a UUID: the end of a ``u`` DV's ``pathOrInlineDv``."""


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


@dataclass(frozen=True, eq=False)
class VacuumRules:
    """The rules for one table at one snapshot: the root, the partition columns, the cutoff
    (``now - retention``, milliseconds), what some version in the window reads (``kept``: the
    ``path`` and ``deletion_vector`` of every live file and unexpired tombstone) and the
    expired tombstones (``expired``: also their ``size``), as Arrow tables.

    Build with :meth:`of`; take the keys of :meth:`lite_candidates` and judge each one's age
    with :meth:`old`, or ask :meth:`listed` of each listed object (full mode, after making
    :attr:`valid`); :meth:`reclaimable_bytes` sums what a vacuum would free; :meth:`outside`
    names what the log points at elsewhere.
    """

    root: str
    partition_columns: tuple[str, ...]
    cutoff_ms: int
    kept: pa.Table = field(repr=False)
    expired: pa.Table = field(repr=False)
    cdc_files: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        root: str,
        *,
        partition_columns: Sequence[str],
        files: pa.Table,
        tombstones: pa.Table,
        now_ms: int,
        retention_ms: int,
        cdc_files: Iterable[str] = (),
    ) -> VacuumRules:
        """The rules for the live ``files`` and the ``tombstones`` of a snapshot (its
        :attr:`~rlcd.delta.replay.Snapshot.adds` and ``tombstone_rows``) and the change data
        files of the table at ``root``. Arrow filters: no pass in Python over the files."""
        cutoff = now_ms - retention_ms
        expired = pc.less(pc.coalesce(tombstones["deletion_timestamp"], 0), cutoff)
        named = ["path", "deletion_vector"]
        kept = pa.concat_tables(
            [files.select(named), tombstones.filter(pc.invert(expired)).select(named)]
        )
        return cls(
            root,
            tuple(partition_columns),
            cutoff,
            kept,
            tombstones.filter(expired).select([*named, "size"]),
            tuple(sorted(cdc_files)),
        )

    def old(self, last_modified_ms: int) -> bool:
        """Whether an object last modified at ``last_modified_ms`` is older than the cutoff."""
        return last_modified_ms < self.cutoff_ms

    def listed(self, key: str, last_modified_ms: int) -> bool:
        """Whether full mode deletes a listed object."""
        return (
            self.old(last_modified_ms)
            and key not in self.valid
            and not is_hidden(key, self.partition_columns)
        )

    def lite_candidates(self) -> list[str]:
        """The keys of the expired tombstones' files (data and DV) that no version in the
        window reads and that are not hidden, each once, in log order, then those of the change
        data files; the caller keeps those :meth:`old` once their modification time is known."""
        keys = pc.drop_null(
            pa.concat_arrays([self._named_keys, _keys(self.root, pa.array(self.cdc_files, _STR))])
        )
        keys = keys.filter(pc.invert(pc.or_(self._valid_among(keys), self._hidden(keys))))
        return list(dict.fromkeys(keys.to_pylist()))

    def reclaimable_bytes(self) -> int:
        """The bytes of the expired tombstones' data files a lite vacuum would delete, each once
        at the size its first tombstone records (0 where it records none): what a vacuum would
        free, judged from the log alone (a file already deleted counts until a checkpoint drops
        its tombstone; a DV file's size is not in the log)."""
        keys = _keys(self.root, self.expired["path"])
        sizes = pa.table({"key": keys, "size": pc.coalesce(self.expired["size"], 0)})
        sizes = sizes.filter(keys.is_valid())
        gone = pc.invert(pc.or_(self._valid_among(sizes["key"]), self._hidden(sizes["key"])))
        first = sizes.filter(gone).group_by("key", use_threads=False).aggregate([("size", "first")])
        return int(pc.sum(first["size_first"]).as_py() or 0)

    def outside(self) -> list[Outside]:
        """The paths of expired tombstones (data and DV files) that lie outside the table:
        reported, never deleted (delta-rs and Spark skip them the same way)."""
        odd = pc.and_(self._named.is_valid(), self._named_keys.is_null())
        found = (_key(self.root, path) for path in self._named.filter(odd).to_pylist())
        return list({o.path: o for o in found if isinstance(o, Outside)}.values())

    @cached_property
    def _named(self) -> pa.Array:
        """The paths the expired tombstones name, in log order: each one's data file, then its
        DV file (null when it has none on storage)."""
        rows = self.expired.num_rows
        both = pa.concat_arrays(
            [self.expired["path"].combine_chunks(), _dv_paths(self.root, self.expired)]
        )
        return both.take(pa.array([i + half for i in range(rows) for half in (0, rows)], _INT))

    @cached_property
    def _named_keys(self) -> pa.Array:
        """The keys of :attr:`_named` (null where none, or outside the table)."""
        return _keys(self.root, self._named)

    @cached_property
    def valid(self) -> frozenset[str]:
        """Every key some version in the window reads, as strings: what :meth:`listed` judges
        a listing of the whole table by. Made on first use, a descriptor per DV: full mode's
        cost, which lists every object anyway; lite mode and :meth:`reclaimable_bytes` judge
        their few keys on the columns instead."""
        return frozenset(self._kept_keys(None).to_pylist())

    def _valid_among(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """Whether each of ``keys`` is one some version in the window reads."""
        return pc.is_in(keys, value_set=self._kept_keys(_uuid_suffixes(keys)))

    def _kept_keys(self, suffixes: pa.Array | None) -> pa.ChunkedArray:
        """The keys of the kept data files and of their DV files.

        A ``u`` DV's file is named by its descriptor (:meth:`DeletionVectorDescriptor.file_path`,
        Z85 decoded in Python); with ``suffixes``, only those whose ``pathOrInlineDv`` ends in
        one of them are, the others naming none of the keys being judged (their file names
        differ: the UUID's Z85 is the value's last 20 characters, one-to-one).
        """
        dv = self.kept["deletion_vector"]
        kind = pc.struct_field(dv, "storageType")
        u = pc.equal(kind, "u")
        if suffixes is not None:
            value = pc.struct_field(dv, "pathOrInlineDv")
            tail = pc.utf8_slice_codeunits(value, start=-_UUID_CHARS)
            u = pc.and_(u, pc.is_in(tail, value_set=suffixes))
        on_storage = pc.fill_null(pc.or_(u, pc.equal(kind, "p")), False)
        dv_keys = _keys(self.root, _dv_paths(self.root, self.kept.filter(on_storage)))
        data = _keys(self.root, self.kept["path"])
        return pc.drop_null(pa.chunked_array([*_chunks(data), _array(dv_keys)], _STR))

    def _hidden(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """:func:`is_hidden` of each key; in Python only for those a segment of which starts
        with ``_`` or ``.`` or is ``metadata`` (the others are never hidden)."""
        keys = _array(keys)
        maybe = pc.fill_null(pc.match_substring_regex(keys, _MAYBE_HIDDEN), False)
        if not pc.any(maybe).as_py():
            return maybe
        hidden = [is_hidden(k, self.partition_columns) for k in keys.filter(maybe).to_pylist()]
        return pc.replace_with_mask(maybe, maybe, pa.array(hidden, pa.bool_()))


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


def _array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _keys(root: str, paths: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`_key` of each path the log names, null for one that is no key (:class:`Outside`)
    or null. In Python only for the paths that are not plainly their own key (relative, no
    ``%`` escape, no ``:``, no empty, ``.`` or ``..`` segment): the others are returned as
    they are."""
    odd = pc.fill_null(pc.match_substring_regex(paths, _NOT_PLAIN), False)
    if not pc.any(odd).as_py():
        return paths
    paths, odd = _array(paths), _array(odd)
    found = (_key(root, path) for path in paths.filter(odd).to_pylist())
    keys = pa.array([k if isinstance(k, str) else None for k in found], _STR)
    return pc.replace_with_mask(paths, odd, keys)


def _dv_paths(root: str, rows: pa.Table) -> pa.Array:
    """The path of the DV file of each row (``path``, ``deletion_vector``) as the log names it,
    null for an inline DV or none: a ``u`` DV's from its descriptor
    (:meth:`DeletionVectorDescriptor.file_path`), a ``p`` DV's as written (an absolute URI,
    still encoded like a file path). A descriptor per row: for a few rows.

    Raises:
        CorruptLogError: a malformed descriptor (the table and the data file named).
    """
    found: list[str | None] = []
    for path, value in zip(
        rows["path"].to_pylist(), rows["deletion_vector"].to_pylist(), strict=True
    ):
        try:
            dv = None if value is None else DeletionVectorDescriptor.from_json(value)
        except ValueError as exc:
            raise CorruptLogError(str(exc), table=root, path=path) from exc
        if dv is not None and dv.storage_type == "u":
            found.append(dv.file_path())
        elif dv is not None and dv.storage_type == "p":
            found.append(dv.path_or_inline_dv)
        else:
            found.append(None)
    return pa.array(found, _STR)


def _uuid_suffixes(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The Z85 of the UUID of each key named like a ``u`` DV file
    (``[…/]deletion_vector_<uuid>.bin``): how the ``pathOrInlineDv`` of a DV naming that key
    ends."""
    names = pc.drop_null(_array(pc.extract_regex(keys, _DV_NAME)))
    uuids = pc.struct_field(names, "uuid").to_pylist()
    return pa.array([z85_encode(UUID(u).bytes) for u in uuids], _STR)


def _key(root: str, path: str) -> str | Outside:
    """The store key of a path the log names, or why it is not one."""
    key = object_key(root, path)
    if key is None:
        return Outside(path, "an absolute path outside the table root")
    if key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        return Outside(path, "not a plain relative path under the table root")
    return key
