"""Tables whose deletion vectors rlcd wrote read back correctly in delta-rs and the Delta kernel."""

from __future__ import annotations

import collections
import decimal
import json
from pathlib import Path
from typing import Any

import delta_kernel_rust_sharing_wrapper as kernel
import deltalake
import pyarrow as pa
import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot, read_deletion_vector
from rlcd.errors import ConcurrentModificationError, TableError, UnsupportedFeatureError
from rlcd.operations._dv_writer import delete_rows
from rlcd.storage import LocalStore

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def _counter(rows: list[dict[str, Any]]) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(sorted(r.items())) for r in rows)


def _delta_rs(path: Path) -> pa.Table:
    return pa.table(deltalake.DeltaTable(str(path)).scan().read_all())


def _kernel(path: Path) -> pa.Table:
    url = path.as_uri() + "/"
    engine = kernel.PythonInterface(url)
    snapshot = kernel.Table(url).snapshot(engine)
    return kernel.ScanBuilder(snapshot).build().execute(engine).read_all()


def _make_table(path: Path, files: int = 3, rows: int = 10) -> None:
    for i in range(files):
        deltalake.write_deltalake(
            str(path),
            pa.table(
                {
                    "id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
                    "s": [f"r{i}-{j}" for j in range(rows)],
                }
            ),
            mode="append",
            configuration={"delta.enableDeletionVectors": "true"} if i == 0 else None,
        )


@pytest.mark.parametrize("inline", [False, True], ids=["file", "inline"])
async def test_rlcd_dvs_read_back_in_delta_rs_and_kernel(tmp_path: Path, inline: bool) -> None:
    """Deleting by position through rlcd's DVs hides exactly those rows from both readers."""
    _make_table(tmp_path)
    before = _delta_rs(tmp_path)
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        paths = list(snap.files)
        version = await delete_rows(
            store, snap, {paths[0]: [0, 3, 9], paths[1]: [5]}, inline=inline
        )
        # a second delete merges into the existing DV
        snap = await load_snapshot(store)
        version = await delete_rows(store, snap, {paths[0]: [3, 4]}, inline=inline)
        snap = await load_snapshot(store)
        assert snap.version == version
        dvs = {p: set(await read_deletion_vector(store, a)) for p, a in snap.files.items()}
    assert dvs[paths[0]] == {0, 3, 4, 9}
    assert dvs[paths[1]] == {5}
    assert dvs[paths[2]] == set()
    kinds = {a.deletion_vector.storage_type for a in snap.files.values() if a.deletion_vector}
    assert kinds == ({"i"} if inline else {"u"})

    # each file holds ids [10 i, 10 i + 10) in row order, so position p of file i is id 10 i + p
    first_ids = {
        snap.files[paths[0]].parsed_stats["minValues"]["id"],
        snap.files[paths[1]].parsed_stats["minValues"]["id"],
    }
    gone = {min(first_ids) + p for p in (0, 3, 4, 9)} | {max(first_ids) + 5}
    expected = [r for r in before.to_pylist() if r["id"] not in gone]
    assert _counter(_delta_rs(tmp_path).to_pylist()) == _counter(expected)
    assert _counter(_kernel(tmp_path).to_pylist()) == _counter(expected)


async def test_deleting_every_row_removes_the_file(tmp_path: Path) -> None:
    """A file whose rows are all deleted is removed, not given a full DV."""
    _make_table(tmp_path, files=2, rows=4)
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        first = next(iter(snap.files))
        await delete_rows(store, snap, {first: range(4)})
        after = await load_snapshot(store)
    assert first not in after.files
    assert sorted(_delta_rs(tmp_path).column("id").to_pylist()) == [4, 5, 6, 7]


async def test_bad_positions_and_lost_races_write_nothing(tmp_path: Path) -> None:
    """Out-of-range positions are refused; a stale delete of other rows of the same file merges
    onto the winner (design §6); one deleting a row the winner deleted too conflicts, leaving
    no DV file behind."""
    _make_table(tmp_path, files=1, rows=4)
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        path = next(iter(snap.files))
        with pytest.raises(TableError, match="beyond the file's 4 rows"):
            await delete_rows(store, snap, {path: [4]})
        assert await delete_rows(store, snap, {path: [1]}) == 1
        assert await delete_rows(store, snap, {path: [2]}) == 2  # stale: merged onto version 1
        with pytest.raises(ConcurrentModificationError, match="overlapping_deletes"):
            await delete_rows(store, snap, {path: [1, 3]})  # stale, and row 1 is gone already
        after = await load_snapshot(store)
        assert set(await read_deletion_vector(store, after.files[path])) == {1, 2}
    assert len(list(tmp_path.glob("deletion_vector_*.bin"))) == 2


async def test_decimal_bounds_stay_exact(tmp_path: Path) -> None:
    """The DV add's stats keep a 20-digit decimal minimum digit for digit (a float would round
    it above the true minimum, and readers' data skipping could then drop live rows)."""
    low = decimal.Decimal("12345678901234567.891")
    for values in ([low, low + 2], [low + 1]):
        deltalake.write_deltalake(
            str(tmp_path),
            pa.table({"d": pa.array(values, pa.decimal128(20, 3))}),
            mode="append",
            configuration={"delta.enableDeletionVectors": "true"},
        )
    async with LocalStore(tmp_path) as store:
        await compact_table(store, CompactionPolicy())  # delta-rs rounds its stats; rlcd's exact
        snap = await load_snapshot(store)
        path = next(iter(snap.files))
        assert "12345678901234567.891" in (snap.files[path].stats or "")
        await delete_rows(store, snap, {path: [2]})
        add = (await load_snapshot(store)).files[path]
    stats = json.loads(add.stats or "", parse_float=decimal.Decimal)
    assert stats["minValues"]["d"] == low and stats["tightBounds"] is False
    assert sorted(r["d"] for r in _delta_rs(tmp_path).to_pylist()) == [low, low + 2]


@pytest.mark.parametrize("prop", ["delta.appendOnly", "delta.enableChangeDataFeed"])
async def test_rows_are_not_deleted_where_the_table_forbids_it(tmp_path: Path, prop: str) -> None:
    """An append-only table takes no deletion, and one keeping a change data feed would miss
    the delete rows rlcd does not write: both are refused, naming the property, and the log
    is left as it was."""
    deltalake.write_deltalake(
        str(tmp_path),
        pa.table({"id": pa.array(range(10), pa.int64())}),
        configuration={"delta.enableDeletionVectors": "true", prop: "true"},
    )
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        with pytest.raises(UnsupportedFeatureError, match=f"{prop}=true") as info:
            await delete_rows(store, snap, {next(iter(snap.files)): [0, 1]})
    assert info.value.features == (prop,)
    assert len(list((tmp_path / "_delta_log").glob("*.json"))) == 1
    assert _delta_rs(tmp_path).num_rows == 10
