"""Predicates: parsing every form and every error, binding to each column type, and the three
evaluators on literal cases. Properties over random tables are in test_predicate_properties.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from rlcd.delta.actions import AddFile
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.predicate import (
    And,
    BoundAnd,
    BoundColumn,
    BoundCompare,
    BoundIn,
    BoundIsNull,
    BoundOr,
    BoundPredicate,
    ColumnRef,
    Compare,
    Expr,
    InList,
    IsNull,
    Literal,
    LiteralKind,
    Not,
    Op,
    Or,
    Predicate,
    PredicateError,
)
from rlcd.delta.schema import ColumnMappingMode, parse_schema
from rlcd.errors import ConfigError

NONE = ColumnMappingMode.NONE


def field(name: str, dtype: object, **metadata: object) -> dict[str, object]:
    return {"name": name, "type": dtype, "nullable": True, "metadata": metadata}


SCHEMA = parse_schema(
    json.dumps(
        {
            "type": "struct",
            "fields": [
                field("b", "byte"),
                field("sh", "short"),
                field("n", "integer"),
                field("l", "long"),
                field("f", "float"),
                field("x", "double"),
                field("dec", "decimal(10,2)"),
                field("wide", "decimal(38,3)"),
                field("s", "string"),
                field("bin", "binary"),
                field("ok", "boolean"),
                field("d", "date"),
                field("ts", "timestamp"),
                field("ntz", "timestamp_ntz"),
                field("arr", {"type": "array", "elementType": "long", "containsNull": True}),
                field(
                    "m",
                    {
                        "type": "map",
                        "keyType": "string",
                        "valueType": "long",
                        "valueContainsNull": True,
                    },
                ),
                field(
                    "st", {"type": "struct", "fields": [field("a", "long"), field("b c", "string")]}
                ),
                field("p", "string"),
                field("date", "date"),
                field("part", "integer"),
            ],
        }
    )
)
PARTITIONS = ("p", "date", "part")


def bind(text: str, *, partition_only: bool = False) -> BoundPredicate:
    return Predicate.parse(text).bind(
        SCHEMA, partition_columns=PARTITIONS, mode=NONE, partition_only=partition_only
    )


def leaf(text: str) -> Any:
    """The single bound test of ``text``."""
    expr = bind(text).expr
    assert isinstance(expr, BoundCompare | BoundIn | BoundIsNull)
    return expr


def error(text: str, *, partition_only: bool = False) -> PredicateError:
    with pytest.raises(PredicateError) as info:
        bind(text, partition_only=partition_only)
    return info.value


# --- parsing -------------------------------------------------------------------------------------


def col(*path: str, at: int = 0) -> ColumnRef:
    return ColumnRef(path, at)


def num(text: str, at: int) -> Literal:
    return Literal(LiteralKind.NUMBER, Decimal(text), text, at)


def text_lit(value: str, at: int) -> Literal:
    return Literal(LiteralKind.STRING, value, "'" + value.replace("'", "''") + "'", at)


@pytest.mark.parametrize(
    ("text", "expr"),
    [
        ("a = 1", Compare(col("a"), Op.EQ, num("1", 4))),
        ("a=1", Compare(col("a"), Op.EQ, num("1", 2))),
        ("a != 1", Compare(col("a"), Op.NE, num("1", 5))),
        ("a <> 1", Compare(col("a"), Op.NE, num("1", 5))),
        ("a < -1", Compare(col("a"), Op.LT, num("-1", 4))),
        ("a <= 1.50", Compare(col("a"), Op.LE, num("1.50", 5))),
        ("a > .5", Compare(col("a"), Op.GT, num(".5", 4))),
        ("a >= 2e3", Compare(col("a"), Op.GE, num("2e3", 5))),
        ("a = +1E-2", Compare(col("a"), Op.EQ, num("+1E-2", 4))),
        ("a = 'it''s'", Compare(col("a"), Op.EQ, text_lit("it's", 4))),
        ("a = ''", Compare(col("a"), Op.EQ, text_lit("", 4))),
        ("a = 'AND'", Compare(col("a"), Op.EQ, text_lit("AND", 4))),
        ("a = TRUE", Compare(col("a"), Op.EQ, Literal(LiteralKind.BOOLEAN, True, "TRUE", 4))),
        ("a = false", Compare(col("a"), Op.EQ, Literal(LiteralKind.BOOLEAN, False, "FALSE", 4))),
        (
            "a = DATE '2026-11-30'",
            Compare(
                col("a"),
                Op.EQ,
                Literal(LiteralKind.DATE, date(2026, 11, 30), "DATE '2026-11-30'", 4),
            ),
        ),
        (
            "a < timestamp '2026-11-30 10:00:00+02:00'",
            Compare(
                col("a"),
                Op.LT,
                Literal(
                    LiteralKind.TIMESTAMP,
                    "2026-11-30 10:00:00+02:00",
                    "TIMESTAMP '2026-11-30 10:00:00+02:00'",
                    4,
                ),
            ),
        ),
        (
            "a < TIMESTAMP '2026-11-30'",
            Compare(
                col("a"),
                Op.LT,
                Literal(
                    LiteralKind.TIMESTAMP,
                    "2026-11-30 00:00:00",
                    "TIMESTAMP '2026-11-30'",
                    4,
                ),
            ),
        ),
        (
            "date = DATE '2026-11-30'",
            Compare(
                col("date"),
                Op.EQ,
                Literal(LiteralKind.DATE, date(2026, 11, 30), "DATE '2026-11-30'", 7),
            ),
        ),
        ("a IN (1, 'x')", InList(col("a"), (num("1", 6), text_lit("x", 9)), negated=False)),
        ("a not in (1)", InList(col("a"), (num("1", 10),), negated=True)),
        ("a IS NULL", IsNull(col("a"), negated=False)),
        ("a is not null", IsNull(col("a"), negated=True)),
        ("`my col` = 1", Compare(col("my col"), Op.EQ, num("1", 11))),
        ("`a``b` = 1", Compare(col("a`b"), Op.EQ, num("1", 9))),
        ("`and` = 1", Compare(col("and"), Op.EQ, num("1", 8))),
        ("a.b = 1", Compare(col("a", "b"), Op.EQ, num("1", 6))),
        ("a.`b.c` = 1", Compare(col("a", "b.c"), Op.EQ, num("1", 10))),
        ("NOT a IS NULL", Not(IsNull(col("a", at=4), negated=False))),
        ("not not a = 1", Not(Not(Compare(col("a", at=8), Op.EQ, num("1", 12))))),
        (
            "a = 1 AND b = 2 OR c = 3",
            Or(
                (
                    And(
                        (
                            Compare(col("a"), Op.EQ, num("1", 4)),
                            Compare(col("b", at=10), Op.EQ, num("2", 14)),
                        )
                    ),
                    Compare(col("c", at=19), Op.EQ, num("3", 23)),
                )
            ),
        ),
        (
            "a = 1 AND (b = 2 OR c = 3)",
            And(
                (
                    Compare(col("a"), Op.EQ, num("1", 4)),
                    Or(
                        (
                            Compare(col("b", at=11), Op.EQ, num("2", 15)),
                            Compare(col("c", at=20), Op.EQ, num("3", 24)),
                        )
                    ),
                )
            ),
        ),
        (
            "NOT (a = 1 OR b IS NULL) and c = 1",
            And(
                (
                    Not(
                        Or(
                            (
                                Compare(col("a", at=5), Op.EQ, num("1", 9)),
                                IsNull(col("b", at=14), negated=False),
                            )
                        )
                    ),
                    Compare(col("c", at=29), Op.EQ, num("1", 33)),
                )
            ),
        ),
        ("((a = 1))", Compare(col("a", at=2), Op.EQ, num("1", 6))),
    ],
)
def test_every_form_parses(text: str, expr: Expr) -> None:
    """Comparisons, [NOT] IN, IS [NOT] NULL, AND/OR/NOT with SQL precedence and parentheses,
    quoted and nested names, and every kind of literal parse to their trees."""
    assert Predicate.parse(text) == Predicate(text, expr)


@pytest.mark.parametrize(
    ("text", "problem", "position"),
    [
        ("", "the predicate is empty", None),
        ("  \t", "the predicate is empty", None),
        ("a", "expected a comparison, [NOT] IN or IS [NOT] NULL after 'a', found nothing", 1),
        ("a =", "expected a value, found nothing", 3),
        ("a == 1", "expected a value, found '='", 3),
        ("a = eu", "eu is not a value: put a string in single quotes ('eu')", 4),
        ("d = 2026-11-30", "2026-11-30 is not a value: put a string in single quotes", 4),
        ("a = 1abc", "1abc is not a value", 4),
        ("a = NULL", "NULL is not a value: write IS NULL or IS NOT NULL", 4),
        ("a = AND", "AND is not a value", 4),
        ("a = 'x", "a string is not closed", 4),
        ("`` = 1", "a backquoted name is empty or not closed", 0),
        ("`a = 1", "a backquoted name is empty or not closed", 0),
        ("a = 1 ; b = 2", "unexpected ';'", 6),
        ("a = 1 b = 2", "expected AND, OR or the end, found 'b'", 6),
        ("a = 1 AND", "expected a column name, found nothing", 9),
        ("AND a = 1", "expected a column name, found 'AND'", 0),
        ("1 = a", "expected a column name, found '1'", 0),
        ("'a' = a", "expected a column name, found 'a'", 0),
        ("a-b = 1", "expected a column name, found 'a-b'", 0),
        ("(a = 1", "expected ), found nothing", 6),
        ("a = 1)", "expected AND, OR or the end, found ')'", 5),
        ("a IN 1", "expected (, found '1'", 5),
        ("a IN ()", "expected a value, found ')'", 6),
        ("a IN (1 2)", "expected ), found '2'", 8),
        ("a IN (1,)", "expected a value, found ')'", 8),
        ("a IS 1", "expected NULL, found '1'", 5),
        ("a IS NOT", "expected NULL, found nothing", 8),
        ("a NOT = 1", "expected IN, found '='", 6),
        ("a = DATE '2026-11-31'", "DATE '2026-11-31' is not a valid date: day is out of range", 4),
        ("a = DATE '30.11.2026'", "DATE '30.11.2026' is not a valid date: not YYYY-MM-DD", 4),
        ("a = TIMESTAMP '2026-11-30 25:00:00'", "is not a valid timestamp", 4),
        ("a = DATE", "DATE is not a value", 4),
        ("NOT " * 70 + "a = 1", "nested more than 64 deep", 256),
    ],
)
def test_parse_errors_name_the_text_the_problem_and_where(
    text: str, problem: str, position: int | None
) -> None:
    """Each malformed text is a PredicateError (a ConfigError) that quotes the text and says
    what is wrong at which character."""
    with pytest.raises(PredicateError) as info:
        Predicate.parse(text)
    assert isinstance(info.value, ConfigError)
    assert problem in info.value.problem
    assert info.value.position == position
    message = str(info.value)
    assert message.startswith(f"predicate {text!r}: ")
    if position is not None:
        where = "at the end" if position >= len(text) else f"at character {position + 1}"
        assert message.endswith(f"({where})")


def test_messages_cite_no_internal_sections() -> None:
    """No error text points the user at the protocol notes' section numbers."""
    texts = ["p = ''", "a = NULL", "", "n = 1.5", "s = 1", "q = 1", "d = '2026-11-31'"]
    for text in texts:
        with pytest.raises(PredicateError) as info:
            bind(text)
        assert "§" not in str(info.value)


