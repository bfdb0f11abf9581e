"""A decimal column chunk's storage changed page by page, without decoding its values (sans-IO).

A row group copied with patches (``copy_plan.Copy.patched``) needs its decimal chunks stored
as the output stores them: fixed-length big-endian bytes, or INT32/INT64 little-endian.
Decoding them with pyarrow and encoding them again costs most of such a copy's CPU, yet only
the values' bytes differ: dictionary-encoded data pages hold indices and are kept as they are,
only the dictionary page's PLAIN values are converted; PLAIN data pages keep their levels'
bytes and have their values converted (strided byte slices: C speed without numpy, which
the command does not load). Pages are decompressed and compressed again with the chunk's own
codec (Parquet's codec is per chunk); page CRCs of rewritten pages and page-header statistics
are dropped; the chunk's metadata gets the new type, sizes, offsets and statistics (min and
max converted, the deprecated fields dropped), and loses its page index, bloom filter and
size statistics references.

Anything else (another encoding, a page type or header field this module does not know, a
codec pyarrow has not, values that do not fit) raises :class:`UntranscodableError`: the caller
decodes and encodes those chunks as before. Pure: bytes in, bytes out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from rlcd.parquet._format import (
    CHUNK_META,
    GROUP_COLUMNS,
    GROUP_COMPRESSED_SIZE,
    GROUP_FILE_OFFSET,
    GROUP_NUM_ROWS,
    GROUP_TOTAL_SIZE,
    META_BLOOM_FILTER,
    META_CODEC,
    META_COMPRESSED_SIZE,
    META_DATA_PAGE,
    META_DICTIONARY_PAGE,
    META_STATISTICS,
    META_UNCOMPRESSED_SIZE,
    STATS_VALUES,
    chunk_spans,
    integer_field,
    spans,
    unknown_fields,
)
from rlcd.parquet._thrift import (
    FALSE,
    I64,
    LIST,
    STRUCT,
    FieldSpan,
    binary,
    integer,
    list_header,
    read_binary,
    read_varint,
    skip,
    struct_fields,
    struct_list,
    write_struct,
)
from rlcd.parquet.footer import MAGIC

__all__ = ("Storage", "Column", "UntranscodableError", "transcode_chunk", "transcode_row_group")
__pure__ = True

INT32: Final = 1
INT64: Final = 2
FIXED: Final = 7
"""Parquet's physical types a decimal of up to 18 digits may be stored as."""

_CODECS: Final = {0: None, 1: "snappy", 6: "zstd"}
"""Parquet's codecs this module decompresses and compresses (with pyarrow), those whose
decompressed size it can hold to the page header's: pyarrow fills a buffer of the size it is
told, and only its zstd says when the data is shorter (snappy's is checked here)."""

_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_TYPE, _UNCOMPRESSED, _COMPRESSED, _CRC = 1, 2, 3, 4
_V1, _DICTIONARY, _V2 = 5, 7, 8
_V1_ENCODING, _V1_DEF_ENCODING, _V1_STATISTICS = 2, 3, 5
_V2_ENCODING, _V2_DEF_LENGTH, _V2_REP_LENGTH, _V2_COMPRESSED, _V2_STATISTICS = 4, 5, 6, 7, 8
_META_TYPE, _META_SIZE_STATISTICS = 1, 16
_CHUNK_FILE_OFFSET, _CHUNK_INDEXES, _CHUNK_ENCRYPTION = 2, (4, 5, 6, 7), (8, 9)
_DEPRECATED_BOUNDS: Final = (1, 2)  # Statistics' max and min


class UntranscodableError(ValueError):
    """A chunk this module does not transcode: the caller decodes and encodes it instead."""


@dataclass(frozen=True, slots=True)
class Storage:
    """How a decimal column is stored: its physical type, and its byte width."""

    physical: int
    width: int

    @classmethod
    def of(cls, physical: str, length: int) -> Storage:
        """From pyarrow's ``ColumnSchema.physical_type`` and ``length``.

        Raises:
            UntranscodableError: not INT32, INT64, or fixed-length bytes of 1 to 8.
        """
        if physical == "INT32":
            return cls(INT32, 4)
        if physical == "INT64":
            return cls(INT64, 8)
        if physical == "FIXED_LEN_BYTE_ARRAY" and 1 <= length <= 8:
            return cls(FIXED, length)
        raise UntranscodableError(f"a decimal stored as {physical} of {length} bytes")


