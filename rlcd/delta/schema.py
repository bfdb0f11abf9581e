"""Delta table schemas: ``schemaString`` as typed values, column mapping, and the Arrow schema.

Pure: no IO, no clock. Input is the ``metaData.schemaString`` text and the table configuration;
output is frozen values and ``pyarrow`` types. Errors are ``ValueError`` (bad schema text, an
unsupported type) or ``KeyError`` (a column that is not in the schema); the loader wraps them in
``CorruptLogError`` / ``UnsupportedFeatureError`` with the table and version it knows.

Theory of operation
-------------------
*Parsing.* ``schemaString`` is Spark's ``StructType`` JSON (Delta PROTOCOL §Schema Serialization
Format). It becomes ``StructType``/``StructField``/``ArrayType``/``MapType``/``PrimitiveType``/
``DecimalType``. Field metadata is kept verbatim (JSON values, read-only top level), so
``schema_to_json(parse_schema(s))`` is the same JSON as ``s``. An unknown type name is an error
naming the type and column: guessing would write wrong files.

*Column mapping* (protocol notes §5.1, §0 item 14). The mode comes from
``delta.columnMapping.mode`` (``none`` | ``name`` | ``id``; absent means ``none``). Whether the
protocol actually enables the feature is ``protocol.py``'s business, not this module's. With a
mode other than ``none`` every field, nested ones too, has a physical name
(``delta.columnMapping.physicalName``) and an id (``delta.columnMapping.id``). Data files,
``partitionValues`` keys, stats and partition directories use physical names; only
``metaData.partitionColumns`` uses logical names. With mode ``none`` the logical name is the
physical name and no field ids are written.

*The physical Arrow schema* (``to_arrow_schema``) is what rlcd writes into a data file: data
columns only, named by physical name, each carrying its column id as ``PARQUET:field_id`` field
metadata when column mapping is on (Spark writes ids in both ``name`` and ``id`` mode, so do
we). Arrays, maps and their children follow Spark's Parquet layout: a list's child is named
``element``, a map's children ``key`` (never null) and ``value``. Those children have no column
id of their own; with IcebergCompatV2 Delta stores theirs in ``delta.columnMapping.nested.ids``
on the nearest enclosing struct field, keyed by the path the child takes in the Parquet file
(``<physical name>.element``, ``<physical name>.value.key``, ...). We write those ids when they
are there.

Type choices: ``string`` is ``pa.string()`` and ``binary`` is ``pa.binary()``, not the ``large_``
variants, because the Parquet logical type is the same either way and pyarrow reads Parquet
strings back as ``pa.string()``: batches read from Spark's files then match the target schema
without a cast, and the 2 GiB offset limit applies per array, which a streamed batch never
reaches. ``timestamp`` is ``timestamp("us", tz="UTC")`` (Parquet ``isAdjustedToUTC=true``),
``timestamp_ntz`` is ``timestamp("us")``. ``variant`` is refused for now.

*Type widening* (protocol notes §5, ``typeWidening`` row). Files written before a type change
keep their narrower physical type; ``cast_compatible`` tells a reader which casts Delta allows.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final, TypeAlias, assert_never

import pyarrow as pa

__all__ = (
    "DataType",
    "PrimitiveType",
    "DecimalType",
    "ArrayType",
    "MapType",
    "StructField",
    "StructType",
    "PRIMITIVE_TYPE_NAMES",
    "parse_schema",
    "parse_data_type",
    "schema_to_json",
    "ColumnMappingMode",
    "COLUMN_MAPPING_MODE_KEY",
    "PHYSICAL_NAME_KEY",
    "COLUMN_ID_KEY",
    "NESTED_IDS_KEY",
    "PARQUET_FIELD_ID_KEY",
    "column_mapping_mode",
    "physical_name",
    "column_id",
    "physical_path",
    "physical_partition_columns",
    "to_arrow_type",
    "to_arrow_schema",
    "cast_compatible",
)
__pure__ = True

COLUMN_MAPPING_MODE_KEY: Final = "delta.columnMapping.mode"
PHYSICAL_NAME_KEY: Final = "delta.columnMapping.physicalName"
COLUMN_ID_KEY: Final = "delta.columnMapping.id"
NESTED_IDS_KEY: Final = "delta.columnMapping.nested.ids"
PARQUET_FIELD_ID_KEY: Final = b"PARQUET:field_id"

PRIMITIVE_TYPE_NAMES: Final = frozenset(
    {
        "byte",
        "short",
        "integer",
        "long",
        "float",
        "double",
        "boolean",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
    }
)

_MAX_DECIMAL_PRECISION: Final = 38
_MAX_FIELD_ID: Final = 2**31 - 1  # Parquet field_id is an int32
_DECIMAL_RE: Final = re.compile(r"decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")


# --- the schema model -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrimitiveType:
    """A Delta primitive type, by its schema name (``"long"``, ``"timestamp_ntz"``, ...).

    Invariant: ``name`` is in ``PRIMITIVE_TYPE_NAMES``. Decimals are ``DecimalType``.
    """

    name: str

    def __post_init__(self) -> None:
        if self.name not in PRIMITIVE_TYPE_NAMES:
            raise ValueError(f"unknown Delta primitive type {self.name!r}")


@dataclass(frozen=True, slots=True)
class DecimalType:
    """``decimal(precision, scale)``.

    Invariant: ``1 <= precision <= 38`` and ``0 <= scale <= precision``.
    """

    precision: int
    scale: int

    def __post_init__(self) -> None:
        precision_ok = 1 <= self.precision <= _MAX_DECIMAL_PRECISION
        if not precision_ok or not 0 <= self.scale <= self.precision:
            raise ValueError(f"invalid Delta type decimal({self.precision},{self.scale})")


@dataclass(frozen=True, slots=True)
class ArrayType:
    """``array<element_type>``; ``contains_null`` is the schema's ``containsNull``."""

    element_type: DataType
    contains_null: bool


