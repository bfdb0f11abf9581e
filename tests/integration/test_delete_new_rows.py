"""``rlcd delete`` losing to a writer that added rows (issue: a delete must not miss rows a
concurrent non-blind write added), on local disk and moto's S3.

The delete reads the table, then its commit put is held until the winner committed. A winner
that read the table (``isBlindAppend`` false or absent: an ``INSERT ... SELECT``, an UPDATE's or
MERGE's images) is ordered before the delete: the rows of its new files the condition matches
are deleted too, the others stay. A blind append is ordered after it: its rows stay. Where the
condition cannot be evaluated on a winner's file (the positions-only API, an unreadable file),
the delete conflicts, naming the version and the file, and commits nothing. A DV update of
another file adds no row and needs no evaluation; a RESTORE that shrank one brings rows back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from rlcd.delta.load import load_snapshot
from rlcd.errors import ConcurrentModificationError
from rlcd.operations._dv_writer import delete_rows
from rlcd.operations.delete import DeleteReport, delete_where
from tests.integration.races import (
    ROWS,
    Hold,
    HoldingStore,
    RaceTable,
    batch,
    dv_delete,
    first_ids,
    in_thread,
    insert,
    judge,
    rlcd_files,
    set_dv,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ALL = range(4 * ROWS)


async def _losing_delete(table: RaceTable, where: str, holds: Iterable[Hold]) -> DeleteReport:
    """``delete_where`` whose commit put is held until ``holds`` (the winners) committed."""
    async with table.store() as inner:
        store = HoldingStore(inner, holds)
        report = await delete_where(store, where)  # type: ignore[arg-type]
        assert not store.holds, "every winner ran"
    return report


async def test_insert_select_adding_a_matching_row(make: Callable[..., RaceTable]) -> None:
    """An ``INSERT ... SELECT`` committed a row the condition matches: deleted too."""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 3), blind=False)

    report = await _losing_delete(table, "id IN (5, 1001)", [winner])
    assert report.rows == 2 and [f.rows for f in report.concurrent] == [1]
    await judge(table, (set(ALL) | {1000, 1002}) - {5})


async def test_insert_select_adding_no_matching_row(make: Callable[..., RaceTable]) -> None:
    """The winner's rows do not match: they stay, and the delete lands as read."""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 3), blind=False)

    report = await _losing_delete(table, "id = 5 OR id = 2000", [winner])
    assert report.rows == 1 and not report.concurrent
    await judge(table, (set(ALL) | {1000, 1001, 1002}) - {5})


async def test_insert_select_whose_stats_rule_it_out_is_not_read(
    make: Callable[..., RaceTable],
) -> None:
    """A winner's file whose stats say no row matches is not read: a corrupt body is never
    noticed (nor needed), the delete lands."""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 3), blind=False, body=b"not parquet")

    report = await _losing_delete(table, "id = 5", [winner])
    assert report.version is not None and not report.concurrent


async def test_an_unreadable_winner_file_that_might_match_conflicts(
    make: Callable[..., RaceTable],
) -> None:
    """The stats cannot rule a match out and the file cannot be read: the delete cannot know
    which rows to delete, so it conflicts naming the version and the file, leaving nothing."""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 3), blind=False, body=b"not parquet")

    with pytest.raises(ConcurrentModificationError, match=r"concurrent_append: version 4 added"):
        await _losing_delete(table, "id IN (5, 1001)", [winner])
    assert not await rlcd_files(table), "the delete's DV file is gone"


async def test_a_blind_append_is_ordered_after_the_delete(make: Callable[..., RaceTable]) -> None:
    """A blind append's matching row stays: WriteSerializable puts it after the delete."""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 3), blind=True)

    report = await _losing_delete(table, "id IN (5, 1001)", [winner])
    assert report.rows == 1 and not report.concurrent
    await judge(table, (set(ALL) | {1000, 1001, 1002}) - {5})


async def test_a_delta_rs_append_says_nothing_and_is_evaluated(
    make: Callable[..., RaceTable],
) -> None:
    """delta-rs writes no ``isBlindAppend``: as for Delta's checker, its files are evaluated."""
    table = make()

    async def winner() -> None:
        extra = batch(1000, 3)
        await in_thread(
            lambda _: write_deltalake(
                table.uri, extra, mode="append", storage_options=table.storage_options
            ),
            table,
        )

    report = await _losing_delete(table, "id IN (5, 1001)", [winner])
    assert report.rows == 2
    await judge(table, (set(ALL) | {1000, 1002}) - {5})


async def test_an_update_whose_image_row_matches(make: Callable[..., RaceTable]) -> None:
    """delta-rs rewrote another file (copy-on-write UPDATE), moving id 65 to 1065, which the
    condition matches: its image row is deleted, the rest of the rewritten file stays."""
    table = make()

    async def winner() -> None:
        await in_thread(
            lambda dt: dt.update(updates={"id": "id + 1000"}, predicate="id = 65"), table
        )

    report = await _losing_delete(table, "id IN (5, 1065)", [winner])
    assert report.rows == 2 and [f.rows for f in report.concurrent] == [1]
    await judge(table, set(ALL) - {5, 65})