_SIGN: Final = bytes(0xFF if b >= 0x80 else 0 for b in range(256))
"""Each byte to the byte that extends its sign (``bytes.translate``)."""


def convert(values: bytes, source: Storage, target: Storage) -> bytes:
    """PLAIN values of ``source`` as ``target`` stores them (big-endian two's complement of its
    width, or little-endian integers). Byte by byte, a strided slice per byte of the values
    (C speed, no numpy: the command does not load it).

    Raises:
        UntranscodableError: the bytes are not whole values, or a value does not fit.
    """
    width = source.width
    if len(values) % width:
        raise UntranscodableError(f"{len(values)} bytes of {width}-byte values")
    big = source.physical == FIXED
    # the values' bytes by significance, least first: one bytes object per byte position
    columns = [values[(width - 1 - k if big else k) :: width] for k in range(width)]
    sign = columns[-1].translate(_SIGN)
    columns += [sign] * (target.width - width)
    if any(
        column != columns[target.width - 1].translate(_SIGN) for column in columns[target.width :]
    ):
        raise UntranscodableError(f"a value does not fit in {target.width} bytes")
    out = bytearray(len(values) // width * target.width)
    for k in range(target.width):
        at = target.width - 1 - k if target.physical == FIXED else k
        out[at :: target.width] = columns[k]
    return bytes(out)


def _rebuilt(data: bytes, pos: int, values: Mapping[int, bytes | None]) -> bytes:
    """The struct at ``pos`` with the fields in ``values`` given those value bytes (of their
    own type), or dropped for None."""
    kept = []
    for field, kind, _, start, end in struct_fields(data, pos):
        if field not in values:
            kept.append((field, kind, data[start:end]))
        elif (value := values[field]) is not None:
            kept.append((field, kind, value))
    return write_struct(kept)


def _present(levels: bytes, count: int) -> int:
    """How many of ``count`` definition levels of a top-level optional column (bit width 1,
    RLE / bit-packed hybrid) are 1: its page's values.

    Raises:
        UntranscodableError: the levels are not that.
    """
    pos = seen = ones = 0
    while seen < count:
        header, pos = read_varint(levels, pos)
        if header & 1:  # bit-packed groups of 8 values, a byte each, least significant first
            groups = levels[pos : pos + (header >> 1)]
            n = min(8 * len(groups), count - seen)
            full, rest = divmod(n, 8)
            ones += int.from_bytes(groups[:full], "little").bit_count()
            ones += (groups[full] & ((1 << rest) - 1)).bit_count() if rest else 0
            pos += header >> 1
        else:  # a run of one value, in one byte
            value = levels[pos] if pos < len(levels) else 2
            n = min(header >> 1, count - seen)
            ones += n * value
            pos += 1
            if value > 1:
                raise UntranscodableError(f"a definition level of {value}")
        if n <= 0 or pos > len(levels):
            raise UntranscodableError("definition levels that do not add up")
        seen += n
    return ones


def _counted(values: bytes, storage: Storage, count: int | None) -> bytes:
    """``values``, once held to be ``count`` values of ``storage``.

    Raises:
        UntranscodableError: they are not.
    """
    if count is None or len(values) != count * storage.width:
        raise UntranscodableError(f"{len(values)} bytes for {count} values")
    return values


def _decompressed(page: bytes, size: int, codec: str | None) -> bytes:
    if codec is None:
        if len(page) != size:
            raise UntranscodableError(f"an uncompressed page of {len(page)} bytes says {size}")
        return page
    if codec == "snappy" and read_varint(page, 0)[0] != size:  # snappy's length preamble
        raise UntranscodableError(f"a snappy page not of the {size} bytes its header says")
    try:
        out: bytes = pa.decompress(page, size, codec=codec, asbytes=True)
    except (pa.ArrowException, OSError, ValueError) as exc:  # codec errors come as OSError
        raise UntranscodableError(f"a page does not decompress: {exc}") from exc
    return out


def _compressed(values: bytes, codec: str | None) -> bytes:
    if codec is None:
        return values
    out: bytes = pa.compress(values, codec=codec, asbytes=True)
    return out


class _Pages:
    """A chunk's pages transcoded one by one (see the module docstring)."""

    def __init__(self, source: Storage, target: Storage, codec: str | None, levels: int) -> None:
        self._source, self._target, self._codec, self._levels = source, target, codec, levels
        self.out: list[bytes] = []
        self.size = self.uncompressed = 0
        self.dictionary: int | None = None
        self.first_data: int | None = None

    def add(self, data: bytes, pos: int) -> int:
        """Transcode the page whose header is at ``pos``; the position after the page."""
        unknown = unknown_fields(data, "PageHeader", pos)
        if unknown:
            raise UntranscodableError(f"a page header's fields {unknown}")
        end = skip(data, pos, STRUCT)
        header = spans(data, pos)
        kind = integer_field(data, header, _TYPE)
        size = integer_field(data, header, _UNCOMPRESSED)
        stored = integer_field(data, header, _COMPRESSED)
        if size is None or stored is None or end + stored > len(data) or min(size, stored) < 0:
            raise UntranscodableError("a page header without its sizes, or past the chunk")
        page = data[end : end + stored]
        at = self.size
        if kind == _DICTIONARY_PAGE and self.dictionary is None and self.first_data is None:
            self.dictionary = at
            self._dictionary(data, pos, header, page, size)
        elif kind == _DATA_PAGE and _V1 in header:
            self.first_data = at if self.first_data is None else self.first_data
            self._v1(data, pos, end, header, page, size)
        elif kind == _DATA_PAGE_V2 and _V2 in header:
            self.first_data = at if self.first_data is None else self.first_data
            self._v2(data, pos, header, page, size)
        else:
            raise UntranscodableError(f"a page of type {kind} where it is not expected")
        return end + stored

    def _append(self, header: bytes, page: bytes, size: int) -> None:
        self.out += (header, page)
        self.size += len(header) + len(page)
        self.uncompressed += len(header) + size

    def _sized(
        self, data: bytes, pos: int, size: int, page: bytes, sub: int, struct: bytes
    ) -> bytes:
        """The page header at ``pos`` for a rewritten page: its sizes, its CRC dropped, its
        ``sub`` header ``struct``."""
        values = {_UNCOMPRESSED: integer(size), _COMPRESSED: integer(len(page)), _CRC: None}
        return _rebuilt(data, pos, {**values, sub: struct})

    def _dictionary(
        self, data: bytes, pos: int, header: dict[int, FieldSpan], page: bytes, size: int
    ) -> None:
        at = header[_DICTIONARY][3]
        fields = spans(data, at)
        if integer_field(data, fields, 2) not in (_PLAIN, _PLAIN_DICTIONARY):
            raise UntranscodableError("a dictionary page not PLAIN-encoded")
        raw = _decompressed(page, size, self._codec)
        count = integer_field(data, fields, 1)
        values = convert(_counted(raw, self._source, count), self._source, self._target)
        body = _compressed(values, self._codec)
        kept = data[at : skip(data, at, STRUCT)]
        self._append(
            self._sized(data, pos, len(values), body, _DICTIONARY, kept), body, len(values)
        )

    def _v1(
        self,
        data: bytes,
        pos: int,
        end: int,
        header: dict[int, FieldSpan],
        page: bytes,
        size: int,
    ) -> None:
        at = header[_V1][3]
        fields = spans(data, at)
        encoding = integer_field(data, fields, _V1_ENCODING)
        unstated = _rebuilt(data, at, {_V1_STATISTICS: None})
        if encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY):  # indices: kept as they are
            stated = _V1_STATISTICS in fields
            self._append(
                _rebuilt(data, pos, {_V1: unstated}) if stated else data[pos:end], page, size
            )
            return
        if encoding != _PLAIN:
            raise UntranscodableError(f"a data page of encoding {encoding}")
        raw = _decompressed(page, size, self._codec)
        split, count = 0, integer_field(data, fields, 1)
        if self._levels:
            if integer_field(data, fields, _V1_DEF_ENCODING) != _RLE or len(raw) < 4:
                raise UntranscodableError("definition levels not RLE-encoded")
            split = 4 + int.from_bytes(raw[:4], "little")
            if split > len(raw) or count is None:
                raise UntranscodableError("definition levels past the page")
            count = _present(raw[4:split], count)
        values = _counted(raw[split:], self._source, count)
        plain = raw[:split] + convert(values, self._source, self._target)
        body = _compressed(plain, self._codec)
        self._append(self._sized(data, pos, len(plain), body, _V1, unstated), body, len(plain))

    def _v2(
        self, data: bytes, pos: int, header: dict[int, FieldSpan], page: bytes, size: int
    ) -> None:
        at = header[_V2][3]
        fields = spans(data, at)
        encoding = integer_field(data, fields, _V2_ENCODING)
        unstated = _rebuilt(data, at, {_V2_STATISTICS: None})
        if encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY):
            self._append(_rebuilt(data, pos, {_V2: unstated}), page, size)
            return
        if encoding != _PLAIN:
            raise UntranscodableError(f"a data page of encoding {encoding}")
        levels = sum(integer_field(data, fields, f) or 0 for f in (_V2_DEF_LENGTH, _V2_REP_LENGTH))
        if not 0 <= levels <= min(size, len(page)):
            raise UntranscodableError("levels past the page")
        compressed = fields.get(_V2_COMPRESSED, (0, 0))[1] != FALSE  # true unless said false
        codec = self._codec if compressed else None
        count, nulls = (integer_field(data, fields, f) for f in (1, 2))
        raw = _decompressed(page[levels:], size - levels, codec)
        present = None if count is None or nulls is None else count - nulls
        values = convert(_counted(raw, self._source, present), self._source, self._target)
        body = page[:levels] + _compressed(values, codec)
        self._append(
            self._sized(data, pos, levels + len(values), body, _V2, unstated),
            body,
            levels + len(values),
        )


