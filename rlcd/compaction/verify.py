"""``rlcd verify``: check composition tags in the log against the data they describe.

For every JSON commit whose tombstones carry ``compactedInto``/``compactionInfo`` (written by
rlcd or by any engine using the Databricks format), check that each output's runs tile it and
that every source still on storage has exactly the output's rows ``[o, o + L)``, in order.
Sources or outputs already vacuumed are reported as skipped, never as passing checks. An
output is decoded once, streaming past its sources in row order: memory holds about a batch
of each, whatever the file sizes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pyarrow as pa

from rlcd.compaction.compact import rewrite_settings
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.source import DecodedSource, FetchedSource, ReadOptions, fetch_source
from rlcd.compaction.tags import COMPACTED_INTO, Composition, check_tiling, parse_composition
from rlcd.delta.actions import Action, AddFile, RemoveFile
from rlcd.delta.load import list_log, load_snapshot, read_commit, table_config
from rlcd.delta.log_path import LogKind
from rlcd.delta.replay import canonical_path
from rlcd.errors import MissingDataFileError, RlcdError
from rlcd.storage.base import ObjectStore

__all__ = ("CommitCheck", "VerifyReport", "verify_table")


@dataclass
class CommitCheck:
    """The checks of one commit: counts, and every problem found (empty means it verified)."""

    version: int
    outputs: int = 0
    sources_checked: int = 0
    sources_skipped: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    table: str
    commits: tuple[CommitCheck, ...]

    @property
    def ok(self) -> bool:
        return all(not c.problems for c in self.commits)


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
            check.notes.append(f"output {output.path} was removed since: not checked")
        check.sources_skipped += len(runs)
        return
    try:
        decoded = await anyio.to_thread.run_sync(lambda: DecodedSource(fetched, options, **where))
        await _check_runs(ctx, check, output, runs, decoded, where)
    finally:
        fetched.close()


async def _check_runs(
    ctx: _Context,
    check: CommitCheck,
    output: AddFile,
    runs: Sequence[tuple[RemoveFile, Composition]],
    decoded: DecodedSource,
    where: dict[str, Any],
) -> None:
    """Each source against its run of the output, in the output's row order."""
    rows = decoded.physical_rows
    if output.num_records is not None and rows != output.num_records:
        check.problems.append(
            f"output {output.path} has {rows} rows, stats say {output.num_records}"
        )
    tiling = check_tiling([c for _, c in runs], rows)
    if tiling is not None:
        check.problems.append(f"output {output.path}: {tiling}")
    data = _Rows(decoded, ctx.options.target)
    for remove, comp in sorted(runs, key=lambda run: run[1].row_offset):
        if comp.row_offset < data.position:
            continue  # overlaps the run before: the tiling problem says so
        try:
            source = await fetch_source(
                ctx.store, _as_add(remove), ctx.options, version=check.version
            )
        except MissingDataFileError:
            if ctx.is_live(remove.path):
                check.problems.append(f"source {remove.path} is live in the table but missing")
            check.sources_skipped += 1
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
    tagged = [a for a in actions if isinstance(a, RemoveFile) and COMPACTED_INTO in (a.tags or {})]
    if not tagged:
        return None
    check = CommitCheck(version)
    adds = {a.path: a for a in actions if isinstance(a, AddFile)}
    by_output: dict[str, list[tuple[RemoveFile, Composition]]] = defaultdict(list)
    for remove in tagged:
        comp = parse_composition(remove, adds.keys())
        if comp is None:
            # design §2: anything but the single-run form (other engines may write lists of
            # several) records no composition; nothing to check, nothing wrong
            check.notes.append(f"tombstone of {remove.path}: tags not in the single-run form")
        else:
            by_output[comp.output_path].append((remove, comp))
    for output_path, runs in by_output.items():
        check.outputs += 1
        try:
            await _check_output(ctx, check, adds[output_path], runs)
        except RlcdError as exc:
            check.problems.append(f"output {output_path}: {exc}")
    return check


async def verify_table(store: ObjectStore) -> VerifyReport:
    """Check every tagged commit still in the log (tags do not survive into checkpoints)."""
    snapshot = await load_snapshot(store)
    ctx = _Context(
        store,
        rewrite_settings(snapshot, table_config(snapshot), CompactionPolicy()).read,
        frozenset(snapshot.files),
    )
    checks = []
    for path in await list_log(store):
        if path.kind is not LogKind.COMMIT:
            continue
        actions = await read_commit(store, path.version, table=store.root)
        check = await _check_commit(ctx, path.version, actions)
        if check is not None:
            checks.append(check)
    return VerifyReport(store.root, tuple(checks))
