"""How many rows a source is decoded at a time: from its footer, its first batch, and the
widths seen on a bin's earlier sources."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from rlcd.compaction.source import DecodedSource, FetchedSource, ReadOptions
from rlcd.delta.actions import AddFile
from rlcd.parquet.batching import (
    BATCH_BUFFER_BYTES,
    MAX_BATCH_ROWS,
    batch_rows,
    footer_row_bytes,
    row_bytes,
)

WIDE = 1000  # bytes a value


def _parquet(table: pa.Table, **write: object) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **write)  # type: ignore[arg-type]
    return sink.getvalue()


def _decoded(data: bytes, schema: pa.Schema) -> DecodedSource:
    fetched = FetchedSource(
        AddFile(path="f.parquet", size=len(data)), "f.parquet", BitMap64(), data=data
    )
    return DecodedSource(fetched, ReadOptions(target=schema), table="t", version=1)


@pytest.mark.parametrize(
    ("width", "rows"),
    [
        (0.0, MAX_BATCH_ROWS),
        (BATCH_BUFFER_BYTES / MAX_BATCH_ROWS, MAX_BATCH_ROWS),  # exactly fits
        (200.0, 10 * 1024),  # 2 MiB / 200 B = 10,485 rows, down to a multiple of 1,024
        (WIDE, 2048),
        (10 * 1024 * 1024, 1024),  # one value larger than the budget: still 1,024 rows
    ],
)
def test_batch_rows_keeps_the_largest_buffer_within_the_budget(width: float, rows: int) -> None:
    assert batch_rows(width) == rows


def test_batch_rows_never_exceeds_the_configured_rows() -> None:
    assert batch_rows(0.0, max_rows=10) == 10
    assert batch_rows(WIDE, max_rows=10) == 10  # the floor of 1,024 rows does not lift it


def test_footer_width_is_the_largest_uncompressed_chunk_per_row() -> None:
    n = 4000
    table = pa.table({"id": pa.array(range(n), pa.int64()), "s": ["x" * 100] * n})
    footer = pq.ParquetFile(pa.BufferReader(_parquet(table, use_dictionary=False))).metadata
    chunk = footer.row_group(0).column(1).total_uncompressed_size
    assert footer_row_bytes(footer) == chunk / n
    assert 100 < footer_row_bytes(footer) < 110  # the value and its 4-byte length
    empty = pq.ParquetFile(pa.BufferReader(_parquet(table.slice(0, 0)))).metadata
    assert footer_row_bytes(empty) == 0.0


def test_row_width_reads_every_buffer_at_any_depth() -> None:
    inner = pa.array([{"s": "y" * 50}] * 10)
    batch = pa.record_batch({"id": pa.array(range(10), pa.int8()), "nested": inner})
    assert row_bytes(batch) == 50.0  # the struct child's data buffer, 500 bytes for 10 rows
    assert row_bytes(batch.slice(0, 0)) == 0.0


def test_a_wide_column_is_decoded_in_short_batches_with_every_row() -> None:
    n = 6000
    table = pa.table(
        {"id": pa.array(range(n), pa.int64()), "s": [f"{i:0{WIDE}d}" for i in range(n)]}
    )
    decoded = _decoded(_parquet(table, use_dictionary=False), table.schema)
    batches = list(decoded.batches())
    assert [b.num_rows for b in batches] == [2048, 2048, 1904]
    assert pa.Table.from_batches(batches).equals(table)
    assert decoded.width >= WIDE


def test_a_width_seen_on_an_earlier_source_carries_to_the_next() -> None:
    """A dictionary-encoded wide column is small in the file (its footer says so) but wide once
    decoded: the first batch shows it, and the bin's next source starts short."""
    n = 6000
    table = pa.table({"s": [("a" if i % 2 else "b") * WIDE for i in range(n)]})
    data = _parquet(table, use_dictionary=True)
    first = _decoded(data, table.schema)
    assert footer_row_bytes(first.footer) < 10
    assert [b.num_rows for b in first.batches()] == [n]  # the footer alone: one long batch
    assert first.width >= WIDE
    second = _decoded(data, table.schema)
    batches = list(second.batches(first.width))
    assert [b.num_rows for b in batches] == [2048, 2048, 1904]
    assert pa.Table.from_batches(batches).equals(table)
