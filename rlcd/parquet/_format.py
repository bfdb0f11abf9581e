"""The Parquet footer's thrift structs as data, and what moves when a row group moves (sans-IO).

A row group copied into another file is only correct if rlcd understands every field its
footer carries: a field added to parquet.thrift after this table was written could hold an
offset rlcd would not move, or change how the pages read. So :data:`STRUCTS` writes down, from
parquet.thrift (format 2.12), every field id of ``FileMetaData`` and what it contains, with
its compact type; :func:`unknown_fields` walks a struct against it and names each field it
does not know (or knows with another type). :func:`row_group_span` reads where a row group's
column chunks lie, refusing layouts it cannot move safely, and :func:`row_group_edits` is the
one table of the offsets that move with a row group, shared by the splicer and the copy path.
Pure: bytes in, bytes out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from rlcd.parquet._thrift import (
    BINARY,
    BYTE,
    DOUBLE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    STOP,
    STRUCT,
    TRUE,
    Drop,
    Edits,
    FieldSpan,
    collection,
    read_integer,
    skip,
    struct_fields,
    struct_list,
)

__all__ = (
    "Field",
    "STRUCTS",
    "unknown_fields",
    "spans",
    "integer_field",
    "chunk_spans",
    "row_group_span",
    "chunk_edits",
    "row_group_edits",
)
__pure__ = True

BOOL: Final = TRUE
"""A boolean field's type as :data:`STRUCTS` names it: its header says TRUE or FALSE."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a thrift struct: its name, compact type, and for a struct (or a list of
    structs) the struct's name, for a list of scalars its element type."""

    name: str
    kind: int
    of: str | int | None = None


def _list(name: str, of: str | int) -> Field:
    return Field(name, LIST, of)


def _struct(name: str, of: str) -> Field:
    return Field(name, STRUCT, of)


_EMPTY: Final[Mapping[int, Field]] = {}

