"""Parquet files written by pyarrow in memory for the copy path's tests, and their footers
read independently of rlcd's codec (through pyarrow's metadata)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.parquet._format import FILE_ROW_GROUPS, spans
from rlcd.parquet._thrift import struct_list
from rlcd.parquet.footer import footer_span


def write(table: pa.Table, row_group_size: int, **settings: object) -> pa.Buffer:
    """``table`` as a Parquet file of row groups of ``row_group_size`` rows, in Arrow memory."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, table.schema, **settings) as writer:
        writer.write_table(table, row_group_size=row_group_size)
    return sink.getvalue()


def footer(file: pa.Buffer) -> bytes:
    """The file's footer span (metadata, its length, the magic)."""
    span = footer_span(file.slice(file.size - 8).to_pybytes(), file.size)
    return file.slice(file.size - span).to_pybytes()


def groups(file: pa.Buffer) -> list[bytes]:
    """The file's thrift ``RowGroup`` structs, as rlcd's codec reads them."""
    data = footer(file)
    return struct_list(data, spans(data)[FILE_ROW_GROUPS][3])[0]


def row_group_ranges(file: pa.Buffer) -> list[tuple[int, int, int]]:
    """Each row group's rows and where its chunks lie, as pyarrow reads the footer."""
    meta = pq.read_metadata(pa.BufferReader(file))
    ranges = []
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        first = group.column(0)
        start = first.dictionary_page_offset if first.has_dictionary_page else None
        start = first.data_page_offset if start is None else start
        size = sum(group.column(j).total_compressed_size for j in range(group.num_columns))
        ranges.append((group.num_rows, start, start + size))
    return ranges
