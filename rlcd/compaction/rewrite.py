"""Streaming rewrite of one bin into one Parquet file.

A bin is a pipeline: fetch (an async task, ``prefetch`` sources ahead), decode (Parquet to
conformed live batches, fed to the stats accumulator), encode (batch counter, row group,
Parquet writer) and, unless the store is local, upload (an async task feeding the store's
multipart writer). Decode and encode run in one worker thread when other bins of the run keep
the other cores busy (the cheapest in CPU and memory), or are split over two threads, handing
batches straight to each other through a byte-bounded handoff with no event-loop round trip
per batch, so that a bin alone keeps two cores busy; such a bin also encodes each row group
in two threads, a part of its fields in each (:mod:`rlcd.parquet.split_writer`), since its
encode thread is the one that bounds it. Which way a bin runs is decided when it starts
(:func:`rewrite_bin`'s ``split``) and kept to its end. A local store's sources are opened in
place and its output file is written by pyarrow itself: no data passes through Python objects
or the event loop.

At any time the bin holds at most ``prefetch`` fetched sources (at least 2: the one being
decoded and the next), one row group (bounded in rows
and bytes), when split at most ``MAX_HANDOFF_BYTES`` of decoded batches (its share of the run's
room, :func:`handoff_bytes`) and, when uploading, a few chunks and one part: never the whole bin.
Every batch, also one emptied by a DV, passes the stats accumulator and the batch counter
(design §2). Any failure or cancellation stops the bin's threads and aborts the output, so a
failed bin leaves nothing behind.

With ``rewrite = "auto"`` a bin whose sources hold row groups to copy as they are
(:mod:`rlcd.parquet.copy_plan`, planned from their footers) takes the copy path instead
(:func:`_rewrite_copying`): in order, each copied row group is counted from its footer and its
stats taken from its statistics, each run of the rest decoded and encoded into a local file of
its own row groups (a copied row group's patched columns into a patches file,
:mod:`rlcd.compaction._patches`); the output is then laid out of them
(:mod:`rlcd.parquet.assemble`),
written by :mod:`rlcd.compaction._copy`, and its footer read back and checked before anything
may commit it. Every other bin, and every bin with ``rewrite = "reencode"``, runs as above.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq
import structlog
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from anyio.streams.memory import MemoryObjectSendStream

from rlcd._tasks import gather, primary_error
from rlcd.compaction._copy import (
    FOOTER_GUESS,
    CopiedBytes,
    FooterCache,
    LocalFiles,
    float_stats,
    read_footer,
    write_local,
    write_streamed,
)
from rlcd.compaction._patches import PatchFile
from rlcd.compaction._stats import StatsAccumulator
from rlcd.compaction.plan import Bin
from rlcd.compaction.policy import DEFAULT_MIN_COPY_ROW_GROUP, REWRITES
from rlcd.compaction.source import (
    DecodedSource,
    FetchedSource,
    ReadOptions,
    fetch_projected,
    fetch_source,
)
from rlcd.delta.actions import AddFile
from rlcd.delta.names import data_file_name
from rlcd.delta.partitions import encode_uri_path, object_key, partition_dir, partition_scalar
from rlcd.delta.schema import DataType
from rlcd.delta.stats_spec import StatsSpec
from rlcd.errors import CorruptDataError, InternalError, NotFoundError, RlcdError
from rlcd.parquet.assemble import Assembly, assemble, check_output
from rlcd.parquet.copy_plan import (
    Copy,
    CopyPlan,
    OutputSchema,
    Reason,
    Reencode,
    Source,
    Step,
    choose_plan,
    inexact_statistics,
)
from rlcd.parquet.copy_plan import Run as CopyRun
from rlcd.parquet.dictionary import FloatStats
from rlcd.parquet.encodings import SMALL_DICTIONARY, ColumnEncodings, FilePlan, plan_file
from rlcd.parquet.footer import footer_span, parse_footer
from rlcd.parquet.ranges import chunk_ranges
from rlcd.parquet.split_writer import SplitWriter
from rlcd.reconcile.counter import BatchCounter, Run, guard_offsets
from rlcd.storage.base import FileWriter, ObjectMeta, ObjectStore, ObjectWriter

__all__ = (
    "PartitionColumn",
    "RewriteSettings",
    "RewrittenBin",
    "CopySummary",
    "plan_bin_copy",
    "plan_bin_copies",
    "layouts_of",
    "may_copy",
    "parquet_writer",
    "handoff_bytes",
    "rewrite_bin",
    "output_key",
    "ROW_GROUP_BYTES",
    "HANDOFF_BYTES",
    "MAX_HANDOFF_BYTES",
)

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

_SINK_BUFFER = 1024 * 1024
_SINK_AHEAD = 2
HANDOFF_BYTES = 6 * 1024 * 1024
"""Decoded batches a bin may hold between its decode and encode stages (a few source files'
worth); a split bin of a run with fewer bins than may run at once gets more
(:func:`handoff_bytes`)."""
ROW_GROUP_BYTES = 8 * 1024 * 1024
"""A row group is written once it holds this many bytes of Arrow data, even if it has fewer
rows than the policy's ``row_group_rows``: this bounds the rows a bin holds in memory.
pyarrow encodes a row group from Arrow data, so each bin holds this much (a lone bin about
three times as much, see :func:`handoff_bytes`). Larger row groups raised the peak RSS without
raising throughput (docs/performance.md). The row groups (a few hundred thousand rows) are
still larger than DuckDB's or polars' defaults."""
GROWN_ROW_GROUP_BYTES = 64 * 1024 * 1024
"""The row groups of a file whose widest column takes a dictionary only in row groups this
large (:func:`rlcd.parquet.encodings.plan_file`): values of a few hundred bytes drawn from
tens of thousands (messages, user agents, URLs) repeat too seldom among 8 MiB of rows to pay
for a dictionary. Such a bin holds this much. A chosen dictionary holds some of its row
group's values, so it adds no more than the row group does."""
MAX_HANDOFF_BYTES = ROW_GROUP_BYTES
"""The most a bin's stages hold between them, also when it takes over absent bins' shares:
room for the decoder to decode one row group's worth while the encoder writes one, which is
what keeps both stages busy. More only raised the peak RSS; less stalls the decoder
(docs/performance.md)."""
_PARQUET_CODECS = {"none": 0, "snappy": 1, "gzip": 2, "zstd": 6}
"""Parquet's codec enum (``CompressionCodec`` in parquet.thrift) for each of ``CODECS``."""
_EXTENSIONS = {
    "zstd": "zstd",
    "snappy": "snappy",
    "gzip": "gz",
    "lz4": "lz4",
    "none": "uncompressed",
}


@dataclass(frozen=True, slots=True)
class PartitionColumn:
    """A partition column as a data file holds it when its writer writes it in: its Arrow
    field (physical name, field id) and the Delta type its ``partitionValues`` entries parse
    as."""

    field: pa.Field
    dtype: DataType