async def test_a_merge_adding_files_in_several_partitions(make: Callable[..., RaceTable]) -> None:
    """A MERGE inserting rows into both partitions (a file each): the matching rows in each
    new file are deleted, one of them with the whole partition predicate's rows."""
    table = make(partitioned=True)  # files k: part a, b, a, b
    source = batch(1000, 4, part=["a", "b", "a", "b"])

    async def winner() -> None:
        await in_thread(
            lambda dt: (
                dt.merge(source, "s.id = t.id", source_alias="s", target_alias="t")
                .when_not_matched_insert_all()
                .execute()
            ),
            table,
        )

    report = await _losing_delete(table, "(part = 'a' AND id >= 1002) OR id IN (3, 1001)", [winner])
    assert len(report.concurrent) == 2 and report.rows == 3
    await judge(table, (set(ALL) | {1000, 1003}) - {3})


async def test_two_winners_a_delete_and_an_insert_select(make: Callable[..., RaceTable]) -> None:
    """Several winners in one retry: each one's new rows are evaluated in log order."""
    table = make()

    async def winners() -> None:
        await insert(table, batch(1000, 2), blind=False)
        await insert(table, batch(2000, 2), blind=True)
        await insert(table, batch(3000, 2), blind=False)

    report = await _losing_delete(table, "id IN (0, 1000, 2000, 3001)", [winners])
    assert report.rows == 3
    await judge(table, (set(ALL) | {1001, 2000, 2001, 3000}) - {0})


async def test_positions_only_api_conflicts_with_an_insert_select(
    make: Callable[..., RaceTable],
) -> None:
    """``delete_rows`` has no condition to evaluate on the winner's new rows: it conflicts."""
    table = make()

    async def winner() -> None:
        await insert(table, batch(1000, 3), blind=False)

    async with table.store() as inner:
        snapshot = await load_snapshot(inner)
        path = first_ids(snapshot)[0].path
        store = HoldingStore(inner, [winner])
        with pytest.raises(ConcurrentModificationError, match=r"concurrent_append.*no condition"):
            await delete_rows(store, snapshot, {path: [1]})  # type: ignore[arg-type]
    assert not await rlcd_files(table)
    await judge(table, set(ALL) | {1000, 1001, 1002})


async def test_positions_only_api_is_retried_past_a_blind_append(
    make: Callable[..., RaceTable],
) -> None:
    """A blind append leaves the positions-only delete alone: the retry lands."""
    table = make()

    async def winner() -> None:
        await insert(table, pa.table({"id": pa.array([1000], pa.int64())}), blind=True)

    async with table.store() as inner:
        snapshot = await load_snapshot(inner)
        path = first_ids(snapshot)[0].path
        await delete_rows(HoldingStore(inner, [winner]), snapshot, {path: [1]})  # type: ignore[arg-type]
    await judge(table, (set(ALL) | {1000}) - {1})


async def test_positions_only_api_is_retried_past_a_dv_delete_of_another_file(
    make: Callable[..., RaceTable],
) -> None:
    """A DV update of another file re-adds it with more rows deleted, no new row: nothing to
    evaluate, so even the positions-only delete lands."""
    table = make()

    async def winner() -> None:
        await dv_delete(table, {ROWS: [3]})

    async with table.store() as inner:
        snapshot = await load_snapshot(inner)
        path = first_ids(snapshot)[0].path
        await delete_rows(HoldingStore(inner, [winner]), snapshot, {path: [1]})  # type: ignore[arg-type]
    await judge(table, set(ALL) - {1, ROWS + 3})


@pytest.mark.parametrize("api", ["where", "positions"])
async def test_a_restore_bringing_rows_back(make: Callable[..., RaceTable], api: str) -> None:
    """A RESTORE re-added another file with a smaller DV: the rows it brought back are new to
    the delete. The one it matches is deleted; the positions-only delete conflicts."""
    table = make()
    await dv_delete(table, {ROWS: [3]})  # id 23 is gone when the delete reads

    async def winner() -> None:
        await set_dv(table, ROWS, [])

    if api == "where":
        report = await _losing_delete(table, "id IN (5, 23)", [winner])
        assert [f.rows for f in report.files + report.concurrent] == [1, 1]
        await judge(table, set(ALL) - {5, 23})
        return
    async with table.store() as inner:
        snapshot = await load_snapshot(inner)
        path = first_ids(snapshot)[0].path
        with pytest.raises(ConcurrentModificationError, match="concurrent_append"):
            await delete_rows(HoldingStore(inner, [winner]), snapshot, {path: [5]})  # type: ignore[arg-type]
    await judge(table, set(ALL))
