"""Delta schemas: parsing, column mapping, the physical Arrow schema and type widening.

Literal schemas and Hypothesis first; then every fixture table's schema against the Parquet files
Spark wrote for it (marked ``integration``: they read real tables on disk).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcd.delta.schema import (
    PARQUET_FIELD_ID_KEY,
    PRIMITIVE_TYPE_NAMES,
    ArrayType,
    ColumnMappingMode,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    cast_compatible,
    column_id,
    column_mapping_mode,
    parse_data_type,
    parse_schema,
    physical_name,
    physical_partition_columns,
    physical_path,
    schema_to_json,
    to_arrow_schema,
    to_arrow_type,
)
from tests.conftest import fixture_names, fixture_table

if TYPE_CHECKING:
    from pathlib import Path

NONE, NAME, ID = ColumnMappingMode.NONE, ColumnMappingMode.NAME, ColumnMappingMode.ID
fixtures = pytest.mark.integration


def field_json(
    name: str, dtype: object, nullable: bool = True, **metadata: object
) -> dict[str, Any]:
    return {"name": name, "type": dtype, "nullable": nullable, "metadata": metadata}


def struct_json(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "struct", "fields": list(fields)})


def mapped(name: str, dtype: object, cid: int, **extra: object) -> dict[str, Any]:
    """A field with column mapping metadata: physical name ``p<id>``."""
    meta = {"delta.columnMapping.id": cid, "delta.columnMapping.physicalName": f"p{cid}", **extra}
    return field_json(name, dtype, True, **meta)


def field_ids(schema: pa.Schema) -> dict[str, int | None]:
    """``{dotted path: field id}`` for every field, with map entries skipped (names differ)."""
    out: dict[str, int | None] = {}

    def walk(f: pa.Field, path: str) -> None:
        raw = (f.metadata or {}).get(PARQUET_FIELD_ID_KEY)
        out[path] = None if raw is None else int(raw)
        t = f.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), f"{path}.{t.field(i).name}")
        elif pa.types.is_list(t):
            walk(t.value_field, f"{path}.element")
        elif pa.types.is_map(t):
            walk(t.key_field, f"{path}.key")
            walk(t.item_field, f"{path}.value")

    for f in schema:
        walk(f, f.name)
    return out


def parquet_round_trip(schema: pa.Schema) -> pa.Schema:
    """Write an empty table with ``schema`` to Parquet in memory and read the schema back."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue()))


# --- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRIMITIVE_TYPE_NAMES))
def test_every_primitive_name_parses(name: str) -> None:
    """Each Delta primitive type name becomes a PrimitiveType of that name."""
    assert parse_data_type(name) == PrimitiveType(name)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("decimal(10,2)", DecimalType(10, 2)),
        ("decimal( 38 , 0 )", DecimalType(38, 0)),
        ("decimal(1,1)", DecimalType(1, 1)),
        ("decimal", DecimalType(10, 0)),
    ],
)
def test_decimal_forms(text: str, expected: DecimalType) -> None:
    """Spark's decimal spellings parse to precision and scale."""
    assert parse_data_type(text) == expected


@pytest.mark.parametrize("text", ["decimal(39,0)", "decimal(5,6)", "decimal(0,0)", "decimal(5,-1)"])
def test_invalid_decimals_are_refused(text: str) -> None:
    """Precision above 38, scale above precision or negative scale are errors naming the type."""
    with pytest.raises(ValueError, match=r"decimal\("):
        parse_data_type(text, column="d")


def test_nested_types_parse_to_the_model() -> None:
    """Structs, arrays and maps parse with their nullability flags and metadata."""
    schema = parse_schema(
        struct_json(
            field_json("id", "long", False, comment="key"),
            field_json(
                "tags",
                {
                    "type": "map",
                    "keyType": "string",
                    "valueType": {"type": "array", "elementType": "date", "containsNull": False},
                    "valueContainsNull": True,
                },
            ),
            field_json("s", {"type": "struct", "fields": [field_json("x", "decimal(5,2)")]}),
        )
    )
    assert schema == StructType(
        (
            StructField("id", PrimitiveType("long"), False, {"comment": "key"}),
            StructField(
                "tags",
                MapType(
                    PrimitiveType("string"),
                    ArrayType(PrimitiveType("date"), contains_null=False),
                    value_contains_null=True,
                ),
                True,
            ),
            StructField("s", StructType((StructField("x", DecimalType(5, 2), True),)), True),
        )
    )


