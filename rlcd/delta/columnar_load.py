"""Loading a snapshot as Arrow tables (:class:`ColumnarSnapshot`) from a store.

The IO half of :mod:`rlcd.delta.columnar`: the same segment, reads and checks as
:func:`rlcd.delta.load.load_snapshot` (whose helpers it uses), but checkpoint and sidecar
Parquet files are read with a column projection and kept as tables. Not wired into compaction
yet (issue 40, phase 2), which will fold it into :mod:`rlcd.delta.load`.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.delta.actions import Action, ActionError, AddFile, RemoveFile, Sidecar, parse_commit
from rlcd.delta.columnar import (
    ColumnarSnapshot,
    FileActions,
    checkpoint_file_actions,
    file_actions_of,
    needs_stats_parsed,
    projection,
    replay_files,
)
from rlcd.delta.load import (
    _arrow_owned,
    _gather,
    _read_commits,
    _read_log_file,
    _segment,
    _sidecar_key,
    _with_commit_info,
    table_config,
)
from rlcd.delta.replay import replay
from rlcd.errors import CorruptLogError
from rlcd.storage.base import ObjectStore

__all__ = ("load_columnar",)


def _parse_parquet(data: bytes | bytearray) -> FileActions:
    """One checkpoint or sidecar file, projected (INT96 as microseconds: see ``load.py``)."""
    source = pa.BufferReader(_arrow_owned(data))
    file = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
    table = file.read(columns=projection(file.schema_arrow))
    parsed = file.read(columns=["add.stats_parsed"]) if needs_stats_parsed(table) else None
    return checkpoint_file_actions(table, parsed)


async def _read_file(
    store: ObjectStore, key: str, fmt: str, *, table: str, version: int
) -> FileActions:
    data = await _read_log_file(store, key, "checkpoint", table=table, version=version)
    try:
        if fmt == "json":
            return file_actions_of(parse_commit(data))
        result: FileActions = await anyio.to_thread.run_sync(_parse_parquet, data)
        return result
    except (ActionError, pa.ArrowException, OSError) as exc:
        raise CorruptLogError(
            f"unreadable checkpoint: {exc}", table=table, version=version, path=key
        ) from exc


async def _read_checkpoint(
    store: ObjectStore, parts: Sequence[tuple[str, str]], *, table: str, version: int
) -> list[FileActions]:
    """Every file of a checkpoint (``(key, format)`` pairs), then the sidecars they name."""
    files: list[FileActions] = await _gather(
        [
            (lambda key=key, fmt=fmt: _read_file(store, key, fmt, table=table, version=version))
            for key, fmt in parts
        ]
    )
    sidecars = [a for f in files for a in f.others if isinstance(a, Sidecar)]
    if sidecars:
        keys = [_sidecar_key(store.root, s.path, table=table, version=version) for s in sidecars]
        files += await _gather(
            [
                (lambda key=key: _read_file(store, key, "parquet", table=table, version=version))
                for key in keys
            ]
        )
    return files


async def load_columnar(store: ObjectStore, *, version: int | None = None) -> ColumnarSnapshot:
    """The snapshot at ``version`` (latest when None) as Arrow tables, checked readable.

    Raises:
        CorruptLogError: the log is unreadable, has gaps, or lacks protocol/metaData.
        UnsupportedFeatureError: the protocol asks for features rlcd cannot read.
    """
    table = store.root
    segment = await _segment(store, version, table=table)
    files: list[FileActions] = []
    checkpoint: tuple[int, list[Action]] | None = None
    if segment.checkpoint_version is not None:
        parts = [(p.key, p.fmt or "parquet") for p in segment.checkpoint]
        files = await _read_checkpoint(
            store, parts, table=table, version=segment.checkpoint_version
        )
        checkpoint = (segment.checkpoint_version, [a for f in files for a in f.others])
    commits = await _read_commits(store, segment.commits, table=table)
    others = [
        (v, [a for a in actions if not isinstance(a, AddFile | RemoveFile)])
        for v, actions in commits
    ]
    state = await _with_commit_info(store, replay(table, others, checkpoint=checkpoint))
    table_config(state).ensure_readable()
    adds, tombstones = replay_files(files, commits)
    return ColumnarSnapshot(
        table=table,
        version=state.version,
        protocol=state.protocol,
        metadata=state.metadata,
        adds=adds,
        tombstones=tombstones,
        txns=state.txns,
        domains=state.domains,
        commit_info=state.commit_info,
    )
