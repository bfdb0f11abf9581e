"""The daemon's log tail, metered: the first poll knows the version before its load, an idle
poll is one LIST, new commits are replayed by key,
a table far past the held snapshot is reloaded from its newer checkpoint, and a released
snapshot is loaded again when the table moves, planning as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import deltalake
import pytest

from rlcd.compaction.compact import plan_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.daemon._watch import TableWatch
from rlcd.delta.load import load_snapshot
from rlcd.delta.replay import Snapshot
from rlcd.storage import LocalStore
from rlcd.storage.metered import MeteredStore
from tests.integration.tables import append, batch, partitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_idle_poll_is_one_list(tmp_path: Path) -> None:
    """After the first load, polling an unchanged table costs exactly one LIST and nothing
    else, however often it is polled."""
    for i in range(3):
        append(tmp_path, batch(i * 10, 10))
    async with MeteredStore(LocalStore(tmp_path)) as store:
        watch = TableWatch(store)
        first = await watch.poll()
        assert first.snapshot is not None
        assert first.snapshot.version == 2 and first.previous is None
        for _ in range(3):
            store.reset()
            idle = await watch.poll()
            assert dict(store.requests) == {"list": 1}
            assert not idle.changed and idle.snapshot is first.snapshot


async def test_the_first_poll_tells_the_version_before_its_load(tmp_path: Path) -> None:
    """The first poll lists the log from the newest checkpoint: ``seen`` and ``version`` have
    the table's version when the load's gate is entered: the newest commit after the
    checkpoint, or the checkpoint's own version when no commit is left."""
    for i in range(3):
        append(tmp_path, batch(i * 10, 10))
    deltalake.DeltaTable(str(tmp_path)).create_checkpoint()
    append(tmp_path, batch(30, 10))
    (tmp_path / "_delta_log" / f"{2:020d}.json").unlink()  # its checkpoint stands for it
    assert await _first_poll(tmp_path) == ([([3], 3)], 3, 2)
    (tmp_path / "_delta_log" / f"{3:020d}.json").unlink()
    assert await _first_poll(tmp_path) == ([([2], 2)], 2, 2)


async def _first_poll(root: Path) -> tuple[list[tuple[list[int], int | None]], int, int | None]:
    """What ``seen`` and ``version`` had at the first poll's gate, the version it loaded and
    the newest checkpoint it knows."""
    at_gate: list[tuple[list[int], int | None]] = []
    seen: list[int] = []
    async with LocalStore(root) as store:
        watch = TableWatch(store)

        @asynccontextmanager
        async def gate() -> AsyncIterator[None]:
            at_gate.append((list(seen), watch.version))
            yield

        poll = await watch.poll(seen=seen.append, gate=gate)
    assert poll.snapshot is not None
    return at_gate, poll.snapshot.version, watch.checkpoint


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
        assert poll.snapshot is not None
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
        assert poll.snapshot is not None
        assert poll.reloaded and poll.snapshot.version == 6 and poll.previous == 0
        # the listing, then _last_checkpoint and commit 6 only (a local store's checkpoint is
        # read in place, not through the store)
        assert store.requests["get"] == 2
        assert len(poll.snapshot.files) == 7


async def test_a_released_snapshot_is_loaded_again_when_the_table_moves(tmp_path: Path) -> None:
    """A released watch keeps its version and file count; its idle polls are one LIST and give
    no snapshot; ``load`` loads it at once; a commit makes the next poll load it from the
    newest checkpoint, equal to a fresh load."""
    for i in range(3):
        append(tmp_path, batch(i * 10, 10))
    async with MeteredStore(LocalStore(tmp_path)) as store:
        watch = TableWatch(store)
        first = await watch.poll()
        assert first.snapshot is not None
        nbytes = watch.held_bytes()
        assert nbytes == first.snapshot.held_bytes() > 0
        assert watch.release() == nbytes
        assert watch.snapshot is None and watch.released and watch.held_bytes() == 0
        assert (watch.version, watch.files) == (2, 3)
        store.reset()
        idle = await watch.poll()
        assert dict(store.requests) == {"list": 1}
        assert idle.snapshot is None and not idle.changed and idle.previous == 2
        needed = await watch.poll(load=True)
        assert needed.reloaded and not needed.changed and needed.snapshot is not None
        assert not watch.released and dict(needed.snapshot.files) == dict(first.snapshot.files)
        watch.release()
        append(tmp_path, batch(30, 10))
        deltalake.DeltaTable(str(tmp_path)).create_checkpoint()
        append(tmp_path, batch(40, 10))
        poll = await watch.poll()
        assert poll.changed and poll.reloaded and poll.previous == 2
        assert poll.snapshot is not None and poll.snapshot.version == 4
        assert watch.checkpoint == 3
        fresh = await load_snapshot(store)
        assert dict(poll.snapshot.files) == dict(fresh.files)


def _bins(snapshot: Snapshot | None) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
    """A plan's bins, each its partition and its sources' keys in order."""
    assert snapshot is not None
    _, bins = plan_table(snapshot, CompactionPolicy())
    return [(str(b.partition_values), tuple(a.key for a in b.sources)) for b in bins]


async def _release_and_load(path: Path, *, checkpoint: bool) -> tuple[Snapshot, Snapshot]:
    """A snapshot advanced commit by commit (a delete that rewrites files, appends; a
    checkpoint by delta-rs between them), and the one a release and a load give."""
    partitioned(path)
    async with LocalStore(path) as store:
        watch = TableWatch(store)
        await watch.poll()
        table = deltalake.DeltaTable(str(path))
        table.delete("id < 20")
        if checkpoint:
            table.create_checkpoint()
        for i in range(8, 11):
            part = ["a", "b"][i % 2]
            append(path, batch(i * 50, 50, part=[part] * 50), partition_by=["part"])
        advanced = (await watch.poll()).snapshot
        watch.release()
        loaded = (await watch.poll(load=True)).snapshot
    assert advanced is not None and loaded is not None
    assert advanced.version == loaded.version == 11
    return advanced, loaded


async def test_after_a_release_and_a_load_the_table_plans_as_before(tmp_path: Path) -> None:
    """Loaded again from the same commits, the table plans the same bins, sources in the same
    order (the same bin ids)."""
    advanced, loaded = await _release_and_load(tmp_path, checkpoint=False)
    assert len(_bins(advanced)) == 2 and _bins(loaded) == _bins(advanced)
    assert dict(loaded.files) == dict(advanced.files)


async def test_loaded_from_a_newer_checkpoint_the_table_plans_the_same_files(
    tmp_path: Path,
) -> None:
    """Loaded again from a checkpoint written since, the table plans the same bins of the same
    files (the same backlog); each bin lists its sources in the order its snapshot has them,
    the checkpoint's row order, as any fresh load (``rlcd compact``) does."""
    advanced, loaded = await _release_and_load(tmp_path, checkpoint=True)

    def as_sets(snapshot: Snapshot) -> set[tuple[str, frozenset[tuple[str, str | None]]]]:
        return {(part, frozenset(keys)) for part, keys in _bins(snapshot)}

    assert len(as_sets(advanced)) == 2 and as_sets(loaded) == as_sets(advanced)
    assert dict(loaded.files) == dict(advanced.files)
