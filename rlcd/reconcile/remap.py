"""Deletion-vector rank remapping between a source and the output it was compacted into. Pure.

Theory of operation (design §3)
-------------------------------
A compaction copied source S's live rows, in physical order, to the output rows ``[o, o + L)``
where ``L = P - |Dr|`` and ``Dr`` is the DV S had when it was read. A physical row ``i`` of S
not in ``Dr`` therefore sits at output row ``o + rank(i)`` with
``rank(i) = i - |{d in Dr : d < i}|``. Every function here applies that one formula to whole
bitmaps at once: the positions come out of the bitmap as a sorted ``uint64`` array, a binary
search of each in the (sorted) DV counts the deleted rows below it, and the result goes back
into a bitmap through one buffer copy (:mod:`rlcd.reconcile.positions`). No Python loop
ever runs per row: DVs can hold millions of positions (``bench/remap.py`` measures it).

A position that does not land in the run (``i in Dr``, or ``rank(i) >= L``, e.g. a row beyond
the file) is never clamped: the function returns an :class:`~rlcd.delta.outcome.Abort`, and
the caller aborts the bin or the transaction.

- :func:`forward_remap`: the compaction lost to a DV update ``Dw ⊇ Dr`` of S (design §4): the
  new deletions ``Dw - Dr`` as output positions.
- :func:`run_mask`: the compaction lost to a copy-on-write removal of S: S's whole run.
- :func:`reverse_rebase`: a DML lost to a compaction (design §5): its new deletions of S as
  positions of the output, through the DV ``Do`` on the compaction's tombstone.
- :func:`merge_same_file`: two DV updates of one file (design §6): disjoint deletions merge,
  overlapping ones conflict.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import AbstractBitMap64, FrozenBitMap64

from rlcd.delta.outcome import Abort
from rlcd.reconcile.positions import positions_array, positions_bitmap

__all__ = (
    "DV_RESTORED",
    "POSITION_OUTSIDE_RUN",
    "ROW_ALREADY_DELETED",
    "OVERLAPPING_DELETES",
    "forward_remap",
    "run_mask",
    "reverse_rebase",
    "merge_same_file",
)
__pure__ = True

DV_RESTORED: Final = "dv_restored"
"""The winner's DV lacks a position the reader's DV had: rows came back (a RESTORE)."""
POSITION_OUTSIDE_RUN: Final = "position_outside_run"
"""A deleted position has no output row in the source's run (beyond the file's live rows)."""
ROW_ALREADY_DELETED: Final = "row_already_deleted"
"""A DML deletes a row the compaction had already left out (plain Delta aborts too)."""
OVERLAPPING_DELETES: Final = "overlapping_deletes"
"""Two concurrent DV updates of one file delete some of the same rows: a real conflict."""


def _ranks(dv: AbstractBitMap64, positions: AbstractBitMap64) -> pa.UInt64Array:
    """``rank_dv(i) = i - |{d in dv : d < i}|`` for every ``i`` in ``positions``, ascending."""
    rows = positions_array(positions)
    if not len(dv):
        return rows
    return pc.subtract(rows, pc.search_sorted(positions_array(dv), rows, side="left"))


def _place(
    ranks: pa.UInt64Array, row_offset: int, live: int, *, what: str
) -> FrozenBitMap64 | Abort:
    """``o + rank`` for ranks all below ``live``, else an abort naming the first one outside."""
    if len(ranks) and ranks[-1].as_py() >= live:
        return Abort(
            POSITION_OUTSIDE_RUN,
            f"{what}: rank {ranks[-1].as_py()} is outside the run of {live} live rows",
        )
    return positions_bitmap(pc.add(ranks, pa.scalar(row_offset, pa.uint64())))


def _check_run(row_offset: int, live: int) -> None:
    if row_offset < 0 or live < 0:
        raise ValueError(f"a run needs a non-negative offset and length, got {row_offset}, {live}")


def forward_remap(
    read_dv: AbstractBitMap64, row_offset: int, live: int, winner_dv: AbstractBitMap64
) -> FrozenBitMap64 | Abort:
    """The output positions of the rows a winner deleted from a compacted source (design §4).

    Args:
        read_dv: ``Dr``, the source's DV when the compaction read it.
        row_offset: ``o``, the output row of the source's first live row.
        live: ``L = P - |Dr|``, the length of the source's run.
        winner_dv: ``Dw``, the DV the winner gave the source.

    Returns:
        The positions ``o + rank_Dr(i)`` for every ``i`` in ``Dw - Dr``; or an abort when
        ``Dw`` is not a superset of ``Dr`` (:data:`DV_RESTORED`) or a position falls outside
        the run (:data:`POSITION_OUTSIDE_RUN`).
    """
    _check_run(row_offset, live)
    if not read_dv.issubset(winner_dv):
        lost = len(read_dv) - read_dv.intersection_cardinality(winner_dv)
        return Abort(DV_RESTORED, f"the winner's DV brings back {lost} deleted rows")
    return _place(_ranks(read_dv, winner_dv - read_dv), row_offset, live, what="winner's DV")


def run_mask(row_offset: int, live: int) -> FrozenBitMap64:
    """Every output row of a source's run ``[o, o + L)``: what a copy-on-write winner that
    removed the source (and rewrote its surviving rows elsewhere) makes obsolete."""
    _check_run(row_offset, live)
    return FrozenBitMap64(range(row_offset, row_offset + live))


def reverse_rebase(
    compaction_dv: AbstractBitMap64, row_offset: int, live: int, deletions: AbstractBitMap64
) -> FrozenBitMap64 | Abort:
    """A losing DML's new deletions of a source, as positions of the compaction's output
    (design §5).

    Args:
        compaction_dv: ``Do``, the DV on the compaction's tombstone of the source.
        row_offset: ``o``, from the tombstone's ``compactionInfo``.
        live: ``L = P - |Do|``.
        deletions: the physical rows of the source the DML deletes and the source had not
            deleted when the DML read it (``Dn - Dr'``).

    Returns:
        ``o + rank_Do(i)`` for each deletion; or an abort when a row was already left out by
        the compaction (:data:`ROW_ALREADY_DELETED`) or falls outside the run
        (:data:`POSITION_OUTSIDE_RUN`).
    """
    _check_run(row_offset, live)
    gone = deletions.intersection_cardinality(compaction_dv)
    if gone:
        return Abort(
            ROW_ALREADY_DELETED, f"{gone} of the rows were already deleted when it was compacted"
        )
    return _place(_ranks(compaction_dv, deletions), row_offset, live, what="deletion")


def merge_same_file(
    read_dv: AbstractBitMap64, winner_dv: AbstractBitMap64, loser_dv: AbstractBitMap64
) -> FrozenBitMap64 | Abort:
    """Rebase a losing DV update of a file onto a winning one (design §6).

    Both read the file with ``read_dv``; the winner committed ``winner_dv``, the loser wants
    ``loser_dv``. Their new deletions must be disjoint: the result is ``Dw | Dloser``, to be
    committed with the tombstone keyed by the winner's DV. A winner that dropped positions of
    ``read_dv`` (:data:`DV_RESTORED`) or deleted some of the loser's rows too
    (:data:`OVERLAPPING_DELETES`) is a conflict.
    """
    if not read_dv.issubset(winner_dv):
        lost = len(read_dv) - read_dv.intersection_cardinality(winner_dv)
        return Abort(DV_RESTORED, f"the winner's DV brings back {lost} deleted rows")
    theirs, mine = winner_dv - read_dv, loser_dv - read_dv
    both = theirs.intersection_cardinality(mine)
    if both:
        return Abort(OVERLAPPING_DELETES, f"both deleted {both} of the same rows")
    return FrozenBitMap64(winner_dv | mine)
