"""Predicate properties over random tables and random predicate texts: stats never prune a
file with a matching row, and partition values agree with the row evaluator."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rlcd.compaction._stats import StatsAccumulator
from rlcd.delta.actions import AddFile
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.predicate import Predicate
from rlcd.delta.schema import ColumnMappingMode, parse_schema, to_arrow_schema
from rlcd.delta.stats_spec import STRING_PREFIX_LENGTH_KEY, stats_spec

NONE = ColumnMappingMode.NONE
NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class Column:
    """A test column: its Delta type, values, and how to write a value as a literal (SQL) and
    as a raw partition value (the ways writers put it in the log)."""

    name: str
    delta_type: Any
    values: st.SearchStrategy[Any]
    literals: Callable[[Any], st.SearchStrategy[str]]
    raws: Callable[[Any], st.SearchStrategy[str]]
    literal_ok: Callable[[Any], bool] = lambda _: True
    comparable: bool = True  # False: only IS [NOT] NULL applies (a struct)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def ints(bits: int) -> st.SearchStrategy[int]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.integers(-3, 3) | st.sampled_from([low, high])


def int_literals(v: int) -> st.SearchStrategy[str]:
    return st.sampled_from([str(v), f"{v}.0", quote(str(v))])


def int_raws(v: int) -> st.SearchStrategy[str]:
    return st.sampled_from([str(v), ("-0" if v < 0 else "0") + str(abs(v))])


def decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    top = Decimal(10 ** (precision - scale)) - Decimal(1).scaleb(-scale)
    edges = st.sampled_from([top, -top, Decimal(0).scaleb(-scale)])
    return edges | st.decimals(min_value=-top, max_value=top, places=scale)


def decimal_literals(v: Decimal) -> st.SearchStrategy[str]:
    return st.sampled_from([format(v, "f"), quote(format(v, "f"))])


def float_literals(v: float) -> st.SearchStrategy[str]:
    return st.sampled_from([repr(v), quote(repr(v))])


def float_raws(v: float) -> st.SearchStrategy[str]:
    java = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return st.just(repr(v)) if math.isfinite(v) else st.sampled_from([repr(v), java])


def finite(v: float) -> bool:
    return math.isfinite(v)


def timestamp_literals(v: datetime) -> st.SearchStrategy[str]:
    text = v.isoformat(sep=" ")
    return st.sampled_from([f"TIMESTAMP {quote(text)}", quote(text)])


def timestamp_raws(v: datetime) -> st.SearchStrategy[str]:
    naive = v.replace(tzinfo=None).isoformat(sep=" ")
    if v.tzinfo is None:
        return st.just(naive)
    iso = v.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return st.sampled_from([naive, iso])


near_epoch = {
    "min_value": datetime(1969, 12, 31, 23, 59, 59),
    "max_value": datetime(1970, 1, 1, 0, 0, 1),
}
any_time = {"min_value": datetime(1, 1, 1), "max_value": datetime(9999, 12, 31)}
TEXT = "ab'\x7fé\U0010ffff"

COLUMNS = [
    Column("b", "byte", ints(8), int_literals, int_raws),
    Column("sh", "short", ints(16), int_literals, int_raws),
    Column("n", "integer", ints(32), int_literals, int_raws),
    Column("l", "long", ints(64), int_literals, int_raws),
    Column(
        "x",
        "double",
        st.floats(-4, 4) | st.sampled_from([NAN, INF, -INF, -0.0, 0.0, 1e300]),
        float_literals,
        float_raws,
        finite,
    ),
    Column(
        "f",
        "float",
        st.floats(-4, 4, width=32) | st.sampled_from([NAN, INF, -0.0, 3.4028234663852886e38]),
        float_literals,
        float_raws,
        finite,
    ),
    Column(
        "dec",
        "decimal(5,2)",
        decimals(5, 2),
        decimal_literals,
        lambda v: st.just(format(v, "f")),
    ),
    Column(
        "wide",
        "decimal(20,4)",
        decimals(20, 4),
        decimal_literals,
        lambda v: st.just(format(v, "f")),
    ),
    Column(
        "s",
        "string",
        st.text(TEXT, min_size=1, max_size=6),
        lambda v: st.just(quote(v)),
        st.just,
    ),
    Column(
        "bin",
        "binary",
        st.text("ab'", min_size=1, max_size=3).map(str.encode),
        lambda v: st.just(quote(v.decode())),
        lambda v: st.just(v.decode()),
    ),
    Column(
        "ok",
        "boolean",
        st.booleans(),
        lambda v: st.sampled_from([str(v).upper(), quote(str(v).lower())]),
        lambda v: st.just(str(v).lower()),
    ),
    Column(
        "d",
        "date",
        st.dates(date(1969, 12, 30), date(1970, 1, 2)) | st.dates(),
        lambda v: st.sampled_from([f"DATE '{v.isoformat()}'", quote(v.isoformat())]),
        lambda v: st.just(v.isoformat()),
    ),
    Column(
        "ts",
        "timestamp",
        (st.datetimes(**near_epoch) | st.datetimes(**any_time)).map(
            lambda t: t.replace(tzinfo=UTC)
        ),
        timestamp_literals,
        timestamp_raws,
    ),
    Column(
        "ntz",
        "timestamp_ntz",
        st.datetimes(**near_epoch) | st.datetimes(**any_time),
        timestamp_literals,
        timestamp_raws,
    ),
]
BY_NAME = {c.name: c for c in COLUMNS}
STRUCT_A = Column("st.a", "long", ints(64), int_literals, int_raws)
STRUCT = Column("st", "struct", st.nothing(), st.nothing, st.nothing, comparable=False)
PART = Column("part", "integer", st.integers(0, 2), int_literals, int_raws)


def field(name: str, dtype: Any) -> dict[str, Any]:
    return {"name": name, "type": dtype, "nullable": True, "metadata": {}}


def schema_of(columns: Sequence[Column], *extra: dict[str, Any]) -> Any:
    fields = [field(c.name, c.delta_type) for c in columns]
    return parse_schema(json.dumps({"type": "struct", "fields": [*fields, *extra]}))


STRUCT_FIELD = field("st", {"type": "struct", "fields": [field("a", "long")]})
DATA_SCHEMA = schema_of([*COLUMNS, PART], STRUCT_FIELD)
DATA_ARROW = to_arrow_schema(DATA_SCHEMA, mode=NONE, partition_columns=["part"])
PARTITION_SCHEMA = schema_of(COLUMNS)
PARTITION_ARROW = to_arrow_schema(PARTITION_SCHEMA, mode=NONE)

# --- random tables and predicates ---------------------------------------------------------------
# The strategies that do not depend on drawn data are made once: a strategy made inside a draw
# is validated again on every use, which was most of these properties' time.

NOT = st.sampled_from(["", "NOT "])
KINDS = st.sampled_from(["compare", "compare", "in", "null"])
OPS = st.sampled_from(["=", "!=", "<>", "<", "<=", ">", ">="])
IN_SIZES = st.integers(1, 3)
CONNECTIVES = st.sampled_from(["AND", "OR", "NOT"])
LEAF = st.integers(0, 2)  # 0: stop nesting here
NULL_RAWS = st.sampled_from([None, ""])


@functools.cache
def cells(column: Column, rows: int) -> st.SearchStrategy[list[Any]]:
    """``rows`` values of the column, nulls among them."""
    return st.lists(st.none() | column.values, min_size=rows, max_size=rows)


@functools.cache
def literal_values(column: Column) -> st.SearchStrategy[Any]:
    """The column's values that may be written as a literal."""
    return column.values.filter(column.literal_ok)


