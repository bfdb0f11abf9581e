"""A copied float chunk's stats from its dictionary page alone (rlcd.parquet.dictionary), on
chunks pyarrow writes: given only where the dictionary proves the chunk free of NaN and its
least and greatest values are the footer's bounds; None (decode as before) otherwise."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rlcd.parquet._format import CHUNK_META, GROUP_COLUMNS
from rlcd.parquet._thrift import Drop, edit_struct
from rlcd.parquet.dictionary import FloatStats, dictionary_range, float_stats
from tests.unit.parquet.files import groups, write

ENCODING_STATS = 13


def _file(values: list[float | None], kind: pa.DataType, **settings: object) -> pa.Buffer:
    table = pa.table({"id": pa.array(range(len(values))), "x": pa.array(values, kind)})
    return write(table, len(values), **settings)


def _stats(file: pa.Buffer, group: bytes | None = None) -> FloatStats | None:
    group = group or groups(file)[0]
    found = dictionary_range(group, 1)
    if found is None:
        return None
    return float_stats(group, 1, file.slice(found[0], found[1] - found[0]).to_pybytes())


def _decoded(file: pa.Buffer) -> FloatStats:
    """What decoding the chunk gives (no NaN in it)."""
    column = pq.read_table(pa.BufferReader(file)).column("x")
    extremes = pc.min_max(column)
    return FloatStats(extremes["min"].as_py(), extremes["max"].as_py(), column.null_count)


@pytest.mark.parametrize("kind", [pa.float32(), pa.float64()])
@pytest.mark.parametrize("compression", ["none", "snappy", "zstd", "gzip", "brotli", "lz4"])
def test_a_dictionary_without_nan_gives_the_chunks_stats(
    kind: pa.DataType, compression: str
) -> None:
    values = [(i % 97) / 4 - 3 if i % 11 else None for i in range(5_000)]
    values[7] = -0.0
    file = _file(values, kind, compression=compression)
    found = _stats(file)
    assert found == _decoded(file)
    assert found is not None and found.null_count == values.count(None)


@pytest.mark.parametrize("kind", [pa.float32(), pa.float64()])
def test_a_nan_in_the_dictionary_gives_nothing(kind: pa.DataType) -> None:
    file = _file([1.5, math.nan, -2.0] * 100, kind, compression="snappy")
    assert dictionary_range(groups(file)[0], 1) is not None
    assert _stats(file) is None


def test_zeros_and_infinities() -> None:
    file = _file([-0.0, 0.0, math.inf, -math.inf] * 10, pa.float64())
    assert _stats(file) == FloatStats(-math.inf, math.inf, 0)
    zeros = _stats(_file([0.0, -0.0] * 10, pa.float64()))
    assert zeros is not None and zeros.low == 0 and zeros.high == 0


def test_plain_data_pages_give_nothing() -> None:
    """Without a dictionary, or once the writer falls back to PLAIN pages (its dictionary
    outgrew the limit), the values are not all in a dictionary."""
    values = [i / 3 for i in range(20_000)]
    plain = _file(values, pa.float64(), use_dictionary=False)
    assert dictionary_range(groups(plain)[0], 1) is None
    fallback = _file(values, pa.float64(), dictionary_pagesize_limit=4096, data_page_size=4096)
    meta = pq.read_metadata(pa.BufferReader(fallback)).row_group(0).column(1)
    assert meta.has_dictionary_page and "PLAIN" in meta.encodings
    assert dictionary_range(groups(fallback)[0], 1) is None
    assert _stats(fallback) is None


def test_no_encoding_stats_gives_nothing() -> None:
    file = _file([1.0, 2.0] * 50, pa.float64())
    edits = {GROUP_COLUMNS: {CHUNK_META: {ENCODING_STATS: Drop.FIELD}}}
    group = edit_struct(groups(file)[0], 0, edits)[0]
    assert dictionary_range(groups(file)[0], 1) is not None
    assert dictionary_range(group, 1) is None


def test_other_types_give_nothing() -> None:
    file = _file([1.0, 2.0] * 50, pa.float64())
    assert dictionary_range(groups(file)[0], 0) is None  # the int64 id


def test_a_page_not_read_as_expected_gives_nothing() -> None:
    """Truncated or lengthened bytes, a data page, another chunk's dictionary whose bounds
    differ from the footer's (as a value no row refers to would make them), and an empty
    dictionary (an all-null chunk) all give None."""
    file = _file([(i % 13) / 2 for i in range(1_000)], pa.float64(), compression="zstd")
    group = groups(file)[0]
    found = dictionary_range(group, 1)
    assert found is not None
    start, stop = found
    page = file.slice(start, stop - start).to_pybytes()
    assert float_stats(group, 1, page) is not None
    assert float_stats(group, 1, page[:-1]) is None
    assert float_stats(group, 1, page + b"\0") is None
    assert float_stats(group, 1, file.slice(stop, 64).to_pybytes()) is None
    other = _file([(i % 13) / 2 for i in range(1, 1_000)] + [99.0], pa.float64())
    other_found = dictionary_range(groups(other)[0], 1)
    assert other_found is not None
    other_page = other.slice(other_found[0], other_found[1] - other_found[0]).to_pybytes()
    assert float_stats(group, 1, other_page) is None
    assert _stats(_file([None] * 10, pa.float64())) is None
