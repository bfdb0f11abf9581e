"""A copied float column chunk's Delta stats from its dictionary page alone (sans-IO).

Delta wants a float column's bounds Spark's way: a NaN makes the max NaN. Parquet's footer
statistics skip NaN and carry no NaN count, so a copied chunk was decoded whole to look. When
the chunk's ``encoding_stats`` show every data page dictionary-encoded, every value it holds
is one of its (only) dictionary page's, so a dictionary without NaN proves the chunk has none.
The bounds are the footer's min and max, which the writer computed from the values the chunk
holds, and only when the dictionary's least and greatest values are those same numbers: the
format does not forbid a dictionary value no row refers to, and a bound widened by one would
be wrong where Spark answers MIN/MAX from the stats alone. Anything else (no
``encoding_stats``, a PLAIN data page, a NaN in the dictionary, a page other than one PLAIN
dictionary page filling its range exactly, a codec this does not decompress, footer bounds
missing, marked inexact or not agreeing) gives None: the caller decodes the chunk as before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.parquet._format import (
    CHUNK_META,
    GROUP_COLUMNS,
    META_CODEC,
    META_DATA_PAGE,
    META_DICTIONARY_PAGE,
    META_STATISTICS,
    STATS_EXACT,
    STATS_VALUES,
    integer_field,
    spans,
)
from rlcd.parquet._thrift import FALSE, FieldSpan, read_binary, struct_list

__all__ = ("FloatStats", "dictionary_range", "float_stats")
__pure__ = True

_META_TYPE: Final = 1
_META_ENCODING_STATS: Final = 13
_STATS_NULL_COUNT: Final = 3
_FLOATS: Final = {4: (pa.float32(), struct.Struct("<f")), 5: (pa.float64(), struct.Struct("<d"))}
"""Parquet's FLOAT and DOUBLE: their Arrow type and PLAIN value."""
_DATA_PAGES: Final = frozenset((0, 3))  # DATA_PAGE, DATA_PAGE_V2
_DICTIONARY_PAGE: Final = 2
_DICTIONARY_ENCODINGS: Final = frozenset((2, 8))  # PLAIN_DICTIONARY, RLE_DICTIONARY
_PLAIN_DICTIONARY_PAGE: Final = frozenset((0, 2))  # PLAIN (PLAIN_DICTIONARY: deprecated same)
_CODECS: Final = {1: "snappy", 2: "gzip", 4: "brotli", 6: "zstd", 7: "lz4_raw"}
"""Parquet's codecs ``pyarrow.decompress`` reads as they are (0 is uncompressed; Hadoop's LZ4
framing, 5, and LZO, 3, are not)."""
_PAGE_HEADER_FIELDS: Final = frozenset((1, 2, 3, 4, 7))  # type, sizes, crc, dictionary header


@dataclass(frozen=True, slots=True)
class FloatStats:
    """A float chunk without NaN: its least and greatest value and its null count."""

    low: float
    high: float
    null_count: int


def _meta(group: bytes, column: int) -> tuple[bytes, dict[int, FieldSpan]]:
    chunk = struct_list(group, spans(group)[GROUP_COLUMNS][3])[0][column]
    return chunk, spans(chunk, spans(chunk)[CHUNK_META][3])


def _page_kind(entry: bytes) -> tuple[int | None, int | None, int | None]:
    """A ``PageEncodingStats`` struct's page type, encoding and page count."""
    fields = spans(entry)
    return tuple(integer_field(entry, fields, i) for i in (1, 2, 3))  # type: ignore[return-value]