@st.composite
def columns_of(draw: st.DrawFn, columns: Sequence[Column], rows: int) -> dict[str, list[Any]]:
    return {c.name: draw(cells(c, rows)) for c in columns}


@st.composite
def simple_tests(draw: st.DrawFn, columns: Sequence[Column], data: dict[str, list[Any]]) -> str:
    """One test: a comparison, [NOT] IN or IS [NOT] NULL on a column, with literals mostly
    taken from the column's own values (the boundaries that matter)."""
    column = draw(st.sampled_from(columns))
    if not column.comparable:
        return f"{column.name} IS {draw(NOT)}NULL"
    seen = [v for v in data.get(column.name, []) if v is not None and column.literal_ok(v)]
    pool = literal_values(column)
    values = (st.sampled_from(seen) | pool) if seen else pool

    def literal() -> str:
        return draw(column.literals(draw(values)))

    kind = draw(KINDS)
    if kind == "null":
        return f"{column.name} IS {draw(NOT)}NULL"
    if kind == "in":
        items = ", ".join(literal() for _ in range(draw(IN_SIZES)))
        return f"{column.name} {draw(NOT)}IN ({items})"
    return f"{column.name} {draw(OPS)} {literal()}"


@st.composite
def predicates(
    draw: st.DrawFn, columns: Sequence[Column], data: dict[str, list[Any]], depth: int = 3
) -> str:
    """A random predicate text over ``columns`` with AND, OR, NOT and parentheses."""
    if depth == 0 or draw(LEAF) == 0:
        return draw(simple_tests(columns, data))
    left = draw(predicates(columns, data, depth - 1))
    match draw(CONNECTIVES):
        case "NOT":
            return f"NOT ({left})"
        case connective:
            right = draw(predicates(columns, data, depth - 1))
            return f"({left}) {connective} ({right})"


