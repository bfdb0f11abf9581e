"""Removing what killed or failed runs of rlcd left in a table: the IO edge of
:mod:`rlcd.compaction._orphans`, which holds the rules.

:func:`clean_table` lists the table's unfinished writes and aborts rlcd's old ones, then lists
its files and, only when some are rlcd's and past the grace period, reads every file in
``_delta_log`` that can name data files, and deletes the candidates none names. The data files
are listed *before* the log is read: a file committed in between is then seen in the log; the
other order could miss that commit. A log file that cannot be read or decoded means doubt,
and doubt means no file is deleted (the report says why).

``rlcd compact`` runs it before planning; the daemon calls it periodically.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog

from rlcd._tasks import gather
from rlcd.compaction._orphans import (
    DEFAULT_GRACE_S,
    FileReference,
    References,
    expired_file,
    expired_upload,
    json_references,
    log_file_format,
    referenced,
    unreferenced,
)
from rlcd.delta.log_path import LOG_DIR
from rlcd.errors import NotFoundError, StorageError
from rlcd.storage.base import ObjectMeta, ObjectStore, PendingUpload

__all__ = ("CleanupReport", "clean_table", "DEFAULT_GRACE_S")

log = structlog.get_logger(__name__)

_READ_CONCURRENCY = 8

_T = TypeVar("_T", ObjectMeta, PendingUpload)


@dataclass(frozen=True, slots=True)
class CleanupReport:
    """What one cleanup removed (or, in a dry run, would remove).

    ``deleted``: complete files no log file names; ``aborted``: unfinished writes;
    ``failed``: ``(key, error)`` of removals the store refused; ``skipped``: why no file was
    judged (a log file could not be read), else None.
    """

    table: str
    grace_s: float
    dry_run: bool = False
    deleted: tuple[ObjectMeta, ...] = ()
    aborted: tuple[PendingUpload, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    skipped: str | None = None

    @property
    def removed(self) -> int:
        return len(self.deleted) + len(self.aborted)

    @property
    def bytes_deleted(self) -> int:
        return sum(m.size for m in self.deleted)


async def clean_table(
    store: ObjectStore,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    now_ms: int,
    dry_run: bool = False,
) -> CleanupReport:
    """Remove rlcd's leftovers in ``store``'s table older than ``grace_s`` (see the module
    docstring); with ``dry_run``, only say what would go.

    Raises:
        StorageError: the store failed listing or reading the log.
    """
    table = store.root

    async def expired_uploads() -> list[PendingUpload]:
        return [
            u
            async for u in store.list_uploads("")
            if expired_upload(u, now_ms=now_ms, grace_s=grace_s)
        ]

    async def expired_files() -> list[ObjectMeta]:
        return [m async for m in store.list("") if expired_file(m, now_ms=now_ms, grace_s=grace_s)]

    uploads, candidates = await gather(expired_uploads(), expired_files())
    skipped: str | None = None
    orphans: tuple[ObjectMeta, ...] = ()
    if candidates:
        try:
            orphans = unreferenced(candidates, await _log_references(store))
        except _Doubt as exc:
            skipped = str(exc)
            log.warning("cleanup_skipped", table=table, reason=skipped)
    failed: list[tuple[str, str]] = []
    if not dry_run:
        aborted = await _each(
            table, uploads, lambda u: store.abort_upload(u.key, u.upload_id), failed
        )
        deleted = await _each(table, orphans, lambda m: store.delete(m.key), failed)
    else:
        aborted, deleted = uploads, list(orphans)
    report = CleanupReport(
        table,
        grace_s,
        dry_run=dry_run,
        deleted=tuple(deleted),
        aborted=tuple(aborted),
        failed=tuple(failed),
        skipped=skipped,
    )
    if report.removed or failed:
        log.info(
            "orphans_removed" if not dry_run else "orphans_found",
            table=table,
            files=len(deleted),
            bytes=report.bytes_deleted,
            uploads=len(aborted),
            failed=len(failed),
            keys=[m.key for m in deleted] + [u.key for u in aborted],
        )
    return report


async def _each(
    table: str,
    items: Sequence[_T],
    remove: Callable[[_T], Awaitable[None]],
    failed: list[tuple[str, str]],
) -> list[_T]:
    """Remove each item in turn; those the store refused go to ``failed``, not raised (one
    undeletable file must not keep the others)."""
    done: list[_T] = []
    for item in items:
        try:
            await remove(item)
        except StorageError as exc:
            failed.append((item.key, str(exc)))
            log.warning("orphan_not_removed", table=table, key=item.key, error=str(exc))
        else:
            done.append(item)
    return done


class _Doubt(Exception):
    """A log file could not be read or decoded: which files it names is unknown."""


async def _log_references(store: ObjectStore) -> References:
    """Every file any commit, log compaction, checkpoint, sidecar or staged commit names."""
    keys = [m.key async for m in store.list(f"{LOG_DIR}/") if log_file_format(m.key)]
    found: list[FileReference] = []
    failures: list[Exception] = []
    limiter = anyio.CapacityLimiter(_READ_CONCURRENCY)

    async def read(key: str, cancel: anyio.CancelScope) -> None:
        try:
            async with limiter:
                found.extend(await _references_in(store, key))
        except (_Doubt, StorageError) as exc:
            failures.append(exc)  # the first failure stops the rest and is raised as itself
            cancel.cancel()

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(read, key, tg.cancel_scope)
    if failures:
        raise failures[0]
    try:
        return referenced(store.root, found)
    except ValueError as exc:
        raise _Doubt(f"a path in the log does not decode: {exc}") from exc


async def _references_in(store: ObjectStore, key: str) -> list[FileReference]:
    try:
        data = await store.get(key)
    except NotFoundError as exc:
        # removed since the listing: by a log cleanup, after a checkpoint this listing may
        # not have seen, which may name what this file named
        raise _Doubt(f"{key} vanished while the log was read") from exc
    try:
        if log_file_format(key) == "json":
            return list(json_references(data))
        return await anyio.to_thread.run_sync(_parquet_references, data)
    except (ValueError, pa.ArrowException, OSError) as exc:
        raise _Doubt(f"cannot read {key}: {exc}") from exc


def _parquet_references(data: bytes | bytearray) -> list[FileReference]:
    """The files a Parquet checkpoint or sidecar names (only its add, remove and cdc columns
    are read, and of those only the path and DV). Read without Arrow's threads: one of them
    dropping the last reference to these Python bytes would take the GIL, and at interpreter
    exit that aborts the process (see ``rlcd.delta.load._arrow_owned``)."""
    parquet = pq.ParquetFile(pa.BufferReader(data))
    columns = [c for c in ("add", "remove", "cdc") if c in parquet.schema_arrow.names]
    found: list[FileReference] = []
    for name in columns:
        for chunk in parquet.read(columns=[name], use_threads=False).column(name).chunks:
            struct = chunk.type
            paths = pc.struct_field(chunk, "path").to_pylist()
            dvs = (
                pc.struct_field(chunk, "deletionVector").to_pylist()
                if struct.get_field_index("deletionVector") >= 0
                else [None] * len(paths)
            )
            valid = pc.is_valid(chunk).to_pylist()
            found.extend(
                (path, dv)
                for ok, path, dv in zip(valid, paths, dvs, strict=True)
                if ok and isinstance(path, str)
            )
    return found
