"""The daemon's log tail, metered: an idle poll is one LIST, new commits are replayed by key,
and a table far past the held snapshot is reloaded from its newer checkpoint."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pytest

from rlcd.daemon._watch import TableWatch
from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore
from rlcd.storage.metered import MeteredStore
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_idle_poll_is_one_list(tmp_path: Path) -> None:
    """After the first load, polling an unchanged table costs exactly one LIST and nothing
    else, however often it is polled."""
    for i in range(3):
        append(tmp_path, batch(i * 10, 10))
    async with MeteredStore(LocalStore(tmp_path)) as store:
        watch = TableWatch(store)
        first = await watch.poll()
        assert first.snapshot.version == 2 and first.previous is None
        for _ in range(3):
            store.reset()
            idle = await watch.poll()
            assert dict(store.requests) == {"list": 1}
            assert not idle.changed and idle.snapshot is first.snapshot


async def test_new_commits_are_replayed_onto_the_held_snapshot(tmp_path: Path) -> None:
    """New commits cost one LIST and one GET each, and give the snapshot a fresh load gives."""
    append(tmp_path, batch(0, 10))
    async with MeteredStore(LocalStore(tmp_path)) as store:
        watch = TableWatch(store)
        await watch.poll()
        for i in range(1, 4):
            append(tmp_path, batch(i * 10, 10))
        store.reset()
        poll = await watch.poll()
        assert dict(store.requests) == {"list": 1, "get": 3}
        assert poll.changed and not poll.reloaded and poll.previous == 0
        fresh = await load_snapshot(store)
        assert poll.snapshot.version == fresh.version == 3
        assert dict(poll.snapshot.files) == dict(fresh.files)


async def test_far_behind_reloads_from_the_newer_checkpoint(tmp_path: Path) -> None:
    """With more commits to replay than the limit and a newer checkpoint, the watch reloads
    from that checkpoint: it reads the checkpoint and the commits after it, not the ones
    before."""
    append(tmp_path, batch(0, 10))
    async with MeteredStore(LocalStore(tmp_path)) as store:
        watch = TableWatch(store, replay_limit=2)
        await watch.poll()
        for i in range(1, 6):
            append(tmp_path, batch(i * 10, 10))
        deltalake.DeltaTable(str(tmp_path)).create_checkpoint()
        append(tmp_path, batch(60, 10))
        store.reset()
        poll = await watch.poll()
        assert poll.reloaded and poll.snapshot.version == 6 and poll.previous == 0
        # the listing, then _last_checkpoint, the checkpoint and commit 6 only
        assert store.requests["get"] == 3
        assert len(poll.snapshot.files) == 7
