"""rlcd's checkpoints, judged by delta-rs, the Delta kernel and rlcd's own load.

Each test writes a checkpoint of a table (a fixture copy, or one delta-rs wrote and rlcd
compacted), then deletes every commit and older checkpoint the checkpoint replaces: the
readers must then see, from the checkpoint alone, the files and rows they saw before.
"""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from structlog.testing import capture_logs

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta import checkpoint_writer
from rlcd.delta._last_checkpoint import json_checksum
from rlcd.delta.actions import CommitInfo, Metadata, Protocol
from rlcd.delta.checkpoint_writer import (
    PUT_LIMIT,
    CheckpointExists,
    CheckpointWritten,
    write_checkpoint,
)
from rlcd.delta.load import load_snapshot
from rlcd.delta.log_path import SIDECAR_DIR, LogPath
from rlcd.delta.replay import Snapshot
from rlcd.delta.write import write_commit
from rlcd.operations._dv_writer import delete_rows
from rlcd.storage import LocalStore, open_store
from tests.conftest import fixture_table
from tests.integration.tables import S3Mirror, append, batch, delta_rs_rows, kernel_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FIXTURES = [
    "basic-dv-no-checkpoint",
    "basic-dv-with-checkpoint",
    "dv-with-columnmapping",
    "krs-table-with-dv-small",
    "data-reader-partition-values",
    "data-skipping-basic-stats-all-types",
    "table-with-columnmapping-mode-id",
    "table-with-columnmapping-mode-name",
    "v2-checkpoint-json",
    "v2-checkpoint-parquet",
]
STRUCT_STATS = {"delta.checkpoint.writeStatsAsStruct": "true"}
STRUCT_ONLY = {**STRUCT_STATS, "delta.checkpoint.writeStatsAsJson": "false"}


async def _load(path: Path) -> Snapshot:
    async with LocalStore(path) as store:
        return await load_snapshot(store)


def _essence(snap: Snapshot, *, stats: bool = True) -> dict[str, Any]:
    """What a checkpoint must keep: live files with everything readers use (the stats text
    only when the checkpoint keeps it), and the table's non-file state."""
    return {
        "version": snap.version,
        "files": {
            (a.path, a.dv_unique_id): (
                a.size,
                dict(a.partition_values),
                a.num_records,
                json.loads(a.stats) if a.stats and stats else None,
                a.base_row_id,
                a.default_row_commit_version,
            )
            for a in snap.files.values()
        },
        "protocol": snap.protocol,
        "metadata": (snap.metadata.id, snap.metadata.schema_string, snap.metadata.configuration),
        "txns": {k: (t.version, t.last_updated) for k, t in snap.txns.items()},
        "domains": {k: d.configuration for k, d in snap.domains.items()},
    }


def _delta_rs_files(path: Path) -> dict[str, tuple[Any, ...]]:
    actions = pa.table(deltalake.DeltaTable(str(path)).get_add_actions(flatten=True))
    rows = actions.select(["path", "size_bytes", "num_records"]).to_pylist()
    return {r["path"]: (r["size_bytes"], r["num_records"]) for r in rows}


def _drop_history(path: Path, version: int) -> None:
    """Delete every commit up to ``version`` and every other checkpoint: only ``version``'s
    checkpoint can give the table's state at and after it."""
    for file in (path / "_delta_log").iterdir():
        parsed = LogPath.parse(file.name)
        if parsed is None:
            continue
        old_commit = parsed.version <= version and not parsed.is_checkpoint
        if old_commit or (parsed.is_checkpoint and parsed.version != version):
            file.unlink()


async def _set_properties(
    path: Path, properties: dict[str, str], *, features: tuple[str, ...] = ()
) -> None:
    """Commit a metaData change adding ``properties`` (and a protocol with the reader-writer
    ``features`` added), as another engine would."""
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        protocol = snap.protocol
        upgrade = [
            Protocol(
                min_reader_version=3,
                min_writer_version=7,
                reader_features=[*(protocol.reader_features or ()), *features],
                writer_features=[*(protocol.writer_features or ()), *features],
            )
        ]
        metadata = Metadata(
            id=snap.metadata.id,
            name=snap.metadata.name,
            description=snap.metadata.description,
            format=snap.metadata.format,
            schema_string=snap.metadata.schema_string,
            partition_columns=snap.metadata.partition_columns,
            configuration={**snap.metadata.configuration, **properties},
            created_time=snap.metadata.created_time,
        )
        info = CommitInfo(timestamp=1, operation="SET TBLPROPERTIES", txn_id=str(uuid.uuid4()))
        await write_commit(
            store, snap.version + 1, [info, *(upgrade if features else ()), metadata]
        )


