"""The copy path on files that hold their partition columns (issue 39), as Delta 4.4 writes
them by default (``delta.writePartitionColumnsToParquet``): the data columns in the table's
order, then the partition columns in ``metaData.partitionColumns`` order. The sources here
are pyarrow's files in that layout, added to the log with their partition values. A bin
whose bytes are mostly such files writes its output in that layout: their row groups copied,
the rest (a DV'd file, a file without the columns) re-encoded with the bin's values as
constant columns. Judged against the re-encode path (which leaves them out), by delta-rs
(``scan()``), the kernel and pyarrow; the stats leave the partition columns out, as Spark's
do."""

from __future__ import annotations

import datetime
import json
import shutil
import time
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake.transaction import AddAction

from rlcd.delta.load import load_snapshot
from rlcd.operations._dv_writer import delete_rows
from rlcd.storage import open_store
from tests.integration.tables import batch, delta_rs_rows, kernel_rows
from tests.integration.test_copy_path import COPY_ALL, _commit, _compact, _tags

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROW_GROUP = 1_000
PARTITIONS = ("day", "part")
"""``metaData.partitionColumns``: not the order the schema declares them in."""
VALUES: dict[str, dict[str, str | None]] = {
    "a": {"part": "a", "day": "2026-12-01"},
    "b": {"part": "b", "day": None},
}
"""Each partition's raw ``partitionValues`` (``b``'s day is null)."""
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("part", pa.string()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("day", pa.date32()),
        ("flag", pa.bool_()),
    ]
)


def _data(start: int, n: int) -> pa.Table:
    """``n`` rows of the data columns, in the table's order."""
    return batch(start, n).select([f.name for f in SCHEMA if f.name not in PARTITIONS])


def _with_partitions(data: pa.Table, values: dict[str, str | None]) -> pa.Table:
    """The rows as a Delta 4.4 file holds them: the partition columns after the data ones."""
    day = values["day"]
    typed = {"part": values["part"], "day": day and datetime.date.fromisoformat(day)}
    for name in PARTITIONS:
        data = data.append_column(
            SCHEMA.field(name),
            pa.repeat(pa.scalar(typed[name], SCHEMA.field(name).type), data.num_rows),
        )
    return data


def _add(path: Path, name: str, table: pa.Table, key: str, rows: int) -> None:
    """Write ``table`` to ``name`` in partition ``key``'s directory and add it to the log."""
    relative = f"part={key}/{name}"
    (path / f"part={key}").mkdir(exist_ok=True)
    pq.write_table(table, path / relative, row_group_size=ROW_GROUP)
    add = AddAction(
        relative,
        (path / relative).stat().st_size,
        VALUES[key],
        int(time.time() * 1000),
        True,
        json.dumps({"numRecords": rows}),
    )
    deltalake.DeltaTable(str(path)).create_write_transaction(
        [add], mode="append", schema=SCHEMA, partition_by=list(PARTITIONS)
    )


async def _table(path: Path, *, in_files: tuple[bool, ...]) -> None:
    """A partitioned table of one file per ``in_files`` entry (three row groups each, the
    partitions taking turns), each holding its partition columns or not; a deletion vector
    on the first file of partition ``a`` and on the last file (nothing to copy, so it stays
    in its partition's bin whatever its layout: ``test_copy_layouts``)."""
    deltalake.DeltaTable.create(
        str(path),
        SCHEMA,
        partition_by=list(PARTITIONS),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    for i, written in enumerate(in_files):
        key = "ab"[i % 2]
        data = _data(i * 3 * ROW_GROUP, 3 * ROW_GROUP)
        table = _with_partitions(data, VALUES[key]) if written else data
        _add(path, f"part-{i}.parquet", table, key, data.num_rows)
    async with open_store(str(path)) as store:
        snap = await load_snapshot(store)
        last = f"part={'ab'[(len(in_files) - 1) % 2]}/part-{len(in_files) - 1}.parquet"
        deleted = {"part=a/part-0.parquet": [0, 7, 1_500, 2_999], last: [3, 2_000]}
        await delete_rows(store, snap, deleted)


def _by_partition(path: Path, version: int) -> dict[str, dict[str, Any]]:
    adds, _ = _commit(path, version)
    return {add["partitionValues"]["part"]: add for add in adds}


@pytest.mark.parametrize(
    ("in_files", "copied", "written"),
    [
        ((True, True, True, True, True, False), {"a": 6, "b": 6}, True),
        ((True, False, False, False, False, True), {"a": 6, "b": 6}, False),
    ],
    ids=["mostly-in-files", "mostly-without"],
)
async def test_partition_columns_follow_the_copied_bytes(
    tmp_path: Path, in_files: tuple[bool, ...], copied: dict[str, int], written: bool
) -> None:
    """Each bin writes its partition columns into its output when that copies the most
    bytes: the copied and re-encoded row groups share one schema, the re-encoded ones carry
    the bin's values (a null one too); the table reads as before through delta-rs and the
    kernel, and the stats and tags are the re-encode path's."""
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    await _table(auto, in_files=in_files)
    shutil.copytree(auto, reencoded)
    before = delta_rs_rows(auto)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    version = report.committed_version or 0
    assert delta_rs_rows(auto) == before == kernel_rows(auto)
    outputs, others = _by_partition(auto, version), _by_partition(reencoded, version)
    counted = {b.bin.partition_values["part"]: b.copied_row_groups for b in report.committed}
    assert {key: counted.get(key, 0) for key in VALUES} == copied
    for key, add in outputs.items():
        other = others[key]
        assert json.loads(add["stats"]) == json.loads(other["stats"])
        read = pq.read_table(auto / add["path"])
        data = read.select([n for n in read.column_names if n not in PARTITIONS])
        assert data.to_pylist() == pq.read_table(reencoded / other["path"]).to_pylist()
        holds = copied[key] > 0 and written
        assert read.column_names[-2:] == (list(PARTITIONS) if holds else ["score", "flag"])
        if holds:
            expected = _with_partitions(data.slice(0, 1), VALUES[key]).select(list(PARTITIONS))
            assert read.select(list(PARTITIONS)).to_pylist() == expected.to_pylist() * read.num_rows
    _, removes_a = _commit(auto, version)
    _, removes_r = _commit(reencoded, version)
    names_a = {a["path"]: str(a["partitionValues"]) for a in outputs.values()}
    names_r = {a["path"]: str(a["partitionValues"]) for a in others.values()}
    assert [_tags(r, names_a) for r in removes_a] == [_tags(r, names_r) for r in removes_r]
