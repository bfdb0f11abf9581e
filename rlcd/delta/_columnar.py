"""Log replay on Arrow: the live files of a snapshot as one table, not a Python object per file.

Pure: the loader (:mod:`rlcd.delta._columnar_load`) reads the files, this interprets them.

Theory of operation (issue 40; replay rules of delta-protocol.md §1.9, as :mod:`rlcd.delta.replay`
applies them to objects):

- A checkpoint's ``add`` and ``remove`` columns are read with a projection (:func:`projection`)
  and flattened into :data:`ADD_SCHEMA` / :data:`TOMBSTONE_SCHEMA` tables. Checkpoint removes are
  tombstones only: they never shadow a checkpoint add.
- The JSON commits after the checkpoint are few. Their file actions are parsed by the validated
  commit parser (:func:`rlcd.delta.actions.parse_commit`) and folded as objects, but only for the
  paths they touch: the rows of such paths are found by ``is_in`` on the canonical path and
  only their keys (path, DV id) are folded with them. A row whose path stays live throughout
  and that no commit adds again is left as it is; an add the fold leaves live takes the place
  of its path's row when the path stayed live throughout, and is appended otherwise, so the rows
  keep the object replay's order (first appearance in the log). The cost is in proportion to
  the commits, not the table: an incremental update
  (:func:`rlcd.delta.replay.replay` with a base) folds only the paths its commits touch, finds
  them with one ``is_in`` over the canonical paths the last replay carried
  (:class:`CanonicalPaths`), and takes and splices rows a record batch at a time (never
  ``Table.take`` or a filter, which copy the whole table).
- Within the fold the rules of :mod:`rlcd.delta.replay` hold: an ``add`` replaces the path's live
  add; a ``remove`` removes it only when its ``(path, DV unique id)`` key matches. Tombstones are
  keyed by ``(path, DV unique id)``, the newest action wins, and an ``add`` of the same key
  supersedes one.
- ``num_records`` is parsed from the stats text by one anchored regex over the column
  (``{"numRecords":N`` is how Spark, delta-rs and rlcd start their stats); only rows it does not
  match go through ``json``. Checkpoints written with ``stats_parsed`` and no stats text get
  their text built as :mod:`rlcd.delta._checkpoint` does, for those rows only.
- :func:`add_files` turns a few rows back into :class:`AddFile` objects straight from the
  columns (no row parser per file: the schema's types are its type checks), equal to what the
  checkpoint row parser makes of them (unknown JSON members, ``extra``, are not kept by the
  projection).
- :class:`rlcd.delta.replay.Snapshot` holds the result; this module knows nothing of it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.delta._checkpoint import checkpoint_actions
from rlcd.delta.actions import (
    Action,
    ActionError,
    AddFile,
    RemoveFile,
)
from rlcd.delta.dv.descriptor import DeletionVectorDescriptor
from rlcd.delta.stats_json import stats_json

__all__ = (
    "ADD_SCHEMA",
    "TOMBSTONE_SCHEMA",
    "canonical_path",
    "FileActions",
    "projection",
    "checkpoint_file_actions",
    "needs_stats_parsed",
    "file_actions_of",
    "CanonicalPaths",
    "ReplayedFiles",
    "replay_files",
    "add_files",
    "remove_files",
    "rows_of_paths",
    "take_rows",
    "BatchIndex",
)
__pure__ = True

_DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int64()),
        ("sizeInBytes", pa.int64()),
        ("cardinality", pa.int64()),
    ]
)
_STRING_MAP = pa.map_(pa.string(), pa.string())

# (column, checkpoint/JSON field, type) of a live add, in table order
_ADD_FIELDS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("path", "path", pa.string()),
    ("partition_values", "partitionValues", _STRING_MAP),
    ("size", "size", pa.int64()),
    ("modification_time", "modificationTime", pa.int64()),
    ("data_change", "dataChange", pa.bool_()),
    ("stats", "stats", pa.string()),
    ("tags", "tags", _STRING_MAP),
    ("deletion_vector", "deletionVector", _DV_TYPE),
    ("base_row_id", "baseRowId", pa.int64()),
    ("default_row_commit_version", "defaultRowCommitVersion", pa.int64()),
    ("clustering_provider", "clusteringProvider", pa.string()),
)
# those of a remove that checkpoints keep (delta-protocol.md: no ``stats``, no ``tags``)
_TOMBSTONE_FIELDS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("path", "path", pa.string()),
    ("deletion_timestamp", "deletionTimestamp", pa.int64()),
    ("data_change", "dataChange", pa.bool_()),
    ("extended_file_metadata", "extendedFileMetadata", pa.bool_()),
    ("partition_values", "partitionValues", _STRING_MAP),
    ("size", "size", pa.int64()),
    ("deletion_vector", "deletionVector", _DV_TYPE),
    ("base_row_id", "baseRowId", pa.int64()),
    ("default_row_commit_version", "defaultRowCommitVersion", pa.int64()),
)
_DERIVED = (("num_records", pa.int64()), ("dv_unique_id", pa.string()))

ADD_SCHEMA = pa.schema([(name, typ) for name, _, typ in _ADD_FIELDS] + list(_DERIVED))
"""The live adds: the add's fields (snake_case), then ``num_records`` (from the stats) and
``dv_unique_id`` (half the replay key; null without a DV)."""
TOMBSTONE_SCHEMA = pa.schema([(name, typ) for name, _, typ in _TOMBSTONE_FIELDS])
"""The tombstones: what VACUUM and the next checkpoint need of a remove."""

_NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata")
_NUM_RECORDS = r'^\{"numRecords":(?P<n>0|[1-9][0-9]{0,17})[,}]'


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


def projection(schema: pa.Schema) -> list[str]:
    """The checkpoint columns replay reads, of those ``schema`` (a checkpoint or sidecar file's)
    has: every leaf of the non-file actions and the sidecar, and of ``add``/``remove`` only the
    fields the live set and the tombstones keep (and ``stats_parsed.numRecords``, to tell
    whether the stats text must be built from ``stats_parsed``)."""
    names = set(schema.names)
    columns = [name for name in (*_NON_FILE_COLUMNS, "sidecar") if name in names]
    for action, fields in (("add", _ADD_FIELDS), ("remove", _TOMBSTONE_FIELDS)):
        if action not in names:
            continue
        typ = schema.field(action).type
        present = {typ.field(i).name for i in range(typ.num_fields)}
        columns += [f"{action}.{src}" for _, src, _ in fields if src in present]
        if action == "add" and "stats_parsed" in present:
            columns.append("add.stats_parsed.numRecords")
    return columns


def _flatten(
    column: pa.Array | pa.ChunkedArray, fields: Sequence[tuple[str, str, pa.DataType]]
) -> dict[str, pa.Array]:
    """The rows of an action struct column where it is set, one array per field (cast to the
    schema's type; absent fields all null)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        array = array.filter(array.is_valid())
    typ = array.type
    present = {typ.field(i).name for i in range(typ.num_fields)}
    out: dict[str, pa.Array] = {}
    for name, src, target in fields:
        if src not in present:
            out[name] = pa.nulls(len(array), target)
        elif src == "deletionVector":
            out[name] = _dv_array(array.field(src))
        else:
            out[name] = array.field(src).cast(target)
    return out


def _dv_array(dv: pa.Array) -> pa.Array:
    """A DV struct column in :data:`_DV_TYPE` (Spark's transient ``maxRowIndex`` dropped)."""
    children = [dv.field(name).cast(typ) for name, typ in ((f.name, f.type) for f in _DV_TYPE)]
    return pa.StructArray.from_arrays(children, fields=list(_DV_TYPE), mask=dv.is_null())


def _dv_unique_id(dv: pa.Array) -> pa.Array:
    """``storageType + pathOrInlineDv [+ "@" + offset]`` per row, null without a DV (§0.2)."""
    base = pc.binary_join_element_wise(dv.field("storageType"), dv.field("pathOrInlineDv"), "")
    offset = dv.field("offset")
    with_offset = pc.binary_join_element_wise(base, offset.cast(pa.string()), "@")
    uid = pc.if_else(offset.is_valid(), with_offset, base)
    return pc.if_else(dv.is_valid(), uid, pa.scalar(None, pa.string()))


def _num_records(stats: pa.Array) -> pa.Array:
    """``numRecords`` of each stats text, as :attr:`AddFile.num_records` reads it."""
    found = pc.extract_regex(stats, _NUM_RECORDS).flatten()[0].cast(pa.int64())  # nulls kept
    slow = pc.and_(found.is_null(), stats.is_valid())
    if not pc.any(slow).as_py():
        return found
    texts = stats.filter(slow).to_pylist()
    parsed = pa.array([AddFile(path="", stats=t).num_records for t in texts], pa.int64())
    return pc.replace_with_mask(found, slow, parsed)


def _adds_table(columns: dict[str, pa.Array]) -> pa.Table:
    columns["num_records"] = _num_records(columns["stats"])
    columns["dv_unique_id"] = _dv_unique_id(columns["deletion_vector"])
    return pa.table(columns, schema=ADD_SCHEMA)


@dataclass(frozen=True)
class FileActions:
    """The file actions of one checkpoint file: live adds and tombstones as tables, and the
    other actions (few) as objects."""

    adds: pa.Table
    tombstones: pa.Table
    others: Sequence[Action]


def checkpoint_file_actions(table: pa.Table, stats_parsed: pa.Table | None = None) -> FileActions:
    """A checkpoint or sidecar file read with :func:`projection`, as tables and objects.

    Args:
        table: the file's projected columns.
        stats_parsed: the file's ``add.stats_parsed`` column, when :func:`needs_stats_parsed`
            said so; it gives the stats text of adds that have none.

    Raises:
        ActionError: a non-file row holds a malformed action.
    """
    others = [
        action
        for name in (*_NON_FILE_COLUMNS, "sidecar")
        if name in table.column_names
        for action in checkpoint_actions(pa.table({name: pc.drop_null(table[name])}))
    ]
    if "add" in table.column_names:
        columns = _flatten(table["add"], _ADD_FIELDS)
        if stats_parsed is not None:
            columns["stats"] = _stats_from_parsed(columns["stats"], stats_parsed)
        adds = _adds_table(columns)
    else:
        adds = ADD_SCHEMA.empty_table()
    if "remove" in table.column_names:
        tombstones = pa.table(_flatten(table["remove"], _TOMBSTONE_FIELDS), schema=TOMBSTONE_SCHEMA)
    else:
        tombstones = TOMBSTONE_SCHEMA.empty_table()
    return FileActions(adds, tombstones, others)


def needs_stats_parsed(table: pa.Table) -> bool:
    """Whether some add of a file read with :func:`projection` has ``stats_parsed`` but no stats
    text: then the loader reads ``add.stats_parsed`` too."""
    if "add" not in table.column_names:
        return False
    add = table["add"].combine_chunks()
    typ = add.type
    if typ.get_field_index("stats_parsed") < 0:
        return False
    needs = pc.and_(add.is_valid(), add.field("stats_parsed").is_valid())
    if typ.get_field_index("stats") >= 0:
        needs = pc.and_(needs, add.field("stats").is_null())
    return bool(pc.any(needs).as_py())


def _stats_from_parsed(stats: pa.Array, parsed: pa.Table) -> pa.Array:
    """The stats text, built from ``stats_parsed`` where absent (as :mod:`._checkpoint` does)."""
    add = parsed["add"].combine_chunks()
    values = add.filter(add.is_valid()).field("stats_parsed")
    mask = pc.and_(stats.is_null(), values.is_valid())
    texts = [
        stats_json(v, engine_floats=True) if v else None for v in values.filter(mask).to_pylist()
    ]
    return pc.replace_with_mask(stats, mask, pa.array(texts, pa.string()))


def file_actions_of(actions: Sequence[Action]) -> FileActions:
    """The actions of a JSON checkpoint as :class:`FileActions` (objects to rows)."""
    adds = [a for a in actions if isinstance(a, AddFile)]
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    others = [a for a in actions if not isinstance(a, AddFile | RemoveFile)]
    return FileActions(_adds_of(adds), _tombstones_of(removes), others)


def _adds_of(adds: Sequence[AddFile]) -> pa.Table:
    return _adds_table(_columns_of(adds, _ADD_FIELDS))


def _tombstones_of(removes: Sequence[RemoveFile]) -> pa.Table:
    return pa.table(_columns_of(removes, _TOMBSTONE_FIELDS), schema=TOMBSTONE_SCHEMA)


def _columns_of(
    actions: Sequence[AddFile] | Sequence[RemoveFile],
    fields: Sequence[tuple[str, str, pa.DataType]],
) -> dict[str, pa.Array]:
    """The ``fields`` of some parsed actions, a column each, straight from their attributes:
    what :func:`_flatten` makes of their JSON, without a dict per action (most of an
    incremental update's time, when the JSON went through a struct array)."""
    out: dict[str, pa.Array] = {}
    for name, _, typ in fields:
        values: list[Any] = [getattr(a, name) for a in actions]
        if name == "deletion_vector":
            values = [None if dv is None else dv.to_json() for dv in values]
        elif typ == _STRING_MAP:  # Arrow takes a dict for a map, not any Mapping
            values = [v if v is None or isinstance(v, dict) else dict(v) for v in values]
        out[name] = pa.array(values, typ)
    return out


def add_files(adds: pa.Table) -> list[AddFile]:
    """The rows of a live-adds table (:data:`ADD_SCHEMA`) as :class:`AddFile` objects, equal to
    the ones the checkpoint parser gives for them. For a few rows: a bin's, a reconcile's.

    Built straight from the columns, one column at a time to Python: the schema's types are the
    parser's type checks, so only what a type cannot say is checked here (the required
    ``path`` and ``size``, the deletion vector's own rules), with the parser's messages. A null
    member is an absent one, as the parser reads a checkpoint row.

    Raises:
        ActionError: a row is not a valid add (named by its row in ``adds``).
    """
    rows = zip(*(adds[name].to_pylist() for name, _, _ in _ADD_FIELDS), strict=True)
    files = []
    for i, (
        path,
        values,
        size,
        modified,
        changed,
        stats,
        tags,
        dv,
        row_id,
        row_version,
        clustering,
    ) in enumerate(rows):
        if path is None or size is None:
            missing = ", ".join(k for k, v in (("path", path), ("size", size)) if v is None)
            raise ActionError(f"row {i} (add): add lacks required field(s) {missing}")
        files.append(
            AddFile(
                path=path,
                partition_values={} if values is None else dict(values),
                size=size,
                modification_time=0 if modified is None else modified,
                data_change=True if changed is None else changed,
                stats=stats,
                tags=None if tags is None else dict(tags),
                deletion_vector=None if dv is None else _descriptor(dv, i),
                base_row_id=row_id,
                default_row_commit_version=row_version,
                clustering_provider=clustering,
            )
        )
    return files


def _descriptor(dv: dict[str, Any], row: int) -> DeletionVectorDescriptor:
    """A DV struct row as the parser reads it (its null members absent)."""
    try:
        return DeletionVectorDescriptor.from_json({k: v for k, v in dv.items() if v is not None})
    except ValueError as exc:
        raise ActionError(f"row {row} (add): add.deletionVector: {exc}") from exc


def remove_files(tombstones: pa.Table) -> list[RemoveFile]:
    """The rows of a tombstones table (:data:`TOMBSTONE_SCHEMA`) as :class:`RemoveFile` objects."""
    return [RemoveFile.from_json(_tombstone_json(row)) for row in tombstones.to_pylist()]


class BatchIndex:
    """A table's record batches and the row each starts at, found once per table: taking a few
    rows then costs a bisection each, not a pass over the batches (a bin's sources were taken
    one bin at a time: 6,125 bins of a 100k-file table each listed its 15 batches again)."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.batches = table.to_batches()
        self.starts = list(accumulate((b.num_rows for b in self.batches), initial=0))

    def take(self, rows: Sequence[int]) -> pa.Table:
        """The rows of the table at ``rows``, in that order, taken a record batch at a time.

        ``Table.take`` first concatenates each column's chunks: a copy of the whole table
        (5-60 ms at 100k files, the stats text above all) to get the few rows a bin or an
        update touches.

        Raises:
            IndexError: a row is outside the table.
        """
        wanted = sorted(set(rows))
        if wanted and (wanted[0] < 0 or wanted[-1] >= self.table.num_rows):
            raise IndexError(f"rows outside a table of {self.table.num_rows}")
        parts, i = [], 0
        while i < len(wanted):
            batch = bisect_right(self.starts, wanted[i]) - 1
            start, end = self.starts[batch], self.starts[batch + 1]
            j = bisect_left(wanted, end, i)
            chosen = pa.array([r - start for r in wanted[i:j]], pa.int64())
            parts.append(self.batches[batch].take(chosen))
            i = j
        found = pa.Table.from_batches(parts, schema=self.table.schema)
        if wanted == list(rows):  # a bin's rows: in log order, each once (no second take)
            return found
        position = {row: i for i, row in enumerate(wanted)}
        return found.take(pa.array([position[r] for r in rows], pa.int64()))


def take_rows(table: pa.Table, rows: Sequence[int]) -> pa.Table:
    """The rows of ``table`` at ``rows``, in that order (:meth:`BatchIndex.take`), for one take;
    a table taken from again and again keeps its :class:`BatchIndex`."""
    return BatchIndex(table).take(rows)


def rows_of_paths(
    adds: pa.Table, paths: Iterable[str], keys: pa.ChunkedArray | None = None
) -> pa.Table:
    """The rows of a live-adds table whose path is one of ``paths`` (by :func:`canonical_path`);
    ``keys`` are the rows' canonical paths when known (:class:`ReplayedFiles`)."""
    wanted = pa.array(sorted({canonical_path(p) for p in paths}), pa.string())
    found = pc.is_in(_canonical(adds["path"]) if keys is None else keys, value_set=wanted)
    return adds.filter(found)


def _canonical(paths: pa.ChunkedArray) -> pa.ChunkedArray:
    """:func:`canonical_path` over a column; the column itself when no path needs it."""
    respelled = _respelled(paths)
    return paths if respelled is None else respelled


def _respelled(paths: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """:func:`canonical_path` over a column; None when no path needs it."""
    slash = pc.starts_with(paths, "/")
    file_colon = pc.and_(
        pc.starts_with(paths, "file:/"), pc.invert(pc.starts_with(paths, "file://"))
    )
    if not pc.any(pc.or_(slash, file_colon)).as_py():
        return None
    return pa.chunked_array([pa.array([canonical_path(p) for p in paths.to_pylist()], pa.string())])


def _unique_last(
    table: pa.Table, paths: pa.ChunkedArray | None, keys: pa.ChunkedArray
) -> tuple[pa.Table, pa.ChunkedArray | None]:
    """The rows of ``table`` and their ``paths`` with one row per key: the last, in the place of
    the first. A checkpoint lists each key once; one that does not gets the object replay's
    answer: the later row wins, where the key first appeared.

    Unique when the keys' dense ranks reach their count (equal keys, nulls too, share a rank):
    a sort holds 16 bytes a row, where ``count_distinct``'s hash memo copies every key (26 MiB
    at 100k files, which was the peak of a load)."""
    if not keys or pc.max(pc.rank(keys, tiebreaker="dense")).as_py() == len(keys):
        return table, paths
    indexed = pa.table({"k": keys, "i": pa.array(range(len(keys)), pa.int64())})
    grouped = indexed.group_by("k").aggregate([("i", "min"), ("i", "max")])
    rows = pc.take(grouped["i_max"], pc.sort_indices(grouped["i_min"]))
    return table.take(rows), None if paths is None else paths.take(rows)


def _tombstone_keys(tombstones: pa.Table, paths: pa.ChunkedArray) -> pa.ChunkedArray:
    """``canonical path NUL DV unique id`` per tombstone: its replay key as one string."""
    dv = tombstones["deletion_vector"].combine_chunks()
    uid = pc.coalesce(_dv_unique_id(dv), "")
    return pc.binary_join_element_wise(paths, uid, "\x00")


_MAX_CHUNKS = 256
_MIN_CHUNK_ROWS = 1024
"""A replayed table is made one chunk again when it has more than ``_MAX_CHUNKS`` plus one per
``_MIN_CHUNK_ROWS`` rows: each update splices rows in as slices (:func:`_splice`), two chunks
per row it touches, and a daemon applies thousands; compute over many tiny chunks is slower
than one copy now and then. A bound that grows with the table keeps the copy's cost, spread
over the updates between two copies, at about ``_MIN_CHUNK_ROWS`` rows per row touched (a fixed
256 copied a million-file table on every update of a hundred rows: 0.3 s)."""

_KEY = "canonical_path"
"""The column a table carries its keys in through :func:`_splice`."""


@dataclass(frozen=True)
class CanonicalPaths:
    """The canonical path of each row of a replay's live adds and of its tombstones; None
    where the path column is its own (no path needs respelling, the usual case: nothing to
    hold). Carried from update to update, spliced with the rows, so that finding the rows a few
    commits touch costs one ``is_in``, not a respelling of the whole path column first."""

    adds: pa.ChunkedArray | None = None
    tombstones: pa.ChunkedArray | None = None


@dataclass(frozen=True)
class ReplayedFiles:
    """A replay's live adds (:data:`ADD_SCHEMA`) and tombstones (:data:`TOMBSTONE_SCHEMA`), one
    row per key, and their :class:`CanonicalPaths`."""

    adds: pa.Table
    tombstones: pa.Table
    paths: CanonicalPaths = CanonicalPaths()


def replay_files(
    start: Iterable[FileActions] | ReplayedFiles,
    commits: Iterable[tuple[int, Sequence[Action]]],
) -> ReplayedFiles:
    """The live adds and the tombstones after a starting state and the commits after it, in
    version order.

    Args:
        start: a checkpoint's files (none for a log without one), or an earlier replay's result,
            whose rows are known unique and whose paths are not spelled again: then the cost is
            in proportion to the commits, but for one ``is_in`` over the paths.
        commits: ``(version, actions)`` pairs in ascending version order.
    """
    state = start if isinstance(start, ReplayedFiles) else _checkpoint_state(list(start))
    changes = [
        (canonical_path(a.path), a)
        for _, actions in commits
        for a in actions
        if isinstance(a, AddFile | RemoveFile)
    ]
    if not changes:
        return state
    adds, tombstones = state.adds, state.tombstones
    touched = pa.array(sorted({key for key, _ in changes}), pa.string())
    add_keys = adds["path"] if state.paths.adds is None else state.paths.adds
    tombstone_keys = (
        tombstones["path"] if state.paths.tombstones is None else state.paths.tombstones
    )
    in_adds = pc.is_in(add_keys, value_set=touched).combine_chunks()
    in_tombs = pc.is_in(tombstone_keys, value_set=touched).combine_chunks()
    rows = pc.indices_nonzero(in_adds).to_pylist()
    held = add_keys.filter(in_adds).to_pylist()  # the table holds each once
    # the DV id of each live key, and the adds the commits made live, in the same order
    live = dict(zip(held, adds["dv_unique_id"].filter(in_adds).to_pylist(), strict=True))
    new: dict[str, AddFile] = {}
    dropped: set[str] = set()  # paths not live at some point: re-added ones move to the end
    gone: dict[tuple[str, str | None], RemoveFile] = {}
    for remove in remove_files(tombstones.filter(in_tombs)):
        gone[(canonical_path(remove.path), remove.dv_unique_id)] = remove
    for key, action in changes:
        if isinstance(action, AddFile):
            live[key] = action.dv_unique_id
            new[key] = action
            gone.pop((key, action.dv_unique_id), None)
        else:
            if key in live and live[key] == action.dv_unique_id:
                del live[key]
                new.pop(key, None)
                dropped.add(key)
            gone[(key, action.dv_unique_id)] = action
    kept = {key for key in held if key in live and key not in dropped}  # live throughout
    # the adds the commits leave: those that take a kept row's place first, then the rest
    added = [key for key in new if key in kept] + [key for key in new if key not in kept]
    position = {key: i for i, key in enumerate(added)}
    # a row live throughout and not replaced stays as it is: no object, no copy
    changed = [
        (row, key)
        for row, key in zip(rows, held, strict=True)
        if key not in kept or key in position
    ]
    new_adds, add_paths = _splice(
        adds,
        state.paths.adds,
        [row for row, _ in changed],
        [(row, position[key]) for row, key in changed if key in kept],
        (_adds_of([new[key] for key in added]), added),
    )
    new_tombstones, tombstone_paths = _splice(
        tombstones,
        state.paths.tombstones,
        pc.indices_nonzero(in_tombs).to_pylist(),
        [],
        (_tombstones_of(list(gone.values())), [key for key, _ in gone]),
    )
    return ReplayedFiles(new_adds, new_tombstones, CanonicalPaths(add_paths, tombstone_paths))


def _checkpoint_state(parts: Sequence[FileActions]) -> ReplayedFiles:
    """A checkpoint's files as one state: one row per key, the later row winning."""
    adds = pa.concat_tables([p.adds for p in parts]) if parts else ADD_SCHEMA.empty_table()
    tombstones = (
        pa.concat_tables([p.tombstones for p in parts]) if parts else TOMBSTONE_SCHEMA.empty_table()
    )
    add_paths = _respelled(adds["path"])
    adds, add_paths = _unique_last(
        adds, add_paths, adds["path"] if add_paths is None else add_paths
    )
    paths = _respelled(tombstones["path"])
    keys = _tombstone_keys(tombstones, tombstones["path"] if paths is None else paths)
    tombstones, paths = _unique_last(tombstones, paths, keys)
    return ReplayedFiles(adds, tombstones, CanonicalPaths(add_paths, paths))


def _splice(
    table: pa.Table,
    paths: pa.ChunkedArray | None,
    rows: Sequence[int],
    replaced: Sequence[tuple[int, int]],
    fresh: tuple[pa.Table, list[str]],
) -> tuple[pa.Table, pa.ChunkedArray | None]:
    """``table`` less its ``rows``, except those ``replaced`` names (``(row, fresh row)``), which
    take the fresh row in their place, then the fresh rows after the last one replacing (those
    come first, so the rest are one slice, not a take); and its canonical
    ``paths`` (:class:`CanonicalPaths`) spliced alike, given those of the fresh rows. Zero-copy
    slices: the rows are the few the commits touched, and a filter would copy the whole table
    (its stats text above all) while the original is still held."""
    rows_in, keys_in = fresh
    if paths is not None or keys_in != rows_in["path"].to_pylist():
        table = table.append_column(_KEY, table["path"] if paths is None else paths)
        rows_in = rows_in.append_column(_KEY, pa.array(keys_in, pa.string()))
    by_row = dict(replaced)
    batches = table.to_batches()
    starts = list(accumulate((b.num_rows for b in batches), initial=0))
    fresh_rows = rows_in.combine_chunks().to_batches()  # one batch, or none when empty
    pieces, start = [], 0
    for row in rows:
        pieces += _batch_slices(batches, starts, start, row)
        if row in by_row:
            pieces.append(fresh_rows[0].slice(by_row[row], 1))
        start = row + 1
    pieces += _batch_slices(batches, starts, start, table.num_rows)
    if fresh_rows:
        pieces.append(fresh_rows[0].slice(len(by_row)))
    out = pa.Table.from_batches(pieces, schema=table.schema)
    if out.column(0).num_chunks > _MAX_CHUNKS + out.num_rows // _MIN_CHUNK_ROWS:
        out = out.combine_chunks()
    if _KEY not in out.column_names:
        return out, None
    return out.drop_columns([_KEY]), out[_KEY]


def _batch_slices(
    batches: Sequence[pa.RecordBatch], starts: Sequence[int], lo: int, hi: int
) -> list[pa.RecordBatch]:
    """Rows ``lo`` to ``hi`` (exclusive) of a table split in ``batches`` (their first rows at
    ``starts``) as zero-copy slices: slicing the batches, not the table, costs the same however
    many chunks the table has."""
    out = []
    i = max(bisect_left(starts, lo + 1) - 1, 0)
    while lo < hi:
        first = lo - starts[i]
        take = min(hi, starts[i + 1]) - lo
        out.append(batches[i].slice(first, take))
        lo += take
        i += 1
    return out


def _tombstone_json(row: dict[str, Any]) -> dict[str, Any]:
    """A tombstone row as the JSON of its remove (null members left out)."""
    out = {src: row[name] for name, src, _ in _TOMBSTONE_FIELDS if row[name] is not None}
    if "deletionVector" in out:
        out["deletionVector"] = {k: v for k, v in out["deletionVector"].items() if v is not None}
    if "partitionValues" in out:  # a map column reads back as (key, value) pairs
        out["partitionValues"] = dict(out["partitionValues"])
    return out