async def _checkpoint_and_judge(path: Path, **kw: Any) -> CheckpointWritten:
    """Checkpoint the latest version (``kw``: :func:`write_checkpoint`'s), drop the history,
    and compare every reader's view (the stats text is rebuilt from ``stats_parsed`` when the
    table keeps no JSON stats)."""
    table = await _load(path)
    stats = table.metadata.configuration.get("delta.checkpoint.writeStatsAsJson") != "false"
    before = _essence(table, stats=stats)
    files = _delta_rs_files(path)
    rows = delta_rs_rows(path)
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        written = await write_checkpoint(store, snap, **kw)
    assert isinstance(written, CheckpointWritten)
    _drop_history(path, written.version)
    hint = json.loads((path / "_delta_log" / "_last_checkpoint").read_bytes())
    assert hint["version"] == written.version
    assert hint["size"] == written.actions
    assert hint["sizeInBytes"] == written.size_in_bytes
    assert hint["numOfAddFiles"] == len(before["files"])
    assert hint["checksum"] == json_checksum(hint)
    assert _essence(await _load(path), stats=stats) == before
    assert _delta_rs_files(path) == files
    assert delta_rs_rows(path) == rows
    assert kernel_rows(path) == rows
    return written


@pytest.mark.parametrize("name", FIXTURES)
async def test_fixture_read_from_rlcd_checkpoint(copy_fixture: Any, name: str) -> None:
    """Spark's and the kernel's tables (DVs, partitions, column mapping, V2) read the same
    from rlcd's checkpoint with their earlier commits gone."""
    path = copy_fixture(name)
    await _set_properties(path, {})  # a version after the fixture's own checkpoints
    written = await _checkpoint_and_judge(path)
    v2 = name.startswith("v2-")
    assert (".checkpoint.parquet" not in written.key) == v2
    checkpoint = pq.read_table(path / written.key)
    assert ("checkpointMetadata" in checkpoint.column_names) == v2