def _statistics(chunk: bytes, at: int, source: Storage, target: Storage) -> bytes:
    """The ``Statistics`` at ``at`` with min and max converted, the deprecated ones dropped."""
    fields = spans(chunk, at)
    values: dict[int, bytes | None] = dict.fromkeys(_DEPRECATED_BOUNDS)
    for field in STATS_VALUES:
        if field in fields:
            value = read_binary(chunk, fields[field][3])[0]
            if len(value) != source.width:
                raise UntranscodableError(f"a bound of {len(value)} bytes")
            values[field] = binary(convert(value, source, target))
    return _rebuilt(chunk, at, values)


@contextmanager
def _refusing(what: str) -> Iterator[None]:
    """A struct that does not parse (``ValueError``, ``KeyError``) as a refusal."""
    try:
        yield
    except UntranscodableError:
        raise
    except (ValueError, KeyError) as exc:
        raise UntranscodableError(f"{what} that does not parse: {exc}") from exc


def transcode_chunk(
    data: bytes,
    chunk: bytes,
    source: Storage,
    target: Storage,
    *,
    levels: int,
    at: int,
    codec: int | None = None,
) -> tuple[bytes, bytes]:
    """A top-level decimal column chunk (its bytes ``data`` and ``ColumnChunk`` struct
    ``chunk``) stored as ``target`` instead of ``source``: its bytes, and its ``ColumnChunk``
    for those bytes written at ``at`` of their file. ``levels``: its maximum definition level
    (0 or 1; it is not repeated). ``codec``: the codec (Parquet's enum) the chunk must have,
    as the output's with ``recompress`` (it is kept); None for any.

    Raises:
        UntranscodableError: anything this module does not transcode (the caller decodes).
    """
    with _refusing("a chunk"):
        unknown = unknown_fields(chunk, "ColumnChunk")
        fields = spans(chunk)
        if unknown or levels not in (0, 1) or fields.keys() & set(_CHUNK_ENCRYPTION):
            raise UntranscodableError(
                f"a chunk of levels {levels}, fields {unknown or sorted(fields)}"
            )
        meta_at = fields[CHUNK_META][3]
        meta = spans(chunk, meta_at)
        kept = integer_field(chunk, meta, META_CODEC)
        if (
            integer_field(chunk, meta, _META_TYPE) != source.physical
            or kept not in _CODECS
            or codec not in (None, kept)
        ):
            raise UntranscodableError(f"a chunk of another type, or of codec {kept}")
        pages, pos = _Pages(source, target, _CODECS[kept], levels), 0
        while pos < len(data):
            pos = pages.add(data, pos)
        if pages.first_data is None or (META_DICTIONARY_PAGE in meta) != (
            pages.dictionary is not None
        ):
            raise UntranscodableError("a chunk without data pages, or a dictionary page unsaid")
        edits: dict[int, bytes | None] = {
            _META_TYPE: integer(target.physical),
            META_UNCOMPRESSED_SIZE: integer(pages.uncompressed),
            META_COMPRESSED_SIZE: integer(pages.size),
            META_DATA_PAGE: integer(at + pages.first_data),
            _META_SIZE_STATISTICS: None,
            **dict.fromkeys(META_BLOOM_FILTER),
        }
        if pages.dictionary is not None:
            edits[META_DICTIONARY_PAGE] = integer(at + pages.dictionary)
        if META_STATISTICS in meta:
            edits[META_STATISTICS] = _statistics(chunk, meta[META_STATISTICS][3], source, target)
        offset = integer_field(chunk, fields, _CHUNK_FILE_OFFSET)
        chunk_edits: dict[int, bytes | None] = {
            CHUNK_META: _rebuilt(chunk, meta_at, edits),
            **dict.fromkeys(_CHUNK_INDEXES),
        }
        if offset:
            chunk_edits[_CHUNK_FILE_OFFSET] = integer(at)
        return b"".join(pages.out), _rebuilt(chunk, 0, chunk_edits)


