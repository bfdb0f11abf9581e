"""The daemon's schedule: due thresholds, minimum interval, benefit order, fairness, backoff."""

from __future__ import annotations

import pytest

from rlcd.compaction.plan import Bin
from rlcd.daemon.schedule import (
    Backlog,
    Backoff,
    Quarantine,
    RunOutcome,
    Schedule,
    Trigger,
    backoff_s,
)
from rlcd.delta.actions import AddFile

TRIGGER = Trigger(min_small_files=3, min_small_bytes=1000, min_interval_s=60)


def files(n: int, size: int = 10, part: str = "a", start: int = 0) -> tuple[AddFile, ...]:
    return tuple(
        AddFile(path=f"{part}/f{start + i}", partition_values={"p": part}, size=size)
        for i in range(n)
    )


def bin_of(sources: tuple[AddFile, ...], *, purge: bool = False) -> Bin:
    return Bin(
        partition_values=sources[0].partition_values,
        sources=sources,
        estimated_bytes=sum(s.size for s in sources),
        purges_dvs=purge,
        needs_footer_counts=False,
    )


def backlog(n: int, size: int = 10) -> Backlog:
    return Backlog.of([bin_of(files(n, size))])


def observed(*tables: tuple[str, Backlog], now: float = 0) -> Schedule:
    schedule = Schedule(backoff=Backoff(base_s=10, cap_s=100), max_wait_s=300)
    for name, b in tables:
        schedule = schedule.observe(name, b, TRIGGER, version=1, now=now)
    return schedule


def test_backlog_counts_files_per_partition() -> None:
    """A plan's backlog counts its files, bytes and the fullest partition's files."""
    plan = [
        bin_of(files(2, part="a")),
        bin_of(files(2, part="a", start=2)),
        bin_of(files(3, part="b")),
    ]
    b = Backlog.of(plan)
    assert (b.bins, b.files, b.bytes, b.max_partition_files) == (3, 7, 70, 4)
    assert b.files_removed == 4 and b.benefit == pytest.approx(4 / 70)


@pytest.mark.parametrize(
    ("plan", "reason"),
    [
        ([], None),
        ([bin_of(files(2))], None),
        ([bin_of(files(3))], "small_files"),
        ([bin_of(files(2, part="a")), bin_of(files(2, part="b"))], None),
        ([bin_of(files(2, size=500))], "small_bytes"),
        ([bin_of(files(1), purge=True)], "dv_purge"),
    ],
)
def test_due_when_a_threshold_is_met(plan: list[Bin], reason: str | None) -> None:
    """Due for small files in one partition, for small bytes overall, or for a DV purge;
    small files spread over partitions below the per-partition threshold are not due."""
    assert TRIGGER.reason(Backlog.of(plan)) == reason


def test_a_table_below_its_thresholds_is_not_picked() -> None:
    """Only due tables are picked."""
    assert observed(("t", backlog(2))).pick(0, 10) == []


def test_not_more_often_than_the_minimum_interval() -> None:
    """After a run a due table waits min_interval before it is picked again."""
    s = observed(("t", backlog(5))).started("t")
    assert s.pick(0, 10) == [], "a running table is not picked twice"
    s = s.finished("t", RunOutcome.COMMITTED, now=100, draw=0.0)
    s = s.observe("t", backlog(5), TRIGGER, version=2, now=101)
    assert s.pick(159, 10) == []
    assert s.next_ready() == 160
    assert s.pick(160, 10) == ["t"]


def test_ordered_by_benefit() -> None:
    """More files removed per byte rewritten goes first; the limit caps the picks."""
    s = observed(("big", backlog(4, size=400)), ("many", backlog(10)), ("few", backlog(3)))
    assert s.pick(0, 10) == ["many", "few", "big"]
    assert s.pick(0, 2) == ["many", "few"]


def test_a_table_busy_with_other_work_is_not_picked() -> None:
    """A table the supervisor vacuums is left out, and does not take a slot of the limit."""
    s = observed(("big", backlog(4, size=400)), ("many", backlog(10)), ("few", backlog(3)))
    assert s.pick(0, 2, exclude={"many"}) == ["few", "big"]


