"""Delta file stats: column selection, value forms, string truncation, streaming.

Literal specs and batches first, then Hypothesis (random batch splits agree with one pass and with
a pure-Python oracle), then the stats Spark wrote for fixture tables (marked ``integration``:
they read real tables on disk).
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcd.compaction._stats import (
    PARQUET_MAX_STATISTICS_BYTES,
    StatsAccumulator,
    truncate_max_string,
    truncate_min_string,
)
from rlcd.compaction.rewrite import RewriteSettings, parquet_writer
from rlcd.compaction.source import ReadOptions
from rlcd.delta.actions import AddFile, Metadata, parse_commit
from rlcd.delta.schema import (
    PHYSICAL_NAME_KEY,
    ArrayType,
    ColumnMappingMode,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    column_mapping_mode,
    parse_schema,
    to_arrow_schema,
)
from rlcd.delta.stats_spec import (
    NUM_INDEXED_COLS_KEY,
    STATS_COLUMNS_KEY,
    STRING_PREFIX_LENGTH_KEY,
    StatKind,
    StatsLeaf,
    StatsSpec,
    parse_stats_columns,
    stats_spec,
)
from rlcd.parquet.dictionary import FloatStats, dictionary_range, float_stats
from tests.conftest import fixture_table
from tests.unit.parquet.files import groups, write

NONE, NAME = ColumnMappingMode.NONE, ColumnMappingMode.NAME
K = StatKind
MAX = "\U0010ffff"
fixtures = pytest.mark.integration


def prim(name: str) -> PrimitiveType:
    return PrimitiveType(name)


def fld(name: str, dtype: DataType, physical: str | None = None) -> StructField:
    metadata = {PHYSICAL_NAME_KEY: physical} if physical else {}
    return StructField(name, dtype, True, metadata)


def struct_of(*fields: StructField) -> StructType:
    return StructType(fields)


def leaves(spec: StatsSpec) -> list[tuple[str, ...]]:
    return [leaf.path for leaf in spec.leaves]


def one_leaf(kind: StatKind, name: str = "x", prefix: int = 32) -> StatsSpec:
    return StatsSpec((StatsLeaf((name,), kind),), prefix)


def run(spec: StatsSpec, *batches: Any, tight_bounds: bool | None = None) -> dict[str, Any]:
    """Feed ``batches`` and parse the stats text (floats and decimals as ``Decimal``)."""
    acc = StatsAccumulator(spec)
    for batch in batches:
        acc.update(batch)
    parsed: dict[str, Any] = json.loads(acc.finish(tight_bounds=tight_bounds), parse_float=Decimal)
    return parsed


def batch_of(**columns: Any) -> Any:
    return pa.record_batch(columns)


# --- which columns (§4.3) -----------------------------------------------------------------------

WIDE = struct_of(
    fld("p", prim("integer")),
    fld("a", prim("long")),
    fld("s", struct_of(fld("x", prim("double")), fld("Y", struct_of(fld("z", prim("string")))))),
    fld("arr", ArrayType(prim("integer"), True)),
    fld("m", MapType(prim("string"), prim("integer"), True)),
    fld("b", prim("boolean")),
    fld("bin", prim("binary")),
    fld("t", prim("timestamp")),
    fld("d", DecimalType(5, 2)),
)


ALL_WIDE = [("a",), ("s", "x"), ("s", "Y", "z"), ("arr",), ("m",), ("b",), ("bin",), ("t",), ("d",)]


def wide_spec(**config: str) -> StatsSpec:
    return stats_spec(WIDE, mode=NONE, partition_columns=["P"], configuration=config)


def test_default_spec_takes_every_data_leaf_depth_first_with_its_kind() -> None:
    """Structs are walked, partition columns left out; odd types get nullCount only."""
    spec = wide_spec()
    assert [(leaf.path, leaf.kind) for leaf in spec.leaves] == [
        (("a",), K.INTEGER),
        (("s", "x"), K.FLOAT),
        (("s", "Y", "z"), K.STRING),
        (("arr",), K.NULL_COUNT),
        (("m",), K.NULL_COUNT),
        (("b",), K.NULL_COUNT),
        (("bin",), K.NULL_COUNT),
        (("t",), K.TIMESTAMP),
        (("d",), K.DECIMAL),
    ]
    assert spec.string_prefix_length == 32


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        ("0", []),
        ("1", [("a",)]),
        ("2", [("a",), ("s", "x")]),  # a struct's leaves count one by one
        ("4", [("a",), ("s", "x"), ("s", "Y", "z"), ("arr",)]),  # an array takes a slot
        ("6", [("a",), ("s", "x"), ("s", "Y", "z"), ("arr",), ("m",), ("b",)]),
        ("-1", ALL_WIDE),
        (" 100 ", ALL_WIDE),
    ],
)
def test_num_indexed_cols_counts_leaves(count: str, expected: list[tuple[str, ...]]) -> None:
    """``dataSkippingNumIndexedCols`` keeps the first N leaves (-1: all)."""
    assert leaves(wide_spec(**{NUM_INDEXED_COLS_KEY: count})) == expected


def test_default_is_the_first_32_leaves() -> None:
    """Without properties, 32 leaves of a wider schema get stats."""
    schema = struct_of(*(fld(f"c{i}", prim("integer")) for i in range(40)))
    spec = stats_spec(schema, mode=NONE)
    assert leaves(spec) == [(f"c{i}",) for i in range(32)]


@pytest.mark.parametrize("bad", ["-2", "x", "1.5", ""])
def test_bad_num_indexed_cols_is_an_error(bad: str) -> None:
    """A malformed or too small count names the property."""
    with pytest.raises(ValueError, match=NUM_INDEXED_COLS_KEY):
        wide_spec(**{NUM_INDEXED_COLS_KEY: bad})


def test_stats_columns_take_precedence_and_keep_schema_order() -> None:
    """Named columns win over the count; case is ignored; a struct means all its leaves."""
    spec = wide_spec(**{STATS_COLUMNS_KEY: "T, S.y,  A", NUM_INDEXED_COLS_KEY: "1"})
    assert leaves(spec) == [("a",), ("s", "Y", "z"), ("t",)]


def test_stats_columns_naming_a_struct_or_a_nested_leaf() -> None:
    """``s`` takes every leaf below it, ``s.x`` just that one."""
    assert leaves(wide_spec(**{STATS_COLUMNS_KEY: "s"})) == [("s", "x"), ("s", "Y", "z")]
    assert leaves(wide_spec(**{STATS_COLUMNS_KEY: "s.x"})) == [("s", "x")]
    assert leaves(wide_spec(**{STATS_COLUMNS_KEY: "s.y.Z,arr"})) == [("s", "Y", "z"), ("arr",)]


def test_stats_columns_ignore_names_matching_nothing_and_partition_columns() -> None:
    """Unknown names, paths through non-structs and partition columns select nothing."""
    spec = wide_spec(**{STATS_COLUMNS_KEY: "nope, a.b, arr.element, p"})
    assert leaves(spec) == []
    assert run(spec, batch_of(a=[1])) == {"numRecords": 1}


def test_stats_columns_with_backticks() -> None:
    """Backticks quote dots, commas and spaces; a doubled backtick is a literal one."""
    schema = struct_of(
        fld("a.b", prim("integer")),
        fld("c", struct_of(fld("d`e", prim("integer")), fld("f, g", prim("integer")))),
        fld("h", prim("integer")),
    )
    spec = stats_spec(
        schema, mode=NONE, configuration={STATS_COLUMNS_KEY: " `A.B` ,c.`D``E`, `c`.`f, g`"}
    )
    assert leaves(spec) == [("a.b",), ("c", "d`e"), ("c", "f, g")]


def test_blank_stats_columns_select_nothing() -> None:
    """An empty property means no column gets stats (not the default 32)."""
    assert leaves(wide_spec(**{STATS_COLUMNS_KEY: "  "})) == []


@pytest.mark.parametrize("bad", ["a,,b", "`a", "a b", "a.", ",a", "a.`b`c"])
def test_malformed_stats_columns_are_an_error(bad: str) -> None:
    """Text that Spark could not parse either is refused, naming the property."""
    with pytest.raises(ValueError, match=STATS_COLUMNS_KEY):
        parse_stats_columns(bad)


def test_parse_stats_columns() -> None:
    """Names come back as written (case kept), one tuple per column."""
    assert parse_stats_columns("a, B.c ,`x.y`.z") == (("a",), ("B", "c"), ("x.y", "z"))


def test_column_mapping_gives_physical_paths() -> None:
    """Stats keys are physical names; named columns are matched by logical name."""
    schema = struct_of(
        fld("part", prim("integer"), "col-p"),
        fld("Outer", struct_of(fld("inner", prim("string"), "col-i")), "col-o"),
        fld("n", prim("long"), "col-n"),
    )
    spec = stats_spec(schema, mode=NAME, partition_columns=["part"])
    assert leaves(spec) == [("col-o", "col-i"), ("col-n",)]
    named = stats_spec(
        schema, mode=NAME, partition_columns=["part"], configuration={STATS_COLUMNS_KEY: "outer"}
    )
    assert leaves(named) == [("col-o", "col-i")]
    stats = run(named, pa.record_batch({"col-o": pa.array([{"col-i": "v"}]), "col-n": [1]}))
    assert stats["minValues"] == {"col-o": {"col-i": "v"}}


def test_string_prefix_length_property() -> None:
    """``dataSkippingStringPrefixLength`` sets the prefix; negative is an error."""
    assert wide_spec(**{STRING_PREFIX_LENGTH_KEY: "5"}).string_prefix_length == 5
    with pytest.raises(ValueError, match=STRING_PREFIX_LENGTH_KEY):
        wide_spec(**{STRING_PREFIX_LENGTH_KEY: "-1"})


def test_unknown_partition_column_is_a_key_error() -> None:
    """A partition column must be a top-level column."""
    with pytest.raises(KeyError):
        stats_spec(WIDE, mode=NONE, partition_columns=["zz"])


@pytest.mark.parametrize(
    "paths",
    [[("a",), ("a",)], [("s",), ("s", "x")], [("s", "x"), ("s",)]],
)
def test_spec_refuses_overlapping_paths(paths: list[tuple[str, ...]]) -> None:
    """A path cannot repeat or also be a struct holding another path."""
    with pytest.raises(ValueError, match=r"twice|structs"):
        StatsSpec(tuple(StatsLeaf(p, K.INTEGER) for p in paths))


# --- string truncation (§4.4) -------------------------------------------------------------------


def test_short_strings_are_kept_whole() -> None:
    """Up to the prefix length (in UTF-16 units for max), nothing changes."""
    assert truncate_min_string("a" * 32, 32) == "a" * 32
    assert truncate_max_string("a" * 32, 32) == "a" * 32
    assert truncate_max_string("😀" * 16, 32) == "😀" * 16  # 32 units


def test_long_ascii_string() -> None:
    """Min is the prefix; max is the prefix + U+007F when the next char is below it."""
    value = "abcdefghijklmnopqrstuvwxyz0123456789"
    assert truncate_min_string(value, 32) == value[:32]
    assert truncate_max_string(value, 32) == value[:32] + "\x7f"


@pytest.mark.parametrize("next_char", ["\x7f", "é", "\uffff", "😀"])
def test_next_char_at_or_above_u007f_gets_u10ffff(next_char: str) -> None:
    """U+007F would not be an upper bound: the tie-breaker is U+10FFFF."""
    value = "a" * 32 + next_char + "tail"
    assert truncate_max_string(value, 32) == "a" * 32 + MAX
    assert truncate_min_string(value, 32) == "a" * 32


def test_surrogate_pairs_are_never_split() -> None:
    """Min counts code points; max counts UTF-16 units but takes a straddling pair whole."""
    value = "a" * 31 + "😀" + "bcd"  # the emoji is units 32 and 33
    assert truncate_min_string(value, 32) == "a" * 31 + "😀"
    assert truncate_max_string(value, 32) == "a" * 31 + "😀" + "\x7f"


def test_min_and_max_count_differently_for_astral_text() -> None:
    """Spark's min keeps 32 code points, its max 32 UTF-16 units (documented asymmetry)."""
    value = "😀" * 20
    assert truncate_min_string(value, 32) == value
    assert truncate_max_string(value, 32) == "😀" * 16 + MAX