@pytest.mark.parametrize(
    ("schema_string", "message"),
    [
        (struct_json(field_json("g", "geometry(OGC:CRS84)")), r"'geometry\(OGC:CRS84\)'.*'g'"),
        (struct_json(field_json("v", "void")), r"unknown Delta type 'void'.*'v'"),
        (
            struct_json(field_json("a", {"type": "struct", "fields": [field_json("b", "int")]})),
            r"unknown Delta type 'int' \(column 'a.b'\)",
        ),
        (
            struct_json(field_json("u", {"type": "udt", "class": "x.Y"})),
            r"unknown Delta type 'udt' \(column 'u'\)",
        ),
        (
            struct_json(
                field_json(
                    "m",
                    {
                        "type": "map",
                        "keyType": "string",
                        "valueType": "tinyint",
                        "valueContainsNull": True,
                    },
                )
            ),
            r"unknown Delta type 'tinyint' \(column 'm.value'\)",
        ),
    ],
)
def test_unknown_types_name_the_type_and_column(schema_string: str, message: str) -> None:
    """An unknown type is a ValueError naming the type and the column path."""
    with pytest.raises(ValueError, match=message):
        parse_schema(schema_string)


@pytest.mark.parametrize(
    ("schema_string", "message"),
    [
        ("{not json", "not valid JSON"),
        ('"long"', "must be a struct"),
        ('{"type":"struct"}', "lacks 'fields'"),
        ('{"type":"struct","fields":[{"name":"a","type":"long"}]}', "lacks 'nullable'"),
        (
            '{"type":"struct","fields":[{"name":"a","type":"long","nullable":"yes"}]}',
            "'nullable' must be bool",
        ),
        (
            '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":[]}]}',
            "metadata must be an object",
        ),
        (struct_json(field_json("a", "long"), field_json("A", "long")), "duplicate column"),
        (
            '{"type":"struct","fields":[{"name":"a","type":{"type":"array"},"nullable":true}]}',
            "elementType",
        ),
    ],
)
def test_malformed_schemas_are_refused(schema_string: str, message: str) -> None:
    """Malformed schema JSON is a ValueError saying what is wrong."""
    with pytest.raises(ValueError, match=message):
        parse_schema(schema_string)


def test_metadata_is_kept_verbatim_and_read_only() -> None:
    """Field metadata keeps every JSON value, and cannot be changed through the model."""
    changes = [{"toType": "long", "fromType": "integer", "tableVersion": 2}]
    schema = parse_schema(struct_json(field_json("a", "long", **{"delta.typeChanges": changes})))
    meta = schema.field("a").metadata
    assert meta["delta.typeChanges"] == changes
    with pytest.raises(TypeError):
        meta["x"] = 1  # type: ignore[index]


def test_missing_metadata_means_empty() -> None:
    """A field without "metadata" has an empty mapping."""
    schema = parse_schema('{"type":"struct","fields":[{"name":"a","type":"long","nullable":true}]}')
    assert dict(schema.field("a").metadata) == {}


def test_field_lookup_is_exact_then_case_insensitive() -> None:
    """Delta column names are case-insensitive: lookup falls back to a case-insensitive match."""
    schema = parse_schema(struct_json(field_json("Name", "string")))
    assert schema.field("name") is schema.field("Name")
    with pytest.raises(KeyError, match="nope"):
        schema.field("nope")


# Hypothesis: random schemas round-trip through JSON and are writable as Parquet.

_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
_json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=5)
_json_values = st.recursive(
    _json_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=5,
)
_metadata = st.dictionaries(st.text(max_size=8), _json_values, max_size=3)
_decimals = st.integers(1, 38).flatmap(
    lambda p: st.builds(DecimalType, st.just(p), st.integers(0, p))
)