def dictionary_range(group: bytes, column: int) -> tuple[int, int] | None:
    """Where column ``column``'s dictionary page lies in the file of the thrift ``RowGroup``
    ``group``, when the chunk is FLOAT or DOUBLE and its ``encoding_stats`` say every data page
    is dictionary-encoded after one dictionary page; else None."""
    try:
        chunk, meta = _meta(group, column)
        if integer_field(chunk, meta, _META_TYPE) not in _FLOATS:
            return None
        if _META_ENCODING_STATS not in meta:
            return None
        entries = struct_list(chunk, meta[_META_ENCODING_STATS][3])[0]
        kinds = [_page_kind(entry) for entry in entries]
        dictionaries = sum(n or 0 for kind, _, n in kinds if kind == _DICTIONARY_PAGE)
        if dictionaries != 1 or any(
            kind not in (*_DATA_PAGES, _DICTIONARY_PAGE)
            or (kind in _DATA_PAGES and encoding not in _DICTIONARY_ENCODINGS)
            for kind, encoding, _ in kinds
        ):
            return None
        start = integer_field(chunk, meta, META_DICTIONARY_PAGE)
        stop = integer_field(chunk, meta, META_DATA_PAGE)
    except (ValueError, IndexError, KeyError):
        return None
    if start is None or stop is None or not 0 < start < stop:
        return None
    return start, stop


def float_stats(group: bytes, column: int, page: bytes) -> FloatStats | None:
    """The stats of column ``column`` of the thrift ``RowGroup`` ``group`` from ``page``, the
    bytes :func:`dictionary_range` named: None when the dictionary holds a NaN or anything
    does not read as the module header says."""
    try:
        chunk, meta = _meta(group, column)
        kind = _FLOATS.get(integer_field(chunk, meta, _META_TYPE) or -1)
        values = _dictionary(page, integer_field(chunk, meta, META_CODEC), kind)
        footer = _footer_stats(chunk, meta, kind)
    except (ValueError, IndexError, KeyError):
        return None
    if values is None or footer is None or not len(values):
        return None
    if values.null_count or pc.any(pc.is_nan(values)).as_py():
        return None
    extremes = pc.min_max(values)
    low, high, nulls = footer
    # equal also for -0.0 and 0.0, which Delta's stats write alike
    if extremes["min"].as_py() != low or extremes["max"].as_py() != high:
        return None
    return FloatStats(low, high, nulls)


def _dictionary(
    page: bytes, codec: int | None, kind: tuple[pa.DataType, struct.Struct] | None
) -> pa.Array | None:
    """The values of a PLAIN dictionary page filling ``page`` exactly, else None."""
    header = spans(page)
    if kind is None or not header.keys() <= _PAGE_HEADER_FIELDS or 7 not in header:
        return None
    if integer_field(page, header, 1) != _DICTIONARY_PAGE:
        return None
    dictionary = spans(page, header[7][3])
    if not dictionary.keys() <= {1, 2, 3}:
        return None
    if integer_field(page, dictionary, 2) not in _PLAIN_DICTIONARY_PAGE:
        return None
    count = integer_field(page, dictionary, 1)
    raw, compressed = integer_field(page, header, 2), integer_field(page, header, 3)
    body = max(span[4] for span in header.values()) + 1  # after the header's stop byte
    if count is None or raw is None or compressed is None or body + compressed != len(page):
        return None
    if raw != count * kind[1].size:
        return None
    data = page[body:]
    if codec == 0 and compressed == raw:
        buffer = pa.py_buffer(data)
    elif codec in _CODECS:
        try:
            buffer = pa.decompress(data, decompressed_size=raw, codec=_CODECS[codec])
        except (pa.ArrowException, OSError):
            return None
    else:
        return None
    if buffer.size != raw:
        return None
    return pa.Array.from_buffers(kind[0], count, [None, buffer])


def _footer_stats(
    chunk: bytes, meta: dict[int, FieldSpan], kind: tuple[pa.DataType, struct.Struct] | None
) -> tuple[float, float, int] | None:
    """The chunk's footer min, max and null count, when present and not marked inexact."""
    if kind is None or META_STATISTICS not in meta:
        return None
    stats = spans(chunk, meta[META_STATISTICS][3])
    if not {*STATS_VALUES, _STATS_NULL_COUNT} <= stats.keys():
        return None
    if any(stats[field][1] == FALSE for field in STATS_EXACT if field in stats):
        return None
    high_raw, low_raw = (read_binary(chunk, stats[field][3])[0] for field in STATS_VALUES)
    nulls = integer_field(chunk, stats, _STATS_NULL_COUNT)
    size = kind[1].size
    if len(low_raw) != size or len(high_raw) != size or nulls is None:
        return None
    return float(kind[1].unpack(low_raw)[0]), float(kind[1].unpack(high_raw)[0]), nulls
