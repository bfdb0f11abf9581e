"""Decimal chunks transcoded page by page: pyarrow reads the transcoded chunk back as the
source's values, with the target's storage and the source's bounds; what the transcoder does
not know is refused."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.parquet._format import FILE_ROW_GROUPS, GROUP_COLUMNS, chunk_spans, spans
from rlcd.parquet._thrift import STRUCT, edit_struct, skip, struct_list
from rlcd.parquet.assemble import patch_footer
from rlcd.parquet.copy_plan import metadata
from rlcd.parquet.footer import MAGIC, footer_span
from rlcd.parquet.transcode import (
    FIXED,
    INT32,
    INT64,
    Column,
    Storage,
    UntranscodableError,
    convert,
    transcode_chunk,
    transcode_row_group,
)


def _values(precision: int, scale: int, rows: int, *, nulls: bool) -> pa.Array:
    """Random decimals of ``precision`` digits, both signs and the extremes, some null."""
    rng = random.Random(precision * 100 + scale)
    top = 10**precision - 1
    ints = [rng.randint(-top, top) for _ in range(rows - 3)] + [-top, top, 0]
    values = [Decimal(i).scaleb(-scale) for i in ints]
    if nulls:
        values = [None if i % 7 == 3 else v for i, v in enumerate(values)]
    return pa.array(values, pa.decimal128(precision, scale))


def _file(table: pa.Table, *, integers: bool, **options: Any) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, store_decimal_as_integer=integers, **options)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _footer(data: bytes) -> bytes:
    return data[len(data) - footer_span(data[-8:], len(data)) :]


def _chunk(data: bytes) -> tuple[bytes, bytes, pq.ColumnSchema]:
    """The first row group's first column chunk: its bytes, struct and schema."""
    meta = metadata(_footer(data))
    group = struct_list(meta, spans(meta)[FILE_ROW_GROUPS][3])[0][0]
    chunk = struct_list(group, spans(group)[GROUP_COLUMNS][3])[0][0]
    start, stop = chunk_spans(group)[0]
    column = pq.read_metadata(pa.BufferReader(data)).schema.column(0)
    return data[start:stop], chunk, column


def _transcoded(data: bytes, *, integers: bool) -> bytes:
    """The file's one column transcoded into a file of the other storage (one row group)."""
    column = _chunk(data)[2]
    source = Storage.of(column.physical_type, column.length or 0)
    template_file = _file(
        pq.read_table(pa.BufferReader(data)).slice(0, 0), integers=integers, compression="zstd"
    )
    target_column = pq.read_metadata(pa.BufferReader(template_file)).schema.column(0)
    target = Storage.of(target_column.physical_type, target_column.length or 0)
    meta = metadata(_footer(data))
    group = struct_list(meta, spans(meta)[FILE_ROW_GROUPS][3])[0][0]
    columns = [Column(0, source, target, column.max_definition_level)]
    out, entry = transcode_row_group(group, columns, lambda start, stop: data[start:stop])
    return MAGIC + out + patch_footer(_footer(template_file), entry)


def _check(data: bytes, out: bytes, physical: str) -> None:
    """``out`` reads back as ``data``'s values, stored as ``physical``, with its bounds."""
    source, read = pq.read_table(pa.BufferReader(data)), pq.read_table(pa.BufferReader(out))
    assert read.equals(source)
    column = pq.read_metadata(pa.BufferReader(out)).row_group(0).column(0)
    before = pq.read_metadata(pa.BufferReader(data)).row_group(0).column(0).statistics
    assert column.physical_type == physical
    assert column.statistics.min == before.min and column.statistics.max == before.max
    assert column.statistics.null_count == before.null_count


@pytest.mark.parametrize("precision", range(1, 19))
@pytest.mark.parametrize("dictionary", [True, False])
def test_fixed_length_decimals_of_each_width_read_back_as_integers(
    precision: int, dictionary: bool
) -> None:
    """Widths 1 to 8 bytes (precision up to 18), dictionary and PLAIN pages, nulls and
    negatives: stored as INT32 up to 9 digits, INT64 beyond."""
    scale = precision // 3
    table = pa.table({"d": _values(precision, scale, 3_000, nulls=True)})
    data = _file(table, integers=False, use_dictionary=dictionary, data_page_size=2_000)
    _check(data, _transcoded(data, integers=True), "INT32" if precision <= 9 else "INT64")


