"""The IO of the copy path (issue 39): sources' footers in, the output's bytes out.

A bin's rewrite with ``rewrite = "auto"`` plans, from each source's footer, which row groups
are copied as they are (:mod:`rlcd.parquet.copy_plan`); the rest is re-encoded into a local
*encoded* file (and the patched columns of row groups copied with patches into a local
*patches* file), and :mod:`rlcd.parquet.assemble` lays the output out of them. This module
reads the footers (ranged GETs of each file's tail), writes the output's pieces (on a local
store with ``os.copy_file_range``, falling back to reads and writes; elsewhere into the
store's multipart writer, a long range copied by the store itself where the writer can, as
S3's ``UploadPartCopy`` does, the rest by ranged GETs of the sources) and reads the output's
footer back for :func:`~rlcd.parquet.assemble.check_output`; and the dictionary pages of copied
float chunks, whose stats they can give (:func:`float_stats`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import anyio.to_thread
import structlog

from rlcd._tasks import gather
from rlcd.errors import CopyRefusedError, NotFoundError
from rlcd.parquet.assemble import Assembly, EncodedRange, PatchRange, Piece, SourceRange
from rlcd.parquet.dictionary import FloatStats, dictionary_range
from rlcd.parquet.dictionary import float_stats as chunk_float_stats
from rlcd.parquet.footer import MAGIC, footer_span
from rlcd.storage.base import LocalFiles as StoreFiles
from rlcd.storage.base import ObjectStore, ObjectWriter, PartCopier

__all__ = (
    "FOOTER_GUESS",
    "LocalFiles",
    "CopiedBytes",
    "FooterCache",
    "read_footer",
    "float_stats",
    "write_local",
    "write_streamed",
)

FOOTER_GUESS: Final = 64 * 1024
"""Bytes of a file's tail fetched at once for its footer: most footers fit; a longer one
takes a second GET."""
_CHUNK: Final = 8 * 1024 * 1024
"""The most bytes of a range held at once while streaming it (one multipart part's worth)."""

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LocalFiles:
    """The local files the output's encoded pieces come from: the encoded file's path and
    the patches file's."""

    encoded: str
    patches: str

    def path(self, piece: EncodedRange | PatchRange) -> str:
        """The file ``piece`` is a range of."""
        return self.encoded if isinstance(piece, EncodedRange) else self.patches


@dataclass(frozen=True, slots=True)
class CopiedBytes:
    """What writing an output moved: bytes of copied row groups and of encoded ones, and of
    the copied, those the store copied itself (``server``: they never passed through rlcd)."""

    copied: int
    encoded: int
    server: int = 0


class FooterCache:
    """Footer spans read while planning, by object key, held for the rewrite that reads them
    again, up to ``budget`` bytes (beyond it a span is not kept and is read again): one GET
    per source, not two, in bounded memory. A span is given out once."""

    def __init__(self, budget: int) -> None:
        self._spans: dict[str, bytes] = {}
        self._room = budget

    def put(self, key: str, span: bytes) -> None:
        """Keep ``span`` if there is room."""
        if key not in self._spans and len(span) <= self._room:
            self._spans[key] = span
            self._room -= len(span)

    def take(self, key: str) -> bytes | None:
        """The span of ``key`` if held, no longer held."""
        span = self._spans.pop(key, None)
        if span is not None:
            self._room += len(span)
        return span


async def read_footer(store: ObjectStore, key: str, size: int) -> bytes:
    """The footer span (metadata, length, magic) of the ``size``-byte object ``key``, from
    one ranged GET of its tail (two for a long footer).

    Raises:
        ValueError: the tail is not a Parquet footer's.
        NotFoundError: the object is missing.
    """
    tail = await store.get(key, start=max(0, size - FOOTER_GUESS), end=size)
    if len(tail) != min(size, FOOTER_GUESS):
        raise ValueError(f"{key} holds {len(tail)} bytes of a {size}-byte tail")
    span = footer_span(tail, size)
    if span > len(tail):
        tail = await store.get(key, start=size - span, end=size)
    return bytes(tail[len(tail) - span :])


async def float_stats(
    store: ObjectStore, key: str, group: bytes, columns: Sequence[int]
) -> dict[int, FloatStats]:
    """The stats of those float ``columns`` of the thrift ``RowGroup`` ``group`` (of the object
    ``key``) that their dictionary pages give (:mod:`rlcd.parquet.dictionary`): one ranged GET
    per page. A column left out is decoded as before, as is every one of a missing object
    (its fetch then says so)."""
    ranges = {c: r for c in columns if (r := dictionary_range(group, c)) is not None}
    try:
        pages = await gather(*(store.get(key, start=a, end=b) for a, b in ranges.values()))
    except NotFoundError:
        return {}
    found: dict[int, FloatStats] = {}
    for column, page in zip(ranges, pages, strict=True):
        stats = await anyio.to_thread.run_sync(chunk_float_stats, group, column, bytes(page))
        if stats is not None:
            found[column] = stats
    return found


def _pieces_sizes(assembly: Assembly) -> CopiedBytes:
    copied = sum(p.stop - p.start for p in assembly.pieces if isinstance(p, SourceRange))
    encoded = sum(
        p.stop - p.start for p in assembly.pieces if isinstance(p, EncodedRange | PatchRange)
    )
    return CopiedBytes(copied, encoded)


def _copy_range(source: int, target: int, start: int, length: int) -> None:
    """``length`` bytes of ``source`` from ``start`` appended at ``target``'s position: by
    ``os.copy_file_range`` (no bytes through this process; the filesystem may share extents),
    else, where the platform or the filesystems refuse it, by reads and writes."""
    position, end = start, start + length
    copy = getattr(os, "copy_file_range", None)
    while copy is not None and position < end:
        try:
            done = copy(source, target, end - position, position)
        except OSError:  # EXDEV, ENOSYS, EINVAL: filesystems that cannot; copy by hand
            break
        if done == 0:
            raise OSError(f"a source ends at {position}, before {end}")
        position += done
    while position < end:
        data = os.pread(source, min(_CHUNK, end - position), position)
        if not data:
            raise OSError(f"a source ends at {position}, before {end}")
        os.write(target, data)  # a regular file takes every byte
        position += len(data)


def _write_local(assembly: Assembly, sources: Sequence[str], encoded: LocalFiles, out: str) -> None:
    opened: dict[str, int] = {}  # by path
    target = os.open(out, os.O_WRONLY | os.O_TRUNC)
    try:
        for piece in assembly.pieces:
            if isinstance(piece, bytes):
                os.write(target, piece)
                continue
            path = sources[piece.source] if isinstance(piece, SourceRange) else encoded.path(piece)
            if path not in opened:
                opened[path] = os.open(path, os.O_RDONLY)
            _copy_range(opened[path], target, piece.start, piece.stop - piece.start)
    finally:
        for fd in (target, *opened.values()):
            os.close(fd)


async def write_local(
    files: StoreFiles, assembly: Assembly, sources: Sequence[str], encoded: LocalFiles, out: str
) -> CopiedBytes:
    """Write the output's pieces into the file ``out`` (a store's temp file, published by its
    writer afterwards), the sources being the objects ``sources`` (keys, by index) and the
    encoded pieces those of the local files ``encoded``; in a worker thread."""
    paths = [files.local_path(key) for key in sources]
    await anyio.to_thread.run_sync(_write_local, assembly, paths, encoded, out)
    return _pieces_sizes(assembly)


def _read_encoded(path: str, start: int, stop: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


async def _write_range(
    store: ObjectStore,
    writer: ObjectWriter,
    source: str,
    start: int,
    stop: int,
    *,
    local: bool = False,
) -> None:
    """The bytes ``[start, stop)`` of the object ``source`` (ranged GETs) or, with ``local``,
    of the local file at the path ``source``, written to ``writer`` a chunk at a time."""
    for begin in range(start, stop, _CHUNK):
        end = min(stop, begin + _CHUNK)
        if local:
            data = await anyio.to_thread.run_sync(_read_encoded, source, begin, end)
        else:
            data = bytes(await store.get(source, start=begin, end=end))
        if len(data) != end - begin:
            raise ValueError(f"a range {begin}:{end} read back {len(data)} bytes")
        await writer.write(data)


async def _magic_joined(
    store: ObjectStore, copier: PartCopier, pieces: tuple[Piece, ...], sources: Sequence[str]
) -> tuple[Piece, ...]:
    """The pieces with the leading magic taken into the first source's range when that range
    follows it at once and is long enough to copy: every Parquet file starts with the same 4
    bytes, so the store copies them too, where else the first part would have to be filled
    by fetching its first 5 MiB. The source's first 4 bytes are read to be sure."""
    if len(pieces) < 2 or pieces[0] != MAGIC:
        return pieces
    first = pieces[1]
    if not isinstance(first, SourceRange) or first.start != len(MAGIC):
        return pieces
    if copier.lead(first.stop) is None:
        return pieces
    if bytes(await store.get(sources[first.source], start=0, end=len(MAGIC))) != MAGIC:
        return pieces
    return (SourceRange(first.source, 0, first.stop), *pieces[2:])


async def write_streamed(
    store: ObjectStore,
    writer: ObjectWriter,
    assembly: Assembly,
    sources: Sequence[str],
    encoded: LocalFiles,
) -> CopiedBytes:
    """Write the output's pieces into the store's streaming ``writer``: the encoded ranges
    from the local files ``encoded``, the sources' ranges (of the objects ``sources``,
    keys by index) copied by the store where the writer has a
    :class:`~rlcd.storage.base.PartCopier` and the range is long enough, else by ranged GETs;
    at most one chunk held at a time. A refused copy (the copy source's permissions) is
    logged once (``part_copy_refused``) and the rest of the output is fetched.

    Raises:
        StorageError, NotFoundError: a GET or the upload failed.
        ValueError: a range read back short.
    """
    copier = writer.part_copier()
    pieces = assembly.pieces
    if copier is not None:
        pieces = await _magic_joined(store, copier, pieces, sources)
    server = 0
    for piece in pieces:
        if isinstance(piece, bytes):
            await writer.write(piece)
            continue
        if not isinstance(piece, SourceRange):
            path = encoded.path(piece)
            await _write_range(store, writer, path, piece.start, piece.stop, local=True)
            continue
        source, start = sources[piece.source], piece.start
        lead = None if copier is None else copier.lead(piece.stop - start)
        if copier is not None and lead is not None:
            await _write_range(store, writer, source, start, start + lead)
            start += lead
            try:
                await copier.copy(source, start, piece.stop)
            except CopyRefusedError as exc:
                _log.warning("part_copy_refused", key=writer.key, error=str(exc))
                copier = None
            else:
                server += piece.stop - start
                continue
        await _write_range(store, writer, source, start, piece.stop)
    sizes = _pieces_sizes(assembly)
    # a leading magic the store copied is no row group's byte
    server = max(0, server - (len(MAGIC) if pieces[0] != MAGIC else 0))
    return CopiedBytes(sizes.copied, sizes.encoded, server)