def test_max_extends_past_u10ffff() -> None:
    """A dropped U+10FFFF cannot be beaten, so the prefix grows past it."""
    value = "a" * 32 + MAX + MAX + "b"
    assert truncate_max_string(value, 32) == "a" * 32 + MAX + MAX + "\x7f"
    assert truncate_max_string("a" * 32 + MAX + MAX, 32) == "a" * 32 + MAX + MAX  # ran off


def test_max_gives_up_past_twice_the_prefix() -> None:
    """No valid prefix within 64 units: no max at all."""
    assert truncate_max_string("a" * 32 + MAX * 16 + "b", 32) == "a" * 32 + MAX * 16 + "\x7f"
    assert truncate_max_string("a" * 32 + MAX * 17 + "b", 32) is None


def test_zero_prefix() -> None:
    """Prefix 0: the empty string is the min, and there is no max."""
    assert truncate_min_string("abc", 0) == ""
    assert truncate_max_string("abc", 0) is None
    assert truncate_max_string("", 0) == ""


ALPHABET = st.sampled_from(["a", "b", "~", "\x7f", "\x80", "é", "\uffff", "😀", MAX])
TEXT = st.lists(ALPHABET, max_size=14).map("".join)


@given(TEXT, st.integers(0, 6))
def test_truncated_bounds_hold_in_code_point_order(value: str, prefix: int) -> None:
    """Min is a prefix below the value; max (if any) is above everything up to the value."""
    low = truncate_min_string(value, prefix)
    assert value.startswith(low)
    high = truncate_max_string(value, prefix)
    if high is not None:
        assert value <= high
        assert len(high.encode("utf-16-le")) // 2 <= max(2 * prefix + 2, len(value) * 2)


