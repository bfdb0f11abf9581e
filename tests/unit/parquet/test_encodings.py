"""Per-column encodings chosen from a bin's first row group and its sources' footers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.parquet.encodings import (
    DELTA_BINARY_PACKED,
    DICTIONARY,
    PLAIN,
    ColumnEncodings,
    EncodingChoice,
    choose_encodings,
    distinct_estimate,
    leaf_paths,
    plan_file,
    trial_encoded_bytes,
)

LIMIT = 256 * 1024
ROWS = 200_000
RNG = np.random.default_rng(7)


def chosen(table: pa.Table, footers: list[pq.FileMetaData] | None = None) -> dict[str, str]:
    encodings = choose_encodings(table, footers or [], dictionary_limit=LIMIT)
    return {c.column: c.encoding for c in encodings.choices}


def decimals(cents: np.ndarray, precision: int) -> pa.Array:
    """Decimals of scale 2 whose unscaled values are ``cents``."""
    return pa.array(cents / 100).cast(pa.decimal128(precision, 2))


def footer_of(table: pa.Table, **writer: object) -> pq.FileMetaData:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **writer)
    return pq.read_metadata(pa.BufferReader(sink.getvalue()))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (pa.array(np.arange(ROWS, dtype=np.int64)), DELTA_BINARY_PACKED),
        (pa.array(np.arange(ROWS, dtype=np.int32) * 3), DELTA_BINARY_PACKED),
        (pa.array(RNG.integers(0, 2**62, ROWS)), PLAIN),
        (pa.array(RNG.integers(0, 50, ROWS)), DICTIONARY),
        (pa.array(np.arange(ROWS), pa.timestamp("us", tz="UTC")), DELTA_BINARY_PACKED),
        (pa.array(RNG.integers(19_000, 19_030, ROWS).astype(np.int32), pa.date32()), DICTIONARY),
        (pa.array(np.arange(ROWS, dtype=np.int32) // 10, pa.date32()), DELTA_BINARY_PACKED),
        (pa.array(np.arange(ROWS, dtype=np.int32), pa.date32()), DELTA_BINARY_PACKED),
        (pa.array(RNG.random(ROWS)), PLAIN),
        (pa.array(RNG.integers(0, 20, ROWS) / 4), DICTIONARY),
        (pa.array([f"customer-{i}" for i in RNG.integers(0, 10**9, ROWS)]), PLAIN),
        (pa.array([["red", "green", "blue"][i % 3] for i in range(ROWS)]), DICTIONARY),
        (pa.nulls(ROWS, pa.int64()), PLAIN),
        (decimals(np.arange(ROWS) * 7 - ROWS, 18), DELTA_BINARY_PACKED),
        (decimals(np.arange(ROWS), 9), DELTA_BINARY_PACKED),
        (decimals(RNG.integers(-(10**12), 10**12, ROWS), 18), PLAIN),
        (decimals(np.arange(ROWS), 38), PLAIN),
    ],
    ids=[
        "sorted-int64",
        "sorted-int32",
        "random-int64",
        "low-cardinality-int",
        "sorted-timestamp",
        "random-date",
        "sorted-repeating-date",
        "sorted-date",
        "random-double",
        "low-cardinality-double",
        "random-strings",
        "three-strings",
        "all-null",
        "sorted-decimal-int64",
        "sorted-decimal-int32",
        "random-decimal",
        "sorted-wide-decimal",
    ],
)
def test_choice_follows_the_data(values: pa.Array, expected: str) -> None:
    """A dictionary where few values repeat in no order, delta packing where neighbours are
    close, also where they repeat (also for decimals stored as integers, not for wider ones),
    plain for the rest."""
    assert chosen(pa.table({"c": values})) == {"c": expected}


@pytest.mark.parametrize("precision", [3, 9, 12, 18, 19, 38])
def test_fixed_length_decimals_are_never_delta_packed(precision: int) -> None:
    """Decimals the writer stores as fixed-length bytes (a bin following pyarrow's files)
    never get ``DELTA_BINARY_PACKED``, which does not apply to them: sorted ones stay plain,
    repeating ones take a dictionary whose page is sized by the bytes the writer stores; the
    plan's trial writes them so, and the file its writer writes holds them so."""
    sorted_ = decimals(np.arange(ROWS) % 10 ** min(precision, 6), precision)
    repeating = decimals(RNG.integers(0, 50, ROWS), precision)
    table = pa.table({"s": sorted_, "r": repeating})
    plan = plan_file(
        table,
        [],
        row_group_bytes=1 << 30,
        grown_bytes=1 << 30,
        max_rows=ROWS,
        codec="zstd",
        decimals_as_integers=False,
    )
    encodings = {c.column: c.encoding for c in plan.encodings.choices}
    assert DELTA_BINARY_PACKED not in encodings.values()
    assert encodings["r"] == DICTIONARY
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink,
        table.schema,
        store_decimal_as_integer=False,
        use_dictionary=plan.encodings.use_dictionary,
        column_encoding=plan.encodings.column_encoding or None,
    ) as writer:
        writer.write_table(table)
    schema = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    assert {schema.column(i).physical_type for i in range(2)} == {"FIXED_LEN_BYTE_ARRAY"}
    width = schema.column(0).length
    chosen = next(c for c in plan.encodings.choices if c.column == "r")
    assert f"{width} B each" in chosen.reason


