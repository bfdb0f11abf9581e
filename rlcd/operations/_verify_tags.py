"""The tags half of ``rlcd verify``: check composition tags in the log against the data.

For every JSON commit whose tombstones carry ``compactedInto``/``compactionInfo`` (written by
rlcd or by any engine using the Databricks format), check that every tagged source still on
storage has exactly the output's rows ``[o, o + L)``, in order, and that no two runs of an
output overlap. A tag is a per-source fact: a commit may tag only some of its sources (another
engine's, or rlcd's reconciled bin, whose remapped source is tombstoned under the winner's DV
and whose masked source has no tombstone). Its untagged sources are counted as not checked,
never as a failure, and the runs must tile their output (abut from row 0 and cover it) only
when every source of that output is known to be tagged: every remove of the commit is, and
the output was added without a DV (an output born with one is a reconciled bin's, whose
masked sources left no tombstone).

History is not the table: a VACUUM (Spark's, delta-rs') deletes the sources of old compactions,
their DV files, and outputs compacted again since. What is gone is counted as skipped, never as
a failure, and a source's existence is checked before its DV is read (the DV of a vacuumed
source is gone too). Only a file the current snapshot still needs is a problem when missing.
An output is decoded once, streaming past its sources in row order: memory holds about a batch
of each, whatever the file sizes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pyarrow as pa

from rlcd.compaction.source import DecodedSource, FetchedSource, ReadOptions, fetch_source
from rlcd.delta.actions import Action, AddFile, RemoveFile
from rlcd.delta.load import list_log, read_commit
from rlcd.delta.log_path import LogKind
from rlcd.delta.partitions import object_key
from rlcd.delta.replay import canonical_path
from rlcd.errors import DeletionVectorError, MissingDataFileError, NotFoundError, RlcdError
from rlcd.reconcile.tags import COMPACTED_INTO, Composition, check_tiling, parse_composition
from rlcd.storage.base import ObjectStore

__all__ = ("CommitCheck", "check_tags")


@dataclass
class CommitCheck:
    """The checks of one tagged commit: counts, and every problem found (none: it verified).

    ``outputs_skipped`` and ``sources_skipped`` count what was removed from storage since
    (vacuumed): history, not a problem. ``sources_unchecked`` counts the sources of an output
    that is gone: nothing is left to compare them with (whether they are on storage is not
    asked). ``sources_untagged`` counts the removes that record no composition: nothing says
    where their rows went, so they are not checked. A commit with nothing left to check is
    skipped.
    """

    version: int
    outputs: int = 0
    outputs_skipped: int = 0
    sources_checked: int = 0
    sources_skipped: int = 0
    sources_unchecked: int = 0
    sources_untagged: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``FAILED`` with problems, ``skipped`` when nothing was left to check, else ``ok``."""
        if self.problems:
            return "FAILED"
        gone = self.outputs_skipped or self.sources_skipped or self.sources_unchecked
        return "skipped" if gone and not self.sources_checked else "ok"


class _Rows:
    """A decoded file's rows taken in order, any number at a time across its batches: the
    output is compared with its sources as it streams, never held whole."""

    def __init__(self, decoded: DecodedSource, schema: pa.Schema) -> None:
        self._batches = decoded.batches()
        self._schema = schema
        self._pending: pa.RecordBatch | None = None
        self.position = 0

    def take(self, n: int) -> pa.Table:
        """The next ``n`` rows (fewer where the file ends)."""
        return pa.Table.from_batches(list(self._advance(n)), schema=self._schema)

    def skip(self, n: int) -> None:
        """Pass over the next ``n`` rows, a batch at a time."""
        for _ in self._advance(n):
            pass

    def _advance(self, n: int) -> Iterator[pa.RecordBatch]:
        while n > 0:
            if self._pending is None or not self._pending.num_rows:
                self._pending = next(self._batches, None)
                if self._pending is None:
                    return
                continue
            part = self._pending.slice(0, n)
            self._pending = self._pending.slice(part.num_rows)
            n -= part.num_rows
            self.position += part.num_rows
            yield part