def test_a_table_waiting_too_long_goes_first() -> None:
    """A due table waiting longer than max_wait runs before better fresher ones (no
    starvation), the longest waiting first."""
    s = observed(("low", backlog(4, size=400)), now=0)
    s = s.observe("lower", backlog(3, size=400), TRIGGER, version=1, now=100)
    s = s.observe("high", backlog(10), TRIGGER, version=1, now=350)
    assert s.pick(350, 10) == ["low", "high", "lower"]
    assert s.pick(410, 10) == ["low", "lower", "high"]


def test_waiting_time_survives_polls() -> None:
    """Observing a still-due table keeps the time it became due."""
    s = observed(("t", backlog(5)), now=0)
    s = s.observe("t", backlog(6), TRIGGER, version=2, now=50)
    assert s.state("t").due_since == 0
    s = s.observe("t", Backlog(), TRIGGER, version=3, now=60)
    assert s.state("t").due_since is None


def test_conflicts_back_off_exponentially_capped_and_reset_on_success() -> None:
    """Each run lost to conflicts doubles the wait (jitter scales it within [half, whole]),
    up to the cap; a committed run clears it."""
    s = observed(("t", backlog(5)))
    waits = []
    now = 0.0
    for _ in range(6):
        s = s.started("t").finished("t", RunOutcome.CONFLICTED, now=now, draw=0.999999)
        waits.append(round(s.state("t").retry_at - now))
        now = s.state("t").retry_at
    assert waits == [10, 20, 40, 80, 100, 100]
    s = s.started("t").finished("t", RunOutcome.COMMITTED, now=now, draw=0.5)
    assert s.state("t").failures == 0 and s.state("t").retry_at < now


def test_jitter_spreads_the_wait_between_half_and_whole() -> None:
    """The drawn jitter places the wait between half the ceiling and the ceiling."""
    b = Backoff(base_s=10, cap_s=100)
    assert backoff_s(b, 2, 0.0) == 10
    assert backoff_s(b, 2, 0.5) == 15
    with pytest.raises(ValueError, match="failures >= 1"):
        backoff_s(b, 0, 0.5)


def test_a_failing_table_is_reported_once_and_does_not_block_others() -> None:
    """A table that keeps failing the same way is reported the first time only, waits out
    its backoff, and the other tables are still picked meanwhile."""
    s = observed(("bad", backlog(9)), ("good", backlog(3)))
    s, news = s.failed("bad", "corrupt log", unsupported=False, now=0, draw=0.0)
    assert news
    assert s.pick(1, 10) == ["good"]
    s, news = s.failed("bad", "corrupt log", unsupported=False, now=5, draw=0.0)
    assert not news
    s, news = s.failed("bad", "access denied", unsupported=False, now=6, draw=0.0)
    assert news
    assert s.pick(6 + 20, 10) == ["bad", "good"]


def test_an_unsupported_table_waits_the_cap() -> None:
    """An unsupported feature is not retried before the backoff cap, whatever its count."""
    s, news = observed(("t", backlog(9))).failed(
        "t", "unsupported feature: columnMapping", unsupported=True, now=0, draw=0.0
    )
    assert news and s.state("t").retry_at == 100
    assert s.pick(99, 10) == [] and s.pick(100, 10) == ["t"]


def test_removed_tables_are_forgotten() -> None:
    """retain keeps only the tables still configured."""
    s = observed(("a", backlog(5)), ("b", backlog(5))).retain(["b"])
    assert list(s.tables) == ["b"]


def test_a_superseded_run_is_no_failure() -> None:
    """A run whose bins lost only to another compaction clears the backoff like a commit: the
    files were compacted, by the other one."""
    s = observed(("t", backlog(5)))
    s = s.started("t").finished("t", RunOutcome.CONFLICTED, now=0, draw=0.5)
    assert s.state("t").failures == 1
    s = s.started("t").finished("t", RunOutcome.SUPERSEDED, now=50, draw=0.5)
    assert s.state("t").failures == 0 and s.state("t").retry_at < 50


def test_a_leased_table_is_skipped_until_the_next_poll() -> None:
    """A run that found the table leased by another run is no failure and no run: the table
    stays due, and is not started (nor polled) again before the time given."""
    s = observed(("t", backlog(5)))
    s = s.started("t").skipped("t", until=10)
    state = s.state("t")
    assert (state.running, state.failures, state.last_error, state.last_run) == (
        False,
        0,
        None,
        None,
    )
    assert state.due == "small_files"
    assert s.pick(9.9, 4) == []
    assert s.pick(10, 4) == ["t"]


