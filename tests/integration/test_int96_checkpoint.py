"""Checkpoints as Spark writes them: per-file timestamp bounds in ``stats_parsed`` are INT96."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

END_OF_TIME = dt.datetime(9999, 12, 31, 23, 59, 59)


def _with_int96_stats_parsed(checkpoint: Path) -> None:
    """Rewrite a checkpoint with each add's stats only in ``stats_parsed``, its timestamp
    bounds at 9999-12-31 and stored as INT96 (outside the nanosecond range of 1677-2262)."""
    table = pq.read_table(checkpoint)
    add = table.column("add").combine_chunks()
    records = pa.array(
        [
            None if s is None else json.loads(s)["numRecords"]
            for s in add.field("stats").to_pylist()
        ],
        pa.int64(),
    )
    bounds = pa.StructArray.from_arrays(
        [pa.array([END_OF_TIME] * len(add), pa.timestamp("us"))], ["valid_to"]
    )
    parsed = pa.StructArray.from_arrays(
        [records, bounds, bounds], ["numRecords", "minValues", "maxValues"]
    )
    fields = [add.field(i) for i in range(add.type.num_fields)]
    names = [f.name for f in add.type]
    stats = names.index("stats")
    fields[stats] = pa.nulls(len(add), pa.string())
    rebuilt = pa.StructArray.from_arrays(
        [*fields, parsed], [*names, "stats_parsed"], mask=add.is_null()
    )
    table = table.set_column(table.column_names.index("add"), "add", rebuilt)
    pq.write_table(table, checkpoint, use_deprecated_int96_timestamps=True)


async def test_end_of_time_in_int96_stats_parsed(copy_fixture: Callable[[str], Path]) -> None:
    """A checkpoint whose ``stats_parsed`` holds 9999-12-31 as INT96 loads, keeping every
    file's ``numRecords`` (pyarrow's default nanosecond coercion cannot hold that year)."""
    path = copy_fixture("basic-dv-with-checkpoint")
    async with LocalStore(path) as store:
        before = await load_snapshot(store)
    checkpoint = path / "_delta_log" / f"{40:020d}.checkpoint.parquet"
    _with_int96_stats_parsed(checkpoint)
    assert "int96 field_id=-1 valid_to" in str(pq.ParquetFile(checkpoint).schema)
    async with LocalStore(path) as store:
        after = await load_snapshot(store)
    assert {p: a.num_records for p, a in after.files.items()} == {
        p: a.num_records for p, a in before.files.items()
    }
    from_checkpoint = [a for a in after.files.values() if "9999-12-31T23:59:59" in a.stats]
    assert from_checkpoint, "no live file kept the checkpoint's stats_parsed"