@pytest.mark.parametrize(
    ("name", "properties", "features"),
    [
        ("v2-checkpoint-parquet", {}, ()),
        ("v2-checkpoint-json", STRUCT_STATS, ()),
        ("dv-with-columnmapping", STRUCT_STATS, ("v2Checkpoint",)),
        ("basic-dv-with-checkpoint", {}, ("v2Checkpoint",)),
        ("data-reader-partition-values", STRUCT_ONLY, ("v2Checkpoint",)),
    ],
)
async def test_v2_checkpoint_in_sidecars(
    copy_fixture: Any, name: str, properties: dict[str, str], features: tuple[str, ...]
) -> None:
    """Past the threshold a V2 checkpoint puts its live files and tombstones in sidecars of at
    most ``sidecar_actions`` each (a sidecar may hold both); the top-level file holds the other
    actions and one ``sidecar`` row each, and every reader reads the table from it alone."""
    path = copy_fixture(name)
    await _set_properties(path, properties, features=features)
    snap = await _load(path)
    written = await _checkpoint_and_judge(path, now_ms=0, sidecar_threshold=0, sidecar_actions=3)
    files = snap.num_files + snap.tombstone_rows.num_rows  # none expired at now_ms=0
    assert len(written.sidecars) == -(-files // 3)
    top = pq.read_table(path / written.key)
    assert not top.column("add").drop_null() and not top.column("remove").drop_null()
    rows = [s for s in top.column("sidecar").to_pylist() if s]
    assert [f"{SIDECAR_DIR}/{s['path']}" for s in rows] == list(written.sidecars)
    counts = []
    for row in rows:
        sidecar = path / SIDECAR_DIR / row["path"]
        assert row["sizeInBytes"] == sidecar.stat().st_size
        assert row["modificationTime"] == int(sidecar.stat().st_mtime * 1000)
        table = pq.read_table(sidecar)
        assert table.column_names == ["add", "remove"]
        counts.append(table.num_rows)
    assert max(counts) <= 3 and sum(counts) == files
    assert written.actions == top.num_rows + files
    assert written.size_in_bytes == (path / written.key).stat().st_size + sum(
        r["sizeInBytes"] for r in rows
    )
    kept = (await _load(path)).tombstone_rows["path"].to_pylist()
    assert sorted(kept) == sorted(snap.tombstone_rows["path"].to_pylist())


async def test_v2_checkpoint_inline_up_to_the_threshold(copy_fixture: Any) -> None:
    """A V2 checkpoint of no more file actions than the threshold holds them inline."""
    path = copy_fixture("v2-checkpoint-parquet")
    await _set_properties(path, {})
    files = (await _load(path)).num_files
    written = await _checkpoint_and_judge(path, sidecar_threshold=files)
    assert written.sidecars == ()
    top = pq.read_table(path / written.key)
    assert "sidecar" not in top.column_names
    assert len(top.column("add").drop_null()) == files


@pytest.mark.parametrize("properties", [STRUCT_STATS, STRUCT_ONLY], ids=["both", "struct-only"])
@pytest.mark.parametrize(
    "name",
    [
        "data-skipping-basic-stats-all-types",
        "data-reader-partition-values",
        "dv-with-columnmapping",
        "parquet-all-types",
    ],
)
async def test_struct_stats(copy_fixture: Any, name: str, properties: dict[str, str]) -> None:
    """With ``writeStatsAsStruct`` the adds carry typed ``stats_parsed`` and
    ``partitionValues_parsed``; with ``writeStatsAsJson=false`` only those, and the readers
    still find every file's row count."""
    path = copy_fixture(name)
    await _set_properties(path, properties)
    written = await _checkpoint_and_judge(path)
    add = pq.read_table(path / written.key).column("add").type
    names = {add.field(i).name for i in range(add.num_fields)}
    assert "stats_parsed" in names
    assert ("stats" in names) == (properties is STRUCT_STATS)
    partitioned = bool((await _load(path)).metadata.partition_columns)
    assert ("partitionValues_parsed" in names) == partitioned


async def test_struct_stats_values(copy_fixture: Any) -> None:
    """Each typed bound equals the JSON one: Spark's stats of every primitive type."""
    path = copy_fixture("data-skipping-basic-stats-all-types")
    await _set_properties(path, STRUCT_STATS)
    async with LocalStore(path) as store:
        written = await write_checkpoint(store, await load_snapshot(store))
    assert isinstance(written, CheckpointWritten)
    adds = [a for a in pq.read_table(path / written.key).column("add").to_pylist() if a]
    assert adds
    for add in adds:
        text, parsed = json.loads(add["stats"]), add["stats_parsed"]
        assert parsed["numRecords"] == text["numRecords"]
        assert parsed["nullCount"] == text["nullCount"]
        for bound in ("minValues", "maxValues"):
            typed = {k: v for k, v in parsed[bound].items() if v is not None}
            assert set(typed) == set(text[bound]), bound
            for column, value in typed.items():
                assert _spelled(value) == _spelled(text[bound][column]), (bound, column)


def _spelled(value: Any) -> Any:
    """A bound in one comparable form: numbers as floats, times as UTC datetimes, dates as
    ISO text."""
    if isinstance(value, int | float | Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and len(value) > 10 and value[10] == "T":
        return datetime.fromisoformat(value)
    return value


async def test_compacted_table_checkpoints_itself(tmp_path: Path) -> None:
    """A compaction landing on a multiple of ``delta.checkpointInterval`` writes that
    version's checkpoint; the table then reads the same from it alone, DVs included."""
    config = {"delta.enableDeletionVectors": "true", "delta.checkpointInterval": "5"}
    for i in range(3):
        append(tmp_path, batch(i * 30, 30), configuration=config if i == 0 else None)
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        first, second = list(snap.files)[:2]
        await delete_rows(store, snap, {first: [0, 5, 6], second: list(range(0, 30, 2))})
    append(tmp_path, batch(90, 30))
    log = tmp_path / "_delta_log"
    rows = delta_rs_rows(tmp_path)
    async with open_store(str(tmp_path)) as store:
        report = await compact_table(store, CompactionPolicy(target_file_size=64 * 1024 * 1024))
    assert report.committed_version == 5
    assert (log / "00000000000000000005.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_bytes())["version"] == 5
    assert delta_rs_rows(tmp_path) == rows
    _drop_history(tmp_path, 5)
    assert delta_rs_rows(tmp_path) == rows
    assert kernel_rows(tmp_path) == rows
    assert (await _load(tmp_path)).version == 5


async def test_written_from_columns_a_row_group_per_batch(
    copy_fixture: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live files and tombstones are written from the snapshot's columns, a row group per
    ``BATCH_ACTIONS`` of them: no object per file is made (the snapshot's object cache stays
    empty)."""
    monkeypatch.setattr(checkpoint_writer, "BATCH_ACTIONS", 2)
    path = copy_fixture("basic-dv-with-checkpoint")
    await _set_properties(path, STRUCT_STATS)
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        written = await write_checkpoint(store, snap, now_ms=0)
    assert isinstance(written, CheckpointWritten)
    assert "files" not in vars(snap)
    metadata = pq.ParquetFile(path / written.key).metadata
    rows = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    tombstones = snap.tombstone_rows.num_rows  # none expired at now_ms=0
    assert rows[1:] == _pairs(snap.num_files) + _pairs(tombstones)
    assert sum(rows) == written.actions


def _pairs(n: int) -> list[int]:
    return [2] * (n // 2) + [1] * (n % 2)


async def test_never_over_an_existing_checkpoint(copy_fixture: Any) -> None:
    """A version that has a checkpoint keeps it, and ``_last_checkpoint`` never goes back."""
    path = copy_fixture("checkpoint")
    log = path / "_delta_log"
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        first = await write_checkpoint(store, snap)
        assert isinstance(first, CheckpointWritten)
        content = (path / first.key).read_bytes()
        again = await write_checkpoint(store, snap)
        assert again == CheckpointExists(snap.version, first.key)
        assert (path / first.key).read_bytes() == content
        hint = (log / "_last_checkpoint").read_bytes()
        listed = [LogPath.parse(p.name) for p in log.iterdir()]
        older_version = min(p.version for p in listed if p is not None and p.is_checkpoint)
        (log / f"{older_version:020d}.checkpoint.parquet").unlink(missing_ok=True)
        earlier = await load_snapshot(store, version=older_version)
        assert isinstance(await write_checkpoint(store, earlier), CheckpointWritten)
        assert (log / "_last_checkpoint").read_bytes() == hint


async def test_large_checkpoint_streams_through_the_writer(copy_fixture: Any) -> None:
    """Above the put-if-absent limit the file goes through the store's streaming writer."""
    path = copy_fixture("dv-with-columnmapping")
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        written = await write_checkpoint(store, snap, put_limit=0)
    assert isinstance(written, CheckpointWritten)
    assert (path / written.key).stat().st_size == written.size_in_bytes
    rows = delta_rs_rows(path)
    _drop_history(path, written.version)
    assert delta_rs_rows(path) == rows


async def test_expired_tombstones_are_left_out(copy_fixture: Any) -> None:
    """Tombstones older than ``delta.deletedFileRetentionDuration`` are not carried."""
    path = copy_fixture("basic-dv-with-checkpoint")
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        assert snap.tombstone_rows.num_rows
        newest = pc.max(snap.tombstone_rows["deletion_timestamp"]).as_py()
        written = await write_checkpoint(store, snap, now_ms=newest + 8 * 86_400_000)
    assert isinstance(written, CheckpointWritten)
    removes = pq.read_table(path / written.key).column("remove").drop_null()
    assert len(removes) == 0
    assert written.actions == 2 + len(snap.txns) + len(snap.domains) + snap.num_files


async def test_a_failed_checkpoint_never_fails_the_commit(tmp_path: Path) -> None:
    """When the post-commit checkpoint cannot be written, the commit stands, with a warning."""
    append(tmp_path, batch(0, 30), configuration={"delta.enableDeletionVectors": "true"})
    await _set_properties(tmp_path, {"delta.checkpointInterval": "ten"})
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        first = next(iter(snap.files))
        with capture_logs() as logs:
            await delete_rows(store, snap, {first: [0, 1]})
        assert (await load_snapshot(store)).version == snap.version + 1
    failed = [e for e in logs if e["event"] == "checkpoint_failed"]
    assert len(failed) == 1 and "checkpointInterval" in failed[0]["error"]
    assert not list((tmp_path / "_delta_log").glob("*.checkpoint*"))


@pytest.mark.parametrize("name", ["dv-with-columnmapping", "v2-checkpoint-parquet"])
@pytest.mark.parametrize("put_limit", [PUT_LIMIT, 0], ids=["put-if-absent", "streamed"])
async def test_checkpoint_on_s3(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, put_limit: int, name: str
) -> None:
    """On S3 (moto) the checkpoint, its sidecars (V2) and the hint land as on disk, by either
    upload."""
    local = tmp_path / "t"
    shutil.copytree(fixture_table(name), local)
    await _set_properties(local, {})  # a version after the fixture's own checkpoints
    rows = delta_rs_rows(local)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(local, "tables/t")
    async with open_store(uri, s3=mirror.config) as store:
        written = await write_checkpoint(
            store, await load_snapshot(store), put_limit=put_limit, sidecar_threshold=0
        )
        assert isinstance(written, CheckpointWritten)
        assert bool(written.sidecars) == name.startswith("v2-")
        again = await write_checkpoint(store, await load_snapshot(store), put_limit=put_limit)
        assert isinstance(again, CheckpointExists)
    assert mirror.multipart_uploads() == 0
    back = mirror.download("tables/t", tmp_path / "back")
    _drop_history(back, written.version)
    assert delta_rs_rows(back) == rows
    assert kernel_rows(back) == rows