def _leaves(*, variant: bool) -> st.SearchStrategy[DataType]:
    names = sorted(PRIMITIVE_TYPE_NAMES - (set() if variant else {"variant"}))
    return st.sampled_from(names).map(PrimitiveType) | _decimals


def _structs(children: st.SearchStrategy[DataType]) -> st.SearchStrategy[StructType]:
    fields = st.lists(
        st.tuples(_names, children, st.booleans(), _metadata),
        min_size=1,
        max_size=4,
        unique_by=lambda t: t[0].casefold(),
    )
    return fields.map(lambda fs: StructType(tuple(StructField(*f) for f in fs)))


def _schemas(*, variant: bool = True) -> st.SearchStrategy[StructType]:
    types = st.recursive(
        _leaves(variant=variant),
        lambda c: (
            st.builds(ArrayType, c, st.booleans())
            | st.builds(MapType, c, c, st.booleans())
            | _structs(c)
        ),
        max_leaves=8,
    )
    return _structs(types)


@given(_schemas())
def test_json_round_trip(schema: StructType) -> None:
    """parse_schema(schema_to_json(s)) == s for any schema, metadata included; schemas hash."""
    parsed = parse_schema(schema_to_json(schema))
    assert parsed == schema
    assert hash(parsed) == hash(schema)


@settings(deadline=None, max_examples=60)
@given(_schemas(variant=False))
def test_any_schema_converts_and_is_writable(schema: StructType) -> None:
    """Every variant-free schema converts to Arrow, and pyarrow writes and reads it back as is."""
    arrow = to_arrow_schema(schema, mode=NONE)
    assert arrow.names == list(schema.names)
    assert parquet_round_trip(arrow).equals(arrow)


# --- column mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configuration", "expected"),
    [
        ({}, NONE),
        ({"delta.columnMapping.mode": "none"}, NONE),
        ({"delta.columnMapping.mode": "name"}, NAME),
        ({"delta.columnMapping.mode": "id"}, ID),
        ({"delta.columnMapping.mode": "Name"}, NAME),
    ],
)
def test_column_mapping_mode(configuration: dict[str, str], expected: ColumnMappingMode) -> None:
    """The mode comes from delta.columnMapping.mode, absent meaning none, case ignored."""
    assert column_mapping_mode(configuration) is expected


def test_unknown_column_mapping_mode_is_refused() -> None:
    """An unknown mode is an error naming the value."""
    with pytest.raises(ValueError, match="'bogus'"):
        column_mapping_mode({"delta.columnMapping.mode": "bogus"})


def test_physical_name_and_id_per_mode() -> None:
    """Mode none uses the logical name; name and id modes use the physical name."""
    f = parse_schema(struct_json(mapped("a", "long", 7))).field("a")
    assert physical_name(f, NONE) == "a"
    assert physical_name(f, NAME) == "p7"
    assert physical_name(f, ID) == "p7"
    assert column_id(f) == 7


def test_missing_physical_name_is_refused_when_mapping_is_on() -> None:
    """With column mapping on, a field without a physical name is an error naming it."""
    f = parse_schema(struct_json(field_json("a", "long"))).field("a")
    with pytest.raises(ValueError, match=r"'a' has no delta\.columnMapping\.physicalName"):
        physical_name(f, NAME)


@pytest.mark.parametrize("bad", [True, -1, 2**31, "3", 1.5])
def test_invalid_column_ids_are_refused(bad: object) -> None:
    """A column id must be an int in Parquet's int32 field-id range."""
    f = parse_schema(struct_json(field_json("a", "long", **{"delta.columnMapping.id": bad})))
    with pytest.raises(ValueError, match="not a field id"):
        column_id(f.field("a"))