@dataclass(frozen=True, slots=True)
class RewriteSettings:
    """Everything a bin's rewrite needs to know about its table, fixed per compaction run."""

    table: str
    version: int
    read: ReadOptions
    stats: StatsSpec
    partition_columns: tuple[str, ...]  # physical names, in directory order
    codec: str = "zstd"
    row_group_rows: int = 1_048_576
    prefetch: int = 2
    # Dictionary-encode a column chunk only while its dictionary stays small. With pyarrow's
    # 1 MiB default, high-cardinality columns (ids, timestamps, amounts) build a dictionary
    # that is then abandoned for plain encoding, costing time and bytes; a small limit keeps
    # the dictionaries of low-cardinality columns only.
    dictionary_page_limit: int = SMALL_DICTIONARY
    # "adaptive": per-column encodings chosen from the bin's data (rlcd.parquet.encodings);
    # "conservative": a dictionary on every column while it stays small, as above
    encodings: str = "conservative"
    tight_bounds: bool | None = True
    count_rows: bool = True
    target_file_size: int | None = None  # recorded on the output (OPTIMIZE_TARGET_SIZE)
    # "auto": row groups that need no re-encoding are copied (rlcd.parquet.copy_plan), at
    # least ``min_copy_row_group`` compressed bytes each; "reencode": every row is re-encoded
    rewrite: str = REWRITES[0]
    min_copy_row_group: int = DEFAULT_MIN_COPY_ROW_GROUP
    recompress: bool = False  # a row group of another codec than ``codec`` is re-encoded
    # decimals of up to 18 digits stored as INT32/INT64 (as Spark and delta-rs store them), or
    # as fixed-length bytes (pyarrow's default); the copy path sets it per bin (``_plan``)
    decimals_as_integers: bool = True
    # the partition columns, in ``metaData.partitionColumns`` order: Spark (Delta 4.4, by
    # default) writes them into its data files after the data columns, in that order
    partition_fields: tuple[PartitionColumn, ...] = ()
    # the bin's typed partition values (one per ``partition_fields``) when its output holds them
    # as columns, as those files do; empty: left out. The copy path sets it per bin (``_plan``)
    written_partitions: tuple[pa.Scalar, ...] = ()


@dataclass(frozen=True, slots=True)
class RewrittenBin:
    """A bin whose output is written (or, when every row was deleted, needs none).

    ``offsets`` is each source's first output row when the capture guard held, else None (the
    bin is then committed untagged). ``physical_rows`` is each source's footer row count.
    ``copied_row_groups`` and ``copied_bytes`` are the row groups copied as they are and their
    bytes (``server_copied_bytes`` of them copied by the store itself), ``reencoded_bytes``
    the bytes of the row groups encoded.
    """

    bin: Bin
    key: str | None
    path: str | None
    size: int
    modification_time: int
    rows: int
    stats: str | None
    runs: tuple[Run, ...]
    physical_rows: tuple[int, ...]
    offsets: tuple[int, ...] | None
    target_file_size: int | None = None
    copied_row_groups: int = 0
    copied_bytes: int = 0
    server_copied_bytes: int = 0
    reencoded_bytes: int = 0


def output_key(bin_: Bin, partition_columns: tuple[str, ...], codec: str) -> str:
    """A fresh, never reused key in the bin's partition directory, named like Spark's files
    but recognisable as rlcd's (:mod:`rlcd.delta.names`)."""
    name = data_file_name(_EXTENSIONS[codec], os.urandom(16))
    if not partition_columns:
        return name
    return f"{partition_dir(bin_.partition_values, partition_columns)}/{name}"


def _output_schema(settings: RewriteSettings) -> pa.Schema:
    """The Arrow schema of a bin's output: the table's data columns, then the partition
    columns when ``settings.written_partitions`` holds their values (as Spark writes them)."""
    target: pa.Schema = settings.read.target
    if not settings.written_partitions:
        return target
    return pa.schema([*target, *(column.field for column in settings.partition_fields)])


def _with_partitions(rows: pa.Table, settings: RewriteSettings) -> pa.Table:
    """A row group's rows as the output holds them: with the bin's partition values as
    constant columns after the data columns, when the output holds them."""
    if not settings.written_partitions:
        return rows
    for column, value in zip(settings.partition_fields, settings.written_partitions, strict=True):
        rows = rows.append_column(column.field, pa.repeat(value, rows.num_rows))
    return rows


def parquet_writer(
    where: str | pa.NativeFile,
    settings: RewriteSettings,
    encodings: ColumnEncodings | None = None,
    schema: pa.Schema | None = None,
) -> pq.ParquetWriter:
    """The writer of a bin's output file. Decimals of up to 18 digits are stored as INT32 or
    INT64, as Spark stores them (smaller and cheaper than pyarrow's fixed-length default),
    unless ``settings.decimals_as_integers`` is false (a bin that copies fixed-length ones).
    Without ``encodings`` every column may take a dictionary (while it stays small); partition
    columns written in always do (one value: the smallest and cheapest encoding). A
    ``schema`` (some of the target's fields) writes a part of each row group (see
    :mod:`rlcd.parquet.split_writer`).

    With ``encodings``, pages end at pyarrow's 1 MiB data page size, not at its default of
    20,000 rows: each page is compressed with a codec context of its own, and on columns of
    small values (dictionary indices, booleans, nested levels) those many small pages cost more
    to set up than to compress. Without, the writer stays the one rlcd had before (there, long
    pages made outputs larger, where dictionaries outgrow their limit)."""
    partitions = [column.field.name for column in settings.partition_fields]
    return pq.ParquetWriter(
        where,
        _output_schema(settings) if schema is None else schema,
        compression=settings.codec,
        use_dictionary=True
        if encodings is None
        else encodings.use_dictionary + (partitions if settings.written_partitions else []),
        column_encoding=None if encodings is None else encodings.column_encoding or None,
        dictionary_pagesize_limit=settings.dictionary_page_limit
        if encodings is None
        else encodings.dictionary_page_limit,
        write_statistics=True,
        write_page_checksum=True,  # a CRC-32 per page: `rlcd verify --deep` finds a changed byte
        use_compliant_nested_type=True,
        store_decimal_as_integer=settings.decimals_as_integers,
        max_rows_per_page=None if encodings is None else settings.row_group_rows,
    )


class _ThreadSink:
    """The file pyarrow's writer writes to, from the encode thread, behind a native buffer (see
    :class:`_Encoder`), so it is called once per ``_SINK_BUFFER`` bytes rather than once per
    page. Each chunk goes to the upload task through a small stream: the encode thread blocks
    only while ``_SINK_AHEAD`` chunks wait (the back-pressure), never on the upload itself."""

    def __init__(self, send: ObjectSendStream[Any]) -> None:
        self._send = send
        self.closed = False
        self.dropping = False  # the bin failed: what pyarrow still flushes goes nowhere

    def write(self, data: Any) -> int:
        # `data` is bytes pyarrow copied out of its buffer, or a pyarrow Buffer it handed over:
        # either way it stays valid until the upload wrote it. Once the upload task ended (it
        # failed, or was cancelled), this raises BrokenResourceError through pyarrow.
        size = len(data)
        if size and not self.dropping:
            anyio.from_thread.run(self._send.send, data)
        return size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _native(sink: _ThreadSink) -> pa.NativeFile:
    return pa.BufferedOutputStream(pa.PythonFile(sink, mode="w"), buffer_size=_SINK_BUFFER)


async def _upload(chunks: ObjectReceiveStream[Any], writer: ObjectWriter) -> None:
    """Write the encoded chunks, in order, to the object writer. Ending in any way closes
    ``chunks``, which stops an encode thread that still hands chunks in."""
    async with chunks:
        async for chunk in chunks:
            await writer.write(chunk)


@dataclass(frozen=True, slots=True)
class _SourceStart:
    """The decode stage opened source ``index``; its ``footer`` has ``physical_rows`` rows."""

    index: int
    physical_rows: int
    footer: pq.FileMetaData


_Item = _SourceStart | tuple[int, pa.RecordBatch]


class _OneWriter:
    """pyarrow's writer, one row group per call, as :class:`SplitWriter` is used."""

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self._writer = writer

    def write_table(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=table.num_rows)

    def close(self) -> pq.FileMetaData:
        self._writer.close()  # closes a file it opened itself
        return self._writer.writer.metadata

    def discard(self) -> None:
        self._writer.close()


