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
from typing import TextIO

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.cli.report import print_compaction, print_plan, print_verify
from rlcd.compaction.compact import compact_table, rewrite_settings
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.source import DecodedSource, fetch_source
from rlcd.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol
from rlcd.delta.load import load_snapshot, table_config
from rlcd.delta.write import write_commit
from rlcd.errors import ConfigError
from rlcd.operations.delete import delete_rows
from rlcd.operations.verify import verify_table
from rlcd.storage import LocalStore

__all__ = ("DemoResult", "build_demo_table", "fresh_demo_dir", "run_demo")

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


DEMO_TARGET = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DemoResult:
    """Where the demo table is, and whether every check it made held."""

    path: Path
    ok: bool


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


_MARKER = ".rlcd-demo"
_TABLE_ENTRIES = frozenset({"_delta_log", *(f"region={r}" for r in REGIONS)})


def fresh_demo_dir(path: Path, entries: frozenset[str], what: str) -> None:
    """Empty ``path`` for a new demo; only a directory an earlier demo made (its marker, or
    nothing but the ``entries`` a demo makes there) is ever deleted.

    Raises:
        ConfigError: ``path`` holds anything else (``what`` names what it should be).
    """
    if path.exists():
        found = {p.name for p in path.iterdir()} if path.is_dir() else {""}
        if _MARKER not in found and not found <= entries | {_MARKER}:
            raise ConfigError(
                f"--path {path} exists and is not {what} rlcd made: "
                "give another path, or remove it yourself"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / _MARKER).write_text("made by `rlcd demo`, which recreates this directory\n")


async def build_demo_table(path: Path, *, files: int, rows: int) -> None:
    """A DV-enabled table partitioned by region, one small file per append commit."""
    await anyio.to_thread.run_sync(fresh_demo_dir, path, _TABLE_ENTRIES, "a demo table")
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


async def _live_ids(store: LocalStore) -> list[int]:
    """Every live ``id`` as rlcd reads the table (Parquet rows minus DV rows), sorted."""
    snapshot = await load_snapshot(store)
    options = rewrite_settings(snapshot, table_config(snapshot), CompactionPolicy()).read
    ids: list[int] = []
    for add in snapshot.files.values():
        fetched = await fetch_source(store, add, options, version=snapshot.version)
        decoded = DecodedSource(fetched, options, table=store.root, version=snapshot.version)
        for batch in decoded.batches():
            ids.extend(batch.column("id").to_pylist())
        fetched.close()
    return sorted(ids)


async def run_demo(path: Path, *, files: int, rows: int, out: TextIO) -> DemoResult:
    """Build the table, delete rows through DVs, compact, verify, and check no row changed.

    Raises:
        ConfigError: fewer than 3 files or 4 rows per file (the deletes need them), or ``path``
            holds something other than an earlier demo table.
    """
    if files < 3 or rows < 4:
        raise ConfigError(f"the demo needs --files >= 3 and --rows >= 4, got {files} and {rows}")
    await build_demo_table(path, files=files, rows=rows)
    async with LocalStore(path) as store:
        snapshot = await load_snapshot(store)
        paths = list(snapshot.files)
        await delete_rows(store, snapshot, {paths[0]: range(0, rows, 7), paths[1]: [1, 2, 3]})
        await delete_rows(store, await load_snapshot(store), {paths[2]: [0]}, inline=True)
        snapshot = await load_snapshot(store)
        deleted = sum(a.deleted_rows for a in snapshot.files.values())
        out.write(
            f"demo table {path}: {len(snapshot.files)} small files in {len(REGIONS)} partitions, "
            f"{files * rows} rows written, {deleted} deleted through deletion vectors\n\n"
        )
        before = await _live_ids(store)
        policy = CompactionPolicy(target_file_size=DEMO_TARGET)
        print_plan(await compact_table(store, policy, dry_run=True), out)
        report = await compact_table(store, policy)
        print_compaction(report, out)
        again = await compact_table(store, policy)
        out.write(f"  a second run plans {len(again.planned)} bins\n\n")
        verification = await verify_table(store)
        print_verify(verification, out)
        after = await _live_ids(store)
    same = before == after
    out.write(
        f"\nlive rows before {len(before)}, after {len(after)}: "
        f"{'identical' if same else 'DIFFERENT'}\n"
        f"open it with any Delta reader, e.g. deltalake.DeltaTable({str(path)!r})\n"
    )
    ok = same and verification.ok and not report.failed and not again.planned
    return DemoResult(path=path, ok=ok)