# --- binding -------------------------------------------------------------------------------------


def column(name: str) -> BoundColumn:
    return leaf(f"{name} IS NULL").column  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["b", "sh", "n", "l"])
@pytest.mark.parametrize(
    ("literal", "value"),
    [("1", 1), ("1.0", 1), ("01", 1), ("1e0", 1), ("-0", 0), ("'01'", 1), ("'-5'", -5)],
)
def test_integer_columns_take_numbers_by_value(name: str, literal: str, value: int) -> None:
    """n = 1.0, n = 01 and n = '01' are all n = 1 on every integer type."""
    bound = leaf(f"{name} = {literal}")
    assert bound == BoundCompare(column(name), Op.EQ, value)
    assert type(bound.value) is int


@pytest.mark.parametrize(("name", "bits"), [("b", 8), ("sh", 16), ("n", 32), ("l", 64)])
def test_integer_ranges_are_the_types(name: str, bits: int) -> None:
    """The extremes of each integer type bind; one past them is out of range, for any op."""
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    assert leaf(f"{name} = {low}").value == low
    assert leaf(f"{name} = {high}").value == high
    for op in ("=", "<", ">="):
        assert "out of range" in error(f"{name} {op} {high + 1}").problem
        assert "out of range" in error(f"{name} {op} {low - 1}").problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("n = 1.5", "1.5 is not an integer, so n = 1.5 would be false for every row"),
        ("n != 1.5", "so n != 1.5 would be true for every row"),
        ("NOT n = 1.5", "so n != 1.5 would be true for every row"),
        ("n IN (1, 1.5)", "1.5 is not an integer"),
        ("n NOT IN (1.5)", "1.5 is not an integer"),
        ("n = '1.0'", "'1.0' is not a valid integer: not an integer (column 'n')"),
        ("n = 'one'", "'one' is not a valid integer"),
        ("n = ''", "'' is not a valid integer"),
        ("n = TRUE", "TRUE is a boolean, and column 'n' is integer"),
        ("n = DATE '2026-01-01'", "is a date, and column 'n' is integer"),
        ("dec = 1.234", "1.234 is not a number with at most 2 decimals, so dec = 1.234"),
        ("dec = 123456789", "out of range for column 'dec' (decimal(10,2))"),
        ("dec < 100000000", "out of range"),
        ("dec = '1.234'", "is not a valid decimal(10,2)"),
        ("l < 1e999999", "1e999999 is out of range for column 'l' (long)"),
        ("wide >= -1e39", "out of range for column 'wide' (decimal(38,3))"),
    ],
)
def test_literals_the_type_cannot_hold_exactly_are_errors(text: str, problem: str) -> None:
    """An equality (or IN) that the column's type makes always false, or always true, is an
    error rather than a filter that silently matches nothing or everything."""
    assert problem in error(text).problem