def test_accumulator_truncates_strings() -> None:
    """The column's min and max are truncated after they are found."""
    values = ["b" * 40, "a" * 40 + "z", None, "c" * 3]
    stats = run(one_leaf(K.STRING, prefix=4), batch_of(x=values))
    assert stats["minValues"] == {"x": "aaaa"}
    assert stats["maxValues"] == {"x": "c" * 3}
    stats = run(one_leaf(K.STRING, prefix=4), batch_of(x=["zzzzzé"]))
    assert stats["maxValues"] == {"x": "zzzz\x7f"}


# --- values (§4.5) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        (0, "1970-01-01T00:00:00.000"),
        (1999, "1970-01-01T00:00:00.001"),
        (-1, "1969-12-31T23:59:59.999"),
        (-1000, "1969-12-31T23:59:59.999"),
        (-1001, "1969-12-31T23:59:59.998"),
        (-62135596800_000_000, "0001-01-01T00:00:00.000"),
        (253402300799_999_999, "9999-12-31T23:59:59.999"),
    ],
)
def test_timestamps_floor_to_milliseconds(micros: int, text: str) -> None:
    """Floor, not truncate toward zero, also before 1970; UTC gets Z, NTZ nothing."""
    utc = pa.array([micros], pa.timestamp("us", tz="UTC"))
    stats = run(one_leaf(K.TIMESTAMP), batch_of(x=utc))
    assert stats["minValues"] == stats["maxValues"] == {"x": text + "Z"}
    ntz = pa.array([micros], pa.timestamp("us"))
    stats = run(one_leaf(K.TIMESTAMP_NTZ), batch_of(x=ntz))
    assert stats["minValues"] == stats["maxValues"] == {"x": text}


@pytest.mark.parametrize(
    ("unit", "value", "text"),
    [("ns", -1, "23:59:59.999Z"), ("ms", -1, "23:59:59.999Z"), ("s", -1, "23:59:59.000Z")],
)
def test_timestamp_units(unit: str, value: int, text: str) -> None:
    """Any Arrow unit floors the same way."""
    stats = run(one_leaf(K.TIMESTAMP), batch_of(x=pa.array([value], pa.timestamp(unit))))
    assert stats["minValues"] == {"x": "1969-12-31T" + text}