def test_physical_path_through_nested_structs() -> None:
    """A logical path maps to physical names level by level, case-insensitively."""
    schema = parse_schema(
        struct_json(
            mapped("outer", {"type": "struct", "fields": [mapped("Inner", "long", 2)]}, 1),
            mapped("arr", {"type": "array", "elementType": "long", "containsNull": True}, 3),
        )
    )
    assert physical_path(schema, ["outer", "inner"], NAME) == ("p1", "p2")
    assert physical_path(schema, ["outer", "Inner"], NONE) == ("outer", "Inner")
    with pytest.raises(KeyError, match="not a struct"):
        physical_path(schema, ["arr", "x"], NAME)
    with pytest.raises(KeyError, match="'missing'"):
        physical_path(schema, ["outer", "missing"], NAME)
    with pytest.raises(TypeError, match="sequence of column names"):
        physical_path(schema, "outer", NAME)


def test_physical_partition_columns() -> None:
    """Partition columns (logical, from metaData) map to partitionValues keys (physical)."""
    schema = parse_schema(struct_json(mapped("a", "long", 1), mapped("b", "string", 2)))
    assert physical_partition_columns(schema, ["b", "a"], NAME) == ("p2", "p1")
    assert physical_partition_columns(schema, ["b"], NONE) == ("b",)
    with pytest.raises(KeyError):
        physical_partition_columns(schema, ["c"], NAME)
    with pytest.raises(TypeError, match="sequence of column names"):
        physical_partition_columns(schema, "ab", NAME)


# --- the Arrow schema ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "arrow"),
    [
        ("byte", pa.int8()),
        ("short", pa.int16()),
        ("integer", pa.int32()),
        ("long", pa.int64()),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("boolean", pa.bool_()),
        ("string", pa.string()),
        ("binary", pa.binary()),
        ("date", pa.date32()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestamp_ntz", pa.timestamp("us")),
        ("decimal(10,2)", pa.decimal128(10, 2)),
        ("decimal(38,38)", pa.decimal128(38, 38)),
    ],
)
def test_primitive_arrow_types(delta: str, arrow: pa.DataType) -> None:
    """Each Delta primitive maps to its Arrow type (string and binary are not the large kinds)."""
    assert to_arrow_type(parse_data_type(delta)) == arrow


def test_nested_types_carry_names_and_nullability() -> None:
    """Lists hold "element", maps "key" (never null) and "value"; nullability follows the schema."""
    schema = parse_schema(
        struct_json(
            field_json("l", {"type": "array", "elementType": "long", "containsNull": False}, False),
            field_json(
                "m",
                {
                    "type": "map",
                    "keyType": "string",
                    "valueType": "long",
                    "valueContainsNull": False,
                },
            ),
            field_json("s", {"type": "struct", "fields": [field_json("x", "long", False)]}),
        )
    )
    arrow = to_arrow_schema(schema, mode=NONE)
    lst, mp, st_ = arrow.field("l"), arrow.field("m"), arrow.field("s")
    assert not lst.nullable
    assert (lst.type.value_field.name, lst.type.value_field.nullable) == ("element", False)
    assert (mp.type.key_field.name, mp.type.key_field.nullable) == ("key", False)
    assert (mp.type.item_field.name, mp.type.item_field.nullable) == ("value", False)
    assert st_.nullable
    assert not st_.type.field("x").nullable


def test_partition_columns_are_left_out() -> None:
    """Partition columns are not in the data files' schema; lookup ignores case."""
    schema = parse_schema(struct_json(field_json("a", "long"), field_json("Part", "date")))
    assert to_arrow_schema(schema, mode=NONE, partition_columns=["part"]).names == ["a"]
    assert to_arrow_schema(schema, mode=NONE).names == ["a", "Part"]
    with pytest.raises(KeyError):
        to_arrow_schema(schema, mode=NONE, partition_columns=["zzz"])


def test_field_ids_follow_the_mode() -> None:
    """Ids are written in name and id mode, never in mode none; id mode requires them."""
    schema = parse_schema(struct_json(mapped("a", "long", 5)))
    assert field_ids(to_arrow_schema(schema, mode=ID)) == {"p5": 5}
    assert field_ids(to_arrow_schema(schema, mode=NAME)) == {"p5": 5}
    assert field_ids(to_arrow_schema(schema, mode=NONE)) == {"a": None}
    no_id = parse_schema(
        struct_json(field_json("a", "long", **{"delta.columnMapping.physicalName": "pa"}))
    )
    assert field_ids(to_arrow_schema(no_id, mode=NAME)) == {"pa": None}
    with pytest.raises(ValueError, match=r"'a' has no delta\.columnMapping\.id"):
        to_arrow_schema(no_id, mode=ID)