class _Encoder:
    """The encode stage's state, used by its thread only: the batch counter, the row group
    being filled and the Parquet writer. It hands every row group, and at the end the footer,
    to the stats accumulator, which reads most of the file's stats from the footer."""

    def __init__(
        self,
        settings: RewriteSettings,
        sink: str | _ThreadSink,
        stats: StatsAccumulator,
        *,
        split: bool = False,
        footer_stats: bool = True,
    ) -> None:
        """``sink`` is a local file to write natively, or the sink of an upload task. A
        ``split`` encoder encodes each row group in two threads
        (:mod:`rlcd.parquet.split_writer`): the choice for a split bin, whose encode thread
        is otherwise the one that bounds it. Without ``footer_stats`` the stats accumulator
        is not handed the footer (the copy path hands it the output's)."""
        self.settings = settings
        self.stats = stats
        self._footer_stats = footer_stats
        self._sink = sink
        self._split = split
        self._out: str | pa.NativeFile = sink if isinstance(sink, str) else _native(sink)
        self.closed = False
        self.counter = BatchCounter(enabled=settings.count_rows)
        self.writer: _OneWriter | SplitWriter | None = None
        self.rows = 0
        self.physical: list[int] = []
        self._footers: list[pq.FileMetaData] = []  # of the sources before the first row group
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._plan: FilePlan | None = None  # adaptive encodings, made on the first row group
        self._row_group_bytes = ROW_GROUP_BYTES

    def accept(self, item: _Item) -> None:
        """Take the next item of the decode stage: a source's start, or one of its batches."""
        if isinstance(item, _SourceStart):
            self.physical.append(item.physical_rows)
            if self.writer is None:
                self._footers.append(item.footer)
            self.counter.record(item.index, 0)
            return
        index, batch = item
        self.counter.record(index, batch.num_rows)
        if batch.num_rows:
            self._buffer(batch)

    def _buffer(self, batch: pa.RecordBatch) -> None:
        """Collect batches into one row group: pyarrow makes each ``write_batch`` call a row
        group of its own, and 64k-row groups compress and scan poorly."""
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        limit = self.settings.row_group_rows
        full = self._pending_rows >= limit or self._pending_bytes >= self._row_group_bytes
        if full and not self._grows():
            self._flush_row_group()

    def _grows(self) -> bool:
        """Whether the first row group, full at :data:`ROW_GROUP_BYTES`, is to grow: the
        adaptive plan, made on it, says so."""
        if self._plan is not None or self.writer is not None:
            return False
        if self.settings.encodings != "adaptive":
            return False
        plan = self._planned(self._pending_table())
        rows = self.settings.row_group_rows
        return self._pending_rows < rows and self._pending_bytes < plan.row_group_bytes

    def _pending_table(self) -> pa.Table:
        return pa.Table.from_batches(self._pending, schema=self.settings.read.target)

    def _planned(self, first_row_group: pa.Table, *, last: bool = False) -> FilePlan:
        """The adaptive plan, made once, on the rows of the first row group (so far); for a
        ``last`` one, the whole file, row groups do not grow."""
        if self._plan is None:
            self._plan = plan_file(
                first_row_group,
                self._footers,
                row_group_bytes=ROW_GROUP_BYTES,
                grown_bytes=ROW_GROUP_BYTES if last else GROWN_ROW_GROUP_BYTES,
                max_rows=self.settings.row_group_rows,
                codec=self.settings.codec,
                small_dictionary=self.settings.dictionary_page_limit,
                decimals_as_integers=self.settings.decimals_as_integers,
            )
            self._row_group_bytes = self._plan.row_group_bytes
            for choice in self._plan.encodings.choices:
                log.debug(
                    "column_encoding",
                    table=self.settings.table,
                    column=choice.column,
                    encoding=choice.encoding,
                    reason=choice.reason,
                    row_group_bytes=self._row_group_bytes,
                )
        return self._plan

    def end_row_group(self) -> None:
        """Write what is pending as a row group now (the copy path ends one at each step)."""
        self._flush_row_group()

    def _flush_row_group(self) -> None:
        if self._pending:
            table = self._pending_table()
            self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
            self.stats.update_row_group(table)
            self._writer(table).write_table(_with_partitions(table, self.settings))
            self.rows += table.num_rows

    def _writer(self, first_row_group: pa.Table) -> _OneWriter | SplitWriter:
        if self.writer is None:
            settings, encodings = self.settings, None
            if settings.encodings == "adaptive":
                # a plan not made yet is made on the whole file: the bin ends here
                encodings = self._planned(first_row_group, last=True).encodings
            self._footers = []
            if not self._split:
                self.writer = _OneWriter(parquet_writer(self._out, settings, encodings))
            else:
                if isinstance(self._out, str):  # opened here, as pyarrow would open it
                    self._out = pa.OSFile(self._out, "wb")
                self.writer = SplitWriter(
                    self._out,
                    lambda stream, schema: parquet_writer(stream, settings, encodings, schema),
                    chunk_bytes=_SINK_BUFFER,
                )
        return self.writer

    def close(self) -> None:
        """Write the last row group and the footer, and flush every byte to the sink."""
        self._flush_row_group()
        if self.writer is not None:
            footer = self.writer.close()
            if self._footer_stats:
                self.stats.add_footer(footer)
        if not isinstance(self._out, str):
            self._out.close()
        self.closed = True

    def discard(self) -> None:
        """After a failure, in the encode thread: close the writer and its buffer, dropping
        what they still flush (the output is aborted anyway), so that nothing is left to write
        into a dead upload when they are garbage collected."""
        if isinstance(self._sink, _ThreadSink):
            self._sink.dropping = True
        with contextlib.suppress(Exception):
            if self.writer is not None:
                self.writer.discard()
        with contextlib.suppress(Exception):
            if not isinstance(self._out, str):
                self._out.close()


async def _prefetch(
    store: ObjectStore,
    bin_: Bin,
    settings: RewriteSettings,
    send: MemoryObjectSendStream[FetchedSource],
    fetched: list[FetchedSource],
) -> None:
    """Fetch the sources in order into ``send``, recording each in ``fetched`` so that the bin
    closes them all when it ends (a source handed to a receiver cancelled at that moment is
    lost by the stream; its spill file must not be). Ending in any way closes the stream: the
    decode thread, waiting for a source that will not come, stops (the failure is reported by
    this task, or the cancellation by the bin)."""
    with send:
        for add in bin_.sources:
            source = await fetch_source(store, add, settings.read, version=settings.version)
            fetched.append(source)
            await send.send(source)


class _Aborted(Exception):
    """The other end of a :class:`_Handoff` failed; its own error is the one reported."""