@pytest.mark.parametrize(
    ("text", "op", "value"),
    [
        ("n < 1.5", Op.LE, 1),
        ("n <= 1.5", Op.LE, 1),
        ("n > 1.5", Op.GE, 2),
        ("n >= 1.5", Op.GE, 2),
        ("n < -1.5", Op.LE, -2),
        ("n > -1.5", Op.GE, -1),
        ("NOT n >= 1.5", Op.LE, 1),
        ("n < 2", Op.LT, 2),
        ("dec >= 1.234", Op.GE, Decimal("1.24")),
        ("dec < 1.234", Op.LE, Decimal("1.23")),
        ("dec > 1.2", Op.GT, Decimal("1.20")),
    ],
)
def test_range_comparisons_keep_their_meaning_on_the_grid(text: str, op: Op, value: Any) -> None:
    """n < 1.5 is n <= 1 and dec >= 1.234 is dec >= 1.24: the same rows, in the column's type."""
    bound = leaf(text)
    assert (bound.op, bound.value) == (op, value)
    assert type(bound.value) is type(value)


def test_decimal_columns_take_exact_values() -> None:
    """Decimals bind at the column's scale, from numbers or strings, never through a float."""
    assert leaf("dec = 1.5").value == Decimal("1.50")
    assert leaf("dec = '-1.5'").value == Decimal("-1.50")
    assert leaf("dec = 12345678.99").value == Decimal("12345678.99")
    big = "12345678901234567890123456789012345.678"
    assert leaf(f"wide = {big}").value == Decimal(big)
    assert leaf("wide IN (1, 2.5)").values == frozenset({Decimal(1), Decimal("2.5")})