NESTED_IDS_SCHEMA = struct_json(
    mapped(
        "arr_in_map",
        {
            "type": "map",
            "keyType": "integer",
            "valueType": {"type": "array", "elementType": "integer", "containsNull": True},
            "valueContainsNull": True,
        },
        1,
        **{
            "delta.columnMapping.nested.ids": {
                "p1.key": 100,
                "p1.value": 101,
                "p1.value.element": 102,
            }
        },
    ),
    mapped(
        "list_of_structs",
        {
            "type": "array",
            "elementType": {"type": "struct", "fields": [mapped("x", "long", 3)]},
            "containsNull": True,
        },
        2,
        **{"delta.columnMapping.nested.ids": {"p2.element": 103}},
    ),
    mapped("plain_list", {"type": "array", "elementType": "long", "containsNull": True}, 4),
)


def test_nested_ids_reach_elements_keys_and_values() -> None:
    """delta.columnMapping.nested.ids become field ids of list elements and map keys/values."""
    arrow = to_arrow_schema(parse_schema(NESTED_IDS_SCHEMA), mode=ID)
    expected = {
        "p1": 1,
        "p1.key": 100,
        "p1.value": 101,
        "p1.value.element": 102,
        "p2": 2,
        "p2.element": 103,
        "p2.element.p3": 3,
        "p4": 4,
        "p4.element": None,  # no nested id recorded: none written
    }
    assert field_ids(arrow) == expected
    assert (
        field_ids(to_arrow_schema(parse_schema(NESTED_IDS_SCHEMA), mode=NONE))["arr_in_map.key"]
        is None
    )


def test_pyarrow_writes_every_field_id() -> None:
    """The ids survive a Parquet round trip, on nested fields, elements, keys and values."""
    arrow = to_arrow_schema(parse_schema(NESTED_IDS_SCHEMA), mode=ID)
    assert field_ids(parquet_round_trip(arrow)) == field_ids(arrow)


def test_invalid_nested_ids_are_refused() -> None:
    """nested.ids must be an object of field ids."""
    schema = parse_schema(
        struct_json(
            mapped(
                "l",
                {"type": "array", "elementType": "long", "containsNull": True},
                1,
                **{"delta.columnMapping.nested.ids": "not an object"},
            )
        )
    )
    with pytest.raises(ValueError, match=r"nested\.ids"):
        to_arrow_schema(schema, mode=ID)


@pytest.mark.parametrize(
    ("schema_string", "column"),
    [
        (struct_json(field_json("v", "variant")), "v"),
        (
            struct_json(
                field_json("s", {"type": "struct", "fields": [field_json("v", "variant")]})
            ),
            "s.v",
        ),
        (
            struct_json(
                field_json("l", {"type": "array", "elementType": "variant", "containsNull": True})
            ),
            "l.element",
        ),
    ],
)
def test_variant_is_refused_naming_the_column(schema_string: str, column: str) -> None:
    """Variant parses, but converting it to Arrow is refused with the column's path."""
    schema = parse_schema(schema_string)
    with pytest.raises(ValueError, match=f"column '{column}' has type variant"):
        to_arrow_schema(schema, mode=NONE)


# --- type widening ------------------------------------------------------------------------------

ALLOWED = [
    (pa.int8(), pa.int16()),
    (pa.int8(), pa.int64()),
    (pa.int16(), pa.int32()),
    (pa.int32(), pa.int64()),
    (pa.float32(), pa.float64()),
    (pa.int8(), pa.float64()),
    (pa.int16(), pa.float64()),
    (pa.int32(), pa.float64()),
    (pa.date32(), pa.timestamp("us")),
    (pa.decimal128(10, 2), pa.decimal128(20, 2)),
    (pa.decimal128(10, 2), pa.decimal128(20, 5)),
    (pa.decimal128(10, 2), pa.decimal128(11, 3)),
    (pa.int8(), pa.decimal128(10, 0)),
    (pa.int32(), pa.decimal128(11, 1)),
    (pa.int64(), pa.decimal128(20, 0)),
    (pa.int64(), pa.decimal128(21, 1)),
    (pa.string(), pa.large_string()),
    (pa.large_binary(), pa.binary()),
    (pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC")),
    (pa.list_(pa.int32()), pa.list_(pa.int64())),
    (pa.map_(pa.int32(), pa.float32()), pa.map_(pa.int64(), pa.float64())),
    (pa.struct([("a", pa.int32())]), pa.struct([("a", pa.int64()), ("b", pa.string())])),
    (pa.struct([("dropped", pa.int32())]), pa.struct([("a", pa.int64())])),
]

REFUSED = [
    (pa.int64(), pa.int32()),
    (pa.int64(), pa.float64()),
    (pa.int32(), pa.float32()),
    (pa.float64(), pa.float32()),
    (pa.float32(), pa.decimal128(38, 10)),
    (pa.date32(), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("us"), pa.date32()),
    (pa.timestamp("us"), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("ns"), pa.timestamp("us")),
    (pa.decimal128(10, 2), pa.decimal128(10, 3)),
    (pa.decimal128(10, 2), pa.decimal128(11, 4)),
    (pa.decimal128(10, 2), pa.decimal128(9, 2)),
    (pa.int8(), pa.decimal128(9, 0)),
    (pa.int32(), pa.decimal128(10, 1)),
    (pa.int64(), pa.decimal128(19, 0)),
    (pa.string(), pa.binary()),
    (pa.int32(), pa.string()),
    (pa.uint8(), pa.int16()),
    (pa.list_(pa.int64()), pa.list_(pa.int32())),
    (pa.struct([("a", pa.int64())]), pa.struct([("a", pa.int32())])),
]


@pytest.mark.parametrize(("source", "target"), ALLOWED)
def test_allowed_widenings(source: pa.DataType, target: pa.DataType) -> None:
    """Each widening Delta allows (and each same-type re-encoding) is cast-compatible."""
    assert cast_compatible(source, target)


@pytest.mark.parametrize(("source", "target"), REFUSED)
def test_refused_changes(source: pa.DataType, target: pa.DataType) -> None:
    """Narrowings and changes Delta does not allow are not cast-compatible."""
    assert not cast_compatible(source, target)


_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNIVERSE = st.sampled_from(
    [*_INTS, pa.float32(), pa.float64(), pa.date32(), pa.timestamp("us")]
) | st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s)))


def _extremes(t: pa.DataType) -> pa.Array:
    """The values of ``t`` hardest to widen (Delta's date range for dates)."""
    if pa.types.is_integer(t):
        bits = t.bit_width
        return pa.array([-(2 ** (bits - 1)), -1, 0, 1, 2 ** (bits - 1) - 1], t)
    if pa.types.is_floating(t):
        info = {32: 3.4028234663852886e38, 64: 1.7976931348623157e308}[t.bit_width]
        return pa.array([-info, -1.5, 0.0, 1e-30, info, float("inf"), float("-inf")], t)
    if pa.types.is_date32(t):
        return pa.array([-719162, 0, 2932896], t)  # 0001-01-01, 1970-01-01, 9999-12-31
    if pa.types.is_decimal(t):
        nines = "9" * t.precision  # exact: Decimal arithmetic would round at 28 digits
        whole = nines[t.scale :] or "0"
        biggest = f"{whole}.{nines[: t.scale]}" if t.scale else whole  # "9.0" is 2 digits
        return pa.array([Decimal(f"-{biggest}"), Decimal(0), Decimal(biggest)], t)
    return pa.array([-(2**62), 0, 2**62], t)  # timestamps


@settings(deadline=None)
@given(_UNIVERSE, _UNIVERSE)
def test_compatible_casts_are_lossless(source: pa.DataType, target: pa.DataType) -> None:
    """Whenever cast_compatible says yes, pyarrow casts the extreme values there and back intact."""
    if cast_compatible(source, target):
        values = _extremes(source)
        assert pc.cast(pc.cast(values, target), source).equals(values)


@given(_UNIVERSE, _UNIVERSE, _UNIVERSE)
def test_widening_is_transitive(a: pa.DataType, b: pa.DataType, c: pa.DataType) -> None:
    """Two allowed widenings in a row are one allowed widening."""
    assert cast_compatible(a, a)
    if cast_compatible(a, b) and cast_compatible(b, c):
        assert cast_compatible(a, c)


# --- against the fixture tables -----------------------------------------------------------------

SCHEMALESS = {"canonicalized-paths-special-a", "corrupted-last-checkpoint"}  # hand-made logs
WITH_DATA = {  # the tables whose Parquet files must be checked, not silently absent
    "parquet-all-types",
    "table-with-columnmapping-mode-id",
    "table-with-columnmapping-mode-name",
    "dv-with-columnmapping",
    "data-reader-timestamp_ntz",
    "time-travel-schema-changes-a",
    "type-widening",
    "data-reader-partition-values",
}


def log_actions(table: Path) -> list[dict[str, Any]]:
    """Every action in the table's JSON commits, in version order."""
    commits = sorted(
        p for p in (table / "_delta_log").glob("*.json") if ".checkpoint." not in p.name
    )
    return [
        json.loads(line) for p in commits for line in p.read_text().splitlines() if line.strip()
    ]


def table_metadata(table: Path) -> dict[str, Any] | None:
    """The newest metaData with a schema: from the JSON commits, else from a checkpoint."""
    metas = [a["metaData"] for a in log_actions(table) if "metaData" in a]
    if metas and "schemaString" in metas[-1]:
        return metas[-1]
    for checkpoint in sorted((table / "_delta_log").glob("*.checkpoint*.parquet"), reverse=True):
        rows = pq.read_table(checkpoint, columns=["metaData"]).column("metaData").to_pylist()
        for row in rows:
            if row and row.get("schemaString"):
                return dict(row)
    return None


def data_files(table: Path) -> list[Path]:
    """The distinct data files named by adds in the JSON commits that exist on disk."""
    paths = {unquote(a["add"]["path"]) for a in log_actions(table) if "add" in a}
    return sorted(table / p for p in paths if (table / p).is_file())


def int96_columns(path: Path) -> set[str]:
    """Top-level columns Spark stored as legacy INT96 timestamps (pyarrow reads them as ns)."""
    schema = pq.ParquetFile(path).schema
    return {
        schema.column(i).path
        for i in range(len(schema))
        if schema.column(i).physical_type == "INT96"
    }


def assert_field_matches(
    file: pa.Field, table: pa.Field, mode: ColumnMappingMode, int96: bool
) -> None:
    """A file's field matches the table's: name, field id, a type readable as the table's."""
    assert file.name == table.name
    if mode is not NONE:
        assert field_ids(pa.schema([file]))[file.name] == field_ids(pa.schema([table]))[table.name]
    if int96:  # a legacy encoding of Delta timestamp, not a widening
        assert (file.type, table.type) == (pa.timestamp("ns"), pa.timestamp("us", tz="UTC"))
        return
    assert cast_compatible(file.type, table.type), f"{file} -> {table}"
    ft, tt = file.type, table.type
    if pa.types.is_struct(ft):
        assert_fields_match(list(ft), list(tt), mode, set())
    elif pa.types.is_list(ft):
        assert_field_matches(ft.value_field, tt.value_field, mode, False)
    elif pa.types.is_map(ft):
        assert_field_matches(ft.key_field, tt.key_field, mode, False)
        assert_field_matches(ft.item_field, tt.item_field, mode, False)


def assert_fields_match(
    file_fields: list[pa.Field],
    table_fields: list[pa.Field],
    mode: ColumnMappingMode,
    int96: set[str],
) -> None:
    """Each file column is a table column (by id in id mode, else by name); not the converse."""

    def key(f: pa.Field) -> object:
        return field_ids(pa.schema([f]))[f.name] if mode is ID else f.name

    by_key = {key(f): f for f in table_fields}
    for f in file_fields:
        assert key(f) in by_key, f"file column {f.name} is not in the table schema"
        assert_field_matches(f, by_key[key(f)], mode, f.name in int96)