def as_float64(stats: str) -> str:
    """The stats as a writer that goes through float64 (delta-rs) renders them."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return float(value) if isinstance(value, Decimal) else value

    return json.dumps(walk(json.loads(stats, parse_float=Decimal)))


# --- (b) never prunes what (c) finds -------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_stats_never_prune_a_file_with_a_matching_row(data: st.DataObject) -> None:
    """Whatever the predicate, a file in which the row evaluator finds a live matching row is
    never pruned by its partition value and stats: stats from rlcd's writer with short string
    prefixes, with float64-rendered decimals, with wide bounds after deleting rows."""
    rows = data.draw(st.integers(1, 8))
    columns = data.draw(columns_of(COLUMNS, rows))
    columns["st"] = data.draw(
        st.lists(st.none() | st.builds(dict, a=st.none() | ints(64)), min_size=rows, max_size=rows)
    )
    batch = pa.table(columns, schema=DATA_ARROW)
    raw = data.draw(st.sampled_from(["1", "01", "2", None]))
    text = data.draw(predicates([*COLUMNS, STRUCT_A, STRUCT, PART], columns))
    bound = Predicate.parse(text).bind(DATA_SCHEMA, partition_columns=["part"], mode=NONE)

    live = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
    deleted = rows - sum(live)
    prefix = data.draw(st.integers(0, 4))
    spec = stats_spec(
        DATA_SCHEMA,
        mode=NONE,
        partition_columns=["part"],
        configuration={STRING_PREFIX_LENGTH_KEY: str(prefix)},
    )
    accumulator = StatsAccumulator(spec)
    accumulator.update(batch)
    tight = False if deleted else data.draw(st.sampled_from([None, True, False]))
    stats = accumulator.finish(tight_bounds=tight)
    if data.draw(st.booleans()):
        stats = as_float64(stats)
    dv = None
    if deleted:
        dv = DeletionVectorDescriptor(
            storage_type="i", path_or_inline_dv="x", size_in_bytes=1, cardinality=deleted
        )
    add = AddFile(path="f.parquet", partition_values={"part": raw}, stats=stats, deletion_vector=dv)

    mask = bound.row_mask(batch.filter(pa.array(live)), {"part": raw})
    might = bound.might_match(add)
    event("pruned" if not might else "matched" if any(mask.to_pylist()) else "kept, no match")
    if any(mask.to_pylist()):
        assert might, (text, stats)


# --- (a) agrees with (c) -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_partition_values_agree_with_the_rows(data: st.DataObject) -> None:
    """On a table whose every column is a partition column, the partition evaluator on each
    row's raw partitionValues (written as writers write them: "01", "NaN", ISO or legacy
    timestamps, null or "") selects exactly the rows the row evaluator selects."""
    rows = data.draw(st.integers(1, 6))
    columns = data.draw(columns_of(COLUMNS, rows))
    table = pa.table(columns, schema=PARTITION_ARROW)
    text = data.draw(predicates(COLUMNS, columns))
    bound = Predicate.parse(text).bind(
        PARTITION_SCHEMA,
        partition_columns=[c.name for c in COLUMNS],
        mode=NONE,
        partition_only=True,
    )
    mask = bound.row_mask(table).to_pylist()
    for i in range(rows):
        raw = {
            name: data.draw(NULL_RAWS)
            if values[i] is None
            else data.draw(BY_NAME[name].raws(values[i]))
            for name, values in columns.items()
        }
        assert bound.matches_partition(raw) is mask[i], (text, raw)


WIDE = BY_NAME["wide"]
WIDE_SCHEMA = schema_of([WIDE])


@settings(max_examples=200, deadline=None)
@given(st.lists(WIDE.values, min_size=1, max_size=4), st.sampled_from(["=", "<=", ">="]))
def test_decimal_bounds_rendered_through_float64_still_bound(
    values: list[Decimal], op: str
) -> None:
    """Stats of a decimal(20,4) column written through float64 (delta-rs) may sit past the true
    min or max; the file is still kept for a test at any of its values."""
    batch = pa.table({"wide": values}, schema=to_arrow_schema(WIDE_SCHEMA, mode=NONE))
    accumulator = StatsAccumulator(stats_spec(WIDE_SCHEMA, mode=NONE))
    accumulator.update(batch)
    add = AddFile(path="f.parquet", stats=as_float64(accumulator.finish(tight_bounds=None)))
    for value in values:
        bound = Predicate.parse(f"wide {op} {value}").bind(
            WIDE_SCHEMA, partition_columns=(), mode=NONE
        )
        assert bound.might_match(add)
