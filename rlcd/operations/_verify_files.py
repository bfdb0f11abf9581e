"""The files half of ``rlcd verify``: does storage hold what the current snapshot says?

For every live file: one HEAD (exists, size), its DV read and checked if it has one (a ranged
GET for a file DV, none for an inline one), and, only when a DV deletes rows and the stats lack
``numRecords``, the Parquet footer (one ranged GET of the file's tail, rarely two). A deep
check also reads each file that is there in full (:mod:`rlcd.operations._verify_deep`). The
rules that turn what was seen into problems are in :mod:`rlcd.operations._verify_rules`.

A fixed pool of ``concurrency`` workers takes the files one after the other, so at most that
many requests are in flight and no more tasks exist, however many files the table has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import anyio
import pyarrow as pa

from rlcd._tasks import primary_error
from rlcd.compaction.source import ReadOptions
from rlcd.delta.actions import AddFile
from rlcd.delta.load import read_deletion_vector
from rlcd.delta.partitions import object_key
from rlcd.delta.replay import Snapshot
from rlcd.errors import DeletionVectorError, MissingDataFileError, NotFoundError
from rlcd.operations._verify_deep import read_in_full
from rlcd.operations._verify_rules import FileObservation, FileProblem, FilesCheck, file_problems
from rlcd.parquet.footer import footer_span, parse_footer
from rlcd.storage.base import ObjectStore

__all__ = ("FILE_CHECK_CONCURRENCY", "check_files")

FILE_CHECK_CONCURRENCY = 16
"""Live files checked at once (so requests in flight) unless the caller says otherwise."""

_TAIL_GUESS = 64 * 1024  # one GET holds the footer of nearly every file


async def check_files(
    store: ObjectStore,
    snapshot: Snapshot,
    *,
    concurrency: int = FILE_CHECK_CONCURRENCY,
    deep: ReadOptions | None = None,
    on_file: Callable[[int, int], None] | None = None,
) -> FilesCheck:
    """Check every live file of ``snapshot`` against storage.

    Args:
        deep: the table's read options, to read every file that is there in full; ``None``
            checks sizes and DVs only.
        on_file: called with (files done, files in all) before the first and after each.

    Raises:
        StorageError: a request failed other than by finding nothing (e.g. access denied).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency {concurrency} is below 1")
    pending = iter(snapshot.files.values())
    problems: list[FileProblem] = []
    dvs = footers = read = done = 0
    report = on_file or (lambda _done, _total: None)
    report(0, len(snapshot.files))

    async def worker() -> None:
        nonlocal dvs, footers, read, done
        for add in pending:  # one shared iterator: each file goes to exactly one worker
            seen, footer_read = await _observe(store, add, version=snapshot.version)
            if deep is not None and seen.stored_size is not None:
                seen = await _read(store, seen, deep, version=snapshot.version)
                read += seen.stored_size is not None
            dvs += add.deletion_vector is not None
            footers += footer_read
            problems.extend(file_problems(seen))
            done += 1
            report(done, len(snapshot.files))

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(min(concurrency, len(snapshot.files))):
                tg.start_soon(worker)
    except BaseExceptionGroup as group:
        raise primary_error(group)  # noqa: B904 (the leaf keeps its own cause)
    return FilesCheck(
        version=snapshot.version,
        files=len(snapshot.files),
        dvs=dvs,
        footers=footers,
        problems=tuple(sorted(problems, key=lambda p: p.path)),
        read=read if deep is not None else None,
    )


async def _read(
    store: ObjectStore, seen: FileObservation, options: ReadOptions, *, version: int
) -> FileObservation:
    """``seen`` with what reading its file in full showed."""
    try:
        error = await read_in_full(store, seen.add, options, version=version)
    except MissingDataFileError:
        return replace(seen, stored_size=None)  # deleted since the HEAD
    return replace(seen, data_error=error)


async def _observe(
    store: ObjectStore, add: AddFile, *, version: int
) -> tuple[FileObservation, bool]:
    """What storage shows of ``add``, and whether its footer had to be read."""
    key = object_key(store.root, add.path)
    if key is None:
        return FileObservation(add, outside=True), False
    try:
        stored_size: int | None = (await store.head(key)).size
    except NotFoundError:
        stored_size = None
    dv_error, max_deleted = None, None
    if add.deletion_vector is not None:
        try:
            dv = await read_deletion_vector(store, add, version=version)
        except DeletionVectorError as exc:
            dv_error = exc.detail
        else:
            max_deleted = dv.max() if dv else None
    rows, rows_error = add.num_records, None
    footer_read = False
    if rows is None and max_deleted is not None and stored_size is not None:
        footer_read = True
        try:
            rows = await _footer_rows(store, key, stored_size)
        except NotFoundError:
            stored_size = None  # deleted since the HEAD
        except ValueError as exc:
            rows_error = str(exc)
    return FileObservation(
        add,
        stored_size=stored_size,
        dv_error=dv_error,
        max_deleted=max_deleted,
        rows=rows,
        rows_error=rows_error,
    ), footer_read


async def _footer_rows(store: ObjectStore, key: str, size: int) -> int:
    """The row count in the file's Parquet footer, read from its tail alone.

    Raises:
        ValueError: the tail is not a Parquet footer.
    """
    tail = await store.get(key, start=max(0, size - _TAIL_GUESS), end=size)
    need = footer_span(tail, size)
    if need > len(tail):
        tail = await store.get(key, start=size - need, end=size)
    return await anyio.to_thread.run_sync(_rows_in_footer, tail[-need:])


def _rows_in_footer(footer: bytes | bytearray) -> int:
    try:
        return int(parse_footer(footer).num_rows)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"unreadable footer: {exc}") from exc
