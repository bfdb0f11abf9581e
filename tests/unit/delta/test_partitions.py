"""Partition values (§2.11) and partition paths (§2.10).

Literal cases and Hypothesis first; then the fixture tables: every add path Spark wrote, and the
partition columns we materialise compared with what deltalake reads (marked ``integration``).
"""

from __future__ import annotations

import json
import math
import posixpath
import string
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import given
from hypothesis import strategies as st

from rlcd.delta.partitions import (
    HIVE_DEFAULT_PARTITION,
    decode_uri_path,
    encode_uri_path,
    hive_escape,
    hive_unescape,
    object_key,
    parse_partition_value,
    partition_array,
    partition_dir,
    partition_scalar,
)
from rlcd.delta.schema import (
    PRIMITIVE_TYPE_NAMES,
    ArrayType,
    DataType,
    DecimalType,
    PrimitiveType,
    StructType,
    column_mapping_mode,
    parse_schema,
    physical_partition_columns,
    to_arrow_type,
)
from tests.conftest import fixture_names, fixture_table

if TYPE_CHECKING:
    from pathlib import Path

fixtures = pytest.mark.integration

BYTE, SHORT, INT, LONG = (PrimitiveType(n) for n in ("byte", "short", "integer", "long"))
FLOAT, DOUBLE, BOOL = PrimitiveType("float"), PrimitiveType("double"), PrimitiveType("boolean")
STRING, BINARY, DATE = PrimitiveType("string"), PrimitiveType("binary"), PrimitiveType("date")
TS, TS_NTZ = PrimitiveType("timestamp"), PrimitiveType("timestamp_ntz")
PARTITIONABLE: list[DataType] = [
    *(PrimitiveType(n) for n in sorted(PRIMITIVE_TYPE_NAMES - {"variant"})),
    DecimalType(10, 2),
]


# --- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", PARTITIONABLE, ids=str)
@pytest.mark.parametrize("raw", [None, ""])
def test_null_forms(raw: str | None, dtype: DataType) -> None:
    """JSON null (Spark) and the empty string (spec) are both null, for every type."""
    assert parse_partition_value(raw, dtype) is None
    assert not partition_scalar(raw, dtype).is_valid
    assert partition_array(raw, dtype, 2).null_count == 2


@pytest.mark.parametrize(
    ("raw", "dtype", "expected"),
    [
        ("0", BYTE, 0),
        ("-128", BYTE, -128),
        ("127", BYTE, 127),
        ("-32768", SHORT, -32768),
        ("2147483647", INT, 2147483647),
        ("+7", INT, 7),
        ("-9223372036854775808", LONG, -(2**63)),
        ("1.0", DOUBLE, 1.0),
        ("1.0E10", DOUBLE, 1e10),
        ("-1.5E-5", DOUBLE, -1.5e-5),
        ("Infinity", DOUBLE, math.inf),
        ("-Infinity", FLOAT, -math.inf),
        ("inf", DOUBLE, math.inf),  # Rust's Display form, as delta-rs may write it
        ("42.00", DecimalType(4, 2), Decimal("42.00")),
        ("1", DecimalType(10, 2), Decimal("1.00")),
        ("-0.5", DecimalType(1, 1), Decimal("-0.5")),
        ("1E+2", DecimalType(3, 0), Decimal("100")),
        ("true", BOOL, True),
        ("false", BOOL, False),
        ("TRUE", BOOL, True),
        ("2021-09-08", DATE, date(2021, 9, 8)),
        ("2021-09-08 11:11:11", TS, datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)),
        ("2021-09-08 11:11:11.5", TS, datetime(2021, 9, 8, 11, 11, 11, 500000, tzinfo=UTC)),
        ("2024-01-01T10:00:00.000000Z", TS, datetime(2024, 1, 1, 10, tzinfo=UTC)),
        (
            "2024-01-01T10:00:00.123456Z",
            TS,
            datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=UTC),
        ),
        ("2024-01-01T10:00:00+02:00", TS, datetime(2024, 1, 1, 8, tzinfo=UTC)),
        ("2024-01-01 00:30:00-0130", TS, datetime(2024, 1, 1, 2, tzinfo=UTC)),
        ("2013-07-05 17:01:00.123456", TS_NTZ, datetime(2013, 7, 5, 17, 1, 0, 123456)),
        ("2013-07-05T17:01:00", TS_NTZ, datetime(2013, 7, 5, 17, 1)),
        ("2013-07-05 17:01:00.123456000", TS_NTZ, datetime(2013, 7, 5, 17, 1, 0, 123456)),
        ("\u0001\u0002é", BINARY, b"\x01\x02\xc3\xa9"),
        ("null", STRING, "null"),
        (" a:b/c ", STRING, " a:b/c "),
    ],
)
def test_values(raw: str, dtype: DataType, expected: object) -> None:
    """Each type's serialized form parses to the Python value (protocol notes §2.11)."""
    value = parse_partition_value(raw, dtype)
    assert value == expected
    assert type(value) is type(expected)


