"""The transaction driver against a real table on disk with real concurrent delta-rs writers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from rlcd.delta.actions import Action, CommitInfo, Txn
from rlcd.delta.load import load_snapshot, read_commit
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import Snapshot
from rlcd.delta.transaction import (
    ATTEMPTS_EXHAUSTED,
    Committed,
    Unknown,
    Winner,
    run_transaction,
)
from rlcd.errors import TransientStorageError
from rlcd.storage import LocalStore, PutResult
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def _build(state: int, current: Snapshot, txn_id: str) -> tuple[Sequence[Action], int]:
    """A commit that only records a txn action, counting the attempts in the state."""
    info = CommitInfo(timestamp=1, operation="TEST", txn_id=txn_id)
    return [info, Txn(app_id="test", version=current.version + 1)], state


class AppendFirstStore(LocalStore):
    """Before each of our first ``losses`` commit puts, a delta-rs append takes the version."""

    def __init__(self, root: Path, losses: int) -> None:
        super().__init__(root)
        self.root_path, self.losses = root, losses

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        if key.startswith("_delta_log/") and self.losses:
            self.losses -= 1
            append(self.root_path, batch(1000 + self.losses, 1))
        return await super().put_if_absent(key, data)


async def test_a_winner_is_rebased_past_and_the_commit_lands(tmp_path: Path) -> None:
    """One lost race: rebase sees the winner, the second attempt commits after it."""
    append(tmp_path, batch(0, 3))
    seen: list[list[int]] = []
    draws: list[int] = []

    async def rebase(state: int, _current: Snapshot, winners: Sequence[Winner]) -> int:
        seen.append([v for v, _ in winners])
        return state + 1

    async with AppendFirstStore(tmp_path, losses=1) as store:
        snapshot = await load_snapshot(store)
        result = await run_transaction(
            store,
            snapshot,
            0,
            build=_build,
            rebase=rebase,
            txn_id="t-1",
            draw=lambda: draws.append(1) or 0.0,
        )
        landed = await read_commit(store, 2, table=store.root)
    assert result.outcome == Committed(2) and result.state == 1 and result.attempts == 2
    assert seen == [[1]] and draws == [1] and result.snapshot.version == 1
    assert any(isinstance(a, CommitInfo) and a.txn_id == "t-1" for a in landed)


async def test_a_rebase_abort_ends_the_transaction(tmp_path: Path) -> None:
    """An abort from rebase is the outcome; nothing of ours is committed."""
    append(tmp_path, batch(0, 3))

    async def rebase(_state: int, _current: Snapshot, _winners: Sequence[Winner]) -> Abort:
        return Abort("test_conflict", "the winner touched our file")

    async with AppendFirstStore(tmp_path, losses=1) as store:
        result = await run_transaction(
            store, await load_snapshot(store), 0, build=_build, rebase=rebase, txn_id="t"
        )
        after = await load_snapshot(store)
    assert result.outcome == Abort("test_conflict", "the winner touched our file")
    assert after.version == 1 and "test" not in after.txns


async def test_every_attempt_lost_is_attempts_exhausted(tmp_path: Path) -> None:
    """Losing every one of max_attempts races ends in the attempts_exhausted abort."""
    append(tmp_path, batch(0, 3))

    async def rebase(state: int, _current: Snapshot, _winners: Sequence[Winner]) -> int:
        return state

    async with AppendFirstStore(tmp_path, losses=5) as store:
        result = await run_transaction(
            store,
            await load_snapshot(store),
            0,
            build=_build,
            rebase=rebase,
            txn_id="t",
            max_attempts=3,
            draw=lambda: 0.0,
        )
    assert isinstance(result.outcome, Abort) and result.outcome.reason == ATTEMPTS_EXHAUSTED
    assert result.attempts == 3


class FailingStore(LocalStore):
    """Every commit put fails in the store; with ``lands`` each one is stored first anyway."""

    def __init__(self, root: Path, *, lands: bool) -> None:
        super().__init__(root)
        self.lands = lands

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        if key.startswith("_delta_log/"):
            if self.lands:
                await super().put_if_absent(key, data)
            raise TransientStorageError("connection reset", operation="put_if_absent", key=key)
        return await super().put_if_absent(key, data)


async def _no_rebase(_state: int, _current: Snapshot, _winners: Sequence[Winner]) -> int:
    raise AssertionError("no winner expected")


@pytest.mark.parametrize("lands", [False, True], ids=["lost", "landed"])
async def test_a_failing_store_is_unknown(tmp_path: Path, lands: bool) -> None:
    """When every put fails the outcome is Unknown, whether or not the bytes were stored:
    the caller must keep the files the commit names."""
    append(tmp_path, batch(0, 3))
    async with FailingStore(tmp_path, lands=lands) as store:
        result = await run_transaction(
            store, await load_snapshot(store), 0, build=_build, rebase=_no_rebase, txn_id="t"
        )
    assert isinstance(result.outcome, Unknown) and result.outcome.version == 1
    assert (tmp_path / "_delta_log" / f"{1:020d}.json").exists() == lands
