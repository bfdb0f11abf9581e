"""Writing a snapshot's checkpoint and the ``_last_checkpoint`` hint (issue 41).

Theory of operation (delta-protocol.md §1.3-§1.5, §6.1 step 6):

- A checkpoint of version v holds the snapshot's protocol, metaData, txns, live domains, live
  adds and the tombstones not yet expired (``deletionTimestamp`` within
  ``delta.deletedFileRetentionDuration``, default a week, of now; a missing timestamp counts as
  expired, as vacuum counts it). The schema and rows are :mod:`rlcd.delta._checkpoint_rows`'.
- A table with the ``v2Checkpoint`` writer feature gets a V2 checkpoint named
  ``<v>.checkpoint.<uuid>.parquet`` with its ``checkpointMetadata`` row, all actions inline (no
  sidecars: a single-file V2 checkpoint is valid); any other a classic
  ``<v>.checkpoint.parquet``. Never multi-part.
- Memory stays bounded: the live files and tombstones become rows straight from the snapshot's
  Arrow columns, :data:`BATCH_ACTIONS` rows at a time, each batch one Parquet row group, never
  an object per file; in a worker thread writing a local temp file, then uploaded.
- Never over someone else's: a version whose listing shows a checkpoint (any kind) is left
  alone, and the upload is a put-if-absent up to :data:`PUT_LIMIT` bytes. A larger file streams
  through the store's writer, whose completion replaces atomically: only another engine's
  checkpoint of the same version, written in the same instant, could be replaced, by one of
  the same content.
- ``_last_checkpoint`` is written after the checkpoint, and only when it would move forward.
- :func:`checkpoint_and_clean` writes a checkpoint and, when it wrote one, cleans up the
  expired log (:mod:`rlcd.delta._log_cleanup`): every caller (the CLI, the daemon, the hook)
  goes through it.
- :func:`checkpoint_after_commit` is the writers' post-commit hook: when the committed version
  is a multiple of ``delta.checkpointInterval`` (default 10, as Spark; never version 0) it
  writes the checkpoint, and any failure is a logged warning, never the commit's failure.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog

from rlcd.delta._checkpoint_rows import (
    CheckpointLayout,
    add_rows,
    checkpoint_layout,
    other_rows,
    remove_rows,
)
from rlcd.delta._last_checkpoint import last_checkpoint_document
from rlcd.delta._log_cleanup import LogCleaned, clean_expired_log
from rlcd.delta.actions import Action, Metadata
from rlcd.delta.intervals import parse_interval
from rlcd.delta.load import _last_checkpoint_version, list_log, table_config
from rlcd.delta.log_path import LAST_CHECKPOINT, LOG_DIR
from rlcd.delta.replay import Snapshot, replay
from rlcd.errors import CorruptLogError
from rlcd.storage.base import ObjectStore, Written

__all__ = (
    "CHECKPOINT_INTERVAL_KEY",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "CheckpointWritten",
    "CheckpointExists",
    "CheckpointRun",
    "LogCleaned",
    "checkpoint_interval",
    "checkpoint_due",
    "write_checkpoint",
    "checkpoint_and_clean",
    "checkpoint_after_commit",
)

CHECKPOINT_INTERVAL_KEY: Final = "delta.checkpointInterval"
DEFAULT_CHECKPOINT_INTERVAL: Final = 10
RETENTION_KEY: Final = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION: Final = "interval 1 week"
V2_FEATURE: Final = "v2Checkpoint"
BATCH_ACTIONS: Final = 10_000
"""File rows per row group: the slice of the snapshot's columns converted at once (its
``stats_parsed`` values are the only Python values made per file)."""
PUT_LIMIT: Final = 64 * 1024 * 1024
"""Checkpoints up to this size are uploaded by one put-if-absent."""
_CHUNK: Final = 8 * 1024 * 1024

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointWritten:
    """rlcd wrote the checkpoint of ``version`` at ``key``: ``actions`` rows (the hint's
    ``size``), ``add_files`` of them live files, ``size_in_bytes`` of Parquet."""

    version: int
    key: str
    actions: int
    add_files: int
    size_in_bytes: int


@dataclass(frozen=True, slots=True)
class CheckpointExists:
    """``version`` already had a checkpoint at ``key``; nothing was written."""

    version: int
    key: str


def checkpoint_interval(configuration: Any) -> int:
    """``delta.checkpointInterval`` (default 10).

    Raises:
        ValueError: the property is not a positive integer.
    """
    raw = configuration.get(CHECKPOINT_INTERVAL_KEY)
    if raw is None:
        return DEFAULT_CHECKPOINT_INTERVAL
    try:
        interval = int(str(raw).strip())
    except ValueError:
        interval = 0
    if interval < 1:
        raise ValueError(f"{CHECKPOINT_INTERVAL_KEY} is {raw!r}, not a positive integer")
    return interval


def checkpoint_due(version: int, configuration: Any) -> bool:
    """Whether a commit of ``version`` is followed by a checkpoint (Spark's rule)."""
    return version > 0 and version % checkpoint_interval(configuration) == 0


def _other_actions(snapshot: Snapshot, *, v2: bool) -> Iterator[Action | int]:
    """The snapshot's actions other than files; the int is V2's ``checkpointMetadata`` row."""
    yield snapshot.protocol
    yield snapshot.metadata
    yield from snapshot.txns.values()
    yield from snapshot.domains.values()
    if v2:
        yield snapshot.version


def _batches(
    snapshot: Snapshot, layout: CheckpointLayout, cutoff_ms: int
) -> Iterator[pa.RecordBatch]:
    """The checkpoint's rows, one batch per row group: the other actions, then the live files and
    the tombstones not yet expired, :data:`BATCH_ACTIONS` rows of the snapshot's columns at a
    time (never an object per file)."""
    yield other_rows(_other_actions(snapshot, v2=layout.v2), layout)
    adds = snapshot.adds
    for start in range(0, adds.num_rows, BATCH_ACTIONS):
        yield add_rows(adds.slice(start, BATCH_ACTIONS), layout)
    tombstones = snapshot.tombstone_rows
    when = pc.fill_null(tombstones["deletion_timestamp"], 0)
    kept = pc.indices_nonzero(pc.greater(when, cutoff_ms))
    for start in range(0, len(kept), BATCH_ACTIONS):
        yield remove_rows(tombstones.take(kept.slice(start, BATCH_ACTIONS)), layout)


def _write_parquet(
    path: Path, layout: CheckpointLayout, batches: Iterator[pa.RecordBatch]
) -> tuple[int, int]:
    """Write the checkpoint file (in a worker thread), a row group per batch; its rows and
    bytes."""
    count = 0
    with pq.ParquetWriter(path, layout.schema, compression="snappy") as writer:
        for batch in batches:
            writer.write_batch(batch)
            count += batch.num_rows
    return count, path.stat().st_size


async def _publish(store: ObjectStore, key: str, path: Path, size: int, put_limit: int) -> bool:
    """Upload the file at ``path`` (``size`` bytes) to ``key`` unless the key is taken;
    whether it was uploaded."""
    if size <= put_limit:
        data = await anyio.to_thread.run_sync(path.read_bytes)
        return isinstance(await store.put_if_absent(key, data), Written)
    async with store.open_writer(key) as writer:
        with path.open("rb") as f:
            while chunk := await anyio.to_thread.run_sync(f.read, _CHUNK):
                await writer.write(chunk)
    return True


async def write_checkpoint(
    store: ObjectStore,
    snapshot: Snapshot,
    *,
    now_ms: int | None = None,
    put_limit: int = PUT_LIMIT,
) -> CheckpointWritten | CheckpointExists:
    """Write the checkpoint of ``snapshot`` (its version must be in the log), then
    ``_last_checkpoint``.

    Args:
        now_ms: the clock tombstone expiry counts from (default: now).
        put_limit: the largest file uploaded by one put-if-absent.

    Raises:
        UnsupportedFeatureError: rlcd cannot write this table.
        CorruptLogError: the snapshot cannot be checkpointed (a live file's partition value
            does not fit its column, an unreadable schema or retention property).
        StorageError: the store failed; a checkpoint left behind is complete or absent.
    """
    config = table_config(snapshot)
    config.ensure_writable()
    version, table = snapshot.version, snapshot.table
    listed = await list_log(store, after_version=version)
    existing = next((p for p in listed if p.version == version and p.is_checkpoint), None)
    if existing is not None:
        return CheckpointExists(version, existing.key)
    v2 = V2_FEATURE in config.writer_features
    name = f"{version:020d}.checkpoint.{uuid.uuid4()}.parquet" if v2 else None
    key = f"{LOG_DIR}/{name or f'{version:020d}.checkpoint.parquet'}"
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        retention = parse_interval(config.properties.get(RETENTION_KEY, DEFAULT_RETENTION))
        layout = checkpoint_layout(snapshot.metadata, v2=v2)
    except (ValueError, KeyError) as exc:
        raise CorruptLogError(f"cannot checkpoint: {exc}", table=table, version=version) from exc
    batches = _batches(snapshot, layout, now - retention)
    with tempfile.TemporaryDirectory(prefix="rlcd-checkpoint-") as tmp:
        path = Path(tmp) / "checkpoint.parquet"
        try:
            count, size = await anyio.to_thread.run_sync(_write_parquet, path, layout, batches)
        except (ValueError, pa.ArrowException) as exc:
            raise CorruptLogError(
                f"cannot checkpoint: {exc}", table=table, version=version, path=key
            ) from exc
        if not await _publish(store, key, path, size, put_limit):
            return CheckpointExists(version, key)
    written = CheckpointWritten(version, key, count, snapshot.num_files, size)
    hinted = await _last_checkpoint_version(store)
    if hinted is None or hinted < version:
        document = last_checkpoint_document(
            version=version, size=count, size_in_bytes=size, num_of_add_files=written.add_files
        )
        await store.put(LAST_CHECKPOINT, document)
    return written


@dataclass(frozen=True, slots=True)
class CheckpointRun:
    """What :func:`checkpoint_and_clean` did: the checkpoint, then the log cleanup after a
    checkpoint written (None: nothing expired, cleanup disabled, or no checkpoint written)."""

    checkpoint: CheckpointWritten | CheckpointExists
    cleaned: LogCleaned | None


async def checkpoint_and_clean(
    store: ObjectStore, snapshot: Snapshot, *, now_ms: int | None = None
) -> CheckpointRun:
    """Write the checkpoint of ``snapshot`` (:func:`write_checkpoint`), then, when one was
    written, clean up the expired log (delta-protocol.md's rule in
    :mod:`rlcd.delta._log_retention`); one log event for each that did something.

    Raises:
        as :func:`write_checkpoint`, and CorruptLogError or StorageError from the cleanup
        (the checkpoint is written then).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    result = await write_checkpoint(store, snapshot, now_ms=now)
    if not isinstance(result, CheckpointWritten):
        return CheckpointRun(result, None)
    _log.info(
        "checkpoint_written",
        table=snapshot.table,
        version=result.version,
        path=result.key,
        actions=result.actions,
        bytes=result.size_in_bytes,
    )
    cleaned = await clean_expired_log(store, snapshot, now_ms=now)
    if cleaned is not None:
        _log.info(
            "log_cleaned",
            table=snapshot.table,
            kept_checkpoint=cleaned.kept,
            files=cleaned.files,
            sidecars=cleaned.sidecars,
            bytes=cleaned.bytes,
        )
    return CheckpointRun(result, cleaned)


async def checkpoint_after_commit(
    store: ObjectStore, base: Snapshot, version: int, actions: Sequence[Action]
) -> CheckpointRun | None:
    """After our commit of ``actions`` as ``version`` onto ``base``: write that version's
    checkpoint when it is due, and clean up the expired log. Never raises for a failure to
    do so (a warning is logged): the commit has landed, and a checkpoint is only an
    optimisation for readers."""
    table = store.root
    metadata = next((a for a in actions if isinstance(a, Metadata)), base.metadata)
    try:
        if not checkpoint_due(version, metadata.configuration):
            return None
        return await checkpoint_and_clean(store, replay(table, [(version, actions)], base=base))
    except Exception as exc:  # whatever it is, the commit stands
        _log.warning("checkpoint_failed", table=table, version=version, error=str(exc))
        return None
