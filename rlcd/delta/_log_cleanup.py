"""Expired log cleanup: the IO around :mod:`rlcd.delta._log_retention`'s rules.

Runs after rlcd wrote a checkpoint, when ``delta.enableExpiredLogCleanup`` (default true)
allows: list ``_delta_log`` with modification times, read ``_last_checkpoint``, and delete what
the rules give, oldest version first, in batches of at most
:data:`~rlcd.storage.base.DELETE_BATCH`, then the Hadoop checksums (``.NAME.crc``) of what was
deleted, which Spark leaves beside every file it writes to a local or HDFS path. On a
``v2Checkpoint`` table the kept checkpoint's sidecars must all be listed first (else nothing is
deleted: that checkpoint could not be read), and after checkpoints were deleted, the sidecars
none of the remaining checkpoints names go too.
A failure midway leaves a log every version inside the window can still be read from: only
files of versions before the kept checkpoint are ever deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from rlcd.delta._log_retention import (
    ExpiredLog,
    LogFile,
    expired_log,
    expired_sidecars,
    sidecar_sources,
)
from rlcd.delta.intervals import parse_interval
from rlcd.delta.load import (
    _last_checkpoint_version,
    list_log_files,
    read_sidecar_names,
    table_config,
)
from rlcd.delta.log_path import LOG_DIR, SIDECAR_DIR
from rlcd.delta.replay import Snapshot
from rlcd.errors import CorruptLogError
from rlcd.storage.base import DELETE_BATCH, ObjectStore

__all__ = ("LogCleaned", "clean_expired_log", "ENABLED_KEY", "RETENTION_KEY")

ENABLED_KEY: Final = "delta.enableExpiredLogCleanup"
RETENTION_KEY: Final = "delta.logRetentionDuration"
DEFAULT_RETENTION: Final = "interval 30 days"
V2_FEATURE: Final = "v2Checkpoint"


@dataclass(frozen=True, slots=True)
class LogCleaned:
    """A cleanup deleted ``files`` log files (``sidecars`` of them sidecars) of ``bytes``,
    every version before the checkpoint of ``kept``."""

    kept: int
    files: int
    sidecars: int
    bytes: int


def _cutoff(snapshot: Snapshot, now_ms: int) -> int | None:
    """Now minus the table's log retention; None when cleanup is disabled."""
    properties = table_config(snapshot).properties
    if str(properties.get(ENABLED_KEY, "true")).strip().lower() == "false":
        return None
    try:
        return now_ms - parse_interval(properties.get(RETENTION_KEY, DEFAULT_RETENTION))
    except ValueError as exc:
        raise CorruptLogError(
            f"table property {RETENTION_KEY}: {exc}", table=snapshot.table, version=snapshot.version
        ) from exc


async def _checksums(store: ObjectStore, keys: Iterable[str]) -> list[str]:
    """The Hadoop checksum files of ``keys`` that the log holds (one LIST of its hidden
    names, which sort before the versioned files)."""
    wanted = {f"{LOG_DIR}/.{k.rsplit('/', 1)[-1]}.crc" for k in keys}
    return [meta.key async for meta in store.list(f"{LOG_DIR}/.") if meta.key in wanted]


async def _delete(store: ObjectStore, keys: list[str]) -> None:
    for i in range(0, len(keys), DELETE_BATCH):
        await store.delete_many(keys[i : i + DELETE_BATCH])


async def clean_expired_log(
    store: ObjectStore, snapshot: Snapshot, *, now_ms: int
) -> LogCleaned | None:
    """Delete the log files of ``snapshot``'s table that expired by ``now_ms``; None when
    nothing had (or cleanup is disabled).

    Raises:
        CorruptLogError: the retention property is not an interval, commits are missing
            after the kept checkpoint, or its sidecars are; nothing was deleted.
        StorageError: the store failed; what was deleted had expired.
    """
    cutoff = _cutoff(snapshot, now_ms)
    if cutoff is None:
        return None
    table = snapshot.table
    listed = await list_log_files(store)
    files = [LogFile(path, meta.last_modified_ms) for path, meta in listed]
    sizes = {path.key: meta.size for path, meta in listed}
    plan = expired_log(
        files, cutoff_ms=cutoff, hinted=await _last_checkpoint_version(store), table=table
    )
    if plan.kept is None or not plan.keys:
        return None
    sidecars: dict[str, tuple[int, int]] = {}
    if V2_FEATURE in table_config(snapshot).writer_features:
        async for meta in store.list(f"{SIDECAR_DIR}/"):
            name = meta.key.rsplit("/", 1)[-1]
            if not name.startswith("."):  # Hadoop's checksums go with their file
                sidecars[name] = (meta.last_modified_ms, meta.size)
        await _check_kept(store, files, plan, sidecars, table=table)
    await _delete(store, list(plan.keys))
    await _delete(store, await _checksums(store, plan.keys))
    doomed: list[str] = []
    if plan.checkpoints and sidecars:
        referenced: set[str] = set()
        for path in sidecar_sources(files, plan.kept):
            referenced |= await read_sidecar_names(store, path, table=table)
        doomed = expired_sidecars(
            ((n, ms) for n, (ms, _) in sidecars.items()), referenced, cutoff_ms=cutoff
        )
        await _delete(store, [f"{SIDECAR_DIR}/{x}" for n in doomed for x in (n, f".{n}.crc")])
    return LogCleaned(
        kept=plan.kept,
        files=len(plan.keys) + len(doomed),
        sidecars=len(doomed),
        bytes=sum(sizes[k] for k in plan.keys) + sum(sidecars[n][1] for n in doomed),
    )


async def _check_kept(
    store: ObjectStore,
    files: list[LogFile],
    plan: ExpiredLog,
    sidecars: dict[str, tuple[int, int]],
    *,
    table: str,
) -> None:
    """Every sidecar a checkpoint file of the kept version names is listed."""
    assert plan.kept is not None
    kept = [p for p in sidecar_sources(files, plan.kept) if p.version == plan.kept]
    for path in kept:
        missing = sorted(await read_sidecar_names(store, path, table=table) - sidecars.keys())
        if missing:
            raise CorruptLogError(
                f"sidecar {missing[0]} of the checkpoint that would stay is missing; "
                "expired log cleanup deletes nothing",
                table=table,
                version=plan.kept,
                path=path.key,
            )
