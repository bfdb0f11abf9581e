"""rlcd's DV delete losing its commit race (design §6), on local disk and moto's S3.

The losing delete's commit put is held until the winners committed (a real interleaving):
a blind append is retried past; a DV delete of other rows of the same file is merged onto; a
compaction is followed per file, onto its output where the file's tombstone carries its run; one
deleting some of the same rows, a compaction that did not tag the file, or any rewrite of the
file, is a conflict that commits nothing and leaves no DV file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from rlcd.delta.load import load_snapshot
from rlcd.errors import ConcurrentModificationError
from rlcd.operations._dv_writer import delete_rows
from tests.integration.races import (
    ROWS,
    Hold,
    HoldingStore,
    RaceTable,
    batch,
    compact,
    databricks_optimize,
    dv_delete,
    first_ids,
    in_thread,
    insert,
    judge,
    rlcd_files,
    tag_check,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ALL = range(4 * ROWS)


async def _losing_delete(
    table: RaceTable, first_id: int, positions: Iterable[int], holds: Iterable[Hold]
) -> int:
    """A delete that read the table before ``holds`` (the winners) ran, its put held till then."""
    async with table.store() as inner:
        snapshot = await load_snapshot(inner)
        path = first_ids(snapshot)[first_id].path
        store = HoldingStore(inner, holds)
        version = await delete_rows(store, snapshot, {path: list(positions)})  # type: ignore[arg-type]
        assert not store.holds
        return version


async def test_disjoint_deletes_of_one_file_both_land(make: Callable[..., RaceTable]) -> None:
    """Two deletes of different rows of one file: the loser merges onto the winner's DV."""
    table = make()

    async def winner() -> None:
        await dv_delete(table, {ROWS: [1, 2]})

    await _losing_delete(table, ROWS, [5], [winner])
    await judge(table, set(ALL) - {ROWS + 1, ROWS + 2, ROWS + 5})


async def test_three_deletes_in_a_row(make: Callable[..., RaceTable]) -> None:
    """Two winners on the same file before the loser's put: it merges onto both."""
    table = make()

    async def winners() -> None:
        await dv_delete(table, {0: [0]})
        await dv_delete(table, {0: [3, 4]})

    await _losing_delete(table, 0, [7, 8, 9], [winners])
    await judge(table, set(ALL) - {0, 3, 4, 7, 8, 9})


async def test_overlapping_deletes_conflict(make: Callable[..., RaceTable]) -> None:
    """The loser deletes a row the winner deleted too: it aborts and leaves no DV file."""
    table = make()

    async def winner() -> None:
        await dv_delete(table, {ROWS: [1, 2]})

    with pytest.raises(ConcurrentModificationError, match="overlapping_deletes"):
        await _losing_delete(table, ROWS, [2, 3], [winner])
    assert len(await rlcd_files(table)) == 1, "only the winner's DV file; the loser's is gone"
    await judge(table, set(ALL) - {ROWS + 1, ROWS + 2})


async def test_a_blind_append_is_retried_past(make: Callable[..., RaceTable]) -> None:
    """A blind append that took the version leaves the delete's file alone: the retry lands.
    (A write that may have read the table: ``tests/integration/test_delete_new_rows.py``.)"""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 2), blind=True)

    await _losing_delete(table, 0, [1], [winner])
    await judge(table, (set(ALL) | {1000, 1001}) - {1})


async def test_a_copy_on_write_rewrite_conflicts(make: Callable[..., RaceTable]) -> None:
    """delta-rs rewrote the file (copy-on-write DELETE): the positions name nothing any more."""
    table = make()

    async def winner() -> None:
        await in_thread(lambda dt: dt.delete("id = 3"), table)

    with pytest.raises(ConcurrentModificationError, match="concurrent_change"):
        await _losing_delete(table, 0, [1], [winner])
    await judge(table, set(ALL) - {3})


# --- a delete that lost to a compaction (design §5) -----------------------------------------