@dataclass(frozen=True, slots=True)
class MapType:
    """``map<key_type, value_type>``; keys are never null, values per ``valueContainsNull``."""

    key_type: DataType
    value_type: DataType
    value_contains_null: bool


@dataclass(frozen=True, slots=True)
class StructField:
    """One named field. ``metadata`` is the schema's field metadata, verbatim and read-only."""

    name: str
    type: DataType
    nullable: bool
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.metadata, MappingProxyType):
            object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))


@dataclass(frozen=True, slots=True)
class StructType:
    """A struct; the top-level table schema is one.

    Invariant: field names are unique ignoring case (Delta column names are case-insensitive).
    """

    fields: tuple[StructField, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))  # a list would not hash
        seen: set[str] = set()
        for f in self.fields:
            key = f.name.casefold()
            if key in seen:
                raise ValueError(f"duplicate column name {f.name!r} (names are case-insensitive)")
            seen.add(key)

    @property
    def names(self) -> tuple[str, ...]:
        """The logical field names, in order."""
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> StructField:
        """The field called ``name``: an exact match, else the one that matches ignoring case.

        Raises:
            KeyError: no field has that name.
        """
        for f in self.fields:
            if f.name == name:
                return f
        folded = name.casefold()
        for f in self.fields:
            if f.name.casefold() == folded:
                return f
        raise KeyError(f"no column {name!r} in struct<{', '.join(self.names)}>")


DataType: TypeAlias = PrimitiveType | DecimalType | ArrayType | MapType | StructType


# --- parsing schemaString -----------------------------------------------------------------------


def parse_schema(schema_string: str) -> StructType:
    """Parse ``metaData.schemaString`` (PROTOCOL §Schema Serialization Format).

    Raises:
        ValueError: not JSON, not a struct, or a type rlcd does not know (the message names it).
    """
    try:
        obj = json.loads(schema_string)
    except json.JSONDecodeError as exc:
        raise ValueError(f"schemaString is not valid JSON: {exc}") from exc
    schema = parse_data_type(obj)
    if not isinstance(schema, StructType):
        raise ValueError(f"schemaString must be a struct, got {schema_string[:80]!r}")
    return schema


