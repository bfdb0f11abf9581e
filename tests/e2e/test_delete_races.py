"""``python -m rlcd delete`` losing a real race, on local disk and on moto's S3: its commit put
is held (:mod:`tests.e2e.commit_hold`) until the winner committed.

Onto a tagged compaction (rlcd's, or Databricks'), the delete rebases and exits 0; onto a
compaction without tags or with partial tags, or a copy-on-write rewrite, it exits 1 naming the
table, with nothing of its own left. Against deletes of the same file that won (``rlcd
delete``'s own function, in process), disjoint rows all land (also after two winners), and
overlapping rows make the loser exit 1. delta-rs, the kernel and ``rlcd verify`` judge every
table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlcd.compaction.delete import delete_where
from rlcd.delta.actions import CommitInfo
from tests.e2e.commit_hold import Done, Side, losing_run, sides
from tests.integration.races import (
    ROWS,
    Hold,
    RaceTable,
    compact,
    databricks_optimize,
    dv_delete,
    in_thread,
    judge,
    last_commit,
    rlcd_files,
)

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.integration]

ALL = range(4 * ROWS)


@pytest.fixture(params=["local", "s3"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    yield from sides(request, tmp_path)


async def losing_delete(side: Side, where: str, winner: Hold) -> Done:
    """``python -m rlcd delete TABLE --where ...`` whose commit put is held until ``winner``
    committed."""
    return await losing_run(side, ["delete", side.table.uri, "--where", where], winner)


async def read_version_of_last_commit(table: RaceTable) -> int:
    info = (await last_commit(table))[0]
    assert isinstance(info, CommitInfo) and info.operation == "DELETE"
    version: int = info.extra["readVersion"]
    return version


async def _rlcd_compaction(table: RaceTable) -> None:
    report = await compact(table, [])
    assert report.committed_version is not None and not report.failed


async def _databricks_compaction(table: RaceTable, *, tagged: int | None = None) -> None:
    await databricks_optimize(table, [0, ROWS, 2 * ROWS], tagged=tagged)


COMPACTIONS: dict[str, Callable[[RaceTable], Hold]] = {
    "rlcd": lambda t: lambda: _rlcd_compaction(t),
    "databricks": lambda t: lambda: _databricks_compaction(t),
}


@pytest.mark.parametrize("compaction", sorted(COMPACTIONS))
async def test_delete_rebases_onto_a_tagged_compaction(side: Side, compaction: str) -> None:
    """A delete of rows in three files (one with a DV already) that lost to a compaction with
    tags moves its deletions onto the output and exits 0."""
    table = side.table
    await dv_delete(table, {ROWS: [0, 3]})
    done = await losing_delete(side, "id IN (5, 21, 47)", COMPACTIONS[compaction](table))
    assert done.code == 0, done.stderr
    assert "deleted 3 rows in 3 files" in done.stdout, done.stdout
    assert await read_version_of_last_commit(table) == 4, "it read the table before the winner"
    await judge(table, set(ALL) - {ROWS, ROWS + 3, 5, 21, 47})


REWRITES: dict[str, Callable[[RaceTable], Hold]] = {
    "untagged compaction": lambda t: lambda: in_thread(lambda dt: dt.optimize.compact(), t),
    "partly tagged compaction": lambda t: lambda: _databricks_compaction(t, tagged=1),
    "copy-on-write delete": lambda t: lambda: in_thread(lambda dt: dt.delete("id = 15"), t),
}
REASONS = {
    "untagged compaction": "compaction_untagged",
    "partly tagged compaction": "compaction_untagged",
    "copy-on-write delete": "concurrent_change",
}


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
async def test_delete_losing_to_a_rewrite_it_cannot_follow_exits_1(
    side: Side, rewrite: str
) -> None:
    """A delete that lost to a compaction without (all) tags or to a copy-on-write rewrite of
    its file exits 1, naming the table and the reason, and leaves no DV file behind."""
    table = side.table
    done = await losing_delete(side, "id IN (3, 4)", REWRITES[rewrite](table))
    assert done.code == 1, done.stderr
    async with table.store() as store:
        root = store.root
    assert f"table {root}" in done.stderr and REASONS[rewrite] in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert await rlcd_files(table) == set(), "no DV file of the loser's is left"
    gone = {15} if rewrite == "copy-on-write delete" else set()
    # the partly tagged winner (version 4) does not tile its output: verify says so
    await judge(table, set(ALL) - gone, mistagged=[4] if rewrite.startswith("partly") else [])


SAME_FILE = {
    "disjoint": (["id IN (1, 2)"], "id = 5", {1, 2, 5}),
    "overlapping": (["id IN (1, 2)"], "id IN (2, 3)", {1, 2}),
    "three in a row": (["id = 0", "id IN (3, 4)"], "id IN (7, 8, 9)", {0, 3, 4, 7, 8, 9}),
}


@pytest.mark.parametrize("case", list(SAME_FILE))
async def test_deletes_of_one_file(side: Side, case: str) -> None:
    """Deletes of one file (``rlcd delete``'s own function, in process) that win while an
    ``rlcd delete`` is held: disjoint rows all land (the loser merges onto the winners' DVs),
    an overlap makes the loser exit 1."""
    winners, loser, gone = SAME_FILE[case]

    async def win() -> None:
        for where in winners:
            async with side.table.store() as store:
                await delete_where(store, where)

    done = await losing_delete(side, loser, win)
    if case == "overlapping":
        assert done.code == 1 and "overlapping_deletes" in done.stderr, done.stderr
        assert len(await rlcd_files(side.table)) == 1, "only the winner's DV file"
    else:
        assert done.code == 0, done.stderr
        assert await read_version_of_last_commit(side.table) == 3
    await judge(side.table, set(ALL) - gone)