@dataclass(frozen=True, slots=True)
class Column:
    """A column to transcode: its index in the row group, its storage and the target's, and
    its maximum definition level (0 or 1)."""

    index: int
    source: Storage
    target: Storage
    levels: int


def transcode_row_group(
    group: bytes,
    columns: Sequence[Column],
    read: Callable[[int, int], bytes],
    codec: int | None = None,
) -> tuple[bytes, bytes]:
    """The chunks of ``columns`` of the ``RowGroup`` struct ``group`` (their bytes ``[start,
    stop)`` of its file from ``read``) transcoded, as they lie in a file of their own after its
    magic: their bytes one after another, and that file's ``RowGroup`` entry. ``codec``: as
    :func:`transcode_chunk`'s.

    Raises:
        UntranscodableError: a chunk this module does not transcode.
    """
    with _refusing("a row group"):
        chunks = struct_list(group, spans(group)[GROUP_COLUMNS][3])[0]
        found = chunk_spans(group)
        rows = integer_field(group, spans(group), GROUP_NUM_ROWS)
    body: list[bytes] = []
    structs: list[bytes] = []
    at = total = len(MAGIC)
    for column in columns:
        data, chunk = transcode_chunk(
            read(*found[column.index]),
            chunks[column.index],
            column.source,
            column.target,
            levels=column.levels,
            at=at,
            codec=codec,
        )
        body.append(data)
        structs.append(chunk)
        at += len(data)
        meta = spans(chunk, spans(chunk)[CHUNK_META][3])
        total += integer_field(chunk, meta, META_UNCOMPRESSED_SIZE) or 0
    entry = write_struct(
        (
            (GROUP_COLUMNS, LIST, list_header(STRUCT, len(structs)) + b"".join(structs)),
            (GROUP_TOTAL_SIZE, I64, integer(total - len(MAGIC))),
            (GROUP_NUM_ROWS, I64, integer(rows or 0)),
            (GROUP_FILE_OFFSET, I64, integer(len(MAGIC))),
            (GROUP_COMPRESSED_SIZE, I64, integer(at - len(MAGIC))),
        )
    )
    return b"".join(body), entry
