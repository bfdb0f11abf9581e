"""Cleanup of rlcd's leftovers on real tables: what goes, and everything that must stay."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.compaction.cleanup import clean_table
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.dv._z85 import z85_decode, z85_encode
from rlcd.delta.load import load_snapshot
from rlcd.delta.log_path import LogKind, LogPath
from rlcd.delta.names import data_file_name, dv_file_name, rlcd_uuid
from rlcd.operations._dv_writer import delete_rows
from rlcd.storage import LocalStore, open_store
from rlcd.storage.base import ObjectMeta, PendingUpload
from tests.conftest import fixture_table
from tests.contract.support import boto_client
from tests.integration.tables import S3Mirror, delta_rs_rows, partitioned, with_dvs

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

HOUR = 3600.0
_T = TypeVar("_T")
HEX = "ab" * 16


def _now_ms() -> int:
    return int(time.time() * 1000)


def _age(path: Path, hours: float) -> None:
    """Make a file look ``hours`` old."""
    when = time.time() - hours * HOUR
    os.utime(path, (when, when))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


async def test_local_leftovers_go_and_nothing_else_does(tmp_path: Path) -> None:
    """Old rlcd orphans (data, DV, temp files) are removed, reported, and only they: rlcd files
    that are live, tombstoned or DV-referenced, young leftovers, another writer's unreferenced
    files and look-alike temp files stay, and the rows are unchanged. A dry run removes
    nothing and reports the same."""
    table = tmp_path / "t"
    partitioned(table)
    async with LocalStore(table) as store:
        await compact_table(store, CompactionPolicy(), count_rows=False)
    live = deltalake.DeltaTable(str(table)).file_uris()
    deltalake.DeltaTable(str(table)).delete("part = 'a'")  # rlcd's 'a' output: now only removed
    part = table / "part=b"
    old = {
        "data": part / data_file_name("zstd", os.urandom(16)),
        "dv": table / dv_file_name(os.urandom(16))[1],
        "temp": part / f".{data_file_name('zstd', os.urandom(16))}.{HEX}.rlcd-tmp",
    }
    kept = {
        "young": part / data_file_name("zstd", os.urandom(16)),
        "young temp": part / f".x.parquet.{HEX}.rlcd-tmp",
        "foreign": part / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet",
        "foreign temp": part / ".x.parquet.rlcd-tmp",
        "foreign dv": table / f"deletion_vector_{uuid.uuid4()}.bin",
    }
    for path in [*old.values(), *kept.values()]:
        path.write_bytes(b"left behind")
    for path in table.rglob("*"):
        if path not in (kept["young"], kept["young temp"]):
            _age(path, 2)
    rows = delta_rs_rows(table)
    before = _files(table)
    async with LocalStore(table) as store:
        dry = await clean_table(store, grace_s=HOUR, now_ms=_now_ms(), dry_run=True)
        assert _files(table) == before
        report = await clean_table(store, grace_s=HOUR, now_ms=_now_ms())
    gone = {str(p.relative_to(table)) for p in old.values()}
    assert before - _files(table) == gone
    assert (
        {m.key for m in report.deleted}
        == {m.key for m in dry.deleted}
        == gone - {str(old["temp"].relative_to(table))}
    )
    assert [u.upload_id for u in report.aborted] == [str(old["temp"])]
    assert report.removed == dry.removed == 3 and report.skipped is None
    assert report.bytes_deleted == 2 * len(b"left behind")
    assert len(live) == 2 and all(Path(uri.removeprefix("file://")).exists() for uri in live)
    assert delta_rs_rows(table) == rows


async def test_dv_files_rlcd_wrote_stay_while_referenced(tmp_path: Path) -> None:
    """The DV files of rlcd's DV writer, referenced by the live adds, are kept however old."""
    table = tmp_path / "t"
    with_dvs(table)
    async with LocalStore(table) as store:
        snap = await load_snapshot(store)
        first = next(iter(snap.files))
        await delete_rows(store, snap, {first: [0, 1]})
    dvs = [p for p in table.iterdir() if p.name.startswith("deletion_vector_")]
    assert dvs
    for path in table.rglob("*"):
        _age(path, 2)
    async with LocalStore(table) as store:
        report = await clean_table(store, grace_s=HOUR, now_ms=_now_ms())
    assert report.removed == 0 and all(p.exists() for p in dvs)


def _rename_map(rows: list[Any], names: dict[str, str], dvs: dict[bytes, bytes]) -> list[Any]:
    """Rows of add/remove actions with every data file and u-DV renamed to an rlcd name."""
    out = []
    for row in rows:
        if row is None or row.get("path") is None:
            out.append(row)
            continue
        row = dict(row)
        directory, _, name = row["path"].rpartition("/")
        if name not in names:
            names[name] = data_file_name("snappy", os.urandom(16))
        row["path"] = f"{directory}/{names[name]}" if directory else names[name]
        dv = row.get("deletionVector")
        if dv and dv.get("storageType") == "u":
            dv = dict(dv)
            text = dv["pathOrInlineDv"]
            old = z85_decode(text[-20:])
            dvs.setdefault(old, rlcd_uuid(os.urandom(16)).bytes)
            dv["pathOrInlineDv"] = text[:-20] + z85_encode(dvs[old])
            row["deletionVector"] = dv
        out.append(row)
    return out


def _rename_checkpointed_files(table: Path) -> list[Path]:
    """Rewrite every checkpoint and sidecar so that the files they name carry rlcd names,
    rename those files, and delete the JSON commits the checkpoints cover: the checkpoints
    are then the only references. Returns the renamed files."""
    names: dict[str, str] = {}
    dvs: dict[bytes, bytes] = {}
    covered = 0
    log = table / "_delta_log"
    for path in sorted([*log.iterdir(), *(log / "_sidecars").glob("*")]):
        parsed = LogPath.parse(path.name)
        if path.suffix == ".parquet" and (path.parent.name == "_sidecars" or parsed):
            data = pq.read_table(pa.BufferReader(path.read_bytes()))
            for column in ("add", "remove"):
                if column in data.column_names:
                    rows = _rename_map(data.column(column).to_pylist(), names, dvs)
                    typ = data.schema.field(column).type
                    index = data.column_names.index(column)
                    data = data.set_column(index, column, pa.array(rows, typ))
            pq.write_table(data, path)
        elif parsed and parsed.is_checkpoint:  # a V2 checkpoint in JSON
            lines = [json.loads(line) for line in path.read_text().splitlines() if line]
            for line in lines:
                for kind in ("add", "remove"):
                    if kind in line:
                        line[kind] = _rename_map([line[kind]], names, dvs)[0]
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        if parsed and parsed.is_checkpoint:
            covered = max(covered, parsed.version)
    for path in list(log.iterdir()):
        parsed = LogPath.parse(path.name)
        if parsed and parsed.kind is LogKind.COMMIT and parsed.version <= covered:
            path.unlink()
    renamed = []
    for path in list(table.rglob("*.parquet")):
        if path.name in names:
            path.rename(path.with_name(names[path.name]))
            renamed.append(path.with_name(names[path.name]))
    for old, new in dvs.items():
        source = table / f"deletion_vector_{uuid.UUID(bytes=old)}.bin"
        if source.exists():
            source.rename(table / f"deletion_vector_{uuid.UUID(bytes=new)}.bin")
            renamed.append(table / f"deletion_vector_{uuid.UUID(bytes=new)}.bin")
    return renamed


@pytest.mark.parametrize(
    "fixture",
    [
        "multi-part-checkpoint",
        "v2-checkpoint-parquet",
        "v2-checkpoint-json",
        "basic-dv-with-checkpoint",
    ],
)
async def test_files_only_a_checkpoint_names_are_kept(tmp_path: Path, fixture: str) -> None:
    """A file (or DV file) named only by a checkpoint (classic, multi-part, V2 in Parquet or
    JSON with sidecars), in any checkpoint, not only the newest, stays; an orphan beside it
    goes."""
    table = tmp_path / fixture
    shutil.copytree(fixture_table(fixture), table)
    renamed = _rename_checkpointed_files(table)
    assert renamed
    if fixture == "basic-dv-with-checkpoint":
        assert any(p.name.startswith("deletion_vector_") for p in renamed)
    orphan = table / data_file_name("zstd", os.urandom(16))
    orphan.write_bytes(b"orphan")
    for path in table.rglob("*"):
        _age(path, 2)
    async with LocalStore(table) as store:
        report = await clean_table(store, grace_s=HOUR, now_ms=_now_ms())
    assert report.skipped is None
    assert [m.key for m in report.deleted] == [orphan.name]
    assert all(p.exists() for p in renamed)