def handoff_bytes(concurrency: int, bins: int) -> int:
    """How many bytes of decoded batches each split bin of a run may hold between its stages,
    when up to ``concurrency`` bins run at once and the run has ``bins``.

    Each running bin holds one row group being filled (up to :data:`ROW_GROUP_BYTES`) and up
    to ``HANDOFF_BYTES`` of batches waiting for its encoder. A run with fewer bins than that
    shares the absent bins' room out among its own, up to :data:`MAX_HANDOFF_BYTES`: the
    encoder writes a row group in one burst, and with room the decode stage keeps running
    meanwhile, so a lone bin keeps two cores busy. The run's bound stays
    ``concurrency * (ROW_GROUP_BYTES + HANDOFF_BYTES)`` for the bins decoding, plus up to
    ``concurrency`` last row groups of bins that only have that left to write (see
    :func:`rewrite_bin`).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} is below 1")
    running = max(1, min(concurrency, bins))
    share = ROW_GROUP_BYTES + HANDOFF_BYTES
    return min(MAX_HANDOFF_BYTES, share * concurrency // running - ROW_GROUP_BYTES)


class _Handoff:
    """A FIFO from the decode thread to the encode thread, bounded in bytes (a batch always
    fits into an empty one).

    The two stages hand batches to each other directly, without a round trip through the event
    loop per batch. ``abort`` (called by a stage that fails) wakes the other stage, which then
    stops with :class:`_Aborted`.
    """

    def __init__(self, limit: int) -> None:
        self._items: deque[tuple[_Item, int]] = deque()
        self._bytes = 0
        self._limit = limit
        self._ready = threading.Condition()
        self._closed = False
        self.aborted = False

    def put(self, item: _Item) -> None:
        size = item[1].nbytes if isinstance(item, tuple) else 0
        with self._ready:
            while self._items and self._bytes + size > self._limit and not self.aborted:
                self._ready.wait()
            if self.aborted:
                raise _Aborted
            self._items.append((item, size))
            self._bytes += size
            self._ready.notify_all()

    def get(self) -> _Item | None:
        """The next item; None once the decode stage closed the handoff and all were taken."""
        with self._ready:
            while not self._items and not self._closed and not self.aborted:
                self._ready.wait()
            if self.aborted:
                raise _Aborted
            if not self._items:
                return None
            item, size = self._items.popleft()
            self._bytes -= size
            self._ready.notify_all()
            return item

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def abort(self) -> None:
        with self._ready:
            self.aborted = True
            self._ready.notify_all()


def _items(
    bin_: Bin,
    settings: RewriteSettings,
    sources: ObjectReceiveStream[FetchedSource],
    stats: StatsAccumulator,
) -> Generator[_Item]:
    """Take the fetched sources in order from the event loop, decode each into conformed live
    batches and feed them to the stats accumulator: every source's start, then every batch,
    also one whose rows were all deleted (the batch counter observes it). In a worker thread.

    Raises:
        _Aborted: the fetch task ended early (it reports its own failure or cancellation).
    """
    width = 0.0  # bytes a row of the widest buffer, as seen on the bin's sources so far
    for index in range(len(bin_.sources)):
        try:
            fetched = anyio.from_thread.run(sources.receive)
        except anyio.EndOfStream:
            raise _Aborted from None
        try:
            decoded = DecodedSource(
                fetched, settings.read, table=settings.table, version=settings.version
            )
            yield _SourceStart(index, decoded.physical_rows, decoded.footer)
            for batch in decoded.batches(width):
                if batch.num_rows:
                    stats.update(batch)
                yield index, batch
            width = max(width, decoded.width)
        finally:
            fetched.close()


def _decode(
    bin_: Bin,
    settings: RewriteSettings,
    sources: ObjectReceiveStream[FetchedSource],
    handoff: _Handoff,
    stats: StatsAccumulator,
) -> None:
    """The decode stage of a split bin, in one worker thread for the whole bin: every item of
    :func:`_items` into the handoff (the stats are computed here rather than on the encode
    side, to balance the stages), then close the handoff; on any failure, abort it."""
    with contextlib.closing(_items(bin_, settings, sources, stats)) as items:
        try:
            for item in items:
                handoff.put(item)
            handoff.close()
        except BaseException as exc:
            handoff.abort()
            if not isinstance(exc, _Aborted):  # the fetch task reports its own failure
                raise


def _encode(encoder: _Encoder, handoff: _Handoff) -> None:
    """The encode stage of a split bin, in one worker thread for the whole bin: every item into
    the encoder, then close it (the last row group, the footer)."""
    _finish(encoder, handoff, iter(handoff.get, None))


def _decode_and_encode(
    bin_: Bin,
    settings: RewriteSettings,
    sources: ObjectReceiveStream[FetchedSource],
    handoff: _Handoff,
    encoder: _Encoder,
    stats: StatsAccumulator,
) -> None:
    """A bin that is not split: both stages in one worker thread. The thread reuses the memory
    it frees, nothing waits between the stages and no batches pile up in between; the run's
    other bins keep the other cores busy, and ``handoff`` only carries a cancellation."""

    def until_aborted(items: Iterator[_Item]) -> Iterator[_Item]:
        for item in items:
            if handoff.aborted:
                raise _Aborted
            yield item

    with contextlib.closing(_items(bin_, settings, sources, stats)) as decoded:
        _finish(encoder, handoff, until_aborted(decoded))


def _finish(encoder: _Encoder, handoff: _Handoff, items: Iterator[_Item]) -> None:
    """Every item into the encoder, then close it; on any failure, discard the output."""
    try:
        for item in items:
            encoder.accept(item)
        encoder.close()
    except _Aborted:
        encoder.discard()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        handoff.abort()  # the upload task ended first: its failure or cancellation is reported
        encoder.discard()
    except BaseException:
        handoff.abort()
        encoder.discard()
        raise


async def _stage(
    fn: Callable[..., None],
    args: tuple[Any, ...],
    then: Callable[[], None] | None = None,
) -> None:
    """Run a stage in a worker thread whose calls into the event loop are never cancelled,
    then call ``then``.

    anyio does not cancel a ``from_thread`` call made after its scope was cancelled, so a
    thread waiting there for a stream could wait forever. Instead, a stage ends on its own:
    the fetch and upload tasks close their streams whenever they end, and a failure or
    cancellation of the bin aborts the handoff (:func:`_abort_when_cancelled`).
    """
    with anyio.CancelScope(shield=True):
        # a token of its own, not one of anyio's shared 40: a run's stage threads are bounded
        # by its bins (two at most each), and must never wait for a token held by the store's
        # IO threads, or by stages that are themselves waiting for that IO
        await anyio.to_thread.run_sync(fn, *args, limiter=anyio.CapacityLimiter(1))
    if then is not None:
        then()


class _Slot:
    """One token of a run's limiter, borrowed by a bin until it has decoded its sources (or
    ended): a bin writing its last row group lets the next bin start decoding meanwhile."""

    def __init__(self, limiter: anyio.CapacityLimiter | None) -> None:
        self._limiter = limiter
        self._held = False

    async def acquire(self) -> None:
        if self._limiter is not None:
            await self._limiter.acquire_on_behalf_of(self)
            self._held = True

    def release(self) -> None:
        """Give the token back (once; later calls do nothing)."""
        if self._held and self._limiter is not None:
            self._held = False
            self._limiter.release_on_behalf_of(self)


async def _abort_when_cancelled(handoff: _Handoff, scope: anyio.CancelScope) -> None:
    """Abort the handoff when the bin fails or is cancelled (or, harmlessly, when ``scope`` is
    cancelled after the stages are done), so that both stage threads stop at their next batch."""
    with scope:
        try:
            await anyio.sleep_forever()
        finally:
            handoff.abort()


def _open_output(store: ObjectStore, key: str) -> tuple[ObjectWriter, FileWriter | None]:
    """A local store's file writer, twice (pyarrow writes the file itself: no bytes through
    Python or the event loop), else the store's streaming writer and None."""
    files = store.local_files()
    if files is None:
        return store.open_writer(key), None
    writer = files.open_file_writer(key)
    return writer, writer


async def rewrite_bin(
    store: ObjectStore,
    bin_: Bin,
    settings: RewriteSettings,
    *,
    limiter: anyio.CapacityLimiter | None = None,
    split: bool = True,
    handoff_bytes: int = HANDOFF_BYTES,
    on_start: Callable[[], None] | None = None,
    footers: FooterCache | None = None,
) -> RewrittenBin:
    """Write the bin's live rows, source after source, into one new object.

    A ``split`` bin runs its decode and encode stages in two of anyio's worker threads, each
    for the whole bin: one bin keeps two cores busy. Otherwise one worker thread does both,
    which costs less CPU and memory (no batches wait between the stages, and the thread reuses
    what it frees): the choice when other bins keep the other cores busy.

    ``limiter``, when given, is held (one token) from the start until the bin has decoded all
    its sources (a bin that is not split: until it is written): it bounds how many bins decode
    at once, not the threads a bin uses, which could deadlock a split bin's stages. A split
    bin that only has its last row group left to encode lets the next bin start, so the two
    overlap instead of leaving a core idle; each holds at most one row group. A split bin
    holds at most ``handoff_bytes`` of batches between its stages (its run's
    :func:`handoff_bytes`). ``on_start`` is called when the bin starts, holding its token.
    ``footers`` holds sources' footers already read while planning (:func:`layouts_of`).

    Raises:
        CorruptDataError, DeletionVectorError: a source cannot be read; nothing is left behind.
        StorageError: the store failed; the upload is aborted.
    """
    handoff = _Handoff(handoff_bytes)
    slot = _Slot(limiter)
    try:
        await slot.acquire()
        if on_start is not None:
            on_start()
        return await _rewrite(store, bin_, settings, handoff, slot, split, footers)
    except BaseExceptionGroup as group:
        raise _primary_error(group)  # noqa: B904 (the leaf keeps its own cause)
    finally:
        slot.release()


