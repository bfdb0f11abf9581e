"""The byte ranges of a projected checkpoint read hold everything pyarrow reads of them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.delta._parquet_ranges import footer_length, group_ranges, parse_footer


def _file(**options: object) -> bytes:
    """Three row groups of an action-like table: structs, a map, dictionary-encoded text."""
    n = 3000
    table = pa.table(
        {
            "add": pa.array(
                [
                    {"path": f"part-{i % 7}.parquet", "size": i, "stats": "x" * (i % 50)}
                    for i in range(n)
                ]
            ),
            "pv": pa.array(
                [[("k", str(i % 3))] for i in range(n)], pa.map_(pa.string(), pa.string())
            ),
            "big": pa.array([b"y" * 200] * n),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=1000, **options)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("options", [{}, {"compression": "snappy", "use_dictionary": False}])
def test_ranges_hold_what_a_projected_read_reads(options: dict[str, object]) -> None:
    """Every byte outside the ranges garbled, the projection still reads as from the file."""
    data = _file(**options)
    size = len(data)
    footer = parse_footer(data[size - footer_length(data[-8:], size) :])
    columns = ["add.path", "add.stats", "pv"]
    whole = pq.ParquetFile(pa.BufferReader(data))
    for group in range(footer.num_row_groups):
        garbled = bytearray(b"\xff" * size)
        ranges = group_ranges(footer, group, columns, size)
        for start, stop in ranges:
            garbled[start:stop] = data[start:stop]
        read = pq.ParquetFile(pa.BufferReader(bytes(garbled)), metadata=footer)
        assert read.read_row_group(group, columns=columns) == whole.read_row_group(
            group, columns=columns
        )
        assert sum(stop - start for start, stop in ranges) < size / 2  # "big" is not fetched


def test_a_footer_that_is_not_one_is_refused() -> None:
    data = _file()
    with pytest.raises(ValueError, match="magic"):
        footer_length(data[:-1], len(data) - 1)
    with pytest.raises(ValueError, match="claims"):
        footer_length(data[-8:], 100)


def test_a_chunk_outside_the_file_is_refused() -> None:
    data = _file()
    footer = parse_footer(data[len(data) - footer_length(data[-8:], len(data)) :])
    with pytest.raises(ValueError, match="outside the file"):
        group_ranges(footer, 2, ["big"], len(data) // 2)
