"""Seeded interleavings of compaction, rlcd's DV deletes, delta-rs copy-on-write deletes and
appends by concurrent tasks: the final table holds exactly the rows the committed operations
leave when applied one after another, for delta-rs, the kernel and ``rlcd verify``.

Every row has a unique ``id``. Deletes name ids of the initial rows and appends write fresh
ids, so the committed operations' effects commute: the expected ids are the initial ones,
minus every committed delete's, plus every committed append's (a compaction changes none).
Each operation records whether it committed; a delete or compaction that lost a race it could
not rebase commits nothing, and that is checked too: its ids must still be there.

CI runs a fixed set of seeds; ``RLCD_SEEDS=N`` runs seeds ``0..N-1`` for long runs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import deltalake
import pytest
from deltalake.exceptions import CommitFailedError

from rlcd.compaction.compact import compact_table
from rlcd.compaction.delete import delete_where
from rlcd.errors import ConcurrentModificationError
from tests.integration.races import POLICY, ROWS, RaceTable, batch, judge, local_table

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FILES = 6
TASKS = 3
OPS_PER_TASK = 4
SEEDS = range(int(os.environ.get("RLCD_SEEDS", "6")))


@dataclass
class _Model:
    """What the run committed: ids deleted and ids appended, the next fresh id, and the kinds
    of the operations that committed and that lost (for the long runs' tallies)."""

    deleted: set[int] = field(default_factory=set)
    appended: set[int] = field(default_factory=set)
    next_id: int = FILES * ROWS
    committed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


def _ids_text(ids: list[int]) -> str:
    return ", ".join(map(str, ids))


async def _operation(table: RaceTable, rng: random.Random, model: _Model) -> None:
    """One random operation, recorded in ``model`` if it committed."""
    kind = rng.choice(["compact", "dv_delete", "cow_delete", "append"])
    await anyio.sleep(rng.random() * 0.02)
    if kind == "compact":
        async with table.store() as store:
            report = await compact_table(store, POLICY)
        (model.committed if report.committed_version is not None else model.lost).append(kind)
    elif kind == "append":
        start = model.next_id
        model.next_id += ROWS
        try:
            await anyio.to_thread.run_sync(
                lambda: deltalake.write_deltalake(
                    table.uri,
                    batch(start, ROWS),
                    mode="append",
                    storage_options=table.storage_options,
                )
            )
        except CommitFailedError:  # delta-rs' conflict checker refused it: nothing committed
            model.lost.append(kind)
            return
        model.appended.update(range(start, start + ROWS))
        model.committed.append(kind)
    else:
        ids = sorted(rng.sample(range(FILES * ROWS), rng.randint(1, 8)))
        try:
            if kind == "dv_delete":
                async with table.store() as store:
                    deleted = await delete_where(store, f"id IN ({_ids_text(ids)})")
                committed = deleted.version is not None or deleted.rows == 0
            else:
                await anyio.to_thread.run_sync(
                    lambda: table.delta().delete(f"id IN ({_ids_text(ids)})")
                )
                committed = True
        except (ConcurrentModificationError, CommitFailedError):
            committed = False
        if committed:
            model.deleted.update(ids)
        (model.committed if committed else model.lost).append(kind)


async def _run(table: RaceTable, seed: int) -> None:
    rng = random.Random(seed)
    model = _Model()
    streams = [random.Random(rng.getrandbits(64)) for _ in range(TASKS)]

    async def task(stream: random.Random) -> None:
        for _ in range(OPS_PER_TASK):
            await _operation(table, stream, model)

    async with anyio.create_task_group() as tg:
        for stream in streams:
            tg.start_soon(task, stream)
    expected = (set(range(FILES * ROWS)) - model.deleted) | model.appended
    await judge(table, expected)


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_interleavings_local(seed: int, tmp_path: Path) -> None:
    """Seeded concurrent operations on local disk: no row lost, resurrected or duplicated."""
    await _run(local_table(tmp_path / "t", FILES), seed)


@pytest.mark.parametrize("seed", [100, 101])
async def test_random_interleavings_s3(seed: int, make: Callable[..., RaceTable]) -> None:
    """The same on moto's S3 (and on local disk) for a few seeds."""
    await _run(make(FILES), seed)