def _primary_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The failure to report: rlcd's own error where there is one. A failed upload also fails
    the encode thread that was handing it a chunk; the upload's StorageError is the cause."""
    found = group.subgroup(lambda e: isinstance(e, RlcdError))
    return primary_error(found if found is not None else group)


async def _rewrite(
    store: ObjectStore,
    bin_: Bin,
    settings: RewriteSettings,
    handoff: _Handoff,
    slot: _Slot,
    split: bool,
    footers: FooterCache | None,
) -> RewrittenBin:
    if may_copy(bin_, settings):
        planned = await _copy_plan(store, bin_, settings, footers)
        if planned is not None:
            return await _rewrite_copying(store, bin_, planned.settings, planned)
    key = output_key(bin_, settings.partition_columns, settings.codec)
    fetch_send, fetch_receive = anyio.create_memory_object_stream[FetchedSource](
        # the decode stage holds one source and the fetch task one more while it waits to
        # hand it over: the stream buffers the rest of ``prefetch``
        max(0, settings.prefetch - 2)
    )
    chunk_send, chunk_receive = anyio.create_memory_object_stream[Any](_SINK_AHEAD)
    stats = StatsAccumulator(settings.stats, footer_schema=settings.read.target)
    watch = anyio.CancelScope()
    fetched: list[FetchedSource] = []
    with fetch_send, fetch_receive, chunk_send, chunk_receive:
        output, file_writer = _open_output(store, key)
        async with output as writer:
            # a local file is written by pyarrow directly; anything else through the upload task
            local = file_writer is not None
            sink = file_writer.path if file_writer is not None else _ThreadSink(chunk_send)
            encoder = _Encoder(settings, sink, stats, split=split)
            try:
                async with anyio.create_task_group() as tg:
                    if not local:
                        tg.start_soon(_upload, chunk_receive, writer)
                    tg.start_soon(_prefetch, store, bin_, settings, fetch_send, fetched)
                    tg.start_soon(_abort_when_cancelled, handoff, watch)
                    try:
                        if split:
                            decode = (bin_, settings, fetch_receive, handoff, stats)
                            tg.start_soon(_stage, _decode, decode, slot.release)
                            await _stage(_encode, (encoder, handoff))
                        else:
                            both = (bin_, settings, fetch_receive, handoff, encoder, stats)
                            await _stage(_decode_and_encode, both)
                    finally:
                        chunk_send.close()  # the upload task ends after the last chunk
                        watch.cancel()
            finally:
                for source in fetched:  # closing twice is harmless; forgetting one leaks a file
                    source.close()
            if not encoder.closed:  # a stage stopped early: the bin was cancelled
                await anyio.lowlevel.checkpoint_if_cancelled()
                raise RuntimeError(f"rewrite of bin {bin_.bin_id} stopped early")
            # every task is done: every byte is written
            rows = encoder.rows
            meta = await writer.complete() if rows else None
            if meta is None:
                await writer.abort()
    physical = tuple(encoder.physical)
    live = [p - s.deleted_rows for p, s in zip(physical, bin_.sources, strict=True)]
    offsets = guard_offsets(encoder.counter.runs, live)
    if meta is None:
        return RewrittenBin(bin_, None, None, 0, 0, 0, None, encoder.counter.runs, physical, None)
    return RewrittenBin(
        bin=bin_,
        key=key,
        path=encode_uri_path(key),
        size=meta.size,
        modification_time=meta.last_modified_ms,
        rows=rows,
        stats=stats.finish(tight_bounds=settings.tight_bounds),
        runs=encoder.counter.runs,
        physical_rows=physical,
        offsets=tuple(offsets) if offsets is not None else None,
        target_file_size=settings.target_file_size,
        reencoded_bytes=meta.size,
    )


# --- the copy path (issue 39): row groups copied as they are, the rest re-encoded -------------


@dataclass(frozen=True, slots=True)
class _Planned:
    """A bin's copy plan with at least one copy, the sources' keys, footer spans and parsed
    footers, the bin's settings with the writer's variant the plan was made for, and the empty
    file that writer writes (its footer when nothing is re-encoded)."""

    plan: CopyPlan
    keys: tuple[str, ...]
    spans: tuple[bytes, ...]
    footers: tuple[pq.FileMetaData, ...]
    settings: RewriteSettings
    empty: bytes


_DECIMAL_VARIANTS = (True, False)
"""The ``decimals_as_integers`` values a bin's output may be written with, today's first: the
copy path writes the output as most of the bytes it copies are stored (pyarrow's files hold
fixed-length decimals, Spark's and delta-rs' integers)."""


def _tail_footer(data: bytes) -> bytes:
    """The footer span of a whole file's bytes."""
    return data[len(data) - footer_span(data[-8:], len(data)) :]


def _empty_file(settings: RewriteSettings) -> bytes:
    """The file the output's writer writes without a row group: its schema and footer."""
    sink = pa.BufferOutputStream()
    parquet_writer(sink, settings).close()
    empty: bytes = sink.getvalue().to_pybytes()
    return empty


def _variants(bin_: Bin, settings: RewriteSettings) -> list[RewriteSettings]:
    """The writer's variants for the bin, today's first: decimals as integers or as
    fixed-length bytes (:data:`_DECIMAL_VARIANTS`), each with the partition columns left out
    of the output, then (a partitioned table) written into it with the bin's values, as Delta
    4.4 writes its files by default (``delta.writePartitionColumnsToParquet``).

    Raises:
        ValueError: the bin's ``partitionValues`` lack a partition column or hold a value its
            type cannot parse.
    """
    written: list[tuple[pa.Scalar, ...]] = [()]
    if settings.partition_fields:
        values = bin_.partition_values
        names = [column.field.name for column in settings.partition_fields]
        missing = [name for name in names if name not in values]
        if missing:
            raise ValueError(f"partitionValues has no entry for partition column {missing[0]!r}")
        written.append(
            tuple(
                partition_scalar(values[name], column.dtype)
                for name, column in zip(names, settings.partition_fields, strict=True)
            )
        )
    return [
        replace(settings, decimals_as_integers=decimals, written_partitions=partitions)
        for partitions in written
        for decimals in _DECIMAL_VARIANTS
    ]


def _copy_codec(settings: RewriteSettings) -> int | None:
    """The codec (Parquet's enum) every chunk a copy keeps must have: the output's with
    ``recompress``, else any (None)."""
    return _PARQUET_CODECS[settings.codec] if settings.recompress else None


def _outputs(
    bin_: Bin, settings: RewriteSettings
) -> tuple[list[RewriteSettings], list[bytes], list[OutputSchema]]:
    """The writer's variants for the bin, their empty files and their Parquet schemas."""
    variants = _variants(bin_, settings)
    empties = [_empty_file(variant) for variant in variants]
    return variants, empties, [OutputSchema.of(_tail_footer(empty)) for empty in empties]