def test_nan() -> None:
    """NaN parses for float and double (and is not null)."""
    for dtype in (FLOAT, DOUBLE):
        value = parse_partition_value("NaN", dtype)
        assert isinstance(value, float)
        assert math.isnan(value)
        assert partition_scalar("NaN", dtype).is_valid


def test_float_values_are_rounded_to_float32() -> None:
    """A float column's value equals what an Arrow float32 holds, so values compare equal."""
    value = parse_partition_value("0.1", FLOAT)
    assert value != 0.1
    assert value == pa.scalar(0.1, pa.float32()).as_py()


def test_legacy_and_iso_timestamps_agree() -> None:
    """The legacy form is read as UTC, the same instant as the ISO form (module header)."""
    legacy = parse_partition_value("2021-09-08 11:11:11", TS)
    iso = parse_partition_value("2021-09-08T11:11:11.000000Z", TS)
    assert legacy == iso
    assert isinstance(legacy, datetime)
    assert legacy.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("raw", "dtype", "message"),
    [
        ("128", BYTE, "out of range"),
        ("-32769", SHORT, "out of range"),
        ("9223372036854775808", LONG, "out of range"),
        ("1.0", INT, "not an integer"),
        ("1_000", INT, "not an integer"),
        (" 1", INT, "not an integer"),
        ("\u0661", INT, "not an integer"),  # ARABIC-INDIC DIGIT ONE: int() would take it
        ("1e39", FLOAT, "out of range"),
        ("0x10", DOUBLE, "not a floating-point"),
        ("1.234", DecimalType(10, 2), "more than 2 digits after"),
        ("123", DecimalType(3, 1), "more than 3 digits"),
        ("NaN", DecimalType(3, 1), "not a decimal"),
        ("1E+999999", DecimalType(3, 1), "out of range"),
        ("yes", BOOL, "not true or false"),
        ("2021-9-8", DATE, "not YYYY-MM-DD"),
        ("2021-02-30", DATE, "day is out of range"),
        ("2021-09-08", TS, "not YYYY-MM-DD HH:MM:SS"),
        ("2021-09-08 11:11:11.1234567", TS, "finer than microseconds"),
        ("2021-09-08T11:11:11Z", TS_NTZ, "no time zone"),
        ("0001-01-01 00:00:00+01:00", TS, "out of range"),
    ],
)
def test_invalid_values_are_refused(raw: str, dtype: DataType, message: str) -> None:
    """A value that is not valid for its type is a ValueError naming value, type and reason."""
    with pytest.raises(ValueError, match=message) as info:
        parse_partition_value(raw, dtype)
    assert repr(raw) in str(info.value)


@pytest.mark.parametrize(
    "dtype",
    [PrimitiveType("variant"), ArrayType(STRING, True), StructType(())],
    ids=str,
)
def test_non_primitive_types_cannot_partition(dtype: DataType) -> None:
    """Only primitive types can be partition column types."""
    with pytest.raises(ValueError, match="cannot be a partition column type"):
        parse_partition_value("x", dtype)


@pytest.mark.parametrize(
    ("raw", "dtype"),
    [
        ("7", BYTE),
        ("1.5", FLOAT),
        ("42.00", DecimalType(4, 2)),
        ("2021-09-08", DATE),
        ("2021-09-08 11:11:11", TS),
        ("2021-09-08 11:11:11", TS_NTZ),
        ("ab", BINARY),
        ("x", STRING),
        ("true", BOOL),
    ],
    ids=str,
)
def test_arrow_scalar_and_array_have_the_column_type(raw: str, dtype: DataType) -> None:
    """The scalar and the constant array carry the column's Arrow type and the parsed value."""
    scalar = partition_scalar(raw, dtype)
    assert scalar.type == to_arrow_type(dtype)
    assert scalar.as_py() == parse_partition_value(raw, dtype)
    array = partition_array(raw, dtype, 3)
    assert array.type == to_arrow_type(dtype)
    assert array.to_pylist() == [scalar.as_py()] * 3
    assert len(partition_array(raw, dtype, 0)) == 0


def test_negative_length_is_refused() -> None:
    """An array length below zero is an error."""
    with pytest.raises(ValueError, match="length"):
        partition_array("1", INT, -1)


