"""``python -m rlcd delete`` losing a real race, on local disk and on moto's S3: its commit put
is held (:mod:`tests.e2e.commit_hold`) until the winner committed.

Onto a tagged compaction (rlcd's, or Databricks'), the delete rebases and exits 0; onto a
compaction without tags, or a copy-on-write rewrite, it exits 1 naming the table, with nothing
of its own left. A partly tagged compaction is followed file by file: a delete of tagged files
rebases, one touching an untagged file exits 1. Against deletes of the same file that won (``rlcd
delete``'s own function, in process), disjoint rows all land (also after two winners), and
overlapping rows make the loser exit 1. delta-rs, the kernel and ``rlcd verify`` judge every
table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlcd.delta.actions import CommitInfo
from rlcd.operations.delete import delete_where
from tests.e2e.commit_hold import Done, Side, losing_run, sides
from tests.integration.races import (
    ROWS,
    Hold,
    RaceTable,
    batch,
    compact,
    databricks_optimize,
    dv_delete,
    in_thread,
    insert,
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
    "copy-on-write delete": lambda t: lambda: in_thread(lambda dt: dt.delete("id = 15"), t),
}
REASONS = {
    "untagged compaction": "compaction_untagged",
    "copy-on-write delete": "concurrent_change",
}


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
async def test_delete_losing_to_a_rewrite_it_cannot_follow_exits_1(
    side: Side, rewrite: str
) -> None:
    """A delete that lost to a compaction without tags or to a copy-on-write rewrite of its
    file exits 1, naming the table and the reason, and leaves no DV file behind."""
    table = side.table
    done = await losing_delete(side, "id IN (3, 4)", REWRITES[rewrite](table))
    assert done.code == 1, done.stderr
    async with table.store() as store:
        root = store.root
    assert f"table {root}" in done.stderr and REASONS[rewrite] in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert await rlcd_files(table) == set(), "no DV file of the loser's is left"
    gone = {15} if rewrite == "copy-on-write delete" else set()
    await judge(table, set(ALL) - gone)


@pytest.mark.parametrize(
    ("where", "gone"), [("id IN (3, 4)", {3, 4}), ("id IN (3, 24)", set())], ids=["tagged", "both"]
)
async def test_delete_losing_to_a_partly_tagged_compaction(
    side: Side, where: str, gone: set[int]
) -> None:
    """A Databricks compaction tagged only its first source (ids 0-19): a delete there moves
    onto the output and exits 0; one also touching the second (untagged) source exits 1
    (``compaction_untagged``), leaving no DV file. Verify passes either way."""
    table = side.table
    done = await losing_delete(side, where, lambda: _databricks_compaction(table, tagged=1))
    if gone:
        assert done.code == 0, done.stderr
        assert "deleted 2 rows in 1 file" in done.stdout, done.stdout
    else:
        assert done.code == 1 and "compaction_untagged" in done.stderr, done.stderr
        assert await rlcd_files(table) == set(), "no DV file of the loser's is left"
    await judge(table, set(ALL) - gone)


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


@pytest.mark.parametrize("blind", [False, True], ids=["insert-select", "blind-append"])
async def test_delete_losing_to_an_insert_of_a_matching_row(side: Side, blind: bool) -> None:
    """An ``INSERT ... SELECT`` committed a row the condition matches while the delete was
    held: the delete takes it too, and says so; after a blind append, the row stays."""
    table = side.table

    async def winner() -> None:
        await insert(table, batch(1000, 2), blind=blind)

    done = await losing_delete(side, "id IN (5, 1001)", winner)
    assert done.code == 0, done.stderr
    if blind:
        assert "deleted 1 row in 1 file" in done.stdout, done.stdout
        await judge(table, (set(ALL) | {1000, 1001}) - {5})
    else:
        assert "deleted 2 rows in 2 files" in done.stdout, done.stdout
        assert "1 row of them in 1 file another writer committed" in done.stdout, done.stdout
        await judge(table, (set(ALL) | {1000}) - {5})
