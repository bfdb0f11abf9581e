"""Writing a snapshot's checkpoint and the ``_last_checkpoint`` hint (issue 41).

Theory of operation (delta-protocol.md §1.3-§1.5, §6.1 step 6):

- A checkpoint of version v holds the snapshot's protocol, metaData, txns, live domains, live
  adds and the tombstones not yet expired (``deletionTimestamp`` within
  ``delta.deletedFileRetentionDuration``, default a week, of now; a missing timestamp counts as
  expired, as vacuum counts it). The schema and rows are :mod:`rlcd.delta._checkpoint_rows`'.
- A table with the ``v2Checkpoint`` writer feature gets a V2 checkpoint named
  ``<v>.checkpoint.<uuid>.parquet`` with its ``checkpointMetadata`` row; any other a classic
  ``<v>.checkpoint.parquet``. Never multi-part. A V2 checkpoint of up to
  :data:`SIDECAR_THRESHOLD` file actions holds them inline; a larger one puts them in sidecars,
  ``_delta_log/_sidecars/<uuid>.parquet`` of up to :data:`SIDECAR_ACTIONS` each (readers fetch
  them in parallel), and the top-level file holds the other actions and one ``sidecar`` row per
  sidecar. The sidecars are uploaded first: the top-level file is the commit point, and the
  sidecars of a run that stops before it are unreferenced, deleted by a later log cleanup.
- Memory stays bounded: the live files and tombstones become rows straight from the snapshot's
  Arrow columns, :data:`BATCH_ACTIONS` rows at a time, each batch one Parquet row group, never
  an object per file; in a worker thread writing a local temp file, then uploaded.
- Never over someone else's: a version whose listing shows a checkpoint (any kind) is left
  alone, and each upload (sidecar or checkpoint) is a put-if-absent up to :data:`PUT_LIMIT`
  bytes. A larger file streams through the store's writer, whose completion replaces
  atomically: only another engine's checkpoint of the same version, written in the same
  instant, could be replaced, by one of the same content (a sidecar's name is new).
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
from rlcd.delta.actions import Action, Metadata, Sidecar
from rlcd.delta.intervals import parse_interval
from rlcd.delta.load import _last_checkpoint_version, list_log, table_config
from rlcd.delta.log_path import LAST_CHECKPOINT, LOG_DIR, SIDECAR_DIR
from rlcd.delta.replay import Snapshot, replay
from rlcd.errors import CorruptLogError, StorageError
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
SIDECAR_THRESHOLD: Final = 100_000
"""A V2 checkpoint of more file actions (live files and kept tombstones) than this puts them in
sidecars: readers fetch those in parallel, and the top-level file stays small."""
SIDECAR_ACTIONS: Final = 1_000_000
"""File actions per sidecar at most."""
_CHUNK: Final = 8 * 1024 * 1024

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointWritten:
    """rlcd wrote the checkpoint of ``version`` at ``key``: ``actions`` rows (the hint's
    ``size``), ``add_files`` of them live files, ``size_in_bytes`` of Parquet, its
    ``sidecars`` (their keys, ``sidecar_bytes`` of it) included."""

    version: int
    key: str
    actions: int
    add_files: int
    size_in_bytes: int
    sidecars: tuple[str, ...] = ()
    sidecar_bytes: int = 0


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


def _other_actions(
    snapshot: Snapshot, *, v2: bool, sidecars: Sequence[Sidecar] = ()
) -> Iterator[Action | int]:
    """The snapshot's actions other than files; the int is V2's ``checkpointMetadata`` row."""
    yield snapshot.protocol
    yield snapshot.metadata
    yield from snapshot.txns.values()
    yield from snapshot.domains.values()
    if v2:
        yield snapshot.version
    yield from sidecars


@dataclass(frozen=True, slots=True)
class _FileActions:
    """A checkpoint's file actions, in order: the snapshot's live files, then its tombstones at
    the ``kept`` indices (those not yet expired)."""

    snapshot: Snapshot
    kept: pa.Array

    def __len__(self) -> int:
        return self.snapshot.num_files + len(self.kept)

    def batches(self, layout: CheckpointLayout, start: int, stop: int) -> Iterator[pa.RecordBatch]:
        """Rows ``start``..``stop`` of them, one batch per row group, :data:`BATCH_ACTIONS` rows
        of the snapshot's columns at a time (never an object per file)."""
        adds = self.snapshot.adds
        n = adds.num_rows
        for lo in range(start, min(stop, n), BATCH_ACTIONS):
            yield add_rows(adds.slice(lo, min(BATCH_ACTIONS, stop - lo)), layout)
        tombstones = self.snapshot.tombstone_rows
        for lo in range(max(start, n), stop, BATCH_ACTIONS):
            rows = self.kept.slice(lo - n, min(BATCH_ACTIONS, stop - lo))
            yield remove_rows(tombstones.take(rows), layout)