def _plan_under(
    settings: RewriteSettings,
    outputs: Sequence[OutputSchema],
    adds: Sequence[AddFile],
    spans: Sequence[bytes],
) -> tuple[int, CopyPlan]:
    """:func:`choose_plan` of ``adds`` (with their footer spans) under the bin's settings."""
    sources = [
        Source(span, add.deletion_vector is not None) for span, add in zip(spans, adds, strict=True)
    ]
    return choose_plan(
        sources,
        outputs,
        settings.min_copy_row_group,
        codec=_copy_codec(settings),
        # columns matched by field id, or partition columns, are never patched (fail closed)
        patchable=frozenset()
        if settings.read.by_field_id
        else frozenset(settings.read.target.names) - set(settings.partition_columns),
    )


def _choose(
    bin_: Bin, settings: RewriteSettings, adds: Sequence[AddFile], spans: Sequence[bytes]
) -> tuple[int, CopyPlan, list[RewriteSettings], list[bytes]]:
    """The plan of ``adds`` (some or all of the bin's sources, with their footer spans) under
    the writer's variant that copies the most source bytes: its index, the plan, the variants
    and their empty files."""
    variants, empties, outputs = _outputs(bin_, settings)
    chosen, plan = _plan_under(settings, outputs, adds, spans)
    return chosen, plan, variants, empties


def _copies(plan: CopyPlan) -> bool:
    return any(isinstance(step, Copy) for step in plan.steps)


def _plan(
    bin_: Bin, settings: RewriteSettings, keys: tuple[str, ...], spans: list[bytes]
) -> _Planned | None:
    """The copy plan under the writer's variant that copies the most source bytes."""
    chosen, plan, variants, empties = _choose(bin_, settings, bin_.sources, spans)
    if not _copies(plan):
        return None
    footers = tuple(parse_footer(span) for span in spans)
    return _Planned(plan, keys, tuple(spans), footers, variants[chosen], empties[chosen])


def may_copy(bin_: Bin, settings: RewriteSettings) -> bool:
    """Whether the bin's rewrite may copy a row group, from the plan alone: the copy path is
    on and some source is at least ``min_copy_row_group`` bytes (a row group's compressed
    bytes lie within its file). Else its footers are not read."""
    return settings.rewrite == "auto" and bin_.largest_source_bytes >= settings.min_copy_row_group


async def _copy_plan(
    store: ObjectStore, bin_: Bin, settings: RewriteSettings, footers: FooterCache | None = None
) -> _Planned | None:
    """The bin's copy plan from its sources' footers (one ranged GET of each tail), when it
    copies any row group. None when it copies none, or when a footer cannot be read or
    planned: the re-encode path then reads the file, and reports what is wrong with it.

    A source smaller than ``min_copy_row_group`` holds no row group to copy (a row group's
    compressed bytes lie within its file), so it changes neither whether the bin copies nor
    which variant copies most: the footers of the sources that may copy are read and planned
    first, and the small ones' only when that plan copies (the whole plan needs every
    source's row groups). A bin of small files is not planned (:func:`may_copy`)."""
    least = settings.min_copy_row_group
    adds = bin_.sources
    keys = tuple(object_key(store.root, add.path) for add in adds)
    if any(key is None for key in keys):
        return None
    found = tuple(key for key in keys if key is not None)
    big = [i for i, add in enumerate(adds) if add.size >= least]
    try:
        spans = dict(zip(big, await _footers(store, found, adds, big, footers), strict=True))
        small = [i for i in range(len(adds)) if i not in spans]
        if small:  # else the big ones' plan is the whole plan: planned once, below
            big_spans, big_adds = [spans[i] for i in big], [adds[i] for i in big]
            _, plan, _, _ = await anyio.to_thread.run_sync(
                _choose, bin_, settings, big_adds, big_spans
            )
            if not _copies(plan):
                return None
            spans.update(
                zip(small, await _footers(store, found, adds, small, footers), strict=True)
            )
        every = [spans[i] for i in range(len(adds))]
        return await anyio.to_thread.run_sync(_plan, bin_, settings, found, every)
    except (ValueError, NotFoundError, pa.ArrowException, OSError) as exc:
        log.info("copy_plan_skipped", table=settings.table, bin=bin_.bin_id, reason=str(exc))
        return None


async def _footers(
    store: ObjectStore,
    keys: Sequence[str],
    adds: Sequence[AddFile],
    which: Sequence[int],
    footers: FooterCache | None = None,
) -> list[bytes]:
    """The footer spans of the sources ``which``, read together (those ``footers`` holds
    taken from it)."""

    async def one(i: int) -> bytes:
        held = None if footers is None else footers.take(keys[i])
        return held if held is not None else await read_footer(store, keys[i], adds[i].size)

    return await gather(*(one(i) for i in which))


@dataclass(frozen=True, slots=True)
class CopySummary:
    """What a bin's copy plan copies and re-encodes: row groups and their compressed bytes
    in the sources (for ``--dry-run``). ``patched_row_groups`` of the copied ones have some
    columns re-encoded (their decimals stored otherwise), ``patched_bytes`` of their bytes."""

    copied_row_groups: int
    copied_bytes: int
    reencoded_row_groups: int
    reencoded_bytes: int
    patched_row_groups: int = 0
    patched_bytes: int = 0


async def plan_bin_copy(
    store: ObjectStore, bin_: Bin, settings: RewriteSettings, footers: FooterCache | None = None
) -> CopySummary | None:
    """What the bin's rewrite would copy (reading its sources' footers, but those ``footers``
    holds), or None when it would copy nothing (``rewrite = "reencode"``, small files only,
    or nothing qualifies)."""
    if not may_copy(bin_, settings):
        return None
    planned = await _copy_plan(store, bin_, settings, footers)
    if planned is None:
        return None
    copied = [c for c in planned.plan.choices if c.copy]
    others = [c for c in planned.plan.choices if not c.copy]
    patched = [c for c in copied if c.patched]
    return CopySummary(
        len(copied),
        sum(c.size for c in copied),
        len(others),
        sum(c.size for c in others),
        len(patched),
        sum(c.patched_size for c in patched),
    )


async def plan_bin_copies(
    store: ObjectStore,
    bins: Sequence[Bin],
    settings: RewriteSettings,
    *,
    concurrency: int,
    footers: FooterCache | None = None,
) -> list[CopySummary | None]:
    """:func:`plan_bin_copy` of each of ``bins``, in order, by ``concurrency`` workers."""
    work = partial(plan_bin_copy, store, settings=settings, footers=footers)
    return await _each(bins, concurrency, work)


async def _each(
    bins: Sequence[Bin], concurrency: int, work: Callable[[Bin], Awaitable[_T]]
) -> list[_T]:
    """``work`` of each of ``bins``, in order, by ``concurrency`` workers taking the next bin
    as they finish one: memory and requests in flight are bounded by design (a bin holds its
    footers only while it is worked on), whatever the number of bins."""
    results: dict[int, _T] = {}
    todo = iter(enumerate(bins))

    async def worker() -> None:
        for i, b in todo:  # one iterator shared by the workers: each bin is taken once
            results[i] = await work(b)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(min(concurrency, len(bins))):
                tg.start_soon(worker)
    except BaseExceptionGroup as group:  # a store's failure, as itself
        raise primary_error(group)  # noqa: B904 (the leaf keeps its own cause)
    return [results[i] for i in range(len(bins))]


def _layouts(
    bin_: Bin, settings: RewriteSettings, adds: Sequence[AddFile], spans: Sequence[bytes]
) -> dict[str, int]:
    """The layout (:func:`layouts_of`) of each of the bin's sources where it is not 0: of
    ``adds`` (with their footer spans), the writer's variant that copies most of each; of
    the others (nothing to copy), the one that copies most of the bin's bytes."""
    _, _, outputs = _outputs(bin_, settings)
    own: dict[str, int] = {}
    copied: dict[int, int] = {}
    for add, span in zip(adds, spans, strict=True):
        chosen, plan = _plan_under(settings, outputs, [add], [span])
        if plan.copied_bytes:
            own[add.path] = chosen
            copied[chosen] = copied.get(chosen, 0) + plan.copied_bytes
    most = max(sorted(copied), key=copied.__getitem__, default=0)  # a tie: the first
    found = {source.path: own.get(source.path, most) for source in bin_.sources}
    return {path: layout for path, layout in found.items() if layout}