def test_out_of_range_dates_and_timestamps_get_no_bound() -> None:
    """Beyond year 9999 there is no Spark spelling; the bound is left out."""
    far = pa.array([0, 2**62], pa.timestamp("us", tz="UTC"))
    stats = run(one_leaf(K.TIMESTAMP), batch_of(x=far))
    assert stats["minValues"] == {"x": "1970-01-01T00:00:00.000Z"}
    assert stats["maxValues"] == {}
    days = pa.array([-1, 2**30], pa.date32())
    stats = run(one_leaf(K.DATE), batch_of(x=days))
    assert (stats["minValues"], stats["maxValues"]) == ({"x": "1969-12-31"}, {})


def test_decimals_keep_every_digit() -> None:
    """Decimals are JSON numbers with their exact digits and scale."""
    big = Decimal("-1234567890123456789012345678.0123456789")
    values = pa.array([big, Decimal("0.5")], pa.decimal128(38, 10))
    acc = StatsAccumulator(one_leaf(K.DECIMAL))
    acc.update(batch_of(x=values))
    text = acc.finish(tight_bounds=None)
    assert '"minValues":{"x":-1234567890123456789012345678.0123456789}' in text
    assert '"maxValues":{"x":0.5000000000}' in text


def test_integers_are_exact() -> None:
    """64-bit extremes survive (no float on the way)."""
    stats = run(one_leaf(K.INTEGER), batch_of(x=pa.array([2**63 - 1, -(2**63)], pa.int64())))
    assert (stats["minValues"]["x"], stats["maxValues"]["x"]) == (-(2**63), 2**63 - 1)


def test_float32_is_written_exactly() -> None:
    """A float32 bound is the exact value, which parses back to the same float32."""
    stats = run(one_leaf(K.FLOAT), batch_of(x=pa.array([0.234], pa.float32())))
    written = float(stats["minValues"]["x"])
    assert written == struct.unpack("f", struct.pack("f", 0.234))[0]


@pytest.mark.parametrize(
    ("values", "low", "high"),
    [
        ([1.0, math.nan, 3.0, None], "1.0", "NaN"),  # Spark orders NaN above every number
        ([math.nan, math.nan], "NaN", "NaN"),
        ([-math.inf, 1.0], "-Infinity", "1.0"),
        ([1.0, math.inf], "1.0", "Infinity"),
        ([math.inf], "Infinity", "Infinity"),
        ([-0.0, 2.0], "0.0", "2.0"),  # Spark writes both zeros as 0.0
        ([-3.0, -0.0], "-3.0", "0.0"),
        ([-0.0, math.nan], "0.0", "NaN"),
    ],
)
def test_nan_infinity_and_zero(
    values: list[float | None], low: str | None, high: str | None
) -> None:
    """Float bounds are Spark's: NaN above every number, infinities and NaN as the strings
    Spark writes, zeros unsigned."""
    acc = StatsAccumulator(one_leaf(K.FLOAT))
    acc.update(batch_of(x=pa.array(values, pa.float64())))
    stats = json.loads(acc.finish(tight_bounds=None), parse_float=str)
    assert stats["minValues"].get("x") == low
    assert stats["maxValues"].get("x") == high
    assert stats["nullCount"] == {"x": values.count(None)}  # NaN is not null


def test_nan_in_any_batch_is_the_max() -> None:
    """The NaN flag sticks across batches."""
    spec = one_leaf(K.FLOAT)
    stats = run(spec, batch_of(x=[2.0]), batch_of(x=[math.nan]), batch_of(x=[5.0]))
    assert (stats["minValues"], stats["maxValues"]) == ({"x": 2}, {"x": "NaN"})


def test_all_null_columns_get_null_count_only() -> None:
    """No min/max entry (not even an empty nested object) when every value is null."""
    spec = StatsSpec(
        (StatsLeaf(("x",), K.INTEGER), StatsLeaf(("s", "y"), K.STRING)),
    )
    s = pa.array([{"y": None}, None], pa.struct([("y", pa.string())]))
    stats = run(spec, batch_of(x=pa.array([None, None], pa.int32()), s=s))
    assert stats == {
        "numRecords": 2,
        "minValues": {},
        "maxValues": {},
        "nullCount": {"x": 2, "s": {"y": 2}},
    }


def test_empty_batches_and_no_batches() -> None:
    """Empty batches change nothing; a file of no rows has zero counts and no bounds."""
    spec = one_leaf(K.INTEGER)
    empty = batch_of(x=pa.array([], pa.int64()))
    assert (
        run(spec)
        == run(spec, empty)
        == {
            "numRecords": 0,
            "minValues": {},
            "maxValues": {},
            "nullCount": {"x": 0},
        }
    )
    assert run(spec, empty, batch_of(x=[4]), empty)["minValues"] == {"x": 4}


def test_null_parent_struct_counts_as_null_for_its_leaves() -> None:
    """A null struct nulls its leaves, and their hidden child values are not bounds."""
    inner = pa.StructArray.from_arrays(
        [pa.array([1, 100, 3, 4]), pa.array(["x", "zzz", None, "a"])],
        names=["a", "b"],
        mask=pa.array([False, True, False, False]),
    )
    outer = pa.StructArray.from_arrays(
        [inner], names=["in"], mask=pa.array([False, False, False, True])
    )
    spec = StatsSpec(
        (StatsLeaf(("o", "in", "a"), K.INTEGER), StatsLeaf(("o", "in", "b"), K.STRING))
    )
    stats = run(spec, batch_of(o=outer))
    assert stats["nullCount"] == {"o": {"in": {"a": 2, "b": 3}}}
    assert stats["minValues"] == {"o": {"in": {"a": 1, "b": "x"}}}
    assert stats["maxValues"] == {"o": {"in": {"a": 3, "b": "x"}}}