def parse_data_type(obj: object, *, column: str = "") -> DataType:
    """Parse one type from its JSON value: a type name string or an object with ``"type"``.

    ``column`` is the logical path of the enclosing column, used in error messages.

    Raises:
        ValueError: the type is unknown or malformed.
    """
    if isinstance(obj, str):
        return _parse_type_name(obj, column)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a Delta type, got {obj!r}{_where(column)}")
    kind = obj.get("type")
    if kind == "struct":
        return _parse_struct(obj, column)
    if kind == "array":
        return ArrayType(
            parse_data_type(_get(obj, "elementType", object, column), column=f"{column}.element"),
            _get(obj, "containsNull", bool, column),
        )
    if kind == "map":
        return MapType(
            parse_data_type(_get(obj, "keyType", object, column), column=f"{column}.key"),
            parse_data_type(_get(obj, "valueType", object, column), column=f"{column}.value"),
            _get(obj, "valueContainsNull", bool, column),
        )
    raise ValueError(f"unknown Delta type {kind!r}{_where(column)}")


def _parse_type_name(name: str, column: str) -> DataType:
    if name in PRIMITIVE_TYPE_NAMES:
        return PrimitiveType(name)
    if name == "decimal":  # Spark's DecimalType.USER_DEFAULT
        return DecimalType(10, 0)
    match = _DECIMAL_RE.fullmatch(name)
    if match:
        try:
            return DecimalType(int(match[1]), int(match[2]))
        except ValueError as exc:
            raise ValueError(f"{exc}{_where(column)}") from None
    raise ValueError(f"unknown Delta type {name!r}{_where(column)}")


def _parse_struct(obj: Mapping[str, Any], column: str) -> StructType:
    fields = tuple(_parse_field(f, column) for f in _get(obj, "fields", list, column))
    try:
        return StructType(fields)
    except ValueError as exc:
        raise ValueError(f"{exc}{_where(column)}") from None


def _parse_field(obj: object, parent: str) -> StructField:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a struct field, got {obj!r}{_where(parent)}")
    name = _get(obj, "name", str, parent)
    column = f"{parent}.{name}" if parent else name
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError(f"field metadata must be an object{_where(column)}")
    return StructField(
        name=name,
        type=parse_data_type(_get(obj, "type", object, column), column=column),
        nullable=_get(obj, "nullable", bool, column),
        metadata=metadata,
    )


def _get(obj: Mapping[str, Any], key: str, kind: type, column: str) -> Any:
    """``obj[key]``, checked to be an instance of ``kind``."""
    if key not in obj:
        raise ValueError(f"schema JSON lacks {key!r}{_where(column)}")
    value = obj[key]
    if not isinstance(value, kind):
        raise ValueError(f"schema JSON {key!r} must be {kind.__name__}{_where(column)}")
    return value


def _where(column: str) -> str:
    return f" (column {column!r})" if column else ""


def schema_to_json(schema: DataType) -> str:
    """The compact ``schemaString`` JSON of ``schema``; inverse of ``parse_schema``."""
    return json.dumps(_type_json(schema), separators=(",", ":"), ensure_ascii=False)


def _type_json(dtype: DataType) -> object:
    match dtype:
        case PrimitiveType(name=name):
            return name
        case DecimalType(precision=p, scale=s):
            return f"decimal({p},{s})"
        case ArrayType(element_type=e, contains_null=n):
            return {"type": "array", "elementType": _type_json(e), "containsNull": n}
        case MapType(key_type=k, value_type=v, value_contains_null=n):
            return {
                "type": "map",
                "keyType": _type_json(k),
                "valueType": _type_json(v),
                "valueContainsNull": n,
            }
        case StructType(fields=fields):
            return {"type": "struct", "fields": [_field_json(f) for f in fields]}
        case _:
            assert_never(dtype)