STRUCTS: Final[Mapping[str, Mapping[int, Field]]] = {
    "FileMetaData": {
        1: Field("version", I32),
        2: _list("schema", "SchemaElement"),
        3: Field("num_rows", I64),
        4: _list("row_groups", "RowGroup"),
        5: _list("key_value_metadata", "KeyValue"),
        6: Field("created_by", BINARY),
        7: _list("column_orders", "ColumnOrder"),
        8: _struct("encryption_algorithm", "EncryptionAlgorithm"),
        9: Field("footer_signing_key_metadata", BINARY),
    },
    "SchemaElement": {
        1: Field("type", I32),
        2: Field("type_length", I32),
        3: Field("repetition_type", I32),
        4: Field("name", BINARY),
        5: Field("num_children", I32),
        6: Field("converted_type", I32),
        7: Field("scale", I32),
        8: Field("precision", I32),
        9: Field("field_id", I32),
        10: _struct("logicalType", "LogicalType"),
    },
    "LogicalType": {  # a union: one of these
        1: _struct("STRING", "Empty"),
        2: _struct("MAP", "Empty"),
        3: _struct("LIST", "Empty"),
        4: _struct("ENUM", "Empty"),
        5: _struct("DECIMAL", "DecimalType"),
        6: _struct("DATE", "Empty"),
        7: _struct("TIME", "TimeType"),
        8: _struct("TIMESTAMP", "TimeType"),
        10: _struct("INTEGER", "IntType"),
        11: _struct("UNKNOWN", "Empty"),
        12: _struct("JSON", "Empty"),
        13: _struct("BSON", "Empty"),
        14: _struct("UUID", "Empty"),
        15: _struct("FLOAT16", "Empty"),
        16: _struct("VARIANT", "VariantType"),
        17: _struct("GEOMETRY", "GeometryType"),
        18: _struct("GEOGRAPHY", "GeographyType"),
    },
    "Empty": _EMPTY,
    "DecimalType": {1: Field("scale", I32), 2: Field("precision", I32)},
    "TimeType": {1: Field("isAdjustedToUTC", BOOL), 2: _struct("unit", "TimeUnit")},
    "TimeUnit": {
        1: _struct("MILLIS", "Empty"),
        2: _struct("MICROS", "Empty"),
        3: _struct("NANOS", "Empty"),
    },
    "IntType": {1: Field("bitWidth", BYTE), 2: Field("isSigned", BOOL)},
    "VariantType": {1: Field("specification_version", BYTE)},
    "GeometryType": {1: Field("crs", BINARY)},
    "GeographyType": {1: Field("crs", BINARY), 2: Field("algorithm", I32)},
    "KeyValue": {1: Field("key", BINARY), 2: Field("value", BINARY)},
    "ColumnOrder": {1: _struct("TYPE_ORDER", "Empty")},
    "EncryptionAlgorithm": {
        1: _struct("AES_GCM_V1", "AesGcm"),
        2: _struct("AES_GCM_CTR_V1", "AesGcm"),
    },
    "AesGcm": {
        1: Field("aad_prefix", BINARY),
        2: Field("aad_file_unique", BINARY),
        3: Field("supply_aad_prefix", BOOL),
    },
    "RowGroup": {
        1: _list("columns", "ColumnChunk"),
        2: Field("total_byte_size", I64),
        3: Field("num_rows", I64),
        4: _list("sorting_columns", "SortingColumn"),
        5: Field("file_offset", I64),
        6: Field("total_compressed_size", I64),
        7: Field("ordinal", I16),
    },
    "SortingColumn": {
        1: Field("column_idx", I32),
        2: Field("descending", BOOL),
        3: Field("nulls_first", BOOL),
    },
    "ColumnChunk": {
        1: Field("file_path", BINARY),
        2: Field("file_offset", I64),
        3: _struct("meta_data", "ColumnMetaData"),
        4: Field("offset_index_offset", I64),
        5: Field("offset_index_length", I32),
        6: Field("column_index_offset", I64),
        7: Field("column_index_length", I32),
        8: _struct("crypto_metadata", "ColumnCryptoMetaData"),
        9: Field("encrypted_column_metadata", BINARY),
    },
    "ColumnCryptoMetaData": {
        1: _struct("ENCRYPTION_WITH_FOOTER_KEY", "Empty"),
        2: _struct("ENCRYPTION_WITH_COLUMN_KEY", "ColumnKey"),
    },
    "ColumnKey": {1: _list("path_in_schema", BINARY), 2: Field("key_metadata", BINARY)},
    "ColumnMetaData": {
        1: Field("type", I32),
        2: _list("encodings", I32),
        3: _list("path_in_schema", BINARY),
        4: Field("codec", I32),
        5: Field("num_values", I64),
        6: Field("total_uncompressed_size", I64),
        7: Field("total_compressed_size", I64),
        8: _list("key_value_metadata", "KeyValue"),
        9: Field("data_page_offset", I64),
        10: Field("index_page_offset", I64),
        11: Field("dictionary_page_offset", I64),
        12: _struct("statistics", "Statistics"),
        13: _list("encoding_stats", "PageEncodingStats"),
        14: Field("bloom_filter_offset", I64),
        15: Field("bloom_filter_length", I32),
        16: _struct("size_statistics", "SizeStatistics"),
        17: _struct("geospatial_statistics", "GeospatialStatistics"),
    },
    "Statistics": {
        1: Field("max", BINARY),
        2: Field("min", BINARY),
        3: Field("null_count", I64),
        4: Field("distinct_count", I64),
        5: Field("max_value", BINARY),
        6: Field("min_value", BINARY),
        7: Field("is_max_value_exact", BOOL),
        8: Field("is_min_value_exact", BOOL),
    },
    "PageEncodingStats": {
        1: Field("page_type", I32),
        2: Field("encoding", I32),
        3: Field("count", I32),
    },
    "SizeStatistics": {
        1: Field("unencoded_byte_array_data_bytes", I64),
        2: _list("repetition_level_histogram", I64),
        3: _list("definition_level_histogram", I64),
    },
    "GeospatialStatistics": {1: _struct("bbox", "BoundingBox"), 2: _list("geospatial_types", I32)},
    "PageHeader": {  # not the footer's: the header before each page of a column chunk
        1: Field("type", I32),
        2: Field("uncompressed_page_size", I32),
        3: Field("compressed_page_size", I32),
        4: Field("crc", I32),
        5: _struct("data_page_header", "DataPageHeader"),
        6: _struct("index_page_header", "Empty"),
        7: _struct("dictionary_page_header", "DictionaryPageHeader"),
        8: _struct("data_page_header_v2", "DataPageHeaderV2"),
    },
    "DataPageHeader": {
        1: Field("num_values", I32),
        2: Field("encoding", I32),
        3: Field("definition_level_encoding", I32),
        4: Field("repetition_level_encoding", I32),
        5: _struct("statistics", "Statistics"),
    },
    "DictionaryPageHeader": {
        1: Field("num_values", I32),
        2: Field("encoding", I32),
        3: Field("is_sorted", BOOL),
    },
    "DataPageHeaderV2": {
        1: Field("num_values", I32),
        2: Field("num_nulls", I32),
        3: Field("num_rows", I32),
        4: Field("encoding", I32),
        5: Field("definition_levels_byte_length", I32),
        6: Field("repetition_levels_byte_length", I32),
        7: Field("is_compressed", BOOL),
        8: _struct("statistics", "Statistics"),
    },
    "BoundingBox": {
        i + 1: Field(name, DOUBLE)
        for i, name in enumerate(("xmin", "xmax", "ymin", "ymax", "zmin", "zmax", "mmin", "mmax"))
    },
}
"""parquet.thrift's footer structs (and page headers) by name: field id -> :class:`Field`."""

