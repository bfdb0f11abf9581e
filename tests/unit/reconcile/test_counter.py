"""The batch counter and the capture guard (design §2)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rlcd.reconcile.counter import BatchCounter, Run, guard_offsets


def test_batches_of_one_source_merge_into_one_run() -> None:
    """Consecutive batches of a source make one run; a zero-row source still gets a run."""
    c = BatchCounter()
    for source, rows in [(0, 0), (0, 5), (0, 3), (1, 0), (2, 0), (2, 4)]:
        c.record(source, rows)
    assert c.runs == (Run(0, 8), Run(1, 0), Run(2, 4))
    assert guard_offsets(c.runs, [8, 0, 4]) == [0, 8, 8]


def test_guard_refuses_what_was_not_observed() -> None:
    """Wrong counts, missing, split or reordered runs all fail the guard."""
    assert guard_offsets((Run(0, 8), Run(1, 4)), [8, 5]) is None
    assert guard_offsets((Run(0, 8),), [8, 4]) is None
    assert guard_offsets((Run(0, 4), Run(1, 4), Run(0, 4)), [8, 4]) is None
    assert guard_offsets((Run(1, 4), Run(0, 8)), [8, 4]) is None
    off = BatchCounter(enabled=False)
    off.record(0, 3)
    assert off.runs == ()
    assert guard_offsets(off.runs, [3]) is None


@given(st.lists(st.lists(st.integers(0, 50), max_size=5), min_size=1, max_size=8))
def test_offsets_tile_the_output(batches: list[list[int]]) -> None:
    """For any batch split, offsets are prefix sums of the per-source live counts."""
    c = BatchCounter()
    for source, sizes in enumerate(batches):
        c.record(source, 0)
        for n in sizes:
            c.record(source, n)
    live = [sum(sizes) for sizes in batches]
    offsets = guard_offsets(c.runs, live)
    assert offsets == [sum(live[:i]) for i in range(len(live))]