async def test_an_unreadable_log_file_means_nothing_is_deleted(tmp_path: Path) -> None:
    """When a log file cannot be read, which files it names is unknown: the orphans stay, and
    the report says why."""
    table = tmp_path / "t"
    partitioned(table)
    orphan = table / data_file_name("zstd", os.urandom(16))
    orphan.write_bytes(b"orphan")
    (table / "_delta_log" / "00000000000000000003.checkpoint.parquet").write_bytes(b"garbage")
    _age(orphan, 2)
    async with LocalStore(table) as store:
        report = await clean_table(store, grace_s=HOUR, now_ms=_now_ms())
    assert orphan.exists() and report.removed == 0
    assert (
        report.skipped is not None and "00000000000000000003.checkpoint.parquet" in report.skipped
    )


async def test_s3_killed_upload_and_uncommitted_output(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """On S3, rlcd's abandoned multipart upload and its complete but uncommitted output are
    removed past the grace period; another writer's upload and files, the committed files and
    a young output stay."""
    partitioned(tmp_path / "t")
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(tmp_path / "t", "w/t")
    boto = boto_client(moto_endpoint)
    foreign = boto.create_multipart_upload(Bucket=s3_bucket, Key=f"w/t/part-{uuid.uuid4()}.parquet")
    ours_key = f"part=a/{data_file_name('zstd', os.urandom(16))}"
    uncommitted = f"part=b/{data_file_name('zstd', os.urandom(16))}"
    async with open_store(uri, s3=mirror.config) as store:
        writer = store.open_writer(ours_key)
        await writer.write(b"x" * (mirror.config.part_size + 1))  # then "killed": never done
        await store.put(uncommitted, b"complete, never committed")
        young = await clean_table(store, grace_s=HOUR, now_ms=_now_ms())
        assert young.deleted == ()  # moto dates every upload 2010: only the file is young
        later = await clean_table(store, grace_s=HOUR, now_ms=_now_ms() + int(2 * HOUR * 1000))
    assert [m.key for m in later.deleted] == [uncommitted]
    assert {u.key for u in young.aborted} | {u.key for u in later.aborted} == {ours_key}
    uploads = boto.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert [u["UploadId"] for u in uploads] == [foreign["UploadId"]]
    local = mirror.download("w/t", tmp_path / "back")
    assert _files(local) == _files(tmp_path / "t")
    assert delta_rs_rows(local) == delta_rs_rows(tmp_path / "t")


class _Rendezvous(LocalStore):
    """A local store whose cleanup listings (uploads, files) and first log request each wait
    until all of them have started: sent one after another, they would wait for ever."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.arrived: set[str] = set()
        self._all = anyio.Event()

    async def _meet(self, name: str) -> None:
        if self._all.is_set() or name in self.arrived:
            return
        self.arrived.add(name)
        if self.arrived == {"uploads", "files", "log"}:
            self._all.set()
        with anyio.fail_after(5):
            await self._all.wait()

    def list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        return self._after("uploads", super().list_uploads(prefix))

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        name = "files" if prefix == "" else "log" if prefix.startswith("_delta_log/") else ""
        return self._after(name, super().list(prefix, start_after=start_after))

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        if key.startswith("_delta_log/"):
            await self._meet("log")
        return await super().get(key, start=start, end=end)

    async def _after(self, name: str, inner: AsyncIterator[_T]) -> AsyncIterator[_T]:
        if name:
            await self._meet(name)
        async for item in inner:
            yield item


async def test_the_cleanup_and_the_log_are_read_together(tmp_path: Path) -> None:
    """compact's cleanup lists the uploads and the files while the log is read: the start of a
    run costs one round trip to the store, not three after one another (20 ms each on S3)."""
    partitioned(tmp_path)
    store = _Rendezvous(tmp_path)
    async with store:
        report = await compact_table(store, CompactionPolicy(), orphan_grace_s=HOUR)
    assert store.arrived == {"uploads", "files", "log"}
    assert report.committed_version is not None and report.cleanup is not None
