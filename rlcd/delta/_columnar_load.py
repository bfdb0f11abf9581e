"""Loading a snapshot as Arrow tables (:class:`ColumnarSnapshot`) from a store.

The IO half of :mod:`rlcd.delta._columnar`: the same segment, reads and checks as
:func:`rlcd.delta.load.load_snapshot` (whose helpers it uses), but checkpoint and sidecar
Parquet files are read with a column projection and kept as tables. Not wired into compaction
yet (issue 40, phase 2), which will fold it into :mod:`rlcd.delta.load`.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.delta._columnar import (
    ColumnarSnapshot,
    FileActions,
    checkpoint_file_actions,
    file_actions_of,
    needs_stats_parsed,
    projection,
    replay_files,
)
from rlcd.delta.actions import Action, ActionError, AddFile, RemoveFile, Sidecar, parse_commit
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


_BATCH_ROWS = 8192
"""Rows decoded at a time. The copies that keep one action's rows, the DV ids and the row counts
are made a batch at a time, so they add a few MiB to a load's peak, not the size of a row group
(up to the whole file): on the bench's 100k-file checkpoint 177 MiB peak RSS at 8,192 rows,
241 MiB at 65,536, the same CPU. One thread: decoding every column at once held more pages for
no shorter load."""


def _parse_parquet(buffer: pa.Buffer) -> list[FileActions]:
    """One checkpoint or sidecar file, projected, a batch at a time (INT96 as microseconds: see
    ``load.py``). A batch with adds that have ``stats_parsed`` but no stats text gets its rows of
    ``add.stats_parsed``, read once for its row group."""
    file = pq.ParquetFile(pa.BufferReader(buffer), coerce_int96_timestamp_unit="us")
    columns = projection(file.schema_arrow)
    parts = []
    for group in range(file.metadata.num_row_groups):
        batches = file.iter_batches(
            batch_size=_BATCH_ROWS, row_groups=[group], columns=columns, use_threads=False
        )
        offset, parsed = 0, None
        for batch in batches:
            table = pa.Table.from_batches([batch])
            stats = None
            if needs_stats_parsed(table):
                if parsed is None:
                    parsed = file.read_row_group(group, columns=["add.stats_parsed"])
                stats = parsed.slice(offset, table.num_rows)
            parts.append(checkpoint_file_actions(table, stats))
            offset += table.num_rows
    return parts


async def _read_file(
    store: ObjectStore, key: str, fmt: str, *, table: str, version: int
) -> list[FileActions]:
    """A checkpoint file's actions. A Parquet file's bytes are copied into Arrow's memory
    (see ``load.py``) and let go of before it is decoded: a big checkpoint is not held twice."""
    try:
        if fmt == "json":
            data = await _read_log_file(store, key, "checkpoint", table=table, version=version)
            return [file_actions_of(parse_commit(data))]
        buffer = _arrow_owned(
            await _read_log_file(store, key, "checkpoint", table=table, version=version)
        )
        parts: list[FileActions] = await anyio.to_thread.run_sync(_parse_parquet, buffer)
        return parts
    except (ActionError, pa.ArrowException, OSError) as exc:
        raise CorruptLogError(
            f"unreadable checkpoint: {exc}", table=table, version=version, path=key
        ) from exc


async def _read_checkpoint(
    store: ObjectStore, parts: Sequence[tuple[str, str]], *, table: str, version: int
) -> list[FileActions]:
    """Every file of a checkpoint (``(key, format)`` pairs), then the sidecars they name."""
    read: list[list[FileActions]] = await _gather(
        [
            (lambda key=key, fmt=fmt: _read_file(store, key, fmt, table=table, version=version))
            for key, fmt in parts
        ]
    )
    files = [f for part in read for f in part]
    sidecars = [a for f in files for a in f.others if isinstance(a, Sidecar)]
    if sidecars:
        keys = [_sidecar_key(store.root, s.path, table=table, version=version) for s in sidecars]
        more: list[list[FileActions]] = await _gather(
            [
                (lambda key=key: _read_file(store, key, "parquet", table=table, version=version))
                for key in keys
            ]
        )
        files += [f for part in more for f in part]
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
