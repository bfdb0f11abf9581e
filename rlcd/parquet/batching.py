"""How many rows a source is decoded at a time: few enough that no buffer of a batch grows
large.

pyarrow's Parquet reader builds each column of a batch in buffers that grow as it appends
values. Past a few MiB, a buffer is an allocation of its own that jemalloc maps for it and
returns to the system once freed, so a decoded batch of wide strings is faulted in, page by
page, every time, and copied as it grows: batches whose largest buffer stays small cost far
fewer page faults, less system CPU and a lower peak (docs/performance.md). Narrow columns keep
long batches: every batch costs the same Python work whatever its rows.

A source's width is estimated before it is read, from its footer (the largest column chunk of
its first row group, uncompressed, per row), and observed on its first batch (the largest
buffer, per row): a dictionary-encoded column is far smaller in the file than decoded, so the
widths observed on a bin's earlier sources carry to its later ones. Pure functions.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ("MAX_BATCH_ROWS", "BATCH_BUFFER_BYTES", "batch_rows", "footer_row_bytes", "row_bytes")
__pure__ = True

MAX_BATCH_ROWS: Final = 65_536
BATCH_BUFFER_BYTES: Final = 2 * 1024 * 1024
_MIN_BATCH_ROWS: Final = 1024


def batch_rows(
    width: float, *, max_rows: int = MAX_BATCH_ROWS, buffer_bytes: int = BATCH_BUFFER_BYTES
) -> int:
    """The rows of a batch whose largest buffer holds ``width`` bytes a row: at most
    ``max_rows``, at least 1,024 (a multiple of it when the width limits it)."""
    if width * max_rows <= buffer_bytes:
        return max_rows
    rows = int(buffer_bytes / width) // _MIN_BATCH_ROWS * _MIN_BATCH_ROWS
    return min(max_rows, max(_MIN_BATCH_ROWS, rows))


def footer_row_bytes(footer: pq.FileMetaData) -> float:
    """The largest column chunk of the first row group, uncompressed, per row (0 for a file
    without rows)."""
    if footer.num_row_groups == 0:
        return 0.0
    group = footer.row_group(0)
    if group.num_rows == 0:
        return 0.0
    largest: int = max(
        (group.column(i).total_uncompressed_size for i in range(group.num_columns)), default=0
    )
    rows: int = group.num_rows
    return largest / rows


def row_bytes(batch: pa.RecordBatch) -> float:
    """The largest buffer of the batch (of any column, at any depth), per row (0 for an empty
    batch)."""
    if batch.num_rows == 0:
        return 0.0
    largest: int = max(
        (b.size for column in batch.columns for b in column.buffers() if b is not None),
        default=0,
    )
    rows: int = batch.num_rows
    return largest / rows
