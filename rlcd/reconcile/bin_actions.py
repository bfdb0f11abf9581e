"""Forward reconcile: carry a rewritten bin over the DML winners that beat its commit. Pure.

A bin keeps a :class:`BinState` across commit attempts (design §4): each source's read-time
add (its DV is ``Dr``) and run (a :class:`~rlcd.reconcile.tags.Composition`), the source's
live add as of the latest winner (the key its tombstone must carry), and the output's DV so
far. :func:`apply_steps` folds the classified winner steps into it:

- :class:`~rlcd.reconcile.classify.Remap` (the winner replaced S's DV by ``Dw``): the new
  deletions ``Dw - Dr`` join the output's DV at their output positions, and S's tombstone is
  re-keyed to ``(S, Dw)``. The latest ``Dw`` always covers the earlier ones (checked), so a
  second winner on the same source remaps from ``Dr`` again and the union is idempotent.
- :class:`~rlcd.reconcile.classify.Mask` (the winner removed S, rewriting its surviving rows
  elsewhere): S's whole run joins the output's DV, and S gets no tombstone (it is gone), as long
  as the output's deleted fraction stays at most ``max_masked_ratio``.

A reconciled bin is committed with the output's DV, ``tightBounds=false`` (the bounds still
hold, but may be wider than the live rows) and ``numRecords`` the physical count. A tag is a
per-source fact, read per source (by rlcd's reverse rebase, by Databricks Runtime): each
source still tombstoned with its read-time DV keeps its tags, since its live rows are still
exactly the output's rows ``[o, o + P - |Dr|)``. The remapped source's tombstone carries
``Dw``, under which that count is wrong, so it carries none; a masked source has no
tombstone. An output whose every row ends up deleted is dropped; only the removes commit,
untagged (there is no output to name).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Final, Generic, Protocol, TypeVar, assert_never

from pyroaring import AbstractBitMap64, FrozenBitMap64

from rlcd.delta.actions import Action, AddFile
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import canonical_path
from rlcd.delta.stats_json import stats_json
from rlcd.reconcile.classify import Mask, Remap
from rlcd.reconcile.remap import DV_RESTORED, forward_remap, run_mask
from rlcd.reconcile.tags import Composition, composition_tags, optimized_tags

__all__ = (
    "COMPOSITION_UNKNOWN",
    "MASK_CEILING_EXCEEDED",
    "Fate",
    "SourceState",
    "BinSources",
    "Rewritten",
    "BinState",
    "initial_state",
    "apply_steps",
    "bin_actions",
    "loose_stats",
)
__pure__ = True

COMPOSITION_UNKNOWN: Final = "composition_unknown"
"""The capture guard did not prove where the source's rows are: nothing can be remapped."""
MASK_CEILING_EXCEEDED: Final = "mask_ceiling_exceeded"
"""Masking the source's run would leave the output with too many deleted rows."""

DvKey = tuple[str, str | None]
"""An add's log-replay key ``(path, DV unique id)``: what a loaded DV is filed under."""


class BinSources(Protocol):
    """What reconcile reads of a planned bin (``rlcd.compaction.plan.Bin``): the sources in
    log order and their partition values, copied into the output's add."""

    @property
    def sources(self) -> tuple[AddFile, ...]: ...
    @property
    def partition_values(self) -> Mapping[str, str | None]: ...