def _compare(
    source: FetchedSource, output: _Rows, live: int, *, options: ReadOptions, where: dict[str, Any]
) -> tuple[int, bool]:
    """The source's live row count, and whether its first ``live`` rows equal the output's next
    ones, batch by batch. In a worker thread."""
    rows, same = 0, True
    for batch in DecodedSource(source, options, **where).batches():
        wanted = max(0, min(batch.num_rows, live - rows))
        if same and wanted:
            mine = pa.Table.from_batches([batch.slice(0, wanted)])
            same = _same_rows(mine, output.take(wanted))
        rows += batch.num_rows
    return rows, same


def _as_add(remove: RemoveFile) -> AddFile:
    """The source as it was live: the tombstone carries its path, size and read-time DV."""
    return AddFile(path=remove.path, size=remove.size or 0, deletion_vector=remove.deletion_vector)


def _bits(t: pa.DataType) -> pa.DataType:
    """``t`` with every floating-point leaf, at any depth, as the integer of its width: the
    same buffers, compared bit for bit."""
    if pa.types.is_floating(t):
        return pa.int16() if t.bit_width == 16 else pa.int32() if t.bit_width == 32 else pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_bits(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_bits(t.key_type)), t.item_field.with_type(_bits(t.item_type))
        )
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_bits(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_bits(t.value_type)))
    return t


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Row-for-row equality, floats bit for bit at any depth: a rewrite copies values, and
    ``Table.equals`` would say NaN != NaN."""
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for x, y in zip(a.columns, b.columns, strict=True):
        bits = _bits(x.type)
        if bits != x.type:
            x = pa.chunked_array([c.view(bits) for c in x.chunks], bits)
            y = pa.chunked_array([c.view(bits) for c in y.chunks], bits)
        if not x.equals(y):
            return False
    return True


@dataclass(frozen=True, slots=True)
class _Context:
    store: ObjectStore
    options: ReadOptions
    live: frozenset[str]  # canonical paths live in the latest snapshot

    def is_live(self, path: str) -> bool:
        return canonical_path(path) in self.live


async def _check_output(
    ctx: _Context,
    check: CommitCheck,
    output: AddFile,
    runs: Sequence[tuple[RemoveFile, Composition]],
    *,
    complete: bool,
) -> None:
    store, options = ctx.store, ctx.options
    where: dict[str, Any] = {"table": store.root, "version": check.version}
    try:
        fetched = await fetch_source(
            store, AddFile(path=output.path, size=output.size), options, version=check.version
        )
    except MissingDataFileError:
        if ctx.is_live(output.path):
            check.problems.append(f"output {output.path} is live in the table but missing")
        else:
            check.outputs_skipped += 1  # compacted again and vacuumed since
        check.sources_unchecked += len(runs)
        return
    try:
        decoded = await anyio.to_thread.run_sync(lambda: DecodedSource(fetched, options, **where))
        await _check_runs(ctx, check, output, runs, decoded, where, complete=complete)
    finally:
        fetched.close()


async def _fetch_if_there(
    ctx: _Context, check: CommitCheck, remove: RemoveFile
) -> FetchedSource | None:
    """The source's bytes and DV; ``None``, counted as skipped, when the source or its DV file
    is no longer on storage (a problem only if the table still needs it).

    The source's existence is checked first: VACUUM deletes a removed source's DV with it,
    and reading that DV first would report a healthy table as broken (issue 11).
    """
    store, version = ctx.store, check.version
    key = object_key(store.root, remove.path)  # None: fetch_source names the bad path
    try:
        if key is not None:
            await store.head(key)
        return await fetch_source(store, _as_add(remove), ctx.options, version=version)
    except (NotFoundError, MissingDataFileError):  # MissingDataFile: removed since the HEAD
        missing = "the file is missing"
    except DeletionVectorError as exc:
        if not isinstance(exc.__cause__, NotFoundError):  # it is there, and broken
            check.problems.append(f"source {remove.path}: {exc.detail}")
            return None
        missing = exc.detail
    if ctx.is_live(remove.path):
        check.problems.append(f"source {remove.path} is live in the table but {missing}")
    check.sources_skipped += 1
    return None


async def _check_runs(
    ctx: _Context,
    check: CommitCheck,
    output: AddFile,
    runs: Sequence[tuple[RemoveFile, Composition]],
    decoded: DecodedSource,
    where: dict[str, Any],
    *,
    complete: bool,
) -> None:
    """Each source against its run of the output, in the output's row order; the runs tile
    the output only when ``complete`` (every source of the output is tagged)."""
    rows = decoded.physical_rows
    if output.num_records is not None and rows != output.num_records:
        check.problems.append(
            f"output {output.path} has {rows} rows, stats say {output.num_records}"
        )
    compositions = [c for _, c in runs]
    tiling = check_tiling(compositions, rows, complete=complete)
    if tiling is not None:
        check.problems.append(f"output {output.path}: {tiling}")
    claimed = sum(c.live for c in compositions)
    if not complete and claimed < rows:
        check.notes.append(
            f"output {output.path}: {rows - claimed} of its {rows} rows are in no tagged run "
            "(untagged sources): not checked"
        )
    data = _Rows(decoded, ctx.options.target)
    for remove, comp in sorted(runs, key=lambda run: run[1].row_offset):
        if comp.row_offset < data.position:
            continue  # overlaps the run before: the tiling problem says so
        source = await _fetch_if_there(ctx, check, remove)
        if source is None:
            continue
        check.sources_checked += 1

        def compare(source: FetchedSource = source, comp: Composition = comp) -> tuple[int, bool]:
            data.skip(comp.row_offset - data.position)  # rows no run claims
            return _compare(source, data, comp.live, options=ctx.options, where=where)

        try:
            live, same = await anyio.to_thread.run_sync(compare)
        finally:
            source.close()
        if live != comp.live:
            check.problems.append(
                f"source {remove.path} has {live} live rows, the tags say {comp.live}"
            )
        elif not same:
            check.problems.append(
                f"source {remove.path} differs from output rows "
                f"[{comp.row_offset}, {comp.row_offset + comp.live}) of {output.path}"
            )


async def _check_commit(
    ctx: _Context, version: int, actions: Sequence[Action]
) -> CommitCheck | None:
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    if not any(COMPACTED_INTO in (r.tags or {}) for r in removes):
        return None
    check = CommitCheck(version)
    adds = {a.path: a for a in actions if isinstance(a, AddFile)}
    by_output: dict[str, list[tuple[RemoveFile, Composition]]] = defaultdict(list)
    for remove in removes:
        comp = parse_composition(remove, adds.keys())
        if comp is not None:
            by_output[comp.output_path].append((remove, comp))
            continue
        # design §2: no tags, or anything but the single-run form (other engines may write
        # lists of several), records no composition; nothing to check, nothing wrong
        check.sources_untagged += 1
        if COMPACTED_INTO in (remove.tags or {}):
            check.notes.append(f"tombstone of {remove.path}: tags not in the single-run form")
    for output_path, runs in by_output.items():
        check.outputs += 1
        output = adds[output_path]
        complete = not check.sources_untagged and output.deletion_vector is None
        try:
            await _check_output(ctx, check, output, runs, complete=complete)
        except RlcdError as exc:
            check.problems.append(f"output {output_path}: {exc}")
    return check


async def check_tags(
    store: ObjectStore, options: ReadOptions, live: frozenset[str]
) -> tuple[CommitCheck, ...]:
    """Check every tagged commit still in the log (tags do not survive into checkpoints).

    Args:
        options: how to read the table's files (the latest schema).
        live: the canonical paths live in the latest snapshot: the files whose absence is a
            problem rather than history.
    """
    ctx = _Context(store, options, live)
    checks = []
    for path in await list_log(store):
        if path.kind is not LogKind.COMMIT:
            continue
        actions = await read_commit(store, path.version, table=store.root)
        check = await _check_commit(ctx, path.version, actions)
        if check is not None:
            checks.append(check)
    return tuple(checks)