def test_a_retry_ends_the_backoff_and_keeps_the_backlog_due() -> None:
    """After a quarantine, the table that backed off for its failed bins is ready once its
    minimum interval passed, with what it saw still due (the next run plans without the
    quarantined file)."""
    s = observed(("t", backlog(5)))
    for _ in range(5):
        s = s.started("t").finished("t", RunOutcome.CONFLICTED, now=0, draw=0.5)
    assert s.state("t").retry_at > TRIGGER.min_interval_s and s.pick(60, 4) == []
    s = s.retry("t")
    assert s.state("t").failures == 0 and s.pick(60, 4) == ["t"]


# --- quarantine ------------------------------------------------------------------------------

BAD = ("part=a/bad.parquet", None)


def test_a_source_is_quarantined_at_its_nth_failure_and_reported_once() -> None:
    """Failures count per (path, DV id) key; the ``after``-th quarantines (news once), later
    ones keep it quarantined without news; other keys are counted apart."""
    q = Quarantine()
    q, news = q.failed(BAD, "not a readable Parquet file", after=3, now_s=1.0)
    q, news2 = q.failed(BAD, "not a readable Parquet file", after=3, now_s=2.0)
    assert not news and not news2 and q.excluded == frozenset()
    assert q.suspects[BAD].failures == 2
    q, news = q.failed(BAD, "truncated", after=3, now_s=3.0)
    assert news and q.excluded == {BAD}
    assert q.suspects[BAD].error == "truncated" and q.suspects[BAD].last_failed_s == 3.0
    q, news = q.failed(BAD, "truncated", after=3, now_s=4.0)
    assert not news and q.excluded == {BAD}
    other = (BAD[0], "dv-1")  # the same path with a DV: another source
    q, news = q.failed(other, "bad DV", after=3, now_s=5.0)
    assert not news and q.excluded == {BAD} and q.suspects[other].failures == 1


def test_a_source_that_left_the_table_leaves_the_quarantine() -> None:
    """retain keeps only live keys (a DML or another compaction removed the others)."""
    q, _ = Quarantine().failed(BAD, "e", after=1, now_s=0.0)
    q, _ = q.failed(("x", None), "e", after=1, now_s=0.0)
    assert q.retain({BAD, ("y", None)}).excluded == {BAD}
    assert q.retain({BAD, ("x", None)}) is q


def test_a_quarantine_expires_after_its_period_and_one_failure_renews_it() -> None:
    """Quarantined at 10 s for 60 s: still left out at 69.9 s, released at 70 s (its count
    kept); its next failure quarantines it again at once, from then, for another period."""
    q, _ = Quarantine().failed(BAD, "e", after=2, now_s=5.0)
    q, _ = q.failed(BAD, "e", after=2, now_s=10.0)
    assert q.suspects[BAD].quarantined_s == 10.0 and q.suspects[BAD].release_at(60.0) == 70.0
    kept, released = q.expire(60.0, now_s=69.9)
    assert kept is q and released == frozenset()
    q, released = q.expire(60.0, now_s=70.0)
    assert released == {BAD} and q.excluded == frozenset()
    assert q.suspects[BAD].failures == 2 and q.suspects[BAD].release_at(60.0) is None
    q, news = q.failed(BAD, "still bad", after=2, now_s=75.0)
    assert news and q.excluded == {BAD} and q.suspects[BAD].failures == 3
    assert q.suspects[BAD].release_at(60.0) == 135.0
    assert q.expire(60.0, now_s=134.0)[1] == frozenset()


def test_only_a_reload_ends_a_quarantine_without_a_period() -> None:
    """``quarantine_for`` None keeps a quarantined source however long; a suspect that is not
    quarantined has nothing to expire; only a positive period is one."""
    q, _ = Quarantine().failed(BAD, "e", after=1, now_s=0.0)
    q, _ = q.failed(("x", None), "e", after=2, now_s=0.0)
    assert q.suspects[BAD].release_at(None) is None
    assert q.expire(None, now_s=1e12) == (q, frozenset())
    assert q.expire(1.0, now_s=1e12)[1] == {BAD}
    with pytest.raises(ValueError, match="quarantine_for"):
        q.expire(0.0, now_s=0.0)


def test_quarantine_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="quarantine_after"):
        Quarantine().failed(BAD, "e", after=0, now_s=0.0)