def test_arrays_maps_binary_boolean_get_whole_column_null_count() -> None:
    """Only nullCount, of the column itself (empty and null-containing lists are not null)."""
    spec = StatsSpec(
        tuple(StatsLeaf(p, K.NULL_COUNT) for p in [("l",), ("m",), ("bin",), ("b",), ("s", "l")])
    )
    batch = pa.record_batch(
        {
            "l": pa.array([[1, None], None, []], pa.list_(pa.int32())),
            "m": pa.array([[("k", 1)], None, None], pa.map_(pa.string(), pa.int64())),
            "bin": pa.array([b"a", None, b""]),
            "b": pa.array([True, False, None]),
            "s": pa.array([{"l": [1]}, None, {"l": None}], pa.struct([("l", pa.list_(pa.int8()))])),
        }
    )
    stats = run(spec, batch)
    assert stats == {
        "numRecords": 3,
        "nullCount": {"l": 1, "m": 2, "bin": 1, "b": 1, "s": {"l": 2}},
    }


def test_key_order_and_tight_bounds() -> None:
    """numRecords, minValues, maxValues, nullCount, tightBounds; None leaves it out."""
    spec = one_leaf(K.INTEGER)
    acc = StatsAccumulator(spec)
    acc.update(batch_of(x=[1, 2]))
    assert list(json.loads(acc.finish(tight_bounds=True))) == [
        "numRecords",
        "minValues",
        "maxValues",
        "nullCount",
        "tightBounds",
    ]
    assert json.loads(acc.finish(tight_bounds=False))["tightBounds"] is False
    assert acc.finish(tight_bounds=None) == (
        '{"numRecords":2,"minValues":{"x":1},"maxValues":{"x":2},"nullCount":{"x":0}}'
    )
    assert acc.num_records == 2


def test_batches_with_a_different_column_order_are_resolved_by_name() -> None:
    """The field lookup is redone when the schema changes."""
    spec = StatsSpec((StatsLeaf(("x",), K.INTEGER), StatsLeaf(("y",), K.STRING)))
    stats = run(spec, batch_of(x=[1], y=["b"]), batch_of(y=["a"], x=[5]))
    assert (stats["minValues"], stats["maxValues"]) == ({"x": 1, "y": "a"}, {"x": 5, "y": "b"})


def test_a_table_is_accepted_too() -> None:
    """Chunked columns work like arrays."""
    table = pa.Table.from_batches([batch_of(x=[3, None]), batch_of(x=[1, 2])])
    assert run(one_leaf(K.INTEGER), table)["nullCount"] == {"x": 1}


@pytest.mark.parametrize(
    ("spec", "batch", "message"),
    [
        (one_leaf(K.INTEGER), batch_of(y=[1]), "no single column 'x'"),
        (one_leaf(K.INTEGER), batch_of(x=["a"]), "'x' is string"),
        (one_leaf(K.STRING), batch_of(x=pa.array(["a"]).dictionary_encode()), "'x' is dict"),
        (StatsSpec((StatsLeaf(("x", "y"), K.INTEGER),)), batch_of(x=[1]), "not a struct"),
    ],
)
def test_batches_not_matching_the_spec_are_refused(
    spec: StatsSpec, batch: Any, message: str
) -> None:
    """A missing column or wrong Arrow type is an error, also for an empty batch."""
    with pytest.raises(ValueError, match=message):
        StatsAccumulator(spec).update(batch)
    with pytest.raises(ValueError, match=message):
        StatsAccumulator(spec).update(batch.slice(0, 0))


# --- streaming == one pass == oracle (Hypothesis) -------------------------------------------------

