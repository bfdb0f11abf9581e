"""How much a split bin may hold between its stages: a fixed room while the run has as many
bins as run at once; with fewer, the absent bins' room shared out, never more than the run's
bound in total. A full handoff holds its decoder back until the encoder takes a batch or the
bin is aborted."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from rlcd.compaction.rewrite import (
    HANDOFF_BYTES,
    MAX_HANDOFF_BYTES,
    ROW_GROUP_BYTES,
    _Aborted,
    _Handoff,
    handoff_bytes,
)

SHARE = ROW_GROUP_BYTES + HANDOFF_BYTES


@pytest.mark.parametrize("concurrency", [1, 2, 3, 4, 9])
@pytest.mark.parametrize("bins", [1, 2, 3, 7, 8])
def test_room_stays_within_the_runs_bound(concurrency: int, bins: int) -> None:
    room = handoff_bytes(concurrency, bins)
    assert HANDOFF_BYTES <= room <= MAX_HANDOFF_BYTES
    assert min(concurrency, bins) * (ROW_GROUP_BYTES + room) <= concurrency * SHARE
    if bins >= concurrency:
        assert room == HANDOFF_BYTES


def test_a_lone_bin_gets_a_row_groups_worth() -> None:
    assert handoff_bytes(2, 1) == MAX_HANDOFF_BYTES
    with pytest.raises(ValueError, match="concurrency 0"):
        handoff_bytes(0, 1)


def _batch(nbytes: int) -> pa.RecordBatch:
    return pa.record_batch({"x": pa.array(range(nbytes // 8), pa.int64())})


def test_a_full_handoff_holds_the_decoder_until_a_batch_is_taken() -> None:
    batch = _batch(HANDOFF_BYTES // 2 + 8)
    handoff = _Handoff(HANDOFF_BYTES)
    handoff.put((0, batch))  # one batch always fits; the second would pass the room
    second = threading.Thread(target=handoff.put, args=((1, batch),), daemon=True)
    second.start()
    second.join(0.2)
    assert second.is_alive()
    assert handoff.get() == (0, batch)
    second.join(5)
    assert not second.is_alive()
    handoff.close()
    assert [handoff.get(), handoff.get()] == [(1, batch), None]


def test_an_abort_stops_a_waiting_decoder() -> None:
    batch = _batch(HANDOFF_BYTES)
    handoff = _Handoff(HANDOFF_BYTES)
    handoff.put((0, batch))
    raised: list[BaseException] = []

    def put() -> None:
        try:
            handoff.put((1, batch))
        except _Aborted as exc:
            raised.append(exc)

    second = threading.Thread(target=put, daemon=True)
    second.start()
    second.join(0.2)
    handoff.abort()
    second.join(5)
    assert not second.is_alive() and len(raised) == 1
    with pytest.raises(_Aborted):
        handoff.get()
