"""Streaming rewrite of one bin into one Parquet file.

Sources are fetched ahead with bounded concurrency (a producer task feeding a small memory object
stream), decoded and encoded in worker threads, and the Parquet bytes go out through the store's
multipart writer as they are produced. At any time the bin holds at most ``prefetch`` fetched
sources, one decoded batch, the writer's open row group and one upload part: never the whole
bin. Each batch passes the batch counter (design §2) and the stats accumulator on its way to the
writer. Any failure aborts the upload, so a failed bin leaves no output behind.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pyarrow.parquet as pq
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from rlcd._tasks import primary_error
from rlcd.compaction.counter import BatchCounter, Run, guard_offsets
from rlcd.compaction.plan import Bin
from rlcd.compaction.source import DecodedSource, FetchedSource, ReadOptions, fetch_source
from rlcd.compaction.stats import StatsAccumulator, StatsSpec
from rlcd.delta.partitions import encode_uri_path, partition_dir
from rlcd.storage.base import ObjectStore, ObjectWriter

__all__ = ("RewriteSettings", "RewrittenBin", "rewrite_bin", "output_key")

_SINK_BUFFER = 1024 * 1024
_EXTENSIONS = {
    "zstd": "zstd",
    "snappy": "snappy",
    "gzip": "gz",
    "lz4": "lz4",
    "none": "uncompressed",
}


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
    tight_bounds: bool | None = True
    count_rows: bool = True


@dataclass(frozen=True, slots=True)
class RewrittenBin:
    """A bin whose output is written (or, when every row was deleted, needs none).

    ``offsets`` is each source's first output row when the capture guard held, else None (the
    bin is then committed untagged). ``physical_rows`` is each source's footer row count.
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


def output_key(bin: Bin, partition_columns: tuple[str, ...], codec: str) -> str:
    """A fresh, never reused key in the bin's partition directory, named like Spark's files."""
    name = f"part-00000-{uuid.uuid4()}-c000.{_EXTENSIONS[codec]}.parquet"
    if not partition_columns:
        return name
    return f"{partition_dir(bin.partition_values, partition_columns)}/{name}"


class _ThreadSink:
    """A write-only file for pyarrow, used from a worker thread: it buffers small writes and
    hands them to the async object writer on the event loop (blocking the thread meanwhile,
    which is the back-pressure)."""

    def __init__(self, writer: ObjectWriter) -> None:
        self._writer = writer
        self._buffer = bytearray()
        self.closed = False

    def write(self, data: Any) -> int:
        self._buffer += data
        if len(self._buffer) >= _SINK_BUFFER:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self._buffer:
            chunk, self._buffer = bytes(self._buffer), bytearray()
            anyio.from_thread.run(self._writer.write, chunk)

    def close(self) -> None:
        self.flush()
        self.closed = True


class _Encoder:
    """The per-bin state touched from worker threads, one call at a time."""

    def __init__(self, settings: RewriteSettings, sink: _ThreadSink) -> None:
        self.settings = settings
        self.sink = sink
        self.counter = BatchCounter(enabled=settings.count_rows)
        self.stats = StatsAccumulator(settings.stats)
        self.writer: pq.ParquetWriter | None = None
        self.physical: list[int] = []

    def encode(self, index: int, fetched: FetchedSource) -> None:
        s = self.settings
        decoded = DecodedSource(fetched, s.read, table=s.table, version=s.version)
        self.physical.append(decoded.physical_rows)
        self.counter.record(index, 0)
        for batch in decoded.batches():
            self.counter.record(index, batch.num_rows)
            if batch.num_rows:
                self.stats.update(batch)
                self._writer().write_batch(batch, row_group_size=s.row_group_rows)

    def _writer(self) -> pq.ParquetWriter:
        if self.writer is None:
            self.writer = pq.ParquetWriter(
                self.sink,
                self.settings.read.target,
                compression=self.settings.codec,
                write_statistics=True,
                use_compliant_nested_type=True,
            )
        return self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.sink.close()


async def _prefetch(
    store: ObjectStore,
    bin: Bin,
    settings: RewriteSettings,
    send: ObjectSendStream[FetchedSource],
) -> None:
    """Fetch the sources in order into ``send``. On failure the stream is left open (the bin
    closes it), so the consumer is cancelled by the failure instead of seeing an early end."""
    for add in bin.sources:
        fetched = await fetch_source(store, add, settings.read, version=settings.version)
        try:
            await send.send(fetched)
        except BaseException:
            fetched.close()
            raise
    await send.aclose()


def _discard(receive: ObjectReceiveStream[FetchedSource]) -> None:
    """Close sources fetched ahead that will not be written (deletes their spill files)."""
    while True:
        try:
            receive.receive_nowait().close()
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return


async def rewrite_bin(
    store: ObjectStore,
    bin: Bin,
    settings: RewriteSettings,
    *,
    limiter: anyio.CapacityLimiter | None = None,
) -> RewrittenBin:
    """Write the bin's live rows, source after source, into one new object.

    Raises:
        CorruptDataError, DeletionVectorError: a source cannot be read; nothing is left behind.
        StorageError: the store failed; the upload is aborted.
    """
    try:
        return await _rewrite(store, bin, settings, limiter)
    except BaseExceptionGroup as group:
        raise primary_error(group)  # noqa: B904 (the leaf keeps its own cause)


async def _rewrite(
    store: ObjectStore,
    bin: Bin,
    settings: RewriteSettings,
    limiter: anyio.CapacityLimiter | None,
) -> RewrittenBin:
    key = output_key(bin, settings.partition_columns, settings.codec)
    send, receive = anyio.create_memory_object_stream[FetchedSource](max(0, settings.prefetch - 1))
    with send, receive:
        async with store.open_writer(key) as writer, anyio.create_task_group() as tg:
            encoder = _Encoder(settings, _ThreadSink(writer))
            tg.start_soon(_prefetch, store, bin, settings, send)
            try:
                for index in range(len(bin.sources)):
                    fetched = await receive.receive()
                    try:
                        await anyio.to_thread.run_sync(
                            encoder.encode, index, fetched, limiter=limiter
                        )
                    finally:
                        fetched.close()
                await anyio.to_thread.run_sync(encoder.close, limiter=limiter)
            except BaseException:
                tg.cancel_scope.cancel()
                _discard(receive)
                raise
            rows = encoder.stats.num_records
            meta = await writer.complete() if rows else None
            if meta is None:
                await writer.abort()
    physical = tuple(encoder.physical)
    live = [p - s.deleted_rows for p, s in zip(physical, bin.sources, strict=True)]
    offsets = guard_offsets(encoder.counter.runs, live)
    if meta is None:
        return RewrittenBin(bin, None, None, 0, 0, 0, None, encoder.counter.runs, physical, None)
    return RewrittenBin(
        bin=bin,
        key=key,
        path=encode_uri_path(key),
        size=meta.size,
        modification_time=meta.last_modified_ms,
        rows=rows,
        stats=encoder.stats.finish(tight_bounds=settings.tight_bounds),
        runs=encoder.counter.runs,
        physical_rows=physical,
        offsets=tuple(offsets) if offsets is not None else None,
    )