@pytest.mark.parametrize(
    ("dtype", "bits"), [(BYTE, 8), (SHORT, 16), (INT, 32), (LONG, 64)], ids=str
)
@given(data=st.data())
def test_integers_round_trip(dtype: DataType, bits: int, data: st.DataObject) -> None:
    """Every integer in the type's range parses from its decimal form."""
    value = data.draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
    assert parse_partition_value(str(value), dtype) == value


@given(st.floats(allow_nan=False))
def test_doubles_round_trip(value: float) -> None:
    """Python's repr and a Java-style exponent both parse back to the same double."""
    assert parse_partition_value(repr(value), DOUBLE) == value
    java_style = repr(value).replace("e+", "E").replace("e-", "E-").replace("inf", "Infinity")
    assert parse_partition_value(java_style, DOUBLE) == value


@given(st.integers(1, 38).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, p))), st.data())
def test_decimals_round_trip(ps: tuple[int, int], data: st.DataObject) -> None:
    """A decimal at the column's scale parses back exactly (38 digits included)."""
    precision, scale = ps
    unscaled = data.draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    value = Decimal(f"{unscaled}E-{scale}")  # exact; scaleb() would round at 28 digits
    parsed = parse_partition_value(str(value), DecimalType(precision, scale))
    assert parsed == value
    assert partition_scalar(str(value), DecimalType(precision, scale)).as_py() == value


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
def test_timestamps_round_trip_in_every_form(moment: datetime) -> None:
    """Legacy, ISO-Z and offset forms of the same instant parse to the same UTC value."""
    utc = moment.replace(tzinfo=UTC)
    for text in (
        moment.isoformat(sep=" "),
        moment.isoformat(timespec="microseconds") + "Z",
        utc.astimezone(timezone(timedelta(hours=-8))).isoformat(),
    ):
        assert parse_partition_value(text, TS) == utc, text
    assert parse_partition_value(moment.isoformat(sep=" "), TS_NTZ) == moment
    assert parse_partition_value(moment.date().isoformat(), DATE) == moment.date()


# --- directories and paths ----------------------------------------------------------------------

HIVE_ESCAPED = [chr(c) for c in range(0x20)] + list("\"#%'*/:=?\\\x7f{[]^")


@pytest.mark.parametrize("char", HIVE_ESCAPED, ids=lambda c: f"U+{ord(c):04X}")
def test_hive_escapes_each_listed_character(char: str) -> None:
    """Every character §2.10 lists becomes %XX, upper-case hex."""
    assert hive_escape(f"a{char}b") == f"a%{ord(char):02X}b"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, HIVE_DEFAULT_PARTITION),
        ("", HIVE_DEFAULT_PARTITION),
        ("2021-09-08 11:11:11", "2021-09-08 11%3A11%3A11"),
        ("bar+%21", "bar+%2521"),
        ("a b+c@d,é~()!$&;<>|`", "a b+c@d,é~()!$&;<>|`"),
        ("x:y", "x%3Ay"),
    ],
)
def test_hive_escape_examples(value: str | None, expected: str) -> None:
    """Only the listed characters are escaped: space, plus and non-ASCII stay."""
    assert hive_escape(value) == expected


@given(st.text(min_size=1))
def test_hive_escape_round_trips(value: str) -> None:
    """hive_unescape undoes hive_escape, and the result has no raw '/', ':' or '='."""
    escaped = hive_escape(value)
    assert hive_unescape(escaped) == value
    assert not set(escaped) & {"/", ":", "=", "\x00", "\n"}


def test_partition_dir() -> None:
    """One col=value per partition column, in the given order, both sides escaped."""
    values = {"b": "x:y", "a": "1", "c": None, "d": ""}
    assert partition_dir(values, ["a", "b", "c"]) == "a=1/b=x%3Ay/c=" + HIVE_DEFAULT_PARTITION
    assert partition_dir(values, ["d"]) == "d=" + HIVE_DEFAULT_PARTITION
    assert partition_dir({"we:ird": "v"}, ["we:ird"]) == "we%3Aird=v"
    assert partition_dir({}, []) == ""
    with pytest.raises(ValueError, match="'z'"):
        partition_dir(values, ["z"])


