"""The adaptive choice encodes a column about as small as the best encoding it considers.

A property over many shapes of data (random, sorted, nearly sorted, skewed, repeating, tiled;
integers and strings; short and long, with and without nulls): the column written with the
encodings :func:`plan_file` chooses, as the bin's writer writes it, is never more than 5%
(plus a small absolute slack, for tiny inputs whose pages are mostly headers) larger than the
smallest of plain, a dictionary and, for integers, delta packing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcd.parquet.encodings import DELTA_BINARY_PACKED, PLAIN, ColumnEncodings, plan_file

ROW_GROUP_BYTES = 8 * 1024 * 1024  # the bin's, as rlcd.compaction.rewrite plans a bin's file
MAX_ROWS = 1 << 20
SLACK_BYTES = 128
TOLERANCE = 1.05

SHAPES = ("random", "sorted", "nearly-sorted", "skewed", "runs", "tiled", "overlapping-appends")


def integers(shape: str, rows: int, spread: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` int64 values of ``shape``, of about ``spread`` distinct values or range."""
    if shape == "random":
        return rng.integers(0, spread, rows)
    if shape == "sorted":
        return np.sort(rng.integers(0, spread, rows))
    if shape == "nearly-sorted":
        values = np.sort(rng.integers(0, spread, rows))
        swap = rng.integers(0, max(1, rows - 1), rows // 20)
        values[swap], values[swap + 1] = values[swap + 1], values[swap]
        return values
    if shape == "skewed":
        return np.minimum(rng.zipf(1.3, rows), spread) * 7919
    if shape == "runs":
        return np.repeat(rng.integers(0, spread, rows // 8 + 1), 8)[:rows]
    if shape == "tiled":
        return rng.integers(0, spread, 997)[np.arange(rows) % 997]
    # appends of sorted ids, each overlapping the next one's range (issue 42)
    step = max(1, rows // 20)
    return np.concatenate(
        [np.sort(rng.integers(a, a + 2 * step, min(step, rows - a))) for a in range(0, rows, step)]
    )


@st.composite
def columns(draw: Any) -> pa.Table:
    """A one-column table: integers (int64 or int32) or strings made from them."""
    shape = draw(st.sampled_from(SHAPES))
    bounds = st.sampled_from([(1, 300), (1_000, 5_000), (17_000, 60_000)])  # short to long
    rows = draw(bounds.flatmap(lambda b: st.integers(*b)))
    spread = draw(st.sampled_from([2, 50, 5_000, 2**20, 2**31, 2**40, 2**62]))
    kind = draw(st.sampled_from(["int64", "int32", "string"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    values = integers(shape, rows, spread, rng)
    mask = rng.random(rows) < 0.1 if draw(st.booleans()) else None
    if kind == "int32":
        array = pa.array((values % 2**31).astype(np.int32), mask=mask)
    elif kind == "int64":
        array = pa.array(values.astype(np.int64), mask=mask)
    else:
        pad = draw(st.sampled_from([0, 200]))  # short strings, or long ones
        array = pa.array([f"value-{v:020d}".ljust(pad, "x") for v in values], mask=mask)
    return pa.table({"c": array})


def encoded_bytes(table: pa.Table, codec: str, **writer: Any) -> int:
    """The compressed bytes of the table's column chunk, written as the bin's writer does."""
    sink = pa.BufferOutputStream()
    options = {"use_dictionary": False, "write_statistics": False, **writer}
    with pq.ParquetWriter(
        sink, table.schema, compression=codec, max_rows_per_page=MAX_ROWS, **options
    ) as writer_:
        writer_.write_table(table, row_group_size=max(1, table.num_rows))
    meta = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    return int(meta.row_group(0).column(0).total_compressed_size)


def chosen_bytes(table: pa.Table, codec: str, encodings: ColumnEncodings) -> int:
    return encoded_bytes(
        table,
        codec,
        use_dictionary=encodings.use_dictionary,
        column_encoding=encodings.column_encoding or None,
        dictionary_pagesize_limit=encodings.dictionary_page_limit,
    )


def considered_bytes(table: pa.Table, codec: str, dictionary_limit: int) -> dict[str, int]:
    """The bytes of each encoding the chooser considers for the column."""
    sizes = {
        PLAIN: encoded_bytes(table, codec),
        "dictionary": encoded_bytes(
            table, codec, use_dictionary=True, dictionary_pagesize_limit=dictionary_limit
        ),
    }
    if pa.types.is_integer(table.schema.field("c").type):
        sizes[DELTA_BINARY_PACKED] = encoded_bytes(
            table, codec, column_encoding={"c": DELTA_BINARY_PACKED}
        )
    return sizes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=columns(), codec=st.sampled_from(["zstd", "snappy"]))
def test_the_choice_is_never_much_larger_than_the_best_considered(
    table: pa.Table, codec: str
) -> None:
    """A bin that ends within its first row group, planned as the bin's encoder plans it."""
    plan = plan_file(
        table,
        [],
        row_group_bytes=ROW_GROUP_BYTES,
        grown_bytes=ROW_GROUP_BYTES,
        max_rows=MAX_ROWS,
        codec=codec,
    )
    chosen = chosen_bytes(table, codec, plan.encodings)
    considered = considered_bytes(table, codec, plan.encodings.dictionary_limit)
    best = min(considered.values())
    (choice,) = plan.encodings.choices
    assert chosen <= best * TOLERANCE + SLACK_BYTES, (choice, chosen, considered)