class Rewritten(Protocol):
    """What reconcile reads of a rewritten bin (``rlcd.compaction.rewrite.RewrittenBin``),
    named here so that the conflict maths does not depend on the engine that writes files."""

    @property
    def bin(self) -> BinSources: ...
    @property
    def path(self) -> str | None: ...
    @property
    def size(self) -> int: ...
    @property
    def modification_time(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def stats(self) -> str | None: ...
    @property
    def physical_rows(self) -> tuple[int, ...]: ...
    @property
    def offsets(self) -> tuple[int, ...] | None: ...
    @property
    def target_file_size(self) -> int | None: ...


R = TypeVar("R", bound=Rewritten)


class Fate(enum.Enum):
    """What the commit does with a source."""

    COMPACTED = "compacted"  # tombstoned with the DV it was read with
    REMAPPED = "remapped"  # a winner updated its DV: tombstoned with that DV
    MASKED = "masked"  # a winner removed it: no tombstone, its run is deleted in the output


@dataclass(frozen=True, slots=True)
class SourceState:
    """One source of a bin across attempts.

    ``read`` is the add the rewrite read (its DV is ``Dr``); ``live`` the source's live add now
    (``read`` until a winner updates its DV); ``run`` where its live rows sit in the output
    (None when the capture guard failed).
    """

    read: AddFile
    live: AddFile
    run: Composition | None
    fate: Fate = Fate.COMPACTED


@dataclass(frozen=True, slots=True)
class BinState(Generic[R]):
    """A rewritten bin and what the winners so far did to it. ``deleted`` is the output's DV
    (output row positions); ``remapped_positions`` counts the ones remaps put there."""

    done: R
    sources: tuple[SourceState, ...]
    deleted: FrozenBitMap64
    remapped_positions: int = 0
    masked_positions: int = 0

    @property
    def remapped(self) -> int:
        return sum(1 for s in self.sources if s.fate is Fate.REMAPPED)

    @property
    def masked(self) -> int:
        return sum(1 for s in self.sources if s.fate is Fate.MASKED)

    @property
    def reconciled(self) -> bool:
        return any(s.fate is not Fate.COMPACTED for s in self.sources)

    @property
    def output_dropped(self) -> bool:
        """Every output row is deleted: commit only the removes."""
        return self.done.rows > 0 and len(self.deleted) == self.done.rows

    def live_sources(self) -> dict[str, AddFile]:
        """Canonical path -> live add of every source still to be tombstoned."""
        return {
            canonical_path(s.live.path): s.live for s in self.sources if s.fate is not Fate.MASKED
        }


def initial_state(done: R) -> BinState[R]:
    """A bin as rewritten, before any winner."""
    runs: list[Composition | None] = [None] * len(done.bin.sources)
    if done.offsets is not None:
        runs = [
            Composition(s.path, done.path or "", o, p, s.deleted_rows)
            for s, o, p in zip(done.bin.sources, done.offsets, done.physical_rows, strict=True)
        ]
    sources = tuple(
        SourceState(read=s, live=s, run=r) for s, r in zip(done.bin.sources, runs, strict=True)
    )
    return BinState(done, sources, FrozenBitMap64())


def apply_steps(
    state: BinState[R],
    steps: Sequence[Remap | Mask],
    bitmaps: Mapping[DvKey, AbstractBitMap64],
    *,
    max_masked_ratio: float,
) -> BinState[R] | Abort:
    """Fold one winner's steps for this bin into its state, or abort the bin.

    Args:
        bitmaps: the DV contents, by add key, of each remapped source's read add, live add and
            winner add (an add without a DV maps to the empty set).
        max_masked_ratio: the largest deleted fraction of the output a mask may leave.
    """
    index = {canonical_path(s.read.path): i for i, s in enumerate(state.sources)}
    sources = list(state.sources)
    deleted = state.deleted
    remapped, masked = state.remapped_positions, state.masked_positions
    for step in steps:
        i = index[step.source]
        source = sources[i]
        run = source.run
        if run is None:
            return Abort(
                COMPOSITION_UNKNOWN,
                f"version {step.version} changed source {source.read.path}, whose rows in the "
                "output the rewrite could not prove",
            )
        if isinstance(step, Remap):
            current, winner = bitmaps[source.live.key], bitmaps[step.winner.key]
            if not current.issubset(winner):
                return Abort(
                    DV_RESTORED,
                    f"version {step.version} gave {source.read.path} a DV that lacks "
                    f"{len(current - winner)} of its deleted rows",
                )
            positions = forward_remap(bitmaps[source.read.key], run.row_offset, run.live, winner)
            if isinstance(positions, Abort):
                return Abort(
                    positions.reason,
                    f"version {step.version} on {source.read.path}: {positions.detail}",
                )
            merged = deleted | positions
            remapped += len(merged) - len(deleted)
            deleted = merged
            sources[i] = replace(source, live=step.winner, fate=Fate.REMAPPED)
        elif isinstance(step, Mask):
            merged = deleted | run_mask(run.row_offset, run.live)
            rows = state.done.rows
            if rows and len(merged) > max_masked_ratio * rows:
                return Abort(
                    MASK_CEILING_EXCEEDED,
                    f"version {step.version} rewrote {source.read.path}: masking its "
                    f"{run.live} rows would delete {len(merged)} of the output's {rows} "
                    f"(ceiling {max_masked_ratio:g})",
                )
            masked += len(merged) - len(deleted)
            deleted = merged
            sources[i] = replace(source, fate=Fate.MASKED)
        else:
            assert_never(step)
    return replace(
        state,
        sources=tuple(sources),
        deleted=deleted,
        remapped_positions=remapped,
        masked_positions=masked,
    )


def loose_stats(stats: str | None) -> str | None:
    """``stats`` with ``tightBounds=false``, every value kept exact (decimals are parsed as
    :class:`~decimal.Decimal`, never as floats: a rounded bound could make readers skip live
    rows). None when there are no stats to loosen."""
    if not stats:
        return None
    tree = json.loads(stats, parse_float=Decimal)
    if not isinstance(tree, dict):
        return None
    tree["tightBounds"] = False
    return stats_json(tree, engine_floats=True)


def bin_actions(
    state: BinState[R], *, now_ms: int, output_dv: DeletionVectorDescriptor | None
) -> list[Action]:
    """The output's add (``dataChange=false``) and the sources' tombstones.

    Each source tombstoned with the DV it was read with is tagged with its run when the
    capture guard held (design §2); a remapped source's tombstone is not. A reconciled output
    carries ``output_dv`` (required when it has deletions).
    """
    done = state.done
    if state.deleted and not state.output_dropped and output_dv is None:
        raise ValueError("a reconciled output with deletions needs its DV descriptor")
    actions: list[Action] = []
    output = None if state.output_dropped else done.path
    if output is not None:
        dv = output_dv if state.deleted else None
        actions.append(
            AddFile(
                path=output,
                partition_values=dict(done.bin.partition_values),
                size=done.size,
                modification_time=done.modification_time,
                data_change=False,
                stats=loose_stats(done.stats) if dv is not None else done.stats,
                tags=optimized_tags(done.target_file_size),
                deletion_vector=dv,
            )
        )
    for source in state.sources:
        if source.fate is Fate.MASKED:
            continue
        tags = None
        if source.run is not None and source.fate is Fate.COMPACTED and output is not None:
            tags = composition_tags(output, source.run.row_offset, source.run.physical_records)
        actions.append(source.live.tombstone(now_ms=now_ms, data_change=False, tags=tags))
    return actions
