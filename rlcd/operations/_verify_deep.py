"""The deep read of ``rlcd verify --deep``: every byte of a live file read and decoded.

A file of the right size can still hold a flipped byte. The deep read fetches the file (a
local table's file is read in place; a remote one is held in memory up to
:data:`DEEP_IN_MEMORY` bytes, else copied to a local temporary file in ranged GETs, as a
compaction reads its sources) and, in a worker thread, opens it with pyarrow's page checksum
verification: every page whose writer stored a CRC-32 must match it. Each row group is decoded
to its last value, one batch at a time (memory holds a batch of decoded rows, whatever the
file's size), every batch is validated in full (offsets within their buffers, UTF-8 strings),
and the rows each row group decodes must be the ones the footer says, whose total must be the
add's ``numRecords`` when the stats give it.

What it cannot find: a changed byte inside a page without a CRC (pyarrow, Spark and delta-rs
write none by default) that still decompresses and decodes to valid values of the column's
type, e.g. a different integer in an uncompressed page; nor a changed byte of a page header's
statistics, which the CRC (of the page's data) does not cover and decoding does not read. A
codec's own checks (its framing, lengths) catch most changes in compressed pages.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.compaction.source import FetchedSource, ReadOptions, fetch_source
from rlcd.delta.actions import AddFile
from rlcd.parquet.batching import batch_rows, footer_row_bytes
from rlcd.storage.base import ObjectStore

__all__ = ("DEEP_CHECK_CONCURRENCY", "DEEP_IN_MEMORY", "read_in_full")

DEEP_CHECK_CONCURRENCY: Final = 4
"""Live files read in full at once unless the caller says otherwise: each holds up to
:data:`DEEP_IN_MEMORY` bytes and a batch of decoded rows."""

DEEP_IN_MEMORY: Final = 32 * 1024 * 1024
"""A remote file up to this size is read into memory; a larger one into a temporary file."""

_ERRORS = (pa.ArrowException, OSError)  # pyarrow reports damage as either (e.g. a CRC mismatch)


async def read_in_full(
    store: ObjectStore, add: AddFile, options: ReadOptions, *, version: int
) -> str | None:
    """Why ``add``'s data does not read in full, or ``None`` when every page does.

    Args:
        options: the table's read options (only how a remote file is held is taken from them).

    Raises:
        MissingDataFileError: the file is not on storage.
        StorageError: storage refused or kept failing.
    """
    bare = replace(add, deletion_vector=None)  # the DV is checked apart; every row is read here
    fetched = await fetch_source(
        store, bare, replace(options, spill_threshold=DEEP_IN_MEMORY), version=version
    )
    try:
        return await anyio.to_thread.run_sync(_decode_all, fetched)
    finally:
        fetched.close()


def _decode_all(source: FetchedSource) -> str | None:
    """Decode every row group of ``source`` with page checksums verified. In a worker thread."""
    try:
        parquet = pq.ParquetFile(
            source.handle(), page_checksum_verification=True, coerce_int96_timestamp_unit="us"
        )
    except _ERRORS as exc:
        return f"not a readable Parquet file: {exc}"
    with parquet:
        return _decode_groups(parquet, source.add)


def _decode_groups(parquet: pq.ParquetFile, add: AddFile) -> str | None:
    footer = parquet.metadata
    rows = batch_rows(footer_row_bytes(footer))
    for group in range(footer.num_row_groups):
        try:
            decoded = _decode(parquet, group, rows)
        except _ERRORS as exc:
            return f"{_where(parquet, group, rows)} does not decode: {exc}"
        expected = footer.row_group(group).num_rows
        if decoded != expected:
            return f"row group {group} decodes {decoded} rows, its footer says {expected}"
    records = add.num_records
    if records is not None and footer.num_rows != records:
        return f"has {footer.num_rows} rows, its stats say {records}"
    return None


def _decode(parquet: pq.ParquetFile, group: int, rows: int, column: str | None = None) -> int:
    """The rows of row group ``group`` (of ``column`` alone, if given), decoded and validated
    a batch at a time."""
    columns = None if column is None else [column]
    decoded = 0
    for batch in parquet.iter_batches(
        batch_size=rows, row_groups=[group], columns=columns, use_threads=False
    ):
        batch.validate(full=True)
        decoded += batch.num_rows
    return decoded


def _where(parquet: pq.ParquetFile, group: int, rows: int) -> str:
    """``row group N``, with the first column that fails alone when one does (a failure only
    columns together show names none)."""
    for name in parquet.schema_arrow.names:
        try:
            _decode(parquet, group, rows, name)
        except _ERRORS:
            return f"row group {group}, column {name}"
    return f"row group {group}"