PREFIX = 3
EPOCH = datetime(1970, 1, 1)
INNER = pa.struct([("a", pa.int32()), ("b", pa.string())])
ARROW_TYPES: dict[str, Any] = {
    "i": pa.int64(),
    "f": pa.float64(),
    "g": pa.float32(),
    "s": pa.string(),
    "d": pa.decimal128(9, 3),
    "D": pa.decimal128(30, 2),
    "ts": pa.timestamp("us", tz="UTC"),
    "nt": pa.timestamp("us"),
    "dt": pa.date32(),
    "l": pa.list_(pa.int32()),
    "flag": pa.bool_(),
    "bin": pa.binary(),
}
KINDS: dict[tuple[str, ...], StatKind] = {
    ("i",): K.INTEGER,
    ("f",): K.FLOAT,
    ("g",): K.FLOAT,
    ("s",): K.STRING,
    ("d",): K.DECIMAL,
    ("D",): K.DECIMAL,
    ("ts",): K.TIMESTAMP,
    ("nt",): K.TIMESTAMP_NTZ,
    ("dt",): K.DATE,
    ("l",): K.NULL_COUNT,
    ("flag",): K.NULL_COUNT,
    ("bin",): K.NULL_COUNT,
    ("st", "a"): K.INTEGER,
    ("st", "b"): K.STRING,
}
ELEMENTS: dict[str, st.SearchStrategy[Any]] = {
    "i": st.integers(-(2**63), 2**63 - 1),
    "f": st.floats(allow_nan=True, allow_infinity=True),
    "g": st.floats(width=32, allow_nan=True),
    "s": TEXT,
    "d": st.decimals(-(10**5), 10**5, places=3, allow_nan=False),
    "D": st.decimals(-(10**26), 10**26, places=2, allow_nan=False),
    "ts": st.integers(-(10**13), 10**13),
    "nt": st.integers(-(10**13), 10**13),
    "dt": st.integers(-(10**5), 10**5),
    "l": st.lists(st.none() | st.integers(-5, 5), max_size=3),
    "flag": st.booleans(),
    "bin": st.binary(max_size=4),
}
# strings too long for Parquet's statistics, which the footer path computes itself
LONG_TEXT = st.builds(
    lambda piece, extra: piece * (PARQUET_MAX_STATISTICS_BYTES // len(piece.encode()) + extra),
    st.sampled_from(["a", "z", "é", "\U0001f600", "ab"]),
    st.integers(-1, 2),
)


@st.composite
def tables(
    draw: st.DrawFn, long_strings: bool = False
) -> tuple[Any, dict[tuple[str, ...], list[Any]]]:
    """A random table, and each leaf's values as Python (None where null, parents folded)."""
    n = draw(st.integers(0, 25))
    text = TEXT | LONG_TEXT if long_strings else TEXT
    elements = ELEMENTS | {"s": text}
    values = {
        name: draw(st.lists(st.none() | strategy, min_size=n, max_size=n))
        for name, strategy in elements.items()
    }
    columns = {name: pa.array(v, ARROW_TYPES[name]) for name, v in values.items()}
    a = draw(st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n))
    b = draw(st.lists(st.none() | text, min_size=n, max_size=n))
    parent_null = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    columns["st"] = pa.StructArray.from_arrays(
        [pa.array(a, pa.int32()), pa.array(b, pa.string())],
        fields=list(INNER),
        mask=pa.array(parent_null, pa.bool_()),
    )
    leaf_values: dict[tuple[str, ...], list[Any]] = {(name,): v for name, v in values.items()}
    leaf_values["st", "a"] = [None if p else v for v, p in zip(a, parent_null, strict=True)]
    leaf_values["st", "b"] = [None if p else v for v, p in zip(b, parent_null, strict=True)]
    return pa.table(columns), leaf_values


def oracle_bounds(kind: StatKind, present: list[Any]) -> tuple[Any, Any]:
    """The expected (min, max) JSON values, from Python values, independently of the module."""
    if kind is K.FLOAT:
        numbers = [v for v in present if not math.isnan(v)]
        if not numbers:
            return "NaN", "NaN"
        high = max(numbers) if len(numbers) == len(present) else math.nan
        return spark_float(min(numbers)), spark_float(high)
    low, high = min(present), max(present)
    if kind is K.STRING:
        return truncate_min_string(low, PREFIX), truncate_max_string(high, PREFIX)
    if kind in (K.TIMESTAMP, K.TIMESTAMP_NTZ):
        zone = "Z" if kind is K.TIMESTAMP else ""
        return oracle_timestamp(low, zone), oracle_timestamp(high, zone)
    if kind is K.DATE:
        return oracle_date(low), oracle_date(high)
    return low, high


def spark_float(value: float) -> Any:
    """A float bound as Spark's JSON spells it (parsed with ``parse_float=Decimal``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return Decimal(repr(abs(value) if value == 0 else value))


def oracle_timestamp(micros: int, zone: str) -> str:
    """Floor to milliseconds by dropping sub-millisecond digits of the (floored) datetime."""
    return (EPOCH + timedelta(microseconds=micros)).isoformat(timespec="milliseconds") + zone


def oracle_date(days: int) -> str:
    return (date(1970, 1, 1) + timedelta(days=days)).isoformat()


def oracle(leaf_values: dict[tuple[str, ...], list[Any]], rows: int) -> dict[str, Any]:
    expected: dict[str, Any] = {"numRecords": rows, "minValues": {}, "maxValues": {}}
    nulls: dict[str, Any] = {}
    for path, kind in KINDS.items():
        values = leaf_values[path]
        present = [v for v in values if v is not None]
        put(nulls, path, len(values) - len(present))
        if kind is K.NULL_COUNT or not present:
            continue
        for key, bound in zip(
            ("minValues", "maxValues"), oracle_bounds(kind, present), strict=True
        ):
            if bound is not None:
                put(expected[key], path, bound)
    expected["nullCount"] = nulls
    return expected


def put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


HYPOTHESIS_SPEC = StatsSpec(tuple(StatsLeaf(p, k) for p, k in KINDS.items()), PREFIX)


@settings(max_examples=150, deadline=None)
@given(tables(), st.lists(st.integers(0, 25), max_size=6))
def test_streaming_equals_one_pass_equals_oracle(
    drawn: tuple[Any, dict[tuple[str, ...], list[Any]]], cuts: list[int]
) -> None:
    """Any split into (possibly empty) batches gives the same text, matching a Python oracle."""
    table, leaf_values = drawn
    whole = pa.RecordBatch.from_arrays(
        [c.combine_chunks() for c in table.columns], schema=table.schema
    )
    one_pass = StatsAccumulator(HYPOTHESIS_SPEC)
    one_pass.update(whole)
    streamed = StatsAccumulator(HYPOTHESIS_SPEC)
    bounds = [0, *sorted(min(c, whole.num_rows) for c in cuts), whole.num_rows]
    for start, stop in itertools.pairwise(bounds):
        streamed.update(whole.slice(start, stop - start))
    text = one_pass.finish(tight_bounds=True)
    assert streamed.finish(tight_bounds=True) == text
    got = json.loads(text, parse_float=Decimal)
    expected = oracle(leaf_values, table.num_rows) | {"tightBounds": True}
    zeros_unsigned(got)
    assert got == expected


def via_footer(spec: StatsSpec, row_groups: list[Any], tight_bounds: bool | None) -> str:
    """Stats of ``row_groups`` written by rlcd's Parquet writer, read from the file's footer
    (only floats, arrays and maps are observed in the batches)."""
    schema = row_groups[0].schema
    acc = StatsAccumulator(spec, footer_schema=schema)
    settings = RewriteSettings("t", 0, ReadOptions(schema), spec, ())
    writer = parquet_writer(pa.BufferOutputStream(), settings)
    for rows in row_groups:
        acc.update(rows)
        if rows.num_rows:  # the rewrite never writes an empty row group
            acc.update_row_group(rows)
            writer.write_table(rows, row_group_size=rows.num_rows)
    writer.close()
    acc.add_footer(writer.writer.metadata)
    return acc.finish(tight_bounds=tight_bounds)


@settings(max_examples=150, deadline=None)
@given(tables(long_strings=True), st.lists(st.integers(0, 25), max_size=6))
def test_footer_stats_equal_batch_stats(
    drawn: tuple[Any, dict[tuple[str, ...], list[Any]]], cuts: list[int]
) -> None:
    """Stats read from the footer of the file rlcd writes, cut into any row groups, equal stats
    computed from the rows, also where strings are too long for Parquet's statistics."""
    table, _ = drawn
    one_pass = StatsAccumulator(HYPOTHESIS_SPEC)
    one_pass.update(table)
    bounds = [0, *sorted(min(c, table.num_rows) for c in cuts), table.num_rows]
    groups = [table.slice(start, stop - start) for start, stop in itertools.pairwise(bounds)]
    assert via_footer(HYPOTHESIS_SPEC, groups, True) == one_pass.finish(tight_bounds=True)