def test_a_sample_block_of_nulls_only_is_no_obstacle() -> None:
    """A run of null decimals between sorted ones (a sample block with no value) still
    packs."""
    cents = np.arange(ROWS) * 3
    values = pa.array(cents / 100, mask=(cents > ROWS) & (cents < 2 * ROWS)).cast(
        pa.decimal128(18, 2)
    )
    assert chosen(pa.table({"d": values})) == {"d": DELTA_BINARY_PACKED}


def test_nearly_sorted_integers_are_delta_packed() -> None:
    """Timestamps that arrive mostly in order (small jitter, nulls between) still pack."""
    base = np.arange(ROWS, dtype=np.int64) * 1_000_000 + RNG.integers(-5_000, 5_000, ROWS)
    values = pa.array(base, pa.timestamp("us"), mask=RNG.random(ROWS) < 0.2)
    assert chosen(pa.table({"at": values})) == {"at": DELTA_BINARY_PACKED}


def test_a_source_dictionary_over_the_limit_rules_a_dictionary_out() -> None:
    """Values that look repetitive in the sample get no dictionary when a source's own
    dictionary page already outgrew the limit: the output's would too."""
    repetitive = pa.table({"s": [f"value-{i % 2000:06d}" for i in range(ROWS)]})
    assert chosen(repetitive) == {"s": DICTIONARY}
    wide = pa.table({"s": [f"value-{i:06d}-{'x' * 20}" for i in range(20_000)]})
    footer = footer_of(wide, dictionary_pagesize_limit=4 * 1024 * 1024, compression="none")
    assert footer.row_group(0).column(0).has_dictionary_page
    assert chosen(repetitive, [footer]) == {"s": PLAIN}


def test_nested_columns_and_booleans_keep_the_conservative_dictionary() -> None:
    """Leaves of nested columns and booleans stay dictionary-eligible, named by their paths."""
    table = pa.table(
        {
            "flag": [True, False] * 100,
            "s": [{"x": 1, "y": "a"}] * 200,
            "l": [[1, 2]] * 200,
            "m": pa.array([[("k", 1)]] * 200, pa.map_(pa.string(), pa.int64())),
        }
    )
    assert chosen(table) == {
        "flag": DICTIONARY,
        "s.x": DICTIONARY,
        "s.y": DICTIONARY,
        "l.list.element": DICTIONARY,
        "m.key_value.key": DICTIONARY,
        "m.key_value.value": DICTIONARY,
    }


def test_leaf_paths_are_the_writers_column_paths() -> None:
    """The dotted paths match the columns pyarrow's writer makes with compliant nested types."""
    schema = pa.schema(
        {
            "a": pa.int64(),
            "s": pa.struct({"x": pa.int32(), "t": pa.struct({"y": pa.string()})}),
            "l": pa.list_(pa.struct({"z": pa.float64()})),
            "ll": pa.large_list(pa.int8()),
            "m": pa.map_(pa.string(), pa.list_(pa.int64())),
        }
    )
    footer = footer_of(schema.empty_table(), use_compliant_nested_type=True)
    written = [footer.schema.column(i).path for i in range(footer.num_columns)]
    assert [p for f in schema for p in leaf_paths(f)] == written


def test_the_settings_write_a_file_with_each_encoding() -> None:
    """pyarrow's writer takes the chosen settings (no column both in the dictionary list and
    with an encoding) and the file's column chunks carry each encoding chosen."""
    table = pa.table(
        {
            "id": pa.array(np.arange(ROWS, dtype=np.int64)),
            "kind": [["a", "b"][i % 2] for i in range(ROWS)],
            "noise": pa.array(RNG.random(ROWS)),
            "s": [{"x": i % 3} for i in range(ROWS)],
        }
    )
    encodings = choose_encodings(table, [], dictionary_limit=LIMIT)
    assert isinstance(encodings, ColumnEncodings)
    assert not set(encodings.use_dictionary) & set(encodings.column_encoding)
    footer = footer_of(
        table,
        use_dictionary=encodings.use_dictionary,
        column_encoding=encodings.column_encoding,
        use_compliant_nested_type=True,
    )
    used = {footer.schema.column(i).path: footer.row_group(0).column(i).encodings for i in range(4)}
    assert DELTA_BINARY_PACKED in used["id"]
    assert DICTIONARY in used["kind"] and DICTIONARY in used["s.x"]
    assert DICTIONARY not in used["noise"] and "PLAIN" in used["noise"]


