"""Loading snapshots from a store: the delta layer's only IO.

A load reads ``_last_checkpoint`` (a hint, checked and ignored when it lies), lists the log from
there, picks the segment (:mod:`rlcd.delta._segment`), reads the checkpoint and commits, and
replays them (:mod:`rlcd.delta.replay`). Checkpoint and sidecar Parquet files are read with a
column projection into Arrow tables (:mod:`rlcd.delta._columnar`): the snapshot's files stay
columns. Only the projected chunks are read: in place on a local store, else fetched into a
sparse temp file (:mod:`rlcd.storage.sparse`). :func:`update_snapshot` moves a held snapshot
forward by reading only the commits after it, at a cost in proportion to them. Every parse
failure becomes a :class:`CorruptLogError` naming the table, version and file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

import anyio
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

from rlcd.delta._columnar import (
    FileActions,
    checkpoint_file_actions,
    file_actions_of,
    needs_stats_parsed,
    projection,
)
from rlcd.delta._last_checkpoint import json_checksum
from rlcd.delta._segment import LogSegment, build_segment
from rlcd.delta.actions import (
    Action,
    ActionError,
    AddFile,
    CommitInfo,
    RemoveFile,
    Sidecar,
    parse_commit,
)
from rlcd.delta.dv import dv_byte_range, load_dv
from rlcd.delta.log_path import (
    LAST_CHECKPOINT,
    LOG_DIR,
    SIDECAR_DIR,
    LogKind,
    LogPath,
    commit_name,
)
from rlcd.delta.partitions import object_key
from rlcd.delta.protocol import TableConfig
from rlcd.delta.replay import Snapshot, replay_columns
from rlcd.errors import CorruptLogError, DeletionVectorError, NotFoundError
from rlcd.parquet.footer import footer_span, parse_footer
from rlcd.parquet.ranges import chunk_ranges
from rlcd.storage.base import ObjectMeta, ObjectStore
from rlcd.storage.sparse import sparse_copy

__all__ = (
    "load_snapshot",
    "update_snapshot",
    "advance_snapshot",
    "read_commit",
    "read_commits_after",
    "list_log",
    "list_log_files",
    "newest_checkpoint",
    "read_sidecar_names",
    "read_deletion_vector",
    "table_config",
)

_READ_CONCURRENCY = 8


def table_config(snapshot: Snapshot) -> TableConfig:
    return TableConfig(snapshot.table, snapshot.protocol, snapshot.metadata)


async def list_log(store: ObjectStore, *, after_version: int | None = None) -> list[LogPath]:
    """The versioned files of ``_delta_log`` (sorted), optionally only from ``after_version``
    on; the listing starts after the bare 20-digit prefix, so that version's own files are
    included (delta-protocol.md §1.8)."""
    return [path for path, _ in await list_log_files(store, after_version=after_version)]


async def list_log_files(
    store: ObjectStore, *, after_version: int | None = None
) -> list[tuple[LogPath, ObjectMeta]]:
    """:func:`list_log` with what the listing says of each file (size, modification time)."""
    start = f"{LOG_DIR}/{after_version:020d}" if after_version is not None else None
    found: list[tuple[LogPath, ObjectMeta]] = []
    async for meta in store.list(f"{LOG_DIR}/", start_after=start):
        name = meta.key[len(LOG_DIR) + 1 :]
        if name.startswith("_"):
            break  # `_` sorts after every digit: _last_checkpoint, _sidecars/, _staged_commits/
        if "/" in name:
            continue
        parsed = LogPath.parse(name)
        if parsed is not None:
            found.append((parsed, meta))
    return found


async def newest_checkpoint(store: ObjectStore) -> int | None:
    """The version of the newest checkpoint in the log (any kind; None: there is none),
    listed from the version ``_last_checkpoint`` names, or from the start when that finds
    none."""
    hint = await _last_checkpoint_version(store)
    for start in (hint, None) if hint is not None else (None,):
        paths = await list_log(store, after_version=start)
        found = max((p.version for p in paths if p.is_checkpoint), default=None)
        if found is not None:
            return found
    return None


def _checksum_ok(hint: dict[str, Any]) -> bool:
    """The ``_last_checkpoint`` checksum rule of delta-protocol.md §1.3 (absent = fine)."""
    expected = hint.get("checksum")
    return expected is None or json_checksum(hint) == expected


async def _last_checkpoint_version(store: ObjectStore) -> int | None:
    """The version ``_last_checkpoint`` claims, or None when it is absent or not believable."""
    try:
        data = await store.get(LAST_CHECKPOINT)
    except NotFoundError:
        return None
    try:
        hint = json.loads(data)
    except ValueError:
        return None
    if not isinstance(hint, dict) or not isinstance(hint.get("version"), int):
        return None
    return hint["version"] if _checksum_ok(hint) else None


async def _read_log_file(
    store: ObjectStore, key: str, what: str, *, table: str, version: int
) -> bytes | bytearray:
    """A log file's bytes; a missing one is a corrupt log, named."""
    try:
        return await store.get(key)
    except NotFoundError as exc:
        raise CorruptLogError(
            f"{what} file is missing", table=table, version=version, path=key
        ) from exc