def dictionary_floats(acc: StatsAccumulator, rows: Any) -> dict[int, FloatStats]:
    """The float stats the dictionary pages of ``rows`` give, written by pyarrow's defaults."""
    file = write(rows, max(1, rows.num_rows))
    [group] = groups(file)
    found = {}
    for column in acc.float_columns():
        where = dictionary_range(group, column)
        page = None if where is None else file.slice(where[0], where[1] - where[0])
        stats = None if page is None else float_stats(group, column, page.to_pybytes())
        if stats is not None:
            found[column] = stats
    return found


def via_copies(
    spec: StatsSpec, row_groups: list[Any], copied: list[bool], *, dictionaries: bool = False
) -> StatsAccumulator:
    """The accumulator of a file of ``row_groups``, those flagged in ``copied`` taken as the
    copy path takes a copied row group (its footer, its float stats from its dictionary pages
    with ``dictionaries`` where those give them, and its other batch columns decoded)."""
    schema = row_groups[0].schema
    acc = StatsAccumulator(spec, footer_schema=schema)
    settings = RewriteSettings("t", 0, ReadOptions(schema), spec, ())
    writer = parquet_writer(pa.BufferOutputStream(), settings)
    for rows, copy in zip(row_groups, copied, strict=True):
        if copy:
            floats = dictionary_floats(acc, rows) if dictionaries and rows.num_rows else {}
            acc.update_copied_row_group(
                rows.select(acc.batch_columns(floats)), rows.num_rows, frozenset(), floats
            )
        else:
            acc.update(rows)
            acc.update_row_group(rows)
        writer.write_table(rows, row_group_size=rows.num_rows)
    writer.close()
    acc.add_footer(writer.writer.metadata)
    return acc


@settings(max_examples=100, deadline=None)
@given(
    tables(),
    st.lists(st.integers(1, 25), max_size=6),
    st.lists(st.booleans(), min_size=7),
    st.booleans(),
)
def test_copied_row_groups_stats_equal_batch_stats(
    drawn: tuple[Any, dict[tuple[str, ...], list[Any]]],
    cuts: list[int],
    copied: list[bool],
    dictionaries: bool,
) -> None:
    """Stats of a file whose row groups are any mix of copied (bounds from their footer
    entries, floats from their dictionary pages or decoded, arrays and maps decoded) and
    encoded ones equal the rows' stats."""
    table, _ = drawn
    if not table.num_rows:
        return
    one_pass = StatsAccumulator(HYPOTHESIS_SPEC)
    one_pass.update(table)
    bounds = sorted({0, *(min(c, table.num_rows) for c in cuts), table.num_rows})
    parts = [table.slice(start, stop - start) for start, stop in itertools.pairwise(bounds)]
    acc = via_copies(HYPOTHESIS_SPEC, parts, copied[: len(parts)], dictionaries=dictionaries)
    assert acc.finish(tight_bounds=True) == one_pass.finish(tight_bounds=True)


def test_a_copied_row_groups_inexact_bounds_are_dropped() -> None:
    """A copied row group whose statistics are not exact drops its column's bounds (never
    guessed), keeping its null count; the other columns keep theirs."""
    rows = pa.table({"x": pa.array([3, None, 9], pa.int64()), "s": ["b", "a", "c"]})
    spec = StatsSpec(
        (StatsLeaf(("x",), K.INTEGER), StatsLeaf(("s",), K.STRING)), string_prefix_length=32
    )
    acc = StatsAccumulator(spec, footer_schema=rows.schema)
    writer = parquet_writer(
        pa.BufferOutputStream(), RewriteSettings("t", 0, ReadOptions(rows.schema), spec, ())
    )
    writer.write_table(rows, row_group_size=3)
    writer.close()
    acc.update_copied_row_group(rows.select(acc.batch_columns()), 3, frozenset({0}))
    acc.add_footer(writer.writer.metadata)
    stats = json.loads(acc.finish(tight_bounds=None))
    assert stats["numRecords"] == 3 and stats["nullCount"] == {"x": 1, "s": 0}
    assert stats["minValues"] == {"s": "a"} and stats["maxValues"] == {"s": "c"}