def blocks_of(values: np.ndarray) -> list[pa.Array]:
    """The sample blocks the chooser takes of a column of ``values`` (16 runs of 1024)."""
    step = len(values) // 16
    return [pa.array(values[i * step : i * step + 1024]) for i in range(16)]


@pytest.mark.parametrize(
    ("values", "truth"),
    [
        (RNG.integers(0, 30_000, ROWS), 30_000),  # drawn from one set: Chao2
        (np.arange(ROWS) // 4, ROWS // 4),  # runs of neighbours: proportional
        (np.arange(ROWS), ROWS),  # all distinct
        (RNG.integers(0, 40, ROWS), 40),  # every value seen
    ],
    ids=["drawn-from-a-set", "sorted-runs", "all-distinct", "few-values"],
)
def test_distinct_estimate_is_near_the_truth(values: np.ndarray, truth: int) -> None:
    """Within 15% of the column's distinct values, whether they come in runs or are drawn at
    random from a set several times larger than the sample."""
    assert distinct_estimate(blocks_of(values), len(values)) == pytest.approx(truth, rel=0.15)


def test_distinct_estimate_of_a_whole_short_column_is_exact() -> None:
    column = pa.array([1, 2, 2, None, 3] * 100)
    assert distinct_estimate([column], len(column) - column.null_count) == 3


def test_the_dictionary_page_limit_leaves_room_for_the_estimate() -> None:
    """Twice the largest chosen dictionary's estimate, at least the small limit, at most the
    limit a chosen dictionary may take."""

    def limit(*sizes: int) -> int:
        choices = tuple(EncodingChoice(f"c{i}", DICTIONARY, "", s) for i, s in enumerate(sizes))
        return ColumnEncodings(choices, 64 << 10, 16 << 20).dictionary_page_limit

    assert limit() == limit(1000) == 64 << 10
    assert limit(3 << 20, 1 << 20) == 6 << 20
    assert limit(12 << 20) == 16 << 20


def wide(pool: int, rows: int = 40_000, width: int = 300, **others: pa.Array) -> pa.Table:
    """A column of ``width``-byte strings drawn from ``pool`` distinct ones, and ``others``."""
    text = [f"{v:012d}".ljust(width, "x") for v in RNG.integers(0, pool, rows)]
    return pa.table({"text": text, **others})


def planned(table: pa.Table) -> tuple[str, int]:
    plan = plan_file(
        table,
        [],
        row_group_bytes=table.nbytes,
        grown_bytes=8 * table.nbytes,
        max_rows=1 << 20,
        codec="zstd",
    )
    return {c.column: c.encoding for c in plan.encodings.choices}["text"], plan.row_group_bytes


def test_a_wide_column_repeating_in_larger_row_groups_grows_them() -> None:
    """Strings drawn from 30,000 repeat too seldom among 40,000 rows to pay for a dictionary,
    often enough among eight times as many: the file's row groups grow, with a dictionary."""
    table = wide(30_000)
    assert planned(table) == (DICTIONARY, 8 * table.nbytes)
    assert chosen(table) == {"text": PLAIN}


def test_row_groups_grow_only_for_a_wide_repeating_column_that_holds_most_bytes() -> None:
    """No growth where the strings are all distinct, where they already repeat enough, or where
    the column holds less than half the bytes."""
    table = wide(2_000)
    assert planned(table) == (DICTIONARY, table.nbytes)
    table = wide(10**9)
    assert planned(table) == (PLAIN, table.nbytes)
    noise = {f"n{i}": pa.array(RNG.random(40_000)) for i in range(50)}
    table = wide(30_000, **noise)
    assert planned(table) == (PLAIN, table.nbytes)


def test_a_plan_without_room_to_grow_is_the_first_row_groups_own() -> None:
    """A file that ends within its first row group (planned with no larger size) gets the
    encodings its own rows call for."""
    table = wide(30_000)
    plan = plan_file(
        table,
        [],
        row_group_bytes=table.nbytes,
        grown_bytes=table.nbytes,
        max_rows=1 << 20,
        codec="zstd",
    )
    assert plan.row_group_bytes == table.nbytes
    assert {c.column: c.encoding for c in plan.encodings.choices} == {"text": PLAIN}


def tried(table: pa.Table, codec: str = "zstd") -> dict[str, str]:
    """The encodings :func:`plan_file` settles on for a first row group that is the file."""
    plan = plan_file(
        table,
        [],
        row_group_bytes=table.nbytes,
        grown_bytes=table.nbytes,
        max_rows=1 << 20,
        codec=codec,
    )
    return {c.column: c.encoding for c in plan.encodings.choices}


def tiled(rows: int = ROWS, period: int = 197, distinct: int = 100) -> np.ndarray:
    """Int32 values: a run of ``period`` drawn from ``distinct``, repeated (as tiled data)."""
    return RNG.integers(0, distinct, period).astype(np.int32)[np.arange(rows) % period]


def test_the_trial_follows_the_codec() -> None:
    """Few distinct values that repeat in one long sequence get a dictionary by the estimate;
    tried, zstd compresses them plain to about a sixth of the dictionary's indices (~480 B
    against ~2,850), snappy the other way round (~43,700 against ~16,400, and ~14,700
    delta-packed): plain with one, the smallest of the others with the other. Nested leaves
    and booleans are tried as well, between plain and a dictionary (a tie goes to plain, the
    cheaper to write)."""
    values = tiled()
    table = pa.table(
        {
            "n": values,
            "s": pa.StructArray.from_arrays([pa.array(values)], ["x"]),
            "flag": values > 50,
        }
    )
    assert chosen(table) == {"n": DICTIONARY, "s.x": DICTIONARY, "flag": DICTIONARY}
    assert tried(table, "zstd") == {"n": PLAIN, "s.x": PLAIN, "flag": PLAIN}
    assert tried(table, "snappy") == {"n": DELTA_BINARY_PACKED, "s.x": DICTIONARY, "flag": PLAIN}


def test_values_drawn_at_random_keep_their_dictionary() -> None:
    """Few distinct values in no order encode smaller as dictionary indices: the dictionary
    stays, for flat and nested columns alike."""
    words = np.array(["ok", "retry", "failed", "cancelled", "timeout"])
    table = pa.table(
        {
            "status": words[RNG.integers(0, 5, ROWS)],
            "amount": pa.array(RNG.integers(0, 500, ROWS) / 4),
            "s": [{"x": int(v)} for v in RNG.integers(0, 50, ROWS)],
        }
    )
    assert tried(table) == {"status": DICTIONARY, "amount": DICTIONARY, "s.x": DICTIONARY}


def test_a_tried_plain_choice_says_why() -> None:
    table = pa.table({"n": tiled(distinct=7)})
    plan = plan_file(
        table,
        [],
        row_group_bytes=table.nbytes,
        grown_bytes=table.nbytes,
        max_rows=ROWS,
        codec="zstd",
    )
    (choice,) = plan.encodings.choices
    assert choice.encoding == PLAIN and choice.dictionary_bytes == 0
    assert "~7 distinct" in choice.reason and "tried with zstd: PLAIN" in choice.reason


def test_trial_sizes_come_per_leaf_in_path_order() -> None:
    """One pair of sizes (dictionary, plain) per leaf column, in :func:`leaf_paths` order:
    here a leaf of one repeated value, whose dictionary holds it once, and one of distinct
    values, which outgrow the dictionary (then both writers write them plain)."""
    field = pa.field("s", pa.struct({"same": pa.string(), "distinct": pa.int64()}))
    values = pa.chunked_array(
        [[{"same": "x" * 100, "distinct": i * 7919 % 100_003} for i in range(50_000)]], field.type
    )
    same, distinct = trial_encoded_bytes(field, values, "none", 1024, 1 << 20)
    assert same[0] < same[1]
    assert distinct[0] == pytest.approx(distinct[1], rel=0.01)
    assert list(leaf_paths(field)) == ["s.same", "s.distinct"]


def overlapping_appends(rows: int = 17_815, appends: int = 20) -> np.ndarray:
    """Ids of appends each sorted, each one's range overlapping the next one's (issue 42)."""
    step = rows // appends + 1
    return np.concatenate(
        [np.sort(RNG.integers(a, a + 2 * step, min(step, rows - a))) for a in range(0, rows, step)]
    )


def test_a_bin_ending_in_its_first_row_group_is_planned_on_its_own_rows() -> None:
    """A small bin (nearly sorted ids beside as many doubles: the ids hold half the bytes) is
    planned as the encoder plans a bin that ends before its first row group is full: on its
    17,815 rows, not on the half million that would fill the row group, among which the ids'
    distinct values would repeat enough to take a dictionary (several times the size of delta
    packing, larger than plain). Delta packing is smaller than a dictionary on such ids
    anyway."""
    ids = overlapping_appends()
    table = pa.table({"id": ids, "value": RNG.random(len(ids))})
    rows = 8 << 20
    plan = plan_file(
        table, [], row_group_bytes=rows, grown_bytes=rows, max_rows=1 << 20, codec="zstd"
    )
    (choice, _) = plan.encodings.choices
    assert plan.row_group_bytes == rows
    assert choice.encoding == DELTA_BINARY_PACKED
    assert f"of {len(ids)} values" in choice.reason
    assert chosen(table) == {"id": DELTA_BINARY_PACKED, "value": PLAIN}
