"""The patches file of the copy path: the re-encoded columns of row groups copied with patches.

A row group whose decimal columns are stored otherwise than the output stores them is still
copied, but for those columns (``copy_plan.Copy.patched``): their values, decoded from the
source, are written with the output's writer settings into a one-row-group Parquet file of
their own (in memory, one at a time), whose column chunks are appended to one local file, the
*patches* file; :func:`rlcd.parquet.assemble.assemble` splices them in from there.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.parquet.assemble import Patch
from rlcd.parquet.footer import MAGIC, footer_span

__all__ = ("PatchFile",)

WriterFactory = Callable[[pa.NativeFile, pa.Schema], pq.ParquetWriter]
"""Opens the output's writer, with its settings, for some of its fields."""


class PatchFile:
    """The patches file at ``path`` (created empty by the caller), written by ``writer``'s
    writers; :attr:`patches` in the order they were added."""

    def __init__(self, path: str, writer: WriterFactory) -> None:
        self._path, self._writer = path, writer
        self._size = 0
        self.patches: list[Patch] = []

    def add(self, table: pa.Table) -> Patch:
        """Write ``table`` (the patched columns of one row group, as the output's fields) as
        one row group; its chunks are appended to the file.

        Raises:
            ValueError: the table has no rows (no writer writes an empty row group).
        """
        if not table.num_rows:
            raise ValueError("a patch of no rows")
        sink = pa.BufferOutputStream()
        with self._writer(sink, table.schema) as writer:
            writer.write_table(table, row_group_size=table.num_rows)
        data = sink.getvalue()
        span = footer_span(data.slice(data.size - 8).to_pybytes(), data.size)
        body = data.slice(len(MAGIC), data.size - span - len(MAGIC))
        with open(self._path, "ab") as f:
            f.write(body)
        patch = Patch(data.slice(data.size - span).to_pybytes(), self._size)
        self._size += body.size
        self.patches.append(patch)
        return patch