async def read_commit(store: ObjectStore, version: int, *, table: str) -> list[Action]:
    """The actions of one JSON commit."""
    key = commit_name(version)
    data = await _read_log_file(store, key, "commit", table=table, version=version)
    return _parse_commit(data, table=table, version=version, key=key)


def _parse_commit(data: bytes | bytearray, *, table: str, version: int, key: str) -> list[Action]:
    try:
        return parse_commit(data)
    except ActionError as exc:
        raise CorruptLogError(
            f"malformed commit: {exc}", table=table, version=version, path=key
        ) from exc


async def read_commits_after(
    store: ObjectStore, version: int, *, through: int, table: str
) -> list[tuple[int, list[Action]]]:
    """Every commit after ``version``, read by key one version after the other until the first
    that does not exist; each up to ``through`` (one known to exist) must.

    A GET sees a commit as soon as it is written, where a listing may lag behind on some
    stores: reading by key cannot skip a commit, and a skipped winner would go unclassified.

    Raises:
        CorruptLogError: a commit up to ``through`` is missing, or one is malformed.
    """
    commits: list[tuple[int, list[Action]]] = []
    while True:
        current = version + len(commits) + 1
        key = commit_name(current)
        try:
            data = await store.get(key)
        except NotFoundError as exc:
            if current > through:
                return commits
            raise CorruptLogError(
                f"commit file is missing, though commit {through} exists",
                table=table,
                version=current,
                path=key,
            ) from exc
        commits.append((current, _parse_commit(data, table=table, version=current, key=key)))


async def _gather(calls: Sequence[Any]) -> list[Any]:
    """Run zero-argument coroutine functions with bounded concurrency, keeping their order.

    The first failure cancels the rest and is raised as itself, not wrapped in a group.
    """
    results: list[Any] = [None] * len(calls)
    failures: list[Exception] = []
    limiter = anyio.CapacityLimiter(_READ_CONCURRENCY)

    async with anyio.create_task_group() as tg:

        async def run(i: int) -> None:
            try:
                async with limiter:
                    results[i] = await calls[i]()
            except Exception as exc:
                failures.append(exc)
                tg.cancel_scope.cancel()

        for i in range(len(calls)):
            tg.start_soon(run, i)
    if failures:
        raise failures[0]
    return results


_BATCH_ROWS = 8192
"""Rows decoded at a time. The copies that keep one action's rows, the DV ids and the row counts
are made a batch at a time, so they add a few MiB to a load's peak, not the size of a row group
(up to the whole file): on the bench's 100k-file checkpoint 177 MiB peak RSS at 8,192 rows,
241 MiB at 65,536, the same CPU. One thread: decoding every column at once held more pages for
no shorter load."""
_TAIL_GUESS = 256 * 1024
"""Bytes of a remote checkpoint's tail fetched first, for its footer: the bench's 100k-file
checkpoint's footer is 28 KiB, its 1M-file one's 0.3 MiB (a second GET then)."""
_Fetch = Callable[[int, list[str]], None]
"""Makes a row group's chunks of some columns readable (a remote file's copy fetches them)."""


