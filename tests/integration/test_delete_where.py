"""``delete_where`` (``rlcd delete``): the rows a predicate matches, and only those, are
deleted through DVs; partition-only predicates read no data file; the commit records the
predicate. (``rlcd delete`` losing races as a subprocess: ``tests/e2e/test_delete_races.py``.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rlcd.delta.actions import CommitInfo
from rlcd.delta.predicate import PredicateError
from rlcd.operations.delete import delete_where
from rlcd.storage import LocalStore
from rlcd.storage.metered import MeteredStore
from tests.conftest import fixture_table
from tests.integration.races import (
    ROWS,
    RaceTable,
    judge,
    last_commit,
    local_table,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ALL = range(4 * ROWS)


async def test_mixed_predicate_deletes_matches_within_the_partition(
    make: Callable[..., RaceTable],
) -> None:
    """A data and partition predicate deletes its rows in one commit, other rows stay."""
    table = make(partitioned=True)  # files k: part a, b, a, b
    async with table.store() as store:
        report = await delete_where(store, "part = 'a' AND (id < 3 OR id >= 55)")
    assert report.version == 4 and report.rows == 3 + 5 and len(report.files) == 2
    await judge(table, set(ALL) - {0, 1, 2, 55, 56, 57, 58, 59})


async def test_second_delete_skips_rows_already_deleted(make: Callable[..., RaceTable]) -> None:
    """Rows a file's DV already deletes are no candidates: counts and positions stay right."""
    table = make()
    async with table.store() as store:
        await delete_where(store, "id >= 5 AND id < 10")
        report = await delete_where(store, "id >= 7 AND id < 13")
    assert report.rows == 3
    await judge(table, set(ALL) - set(range(5, 13)))


async def test_partition_only_predicate_reads_no_data_file(tmp_path: Path) -> None:
    """A predicate over partition columns alone deletes whole files without reading one; a
    data predicate reads only the files its partition and stats leave."""
    table = local_table(tmp_path / "t", partitioned=True)
    async with MeteredStore(LocalStore(tmp_path / "t")) as store:
        report = await delete_where(store, "part = 'b'")
        assert report.files_read == 0 and report.rows == 2 * ROWS
        assert store.requests["local_read"] == 0
        report = await delete_where(store, "part = 'a' AND id = 1")
        assert report.files_read == 1 and report.rows == 1
        assert store.requests["local_read"] == 1
    await judge(table, [i for i in ALL if (i // ROWS) % 2 == 0 and i != 1])


async def test_commit_records_the_predicate_as_spark_does(tmp_path: Path) -> None:
    """The DELETE commit's ``operationParameters.predicate`` is a JSON list holding the
    predicate's text, the shape of Spark's DELETE commits, and delta-rs's history reads it."""
    spark = json.loads(
        (fixture_table("basic-dv-no-checkpoint") / "_delta_log" / f"{1:020}.json")
        .read_text()
        .splitlines()[0]
    )["commitInfo"]
    assert spark["operation"] == "DELETE" and json.loads(spark["operationParameters"]["predicate"])
    table = local_table(tmp_path / "t")
    where = "id IN (1, 2) OR (id >= 44 AND id < 46)"
    async with table.store() as store:
        await delete_where(store, where)
    (info, *_) = await last_commit(table)
    assert isinstance(info, CommitInfo) and info.operation == "DELETE"
    assert info.extra["operationParameters"] == {"predicate": json.dumps([where])}
    (latest,) = table.delta().history(1)
    assert json.loads(latest["operationParameters"]["predicate"]) == [where]


async def test_unknown_column_is_a_predicate_error(make: Callable[..., RaceTable]) -> None:
    """A predicate naming no column of the table raises before anything is written."""
    table = make()
    async with table.store() as store:
        with pytest.raises(PredicateError, match="nope"):
            await delete_where(store, "nope = 1")
    await judge(table, ALL)
