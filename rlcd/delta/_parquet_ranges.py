"""Which bytes of a checkpoint or sidecar Parquet file a projected read needs: its footer, then
per row group the chunks of the projected columns. Pure: bytes and a footer in, ranges out.

The loader (:mod:`rlcd.delta.load`) fetches these ranges instead of the whole file, so a load
holds one row group's projected chunks at a time, not the file (411 MiB at a million files).
A chunk's range is what pyarrow's reader reads of it (Arrow's ``ComputeColumnChunkRange``):
from the dictionary page when it comes first, else the first data page,
``total_compressed_size`` bytes, then the slack Arrow reads after the chunks of old parquet-mr
files (PARQUET-816). rlcd/parquet and the compaction engine hold the same rules for data files
(``footer.py``, ``compaction/_projection.py``); the layering keeps the delta layer from them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ("TAIL_GUESS", "footer_length", "parse_footer", "group_ranges")
__pure__ = True

TAIL_GUESS: Final = 256 * 1024
"""Bytes of a file's tail fetched first: the footer of the bench's 1M-file checkpoint is 0.3 MiB
(a second GET then), of its 100k one 28 KiB."""
_MAGIC: Final = b"PAR1"
_MERGE_GAP: Final = 1024 * 1024
"""Ranges closer than this are fetched as one: a GET costs more than a MiB it need not read."""
_SLACK: Final = 100
"""Bytes Arrow reads past a chunk of files by parquet-mr before 1.2.9 (``kMaxDictHeaderSize``)."""


def footer_length(tail: bytes | bytearray, size: int) -> int:
    """How many bytes at the end of a ``size``-byte Parquet file hold its footer (metadata,
    its length, the magic), from at least its last 8 bytes.

    Raises:
        ValueError: the tail is not a Parquet footer's.
    """
    if len(tail) < 8 or tail[-4:] != _MAGIC:
        raise ValueError("the file does not end in the Parquet magic PAR1")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 + len(_MAGIC) > size:
        raise ValueError(f"the footer claims {length} bytes of a {size}-byte file")
    return length + 8


def parse_footer(footer: bytes | bytearray) -> pq.FileMetaData:
    """The footer (the span :func:`footer_length` measures) parsed alone, behind a leading
    magic, from Arrow's own copy of it (never a buffer over Python bytes: see pitfalls)."""
    buffer = pa.allocate_buffer(len(_MAGIC) + len(footer))
    writer = pa.FixedSizeBufferWriter(buffer)
    writer.write(_MAGIC)
    writer.write(footer)
    return pq.read_metadata(pa.BufferReader(buffer))


def group_ranges(
    footer: pq.FileMetaData, group: int, columns: Collection[str], size: int
) -> list[tuple[int, int]]:
    """The byte ranges ``[start, stop)`` of a ``size``-byte file holding row group ``group``'s
    chunks of ``columns`` (dotted names, as pyarrow's ``columns=`` takes them: a name reads
    every leaf under it), sorted, those less than a MiB apart merged.

    Raises:
        ValueError: a chunk lies outside the file.
    """
    row_group = footer.row_group(group)
    spans = []
    for j in range(footer.num_columns):
        path = footer.schema.column(j).path
        if not any(path == name or path.startswith(name + ".") for name in columns):
            continue
        chunk = row_group.column(j)
        start = chunk.data_page_offset
        if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
            start = chunk.dictionary_page_offset
        stop = start + chunk.total_compressed_size
        if not 0 <= start < stop <= size:
            raise ValueError(
                f"column {path} of row group {group} lies at {start}:{stop},"
                f" outside the file's {size} bytes"
            )
        spans.append((start, min(size, stop + _SLACK)))
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if merged and start - merged[-1][1] < _MERGE_GAP:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged
