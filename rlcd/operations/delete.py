"""``rlcd delete --where``: find the rows a predicate matches and delete them through DVs.

The predicate is bound to the table's data and partition columns
(:mod:`rlcd.delta.predicate`); files are pruned by partition values and stats
(``might_match``). A partition-only predicate matches a file as a whole, so its live rows are
the complement of its DV and no data file is read. Otherwise each remaining file's live rows
are decoded in physical order in a worker thread (:mod:`rlcd.compaction.source`), and
``row_mask`` picks the matches, mapped back to physical row positions (rows its DV already
deletes are never candidates). The positions are committed in one commit by
:func:`rlcd.operations._dv_writer.delete_rows`, which rebases onto winners or refuses; the same
evaluation runs on the files a winner that read the table added meanwhile, so the delete
extends to the rows they hold that match.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio.to_thread
import pyarrow as pa
from pyroaring import AbstractBitMap64, BitMap64

from rlcd.compaction.compact import rewrite_settings
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.source import DecodedSource, FetchedSource, ReadOptions, fetch_source
from rlcd.delta.actions import AddFile
from rlcd.delta.load import load_snapshot, read_deletion_vector, table_config
from rlcd.delta.outcome import Abort
from rlcd.delta.predicate import BoundPredicate, Predicate
from rlcd.delta.replay import Snapshot
from rlcd.delta.schema import column_mapping_mode, parse_schema
from rlcd.errors import CorruptLogError, RlcdError, UnsupportedFeatureError
from rlcd.operations._dv_writer import CONCURRENT_APPEND, delete_rows
from rlcd.reconcile.positions import positions_array, positions_bitmap
from rlcd.storage.base import ObjectStore

__all__ = (
    "ENABLE_DV_STEP",
    "FileDeletion",
    "DeleteReport",
    "bind_where",
    "delete_where",
    "delete_rows",
)

ENABLE_DV_STEP = (
    "`rlcd enable-dv TABLE --yes` first (it upgrades the protocol: check the table's readers; "
    "`rlcd enable-dv TABLE --dry-run` shows the change)"
)
"""What a delete on a table without deletion vectors needs first (the error, the dry run)."""


@dataclass(frozen=True, slots=True)
class FileDeletion:
    """One file the delete touches: its path and how many of its live rows match."""

    path: str
    rows: int


@dataclass(frozen=True, slots=True)
class DeleteReport:
    """What a delete did (or, with ``dry_run``, would do): the files with matches, the files
    whose data was read, the committed version (None when nothing was committed), the
    matches in files other writers committed while the delete ran (deleted too), and whether
    the table allows deletion vectors (False only in a dry run: the real one needs
    ``rlcd enable-dv`` first)."""

    table: str
    predicate: str
    files: tuple[FileDeletion, ...]
    files_read: int
    version: int | None
    dry_run: bool
    concurrent: tuple[FileDeletion, ...] = ()
    dvs_allowed: bool = True

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files + self.concurrent)


def bind_where(snapshot: Snapshot, where: str) -> BoundPredicate:
    """The predicate bound to the table's data and partition columns.

    Raises:
        PredicateError: bad text, an unknown column or a literal that does not fit.
        CorruptLogError: the table has no usable schema.
    """
    metadata = snapshot.metadata
    predicate = Predicate.parse(where)
    try:
        schema = parse_schema(metadata.schema_string)
        mode = column_mapping_mode(metadata.configuration)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(
            f"cannot use the table schema: {exc}", table=snapshot.table, version=snapshot.version
        ) from exc
    return predicate.bind(schema, partition_columns=metadata.partition_columns, mode=mode)


def _matching_positions(
    fetched: FetchedSource,
    options: ReadOptions,
    bound: BoundPredicate,
    *,
    table: str,
    version: int,
) -> AbstractBitMap64:
    """The physical positions of the live rows ``bound`` matches (worker thread: decodes)."""
    decoded = DecodedSource(fetched, options, table=table, version=version)
    partition_values = fetched.add.partition_values
    hits = [bound.row_mask(batch, partition_values) for batch in decoded.batches()]
    live = positions_array(_all_rows(decoded.physical_rows) - fetched.dv)  # as decoded
    return positions_bitmap(live.filter(pa.concat_arrays(hits)) if hits else live)


def _all_rows(count: int) -> BitMap64:
    """Every physical row of a file of ``count`` rows."""
    rows = BitMap64()
    rows.add_range(0, count)
    return rows


async def _file_positions(
    store: ObjectStore,
    add: AddFile,
    bound: BoundPredicate,
    options: ReadOptions,
    *,
    version: int,
) -> tuple[AbstractBitMap64, bool]:
    """The positions to delete in ``add`` and whether its data was read."""
    if bound.partition_only and add.num_records is not None:
        dv = await read_deletion_vector(store, add, version=version)
        return _all_rows(add.num_records) - dv, False
    fetched = await fetch_source(store, add, options, version=version)
    try:
        positions = await anyio.to_thread.run_sync(
            lambda: _matching_positions(fetched, options, bound, table=store.root, version=version)
        )
    finally:
        fetched.close()
    return positions, True


async def delete_where(
    store: ObjectStore, where: str, *, dry_run: bool = False, inline: bool = False
) -> DeleteReport:
    """Delete the rows ``where`` matches, in one commit (none with ``dry_run``).

    A dry run on a table without deletion vectors still reports what it would delete (a user
    sees the rows before deciding to upgrade the protocol); ``dvs_allowed`` says so.

    Raises:
        PredicateError: the predicate does not parse or bind (e.g. an unknown column).
        UnsupportedFeatureError: the table does not allow row deletions, or (not a dry run)
            deletion vectors (``rlcd enable-dv --yes`` upgrades it).
        ConcurrentModificationError: a winning commit conflicts and the delete cannot rebase.
    """
    snapshot = await load_snapshot(store)
    config = table_config(snapshot)
    config.ensure_writable()
    config.ensure_rows_deletable()
    dvs_allowed = config.deletion_vectors_enabled
    if not dvs_allowed and not dry_run:
        raise UnsupportedFeatureError(
            "the table does not allow deletion vectors, which rlcd delete writes: run "
            + ENABLE_DV_STEP,
            table=store.root,
            version=snapshot.version,
        )
    bound = bind_where(snapshot, where)
    options = rewrite_settings(snapshot, config, CompactionPolicy()).read
    deletions: dict[str, AbstractBitMap64] = {}
    files_read = 0
    for add in snapshot.files.values():
        if not bound.might_match(add):
            continue
        positions, read = await _file_positions(
            store, add, bound, options, version=snapshot.version
        )
        files_read += read
        if positions:
            deletions[add.path] = positions
    files = tuple(FileDeletion(path, len(p)) for path, p in deletions.items())
    concurrent: dict[str, int] = {}

    async def matcher(add: AddFile, version: int) -> AbstractBitMap64 | Abort:
        """The rows of a file a winner added that ``bound`` matches (see delete_rows)."""
        try:
            if not bound.might_match(add):
                return BitMap64()
            positions, _ = await _file_positions(store, add, bound, options, version=version)
        except (RlcdError, ValueError, pa.ArrowException) as exc:
            return Abort(
                CONCURRENT_APPEND,
                f"version {version} added {add.path}; the condition cannot be evaluated on "
                f"it: {exc}",
            )
        if positions:
            concurrent[add.path] = len(positions)
        return positions

    version = None
    if deletions and not dry_run:
        version = await delete_rows(
            store, snapshot, deletions, inline=inline, predicate=where, matcher=matcher
        )
    extended = tuple(FileDeletion(path, rows) for path, rows in concurrent.items())
    return DeleteReport(
        store.root, where, files, files_read, version, dry_run, extended, dvs_allowed
    )