# The field ids this package reads or moves (see STRUCTS)
FILE_NUM_ROWS: Final = 3
FILE_ROW_GROUPS: Final = 4
FILE_COLUMN_ORDERS: Final = 7
FILE_ENCRYPTION: Final = (8, 9)
SCHEMA_REPETITION: Final = 3
SCHEMA_NAME: Final = 4
GROUP_COLUMNS: Final = 1
GROUP_TOTAL_SIZE: Final = 2
GROUP_NUM_ROWS: Final = 3
GROUP_FILE_OFFSET: Final = 5
GROUP_COMPRESSED_SIZE: Final = 6
GROUP_ORDINAL: Final = 7
CHUNK_FILE_PATH: Final = 1
CHUNK_FILE_OFFSET: Final = 2  # deprecated; 0 (unset) is what Arrow writes, and stays 0
CHUNK_META: Final = 3
CHUNK_INDEXES: Final = (4, 5, 6, 7)  # offset index offset and length, column index's
CHUNK_ENCRYPTION: Final = (8, 9)
META_CODEC: Final = 4
META_UNCOMPRESSED_SIZE: Final = 6
META_COMPRESSED_SIZE: Final = 7
META_DATA_PAGE: Final = 9
META_INDEX_PAGE: Final = 10
META_DICTIONARY_PAGE: Final = 11
META_BLOOM_FILTER: Final = (14, 15)  # offset, length
META_STATISTICS: Final = 12
STATS_VALUES: Final = (5, 6)  # max_value, min_value (1 and 2, max and min, are deprecated)
STATS_EXACT: Final = (7, 8)  # is_max_value_exact, is_min_value_exact


def _kind_fits(kind: int, expected: int) -> bool:
    return kind == expected or (expected == BOOL and kind == FALSE)


def unknown_fields(
    data: bytes, struct: str, pos: int = 0, *, unwalked: frozenset[int] = frozenset()
) -> list[str]:
    """The fields of the ``struct`` at ``pos`` (and of what it contains) that :data:`STRUCTS`
    does not know, or knows with another type, each as a dotted path; empty when all are
    known. The values of the struct's fields in ``unwalked`` are skipped, not checked.

    Raises:
        ValueError: the bytes are not a compact struct.
    """
    found: list[str] = []
    try:
        _walk(data, pos, struct, struct, found, unwalked)
    except IndexError:
        raise ValueError(f"a struct runs past the end of its {len(data)} bytes") from None
    return found


def _walk(
    data: bytes, pos: int, struct: str, path: str, found: list[str], unwalked: frozenset[int]
) -> int:
    """Check the ``struct`` at ``pos`` in one pass, adding what is unknown to ``found``;
    the position after it."""
    known = STRUCTS[struct]
    field_id = 0
    while True:
        header = data[pos]
        pos += 1
        if header == STOP:
            return pos
        kind, delta = header & 0x0F, header >> 4
        if delta:
            field_id += delta
        else:
            field_id, pos = read_integer(data, pos)
        field = known.get(field_id)
        if field is None or not _kind_fits(kind, field.kind):
            found.append(f"{path}.{field_id}")
        elif field_id in unwalked:
            pass
        elif kind == STRUCT and isinstance(field.of, str):
            pos = _walk(data, pos, field.of, f"{path}.{field.name}", found, frozenset())
            continue
        elif kind == LIST:
            element, size, at = collection(data, pos)
            if isinstance(field.of, str) and element == STRUCT:
                for _ in range(size):
                    at = _walk(data, at, field.of, f"{path}.{field.name}[]", found, frozenset())
                pos = at
                continue
            if element != field.of:
                found.append(f"{path}.{field.name}[]")
        pos = skip(data, pos, kind)


def spans(data: bytes, pos: int = 0) -> dict[int, FieldSpan]:
    """The fields of the struct at ``pos`` by id.

    Raises:
        ValueError: the bytes are not a compact struct, or a field id appears twice.
    """
    found: dict[int, FieldSpan] = {}
    for span in struct_fields(data, pos):
        if span[0] in found:
            raise ValueError(f"field {span[0]} appears twice in one struct")
        found[span[0]] = span
    return found


def integer_field(data: bytes, fields: Mapping[int, FieldSpan], field_id: int) -> int | None:
    """The integer value of ``field_id`` among ``fields`` (of ``data``), None when absent."""
    span = fields.get(field_id)
    if span is None:
        return None
    if span[1] not in (I16, I32, I64):
        raise ValueError(f"field {field_id} is not an integer")
    return read_integer(data, span[3])[0]