@fixtures
@pytest.mark.parametrize("name", fixture_names())
def test_fixture_schema_converts_and_matches_the_data_files(name: str) -> None:
    """Each fixture's schema round-trips, converts to Arrow and describes its Parquet files."""
    table = fixture_table(name)
    meta = table_metadata(table)
    if meta is None:
        assert name in SCHEMALESS
        return
    schema = parse_schema(meta["schemaString"])
    assert json.loads(schema_to_json(schema)) == json.loads(meta["schemaString"])
    mode = column_mapping_mode(meta.get("configuration") or {})
    arrow = to_arrow_schema(schema, mode=mode, partition_columns=meta.get("partitionColumns") or ())
    files = data_files(table)
    assert files or name not in WITH_DATA
    for path in files:
        assert_fields_match(list(pq.read_schema(path)), list(arrow), mode, int96_columns(path))


def test_schemaless_fixtures_are_still_there() -> None:
    """The fixtures assumed schema-less above exist (so that the skip is not silent)."""
    assert set(fixture_names()) >= SCHEMALESS


@fixtures
@pytest.mark.parametrize(
    "name", ["table-with-columnmapping-mode-id", "table-with-columnmapping-mode-name"]
)
def test_written_field_ids_equal_sparks(name: str) -> None:
    """A Parquet file written with our schema has exactly the names and field ids Spark wrote."""
    table = fixture_table(name)
    meta = table_metadata(table)
    assert meta is not None
    mode = column_mapping_mode(meta["configuration"])
    ours = parquet_round_trip(to_arrow_schema(parse_schema(meta["schemaString"]), mode=mode))
    for path in data_files(table):
        spark = pq.read_schema(path)
        assert field_ids(ours) == field_ids(spark)
        assert all(
            v is not None
            for k, v in field_ids(spark).items()
            if not k.endswith(("key", "value", "element"))
        )


@fixtures
def test_dv_with_columnmapping_uses_physical_partition_names() -> None:
    """The partition column is left out and the data columns carry physical names and ids."""
    meta = table_metadata(fixture_table("dv-with-columnmapping"))
    assert meta is not None
    schema = parse_schema(meta["schemaString"])
    arrow = to_arrow_schema(schema, mode=NAME, partition_columns=meta["partitionColumns"])
    assert field_ids(arrow) == {
        "col-9f0743fd-a52e-44a7-92e0-72a3d34231b1": 2,
        "col-ae46e8ed-607b-4b7c-8a13-44991fe0a2e4": 3,
    }
    assert physical_partition_columns(schema, ["part"], NAME) == (
        "col-60c949ca-b8bc-4330-b931-b73fb4c60037",
    )


@fixtures
def test_type_widening_files_cast_to_the_current_schema() -> None:
    """Files written before the type change hold narrower types that cast losslessly."""
    table = fixture_table("type-widening")
    meta = table_metadata(table)
    assert meta is not None
    arrow = to_arrow_schema(parse_schema(meta["schemaString"]), mode=NONE)
    widened = 0
    for path in data_files(table):
        data = pq.read_table(path)
        for column in arrow.names:
            source, target = data.schema.field(column).type, arrow.field(column).type
            assert cast_compatible(source, target), f"{column}: {source} -> {target}"
            values = data.column(column)
            assert pc.cast(pc.cast(values, target), source).equals(values)
            widened += source != target
    assert widened == len(arrow.names)  # the older file differs in every column


@fixtures
def test_parquet_all_types_matches_field_by_field() -> None:
    """Spark's all-types file has exactly our types, but for its INT96 timestamp."""
    table = fixture_table("parquet-all-types")
    meta = table_metadata(table)
    assert meta is not None
    arrow = to_arrow_schema(parse_schema(meta["schemaString"]), mode=NONE)
    (path,) = data_files(table)
    spark = pq.read_schema(path)
    assert int96_columns(path) == {"TimestampType"}
    for f in arrow:
        if f.name != "TimestampType":
            assert spark.field(f.name).type == f.type, f.name