def test_float_columns_round_to_their_precision() -> None:
    """A float column compares with the float32 nearest the literal, a double column with the
    float64; NaN and values past float32's range are refused."""
    assert leaf("f = 0.1").value == 0.10000000149011612
    assert leaf("x = 0.1").value == 0.1
    assert leaf("x = '1.5'").value == 1.5
    assert leaf("x < 1").value == 1.0
    assert "out of range for column 'f' (float)" in error("f = 1e39").problem
    assert "out of range" in error("x = 1e400").problem
    assert "NaN cannot be compared" in error("x = 'NaN'").problem
    assert "TRUE is a boolean, and column 'x' is double" in error("x = TRUE").problem


def test_dates_must_exist() -> None:
    """A date column takes DATE literals and date strings; a day that does not exist is an
    error, as is a number or a timestamp."""
    assert leaf("d = '2026-11-30'").value == date(2026, 11, 30)
    assert leaf("d >= DATE '2024-02-29'").value == date(2024, 2, 29)
    assert "'2026-11-31' is not a valid date: day is out of range for month" in (
        error("d = '2026-11-31'").problem
    )
    assert "not a valid date" in error("d = '2023-02-29'").problem
    assert "20261130 is a number, and column 'd' is date" in error("d = 20261130").problem
    assert "is a timestamp, and column 'd' is date" in error("d = TIMESTAMP '2026-01-01'").problem


def test_timestamps_are_utc_unless_they_say_otherwise() -> None:
    """Timestamp literals without an offset are UTC; with one they are that instant; a date is
    its midnight. Timestamp_ntz values are wall-clock times and refuse an offset."""
    ten = datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert leaf("ts = TIMESTAMP '2026-11-30 10:00:00'").value == ten
    assert leaf("ts = TIMESTAMP '2026-11-30T12:00:00+02:00'").value == ten
    assert leaf("ts = '2026-11-30T10:00:00.000000Z'").value == ten
    assert leaf("ts >= DATE '2026-11-30'").value == datetime(2026, 11, 30, tzinfo=UTC)
    assert leaf("ts >= '2026-11-30'").value == datetime(2026, 11, 30, tzinfo=UTC)
    assert leaf("ts = '2026-11-30 10:00:00.000001'").value == ten + timedelta(microseconds=1)
    naive = leaf("ntz = TIMESTAMP '2026-11-30 10:00:00'").value
    assert naive == datetime(2026, 11, 30, 10) and naive.tzinfo is None
    assert leaf("ntz < DATE '2026-11-30'").value == datetime(2026, 11, 30)
    assert "carry no time zone" in error("ntz = TIMESTAMP '2026-11-30 10:00:00Z'").problem
    assert "finer than microseconds" in error("ts = '2026-11-30 10:00:00.0000001'").problem
    assert "is a number" in error("ts > 0").problem
    west = leaf("ts = TIMESTAMP '2026-11-30 10:00:00-01:30'").value
    assert west == datetime(2026, 11, 30, 11, 30, tzinfo=UTC)


def test_strings_binaries_and_booleans() -> None:
    """Strings take only strings (a number gets a hint to quote it); binaries take a string's
    UTF-8 bytes; booleans take TRUE/FALSE or their strings."""
    assert leaf("s = 'it''s'").value == "it's"
    assert leaf("s = ''").value == ""  # a data column's empty string is a value
    assert leaf("s >= 'É'").value == "É"
    assert "1 is a number, and column 's' is string: put a string in single quotes ('1')" in (
        error("s = 1").problem
    )
    assert "is a date" in error("s = DATE '2026-01-01'").problem
    assert leaf("bin = 'ab'").value == b"ab"
    assert leaf("bin = 'é'").value == "é".encode()
    assert "is a number, and column 'bin' is binary" in error("bin = 1").problem
    assert leaf("ok = TRUE").value is True
    assert leaf("ok = 'false'").value is False
    assert "'yes' is not a valid boolean" in error("ok = 'yes'").problem
    assert "is a number" in error("ok = 1").problem


@pytest.mark.parametrize("name", ["arr", "m", "st"])
def test_nested_types_only_take_null_tests(name: str) -> None:
    """Arrays, maps and structs can be tested for null and nothing else."""
    assert leaf(f"{name} IS NOT NULL") == BoundIsNull(column(name), negated=True)
    problem = error(f"{name} = 1").problem
    assert f"column {name!r} has type" in problem
    assert "it can only be tested with IS [NOT] NULL" in problem


def test_columns_resolve_by_logical_name_ignoring_case() -> None:
    """Names match exactly, else ignoring case; nested fields by path; unknown names list what
    is there."""
    assert column("N") == BoundColumn("n", ("n",), SCHEMA.field("n").type, partition=False)
    assert column("PART").partition
    nested = leaf("St.A = 1").column
    assert (nested.name, nested.physical, nested.partition) == ("st.a", ("st", "a"), False)
    assert leaf("st.`B C` = 'x'").column.physical == ("st", "b c")
    unknown = error("q = 1")
    assert unknown.problem.startswith("no column 'q' (there are: b, sh, n, l, f, x, dec,")
    assert unknown.position == 0
    assert error("st.z = 1").problem == "'st' has no field 'z' (there are: a, b c)"
    assert error("n.z = 1").problem == "column 'n' is integer, not a struct: it has no field 'z'"
    assert error("p.z = 1").problem == "column 'p' is string, not a struct: it has no field 'z'"