def _field_json(f: StructField) -> object:
    return {
        "name": f.name,
        "type": _type_json(f.type),
        "nullable": f.nullable,
        "metadata": dict(f.metadata),
    }


# --- column mapping (protocol notes §5.1) -------------------------------------------------------


class ColumnMappingMode(enum.StrEnum):
    """The table's ``delta.columnMapping.mode``."""

    NONE = "none"
    NAME = "name"
    ID = "id"


def column_mapping_mode(configuration: Mapping[str, str]) -> ColumnMappingMode:
    """The column mapping mode in ``metaData.configuration`` (absent means ``none``).

    Raises:
        ValueError: the value is not ``none``, ``name`` or ``id`` (compared ignoring case).
    """
    raw = configuration.get(COLUMN_MAPPING_MODE_KEY, "none")
    try:
        return ColumnMappingMode(raw.lower())
    except (ValueError, AttributeError):
        raise ValueError(
            f"{COLUMN_MAPPING_MODE_KEY} is {raw!r}; expected 'none', 'name' or 'id'"
        ) from None


def physical_name(f: StructField, mode: ColumnMappingMode) -> str:
    """The name ``f`` has in data files, ``partitionValues`` and stats (§0 item 14).

    Raises:
        ValueError: column mapping is on and the field has no valid physical name.
    """
    if mode is ColumnMappingMode.NONE:
        return f.name
    name = f.metadata.get(PHYSICAL_NAME_KEY)
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"column {f.name!r} has no {PHYSICAL_NAME_KEY} but column mapping mode is {mode}"
        )
    return name


def column_id(f: StructField) -> int | None:
    """The field's ``delta.columnMapping.id`` (its Parquet field id), or None if it has none.

    Raises:
        ValueError: the id is not an integer in the int32 range Parquet allows.
    """
    value = f.metadata.get(COLUMN_ID_KEY)
    if value is None:
        return None
    return _checked_id(value, f"{COLUMN_ID_KEY} of column {f.name!r}")


def _checked_id(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_FIELD_ID:
        raise ValueError(f"{what} is {value!r}, not a field id (0..{_MAX_FIELD_ID})")
    return value


def _nested_ids(f: StructField) -> Mapping[str, int]:
    """``delta.columnMapping.nested.ids``: ids of list elements, map keys and values in ``f``."""
    raw = f.metadata.get(NESTED_IDS_KEY, {})
    if not isinstance(raw, Mapping):
        raise ValueError(f"{NESTED_IDS_KEY} of column {f.name!r} must be an object")
    return {str(k): _checked_id(v, f"{NESTED_IDS_KEY}[{k!r}]") for k, v in raw.items()}


def physical_path(
    schema: StructType, logical_path: Sequence[str], mode: ColumnMappingMode
) -> tuple[str, ...]:
    """Map a logical column path (``("a", "b")`` for ``a.b``) to physical names, level by level.

    Raises:
        KeyError: a name is not in the schema, or the path goes through a non-struct.
        TypeError: ``logical_path`` is a string, not a sequence of names.
        ValueError: a field on the path lacks its physical name.
    """
    if not _names(logical_path):
        raise KeyError("empty column path")
    struct: DataType = schema
    out: list[str] = []
    for depth, name in enumerate(logical_path):
        if not isinstance(struct, StructType):
            prefix = ".".join(logical_path[:depth])
            raise KeyError(f"column {prefix!r} is not a struct; cannot look up {name!r}")
        f = struct.field(name)
        out.append(physical_name(f, mode))
        struct = f.type
    return tuple(out)


def physical_partition_columns(
    schema: StructType, partition_columns: Sequence[str], mode: ColumnMappingMode
) -> tuple[str, ...]:
    """Physical names of ``metaData.partitionColumns`` (logical names), in the same order.

    These are the keys of ``add.partitionValues`` and the names in partition directories.

    Raises:
        KeyError: a partition column is not a top-level column.
    """
    return tuple(physical_name(schema.field(c), mode) for c in _names(partition_columns))


def _names(columns: Collection[str]) -> Collection[str]:
    """``columns``, refusing a bare string (it would iterate as one-letter names)."""
    if isinstance(columns, str):
        raise TypeError(f"expected a sequence of column names, got the string {columns!r}")
    return columns


# --- Arrow --------------------------------------------------------------------------------------

_ARROW_PRIMITIVES: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "byte": pa.int8(),
        "short": pa.int16(),
        "integer": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
)


