"""The copy path's output follows its sources (issue 39): a bin whose bytes are mostly
pyarrow's files (decimals as fixed-length bytes) is written with fixed-length decimals, its
pyarrow row groups copied and the rest (a delta-rs file's INT64 decimals, a file with a
deletion vector) re-encoded into them; a bin of mostly delta-rs files stays as today. Judged
against the re-encode path and by delta-rs (``scan()``, deletion vectors applied) and the
kernel; the decimal stats must be the live rows' exact bounds."""

from __future__ import annotations

import json
import shutil
import time
from decimal import Decimal
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import WriterProperties
from deltalake.transaction import AddAction

from rlcd.delta.load import load_snapshot
from rlcd.operations._dv_writer import delete_rows
from rlcd.storage import open_store
from tests.integration.tables import batch, delta_rs_rows, kernel_rows
from tests.integration.test_copy_path import COPY_ALL, _commit, _compact, _same_outputs

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROW_GROUP = 1_000


def _rows(start: int, n: int) -> pa.Table:
    """:func:`batch` with a decimal of 12 digits (negative ones too, so the bounds' signs
    matter) and one of 20 (fixed-length bytes in every writer)."""
    cents = [(i * 7919) % 2_000_001 - 1_000_000 for i in range(start, start + n)]
    return batch(
        start,
        n,
        price=pa.array([Decimal(c).scaleb(-2) for c in cents], pa.decimal128(12, 2)),
        wide=pa.array([Decimal(c).scaleb(-4) * 10**9 for c in cents], pa.decimal128(20, 4)),
    )


def _delta_rs(path: Path, table: pa.Table) -> None:
    """An append by delta-rs: decimals of up to 18 digits as INT64."""
    deltalake.write_deltalake(
        str(path),
        table,
        mode="append",
        writer_properties=WriterProperties(max_row_group_size=ROW_GROUP),
        configuration={"delta.enableDeletionVectors": "true"},
    )


def _pyarrow(path: Path, table: pa.Table, name: str) -> None:
    """A file pyarrow writes with its defaults (fixed-length decimals), added to the log."""
    pq.write_table(table, path / name, row_group_size=ROW_GROUP)
    add = AddAction(
        name,
        (path / name).stat().st_size,
        {},
        int(time.time() * 1000),
        True,
        json.dumps({"numRecords": table.num_rows}),
    )
    deltalake.DeltaTable(str(path)).create_write_transaction(
        [add], mode="append", schema=table.schema
    )


async def _delete_from(path: Path, name: str, positions: list[int]) -> None:
    async with open_store(str(path)) as store:
        snap = await load_snapshot(store)
        assert name in snap.files
        await delete_rows(store, snap, {name: positions})


async def _mostly_pyarrow(path: Path) -> None:
    """A small delta-rs file, then three pyarrow files of three row groups, one with a DV."""
    _delta_rs(path, _rows(0, 600))
    for i in range(3):
        _pyarrow(path, _rows(600 + i * 3 * ROW_GROUP, 3 * ROW_GROUP), f"part-{i}-pyarrow.parquet")
    await _delete_from(path, "part-1-pyarrow.parquet", [0, 7, 1_500, 2_999])


async def _mostly_delta_rs(path: Path) -> None:
    """Three delta-rs files of three row groups, then a pyarrow file with a DV."""
    for i in range(3):
        _delta_rs(path, _rows(i * 3 * ROW_GROUP, 3 * ROW_GROUP))
    _pyarrow(path, _rows(9 * ROW_GROUP, 2 * ROW_GROUP), "part-9-pyarrow.parquet")
    await _delete_from(path, "part-9-pyarrow.parquet", [3, 1_999])


@pytest.mark.parametrize(
    ("make", "physical", "copied"),
    [
        (_mostly_pyarrow, "FIXED_LEN_BYTE_ARRAY", 6),
        (_mostly_delta_rs, "INT64", 9),
    ],
    ids=["mostly-pyarrow", "mostly-delta-rs"],
)
async def test_the_output_is_written_as_most_of_its_copied_bytes_are(
    tmp_path: Path, make: object, physical: str, copied: int
) -> None:
    """One bin mixing copied row groups with re-encoded ones of the other decimal storage and
    a DV'd source: its output stores decimals as the copied majority does, holds the live
    rows in the re-encode path's order, and its decimal stats are their exact bounds."""
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    auto.mkdir()
    await make(auto)  # type: ignore[operator]
    shutil.copytree(auto, reencoded)
    before = delta_rs_rows(auto)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    (written,) = report.committed
    assert written.copied_row_groups == copied and written.reencoded_bytes > 4_096
    version = report.committed_version or 0
    _same_outputs(auto, reencoded, version)
    assert delta_rs_rows(auto) == before == kernel_rows(auto)
    (add,), _ = _commit(auto, version)
    output = auto / add["path"]
    schema = pq.read_metadata(output).schema
    types = {schema.column(i).name: schema.column(i).physical_type for i in range(len(schema))}
    assert (types["price"], types["wide"]) == (physical, "FIXED_LEN_BYTE_ARRAY")
    live = pq.read_table(output)
    stats = json.loads(add["stats"])
    for column in ("price", "wide"):
        bounds = pc.min_max(live[column]).as_py()
        assert Decimal(str(stats["minValues"][column])) == bounds["min"]
        assert Decimal(str(stats["maxValues"][column])) == bounds["max"]
    assert stats["numRecords"] == live.num_rows == len(before)