async def test_rebases_onto_rlcd_compaction(make: Callable[..., RaceTable]) -> None:
    """rlcd compacted the delete's files first: the deletions move onto the output's rows
    (ranked past the DV the source was compacted with), committed as the output's DV."""
    table = make()
    await dv_delete(table, {ROWS: [0, 3]})

    async def winner() -> None:
        report = await compact(table, [])
        assert report.committed_version is not None and not report.failed

    await _losing_delete(table, ROWS, [1, 5], [winner])
    async with table.store() as store:
        (output,) = (await load_snapshot(store)).files.values()
    assert output.deletion_vector is not None and output.deletion_vector.cardinality == 2
    await judge(table, set(ALL) - {ROWS + p for p in (0, 3, 1, 5)})


async def test_rebases_onto_a_databricks_compaction(make: Callable[..., RaceTable]) -> None:
    """A compaction with Databricks' tags (and its extra tags and members) is followed too."""
    table = make()

    async def winner() -> None:
        await databricks_optimize(table, [0, ROWS, 2 * ROWS])

    await _losing_delete(table, 2 * ROWS, [0, 19], [winner])
    await judge(table, set(ALL) - {2 * ROWS, 2 * ROWS + 19})


async def test_an_untagged_compaction_conflicts(make: Callable[..., RaceTable]) -> None:
    """delta-rs compacted the file without composition tags: nowhere to follow the rows to."""
    table = make()

    async def winner() -> None:
        await in_thread(lambda dt: dt.optimize.compact(), table)

    with pytest.raises(ConcurrentModificationError, match="compaction_untagged"):
        await _losing_delete(table, 0, [1], [winner])
    await judge(table, set(ALL))


async def _losing_deletes(
    table: RaceTable, deletions: dict[int, Iterable[int]], holds: Iterable[Hold]
) -> int:
    """:func:`_losing_delete` of rows of several files, by their first ids."""
    async with table.store() as inner:
        snapshot = await load_snapshot(inner)
        files = first_ids(snapshot)
        store = HoldingStore(inner, holds)
        paths = {files[k].path: list(p) for k, p in deletions.items()}
        version = await delete_rows(store, snapshot, paths)  # type: ignore[arg-type]
        assert not store.holds
        return version


PARTLY_TAGGED = {
    "the tagged file": ({0: [1, 19]}, {1, 19}),
    "an untagged file": ({ROWS: [2]}, None),
    "both": ({0: [1], ROWS: [2]}, None),
}


@pytest.mark.parametrize("case", list(PARTLY_TAGGED))
async def test_a_partly_tagged_compaction_is_followed_per_file(
    make: Callable[..., RaceTable], case: str
) -> None:
    """A Databricks compaction that tagged only its first source: a delete of that file's
    rows moves onto the output; one touching an untagged file aborts (compaction_untagged)
    and leaves no DV file."""
    table = make()
    deletions, gone = PARTLY_TAGGED[case]

    async def winner() -> None:
        await databricks_optimize(table, [0, ROWS, 2 * ROWS], tagged=1)

    if gone is None:
        with pytest.raises(ConcurrentModificationError, match="compaction_untagged"):
            await _losing_deletes(table, deletions, [winner])
        assert await rlcd_files(table) == set()
    else:
        await _losing_deletes(table, deletions, [winner])
    await judge(table, set(ALL) - (gone or set()))


@pytest.mark.parametrize("first_id", [0, ROWS])
async def test_a_reconciled_compaction_is_followed_for_its_tagged_sources(
    make: Callable[..., RaceTable], first_id: int
) -> None:
    """rlcd's compaction lost to a DV delete of file 1 and reconciled: file 0's tombstone keeps
    its run, so a delete of file 0 that lost to both moves onto the output; file 1's tombstone
    is keyed by the winner's DV, untagged, so a delete of file 1 merges onto that DV and then
    aborts (compaction_untagged)."""
    table = make()

    async def compaction() -> None:
        async def first() -> None:
            await dv_delete(table, {ROWS: [3]})

        report = await compact(table, [first])
        assert [r.decision for r in report.bin_results] == ["reconciled_by_remap"]

    if first_id == ROWS:
        with pytest.raises(ConcurrentModificationError, match="compaction_untagged"):
            await _losing_delete(table, first_id, [5], [compaction])
        await judge(table, set(ALL) - {ROWS + 3})
        return
    await _losing_delete(table, first_id, [5], [compaction])
    check = await tag_check(table)  # the compaction's
    assert (check.sources_checked, check.sources_untagged) == (3, 1)
    await judge(table, set(ALL) - {ROWS + 3, 5})
