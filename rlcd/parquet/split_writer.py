"""A Parquet writer that encodes each row group in two threads, for a bin alone on the machine.

pyarrow's writer encodes a row group's columns one after another in the calling thread, so a
lone (split) bin is bound by its encode thread while the other core has little to do. This
writer encodes a row group's first top-level fields in the calling thread and the others in
a helper thread at the same time, each part as a file of its own in memory, and joins the
parts (:mod:`rlcd.parquet._splice`) into the file one writer writes, byte for byte. Both
parts are column selections of the one row group the caller holds, so a bin holds no more
rows than with one writer. Where the parts split moves by one field after each row group,
towards the part that took less CPU time; the file's bytes do not depend on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from itertools import accumulate

import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.parquet._splice import SplicedFile
from rlcd.parquet.footer import MAGIC, parse_footer

__all__ = ("SplitWriter",)

OpenWriter = Callable[[pa.NativeFile, pa.Schema], pq.ParquetWriter]


class SplitWriter:
    """Writes row groups to ``sink``, each encoded in two parts at once; ``open_writer`` makes
    the pyarrow writer of one part's file for a schema (the same settings every time), and
    ``chunk_bytes`` bounds each write to ``sink``. Not thread-safe: one caller thread, plus
    the helper it starts."""

    def __init__(self, sink: pa.NativeFile, open_writer: OpenWriter, *, chunk_bytes: int) -> None:
        self._sink = sink
        self._open = open_writer
        self._chunk = chunk_bytes
        self._file = SplicedFile()
        self._helper = ThreadPoolExecutor(1, thread_name_prefix="rlcd-encode")
        self._split = 0  # top-level fields encoded by the caller; 0 before the first row group
        self._started = False

    def write_table(self, table: pa.Table) -> None:
        """Encode ``table`` as the next row group and write it. The first comes whole: its
        footer is the file's template, and its fields' sizes place the first split."""
        if self._split == 0 or table.num_columns < 2:
            self._write(self._file.add(self._encode(table)[0]))
            if self._split == 0:
                self._split = _halfway(table)
            return
        names = table.column_names
        theirs = self._helper.submit(self._encode, table.select(names[self._split :]))
        try:
            mine, my_time = self._encode(table.select(names[: self._split]))
        except BaseException:
            wait([theirs])  # nothing runs on once this call is over
            raise
        other, their_time = theirs.result()
        for body in self._file.add_columns([mine, other]):
            self._write(body)
        if my_time > their_time and self._split > 1:
            self._split -= 1
        elif their_time > my_time and self._split < len(names) - 1:
            self._split += 1

    def close(self) -> pq.FileMetaData:
        """Write the footer; the file's metadata, parsed from it.

        Raises:
            ValueError: no row group was written.
        """
        try:
            footer = self._file.footer()
            self._sink.write(footer)
        finally:
            self._helper.shutdown()
        return parse_footer(footer)

    def discard(self) -> None:
        """After a failure: stop the helper (it is idle: every call waits for its part)."""
        self._helper.shutdown()

    def _encode(self, table: pa.Table) -> tuple[pa.Buffer, float]:
        """``table`` as a one-row-group file, and the thread's CPU seconds it took."""
        began = time.thread_time()
        stream = pa.BufferOutputStream()
        writer = self._open(stream, table.schema)
        try:
            writer.write_table(table, row_group_size=table.num_rows)
        finally:
            writer.close()
        return stream.getvalue(), time.thread_time() - began

    def _write(self, body: pa.Buffer) -> None:
        if not self._started:
            self._sink.write(MAGIC)
            self._started = True
        for at in range(0, body.size, self._chunk):
            self._sink.write(body.slice(at, min(self._chunk, body.size - at)))


def _halfway(table: pa.Table) -> int:
    """How many leading fields hold about half the row group's bytes (at least one, and at
    least one left)."""
    sizes = list(accumulate(int(column.nbytes) for column in table.columns))
    half = sizes[-1] / 2
    split = next((i + 1 for i, size in enumerate(sizes) if size >= half), len(sizes))
    return max(1, min(split, len(sizes) - 1))