@pytest.mark.parametrize(
    ("path", "encoded"),
    [
        ("part-0.parquet", "part-0.parquet"),
        (
            "as_timestamp=2021-09-08 11%3A11%3A11/f.parquet",
            "as_timestamp=2021-09-08%2011%253A11%253A11/f.parquet",
        ),
        ("_2=bar+%2521/f", "_2=bar%2B%252521/f"),
        ("é/p@#h?", "%C3%A9/p%40%23h%3F"),
        ("a~b_c.d-e", "a~b_c.d-e"),
    ],
)
def test_encode_uri_path_examples(path: str, encoded: str) -> None:
    """Only A-Z a-z 0-9 - . _ ~ / = stay raw; everything else is %XX of its UTF-8 bytes."""
    assert encode_uri_path(path) == encoded
    assert decode_uri_path(encoded) == path


@pytest.mark.parametrize("path", ["", "/abs/f", "a//b", "a/./b", "../b", "a/", "a/.."])
def test_encode_uri_path_refuses_non_relative_paths(path: str) -> None:
    """Empty, absolute and dot-segment paths are refused (readers would normalise them)."""
    with pytest.raises(ValueError, match="path"):
        encode_uri_path(path)


def test_decode_keeps_plus_and_rejects_bad_utf8() -> None:
    """'+' is a literal plus (never unquote_plus); %-escapes that are not UTF-8 are errors."""
    assert decode_uri_path("a+b%2Bc%20d") == "a+b+c d"
    with pytest.raises(ValueError, match="utf-8"):
        decode_uri_path("bad%C3%28")


_segments = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1).filter(
    lambda s: "/" not in s and s not in (".", "..")
)


@given(st.lists(_segments, min_size=1, max_size=4).map("/".join))
def test_encode_uri_path_round_trips(path: str) -> None:
    """decode(encode(p)) == p, and the encoding uses only the safe set and %XX."""
    encoded = encode_uri_path(path)
    assert decode_uri_path(encoded) == path
    assert set(encoded) <= set(string.ascii_letters + string.digits + "-._~/=%")


@given(st.dictionaries(st.sampled_from(["a", "b:c", "d e"]), st.none() | st.text(), min_size=1))
def test_partition_dir_encodes_and_decodes_back(values: dict[str, str | None]) -> None:
    """A directory from partition values survives URI encoding, and unescapes to the values."""
    columns = sorted(values)
    directory = partition_dir(values, columns)
    assert decode_uri_path(encode_uri_path(directory + "/f.parquet")) == directory + "/f.parquet"
    for component, column in zip(directory.split("/"), columns, strict=True):
        name, _, escaped = component.partition("=")
        assert hive_unescape(name) == column
        raw = values[column]
        assert escaped == HIVE_DEFAULT_PARTITION if not raw else hive_unescape(escaped) == raw


# --- against the fixture tables -----------------------------------------------------------------


def log_actions(table: Path) -> list[dict[str, Any]]:
    """Every action in the table's JSON commits, in version order."""
    commits = sorted(
        p for p in (table / "_delta_log").glob("*.json") if ".checkpoint." not in p.name
    )
    return [
        json.loads(line) for p in commits for line in p.read_text().splitlines() if line.strip()
    ]


def last_metadata(table: Path) -> dict[str, Any]:
    return [a["metaData"] for a in log_actions(table) if "metaData" in a][-1]


def has_data_files(table: Path) -> bool:
    return any(p.suffix == ".parquet" for p in table.rglob("*") if "_delta_log" not in p.parts)


PATH_FIXTURES = [
    "data-reader-escaped-chars",
    "data-reader-partition-values",
    "log-replay-special-characters",
    "canonicalized-paths-special-a",
]


@fixtures
@pytest.mark.parametrize("name", fixture_names())
def test_every_add_path_decodes_and_re_encodes(name: str) -> None:
    """For every add Spark wrote: the decoded path is on disk (if the table has data files);
    the directory built from partitionValues is the decoded directory; re-encoding round-trips.
    """
    table = fixture_table(name)
    meta = last_metadata(table)
    partition_columns = meta.get("partitionColumns") or []
    if partition_columns:
        schema = parse_schema(meta["schemaString"])
        mode = column_mapping_mode(meta.get("configuration") or {})
        physical = physical_partition_columns(schema, partition_columns, mode)
    on_disk = has_data_files(table)
    for add in (a["add"] for a in log_actions(table) if "add" in a):
        decoded = decode_uri_path(add["path"])
        if add["path"].startswith(("/", "file:", "s3:")):
            continue  # absolute: not under the table (canonicalized-paths-*, below)
        assert not on_disk or (table / decoded).is_file(), decoded
        directory, file_name = posixpath.split(decoded)
        if partition_columns:
            directory = partition_dir(add["partitionValues"], physical)
        rebuilt = encode_uri_path(posixpath.join(directory, file_name))
        assert decode_uri_path(rebuilt) == decoded


