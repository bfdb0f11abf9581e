"""Seeded interleavings of rlcd compactions, Databricks-tagged compactions, rlcd's DV deletes,
delta-rs copy-on-write deletes and UPDATEs, appends (blind, and ``INSERT ... SELECT``-like ones
that read the table) by concurrent tasks: the final table holds exactly the rows the committed
operations leave when applied one after another in log order, for delta-rs, the kernel and
``rlcd verify``.

Every operation that commits records its effect and its version (delta-rs' through a tag in its
``commitInfo``, read back from the history at the end); the oracle applies them in version
order to a multiset of ids. Deletes and UPDATEs name initial ids; rlcd's deletes also name ids
an ``INSERT ... SELECT`` may write (contested ids, written before or after the delete: the
delete must take the rows of inserts ordered before it) and the ids UPDATEs move rows to (the
image rows). Blind appends write fresh ids no operation names: WriteSerializable may order them
after a delete, which their rows cannot tell. A delete or compaction that lost a race it could
not rebase commits nothing, and that is checked too: its ids must still be there.

CI runs a fixed set of seeds (a few on local disk, two on moto's S3 and local disk);
``pytest --seeds N`` runs seeds ``0..N-1`` on both, and prints what the runs did (operations
committed and lost by kind, compaction bins by decision, aborts by reason).
"""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import deltalake
import pyarrow as pa
import pytest
from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError

