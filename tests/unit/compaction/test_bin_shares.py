"""How a run shares batch memory between its bins: each running bin gets a fixed room between
its stages while as many bins remain as run at once; after that the last bins get the absent
bins' shares, never more than the run's bound in total."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from rlcd.compaction.rewrite import (
    HANDOFF_BYTES,
    MAX_HANDOFF_BYTES,
    ROW_GROUP_BYTES,
    BinShares,
    _Handoff,
)

SHARE = ROW_GROUP_BYTES + HANDOFF_BYTES


@pytest.mark.parametrize("concurrency", [1, 2, 3, 4])
@pytest.mark.parametrize("bins", [1, 2, 3, 7])
def test_room_grows_as_bins_finish_within_the_runs_bound(concurrency: int, bins: int) -> None:
    shares = BinShares(concurrency, bins)
    handoffs = [_Handoff(shares) for _ in range(bins)]
    for h in handoffs:
        shares._join(h)
    for remaining in range(bins, 0, -1):
        running = min(concurrency, remaining)
        room = shares.handoff_bytes()
        assert HANDOFF_BYTES <= room <= MAX_HANDOFF_BYTES
        assert running * (ROW_GROUP_BYTES + room) <= concurrency * SHARE
        if remaining >= concurrency:
            assert room == HANDOFF_BYTES
        shares._leave(handoffs[remaining - 1])


def test_last_bin_of_two_gets_the_others_share() -> None:
    shares = BinShares(2, 2)
    first, second = _Handoff(shares), _Handoff(shares)
    shares._join(first)
    shares._join(second)
    assert shares.handoff_bytes() == HANDOFF_BYTES
    shares._leave(first)
    assert shares.handoff_bytes() == min(MAX_HANDOFF_BYTES, 2 * SHARE - ROW_GROUP_BYTES)


def test_a_waiting_decoder_is_woken_when_its_room_grows() -> None:
    """A decode stage blocked on a full handoff continues once another bin finishes."""
    half = MAX_HANDOFF_BYTES // 2  # two fit in a lone bin's room, not in a bin's own share
    assert 2 * half > HANDOFF_BYTES
    batch = pa.record_batch({"x": pa.array(range(half // 8), pa.int64())})
    shares = BinShares(2, 2)
    mine, other = _Handoff(shares), _Handoff(shares)
    shares._join(mine)
    shares._join(other)
    mine.put((0, batch))  # one batch always fits; the second would pass the room
    second = threading.Thread(target=mine.put, args=((0, batch),), daemon=True)
    second.start()
    second.join(0.2)
    assert second.is_alive()
    shares._leave(other)
    second.join(5)
    assert not second.is_alive()
    assert [mine.get(), mine.get()] == [(0, batch), (0, batch)]


def test_a_bin_splits_late_only_with_a_core_idle_and_no_bin_waiting() -> None:
    """A bin running in one thread splits its stages once the run's stage threads are fewer
    than its cores and no bin waits for a slot; the split thread is counted from then on."""
    shares = BinShares(3, 4, cores=2)
    bins = [_Handoff(shares) for _ in range(4)]
    for handoff in bins:
        shares._join(handoff)
    for handoff in bins[:3]:
        shares._start(handoff, 1)
    assert not bins[0].split_late()  # a bin waits to start
    shares._leave(bins[2])
    shares._start(bins[3], 1)
    assert not bins[0].split_late()  # three threads on two cores
    shares._leave(bins[3])
    assert not bins[0].split_late()  # two threads, two cores
    shares._leave(bins[1])
    assert bins[0].split_late()  # alone on two cores
    assert not bins[0].split_late()  # now in two threads
    shares._leave(bins[0])
    assert shares._threads == 0


def test_no_late_split_without_cores_or_shares() -> None:
    """A daemon's run (its cores shared with other tables) and a bin without shares never
    split late."""
    shares = BinShares(2, 1)
    handoff = _Handoff(shares)
    shares._join(handoff)
    shares._start(handoff, 1)
    assert not handoff.split_late()
    assert not _Handoff(None).split_late()
