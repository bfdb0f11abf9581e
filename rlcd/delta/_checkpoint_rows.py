"""The checkpoint schema Spark writes, and a snapshot's actions as rows of it. Pure.

A checkpoint has one nullable struct column per action type and one action per row
(delta-protocol.md §1.4). The columns and types are those of Spark's checkpoints (read from the
golden tables): ``int32`` reader/writer versions and DV offset/size, ``int64`` elsewhere, string
maps for ``partitionValues``, ``tags``, ``configuration`` and ``format.options``, and the
transient ``deletionVector.maxRowIndex`` as a null column. What the table's properties ask for
decides the rest:

- ``add.stats`` (JSON text) unless ``delta.checkpoint.writeStatsAsJson`` is ``false``;
- ``add.stats_parsed`` and ``add.partitionValues_parsed`` only when
  ``delta.checkpoint.writeStatsAsStruct`` is ``true`` (the protocol's default is ``false``;
  Spark's own is ``true``, delta-protocol.md §1.4). ``stats_parsed`` has the table's stats
  columns (:mod:`rlcd.delta.stats_spec`) by physical name with their own types; a bound that
  does not fit its column (another writer's stats, an older schema) is left null, which means
  "unknown" to every reader and so never skips a file wrongly;
- ``checkpointMetadata`` for a V2 checkpoint (the ``v2Checkpoint`` feature), and ``sidecar``
  when its file actions are in sidecars, which hold the ``add`` and ``remove`` columns alone.

Removes lose ``stats`` and ``tags`` (the protocol drops them from checkpoints); adds and removes
are written with ``dataChange=false``, as Spark's replay writes them. Members rlcd does not know
(an action's ``extra``) are not written: a checkpoint's schema is fixed.

The live files and tombstones are rows of the snapshot's tables (:mod:`rlcd.delta._columnar`),
a slice at a time, and become checkpoint rows column by column (:func:`add_rows`,
:func:`remove_rows`), with the checks the log parser makes of a row (a path, an add's size, a
well-formed deletion vector), in bulk. Python values are made per file only for
``stats_parsed`` (its stats text is parsed) and per distinct value for
``partitionValues_parsed``. The few other actions are objects (:func:`other_rows`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.delta.actions import (
    Action,
    DomainMetadata,
    Metadata,
    Protocol,
    Sidecar,
    Txn,
)
from rlcd.delta.dv.descriptor import UUID_TAIL, DeletionVectorDescriptor
from rlcd.delta.partitions import parse_partition_value
from rlcd.delta.schema import (
    DataType,
    DecimalType,
    PrimitiveType,
    StructType,
    column_mapping_mode,
    parse_schema,
    physical_name,
    physical_partition_columns,
    to_arrow_type,
)
from rlcd.delta.stats_spec import StatKind, stats_spec

__all__ = ("CheckpointLayout", "checkpoint_layout", "other_rows", "add_rows", "remove_rows")
__pure__ = True

STATS_AS_JSON_KEY: Final = "delta.checkpoint.writeStatsAsJson"
STATS_AS_STRUCT_KEY: Final = "delta.checkpoint.writeStatsAsStruct"

_STRING_MAP: Final = pa.map_(pa.string(), pa.string())
_DV: Final = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
_PROTOCOL: Final = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
_METADATA: Final = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", _STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", _STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)
_TXN: Final = pa.struct(
    [("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())]
)
_DOMAIN: Final = pa.struct(
    [("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]
)
_CHECKPOINT_METADATA: Final = pa.struct([("version", pa.int64()), ("tags", _STRING_MAP)])
_SIDECAR: Final = pa.struct(
    [
        ("path", pa.string()),
        ("sizeInBytes", pa.int64()),
        ("modificationTime", pa.int64()),
        ("tags", _STRING_MAP),
    ]
)
_FILE_COLUMNS: Final = ("add", "remove")
_FILE_FIELDS: Final = (
    ("path", pa.string()),
    ("partitionValues", _STRING_MAP),
    ("size", pa.int64()),
)
_ROW_TRACKING: Final = (
    ("deletionVector", _DV),
    ("baseRowId", pa.int64()),
    ("defaultRowCommitVersion", pa.int64()),
)
_REMOVE: Final = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", _STRING_MAP),
        ("size", pa.int64()),
        *_ROW_TRACKING,
    ]
)
_INT_RANGE: Final = {"byte": 8, "short": 16, "integer": 32, "long": 64}

Convert = Callable[[Any], Any]
"""A stats JSON value to the Python value of its ``stats_parsed`` type, or None if it does not
fit."""


@dataclass(frozen=True, slots=True)
class _StatsColumns:
    """The ``stats_parsed`` struct and how to fill it: leaf converters by physical path."""

    arrow: pa.DataType
    bounds: Mapping[tuple[str, ...], Convert]
    null_counts: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class CheckpointLayout:
    """The schema of one checkpoint and what goes in its optional columns."""

    schema: pa.Schema
    v2: bool
    stats_as_json: bool
    partitions: Mapping[str, DataType] | None
    """Physical partition column -> type, when ``partitionValues_parsed`` is written."""
    stats: _StatsColumns | None
    """When ``stats_parsed`` is written."""

    @property
    def sidecar_schema(self) -> pa.Schema:
        """A sidecar's schema: the ``add`` and ``remove`` columns alone, as Spark's."""
        return pa.schema([self.schema.field(name) for name in _FILE_COLUMNS])


def _flag(config: Mapping[str, str], key: str, default: bool) -> bool:
    value = config.get(key)
    return default if value is None else str(value).strip().lower() == "true"


def checkpoint_layout(metadata: Metadata, *, v2: bool, sidecars: bool = False) -> CheckpointLayout:
    """The checkpoint schema for a table with this metadata (V2: with ``checkpointMetadata``;
    ``sidecars``: also with the ``sidecar`` column, for a V2 checkpoint whose files are in
    sidecars).

    Raises:
        ValueError: the schema or column mapping cannot be read (the table is not one rlcd
            can checkpoint; the caller aborts).
    """
    config = metadata.configuration
    as_json = _flag(config, STATS_AS_JSON_KEY, True)
    as_struct = _flag(config, STATS_AS_STRUCT_KEY, False)
    add_fields: list[tuple[str, pa.DataType]] = [
        *_FILE_FIELDS,
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", _STRING_MAP),
        *_ROW_TRACKING,
        ("clusteringProvider", pa.string()),
    ]
    if not as_json:
        add_fields.remove(("stats", pa.string()))
    partitions = stats = None
    if as_struct:
        schema = parse_schema(metadata.schema_string)
        mode = column_mapping_mode(config)
        names = physical_partition_columns(schema, metadata.partition_columns, mode)
        types = [schema.field(c).type for c in metadata.partition_columns]
        partitions = dict(zip(names, types, strict=True))
        if partitions:
            parsed = [(n, to_arrow_type(t)) for n, t in partitions.items()]
            add_fields.append(("partitionValues_parsed", pa.struct(parsed)))
        stats = _stats_columns(schema, metadata)
        add_fields.append(("stats_parsed", stats.arrow))
    columns = [
        ("protocol", _PROTOCOL),
        ("metaData", _METADATA),
        ("txn", _TXN),
        ("domainMetadata", _DOMAIN),
        ("add", pa.struct(add_fields)),
        ("remove", _REMOVE),
    ]
    if v2:
        columns.append(("checkpointMetadata", _CHECKPOINT_METADATA))
    if sidecars:
        columns.append(("sidecar", _SIDECAR))
    return CheckpointLayout(pa.schema(columns), v2, as_json, partitions, stats)


def _leaf_types(schema: StructType, mode: Any) -> dict[tuple[str, ...], DataType]:
    """Every leaf below the top-level struct, by physical path."""
    out: dict[tuple[str, ...], DataType] = {}

    def walk(struct: StructType, prefix: tuple[str, ...]) -> None:
        for f in struct.fields:
            path = (*prefix, physical_name(f, mode))
            if isinstance(f.type, StructType):
                walk(f.type, path)
            else:
                out[path] = f.type

    walk(schema, ())
    return out


def _stats_columns(schema: StructType, metadata: Metadata) -> _StatsColumns:
    mode = column_mapping_mode(metadata.configuration)
    spec = stats_spec(
        schema,
        mode=mode,
        partition_columns=metadata.partition_columns,
        configuration=metadata.configuration,
    )
    types = _leaf_types(schema, mode)
    bounds = {
        leaf.path: (types[leaf.path], _converter(leaf.kind, types[leaf.path]))
        for leaf in spec.leaves
        if leaf.kind is not StatKind.NULL_COUNT
    }
    counts = tuple(leaf.path for leaf in spec.leaves)
    fields: list[tuple[str, pa.DataType]] = [("numRecords", pa.int64())]
    if bounds:
        bound_type = _nested({p: to_arrow_type(t) for p, (t, _) in bounds.items()})
        fields += [("minValues", bound_type), ("maxValues", bound_type)]
    if counts:
        fields.append(("nullCount", _nested(dict.fromkeys(counts, pa.int64()))))
    fields.append(("tightBounds", pa.bool_()))
    return _StatsColumns(
        pa.struct(fields), {p: convert for p, (_, convert) in bounds.items()}, counts
    )


def _nested(leaves: Mapping[tuple[str, ...], pa.DataType]) -> pa.DataType:
    """A struct type nesting ``leaves`` by their paths, in their order."""
    tree: dict[str, Any] = {}
    for path, typ in leaves.items():
        node = tree
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = typ

    def build(node: Mapping[str, Any]) -> pa.DataType:
        return pa.struct([(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


def _converter(kind: StatKind, dtype: DataType) -> Convert:
    match kind:
        case StatKind.INTEGER:
            assert isinstance(dtype, PrimitiveType)
            bits = _INT_RANGE[dtype.name]
            return lambda v: (
                v
                if isinstance(v, int)
                and not isinstance(v, bool)
                and -(2 ** (bits - 1)) <= v < 2 ** (bits - 1)
                else None
            )
        case StatKind.FLOAT:
            return _float
        case StatKind.DECIMAL:
            assert isinstance(dtype, DecimalType)
            return lambda v: _decimal(v, dtype)
        case StatKind.DATE:
            return _date
        case StatKind.TIMESTAMP:
            return lambda v: _timestamp(v, aware=True)
        case StatKind.TIMESTAMP_NTZ:
            return lambda v: _timestamp(v, aware=False)
        case _:  # STRING
            return lambda v: v if isinstance(v, str) else None


_SPECIAL_FLOATS: Final = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": -float("inf")}


def _float(value: Any) -> float | None:
    if isinstance(value, str):
        return _SPECIAL_FLOATS.get(value)
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        return float(value)
    return None


def _decimal(value: Any, dtype: DecimalType) -> Decimal | None:
    """The exact decimal, or None when it has more digits than the column holds (rounding a
    bound could move it inside the column's range)."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        return None
    exact = Decimal(value)
    try:
        scaled = exact.quantize(Decimal(1).scaleb(-dtype.scale))
    except InvalidOperation:
        return None
    if scaled != exact or len(scaled.as_tuple().digits) > dtype.precision:
        return None
    return scaled


def _date(value: Any) -> dt.date | None:
    try:
        return dt.date.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _timestamp(value: Any, *, aware: bool) -> dt.datetime | None:
    """A bound of a ``timestamp`` (with an offset, as UTC) or ``timestamp_ntz`` (without);
    a string of the other form is not trusted."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if (parsed.tzinfo is not None) != aware:
        return None
    return parsed.astimezone(dt.UTC) if aware else parsed


def _pick(
    tree: Any, paths: Iterable[tuple[str, ...]], convert: Callable[[tuple[str, ...], Any], Any]
) -> dict[str, Any] | None:
    """The leaves of ``tree`` (a stats JSON object) at ``paths``, converted, nested again."""
    if not isinstance(tree, dict):
        return None
    out: dict[str, Any] = {}
    for path in paths:
        node: Any = tree
        for name in path:
            node = node.get(name) if isinstance(node, dict) else None
        value = convert(path, node) if node is not None else None
        if value is None:
            continue
        target = out
        for name in path[:-1]:
            target = target.setdefault(name, {})
        target[path[-1]] = value
    return out


def _stats_parsed(stats: str | None, columns: _StatsColumns) -> dict[str, Any] | None:
    if not stats:
        return None
    try:
        tree = json.loads(stats, parse_float=Decimal)
    except ValueError:
        return None
    if not isinstance(tree, dict):
        return None
    rows = tree.get("numRecords")
    tight = tree.get("tightBounds")
    bounds = columns.bounds
    out: dict[str, Any] = {
        "numRecords": rows if isinstance(rows, int) and not isinstance(rows, bool) else None,
        "tightBounds": tight if isinstance(tight, bool) else None,
    }
    if bounds:
        out["minValues"] = _pick(tree.get("minValues"), bounds, lambda p, v: bounds[p](v))
        out["maxValues"] = _pick(tree.get("maxValues"), bounds, lambda p, v: bounds[p](v))
    if columns.null_counts:
        out["nullCount"] = _pick(
            tree.get("nullCount"),
            columns.null_counts,
            lambda _, v: v if isinstance(v, int) and not isinstance(v, bool) else None,
        )
    return out


def other_rows(actions: Iterable[Action | int], layout: CheckpointLayout) -> pa.RecordBatch:
    """The checkpoint rows of the actions other than files, one per action (an ``int`` is the
    checkpoint's version: the V2 ``checkpointMetadata`` row; a sidecar needs a layout with
    sidecars).

    Raises:
        ValueError: an action has no place among these rows (a file action, commitInfo, cdc,
            unknown).
    """
    return pa.RecordBatch.from_pylist(list(_other_rows(actions)), schema=layout.schema)


def _other_rows(actions: Iterable[Action | int]) -> Iterator[dict[str, Any]]:
    for action in actions:
        match action:
            case int():
                yield {"checkpointMetadata": {"version": action, "tags": None}}
            case Protocol():
                yield {
                    "protocol": {
                        "minReaderVersion": action.min_reader_version,
                        "minWriterVersion": action.min_writer_version,
                        "readerFeatures": list(action.reader_features or ())
                        if action.min_reader_version >= 3
                        else None,
                        "writerFeatures": list(action.writer_features or ())
                        if action.min_writer_version >= 7
                        else None,
                    }
                }
            case Metadata():
                yield {
                    "metaData": {
                        "id": action.id,
                        "name": action.name,
                        "description": action.description,
                        "format": {
                            "provider": action.format.get("provider", "parquet"),
                            "options": dict(action.format.get("options") or {}),
                        },
                        "schemaString": action.schema_string,
                        "partitionColumns": list(action.partition_columns),
                        "configuration": dict(action.configuration),
                        "createdTime": action.created_time,
                    }
                }
            case Txn():
                yield {
                    "txn": {
                        "appId": action.app_id,
                        "version": action.version,
                        "lastUpdated": action.last_updated,
                    }
                }
            case DomainMetadata():
                yield {
                    "domainMetadata": {
                        "domain": action.domain,
                        "configuration": action.configuration,
                        "removed": action.removed,
                    }
                }
            case Sidecar():
                yield {
                    "sidecar": {
                        "path": action.path,
                        "sizeInBytes": action.size_in_bytes,
                        "modificationTime": action.modification_time,
                        "tags": None,
                    }
                }
            case _:
                raise ValueError(f"a checkpoint holds no {type(action).__name__} action")


def add_rows(adds: pa.Table, layout: CheckpointLayout) -> pa.RecordBatch:
    """Live files (rows of :data:`rlcd.delta._columnar.ADD_SCHEMA`: a slice of a snapshot's
    adds) as checkpoint rows, column by column: Python values only for ``stats_parsed`` and
    the distinct partition values.

    Raises:
        ValueError: a file has no path or size, a malformed deletion vector, or a partition
            value that is not a value of its column's type (the file named).
    """
    paths = _required(adds, "path", "a live file (add)", None)
    values = pc.coalesce(_column(adds, "partition_values"), _EMPTY_MAP)
    stats = _column(adds, "stats")
    columns = {
        "path": paths,
        "partitionValues": values,
        "size": _required(adds, "size", "live file (add)", paths),
        "modificationTime": pc.fill_null(_column(adds, "modification_time"), 0),
        "dataChange": pa.repeat(pa.scalar(False), len(adds)),
        "stats": stats,
        "tags": _column(adds, "tags"),
        "deletionVector": _dv_column(_column(adds, "deletion_vector"), paths, "live file (add)"),
        "baseRowId": _column(adds, "base_row_id"),
        "defaultRowCommitVersion": _column(adds, "default_row_commit_version"),
        "clusteringProvider": _column(adds, "clustering_provider"),
    }
    add = layout.schema.field("add").type
    if layout.partitions:
        parsed = add.field("partitionValues_parsed").type
        columns["partitionValues_parsed"] = _partitions_parsed(values, paths, parsed, layout)
    if layout.stats is not None:
        texts = stats.to_pylist()
        parsed_stats = [_stats_parsed(text, layout.stats) for text in texts]
        columns["stats_parsed"] = pa.array(parsed_stats, layout.stats.arrow)
    return _rows_of(layout, "add", columns)


def remove_rows(tombstones: pa.Table, layout: CheckpointLayout) -> pa.RecordBatch:
    """Tombstones (rows of :data:`rlcd.delta._columnar.TOMBSTONE_SCHEMA`) as checkpoint rows.

    Raises:
        ValueError: a tombstone has no path, or a malformed deletion vector (the file named).
    """
    paths = _required(tombstones, "path", "a tombstone (remove)", None)
    columns = {
        "path": paths,
        "deletionTimestamp": _column(tombstones, "deletion_timestamp"),
        "dataChange": pa.repeat(pa.scalar(False), len(tombstones)),
        "extendedFileMetadata": _column(tombstones, "extended_file_metadata"),
        "partitionValues": _column(tombstones, "partition_values"),
        "size": _column(tombstones, "size"),
        "deletionVector": _dv_column(
            _column(tombstones, "deletion_vector"), paths, "tombstone (remove)"
        ),
        "baseRowId": _column(tombstones, "base_row_id"),
        "defaultRowCommitVersion": _column(tombstones, "default_row_commit_version"),
    }
    return _rows_of(layout, "remove", columns)


_EMPTY_MAP: Final = pa.scalar([], _STRING_MAP)


def _column(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _required(table: pa.Table, name: str, what: str, paths: pa.Array | None) -> pa.Array:
    """The column ``name``, which no row may lack (``paths``: to name the file that does)."""
    column = _column(table, name)
    if column.null_count:
        row = pc.index(column.is_null(), True).as_py()
        named = "" if paths is None else f" {paths[row].as_py()!r}"
        raise ValueError(f"{what}{named} has no {name}")
    return column


def _rows_of(
    layout: CheckpointLayout, action: str, columns: Mapping[str, pa.Array]
) -> pa.RecordBatch:
    """A batch of ``layout``'s rows whose ``action`` column is set from ``columns`` (by the
    struct's field names), every other column null."""
    struct_type = layout.schema.field(action).type
    struct = pa.StructArray.from_arrays(
        [columns[f.name] for f in struct_type], fields=list(struct_type)
    )
    n = len(struct)
    return pa.RecordBatch.from_arrays(
        [struct if f.name == action else pa.nulls(n, f.type) for f in layout.schema],
        schema=layout.schema,
    )


def _dv_column(dv: pa.Array, paths: pa.Array, what: str) -> pa.Array:
    """Deletion vectors in the checkpoint's struct (``int32`` offset and size, a null
    ``maxRowIndex``), checked as the log parser checks a descriptor: rows Arrow cannot clear
    are made into descriptors, whose error names the file."""
    field = dict(zip((f.name for f in dv.type), dv.flatten(), strict=True))
    kind, value = field["storageType"], field["pathOrInlineDv"]
    good = pc.and_(pc.is_in(kind, value_set=pa.array(["u", "i", "p"])), value.is_valid())
    for name in ("sizeInBytes", "cardinality"):
        good = pc.and_(good, pc.greater_equal(field[name], 0))
    good = pc.and_(good, pc.or_(field["offset"].is_null(), pc.greater_equal(field["offset"], 0)))
    tail = pc.match_substring_regex(value, UUID_TAIL)
    good = pc.and_(good, pc.or_(pc.not_equal(kind, "u"), tail))
    good = pc.and_(good, pc.or_(pc.not_equal(kind, "p"), pc.not_equal(value, "")))
    suspect = pc.and_(dv.is_valid(), pc.invert(pc.fill_null(good, False)))
    for row in pc.indices_nonzero(suspect).to_pylist():
        members = {k: v for k, v in dv[row].as_py().items() if v is not None}
        try:
            DeletionVectorDescriptor.from_json(members)
        except ValueError as exc:
            raise ValueError(f"{what} {paths[row].as_py()!r}: deletionVector: {exc}") from exc
    children = {
        **field,
        "offset": field["offset"].cast(pa.int32()),
        "sizeInBytes": field["sizeInBytes"].cast(pa.int32()),
        "maxRowIndex": pa.nulls(len(dv), pa.int64()),
    }
    return pa.StructArray.from_arrays(
        [children[f.name] for f in _DV], fields=list(_DV), mask=dv.is_null()
    )


def _partitions_parsed(
    values: pa.Array, paths: pa.Array, parsed: pa.StructType, layout: CheckpointLayout
) -> pa.Array:
    """``partitionValues_parsed``: each distinct raw value of a column parsed once."""
    assert layout.partitions is not None
    children = []
    for name, dtype in layout.partitions.items():
        raw = pc.map_lookup(values, pa.scalar(name), "last")
        distinct = pc.unique(raw)
        typed = []
        for text in distinct.to_pylist():
            try:
                typed.append(parse_partition_value(text, dtype))
            except ValueError as exc:
                row = pc.index(raw, text).as_py()
                raise ValueError(f"live file (add) {paths[row].as_py()!r}: {exc}") from exc
        typed_array = pa.array(typed, parsed.field(name).type)
        children.append(pc.take(typed_array, pc.index_in(raw, value_set=distinct)))
    return pa.StructArray.from_arrays(children, fields=list(parsed))