def test_partition_only_names_the_partition_columns() -> None:
    """For compact --where, a data column (or a missing one) is an error naming the partition
    columns; a table without any says so."""
    assert bind("p = 'a' AND date > '2026-01-01' OR part IS NULL", partition_only=True)
    for text in ("s = 'a'", "nope = 1", "st.a = 1", "p = 'a' AND n = 1"):
        problem = error(text, partition_only=True).problem
        assert problem.endswith("is not a partition column (partition columns: p, date, part)")
    bare = Predicate.parse("n = 1")
    with pytest.raises(
        PredicateError, match=r"'n' is not a partition column \(the table has none\)"
    ):
        bare.bind(SCHEMA, partition_columns=(), mode=NONE, partition_only=True)


def test_empty_string_against_a_partition_column_is_an_error() -> None:
    """'' is how the log writes a null partition value: IS NULL says what was meant."""
    assert "use p IS NULL" in error("p = ''").problem
    assert "use p IS NULL" in error("p IN ('a', '')").problem


def test_column_mapping_gives_physical_names() -> None:
    """Under column mapping the bound columns carry physical names, nested ones too."""
    mapped = parse_schema(
        json.dumps(
            {
                "type": "struct",
                "fields": [
                    field(
                        "Region",
                        "string",
                        **{"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "c1"},
                    ),
                    field(
                        "st",
                        {
                            "type": "struct",
                            "fields": [
                                field(
                                    "a",
                                    "long",
                                    **{
                                        "delta.columnMapping.id": 3,
                                        "delta.columnMapping.physicalName": "c3",
                                    },
                                )
                            ],
                        },
                        **{"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "c2"},
                    ),
                ],
            }
        )
    )
    bound = Predicate.parse("region = 'eu' AND st.a > 1").bind(
        mapped, partition_columns=["Region"], mode=ColumnMappingMode.NAME
    )
    assert [c.physical for c in bound.columns] == [("c1",), ("c2", "c3")]
    assert [c.partition for c in bound.columns] == [True, False]
    assert not bound.partition_only


def test_not_is_pushed_down_to_the_tests() -> None:
    """The bound tree is in negation normal form: De Morgan for AND/OR, each test negated."""
    bound = bind("NOT (n < 1 AND (s IS NULL OR l NOT IN (1, 2)))").expr
    n, s, ell = column("n"), column("s"), column("l")
    assert bound == BoundOr(
        (
            BoundCompare(n, Op.GE, 1),
            BoundAnd(
                (BoundIsNull(s, negated=True), BoundIn(ell, frozenset({1, 2}), negated=False))
            ),
        )
    )
    negated = {"=": Op.NE, "!=": Op.EQ, "<": Op.GE, "<=": Op.GT, ">": Op.LE, ">=": Op.LT}
    for op, expected in negated.items():
        assert leaf(f"NOT n {op} 3").op is expected
    assert leaf("NOT NOT n = 3").op is Op.EQ


# --- (a) partition values ------------------------------------------------------------------------


def test_partition_values_compare_by_type() -> None:
    """part = 1.0 matches the raw values "1" and "01" and nothing else; a date compares as a
    date; JSON null, "" and a missing key are null."""
    one = bind("part = 1.0", partition_only=True)
    assert one.matches_partition({"part": "1"})
    assert one.matches_partition({"part": "01"})
    assert not one.matches_partition({"part": "2"})
    assert not one.matches_partition({"part": None})
    assert not one.matches_partition({"part": ""})
    assert not one.matches_partition({})
    later = bind("date > '2026-02-01'", partition_only=True)
    assert later.matches_partition({"date": "2026-10-01"})
    assert not later.matches_partition({"date": "2026-01-31"})


def test_partition_values_use_three_valued_logic() -> None:
    """A test on a null partition value is unknown: NOT keeps it unknown, OR with TRUE is
    TRUE, AND with FALSE is FALSE; only TRUE selects."""
    null = {"p": None, "part": "1"}
    assert bind("p = 'a'").partition_truth(null) is None
    assert bind("NOT p = 'a'").partition_truth(null) is None
    assert bind("p NOT IN ('a')").partition_truth(null) is None
    assert bind("p = 'a' OR part = 1").partition_truth(null) is True
    assert bind("p = 'a' AND part = 2").partition_truth(null) is False
    assert bind("p = 'a' AND part = 1").partition_truth(null) is None
    assert bind("p IS NULL").partition_truth(null) is True
    assert bind("p IS NOT NULL").partition_truth(null) is False
    assert not bind("p != 'a'").matches_partition(null)
    assert bind("p != 'a'").matches_partition({"p": "b"})
    assert bind("p IN ('a', 'b') AND NOT part IN (2)").matches_partition({"p": "b", "part": "1"})


def test_partition_evaluation_refuses_what_it_cannot_read() -> None:
    """A data column, or a raw value its type cannot read, is a ValueError naming them."""
    with pytest.raises(ValueError, match="column 's' is not a partition column"):
        bind("s = 'a'").partition_truth({})
    with pytest.raises(ValueError, match=r"partition column 'part':.*'x' is not a valid integer"):
        bind("part = 1").partition_truth({"part": "x"})


# --- (b) stats -----------------------------------------------------------------------------------


def add(
    stats: dict[str, Any] | str | None,
    partition_values: dict[str, str | None] | None = None,
    *,
    dv: bool = False,
) -> AddFile:
    descriptor = None
    if dv:
        descriptor = DeletionVectorDescriptor(
            storage_type="i", path_or_inline_dv="x", size_in_bytes=1, cardinality=1
        )
    return AddFile(
        path="f.parquet",
        partition_values=partition_values or {},
        size=1,
        stats=json.dumps(stats) if isinstance(stats, dict) else stats,
        deletion_vector=descriptor,
    )


def stats(
    column: str | Sequence[str], low: Any, high: Any, nulls: int = 0, rows: int = 10, **kw: Any
) -> dict[str, Any]:
    path = [column] if isinstance(column, str) else list(column)

    def nest(value: Any) -> dict[str, Any]:
        for name in reversed(path):
            value = {name: value}
        return value  # type: ignore[no-any-return]

    doc: dict[str, Any] = {"numRecords": rows, "nullCount": nest(nulls), **kw}
    if low is not None:
        doc["minValues"] = nest(low)
    if high is not None:
        doc["maxValues"] = nest(high)
    return doc


def might(text: str, file: AddFile) -> bool:
    return bind(text).might_match(file)


def test_missing_or_unreadable_stats_might_match() -> None:
    """No stats, stats that are not JSON or not an object, a column they do not cover, or a
    bound its type cannot hold say nothing: the file might match."""
    for raw in (None, "", "{", "[1]", '{"numRecords": "ten"}'):
        assert might("n = 1", add(raw))
    assert might("n = 1", add(stats("l", 5, 9)))
    assert might("n = 1", add({"numRecords": 3, "minValues": {"n": "five"}}))
    huge = '{"numRecords": 3, "minValues": {"n": 1e999999, "x": 1e999999, "dec": 1.5e0}}'
    assert might("n = 1", add(huge))
    assert might("x = 1", add(huge))
    assert might("dec = 1.5", add(huge))  # 1.5e0: exponent notation reads exactly
    assert not might("dec = 1", add(huge))


def test_ranges_prune_by_min_and_max() -> None:
    """Each comparison prunes exactly where the bounds rule it out."""
    file = add(stats("n", 5, 9))
    expectations = {
        "n = 4": False,
        "n = 5": True,
        "n = 9": True,
        "n = 10": False,
        "n < 5": False,
        "n < 6": True,
        "n <= 5": True,
        "n <= 4": False,
        "n > 9": False,
        "n > 8": True,
        "n >= 9": True,
        "n >= 10": False,
        "n IN (1, 2, 10)": False,
        "n IN (1, 7)": True,
        "n != 7": True,
        "n NOT IN (5)": True,
        "n = 1 OR n = 6": True,
        "n = 1 OR n = 16": False,
        "n > 1 AND n < 5": False,
        "NOT n >= 5": False,
    }
    for text, expected in expectations.items():
        assert might(text, file) is expected, text


def test_single_valued_exact_columns_prune_not_equal() -> None:
    """!= and NOT IN prune an integer or date column whose min equals its max, nothing else."""
    assert not might("n != 7", add(stats("n", 7, 7)))
    assert not might("n NOT IN (6, 7)", add(stats("n", 7, 7)))
    assert not might("n != 7", add(stats("n", 7, 7, nulls=3)))  # a null is unknown, not TRUE
    assert not might("d != '2026-01-01'", add(stats("d", "2026-01-01", "2026-01-01")))
    assert might("s != 'abc'", add(stats("s", "abc", "abc")))  # bounds may be truncated
    assert might("dec != 1.5", add(stats("dec", 1.5, 1.5)))


def test_null_counts() -> None:
    """IS NULL needs a null, IS NOT NULL a value, a comparison a value; no rows match nothing."""
    none_null, all_null = add(stats("n", 1, 2, nulls=0)), add(stats("n", None, None, nulls=10))
    assert not might("n IS NULL", none_null)
    assert might("n IS NOT NULL", none_null)
    assert might("n IS NULL", all_null)
    assert not might("n IS NOT NULL", all_null)
    assert not might("n = 1", all_null)
    assert not might("n != 1", all_null)
    assert not might("n NOT IN (1)", all_null)
    assert might("n IS NULL", add(stats("n", 1, 2, nulls=4)))
    assert might("n IS NULL", add({"numRecords": 4}))
    assert not might("n IS NULL", add({"numRecords": 0}))
    assert not might("n IS NOT NULL OR n IS NULL", add({"numRecords": 0}))
    assert might("arr IS NULL", add({"numRecords": 4, "nullCount": {"arr": 1}}))
    assert not might("arr IS NOT NULL", add({"numRecords": 4, "nullCount": {"arr": 4}}))


def test_wide_bounds_and_deletion_vectors_only_widen() -> None:
    """tightBounds=false and a DV keep min/max as bounds and nullCount's 0 and numRecords
    meanings, so they prune as tight stats do, never more."""
    for kw in ({"tightBounds": False}, {"tightBounds": True}, {}):
        wide = add(stats("n", 5, 9, nulls=0, **kw), dv=True)
        assert not might("n = 4", wide)
        assert might("n = 6", wide)
        assert not might("n IS NULL", wide)
        nulls = add(stats("n", 5, 9, nulls=3, **kw), dv=True)
        assert might("n IS NULL", nulls)
        assert might("n IS NOT NULL", nulls)


def test_nested_and_partition_columns() -> None:
    """Nested columns find their stats by physical path; partition columns are exact."""
    file = add(stats(["st", "a"], 1, 3), {"p": "x", "part": "01"})
    assert not might("st.a > 3", file)
    assert might("st.a > 2", file)
    assert not might("p = 'y'", file)
    assert might("p = 'x' AND st.a = 2", file)
    assert not might("p = 'x' AND st.a = 4", file)
    assert might("part = 1 OR st.a = 4", file)
    assert not might("p IS NULL", file)
    assert might("st IS NULL", file)  # a struct has no nullCount of its own


def test_strings_may_be_truncated() -> None:
    """A truncated min is a prefix (below every value) and Spark's truncated max ends above
    every value: both still prune soundly, and exactly at the bounds they match."""
    long_value = "abcdefghij" * 5
    file = add(stats("s", long_value[:32], long_value[:32] + "\x7f"))
    assert might(f"s = '{long_value}'", file)
    assert might(f"s <= '{long_value[:32]}'", file)
    assert not might(f"s < '{long_value[:32]}'", file)
    assert not might("s > 'abcdefghij\x7f'", file)
    assert might("s >= 'abcdefghijabcdefghijabcdefghijab\x7f'", file)
    assert might("s > 'abcdefghijabcdefghijabcdefghijab'", file)


def test_timestamp_maxes_are_floored_to_milliseconds() -> None:
    """A max written at millisecond precision covers the 999 microseconds after it."""
    file = add(stats("ts", "2026-11-30T10:00:00.000Z", "2026-11-30T10:00:00.123Z"))
    assert might("ts = '2026-11-30 10:00:00.123999'", file)
    assert not might("ts = '2026-11-30 10:00:00.124'", file)
    assert not might("ts < '2026-11-30 10:00:00'", file)
    assert might("ts <= '2026-11-30 10:00:00'", file)
    spark = add(stats("ts", "2026-11-30T02:00:00.000-08:00", "2026-11-30T02:00:00.000-08:00"))
    assert might("ts = TIMESTAMP '2026-11-30 10:00:00Z'", spark)
    assert not might("ts > TIMESTAMP '2026-11-30 10:00:01Z'", spark)
    ntz = add(stats("ntz", "2026-11-30T10:00:00.000", "2026-11-30T10:00:00.000"))
    assert might("ntz = TIMESTAMP '2026-11-30 10:00:00.0005'", ntz)
    assert not might("ntz = TIMESTAMP '2026-11-30 10:00:00.5'", ntz)
    assert not might("ntz >= TIMESTAMP '2026-11-30 10:00:01'", ntz)
    assert might("ts = '2026-11-30 10:00:00'", add(stats("ts", "yesterday", 5)))


def test_decimals_are_read_exactly_and_widened_past_float_precision() -> None:
    """Decimal bounds are never read as floats; those of more than 15 digits are widened by
    what a float64 writer (delta-rs) could have moved them."""
    small = add('{"numRecords":2,"minValues":{"dec":1.10},"maxValues":{"dec":1.20}}')
    assert not might("dec < 1.10", small)
    assert might("dec <= 1.10", small)
    assert not might("dec > 1.20", small)
    true_min = Decimal("12345678901234567.891")
    as_float = f'{{"numRecords":2,"minValues":{{"wide":{float(true_min)!r}}}}}'
    assert float(true_min) > true_min  # the float64 min is above the true one ...
    assert might(f"wide = {true_min}", add(as_float))  # ... and still does not prune it
    exact = add(f'{{"numRecords":2,"minValues":{{"wide":{true_min}}}}}')
    assert not might(f"wide < {true_min * Decimal('0.999')}", exact)


def test_floats_keep_nan_in_mind() -> None:
    """A NaN the stats left out makes >, >= and != true, so those never prune a float
    column; = and < still do; float32 bounds written as text round to float32, and double
    bounds allow for having been written as a float32's text before a type widening."""
    file = add(stats("x", 1.0, 2.0))
    assert not might("x = 3", file)
    assert not might("x < 0.99", file)
    assert might("x > 5", file)
    assert might("x != 1.5", file)
    assert might("x NOT IN (1.5)", file)
    spark = add(stats("f", 0.234, 0.234))  # Spark writes the float32 0.234 as 0.234
    assert might("f = 0.234", spark)
    assert might("f <= 0.234", spark)
    assert might("x = 1", add(stats("x", "NaN", "NaN")))
    widened = add(stats("x", 0.234, 0.234))  # a float column's stats, now a double column
    assert might(f"x = {0.23399999737739563!r}", widened)
    assert might("x < 0.234", widened)
    assert not might("x < 0.2339", widened)


# --- (c) rows ------------------------------------------------------------------------------------


def test_rows_follow_sql_semantics() -> None:
    """Nulls are never selected, also under NOT and NOT IN; OR with a TRUE selects; NaN is
    above every number; -0.0 equals 0.0, also in IN lists."""
    table = pa.table(
        {
            "n": pa.array([1, 2, None, 4], pa.int32()),
            "x": pa.array([1.0, float("nan"), None, -1.0], pa.float64()),
        }
    )

    def rows(text: str) -> list[bool]:
        return bind(text).row_mask(table).to_pylist()  # type: ignore[no-any-return]

    assert rows("n = 1") == [True, False, False, False]
    assert rows("NOT n = 1") == [False, True, False, True]
    assert rows("n NOT IN (1, 4)") == [False, True, False, False]
    assert rows("n IN (1, 4)") == [True, False, False, True]
    assert rows("n IS NULL") == [False, False, True, False]
    assert rows("n > 1 OR x > 0") == [True, True, False, True]
    assert rows("n = 4 OR n IS NULL") == [False, False, True, True]
    assert rows("x > 100") == [False, True, False, False]
    assert rows("x >= 1") == [True, True, False, False]
    assert rows("x < 100") == [True, False, False, True]
    assert rows("x != 1") == [False, True, False, True]
    assert rows("x = 1") == [True, False, False, False]
    zeros = pa.table({"x": pa.array([-0.0, 0.0, None], pa.float64())})
    for text in ("x IN (0)", "x IN (-0.0)", "x = -0.0", "x <= 0", "x >= 0.0"):
        assert bind(text).row_mask(zeros).to_pylist() == [True, True, False], text
    assert bind("x NOT IN (0.0, 1)").row_mask(zeros).to_pylist() == [False, False, False]
    assert rows("NOT x <= 1") == [False, True, False, False]
    assert bind("n = 1").row_mask(table).null_count == 0


def test_rows_of_nested_and_partition_columns() -> None:
    """A null struct makes its fields null; partition columns missing from the batch take the
    file's partition values; a missing data column is an error."""
    st = pa.array(
        [{"a": 1, "b c": "x"}, None, {"a": None, "b c": "y"}],
        pa.struct([("a", pa.int64()), ("b c", pa.string())]),
    )
    batch = pa.record_batch({"st": st})
    assert bind("st.a = 1 OR st.`b c` = 'y'").row_mask(batch).to_pylist() == [True, False, True]
    assert bind("st.a IS NULL").row_mask(batch).to_pylist() == [False, True, True]
    assert bind("st IS NULL").row_mask(batch).to_pylist() == [False, True, False]
    mixed = bind("part = 1 AND st.a = 1")
    assert mixed.row_mask(batch, {"part": "01"}).to_pylist() == [True, False, False]
    assert mixed.row_mask(batch, {"part": None}).to_pylist() == [False, False, False]
    with pytest.raises(ValueError, match="batch has no column 'part'"):
        mixed.row_mask(batch)
    with pytest.raises(ValueError, match="batch has no column 'n'"):
        bind("n = 1").row_mask(batch)
    with pytest.raises(ValueError, match="'x' is not a valid integer"):
        mixed.row_mask(batch, {"part": "x"})


def test_rows_of_every_type() -> None:
    """Each type compares by value in Arrow: decimals exactly, timestamps as instants, strings
    by code point, binaries by byte, booleans with false below true."""
    table = pa.table(
        {
            "dec": pa.array([Decimal("1.10"), Decimal("1.20")], pa.decimal128(10, 2)),
            "ts": pa.array(
                [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)],
                pa.timestamp("us", tz="UTC"),
            ),
            "ntz": pa.array([datetime(2026, 1, 1), datetime(2026, 1, 2)], pa.timestamp("us")),
            "d": pa.array([date(2026, 1, 1), date(2026, 1, 2)], pa.date32()),
            "s": ["z", "é"],
            "bin": pa.array([b"a", b"b"], pa.binary()),
            "ok": [False, True],
            "f": pa.array([0.1, 2.5], pa.float32()),
            "b": pa.array([-128, 127], pa.int8()),
        }
    )
    cases = {
        "dec > 1.1": [False, True],
        "dec IN (1.1)": [True, False],
        "ts >= TIMESTAMP '2026-01-01 12:00:00-12:00'": [False, True],
        "ntz < DATE '2026-01-02'": [True, False],
        "d = '2026-01-02'": [False, True],
        "s > 'z'": [False, True],
        "bin < 'b'": [True, False],
        "ok < TRUE": [True, False],
        "f = 0.1": [True, False],
        "b <= -128 OR b >= 127": [True, True],
    }
    for text, expected in cases.items():
        assert bind(text).row_mask(table).to_pylist() == expected, text


def test_row_masks_of_tables_are_chunked() -> None:
    """A multi-chunk table gives a chunked mask of the same length, without nulls."""
    table = pa.concat_tables([pa.table({"n": pa.array([1, None], pa.int32())})] * 3)
    mask = bind("n = 1 OR n IS NOT NULL").row_mask(table)
    assert isinstance(mask, pa.ChunkedArray)
    assert mask.to_pylist() == [True, False] * 3
    assert len(mask) == 6 and mask.null_count == 0
    empty = pa.table({"n": pa.array([], pa.int32())})
    assert bind("part = 1 AND n = 1").row_mask(empty, {"part": "1"}).to_pylist() == []