async def _bin_layouts(
    store: ObjectStore, bin_: Bin, settings: RewriteSettings, footers: FooterCache
) -> dict[str, int]:
    """The layouts of the bin's sources (:func:`_layouts`), their footers kept in ``footers``
    for the rewrite; none when a footer cannot be read (the rewrite then reports what is
    wrong, as it would have: that bin alone fails)."""
    try:
        adds = [add for add in bin_.sources if add.size >= settings.min_copy_row_group]
        keys = [object_key(store.root, add.path) for add in adds]
        found = [key for key in keys if key is not None]
        if len(found) < len(keys):
            return {}
        spans = await _footers(store, found, adds, range(len(adds)))
        for key, span in zip(found, spans, strict=True):
            footers.put(key, span)
        return await anyio.to_thread.run_sync(_layouts, bin_, settings, adds, spans)
    except (ValueError, RlcdError, pa.ArrowException, OSError) as exc:
        log.info("layouts_skipped", table=settings.table, bin=bin_.bin_id, reason=str(exc))
        return {}


async def layouts_of(
    store: ObjectStore,
    bins: Sequence[Bin],
    settings: RewriteSettings,
    *,
    concurrency: int,
    footers: FooterCache,
) -> dict[str, int]:
    """Each source's *layout*, where it is not 0: the index of the writer's variant
    (:func:`_variants`) that copies most of its row groups (pyarrow's fixed-length decimals
    copy under the second, where the first stores integers), or for a source with nothing to
    copy (small, or with a deletion vector) the one that copies most of its bin's bytes. The
    planner packs each layout apart first (:func:`~rlcd.compaction.plan.plan_bins`), so that
    row groups copy into an output of their own schema instead of being transcoded. Read from
    the footers of the sources of at least ``min_copy_row_group`` bytes in the bins that may
    copy (kept in ``footers`` for the rewrite, as far as it has room); a bin whose footers
    cannot be read gives none."""
    may = [b for b in bins if may_copy(b, settings)]
    found: dict[str, int] = {}
    work = partial(_bin_layouts, store, settings=settings, footers=footers)
    for layouts in await _each(may, concurrency, work):
        found.update(layouts)
    return found


class _Steps:
    """The copy path's encode stage: the plan's steps in order, each re-encode step's rows
    (live rows only) through the encoder into row groups of its own, each copied row group
    into the batch counter (its footer's rows: one run with the source's other rows) and the
    stats (its footer's bounds, its float chunks' stats from their dictionary pages where
    those give them, its other :meth:`StatsAccumulator.batch_columns` decoded). Sources are
    fetched one at a time, in order; every source is started in order (its zero-length run),
    also one without row groups. A source none of whose rows is re-encoded is fetched only
    for the columns its copies decode and its patched ones, and not at all without any."""

    def __init__(
        self,
        store: ObjectStore,
        bin_: Bin,
        settings: RewriteSettings,
        planned: _Planned,
        encoder: _Encoder,
        patches: PatchFile,
    ) -> None:
        self._store, self._bin, self._settings = store, bin_, settings
        self._planned, self._encoder, self._patches = planned, encoder, patches
        self._floats = encoder.stats.float_columns()
        self._copied_groups: dict[int, dict[int, bytes]] = {}  # a source's copied RowGroups
        # a source's copied row groups' float stats its dictionary pages gave, once read
        self._given: dict[int, dict[int, dict[int, FloatStats]]] = {}
        self._patched: dict[int, list[str]] = {}  # a source's patched columns (all its copies')
        self._reencoded: set[int] = set()
        for step in planned.plan.steps:
            if isinstance(step, Copy):
                self._copied_groups.setdefault(step.source, {})[step.row_group] = step.group
                self._patched[step.source] = self._names(step)
            else:
                self._reencoded.update(run.source for run in step.runs)
        self._started = 0
        self._open: tuple[int, FetchedSource, DecodedSource] | None = None
        self._width = 0.0

    async def run(self) -> CopyPlan:
        """Feed every step; the plan with each re-encode run's rows as written (its live rows),
        which the encoded file's row groups must hold."""
        steps: list[Step] = []
        for step in self._planned.plan.steps:
            if isinstance(step, Copy):
                floats = (await self._float_stats(step.source))[step.row_group]
                columns = self._encoder.stats.batch_columns(floats)
                decoded = await self._source(step.source, decode=bool(columns or step.patched))
                await anyio.to_thread.run_sync(self._copied, step, decoded, columns, floats)
                steps.append(step)
                continue
            runs = []
            for run in step.runs:
                decoded = await self._source(run.source, decode=True)
                assert decoded is not None
                rows = await anyio.to_thread.run_sync(self._encode, run, decoded)
                runs.append(replace(run, rows=rows))
            await anyio.to_thread.run_sync(self._encoder.end_row_group)
            steps.append(Reencode(tuple(runs)))
        await self._source(len(self._bin.sources) - 1, decode=False)
        return CopyPlan(self._planned.plan.choices, tuple(steps))

    async def _source(self, index: int, *, decode: bool) -> DecodedSource | None:
        """Start every source up to ``index``; with ``decode``, source ``index`` opened."""
        footers = self._planned.footers
        while self._started <= index:
            start = _SourceStart(
                self._started, footers[self._started].num_rows, footers[self._started]
            )
            self._encoder.accept(start)
            self._started += 1
        if not decode:
            return None
        if self._open is None or self._open[0] != index:
            self.close()
            settings = self._settings
            fetched = await self._fetch(index)
            try:
                decoded = await anyio.to_thread.run_sync(
                    partial(DecodedSource, table=settings.table, version=settings.version),
                    fetched,
                    settings.read,
                )
            except BaseException:
                fetched.close()
                raise
            self._open = (index, fetched, decoded)
        return self._open[2]

    async def _float_stats(self, index: int) -> dict[int, dict[int, FloatStats]]:
        """The float stats of source ``index``'s copied row groups that their dictionary pages
        give, by row group (read once, for all of them: its fetch needs them all)."""
        if index not in self._given:
            key, groups = self._planned.keys[index], self._copied_groups[index]
            found: list[dict[int, FloatStats]] = [{} for _ in groups]
            if self._floats:
                found = await gather(
                    *(
                        float_stats(self._store, key, group, self._floats)
                        for group in groups.values()
                    )
                )
            self._given[index] = dict(zip(groups, found, strict=True))
        return self._given[index]

    async def _fetch(self, index: int) -> FetchedSource:
        """Source ``index``: whole, or from an object store, when it is read only for copied
        row groups' columns, those columns' chunks and its footer. A local store's file is
        read in place anyway.

        Raises:
            CorruptDataError: a chunk of the footer lies outside the file.
        """
        add, settings = self._bin.sources[index], self._settings
        if index in self._reencoded or self._store.local_files() is not None:
            return await fetch_source(self._store, add, settings.read, version=settings.version)
        try:
            given = await self._float_stats(index)
            stats = self._encoder.stats
            decoded = [name for floats in given.values() for name in stats.batch_columns(floats)]
            columns = dict.fromkeys((*decoded, *self._patched[index]))
            ranges = chunk_ranges(self._planned.footers[index], given, columns, add.size)
        except ValueError as exc:
            raise CorruptDataError(
                str(exc), table=settings.table, version=settings.version, path=add.path
            ) from exc
        span = self._planned.spans[index]
        return await fetch_projected(self._store, add, span, ranges, version=settings.version)

    def _copied(
        self,
        step: Copy,
        decoded: DecodedSource | None,
        names: Sequence[str],
        floats: dict[int, FloatStats],
    ) -> None:
        self._encoder.counter.record(step.source, step.rows)
        columns = None if decoded is None else decoded.columns(step.row_group, names)
        inexact = inexact_statistics(step.group)
        if step.patched:
            assert decoded is not None and self._open is not None
            source = self._planned.footers[step.source].schema
            patch = self._patches.transcode(
                step, source, self._open[1].read, self._patch_schema(step)
            ) or self._patches.add(self._patch(step, decoded))
            patched = inexact_statistics(patch.row_group())
            inexact = (inexact - set(step.patched)) | {step.patched[i] for i in patched}
        self._encoder.stats.update_copied_row_group(columns, step.rows, inexact, floats)

    def _names(self, step: Copy) -> list[str]:
        """The top-level names of a copy's patched columns."""
        schema = self._planned.footers[step.source].schema
        return [schema.column(column).path for column in step.patched]

    def _patch_schema(self, step: Copy) -> pa.Schema:
        """The output's fields of a copy's patched columns."""
        output = _output_schema(self._settings)
        return pa.schema([output.field(name) for name in self._names(step)])

    def _patch(self, step: Copy, decoded: DecodedSource) -> pa.Table:
        """The patched columns of a copied row group, decoded, as the output's fields."""
        return decoded.columns(step.row_group, self._names(step)).cast(self._patch_schema(step))

    def _encode(self, run: CopyRun, decoded: DecodedSource) -> int:
        rows = 0
        for batch in decoded.batches(self._width, range(run.first, run.stop)):
            if batch.num_rows:
                self._encoder.stats.update(batch)
            self._encoder.accept((run.source, batch))
            rows += batch.num_rows
        self._width = max(self._width, decoded.width)
        return rows

    def close(self) -> None:
        """Close the source held open (idempotent)."""
        if self._open is not None:
            self._open[1].close()
            self._open = None


