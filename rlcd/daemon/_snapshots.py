"""Which tables' snapshots the daemon releases (``[daemon] snapshot_memory``, ``snapshot_idle``).
Pure.

A watched table holds its snapshot between polls so that a poll costs one LIST and a commit
costs its own actions, not the table's (:mod:`rlcd.daemon._watch`). Many big tables would hold
gigabytes, most of them for tables that do not change. So after each step the supervisor asks
:func:`releases` which to drop: every table idle for ``snapshot_idle`` or longer, and then, while
the snapshots still held exceed ``snapshot_memory``, the tables idle longest. A table whose
compaction, vacuum or checkpoint uses (or is about to use) its snapshot is pinned: never
released, though it counts against the budget, which is why the budget can be exceeded. A
released table keeps its version and is loaded again from its newest checkpoint by the first
poll that sees a commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ("Held", "Release", "releases")
__pure__ = True


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
    order = sorted(
        (h for h in tables if not h.pinned), key=lambda h: (-h.idle_s, -h.nbytes, h.table)
    )
    out: list[tuple[str, Release]] = []
    for h in order:
        if h.idle_s >= idle_s:
            reason = Release.IDLE
        elif total > budget:
            reason = Release.BUDGET
        else:
            break
        out.append((h.table, reason))
        total -= h.nbytes
    return out