def _file_actions(snapshot: Snapshot, cutoff_ms: int) -> _FileActions:
    when = pc.fill_null(snapshot.tombstone_rows["deletion_timestamp"], 0)
    return _FileActions(snapshot, pc.indices_nonzero(pc.greater(when, cutoff_ms)))


def _top_level(
    files: _FileActions, layout: CheckpointLayout, sidecars: Sequence[Sidecar], *, inline: bool
) -> Iterator[pa.RecordBatch]:
    """The top-level file's rows: the other actions (with the sidecars), then the file actions
    if ``inline``."""
    snapshot = files.snapshot
    yield other_rows(_other_actions(snapshot, v2=layout.v2, sidecars=sidecars), layout)
    if inline:
        yield from files.batches(layout, 0, len(files))


def _write_parquet(
    path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> tuple[int, int]:
    """Write a checkpoint or sidecar file (in a worker thread), a row group per batch (only
    ``schema``'s columns of it); its rows and bytes."""
    count = 0
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for batch in batches:
            writer.write_batch(batch.select(schema.names))
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


async def _write_file(
    path: Path,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    *,
    snapshot: Snapshot,
    key: str,
) -> tuple[int, int]:
    """:func:`_write_parquet` in a worker thread; a row that cannot be written is a corrupt
    log, the file to be named."""
    try:
        return await anyio.to_thread.run_sync(_write_parquet, path, schema, batches)
    except (ValueError, pa.ArrowException) as exc:
        raise CorruptLogError(
            f"cannot checkpoint: {exc}", table=snapshot.table, version=snapshot.version, path=key
        ) from exc


async def _write_sidecars(
    store: ObjectStore,
    files: _FileActions,
    layout: CheckpointLayout,
    tmp: Path,
    *,
    per_sidecar: int,
    put_limit: int,
) -> list[Sidecar]:
    """Upload the file actions as sidecars of up to ``per_sidecar`` rows, one at a time through
    one local file; their ``sidecar`` actions."""
    sidecars = []
    path = tmp / "sidecar.parquet"
    for start in range(0, len(files), per_sidecar):
        name = f"{uuid.uuid4()}.parquet"
        key = f"{SIDECAR_DIR}/{name}"
        batches = files.batches(layout, start, min(start + per_sidecar, len(files)))
        _, size = await _write_file(
            path, layout.sidecar_schema, batches, snapshot=files.snapshot, key=key
        )
        if not await _publish(store, key, path, size, put_limit):
            raise StorageError("a new sidecar's key is taken", operation="put", key=key)
        stored = await store.head(key)
        sidecars.append(Sidecar(name, size, stored.last_modified_ms))
    return sidecars


async def write_checkpoint(
    store: ObjectStore,
    snapshot: Snapshot,
    *,
    now_ms: int | None = None,
    put_limit: int = PUT_LIMIT,
    sidecar_threshold: int = SIDECAR_THRESHOLD,
    sidecar_actions: int = SIDECAR_ACTIONS,
) -> CheckpointWritten | CheckpointExists:
    """Write the checkpoint of ``snapshot`` (its version must be in the log), then
    ``_last_checkpoint``.

    Args:
        now_ms: the clock tombstone expiry counts from (default: now).
        put_limit: the largest file uploaded by one put-if-absent.
        sidecar_threshold: a V2 checkpoint of more file actions puts them in sidecars.
        sidecar_actions: the most file actions in one sidecar.

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
        files = _file_actions(snapshot, now - retention)
        in_sidecars = v2 and len(files) > sidecar_threshold
        layout = checkpoint_layout(snapshot.metadata, v2=v2, sidecars=in_sidecars)
    except (ValueError, KeyError) as exc:
        raise CorruptLogError(f"cannot checkpoint: {exc}", table=table, version=version) from exc
    sidecars: list[Sidecar] = []
    with tempfile.TemporaryDirectory(prefix="rlcd-checkpoint-") as tmp:
        if in_sidecars:
            sidecars = await _write_sidecars(
                store, files, layout, Path(tmp), per_sidecar=sidecar_actions, put_limit=put_limit
            )
        path = Path(tmp) / "checkpoint.parquet"
        batches = _top_level(files, layout, sidecars, inline=not in_sidecars)
        count, size = await _write_file(path, layout.schema, batches, snapshot=snapshot, key=key)
        if not await _publish(store, key, path, size, put_limit):
            return CheckpointExists(version, key)
    sidecar_bytes = sum(s.size_in_bytes or 0 for s in sidecars)
    written = CheckpointWritten(
        version,
        key,
        count + (len(files) if in_sidecars else 0),
        snapshot.num_files,
        size + sidecar_bytes,
        tuple(f"{SIDECAR_DIR}/{s.path}" for s in sidecars),
        sidecar_bytes,
    )
    hinted = await _last_checkpoint_version(store)
    if hinted is None or hinted < version:
        document = last_checkpoint_document(
            version=version,
            size=written.actions,
            size_in_bytes=written.size_in_bytes,
            num_of_add_files=written.add_files,
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
        sidecars=len(result.sidecars),
        sidecar_bytes=result.sidecar_bytes,
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