@fixtures
def test_named_path_fixtures_are_covered() -> None:
    """The path fixtures named in the brief are among the tables checked above."""
    assert set(PATH_FIXTURES) <= set(fixture_names())


@fixtures
def test_absolute_paths_decode_once() -> None:
    """canonicalized-paths-special-a: absolute paths decode '%20' and '%23' once, keep '@'."""
    actions = log_actions(fixture_table("canonicalized-paths-special-a"))
    paths = [decode_uri_path(a[k]["path"]) for a in actions for k in ("add", "remove") if k in a]
    assert paths == ["/some/unqualified/with space/p@#h", "file:/some/unqualified/with space/p@#h"]
    special = log_actions(fixture_table("log-replay-special-characters"))
    assert {decode_uri_path(a["add"]["path"]) for a in special if "add" in a} == {"special p@#h"}


@fixtures
def test_spark_double_encoding_of_partition_directories() -> None:
    """Spark's paths are Hive escape then URI encoding: ours decode to the same object keys."""
    table = fixture_table("data-reader-escaped-chars")
    for add in (a["add"] for a in log_actions(table) if "add" in a):
        value = add["partitionValues"]["_2"]
        name = posixpath.basename(add["path"])
        ours = encode_uri_path(f"{partition_dir({'_2': value}, ['_2'])}/{name}")
        assert ours != add["path"]  # Spark leaves '+' raw, we encode it
        assert decode_uri_path(ours) == decode_uri_path(add["path"])


def materialise(table: Path) -> pa.Table:
    """Read each data file by path and append its partition columns from partitionValues."""
    meta = last_metadata(table)
    schema = parse_schema(meta["schemaString"])
    pieces = []
    for add in (a["add"] for a in log_actions(table) if "add" in a):
        data = pq.read_table(table / decode_uri_path(add["path"]))
        for column in meta["partitionColumns"]:
            array = partition_array(
                add["partitionValues"][column], schema.field(column).type, data.num_rows
            )
            data = data.append_column(column, array)
        pieces.append(data.select(list(schema.names)))
    return pa.concat_tables(pieces).replace_schema_metadata(None)


def deltalake_table(table: Path) -> pa.Table:
    """deltalake's reading, through a native filesystem (a Python one aborts at exit)."""
    filesystem = pafs.SubTreeFileSystem(str(table), pafs.LocalFileSystem())
    return DeltaTable(str(table)).to_pyarrow_table(filesystem=filesystem)


@fixtures
@pytest.mark.parametrize(
    ("name", "sort_key"),
    [
        ("data-reader-partition-values", "value"),
        ("data-reader-timestamp_ntz", "id"),
        ("data-reader-escaped-chars", "_1"),
    ],
)
def test_materialised_partition_columns_equal_deltalakes(name: str, sort_key: str) -> None:
    """Data files plus partition_array columns give exactly the table deltalake reads: every
    partition type, nulls, legacy timestamps (UTC), timestamp_ntz and escaped strings.
    """
    table = fixture_table(name)
    ours = materialise(table).sort_by(sort_key)
    theirs = deltalake_table(table).sort_by(sort_key)
    for column in last_metadata(table)["partitionColumns"]:
        assert ours.schema.field(column).type == theirs.schema.field(column).type, column
    assert ours.to_pylist() == theirs.to_pylist()
    assert ours.num_rows == theirs.num_rows > 0


@pytest.mark.parametrize(
    ("root", "path", "key"),
    [
        ("s3://b/t", "a=1/part-0.parquet", "a=1/part-0.parquet"),
        ("s3://b/t", "a%3D%2F/p%20q.parquet", "a=//p q.parquet"),
        ("s3://b/t", "s3://b/t/part-0.parquet", "part-0.parquet"),
        ("s3://b/t", "s3a://b/t/x/part-0.parquet", "x/part-0.parquet"),  # Hadoop's spelling
        ("s3://b/t", "s3n://b/t/part-0.parquet", "part-0.parquet"),
        ("s3://b/t", "s3://b/other/part-0.parquet", None),
        ("s3://b/t", "s3a://c/t/part-0.parquet", None),
        ("file:///data/t", "file:/data/t/part-0.parquet", "part-0.parquet"),
        ("file:///data/t", "file:///data/t/part-0.parquet", "part-0.parquet"),
        ("file:///data/t", "/data/t/part-0.parquet", "part-0.parquet"),
        ("file:///data/t", "/data/tt/part-0.parquet", None),
    ],
)
def test_object_key_of_a_logged_path(root: str, path: str, key: str | None) -> None:
    """A path as written in the log maps to its key under the table, whichever scheme spelling
    an engine used; a file outside the table has none."""
    assert object_key(root, path) == key
