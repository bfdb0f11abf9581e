"""Which tables' snapshots the daemon releases, and when a load may start (``[daemon]
snapshot_memory``, ``snapshot_idle``). Pure.

A watched table holds its snapshot between polls so that a poll costs one LIST and a commit
costs its own actions, not the table's (:mod:`rlcd.daemon._watch`). Many big tables would hold
gigabytes, most of them for tables that do not change. So after each step the supervisor asks
:func:`releases` which to drop: every table idle for ``snapshot_idle`` or longer, and then, while
the snapshots still held exceed ``snapshot_memory``, the tables idle longest. A table whose
compaction, vacuum or checkpoint uses (or is about to use) its snapshot is pinned: never
released, though it counts against the budget, which is why the budget can be exceeded. A
released table keeps its version and is loaded again from its newest checkpoint by the first
poll that sees a commit.

Loads respect the budget too, or a pass that loads many tables (the first, or one in which many
released tables changed) would hold them all before any release. Before a load starts,
:func:`admit` reserves its peak (:func:`load_peak` of :func:`expected_bytes`: a load holds
about twice the snapshot it ends with): it picks the unpinned snapshots to release first, idle
longest first, so that what is held, the loads in flight and this one fit; when they cannot,
the load waits for a load in flight to end, or a poll to unpin its snapshot. With neither
pending a load always starts, so a table bigger than the whole budget still loads, alone. A
load that ends gives its reservation back and its snapshot counts as held: what it reserved
shrinks to what it holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = ("Held", "Release", "releases", "admit", "expected_bytes", "load_peak", "LOAD_PEAK")
__pure__ = True

LOAD_PEAK: Final = 2.0
"""What a load holds at its peak, in snapshots it ends with: the checkpoint's batches as read
and the replayed columns built from them are alive together (docs/performance.md)."""


class Release(StrEnum):
    """Why a snapshot was released (the ``reason`` of ``snapshot_released``)."""

    IDLE = "idle"
    """Its table was idle for ``snapshot_idle``."""
    BUDGET = "budget"
    """The snapshots held exceeded ``snapshot_memory``; its table was idle longest."""


@dataclass(frozen=True, slots=True)
class Held:
    """A table's held snapshot: its bytes, how long since the table last changed or ended a
    run or a vacuum, and whether work on the table uses it (``pinned``)."""

    table: str
    nbytes: int
    idle_s: float
    pinned: bool = False


def releases(held: Iterable[Held], *, budget: int, idle_s: float) -> list[tuple[str, Release]]:
    """The tables to release and why, idle longest first (ties: the bigger first, then by
    name): every unpinned table idle ``idle_s`` or longer, then unpinned ones until what is
    held fits ``budget`` bytes (or none is left to release)."""
    tables = list(held)
    total = sum(h.nbytes for h in tables)
    out: list[tuple[str, Release]] = []
    for h in _idle_longest_first(tables):
        if h.idle_s >= idle_s:
            reason = Release.IDLE
        elif total > budget:
            reason = Release.BUDGET
        else:
            break
        out.append((h.table, reason))
        total -= h.nbytes
    return out


def _idle_longest_first(held: list[Held]) -> list[Held]:
    """The unpinned tables, idle longest first (ties: the bigger first, then by name)."""
    return sorted((h for h in held if not h.pinned), key=lambda h: (-h.idle_s, -h.nbytes, h.table))


def admit(
    held: Iterable[Held], *, loading: int, pending: int, want: int, budget: int
) -> list[str] | None:
    """Whether a load expected to hold ``want`` bytes, reserving its :func:`load_peak`, may
    start beside loads in flight that reserved ``loading`` bytes: the unpinned tables to
    release first (idle longest first) so that all fit ``budget``, or None: wait, releasing
    nothing. ``pending`` counts what may make room when it ends (loads in flight, polls that
    pin a snapshot); with none, the load always starts, after releasing what it can."""
    tables = list(held)
    total = sum(h.nbytes for h in tables) + loading + load_peak(want)
    out: list[str] = []
    for h in _idle_longest_first(tables):
        if total <= budget:
            break
        out.append(h.table)
        total -= h.nbytes
    return out if total <= budget or pending == 0 else None


def expected_bytes(known: int | None, others: Iterable[int | None], *, budget: int) -> int:
    """What a table's load is expected to hold: its snapshot's bytes when last held; else the
    biggest snapshot of the other tables (a daemon's tables tend to be alike); else, nothing
    being known, the whole ``budget`` (the first load goes alone)."""
    if known is not None:
        return known
    return max((n for n in others if n is not None), default=budget)


def load_peak(want: int) -> int:
    """What a load expected to hold ``want`` bytes reserves while it runs (:data:`LOAD_PEAK`)."""
    return math.ceil(want * LOAD_PEAK)
