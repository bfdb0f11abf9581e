"""Test tables and independent readers for the compaction tests.

Tables are written by real writers (delta-rs appends, rlcd's DV delete) or copied from the
fixtures; rows are read back through delta-rs ``scan()`` and the Delta kernel, never through
rlcd. S3 tables live on the moto server and are mirrored to local disk for the readers.
"""

from __future__ import annotations

import collections
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import delta_kernel_rust_sharing_wrapper as kernel
import deltalake
import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.delta._segment import build_segment
from rlcd.delta.load import list_log, load_snapshot, read_commit
from rlcd.delta.log_path import LogKind
from rlcd.delta.replay import Snapshot, replay
from rlcd.storage import LocalStore, S3Config

Rows = collections.Counter[tuple[tuple[str, Any], ...]]


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def rows_of(table: pa.Table) -> Rows:
    """The multiset of rows, each as sorted ``(column, value)`` pairs (nested values frozen)."""
    return collections.Counter(_hashable(r) for r in table.to_pylist())


def delta_rs_rows(path: Path) -> Rows:
    """Rows through delta-rs, or through the kernel alone for a table delta-rs refuses
    (delta-rs 1.6 lacks the typeWidening-preview feature)."""
    try:
        return rows_of(pa.table(deltalake.DeltaTable(str(path)).scan().read_all()))
    except deltalake.exceptions.DeltaError as exc:
        if "TypeWideningPreview" not in str(exc):
            raise
        return kernel_rows(path)


def kernel_rows(path: Path) -> Rows:
    url = path.as_uri() + "/"
    engine = kernel.PythonInterface(url)
    snapshot = kernel.Table(url).snapshot(engine)
    return rows_of(kernel.ScanBuilder(snapshot).build().execute(engine).read_all())


def live_files(path: Path) -> int:
    """Live data files, by delta-rs's log replay."""
    return len(deltalake.DeltaTable(str(path)).file_uris())


def append(path: Path, table: pa.Table, **kw: Any) -> None:
    deltalake.write_deltalake(str(path), table, mode="append", **kw)


def batch(start: int, n: int, **extra: Any) -> pa.Table:
    """``n`` rows of mixed types with ids from ``start``."""
    ids = list(range(start, start + n))
    columns: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "name": [f"name-{i}" for i in ids],
        "score": pa.array([i * 0.5 for i in ids], pa.float64()),
        "flag": [i % 3 == 0 for i in ids],
    }
    columns.update(extra)
    return pa.table(columns)


def unpartitioned(path: Path) -> None:
    for i in range(5):
        append(path, batch(i * 100, 100))


def partitioned(path: Path) -> None:
    for i in range(8):
        part = ["a", "b"][i % 2]
        append(path, batch(i * 50, 50, part=[part] * 50), partition_by=["part"])


def evolving(path: Path) -> None:
    """Older files lack a column that newer files have."""
    for i in range(3):
        append(path, batch(i * 40, 40))
    for i in range(3, 6):
        append(path, batch(i * 40, 40, extra=[f"x{i}"] * 40), schema_mode="merge")


def with_dvs(path: Path) -> None:
    """A DV-enabled table (the tests delete rows in it through rlcd's DV writer)."""
    for i in range(4):
        append(
            path,
            batch(i * 30, 30),
            configuration={"delta.enableDeletionVectors": "true"} if i == 0 else None,
        )


def flip_page_byte(file: Path) -> str:
    """Flip a bit of the last byte of the Parquet ``file``'s first column chunk: page data (of
    its last value, in an uncompressed page), never a page header, whose statistics no page
    checksum covers and no decode reads. The column's name."""
    column = pq.ParquetFile(file).metadata.row_group(0).column(0)
    end = (column.dictionary_page_offset or column.data_page_offset) + column.total_compressed_size
    data = bytearray(file.read_bytes())
    data[end - 1] ^= 0x10
    file.write_bytes(bytes(data))
    return str(column.path_in_schema)


MAKERS: dict[str, Callable[[Path], None]] = {
    "unpartitioned": unpartitioned,
    "partitioned": partitioned,
    "schema-evolution": evolving,
    "deletion-vectors": with_dvs,
}


class S3Mirror:
    """Puts a local table on the moto server and brings it back for the local-only readers."""

    def __init__(self, endpoint: str, bucket: str) -> None:
        self.bucket = bucket
        self.config = S3Config(endpoint_url=endpoint, region="us-east-1", addressing_style="path")
        self._client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")

    def upload(self, local: Path, prefix: str) -> str:
        for p in sorted(local.rglob("*")):
            if p.is_file():
                self._client.upload_file(str(p), self.bucket, f"{prefix}/{p.relative_to(local)}")
        return f"s3://{self.bucket}/{prefix}"

    def download(self, prefix: str, local: Path) -> Path:
        if local.exists():
            shutil.rmtree(local)
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix + "/"
        )
        for page in pages:
            for obj in page.get("Contents", []):
                dest = local / obj["Key"][len(prefix) + 1 :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                self._client.download_file(self.bucket, obj["Key"], str(dest))
        return local

    def multipart_uploads(self) -> int:
        return len(self._client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", []))


async def checkpoint_and_json_snapshots(path: Path) -> tuple[Snapshot, Snapshot]:
    """The latest snapshot as rlcd loads it (from the newest checkpoint), and the same version
    rebuilt from the JSON commits alone, ignoring every checkpoint."""
    async with LocalStore(path) as store:
        from_checkpoint = await load_snapshot(store)
        commits = [p for p in await list_log(store) if p.kind is LogKind.COMMIT]
        segment = build_segment(commits, table=store.root)
        bodies = [
            (c.version, await read_commit(store, c.version, table=store.root))
            for c in segment.commits
        ]
    return from_checkpoint, replay(store.root, bodies)