@dataclass(frozen=True, slots=True)
class _Where:
    """Where the converter is: for error messages and ``nested.ids`` lookups."""

    mode: ColumnMappingMode
    column: str  # logical path, for messages
    path: str  # Parquet path below the nearest struct field, the key into ``nested_ids``
    nested_ids: Mapping[str, int]


def to_arrow_type(dtype: DataType) -> Any:
    """The Arrow type of ``dtype``, with logical names and no field ids (see module header).

    Raises:
        ValueError: ``dtype`` is or contains ``variant``.
    """
    return _arrow_type(dtype, _Where(ColumnMappingMode.NONE, "", "", {}))


def to_arrow_schema(
    schema: StructType,
    *,
    mode: ColumnMappingMode,
    partition_columns: Collection[str] = (),
) -> Any:
    """The physical Arrow schema of the table's data files (protocol notes §5.1).

    Args:
        schema: the table schema.
        mode: the table's column mapping mode.
        partition_columns: logical names to leave out (``metaData.partitionColumns``, unless the
            caller materializes partition columns in the files).

    Returns:
        A ``pa.Schema`` with physical names and, when column mapping is on, ``PARQUET:field_id``
        metadata on every field that has a column id (nested fields, and list elements / map
        keys and values listed in ``delta.columnMapping.nested.ids``).

    Raises:
        KeyError: a partition column is not in the schema.
        ValueError: a field lacks its physical name or id, or a column has type ``variant``.
    """
    excluded = {schema.field(c).name for c in _names(partition_columns)}
    return pa.schema([_arrow_field(f, mode, "") for f in schema.fields if f.name not in excluded])


def _arrow_field(f: StructField, mode: ColumnMappingMode, parent: str) -> Any:
    column = f"{parent}.{f.name}" if parent else f.name
    name = physical_name(f, mode)
    mapped = mode is not ColumnMappingMode.NONE
    where = _Where(mode, column, name, _nested_ids(f) if mapped else {})
    fid = column_id(f) if mapped else None
    if fid is None and mode is ColumnMappingMode.ID:
        raise ValueError(f"column {column!r} has no {COLUMN_ID_KEY} but column mapping mode is id")
    return pa.field(name, _arrow_type(f.type, where), f.nullable, _field_id_metadata(fid))


def _arrow_type(dtype: DataType, where: _Where) -> Any:
    match dtype:
        case PrimitiveType(name="variant"):
            raise ValueError(
                f"column {where.column!r} has type variant, which rlcd cannot convert yet"
            )
        case PrimitiveType(name=name):
            return _ARROW_PRIMITIVES[name]
        case DecimalType(precision=p, scale=s):
            return pa.decimal128(p, s)
        case ArrayType(element_type=e, contains_null=n):
            return pa.list_(_child("element", e, n, where))
        case MapType(key_type=k, value_type=v, value_contains_null=n):
            return pa.map_(_child("key", k, False, where), _child("value", v, n, where))
        case StructType(fields=fields):
            return pa.struct([_arrow_field(f, where.mode, where.column) for f in fields])
        case _:
            assert_never(dtype)


def _child(name: str, dtype: DataType, nullable: bool, where: _Where) -> Any:
    """A list element or map key/value field, with its nested id if Delta recorded one."""
    inner = replace(where, column=f"{where.column}.{name}", path=f"{where.path}.{name}")
    fid = where.nested_ids.get(inner.path)
    return pa.field(name, _arrow_type(dtype, inner), nullable, _field_id_metadata(fid))


