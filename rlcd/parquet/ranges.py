"""Which bytes of a file a projected read needs (pure: a footer in, byte ranges out).

A reader that wants some columns of some row groups fetches only these ranges (and the footer)
into a sparse local file, which pyarrow then reads as the whole file: the holes are never read.
The compaction engine does so for the columns a copied row group's footer cannot give stats of
(:func:`rlcd.compaction.source.fetch_projected`), a snapshot load for a checkpoint's projected
columns (:mod:`rlcd.delta.load`). A range is what pyarrow's
reader reads of a column chunk (Arrow's ``ComputeColumnChunkRange``): from the dictionary page
when it comes first, else the first data page, ``total_compressed_size`` bytes, then the slack
Arrow reads after the chunks of old parquet-mr files (PARQUET-816), taken for every file. The
columns are chosen as pyarrow's ``columns=`` chooses them (a name and every leaf under it),
reading a leaf more where a dotted name is ambiguous, never one less.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

import pyarrow.parquet as pq

__all__ = ("MERGE_GAP", "chunk_ranges")
__pure__ = True

MERGE_GAP: Final = 1024 * 1024
"""Ranges closer than this are fetched as one: a GET costs more than a MiB it need not read."""
_SLACK: Final = 100
"""Bytes Arrow reads past a chunk of files by parquet-mr before 1.2.9 (``kMaxDictHeaderSize``)."""


def _leaves(footer: pq.FileMetaData, columns: Collection[str]) -> list[int]:
    """The leaf columns that ``columns`` (top-level names, as ``read_row_group`` takes them)
    read: each name's dotted path and those below it."""
    found = []
    for j in range(footer.num_columns):
        path = footer.schema.column(j).path
        if any(path == name or path.startswith(name + ".") for name in columns):
            found.append(j)
    return found


def chunk_ranges(
    footer: pq.FileMetaData, row_groups: Iterable[int], columns: Collection[str], size: int
) -> list[tuple[int, int]]:
    """The byte ranges ``[start, stop)`` of a ``size``-byte file holding the chunks of
    ``columns`` in ``row_groups``, sorted, those less than :data:`MERGE_GAP` apart merged.

    Raises:
        ValueError: a chunk lies outside the file.
    """
    leaves = _leaves(footer, columns)
    spans = []
    for r in row_groups:
        group = footer.row_group(r)
        for j in leaves:
            chunk = group.column(j)
            start = chunk.data_page_offset
            dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            if dictionary is not None and 0 < dictionary < start:
                start = dictionary
            stop = start + chunk.total_compressed_size
            if not 0 <= start < stop <= size:
                raise ValueError(
                    f"column {chunk.path_in_schema} of row group {r} lies at {start}:{stop},"
                    f" outside the file's {size} bytes"
                )
            spans.append((start, min(size, stop + _SLACK)))
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        if merged and start - merged[-1][1] < MERGE_GAP:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged
