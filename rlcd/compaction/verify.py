"""``rlcd verify``: check composition tags in the log against the data they describe.

For every JSON commit whose tombstones carry ``compactedInto``/``compactionInfo`` (written by
rlcd or by any engine using the Databricks format), check that each output's runs tile it and
that every source still on storage has exactly the output's rows ``[o, o + L)``, in order.
Sources or outputs already vacuumed are reported as skipped, never as passing checks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import pyarrow as pa

from rlcd.compaction.compact import rewrite_settings
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.source import DecodedSource, ReadOptions, fetch_source
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


async def _read_rows(
    store: ObjectStore, add: AddFile, options: ReadOptions, *, table: str, version: int
) -> pa.Table:
    fetched = await fetch_source(store, add, options, version=version)

    def decode() -> pa.Table:
        try:
            return pa.Table.from_batches(
                list(DecodedSource(fetched, options, table=table, version=version).batches()),
                schema=options.target,
            )
        finally:
            fetched.close()

    return await anyio.to_thread.run_sync(decode)


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
    table, version = store.root, check.version
    rows = output.num_records
    try:
        data = await _read_rows(
            store,
            AddFile(path=output.path, size=output.size),
            options,
            table=table,
            version=version,
        )
    except MissingDataFileError:
        if ctx.is_live(output.path):
            check.problems.append(f"output {output.path} is live in the table but missing")
        else:
            check.notes.append(f"output {output.path} was removed since: not checked")
        check.sources_skipped += len(runs)
        return
    rows = data.num_rows if rows is None else rows
    if data.num_rows != rows:
        check.problems.append(f"output {output.path} has {data.num_rows} rows, stats say {rows}")
    tiling = check_tiling([c for _, c in runs], data.num_rows)
    if tiling is not None:
        check.problems.append(f"output {output.path}: {tiling}")
    for remove, comp in runs:
        try:
            source = await _read_rows(store, _as_add(remove), options, table=table, version=version)
        except MissingDataFileError:
            if ctx.is_live(remove.path):
                check.problems.append(f"source {remove.path} is live in the table but missing")
            check.sources_skipped += 1
            continue
        check.sources_checked += 1
        if source.num_rows != comp.live:
            check.problems.append(
                f"source {remove.path} has {source.num_rows} live rows, the tags say {comp.live}"
            )
        elif not _same_rows(source, data.slice(comp.row_offset, comp.live)):
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