def test_footer_row_groups_must_match_what_was_announced() -> None:
    """A footer with other row groups than the rows announced is refused, not misread."""
    spec = one_leaf(K.INTEGER)
    rows = pa.table({"x": [1, 2]})
    acc = StatsAccumulator(spec, footer_schema=rows.schema)
    writer = parquet_writer(
        pa.BufferOutputStream(), RewriteSettings("t", 0, ReadOptions(rows.schema), spec, ())
    )
    writer.write_table(rows, row_group_size=1)
    writer.close()
    acc.update_row_group(rows)
    with pytest.raises(ValueError, match="footer has 2 row groups, 1 were announced"):
        acc.add_footer(writer.writer.metadata)


def zeros_unsigned(stats: dict[str, Any]) -> None:
    """Check zero bounds are spelled ``0.0`` (as Spark writes them), not ``-0.0``."""
    for key in ("minValues", "maxValues"):
        for name in ("f", "g"):
            value = stats[key].get(name)
            if isinstance(value, Decimal) and value == 0:
                assert not value.is_signed()


# --- against Spark (fixture tables) -------------------------------------------------------------


def read_log(table: str, version: int) -> tuple[Metadata, list[AddFile]]:
    """The table's first metaData and the DV-free adds of commit ``version``."""
    log = fixture_table(table) / "_delta_log"
    metadata = next(
        a for a in parse_commit((log / f"{0:020d}.json").read_bytes()) if isinstance(a, Metadata)
    )
    adds = [
        a
        for a in parse_commit((log / f"{version:020d}.json").read_bytes())
        if isinstance(a, AddFile) and a.deletion_vector is None and a.stats
    ]
    return metadata, adds


def leaf_types(arrow_type: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Arrow type of every struct leaf, by physical path."""
    out: dict[tuple[str, ...], Any] = {}
    for f in arrow_type:
        if pa.types.is_struct(f.type):
            out |= leaf_types(f.type, (*path, f.name))
        else:
            out[(*path, f.name)] = f.type
    return out


def flat(tree: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out |= flat(v, (*path, k))
        else:
            out[(*path, k)] = v
    return out


def same_value(ours: Any, spark: Any, arrow_type: Any) -> bool:
    """Equal as Delta values: float32 after rounding, timestamps as instants."""
    if pa.types.is_float32(arrow_type):
        f32 = struct.Struct("f")
        return bool(f32.unpack(f32.pack(float(ours))) == f32.unpack(f32.pack(float(spark))))
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return datetime.fromisoformat(ours) == datetime.fromisoformat(spark)
    return bool(ours == spark)


FIXTURE_COMMITS = [
    ("data-skipping-basic-stats-all-types", 0),  # every primitive; Spark's -08:00 offsets
    ("parquet-all-types", 0),  # nested structs, arrays, maps, binary, boolean, int96 times
    ("data-reader-timestamp_ntz", 1),  # NTZ with sub-ms values; partitioned
    ("dv-with-columnmapping", 0),  # physical-name keys, tightBounds (before any DV)
]


@fixtures
@pytest.mark.parametrize("footer", [False, True], ids=["batches", "footer"])
@pytest.mark.parametrize(("table", "version"), FIXTURE_COMMITS)
def test_stats_match_what_spark_wrote(table: str, version: int, footer: bool) -> None:
    """Stats of each data file equal the add's stats from Spark: fed in batches of 7 rows, or
    rewritten by rlcd's Parquet writer in row groups of 7 rows and read from its footer."""
    metadata, adds = read_log(table, version)
    assert adds
    schema = parse_schema(metadata.schema_string)
    mode = column_mapping_mode(metadata.configuration)
    parts = metadata.partition_columns
    spec = stats_spec(
        schema, mode=mode, partition_columns=parts, configuration=metadata.configuration
    )
    target = to_arrow_schema(schema, mode=mode, partition_columns=parts)
    types = leaf_types(target)
    for add in adds:
        spark = json.loads(add.stats or "", parse_float=Decimal)
        data = pq.ParquetFile(str(fixture_table(table) / unquote(add.path)))
        batches = [b.cast(target) for b in data.iter_batches(batch_size=7)]
        if footer:
            groups = [pa.Table.from_batches([b]) for b in batches]
            text = via_footer(spec, groups, spark.get("tightBounds"))
        else:
            acc = StatsAccumulator(spec)
            for batch in batches:
                acc.update(batch)
            text = acc.finish(tight_bounds=spark.get("tightBounds"))
        ours = json.loads(text, parse_float=Decimal)
        assert list(ours) == list(spark), add.path
        assert ours["numRecords"] == spark["numRecords"]
        assert ours["nullCount"] == spark["nullCount"]
        assert ours.get("tightBounds") == spark.get("tightBounds")
        for key in ("minValues", "maxValues"):
            mine, theirs = flat(ours[key]), flat(spark[key])
            assert mine.keys() == theirs.keys(), (add.path, key)
            for path, value in theirs.items():
                assert same_value(mine[path], value, types[path]), (add.path, key, path)
