"""The lease's decision, one test per case, and its JSON form."""

from __future__ import annotations

import pytest

from rlcd.compaction._lease_rules import Busy, Create, Lease, Renew, TakeOver, decide

MINE, THEIRS = "a" * 32, "b" * 32


def lease(holder: str = THEIRS, *, expires_ms: int = 2_000) -> bytes:
    return Lease(holder, "rlcd compact (pid 7 on host)", 1_000, expires_ms).encode()


def test_no_lease_is_created() -> None:
    """An absent lease object is created."""
    assert decide(None, holder=MINE, now_ms=1_500) == Create()


def test_our_own_lease_is_renewed() -> None:
    """A lease with our holder id is renewed, even past its expiry (nobody took it over)."""
    assert decide(lease(MINE), holder=MINE, now_ms=5_000) == Renew(Lease.parse(lease(MINE)))


def test_a_live_lease_of_another_run_is_busy() -> None:
    """Another run's lease before its expiry: skip the table."""
    step = decide(lease(), holder=MINE, now_ms=1_999)
    assert step == Busy(Lease.parse(lease()))
    assert step.describe() == ("held by rlcd compact (pid 7 on host) until 1970-01-01T00:00:02Z")


def test_an_expired_lease_of_another_run_is_taken_over() -> None:
    """Another run's lease at or past its expiry is taken over."""
    assert decide(lease(), holder=MINE, now_ms=2_000) == TakeOver(Lease.parse(lease()))


@pytest.mark.parametrize(
    ("host", "ended", "taken"),
    [("vm", True, True), ("vm", False, False), ("other", True, False), ("", True, False)],
)
def test_a_live_lease_of_an_ended_process_of_this_host_is_taken_over(
    host: str, ended: bool, taken: bool
) -> None:
    """A live lease whose process on this host has ended (killed) is taken over at once; a
    running one, or one of another host (whose processes this host cannot see), is not."""
    data = Lease(THEIRS, "o", 1_000, 9_000, host="vm", pid=4242).encode()
    alive = {4242: not ended}.__getitem__
    step = decide(data, holder=MINE, now_ms=1_500, host=host, alive=alive)
    assert isinstance(step, TakeOver if taken else Busy)


def test_host_and_pid_round_trip() -> None:
    """The holder's host and pid survive the JSON form; a lease without them parses."""
    held = Lease(THEIRS, "o", 1, 2, 3, "vm", 42)
    assert Lease.parse(held.encode()) == held
    assert Lease.parse(Lease(THEIRS, "o", 1, 2).encode()).pid == 0


@pytest.mark.parametrize(
    "data",
    [
        b"\xff",
        b"[]",
        b'{"format":2,"holder":"x"}',
        b'{"format":1,"holder":"x","owner":"o","acquiredMs":1,"expiresMs":"2","seq":0}',
        b'{"format":1,"holder":"x","owner":"o","acquiredMs":3,"expiresMs":2,"seq":0}',
        b'{"format":1,"holder":"x","owner":"o","acquiredMs":1,"expiresMs":2,"seq":true}',
    ],
)
def test_an_unreadable_lease_is_busy_and_never_overwritten(data: bytes) -> None:
    """An object that is no lease of this format (a newer rlcd's?) is left alone, and the
    skip tells a person what to do."""
    step = decide(data, holder=MINE, now_ms=10**15)
    assert isinstance(step, Busy)
    assert step.lease is None
    assert step.describe().startswith("unreadable (")
    assert step.describe().endswith("; delete _rlcd/lease if no run of rlcd works on the table")


def test_renewal_extends_and_every_write_differs() -> None:
    """A renewal moves the expiry forward (never back) and bumps the sequence, so no two writes
    of one holder hold the same bytes."""
    first = Lease.new(MINE, "o", now_ms=1_000, ttl_ms=600)
    again = first.renewed(now_ms=1_100, ttl_ms=600)
    assert (again.acquired_ms, again.expires_ms, again.seq) == (1_000, 1_700, 1)
    assert again.renewed(now_ms=0, ttl_ms=600).expires_ms == 1_700
    assert first.encode() != again.encode()
    assert Lease.parse(again.encode()) == again