@pytest.mark.parametrize("codec", ["none", "snappy", "zstd"])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [True, False])
def test_each_codec_and_page_version_both_ways(codec: str, version: str, dictionary: bool) -> None:
    """Fixed-length bytes to integers and back, each codec kept, data pages v1 and v2."""
    table = pa.table({"d": _values(12, 2, 5_000, nulls=True)})
    options = {
        "compression": codec,
        "data_page_version": version,
        "use_dictionary": dictionary,
        "data_page_size": 4_000,
    }
    for integers, physical in ((False, "INT64"), (True, "FIXED_LEN_BYTE_ARRAY")):
        data = _file(table, integers=integers, **options)
        out = _transcoded(data, integers=not integers)
        _check(data, out, physical)
        column = pq.read_metadata(pa.BufferReader(out)).row_group(0).column(0)
        assert (
            column.compression
            == pq.read_metadata(pa.BufferReader(data)).row_group(0).column(0).compression
        )


def test_a_dictionary_that_falls_back_to_plain_pages_and_a_required_column() -> None:
    """A dictionary full before the chunk ends (PLAIN pages after the dictionary ones), in a
    column without nulls and not nullable (no definition levels)."""
    values = _values(18, 4, 20_000, nulls=False)
    table = pa.table({"d": values}, schema=pa.schema([pa.field("d", values.type, False)]))
    data = _file(table, integers=False, dictionary_pagesize_limit=4_000, data_page_size=8_000)
    encodings = pq.read_metadata(pa.BufferReader(data)).row_group(0).column(0).encodings
    assert "PLAIN" in encodings and "RLE_DICTIONARY" in encodings
    _check(data, _transcoded(data, integers=True), "INT64")


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [True, False])
@pytest.mark.parametrize("nulls", ["all", "first half"])
def test_null_pages_and_chunks_with_checksums_both_ways(
    version: str, dictionary: bool, nulls: str
) -> None:
    """A chunk of nulls only, or whose first pages are nulls only (no values to convert), of
    a writer that checksums its pages and writes a page index: pyarrow reads the transcoded
    chunk back, checking the checksums left."""
    values = _values(10, 3, 2_000, nulls=False).to_pylist()
    rows = [None if nulls == "all" or i < 1_000 else v for i, v in enumerate(values)]
    table = pa.table({"d": pa.array(rows, pa.decimal128(10, 3))})
    options = {"data_page_version": version, "use_dictionary": dictionary, "data_page_size": 500}
    checked = {"write_page_checksum": True, "write_page_index": True, "compression": "snappy"}
    for integers, physical in ((False, "INT64"), (True, "FIXED_LEN_BYTE_ARRAY")):
        data = _file(table, integers=integers, **options, **checked)
        out = _transcoded(data, integers=not integers)
        _check(data, out, physical)
        pq.ParquetFile(pa.BufferReader(out), page_checksum_verification=True).read()


def test_other_encodings_are_refused() -> None:
    """A DELTA_BINARY_PACKED chunk is not transcoded (the caller decodes it instead)."""
    table = pa.table({"d": _values(12, 2, 1_000, nulls=True)})
    data = _file(
        table, integers=True, use_dictionary=False, column_encoding={"d": "DELTA_BINARY_PACKED"}
    )
    with pytest.raises(UntranscodableError, match="encoding"):
        _transcoded(data, integers=False)


@pytest.mark.parametrize("codec", ["gzip", "lz4", "brotli"])
def test_codecs_whose_sizes_pyarrow_does_not_check_are_refused(codec: str) -> None:
    table = pa.table({"d": _values(12, 2, 1_000, nulls=True)})
    with pytest.raises(UntranscodableError, match="codec"):
        _transcoded(_file(table, integers=False, compression=codec), integers=True)


