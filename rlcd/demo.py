"""The embedded demo: builds a small local Delta table the way a streaming writer would (many
small files), deletes some rows with deletion vectors, then shows what rlcd sees.

It needs no cloud account and no other engine: every file and commit is written by rlcd, and the
result is an ordinary Delta table any reader opens.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.compaction.dml import delete_rows
from rlcd.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol
from rlcd.delta.load import load_snapshot
from rlcd.delta.write import write_commit
from rlcd.storage import LocalStore

__all__ = ("DemoSummary", "build_demo_table", "run_demo")

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("amount", pa.float64()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)
_DELTA_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {}},
        {"name": "region", "type": "string", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
        {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}},
    ],
}
REGIONS = ("eu", "us", "apac")


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """What the demo shows: the table and its state as rlcd loaded it."""

    path: Path
    version: int
    files: int
    physical_rows: int
    deleted_rows: int
    files_with_dvs: int


def _batch(first_id: int, rows: int, region: str) -> pa.Table:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ids = list(range(first_id, first_id + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array([region] * rows),
            "amount": pa.array([(i * 37 % 1000) / 10 for i in ids], pa.float64()),
            "at": pa.array([start + dt.timedelta(minutes=i) for i in ids], SCHEMA.field("at").type),
        },
        schema=SCHEMA,
    )


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()  # writing to a Python sink is safe; reading from one is not (pitfalls)
    pq.write_table(table.drop_columns(["region"]), sink, compression="zstd")
    return sink.getvalue()


async def build_demo_table(path: Path, *, files: int, rows: int) -> None:
    """A DV-enabled table partitioned by region, one small file per append commit."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    now = int(time.time() * 1000)
    async with LocalStore(path) as store:
        await write_commit(
            store,
            0,
            [
                CommitInfo(timestamp=now, operation="CREATE TABLE", extra={"engineInfo": "rlcd"}),
                Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)),
                Metadata(
                    id=str(uuid.uuid4()),
                    schema_string=json.dumps(_DELTA_SCHEMA),
                    partition_columns=("region",),
                    configuration={"delta.enableDeletionVectors": "true"},
                    created_time=now,
                ),
            ],
        )
        for i in range(files):
            region = REGIONS[i % len(REGIONS)]
            data = _parquet_bytes(_batch(i * rows, rows, region))
            key = f"region={region}/part-00000-{uuid.uuid4()}-c000.zstd.parquet"
            meta = await store.put(key, data)
            actions: list[Action] = [
                CommitInfo(timestamp=now, operation="WRITE", extra={"engineInfo": "rlcd"}),
                AddFile(
                    path=key,
                    partition_values={"region": region},
                    size=meta.size,
                    modification_time=meta.last_modified_ms,
                    data_change=True,
                    stats=json.dumps({"numRecords": rows}),
                ),
            ]
            await write_commit(store, i + 1, actions)


async def run_demo(path: Path, *, files: int = 12, rows: int = 500) -> DemoSummary:
    """Build the table, delete rows through deletion vectors, and summarise the snapshot."""
    await build_demo_table(path, files=files, rows=rows)
    async with LocalStore(path) as store:
        snapshot = await load_snapshot(store)
        paths = list(snapshot.files)
        await delete_rows(store, snapshot, {paths[0]: range(0, rows, 7), paths[1]: [1, 2, 3]})
        snapshot = await load_snapshot(store)
        await delete_rows(store, snapshot, {paths[2]: [0]}, inline=True)
        snapshot = await load_snapshot(store)
    adds = list(snapshot.files.values())
    return DemoSummary(
        path=path,
        version=snapshot.version,
        files=len(adds),
        physical_rows=sum(a.num_records or 0 for a in adds),
        deleted_rows=sum(a.deleted_rows for a in adds),
        files_with_dvs=sum(1 for a in adds if a.deletion_vector is not None),
    )