def _parse_parquet(reader: pq.ParquetFile, fetch: _Fetch | None) -> list[FileActions]:
    """One checkpoint or sidecar file, read with the replay's column projection (whose chunks
    are readable), a batch at a time. Runs in a worker thread. A batch with adds that have
    ``stats_parsed`` but no stats text gets its rows of ``add.stats_parsed``, read (after
    ``fetch``) once for its row group."""
    columns = projection(reader.schema_arrow)
    parts = []
    for group in range(reader.metadata.num_row_groups):
        batches = reader.iter_batches(
            batch_size=_BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False
        )
        offset, parsed = 0, None
        for batch in batches:
            table = pa.Table.from_batches([batch])
            stats = None
            if needs_stats_parsed(table):
                if parsed is None:
                    if fetch is not None:
                        fetch(group, ["add.stats_parsed"])
                    parsed = reader.read_row_group(group, columns=["add.stats_parsed"])
                stats = parsed.slice(offset, table.num_rows)
            parts.append(checkpoint_file_actions(table, stats))
            offset += table.num_rows
    return parts


def _open(file: pa.NativeFile, footer: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """A checkpoint file's reader. Spark writes stats_parsed timestamps as INT96; pyarrow's
    default nanoseconds cannot hold years outside 1677-2262 (9999-12-31 ends many slowly
    changing dimensions): microseconds can."""
    return pq.ParquetFile(file, metadata=footer, coerce_int96_timestamp_unit="us")


async def _read_local_parquet(path: str) -> list[FileActions]:
    """A local checkpoint read in place: pyarrow reads its footer and the projected chunks
    only, and the open file pins the version opened, whoever replaces the file meanwhile.

    Raises:
        FileNotFoundError: the file is missing.
    """
    file = await anyio.to_thread.run_sync(pa.OSFile, path)
    with file:
        reader = await anyio.to_thread.run_sync(_open, file)
        parts: list[FileActions] = await anyio.to_thread.run_sync(_parse_parquet, reader, None)
    return parts


async def _read_remote_parquet(store: ObjectStore, key: str, size: int) -> list[FileActions]:
    """A remote checkpoint's footer, then its projected chunks, into a sparse temp file
    (:mod:`rlcd.storage.sparse`) read by pyarrow: nothing else is fetched, and memory holds a
    row group's chunks, not the file. Its GETs are not one atomic read: the caller checks the
    object did not change meanwhile.

    Raises:
        NotFoundError: the file is missing.
        ValueError: its tail is not a Parquet footer, a chunk lies outside it, or it is
            shorter than a chunk's end.
    """
    tail = await store.get(key, start=max(0, size - _TAIL_GUESS), end=size)
    span = footer_span(tail, size)
    if span > len(tail):
        tail = await store.get(key, start=size - span, end=size)
    footer = await anyio.to_thread.run_sync(parse_footer, tail[len(tail) - span :])
    async with sparse_copy(store, key, size, prefix="rlcd-checkpoint-") as copy:
        copy.write(tail, size - len(tail))
        with pa.OSFile(copy.path) as file:
            reader = await anyio.to_thread.run_sync(_open, file, footer)
            columns = projection(reader.schema_arrow)
            await copy.fetch(chunk_ranges(footer, range(footer.num_row_groups), columns, size))

            def fetch(group: int, names: list[str]) -> None:
                anyio.from_thread.run(copy.fetch, chunk_ranges(footer, [group], names, size))

            parts: list[FileActions] = await anyio.to_thread.run_sync(_parse_parquet, reader, fetch)
    return parts


def _same_version(a: ObjectMeta, b: ObjectMeta) -> bool:
    """Whether two heads of one object found the same version, as far as they tell."""
    return (a.size, a.last_modified_ms, a.etag) == (b.size, b.last_modified_ms, b.etag)


async def _read_parquet_log(
    store: ObjectStore, key: str, *, table: str, version: int
) -> list[FileActions]:
    """A checkpoint or sidecar Parquet file's actions, read in place on a local store, else in
    ranges, failing closed: a classic checkpoint may be rewritten by another writer meanwhile,
    and ranges of two versions would read as garbage, or as wrong actions. The object's head
    before and after the reads must agree (size, modification time, ETag where the store
    gives one), else it is read once more; a second change is refused.

    Raises:
        NotFoundError: the file is missing.
        CorruptLogError: the file changed during both reads.
        ValueError, ActionError, pyarrow.ArrowException, OSError: it does not read.
    """
    files = store.local_files()
    if files is not None:
        try:
            return await _read_local_parquet(files.local_path(key))
        except FileNotFoundError as exc:
            raise NotFoundError(operation="get", key=key) from exc
    for _ in range(2):
        before = await store.head(key)
        try:
            parts = await _read_remote_parquet(store, key, before.size)
        except (ActionError, pa.ArrowException, OSError, ValueError):
            if _same_version(before, await store.head(key)):
                raise
            continue
        if _same_version(before, await store.head(key)):
            return parts
    raise CorruptLogError(
        "checkpoint file changed while it was read, twice: another writer is rewriting it",
        table=table,
        version=version,
        path=key,
    )


async def _read_checkpoint_file(
    store: ObjectStore, key: str, fmt: str, *, table: str, version: int
) -> list[FileActions]:
    """A checkpoint file's actions (a Parquet one's, :func:`_read_parquet_log`)."""
    try:
        if fmt == "json":
            data = await _read_log_file(store, key, "checkpoint", table=table, version=version)
            return [file_actions_of(parse_commit(data))]
        return await _read_parquet_log(store, key, table=table, version=version)
    except NotFoundError as exc:
        raise CorruptLogError(
            "checkpoint file is missing", table=table, version=version, path=key
        ) from exc
    except (ActionError, pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptLogError(
            f"unreadable checkpoint: {exc}", table=table, version=version, path=key
        ) from exc


async def _read_checkpoint(
    store: ObjectStore, segment: LogSegment, *, table: str
) -> tuple[int, list[FileActions]]:
    """The checkpoint's version and the actions of every file of it, then of the sidecars they
    name."""
    version = segment.checkpoint_version
    assert version is not None
    read: list[list[FileActions]] = await _gather(
        [
            (
                lambda p=p: _read_checkpoint_file(
                    store, p.key, p.fmt or "parquet", table=table, version=version
                )
            )
            for p in segment.checkpoint
        ]
    )
    files = [f for part in read for f in part]
    sidecars = [a for f in files for a in f.others if isinstance(a, Sidecar)]
    if sidecars:
        keys = [_sidecar_key(store.root, s.path, table=table, version=version) for s in sidecars]
        more: list[list[FileActions]] = await _gather(
            [
                (
                    lambda key=key: _read_checkpoint_file(
                        store, key, "parquet", table=table, version=version
                    )
                )
                for key in keys
            ]
        )
        files += [f for part in more for f in part]
    return version, files


async def read_sidecar_names(store: ObjectStore, checkpoint: LogPath, *, table: str) -> set[str]:
    """The file names (under ``_delta_log/_sidecars/``) of the sidecars a single-file
    checkpoint names; a sidecar elsewhere is refused, as a load refuses it."""
    version = checkpoint.version
    parts = await _read_checkpoint_file(
        store, checkpoint.key, checkpoint.fmt or "parquet", table=table, version=version
    )
    keys = [
        _sidecar_key(store.root, a.path, table=table, version=version)
        for part in parts
        for a in part.others
        if isinstance(a, Sidecar)
    ]
    return {key.rsplit("/", 1)[-1] for key in keys}


def _sidecar_key(root: str, path: str, *, table: str, version: int) -> str:
    """A sidecar's key: its path is relative to ``_delta_log/_sidecars/`` or absolute (§1.5)."""
    if "://" not in path and not path.startswith(("/", "file:")):
        return f"{SIDECAR_DIR}/{unquote(path)}"
    key = object_key(root, path)
    if key is None:
        raise CorruptLogError(
            f"sidecar {path} lies outside the table", table=table, version=version
        )
    return key


async def _read_commits(
    store: ObjectStore, commits: Sequence[LogPath], *, table: str
) -> list[tuple[int, list[Action]]]:
    """The listed commits' actions. A local store reads them all in one worker thread
    (:meth:`~rlcd.storage.base.LocalFiles.get_many`): the thread hop of each GET cost as much
    as parsing it (10 commits: 1.1 ms of an update's 10)."""
    files = store.local_files()
    if files is None:
        bodies = await _gather(
            [(lambda c=c: read_commit(store, c.version, table=table)) for c in commits]
        )
        return [(c.version, body) for c, body in zip(commits, bodies, strict=True)]
    keys = {commit_name(c.version): c.version for c in commits}
    try:
        found = await files.get_many(list(keys))
    except NotFoundError as exc:
        raise CorruptLogError(
            "commit file is missing", table=table, version=keys[exc.key], path=exc.key
        ) from exc
    return [
        (version, _parse_commit(data, table=table, version=version, key=key))
        for (key, version), data in zip(keys.items(), found, strict=True)
    ]


async def load_snapshot(store: ObjectStore, *, version: int | None = None) -> Snapshot:
    """The snapshot at ``version`` (latest when None), checked readable by rlcd.

    Raises:
        CorruptLogError: the log is unreadable, has gaps, or lacks protocol/metaData.
        UnsupportedFeatureError: the protocol asks for features rlcd cannot read.
    """
    table = store.root
    segment = await _segment(store, version, table=table)
    checkpoint = await _read_checkpoint(store, segment, table=table) if segment.checkpoint else None
    commits = await _read_commits(store, segment.commits, table=table)
    snapshot = await _with_commit_info(store, replay_columns(table, commits, checkpoint=checkpoint))
    table_config(snapshot).ensure_readable()
    return snapshot


async def _segment(store: ObjectStore, version: int | None, *, table: str) -> LogSegment:
    """The segment to load, listing from ``_last_checkpoint``'s version when that hint holds
    (the checkpoint it names is listed and complete), else from the start of the log."""
    hint = await _last_checkpoint_version(store)
    if hint is not None and (version is None or hint <= version):
        paths = await list_log(store, after_version=hint)
        try:
            segment = build_segment(paths, table=table, version=version)
        except CorruptLogError:
            segment = None  # e.g. the hinted checkpoint lost a part: not a usable start
        if segment is not None and segment.checkpoint_version == hint:
            return segment
    return build_segment(await list_log(store), table=table, version=version)


async def _with_commit_info(store: ObjectStore, snapshot: Snapshot) -> Snapshot:
    """With in-commit timestamps, the next commit needs this version's timestamp (§5.4): when a
    checkpoint covered the version, read its commitInfo from the JSON commit."""
    if snapshot.commit_info is not None or not table_config(snapshot).in_commit_timestamps:
        return snapshot
    actions = await read_commit(store, snapshot.version, table=snapshot.table)
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    return dataclasses.replace(snapshot, commit_info=info)


async def update_snapshot(store: ObjectStore, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` moved to the latest version, reading only the commits after it."""
    return await advance_snapshot(
        store, snapshot, await list_log(store, after_version=snapshot.version + 1)
    )


async def advance_snapshot(
    store: ObjectStore, snapshot: Snapshot, paths: Sequence[LogPath]
) -> Snapshot:
    """``snapshot`` moved forward by the commits of ``paths``, a listing of the log from the
    version after it (:func:`list_log`); the same snapshot when there are none.

    Raises:
        CorruptLogError: the listed commits do not follow the snapshot without a gap, or one
            is malformed.
    """
    commits = [p for p in paths if p.kind is LogKind.COMMIT]
    if not commits:
        return snapshot
    expected = list(range(snapshot.version + 1, commits[-1].version + 1))
    if [c.version for c in commits] != expected:
        raise CorruptLogError(
            "log is not contiguous after the held snapshot",
            table=snapshot.table,
            version=snapshot.version,
        )
    updated = replay_columns(
        snapshot.table, await _read_commits(store, commits, table=snapshot.table), base=snapshot
    )
    table_config(updated).ensure_readable()
    return updated


async def read_deletion_vector(
    store: ObjectStore, add: AddFile | RemoveFile, *, version: int | None = None
) -> BitMap64:
    """The deleted row positions of a file, live or tombstoned (empty when it has no DV).

    Raises:
        DeletionVectorError: the DV file is missing or fails a check; names table and file.
    """
    dv = add.deletion_vector
    table = store.root
    if dv is None:
        return BitMap64()
    file_path = dv.file_path()
    if file_path is None:
        return load_dv(dv, file_bytes=None, table=table, path=add.path, version=version)
    key = object_key(table, dv.path_or_inline_dv if dv.storage_type == "p" else file_path)
    if key is None:
        raise DeletionVectorError(
            f"deletion vector file {file_path} lies outside the table",
            table=table,
            version=version,
            path=add.path,
        )
    start, end = dv_byte_range(dv)
    try:
        data = await store.get(key, start=start, end=end)
    except NotFoundError as exc:
        raise DeletionVectorError(
            f"deletion vector file {key} is missing", table=table, version=version, path=add.path
        ) from exc
    return load_dv(dv, file_bytes=data, table=table, path=add.path, version=version)