from rlcd.compaction.commit import BinAborted
from rlcd.compaction.compact import compact_table
from rlcd.delta.load import load_snapshot
from rlcd.errors import ConcurrentModificationError
from rlcd.operations.delete import delete_where
from tests.integration.conftest import TALLY
from tests.integration.races import (
    POLICY,
    ROWS,
    RaceTable,
    batch,
    databricks_compact,
    insert,
    judge,
    local_table,
    s3_table,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FILES = 6
TASKS = 3
OPS_PER_TASK = 4
KINDS = (
    "compact",
    "databricks_compact",
    "dv_delete",
    "cow_delete",
    "append",
    "blind_append",
    "insert_select",
    "update",
)
WEIGHTS = (2, 1, 3, 1, 1, 1, 2, 1)  # DV deletes and compactions race most: they reconcile
CI_CASES = [("local", s) for s in range(6)] + [(w, s) for s in (100, 101) for w in ("local", "s3")]
CONTESTED = range(5000, 5006)
"""Ids ``INSERT ... SELECT`` writes (a few at a time, repeats allowed) and rlcd's deletes name."""
MOVED = 10_000
"""An UPDATE moves id k to k + MOVED."""
_REASON = re.compile(r"conflicts: ([a-z0-9_]+)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The CI cases, or with ``--seeds N`` seeds ``0..N-1`` on local disk and on moto."""
    seeds = metafunc.config.getoption("seeds")
    cases = CI_CASES if seeds is None else [(w, s) for s in range(seeds) for w in ("local", "s3")]
    metafunc.parametrize(("where", "seed"), cases, ids=[f"{w}-{s}" for w, s in cases])


@dataclass(frozen=True)
class _Effect:
    """What one committed operation did to the ids: ``added`` rows, ``deleted`` ids (every
    row with one), ``moved`` an id's rows to another."""

    added: tuple[int, ...] = ()
    deleted: frozenset[int] = frozenset()
    moved: tuple[int, int] | None = None

    def apply(self, ids: Counter[int]) -> None:
        for k in self.deleted:
            ids.pop(k, None)
        if self.moved is not None:
            old, new = self.moved
            ids[new] += ids.pop(old, 0)
        ids.update(self.added)


@dataclass
class _Model:
    """What the run committed: each effect by version (or by the tag of a delta-rs commit), the
    next fresh id, and a tally of what each operation did (for the long runs' summary)."""

    effects: list[tuple[int | str, _Effect]] = field(default_factory=list)
    next_id: int = 100_000
    tally: Counter[str] = field(default_factory=Counter)

    def expected(self, history: list[dict[str, Any]]) -> Counter[int]:
        """The ids the committed operations leave, applied in log order."""
        versions = {h[_TAG]: h["version"] for h in history if _TAG in h}
        committed = [  # a delta-rs commit is in the log, or it was refused
            (k if isinstance(k, int) else versions[k], e)
            for k, e in self.effects
            if isinstance(k, int) or k in versions
        ]
        ids = Counter(range(FILES * ROWS))
        for _, effect in sorted(committed, key=lambda c: c[0]):
            effect.apply(ids)
        return +ids


_TAG = "rlcdTestOp"


def _tagged(model: _Model, effect: _Effect) -> CommitProperties:
    """Commit properties that name a delta-rs commit, its effect recorded under the name."""
    tag = uuid.uuid4().hex
    model.effects.append((tag, effect))
    return CommitProperties(custom_metadata={_TAG: tag})


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
    """A Databricks OPTIMIZE of two to four of the live files with live rows, in log order."""
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        live = [a for a in snapshot.files.values() if (a.num_records or 0) > a.deleted_rows]
        if len(live) < 2:
            return None
        chosen = set(rng.sample(range(len(live)), rng.randint(2, min(4, len(live)))))
        sources = [a for k, a in enumerate(live) if k in chosen]
        return await databricks_compact(store, snapshot, sources) is not None


async def _append(table: RaceTable, model: _Model) -> bool:
    """delta-rs appends fresh ids (its commits say nothing of ``isBlindAppend``)."""
    start = model.next_id
    model.next_id += ROWS
    effect = _Effect(added=tuple(range(start, start + ROWS)))
    properties = _tagged(model, effect)
    try:
        await anyio.to_thread.run_sync(
            lambda: deltalake.write_deltalake(
                table.uri,
                batch(start, ROWS),
                mode="append",
                storage_options=table.storage_options,
                commit_properties=properties,
            )
        )
    except CommitFailedError:  # delta-rs' conflict checker refused it: nothing committed
        return False
    return True


async def _insert(table: RaceTable, kind: str, rng: random.Random, model: _Model) -> bool:
    """A blind append of fresh ids, or an ``INSERT ... SELECT`` of contested ones."""
    if kind == "blind_append":
        ids = list(range(model.next_id, model.next_id + 3))
        model.next_id += 3
    else:
        ids = rng.choices(CONTESTED, k=rng.randint(1, 3))
    rows = pa.table({"id": pa.array(ids, pa.int64())})
    version = await insert(table, rows, blind=kind == "blind_append")
    model.effects.append((version, _Effect(added=tuple(ids))))
    return True


async def _update(table: RaceTable, rng: random.Random, model: _Model) -> bool:
    """delta-rs moves one initial id's row to another id (copy-on-write)."""
    old = rng.randrange(FILES * ROWS)
    properties = _tagged(model, _Effect(moved=(old, old + MOVED)))
    try:
        await anyio.to_thread.run_sync(
            lambda: table.delta().update(
                updates={"id": f"id + {MOVED}"},
                predicate=f"id = {old}",
                commit_properties=properties,
            )
        )
    except CommitFailedError:
        return False
    return True


async def _delete(table: RaceTable, kind: str, rng: random.Random, model: _Model) -> bool:
    ids = sorted(rng.sample(range(FILES * ROWS), rng.randint(1, 8)))
    if kind == "dv_delete":  # rlcd's also name rows other writers may add meanwhile
        ids += [*rng.sample(CONTESTED, 3), rng.randrange(FILES * ROWS) + MOVED]
    where = f"id IN ({_ids_text(sorted(set(ids)))})"
    effect = _Effect(deleted=frozenset(ids))
    try:
        if kind == "dv_delete":
            async with table.store() as store:
                report = await delete_where(store, where)
            if report.version is not None:
                model.effects.append((report.version, effect))
            if report.concurrent:
                model.tally["dv_delete extended to rows a winner added"] += 1
        else:
            properties = _tagged(model, effect)
            await anyio.to_thread.run_sync(
                lambda: table.delta().delete(where, commit_properties=properties)
            )
    except ConcurrentModificationError as exc:
        reason = _REASON.search(str(exc))
        model.tally[f"abort {kind} {reason.group(1) if reason else '?'}"] += 1
        return False
    except CommitFailedError:
        return False
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
    elif kind in ("blind_append", "insert_select"):
        committed = await _insert(table, kind, rng, model)
    elif kind == "update":
        committed = await _update(table, rng, model)
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
    view = table.view()  # read locally: delta-rs' history LIST on moto may stall
    history = await anyio.to_thread.run_sync(lambda: deltalake.DeltaTable(str(view)).history())
    await judge(table, model.expected(history).elements())
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