def _field_id_metadata(fid: int | None) -> dict[bytes, bytes] | None:
    return None if fid is None else {PARQUET_FIELD_ID_KEY: str(fid).encode()}


# --- type widening (protocol notes §5, typeWidening) --------------------------------------------

_TIME_UNITS: Final = ("s", "ms", "us", "ns")


def cast_compatible(from_type: Any, to_type: Any) -> bool:
    """Whether a column stored as ``from_type`` may be read as ``to_type`` (Delta type widening).

    Delta allows: byte→short→integer→long; float→double; byte/short/integer→double;
    date→timestamp_ntz; decimal(p, s)→decimal(p + k1, s + k2) with k1 >= k2 >= 0;
    byte/short/integer→decimal(10 + k1, k2) and long→decimal(20 + k1, k2) with k1 >= k2 >= 0.
    Also accepted, as the same Delta type in another Arrow encoding: string/large_string/
    string_view, binary/large_binary/binary_view, and a timestamp in a coarser unit with the
    same time-zone-ness. Lists and maps compare their children; struct fields are matched by
    name, and fields present on one side only are allowed (added columns read as null, dropped
    ones are ignored). Nullability is not checked.

    Args:
        from_type: the Arrow type in the data file.
        to_type: the Arrow type of the table schema.
    """
    if from_type == to_type:
        return True
    if _is_list(from_type) and _is_list(to_type):
        return cast_compatible(from_type.value_type, to_type.value_type)
    if pa.types.is_map(from_type) and pa.types.is_map(to_type):
        return cast_compatible(from_type.key_type, to_type.key_type) and cast_compatible(
            from_type.item_type, to_type.item_type
        )
    if pa.types.is_struct(from_type) and pa.types.is_struct(to_type):
        return _struct_compatible(from_type, to_type)
    return _primitive_compatible(from_type, to_type)


def _is_list(t: Any) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t))


def _struct_compatible(from_type: Any, to_type: Any) -> bool:
    targets = {to_type.field(i).name: to_type.field(i).type for i in range(to_type.num_fields)}
    for i in range(from_type.num_fields):
        f = from_type.field(i)
        if f.name in targets and not cast_compatible(f.type, targets[f.name]):
            return False
    return True


def _primitive_compatible(f: Any, t: Any) -> bool:
    """The leaf rules of ``cast_compatible``."""
    types = pa.types
    if _is_string(f) and _is_string(t):
        return True
    if _is_binary(f) and _is_binary(t):
        return True
    if types.is_signed_integer(f):
        return _integer_widens_to(f.bit_width, t)
    if types.is_float32(f):
        return bool(types.is_float64(t))
    if types.is_date32(f):
        return bool(types.is_timestamp(t) and t.tz is None)
    if types.is_decimal(f) and types.is_decimal(t):
        return bool(t.scale >= f.scale and t.precision - t.scale >= f.precision - f.scale)
    if types.is_timestamp(f) and types.is_timestamp(t):
        same_zoning = (f.tz is None) == (t.tz is None)
        return same_zoning and _TIME_UNITS.index(f.unit) <= _TIME_UNITS.index(t.unit)
    return False


def _integer_widens_to(bit_width: int, t: Any) -> bool:
    types = pa.types
    if types.is_signed_integer(t):
        return bool(t.bit_width >= bit_width)
    if types.is_float64(t):
        return bit_width <= 32
    if types.is_decimal(t):
        return bool(t.precision - t.scale >= (20 if bit_width == 64 else 10))
    return False


def _is_string(t: Any) -> bool:
    types = pa.types
    return bool(types.is_string(t) or types.is_large_string(t) or types.is_string_view(t))


def _is_binary(t: Any) -> bool:
    types = pa.types
    return bool(types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t))
