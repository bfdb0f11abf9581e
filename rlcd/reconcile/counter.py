"""The batch counter: which source each output row came from, observed as batches pass. Pure.

The rewrite reports every batch it writes as ``(source index, live rows)``; consecutive batches of
one source merge into one run. The counter copies no rows and adds no columns. The capture guard
(design §2) then decides whether the observed runs may be persisted as composition tags: every
source exactly one run, each run as long as the source's live count ``P - |Dr|``. Never tag what
was not observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ("Run", "BatchCounter", "guard_offsets")
__pure__ = True


@dataclass(frozen=True, slots=True)
class Run:
    """``rows`` consecutive output rows that came from source ``source``."""

    source: int
    rows: int


class BatchCounter:
    """Accumulates runs in write order. ``enabled=False`` records nothing (for benchmarks)."""

    __slots__ = ("_runs", "enabled")

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._runs: list[list[int]] = []

    def record(self, source: int, rows: int) -> None:
        """``rows`` more output rows came from ``source``; ``rows=0`` marks that the source was
        read (a source whose rows are all deleted still gets its zero-length run)."""
        if not self.enabled:
            return
        if self._runs and self._runs[-1][0] == source:
            self._runs[-1][1] += rows
        else:
            self._runs.append([source, rows])

    @property
    def runs(self) -> tuple[Run, ...]:
        return tuple(Run(s, n) for s, n in self._runs)


def guard_offsets(runs: Sequence[Run], live_counts: Sequence[int]) -> list[int] | None:
    """Each source's first output row, if the runs prove the composition; else None.

    The runs prove it when source ``i`` produced exactly one run, the runs come in source order
    (so they tile the output from row 0), and run ``i`` is ``live_counts[i]`` rows long.
    """
    if [r.source for r in runs] != list(range(len(live_counts))):
        return None
    offsets, at = [], 0
    for run, live in zip(runs, live_counts, strict=True):
        if run.rows != live:
            return None
        offsets.append(at)
        at += run.rows
    return offsets