@pytest.mark.parametrize("codec", ["none", "snappy", "zstd"])
def test_a_page_shorter_than_its_header_says_is_refused(codec: str) -> None:
    """A PLAIN page whose header claims more bytes than it decompresses to: pyarrow would
    hand back a buffer of the size claimed."""
    table = pa.table({"d": _values(12, 2, 1_000, nulls=True)})
    data = _file(table, integers=False, compression=codec, use_dictionary=False)
    body, chunk, column = _chunk(data)
    end = skip(body, 0, STRUCT)
    grown = edit_struct(body, 0, {2: lambda size: size + 6})[0] + body[end:]  # uncompressed
    if codec == "none":  # the page as long as it says, one value more than its levels say
        both = {2: lambda size: size + 6, 3: lambda size: size + 6}
        grown = edit_struct(body, 0, both)[0] + body[end:] + bytes(6)
    with pytest.raises(UntranscodableError):
        transcode_chunk(
            grown, chunk, Storage(FIXED, column.length), Storage(INT64, 8), levels=1, at=4
        )


def test_a_negative_page_size_is_refused() -> None:
    """A page header whose uncompressed size is negative: refused, not pyarrow's SystemError
    escaping (zstd takes the size it is told)."""
    table = pa.table({"d": _values(12, 2, 1_000, nulls=True)})
    body, chunk, column = _chunk(_file(table, integers=False, compression="zstd"))
    end = skip(body, 0, STRUCT)
    negative = edit_struct(body, 0, {2: lambda _: -5})[0] + body[end:]
    source, target = Storage(FIXED, column.length), Storage(INT64, 8)
    with pytest.raises(UntranscodableError, match="sizes"):
        transcode_chunk(negative, chunk, source, target, levels=1, at=4)


def test_a_chunk_of_another_codec_than_the_one_required_is_refused() -> None:
    """With ``recompress`` every output chunk has the output's codec: a snappy chunk is not
    transcoded into a zstd output (the caller encodes it with zstd instead)."""
    table = pa.table({"d": _values(12, 2, 1_000, nulls=True)})
    body, chunk, column = _chunk(_file(table, integers=False, compression="snappy"))
    source, target = Storage(FIXED, column.length), Storage(INT64, 8)
    with pytest.raises(UntranscodableError, match="codec"):
        transcode_chunk(body, chunk, source, target, levels=1, at=4, codec=6)
    assert transcode_chunk(body, chunk, source, target, levels=1, at=4, codec=1)


def test_an_unknown_page_header_field_is_refused() -> None:
    """A page header with a field parquet.thrift (as this package knows it) has not."""
    table = pa.table({"d": _values(12, 2, 1_000, nulls=True)})
    data = _file(table, integers=False)
    body, chunk, column = _chunk(data)
    header = b"\x95\x02\x00"  # a PageHeader of one field, 9, an i32
    source, target = Storage(FIXED, column.length), Storage(INT64, 8)
    with pytest.raises(UntranscodableError, match=r"PageHeader\.9"):
        transcode_chunk(header + body, chunk, source, target, levels=1, at=4)


@pytest.mark.parametrize(
    ("source", "target", "value"),
    [
        (Storage(FIXED, 5), Storage(INT32, 4), 1 << 32),
        (Storage(INT64, 8), Storage(FIXED, 3), -(1 << 23) - 1),
        (Storage(INT64, 8), Storage(INT32, 4), 1 << 31),
    ],
)
def test_values_that_do_not_fit_are_refused(source: Storage, target: Storage, value: int) -> None:
    big = source.physical == FIXED
    raw = value.to_bytes(source.width, "big" if big else "little", signed=True)
    with pytest.raises(UntranscodableError, match="does not fit"):
        convert(raw * 3, source, target)


def test_the_extremes_of_each_width_convert_both_ways() -> None:
    for width in range(1, 9):
        bound = 1 << (8 * width - 1)
        values = [-bound, -bound + 1, -1, 0, 1, bound - 1]
        fixed = b"".join(v.to_bytes(width, "big", signed=True) for v in values)
        wide = convert(fixed, Storage(FIXED, width), Storage(INT64, 8))
        assert wide == b"".join(v.to_bytes(8, "little", signed=True) for v in values)
        assert convert(wide, Storage(INT64, 8), Storage(FIXED, width)) == fixed