def chunk_spans(group: bytes) -> list[tuple[int, int]]:
    """Where each column chunk of the ``RowGroup`` struct ``group`` lies in its file, in
    column order: its first byte and the byte after it. The chunks must be in the file itself,
    one after another with nothing between, each starting at its dictionary page (before its
    first data page) or else at its first data page, and the row group's own offset and
    compressed size, where present, must say the same: anything else is a layout this package
    does not move.

    Raises:
        ValueError: the layout is not that, or the struct does not parse.
    """
    fields = spans(group)
    if GROUP_COLUMNS not in fields:
        raise ValueError("a row group has no column chunks")
    chunks = struct_list(group, fields[GROUP_COLUMNS][3])[0]
    if not chunks:
        raise ValueError("a row group has no column chunks")
    found: list[tuple[int, int]] = []
    for chunk in chunks:
        chunk_fields = spans(chunk)
        if CHUNK_FILE_PATH in chunk_fields:
            raise ValueError("a column chunk lies in another file")
        if CHUNK_META not in chunk_fields:
            raise ValueError("a column chunk has no plaintext metadata")
        meta = spans(chunk, chunk_fields[CHUNK_META][3])
        data_page = integer_field(chunk, meta, META_DATA_PAGE)
        dictionary = integer_field(chunk, meta, META_DICTIONARY_PAGE)
        size = integer_field(chunk, meta, META_COMPRESSED_SIZE)
        if data_page is None or size is None or size <= 0:
            raise ValueError("a column chunk has no data page offset or size")
        if META_INDEX_PAGE in meta:
            raise ValueError("a column chunk has an index page")
        if dictionary is not None and not 0 < dictionary < data_page:
            raise ValueError(f"a dictionary page at {dictionary}, data pages at {data_page}")
        start = data_page if dictionary is None else dictionary
        if found and start != found[-1][1]:
            raise ValueError(
                f"a column chunk starts at {start}, its predecessor ends at {found[-1][1]}"
            )
        found.append((start, start + size))
    first, stop = found[0][0], found[-1][1]
    offset = integer_field(group, fields, GROUP_FILE_OFFSET)
    compressed = integer_field(group, fields, GROUP_COMPRESSED_SIZE)
    if offset not in (None, first) or compressed not in (None, stop - first):
        raise ValueError(f"a row group says {offset}+{compressed}, its chunks {first}:{stop}")
    return found


def row_group_span(group: bytes) -> tuple[int, int]:
    """Where the column chunks of the ``RowGroup`` struct ``group`` lie in their file, all
    together: its first byte and the byte after it (see :func:`chunk_spans`).

    Raises:
        ValueError: the layout is not one this package moves, or the struct does not parse.
    """
    found = chunk_spans(group)
    return found[0][0], found[-1][1]


def chunk_edits(delta: int, *, drop_indexes: bool) -> Edits:
    """The edits of a ``ColumnChunk`` struct whose bytes move ``delta`` bytes: every offset
    into its file moves. With ``drop_indexes`` the page index and bloom filter references go
    (their bytes, outside the chunk's, are not carried); else they move with it."""

    def moved(offset: int) -> int:
        return offset + delta

    meta: dict[int, Callable[[int], int] | Drop] = dict.fromkeys(
        (META_DATA_PAGE, META_INDEX_PAGE, META_DICTIONARY_PAGE), moved
    )
    chunk: dict[int, Callable[[int], int] | Edits | Drop] = {
        CHUNK_FILE_OFFSET: lambda offset: offset and moved(offset),
        CHUNK_META: meta,
    }
    if drop_indexes:
        meta.update(dict.fromkeys(META_BLOOM_FILTER, Drop.FIELD))
        chunk.update(dict.fromkeys(CHUNK_INDEXES, Drop.FIELD))
    else:
        meta[META_BLOOM_FILTER[0]] = moved
        chunk.update(dict.fromkeys(CHUNK_INDEXES[::2], moved))
    return chunk


def row_group_edits(delta: int, ordinal: int, *, drop_indexes: bool) -> Edits:
    """The edits of a ``RowGroup`` struct whose bytes move ``delta`` bytes and which becomes
    row group ``ordinal``: every offset into its file moves (:func:`chunk_edits`), the ordinal
    is renumbered."""
    return {
        GROUP_COLUMNS: chunk_edits(delta, drop_indexes=drop_indexes),
        GROUP_FILE_OFFSET: lambda offset: offset + delta,
        GROUP_ORDINAL: lambda _: ordinal,
    }