def _file_footer(path: str) -> tuple[bytes, int]:
    """A local Parquet file's footer span and size."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - FOOTER_GUESS))
        tail = f.read()
        span = footer_span(tail, size)
        if span > len(tail):
            f.seek(size - span)
            tail = f.read()
    return tail[len(tail) - span :], size


def _patch_writer(
    sink: pa.NativeFile, schema: pa.Schema, *, settings: RewriteSettings
) -> pq.ParquetWriter:
    """The writer of a patch: the output's, for some of its fields."""
    return parquet_writer(sink, settings, schema=schema)


async def _encode_steps(
    store: ObjectStore, bin_: Bin, settings: RewriteSettings, planned: _Planned, local: LocalFiles
) -> tuple[Assembly, _Encoder]:
    """Write the re-encode steps into the local encoded file, the patched columns into the
    patches file, and lay the output out."""
    stats = StatsAccumulator(settings.stats, footer_schema=_output_schema(settings))
    encoder = _Encoder(settings, local.encoded, stats, footer_stats=False)
    patches = PatchFile(
        local.patches, partial(_patch_writer, settings=settings), _copy_codec(settings)
    )
    steps = _Steps(store, bin_, settings, planned, encoder, patches)
    try:
        plan = await steps.run()
        await anyio.to_thread.run_sync(encoder.close)
    except BaseException:
        encoder.discard()
        raise
    finally:
        steps.close()
    if encoder.writer is None:  # nothing re-encoded: the empty file gives the footer
        footer, size = _tail_footer(planned.empty), len(planned.empty)
    else:
        footer, size = await anyio.to_thread.run_sync(_file_footer, local.encoded)
    assembly = assemble(plan, footer, size, patches.patches)
    if stats.num_records != assembly.num_rows:
        raise InternalError(
            f"bin {bin_.bin_id}: stats saw {stats.num_records} rows, the output holds"
            f" {assembly.num_rows}"
        )
    return assembly, encoder


async def _write_output(
    store: ObjectStore, key: str, assembly: Assembly, planned: _Planned, encoded: LocalFiles
) -> tuple[ObjectMeta, CopiedBytes]:
    """Write the output's pieces to ``key`` and publish it."""
    files = store.local_files()
    if files is not None:
        file_writer = files.open_file_writer(key)
        async with file_writer:
            moved = await write_local(files, assembly, planned.keys, encoded, file_writer.path)
            return await file_writer.complete(), moved
    async with store.open_writer(key) as writer:
        moved = await write_streamed(store, writer, assembly, planned.keys, encoded)
        return await writer.complete(), moved


async def _check_written(
    store: ObjectStore, key: str, meta: ObjectMeta, assembly: Assembly, stats: StatsAccumulator
) -> None:
    """Read the output's footer back from storage (a ranged GET of its tail) and hold it to
    the assembly; hand it to the stats. Any failure deletes the output: the bin fails closed."""
    try:
        try:
            footer = await read_footer(store, key, meta.size)
        except ValueError as exc:
            raise InternalError(f"an output's footer cannot be read back: {exc}") from exc
        check_output(assembly, footer, meta.size)
        try:
            stats.add_footer(parse_footer(footer))
        except ValueError as exc:
            raise InternalError(f"an output's statistics: {exc}") from exc
    except BaseException:
        with anyio.CancelScope(shield=True):
            await store.delete(key)
        raise


async def _rewrite_copying(
    store: ObjectStore, bin_: Bin, settings: RewriteSettings, planned: _Planned
) -> RewrittenBin:
    """The bin's output from its plan: the re-encode steps through the encoder into a local
    temp file, then the output's pieces (copied ranges, encoded ranges, the footer) written to
    the store, its footer read back and checked before anything may commit it."""
    key = output_key(bin_, settings.partition_columns, settings.codec)
    paths = []
    for prefix in ("rlcd-encoded-", "rlcd-patches-"):
        fd, path = tempfile.mkstemp(prefix=prefix, suffix=".parquet")
        os.close(fd)
        paths.append(path)
    local = LocalFiles(*paths)
    try:
        assembly, encoder = await _encode_steps(store, bin_, settings, planned, local)
        try:
            meta, moved = await _write_output(store, key, assembly, planned, local)
        except (OSError, ValueError) as exc:
            raise CorruptDataError(
                f"the output's pieces could not be copied: {exc}",
                table=settings.table,
                version=settings.version,
            ) from exc
        await _check_written(store, key, meta, assembly, encoder.stats)
    finally:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    copied = sum(1 for step in planned.plan.steps if isinstance(step, Copy))
    patched = [c for c in planned.plan.choices if c.patched]
    log.info(
        "bin_copied",
        table=settings.table,
        bin=bin_.bin_id,
        copied_row_groups=copied,
        copied_bytes=moved.copied,
        server_copied_bytes=moved.server,
        reencoded_row_groups=len(assembly.row_groups) - copied,
        reencoded_bytes=moved.encoded,
        patched_row_groups=len(patched),
        reasons=sorted(
            {str(c.reason) for c in planned.plan.choices if c.reason is not None}
            | ({str(Reason.STORAGE)} if patched else set())
        ),
        decimals_as_integers=settings.decimals_as_integers,
        partition_columns_written=bool(settings.written_partitions),
    )
    physical = tuple(footer.num_rows for footer in planned.footers)
    live = [p - s.deleted_rows for p, s in zip(physical, bin_.sources, strict=True)]
    offsets = guard_offsets(encoder.counter.runs, live)
    return RewrittenBin(
        bin=bin_,
        key=key,
        path=encode_uri_path(key),
        size=meta.size,
        modification_time=meta.last_modified_ms,
        rows=assembly.num_rows,
        stats=encoder.stats.finish(tight_bounds=settings.tight_bounds),
        runs=encoder.counter.runs,
        physical_rows=physical,
        offsets=tuple(offsets) if offsets is not None else None,
        target_file_size=settings.target_file_size,
        copied_row_groups=copied,
        copied_bytes=moved.copied,
        server_copied_bytes=moved.server,
        reencoded_bytes=meta.size - moved.copied,
    )
