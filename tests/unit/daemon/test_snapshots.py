"""Which held snapshots the daemon releases: the idle ones, then the idle longest while over
the budget; never a pinned one. When a load may start: when its peak fits beside what is held
and loading once the idle longest are released, or when nothing else may make room."""

from __future__ import annotations

from rlcd.daemon._snapshots import Held, Release, admit, expected_bytes, load_peak, releases

MIB = 2**20


def test_under_budget_and_busy_nothing_is_released() -> None:
    held = [Held("a", 10 * MIB, 5.0), Held("b", 20 * MIB, 60.0)]
    assert releases(held, budget=100 * MIB, idle_s=600.0) == []


def test_a_table_idle_past_the_threshold_is_released_under_budget() -> None:
    held = [Held("a", 10 * MIB, 600.0), Held("b", 20 * MIB, 599.0)]
    assert releases(held, budget=100 * MIB, idle_s=600.0) == [("a", Release.IDLE)]


def test_over_budget_the_idle_longest_go_until_it_fits() -> None:
    """60 MiB held over a 25 MiB budget: c (idle longest) then a go; b, the most recently
    active, stays though it is the biggest."""
    held = [Held("a", 20 * MIB, 30.0), Held("b", 25 * MIB, 1.0), Held("c", 15 * MIB, 90.0)]
    assert releases(held, budget=25 * MIB, idle_s=600.0) == [
        ("c", Release.BUDGET),
        ("a", Release.BUDGET),
    ]


def test_idle_ones_count_towards_fitting_the_budget() -> None:
    """Releasing the idle table already brings the rest within the budget."""
    held = [Held("old", 50 * MIB, 900.0), Held("new", 10 * MIB, 2.0)]
    assert releases(held, budget=20 * MIB, idle_s=600.0) == [("old", Release.IDLE)]


def test_pinned_tables_are_never_released_but_count() -> None:
    """A pinned table (its compaction, vacuum or checkpoint uses the snapshot) stays however
    idle; its bytes still count, so the others go, and the budget may stay exceeded."""
    held = [
        Held("running", 80 * MIB, 5000.0, pinned=True),
        Held("x", 10 * MIB, 1.0),
        Held("y", 10 * MIB, 2.0),
    ]
    assert releases(held, budget=50 * MIB, idle_s=600.0) == [
        ("y", Release.BUDGET),
        ("x", Release.BUDGET),
    ]


def test_ties_release_the_bigger_then_by_name() -> None:
    held = [Held("b", 10, 7.0), Held("a", 10, 7.0), Held("c", 30, 7.0)]
    assert releases(held, budget=15, idle_s=600.0) == [
        ("c", Release.BUDGET),
        ("a", Release.BUDGET),
    ]


def test_a_zero_budget_releases_every_unpinned_table() -> None:
    held = [Held("a", 1, 0.0), Held("b", 1, 0.0, pinned=True)]
    assert releases(held, budget=0, idle_s=600.0) == [("a", Release.BUDGET)]


def test_a_load_that_fits_starts_releasing_nothing() -> None:
    """Held 10 + loading 20 + the peak of 30 wanted (60) fit 90 MiB."""
    held = [Held("a", 10 * MIB, 5.0)]
    assert admit(held, loading=20 * MIB, pending=1, want=30 * MIB, budget=90 * MIB) == []


def test_a_load_reserves_its_peak_not_only_what_it_will_hold() -> None:
    """A load peaks at twice the snapshot it ends with: 30 wanted beside 10 pinned fits a 60
    MiB budget once loaded, but not while it loads, so it waits for what is pending (with
    nothing pending it starts); 25 wanted fits at its peak. Unpinned, the 10 held make room."""
    pinned = [Held("a", 10 * MIB, 5.0, pinned=True)]
    assert load_peak(30 * MIB) == 60 * MIB
    assert admit(pinned, loading=0, pending=1, want=30 * MIB, budget=60 * MIB) is None
    assert admit(pinned, loading=0, pending=0, want=30 * MIB, budget=60 * MIB) == []
    assert admit(pinned, loading=0, pending=1, want=25 * MIB, budget=60 * MIB) == []
    held = [Held("a", 10 * MIB, 5.0)]
    assert admit(held, loading=0, pending=1, want=30 * MIB, budget=60 * MIB) == ["a"]


def test_a_load_releases_the_idle_longest_until_it_fits() -> None:
    """Held 50 + loading 20 + the peak of 15 wanted (30) over an 80 MiB budget: old (idle
    longest) then mid go; new, the most recently active, stays though it is the biggest."""
    held = [Held("new", 30 * MIB, 1.0), Held("old", 10 * MIB, 90.0), Held("mid", 10 * MIB, 9.0)]
    assert admit(held, loading=20 * MIB, pending=1, want=15 * MIB, budget=80 * MIB) == [
        "old",
        "mid",
    ]


def test_a_load_that_cannot_fit_waits_for_what_is_pending_releasing_nothing() -> None:
    """Pinned snapshots and the loads in flight leave no room: wait, and release none of the
    unpinned ones (they would be loaded again for nothing)."""
    held = [Held("busy", 40 * MIB, 1.0, pinned=True), Held("x", 10 * MIB, 50.0)]
    assert admit(held, loading=40 * MIB, pending=2, want=30 * MIB, budget=100 * MIB) is None


def test_with_nothing_pending_a_load_always_starts() -> None:
    """A table bigger than the whole budget, or pinned snapshots filling it: the load starts
    alone, after releasing every unpinned snapshot it still does not fit beside."""
    held = [Held("busy", 80 * MIB, 1.0, pinned=True), Held("x", 10 * MIB, 50.0)]
    assert admit(held, loading=0, pending=0, want=30 * MIB, budget=100 * MIB) == ["x"]
    assert admit([], loading=0, pending=0, want=500 * MIB, budget=100 * MIB) == []


def test_expected_bytes_the_table_then_the_biggest_other_then_the_budget() -> None:
    assert expected_bytes(5, [50, None], budget=100) == 5
    assert expected_bytes(None, [20, None, 50], budget=100) == 50
    assert expected_bytes(None, [None], budget=100) == 100
