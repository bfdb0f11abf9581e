"""The patches file of the copy path: the re-encoded columns of row groups copied with patches.

A row group whose decimal columns are stored otherwise than the output stores them is still
copied, but for those columns (``copy_plan.Copy.patched``): their chunks are transcoded page by
page (:mod:`rlcd.parquet.transcode`), or where that module does not know them, their values,
decoded from the source, are written with the output's writer settings into a one-row-group
Parquet file of their own (in memory, one at a time). Either way their column chunks are
appended to one local file, the *patches* file; :func:`rlcd.parquet.assemble.assemble` splices
them in from there.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.parquet.assemble import Patch, patch_footer
from rlcd.parquet.copy_plan import Copy
from rlcd.parquet.footer import MAGIC, footer_span, parse_footer
from rlcd.parquet.transcode import Column, Storage, UntranscodableError, transcode_row_group

__all__ = ("PatchFile",)

WriterFactory = Callable[[pa.NativeFile, pa.Schema], pq.ParquetWriter]
"""Opens the output's writer, with its settings, for some of its fields."""
Reader = Callable[[int, int], bytes]
"""A source's bytes ``[start, stop)``."""


class PatchFile:
    """The patches file at ``path`` (created empty by the caller), written by ``writer``'s
    writers; :attr:`patches` in the order they were added. ``codec`` (Parquet's enum): the
    codec a transcoded chunk must have (it keeps its own), None for any."""

    def __init__(self, path: str, writer: WriterFactory, codec: int | None = None) -> None:
        self._path, self._writer, self._codec = path, writer, codec
        self._size = 0
        self._templates: dict[pa.Schema, bytes] = {}
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
        return self._append(body, data.slice(data.size - span).to_pybytes())

    def transcode(
        self, step: Copy, source: pq.ParquetSchema, read: Reader, fields: pa.Schema
    ) -> Patch | None:
        """Add the patched columns of ``step`` transcoded from its source (of ``source``'s
        schema, read by ``read``) into the output's ``fields``; None, adding nothing, where
        :mod:`rlcd.parquet.transcode` does not transcode them all."""
        template = self._template(fields)
        target = parse_footer(template).schema
        columns = []
        try:
            for k, index in enumerate(step.patched):
                column, output = source.column(index), target.column(k)
                if column.max_repetition_level:  # the plan patches no repeated column
                    return None
                stored = Storage.of(column.physical_type, column.length or 0)
                wanted = Storage.of(output.physical_type, output.length or 0)
                columns.append(Column(index, stored, wanted, column.max_definition_level))
            body, group = transcode_row_group(step.group, columns, read, self._codec)
        except UntranscodableError:
            return None
        return self._append(body, patch_footer(template, group))

    def _template(self, fields: pa.Schema) -> bytes:
        """The footer span of the file the writer writes for ``fields`` without a row group."""
        if fields not in self._templates:
            sink = pa.BufferOutputStream()
            self._writer(sink, fields).close()
            data = sink.getvalue().to_pybytes()
            self._templates[fields] = data[len(data) - footer_span(data[-8:], len(data)) :]
        return self._templates[fields]

    def _append(self, body: bytes | pa.Buffer, footer: bytes) -> Patch:
        with open(self._path, "ab") as f:
            f.write(body)
        patch = Patch(footer, self._size)
        self._size += len(body)
        self.patches.append(patch)
        return patch
