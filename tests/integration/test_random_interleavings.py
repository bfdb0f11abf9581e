"""Seeded interleavings of rlcd compactions, Databricks-tagged compactions, rlcd's DV deletes,
delta-rs copy-on-write deletes and appends by concurrent tasks: the final table holds exactly
the rows the committed operations leave when applied one after another, for delta-rs, the
kernel and ``rlcd verify``.

Every row has a unique ``id``. Deletes name ids of the initial rows and appends write fresh
ids, so the committed operations' effects commute: the expected ids are the initial ones,
minus every committed delete's, plus every committed append's (a compaction changes none).
Each operation records whether it committed; a delete or compaction that lost a race it could
not rebase commits nothing, and that is checked too: its ids must still be there.

CI runs a fixed set of seeds (a few on local disk, two on moto's S3 and local disk);
``pytest --seeds N`` runs seeds ``0..N-1`` on both, and prints what the runs did (operations
committed and lost by kind, compaction bins by decision, aborts by reason).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import deltalake
import pytest
from deltalake.exceptions import CommitFailedError

from rlcd.compaction.commit import BinAborted
from rlcd.compaction.compact import compact_table
from rlcd.compaction.delete import delete_where
from rlcd.delta.load import load_snapshot
from rlcd.errors import ConcurrentModificationError
from tests.integration.conftest import TALLY
from tests.integration.races import (
    POLICY,
    ROWS,
    RaceTable,
    batch,
    databricks_compact,
    judge,
    local_table,
    s3_table,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FILES = 6
TASKS = 3
OPS_PER_TASK = 4
KINDS = ("compact", "databricks_compact", "dv_delete", "cow_delete", "append")
WEIGHTS = (2, 1, 3, 1, 1)  # DV deletes and compactions race most: they reconcile
CI_CASES = [("local", s) for s in range(6)] + [(w, s) for s in (100, 101) for w in ("local", "s3")]
_REASON = re.compile(r"conflicts: ([a-z0-9_]+)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The CI cases, or with ``--seeds N`` seeds ``0..N-1`` on local disk and on moto."""
    seeds = metafunc.config.getoption("seeds")
    cases = CI_CASES if seeds is None else [(w, s) for s in range(seeds) for w in ("local", "s3")]
    metafunc.parametrize(("where", "seed"), cases, ids=[f"{w}-{s}" for w, s in cases])


@dataclass
class _Model:
    """What the run committed: ids deleted and ids appended, the next fresh id, and a tally of
    what each operation did (for the long runs' summary)."""

    deleted: set[int] = field(default_factory=set)
    appended: set[int] = field(default_factory=set)
    next_id: int = FILES * ROWS
    tally: Counter[str] = field(default_factory=Counter)


def _ids_text(ids: list[int]) -> str:
    return ", ".join(map(str, ids))


async def _compact(table: RaceTable, model: _Model) -> bool | None:
    async with table.store() as store:
        report = await compact_table(store, POLICY)
    for result in report.bin_results:
        abort = result.abort.reason if isinstance(result, BinAborted) else ""
        model.tally[f"bin {result.decision} {abort}".rstrip()] += 1
    return report.committed_version is not None if report.planned else None


async def _databricks_compact(table: RaceTable, rng: random.Random) -> bool | None:
    """A Databricks OPTIMIZE of two to four of the live files, in log order."""
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        live = list(snapshot.files.values())
        if len(live) < 2:
            return None
        chosen = set(rng.sample(range(len(live)), rng.randint(2, min(4, len(live)))))
        sources = [a for k, a in enumerate(live) if k in chosen]
        return await databricks_compact(store, snapshot, sources) is not None


async def _append(table: RaceTable, model: _Model) -> bool:
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
        return False
    model.appended.update(range(start, start + ROWS))
    return True


async def _delete(table: RaceTable, kind: str, rng: random.Random, model: _Model) -> bool:
    ids = sorted(rng.sample(range(FILES * ROWS), rng.randint(1, 8)))
    where = f"id IN ({_ids_text(ids)})"
    try:
        if kind == "dv_delete":
            async with table.store() as store:
                await delete_where(store, where)
        else:
            await anyio.to_thread.run_sync(lambda: table.delta().delete(where))
    except ConcurrentModificationError as exc:
        reason = _REASON.search(str(exc))
        model.tally[f"abort {kind} {reason.group(1) if reason else '?'}"] += 1
        return False
    except CommitFailedError:
        return False
    model.deleted.update(ids)
    return True


async def _operation(table: RaceTable, rng: random.Random, model: _Model) -> None:
    """One random operation, recorded in ``model`` if it committed."""
    kind = rng.choices(KINDS, WEIGHTS)[0]
    await anyio.sleep(rng.random() * 0.02)
    if kind == "compact":
        committed = await _compact(table, model)
    elif kind == "databricks_compact":
        committed = await _databricks_compact(table, rng)
    elif kind == "append":
        committed = await _append(table, model)
    else:
        committed = await _delete(table, kind, rng, model)
    outcome = "noop" if committed is None else "committed" if committed else "lost"
    model.tally[f"{kind} {outcome}"] += 1


async def _run(table: RaceTable, seed: int) -> Counter[str]:
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
    return model.tally


async def test_random_interleavings(
    where: str,
    seed: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Seeded concurrent operations: no row lost, resurrected or duplicated."""
    if where == "local":
        table = local_table(tmp_path / "t", FILES)
    else:
        endpoint = request.getfixturevalue("moto_endpoint")
        table = s3_table(tmp_path, endpoint, request.getfixturevalue("s3_bucket"), FILES)
    tally = await _run(table, seed)
    request.node.user_properties.append((TALLY, dict(tally + Counter({f"seeds on {where}": 1}))))
