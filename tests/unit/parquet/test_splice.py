"""Row groups encoded apart and joined (thrift editor, SplicedFile, PairedWriter): the joined
file is byte for byte the file one pyarrow writer writes of the same row groups."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.parquet._splice import SplicedFile
from rlcd.parquet._thrift import STRUCT, edit_struct, integer, list_header, read_integer
from rlcd.parquet.footer import MAGIC, footer_span
from rlcd.parquet.split_writer import SplitWriter

ROWS = 3_000


def _table(start: int, rows: int = ROWS) -> pa.Table:
    """Every kind of column a Delta table has: dictionaries, plain, nested, nulls."""
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table(
        {
            "id": ids,
            "name": pa.array([f"n{i % 7}" for i in range(start, start + rows)]),
            "wide": pa.array([f"value-{i}" * 3 for i in range(start, start + rows)]),
            "score": pa.array([i / 3 if i % 5 else None for i in range(start, start + rows)]),
            "at": pa.array([datetime(2024, 1, 1, tzinfo=UTC)] * rows, pa.timestamp("us", "UTC")),
            "tags": pa.array([[i, i + 1] if i % 3 else None for i in range(rows)]),
            "point": pa.array(
                [{"x": i, "y": str(i)} for i in range(rows)],
                pa.struct([("x", pa.int32()), ("y", pa.string())]),
            ),
            "nothing": pa.nulls(rows, pa.map_(pa.string(), pa.int64())),
        }
    )


SETTINGS: dict = {"compression": "zstd", "use_compliant_nested_type": True}


def _one_writer(tables: list[pa.Table], **settings: object) -> bytes:
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, tables[0].schema, **{**SETTINGS, **settings}) as writer:
        for table in tables:
            writer.write_table(table, row_group_size=table.num_rows)
    return sink.getvalue().to_pybytes()


def _opener(**settings: object) -> Callable[[pa.NativeFile, pa.Schema], pq.ParquetWriter]:
    return lambda stream, schema: pq.ParquetWriter(stream, schema, **{**SETTINGS, **settings})


def _spliced(tables: list[pa.Table], **settings: object) -> bytes:
    spliced, parts = SplicedFile(), [MAGIC]
    for table in tables:
        parts.append(spliced.add(pa.py_buffer(_one_writer([table], **settings))).to_pybytes())
    return b"".join(parts) + spliced.footer()


def test_integers_round_trip_as_zigzag_varints() -> None:
    for n in (0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**62, -(2**63)):
        assert read_integer(integer(n) + b"\xff", 0) == (n, len(integer(n)))
    assert list_header(STRUCT, 3) == bytes((0x3C,))
    assert list_header(STRUCT, 20) == bytes((0xFC, 20))


def test_edit_struct_rewrites_only_the_integers_it_is_told() -> None:
    # struct {1: i32 = 5, 2: i32 = 300, 3: struct {1: i32 = 7}}, then stop
    nested = bytes((0x15,)) + integer(7) + b"\x00"
    data = bytes((0x15,)) + integer(5) + bytes((0x15,)) + integer(300) + bytes((0x1C,)) + nested
    data += b"\x00"
    edited, end = edit_struct(data, 0, {2: lambda v: v * 1000, 3: {1: lambda v: -v}})
    assert end == len(data)
    expected = bytes((0x15,)) + integer(5) + bytes((0x15,)) + integer(300_000) + bytes((0x1C,))
    assert edited == expected + bytes((0x15,)) + integer(-7) + b"\x00\x00"


def test_edit_struct_refuses_truncated_bytes_and_non_integers() -> None:
    with pytest.raises(ValueError, match="past the end"):
        edit_struct(bytes((0x15,)) + integer(5), 0, {})
    binary = bytes((0x18, 2)) + b"ab" + b"\x00"
    with pytest.raises(ValueError, match="not an integer"):
        edit_struct(binary, 0, {1: lambda v: v})


@pytest.mark.parametrize(
    "settings",
    [{}, {"use_dictionary": False, "compression": "snappy"}],
    ids=["default", "plain"],
)
def test_spliced_file_is_the_one_writers_file(settings: dict) -> None:
    tables = [_table(i * ROWS) for i in range(5)]
    expected = _one_writer(tables, **settings)
    joined = _spliced(tables, **settings)
    assert joined == expected
    read = pq.read_table(pa.BufferReader(joined))
    assert read.equals(pa.concat_tables(tables))
    meta = pq.read_metadata(pa.BufferReader(joined))
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [ROWS] * 5


def test_page_indexes_follow_their_row_groups_and_read_back() -> None:
    """One writer puts every page index after the last row group; joined, each row group's
    follows its chunks. rlcd writes none, but the offsets still have to move with them."""
    tables = [_table(i * ROWS) for i in range(3)]
    joined = _spliced(tables, write_page_index=True)
    assert pq.read_table(pa.BufferReader(joined)).equals(pa.concat_tables(tables))
    indexes = _page_indexes(joined)
    leaves = pq.read_metadata(pa.BufferReader(joined)).num_columns
    assert len(indexes) == 3 * 2 * leaves  # an offset and a column index per chunk
    expected = [
        index
        for table in tables
        for index in _page_indexes(_one_writer([table], write_page_index=True))
    ]
    assert indexes == expected  # the same bytes, found where the moved offsets point


def _page_indexes(file: bytes) -> list[bytes]:
    """Every column chunk's offset and column index, as the footer's offsets find them."""
    span = footer_span(file[-8:], len(file))
    found: list[int] = []

    def seen(value: int) -> int:
        found.append(value)
        return value

    chunk = dict.fromkeys((4, 5, 6, 7), seen)  # offset index, length, column index, length
    edit_struct(file[-span:-8], 0, {4: {1: chunk}})
    pairs = zip(found[0::2], found[1::2], strict=True)
    return [file[offset : offset + length] for offset, length in pairs]


def test_spliced_file_refuses_what_one_writer_would_not_have_written() -> None:
    spliced = SplicedFile()
    with pytest.raises(ValueError, match="at least one row group"):
        spliced.footer()
    with pytest.raises(ValueError, match="magic"):
        spliced.add(pa.py_buffer(b"not a parquet file at all"))
    two = _one_writer([_table(0), _table(ROWS)])
    with pytest.raises(ValueError, match="exactly one row group"):
        spliced.add(pa.py_buffer(two))
    spliced.add(pa.py_buffer(_one_writer([_table(0)])))
    other = pa.table({"id": pa.array([1, 2], pa.int64())})
    with pytest.raises(ValueError, match="schema"):
        spliced.add(pa.py_buffer(_one_writer([other])))
    with pytest.raises(ValueError, match="exactly one row group"):
        spliced.add(pa.py_buffer(two))


def _split(tables: list[pa.Table], at: int, **settings: object) -> bytes:
    """The first table whole, the others in two parts: fields before ``at``, then the rest."""
    spliced = SplicedFile()
    parts = [MAGIC, spliced.add(pa.py_buffer(_one_writer(tables[:1], **settings))).to_pybytes()]
    for table in tables[1:]:
        files = [
            pa.py_buffer(_one_writer([table.select(names)], **settings))
            for names in (table.column_names[:at], table.column_names[at:])
        ]
        parts += (body.to_pybytes() for body in spliced.add_columns(files))
    return b"".join(parts) + spliced.footer()


@pytest.mark.parametrize("at", [1, 4, 7])
@pytest.mark.parametrize(
    "settings",
    [{}, {"use_dictionary": ["name"], "column_encoding": {"id": "DELTA_BINARY_PACKED"}}],
    ids=["default", "encodings"],
)
def test_row_groups_joined_from_column_parts_are_the_one_writers_file(
    at: int, settings: dict
) -> None:
    tables = [_table(i * ROWS) for i in range(4)]
    joined = _split(tables, at, **settings)
    assert joined == _one_writer(tables, **settings)


def test_column_parts_must_hold_the_row_group_whole() -> None:
    table = _table(0)
    spliced = SplicedFile()
    with pytest.raises(ValueError, match="first row group must come whole"):
        spliced.add_columns([pa.py_buffer(_one_writer([table]))])
    spliced.add(pa.py_buffer(_one_writer([table])))
    head = pa.py_buffer(_one_writer([table.select(["id", "name"])]))
    with pytest.raises(ValueError, match="column chunks"):
        spliced.add_columns([head])
    shorter = pa.py_buffer(_one_writer([_table(0, ROWS - 1).select(table.column_names[2:])]))
    with pytest.raises(ValueError, match="rows"):
        spliced.add_columns([head, shorter])


@pytest.mark.parametrize("groups", [1, 2, 9])
def test_split_writer_writes_the_one_writers_file(groups: int) -> None:
    tables = [_table(i * ROWS) for i in range(groups)]
    sink = pa.BufferOutputStream()
    writer = SplitWriter(sink, _opener(), chunk_bytes=4096)
    for table in tables:
        writer.write_table(table)
    meta = writer.close()
    assert sink.getvalue().to_pybytes() == _one_writer(tables)
    assert meta.num_rows == groups * ROWS
    assert meta.num_row_groups == groups
    assert meta.row_group(groups - 1).column(0).statistics.max == groups * ROWS - 1


def test_split_writer_of_one_field_writes_it_whole() -> None:
    tables = [_table(i * ROWS).select(["wide"]) for i in range(3)]
    sink = pa.BufferOutputStream()
    writer = SplitWriter(sink, _opener(), chunk_bytes=1 << 20)
    for table in tables:
        writer.write_table(table)
    writer.close()
    assert sink.getvalue().to_pybytes() == _one_writer(tables)


def test_split_writer_without_row_groups_refuses_to_close() -> None:
    writer = SplitWriter(pa.BufferOutputStream(), _opener(), chunk_bytes=4096)
    with pytest.raises(ValueError, match="at least one row group"):
        writer.close()


def test_a_parts_failure_reaches_the_caller_once_both_parts_are_done() -> None:
    failing = {"helper": 0, "caller": 0}

    def opener(stream: pa.NativeFile, schema: pa.Schema) -> pq.ParquetWriter:
        if "nothing" in schema.names and failing["helper"]:
            raise OSError("helper failed")
        if "id" in schema.names and failing["caller"] and len(schema) < 8:
            raise OSError("caller failed")
        return pq.ParquetWriter(stream, schema, **SETTINGS)

    for side in failing:
        failing.update(helper=0, caller=0)
        writer = SplitWriter(pa.BufferOutputStream(), opener, chunk_bytes=4096)
        writer.write_table(_table(0))
        failing[side] = 1
        with pytest.raises(OSError, match=f"{side} failed"):
            writer.write_table(_table(ROWS))
        writer.discard()
        assert writer._helper._shutdown
