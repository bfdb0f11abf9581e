"""``vacuum_table`` on local and moto-S3 tables that rlcd compacted, judged by delta-rs.

A table of small files gets DV deletes, an rlcd compaction, a DV delete on the output and a
stray old file; then the dry runs list what delta-rs's own ``vacuum(dry_run=True)`` lists, and
a real run leaves storage holding only what the live version reads, with every row intact.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from structlog.testing import capture_logs

from rlcd.compaction.compact import compact_table
from rlcd.delta.actions import RemoveFile
from rlcd.delta.checkpoint_writer import CheckpointWritten, write_checkpoint
from rlcd.delta.load import load_snapshot
from rlcd.delta.log_path import commit_name
from rlcd.delta.partitions import object_key
from rlcd.delta.replay import Snapshot
from rlcd.delta.write import write_commit
from rlcd.errors import ConfigError, CorruptLogError, StorageError, UnsupportedFeatureError
from rlcd.operations import vacuum as vacuum_module
from rlcd.operations.vacuum import VacuumMode, vacuum_table
from rlcd.storage import LocalStore, open_store
from rlcd.storage.base import ObjectStore
from tests.integration.races import POLICY, ROWS, RaceTable, dv_delete, judge

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FILES = 6


async def _compacted(make: Callable[..., RaceTable]) -> tuple[RaceTable, list[int]]:
    """The table after DV deletes, a compaction, a DV delete on an output, a stray file and an
    rlcd-private one; and its ids as delta-rs reads them then."""
    table = make(files=FILES, partitioned=True)
    await dv_delete(table, {0: [1, 2]})
    async with table.store() as store:
        report = await compact_table(store, POLICY)
        assert report.committed_version is not None
        await store.put("stray/part-00000-orphan.parquet", b"not referenced")
        await store.put("_rlcd/keep.json", b"{}")
    await dv_delete(table, {0: [0]})
    ids = pa.table(deltalake.DeltaTable(str(table.view())).scan().read_all()).column("id")
    assert len(ids) == FILES * ROWS - 3
    return table, ids.to_pylist()


def _live_keys(snapshot: Snapshot) -> set[str]:
    """The keys the snapshot reads: data files and DV files."""
    keys: set[str] = set()
    for add in snapshot.files.values():
        keys.add(str(object_key(snapshot.table, add.path)))
        dv = add.deletion_vector
        if dv is not None and dv.storage_type == "u":
            keys.add(str(dv.file_path()))
    return keys


def _delta_rs(table: RaceTable, mode: VacuumMode) -> set[str]:
    files = table.delta().vacuum(
        dry_run=True, retention_hours=0, enforce_retention_duration=False, full=mode == "full"
    )
    return set(files)


async def test_dry_runs_list_what_delta_rs_lists(make: Callable[..., RaceTable]) -> None:
    """Full mode lists exactly delta-rs's full dry run (sources, old DV files, the stray file;
    not the live DV file, which delta-rs would list too: it keeps only data paths); lite mode
    lists delta-rs's lite data files plus the DV files of the expired tombstones."""
    table, _ = await _compacted(make)
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        full = await vacuum_table(
            store, mode="full", retain_ms=0, allow_short_retention=True, dry_run=True
        )
        lite = await vacuum_table(
            store, mode="lite", retain_ms=0, allow_short_retention=True, dry_run=True
        )
        assert (await load_snapshot(store)).version == snapshot.version, "a dry run commits nothing"
    live = _live_keys(snapshot)
    full_keys = {f.key for f in full.files}
    assert full_keys == _delta_rs(table, "full") - live
    assert "stray/part-00000-orphan.parquet" in full_keys
    assert not full_keys & live and not any(k.startswith("_") for k in full_keys)
    lite_keys = {f.key for f in lite.files}
    dv_files = {k for k in lite_keys if k.rsplit("/", 1)[-1].startswith("deletion_vector_")}
    assert dv_files, "the DV file of the first delete went with its tombstone"
    assert lite_keys - dv_files == _delta_rs(table, "lite")
    assert lite_keys == full_keys - {"stray/part-00000-orphan.parquet"}
    assert full.bytes == sum(f.size for f in full.files) > 0


async def test_the_rules_read_columns_and_make_no_object_per_file(
    make: Callable[..., RaceTable], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reclaimable_bytes`` and both dry runs judge the snapshot's columns: its
    ``AddFile``/``RemoveFile`` cache stays empty (issue 40). What the daemon reports as
    reclaimable is what a lite vacuum frees of data files, by the tombstones' sizes."""
    table, _ = await _compacted(make)
    loaded: list[Snapshot] = []

    async def load(store: ObjectStore) -> Snapshot:
        loaded.append(await load_snapshot(store))
        return loaded[-1]

    monkeypatch.setattr(vacuum_module, "load_snapshot", load)
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        later = int(time.time() * 1000) + 8 * 24 * 3_600_000  # past the week's retention
        reclaimable = vacuum_module.reclaimable_bytes(snapshot, now_ms=later)
        lite, full = [
            await vacuum_table(store, mode=mode, dry_run=True, now_ms=later)
            for mode in ("lite", "full")
        ]
    data = [f for f in lite.files if not f.key.rsplit("/", 1)[-1].startswith("deletion_vector_")]
    assert reclaimable == sum(f.size for f in data) > 0
    assert full.files and len(loaded) == 2
    for made in (snapshot, *loaded):
        assert "files" not in vars(made)


@pytest.mark.parametrize("mode", ["lite", "full"])
async def test_vacuum_keeps_every_row_and_only_live_files(
    make: Callable[..., RaceTable], mode: VacuumMode
) -> None:
    """After a vacuum at retention 0 the table reads the same through delta-rs, the kernel and
    ``rlcd verify``; storage holds the live files, their DVs, the log and hidden files (and in
    lite mode the stray file); history shows VACUUM START and END; a second run has nothing
    to do and commits nothing."""
    table, expected = await _compacted(make)
    async with table.store() as store:
        report = await vacuum_table(store, mode=mode, retain_ms=0, allow_short_retention=True)
        snapshot = await load_snapshot(store)
        left = {m.key async for m in store.list("") if not m.key.startswith("_delta_log/")}
        start, end = [
            json.loads(await store.get(commit_name(v or -1)))["commitInfo"]
            for v in (report.start_version, report.end_version)
        ]
        again = await vacuum_table(store, mode=mode, retain_ms=0, allow_short_retention=True)
    await judge(table, expected)
    stray = {"stray/part-00000-orphan.parquet"} if mode == "lite" else set()
    assert left == _live_keys(snapshot) | {"_rlcd/keep.json"} | stray
    assert report.deleted == len(report.files) > 0 and report.warnings
    assert (report.start_version, report.end_version) == (snapshot.version - 1, snapshot.version)
    assert start["operation"] == "VACUUM START"
    assert start["operationParameters"] == {
        "retentionCheckEnabled": "false",
        "specifiedRetentionMillis": "0",
        "defaultRetentionMillis": str(7 * 24 * 3600 * 1000),
        "vacuumType": mode.upper(),
    }
    assert start["operationMetrics"] == {
        "numFilesToDelete": str(len(report.files)),
        "sizeOfDataToDelete": str(report.bytes),
    }
    assert end["operation"] == "VACUUM END"
    assert end["operationParameters"] == {"status": "COMPLETED"}
    assert end["operationMetrics"]["numDeletedFiles"] == str(report.deleted)
    history = [h["operation"] for h in deltalake.DeltaTable(str(table.view())).history(2)]
    assert history == ["VACUUM END", "VACUUM START"]
    assert again.files == () and again.start_version is None


async def test_the_checkpoints_after_its_commits_are_reported(
    make: Callable[..., RaceTable],
) -> None:
    """With ``delta.checkpointInterval`` 1, VACUUM START and END are each followed by their
    checkpoint, which the report names (the daemon counts them); the table reads the same."""
    table, expected = await _compacted(make)
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        interval = {**snapshot.metadata.configuration, "delta.checkpointInterval": "1"}
        metadata = dataclasses.replace(snapshot.metadata, configuration=interval)
        await write_commit(store, snapshot.version + 1, [metadata])
        report = await vacuum_table(store, mode="lite", retain_ms=0, allow_short_retention=True)
        keys = {m.key async for m in store.list("_delta_log/")}
    assert report.start_version is not None and report.end_version is not None
    assert report.checkpoints == (report.start_version, report.end_version)
    assert {f"_delta_log/{v:020d}.checkpoint.parquet" for v in report.checkpoints} <= keys
    await judge(table, expected)


async def test_the_tables_retention_protects_recent_tombstones(
    make: Callable[..., RaceTable],
) -> None:
    """With the table's retention (1 week by default) a fresh compaction's sources stay; a
    shorter --retain is refused unless forced, before anything is read or written."""
    table, _ = await _compacted(make)
    async with table.store() as store:
        before = await load_snapshot(store)
        for mode in ("lite", "full"):
            report = await vacuum_table(store, mode=mode)  # type: ignore[arg-type]
            assert report.files == () and report.start_version is None
            assert report.retention_ms == report.table_retention_ms == 7 * 24 * 3600 * 1000
        with pytest.raises(ConfigError, match="--force-short-retention"):
            await vacuum_table(store, retain_ms=3_600_000)
        assert (await load_snapshot(store)).version == before.version


async def test_a_table_rlcd_cannot_write_is_refused(make: Callable[..., RaceTable]) -> None:
    """A writer feature rlcd does not know stops the vacuum before anything is deleted."""
    table, _ = await _compacted(make)
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        protocol = {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors", "futureMagic"],
            }
        }
        key = f"_delta_log/{snapshot.version + 1:020d}.json"
        await store.put(key, json.dumps(protocol).encode() + b"\n")
        keys = {m.key async for m in store.list("")}
        with pytest.raises(UnsupportedFeatureError, match="futureMagic"):
            await vacuum_table(store, mode="full", retain_ms=0, allow_short_retention=True)
        assert {m.key async for m in store.list("")} == keys


async def test_vacuum_protocol_check_is_honoured(make: Callable[..., RaceTable]) -> None:
    """``vacuumProtocolCheck`` asks a vacuum to check it can write the table: with a writer
    feature rlcd does not know beside it the vacuum is refused before anything is deleted; with
    that feature alone (rlcd writes the table) it runs and keeps every live file (delta-rs
    cannot read the feature: no judge)."""
    table, _ = await _compacted(make)
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        protocol = snapshot.protocol
        checked = dataclasses.replace(
            protocol,
            reader_features=[*(protocol.reader_features or ()), "vacuumProtocolCheck"],
            writer_features=[*(protocol.writer_features or ()), "vacuumProtocolCheck"],
        )
        await write_commit(store, snapshot.version + 1, [checked])
        keys = {m.key async for m in store.list("")}
        unknown = dataclasses.replace(
            checked, writer_features=[*(checked.writer_features or ()), "futureMagic"]
        )
        await write_commit(store, snapshot.version + 2, [unknown])
        with pytest.raises(UnsupportedFeatureError, match="futureMagic"):
            await vacuum_table(store, mode="lite", retain_ms=0, allow_short_retention=True)
        assert {m.key async for m in store.list("")} == keys | {commit_name(snapshot.version + 2)}
        await store.delete(commit_name(snapshot.version + 2))  # the other engine's, undone
        report = await vacuum_table(store, mode="lite", retain_ms=0, allow_short_retention=True)
        live = _live_keys(await load_snapshot(store))
        left = {m.key async for m in store.list("")}
    assert report.deleted == len(report.files) > 0
    assert live <= left and not live & {f.key for f in report.files}


class _FailingDeletes:
    """The table's store, whose second batch delete is refused (as an S3 AccessDenied would)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.batches = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def delete_many(self, keys: Sequence[str]) -> None:
        self.batches += 1
        if self.batches == 2:
            raise StorageError("AccessDenied (HTTP 403)", operation="delete_many", key=keys[0])
        await self.inner.delete_many(keys)


async def test_a_failed_delete_is_recorded_and_leaves_a_readable_table(
    make: Callable[..., RaceTable], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete refused midway raises the storage error naming the key, after a VACUUM END
    with status FAILED counting what was deleted; every row still reads, and a rerun finishes
    the job."""
    monkeypatch.setattr(vacuum_module, "DELETE_BATCH", 2)
    table, expected = await _compacted(make)
    async with table.store() as inner:
        store = _FailingDeletes(inner)
        with pytest.raises(StorageError, match="AccessDenied") as info:
            await vacuum_table(
                store,  # type: ignore[arg-type]
                mode="full",
                retain_ms=0,
                allow_short_retention=True,
            )
        assert info.value.key
        snapshot = await load_snapshot(inner)
        end = json.loads(await inner.get(commit_name(snapshot.version)))["commitInfo"]
        assert end["operation"] == "VACUUM END"
        assert end["operationParameters"] == {"status": "FAILED"}
        assert end["operationMetrics"]["numDeletedFiles"] == "2"
        await judge(table, expected)
        rerun = await vacuum_table(inner, mode="full", retain_ms=0, allow_short_retention=True)
        assert rerun.deleted == len(rerun.files) > 0
    await judge(table, expected)


@pytest.mark.parametrize("checkpointed", [False, True])
async def test_change_data_files_go_in_both_modes(tmp_path: Path, checkpointed: bool) -> None:
    """A change-data-feed table's ``_change_data`` files that no version reads are listed by
    lite mode (from the commits' ``cdc`` actions) and by full mode, as delta-rs lists them;
    also when a checkpoint (which holds no ``cdc`` action) follows the commit naming them."""
    path = tmp_path / "cdf"
    for i in range(3):
        config = {"delta.enableChangeDataFeed": "true"} if i == 0 else None
        ids = pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())})
        deltalake.write_deltalake(str(path), ids, mode="append", configuration=config)
    deltalake.DeltaTable(str(path)).delete("id < 5")
    if checkpointed:
        ids = pa.table({"id": pa.array([100], pa.int64())})
        deltalake.write_deltalake(str(path), ids, mode="append")
        deltalake.DeltaTable(str(path)).create_checkpoint()
        deltalake.write_deltalake(str(path), ids, mode="append")
    theirs = deltalake.DeltaTable(str(path)).vacuum(
        dry_run=True, retention_hours=0, enforce_retention_duration=False, full=True
    )
    async with LocalStore(path) as store:
        for mode in ("lite", "full"):
            report = await vacuum_table(
                store,
                mode=mode,  # type: ignore[arg-type]
                retain_ms=0,
                allow_short_retention=True,
                dry_run=True,
            )
            keys = {f.key for f in report.files}
            assert keys == set(theirs), mode
            assert any(k.startswith("_change_data/") for k in keys)


# --- bad input (issue 41): nothing deleted that should stay, messages name table and file ---


@pytest.mark.parametrize("mode", ["lite", "full"])
async def test_a_tombstones_file_already_gone_is_no_error(
    make: Callable[..., RaceTable], mode: VacuumMode
) -> None:
    """A tombstoned source deleted behind rlcd's back before the run: the vacuum succeeds,
    neither lists nor counts it, and deletes the rest."""
    table, expected = await _compacted(make)
    async with table.store() as store:
        listed = await vacuum_table(
            store, mode=mode, retain_ms=0, allow_short_retention=True, dry_run=True
        )
        gone = next(f for f in listed.files if f.key.startswith("part="))
        await store.delete(gone.key)
        report = await vacuum_table(store, mode=mode, retain_ms=0, allow_short_retention=True)
        left = {m.key async for m in store.list("")}
    assert {f.key for f in report.files} == {f.key for f in listed.files} - {gone.key}
    assert report.deleted == len(report.files) == len(listed.files) - 1
    assert report.bytes == listed.bytes - gone.size
    assert not {f.key for f in listed.files} & left
    await judge(table, expected)


@pytest.mark.parametrize("mode", ["lite", "full"])
async def test_a_tombstone_outside_the_table_is_never_deleted(
    make: Callable[..., RaceTable], mode: VacuumMode
) -> None:
    """An expired tombstone naming ``../other/x.parquet`` (a sibling of the table): the file
    there stays, the report lists it as outside, and the event names table and path."""
    table, expected = await _compacted(make)
    sibling = table.uri.rsplit("/", 1)[0] + "/other"
    async with open_store(sibling, s3=table.s3) as other:
        await other.put("x.parquet", b"not the table's")
        async with table.store() as store:
            snapshot = await load_snapshot(store)
            remove = RemoveFile(path="../other/x.parquet", deletion_timestamp=0, size=15)
            await write_commit(store, snapshot.version + 1, [remove])
            with capture_logs() as logs:
                report = await vacuum_table(
                    store, mode=mode, retain_ms=0, allow_short_retention=True
                )
        assert await other.get("x.parquet") == b"not the table's"
    assert [o.path for o in report.outside] == ["../other/x.parquet"]
    assert report.deleted == len(report.files) > 0
    assert not any("other" in f.key for f in report.files)
    outside = [e for e in logs if e["event"] == "vacuum_path_outside_table"]
    assert [(e["table"], e["path"]) for e in outside] == [(store.root, "../other/x.parquet")]
    await judge(table, expected)


async def test_a_corrupt_checkpoint_stops_the_vacuum_before_anything_is_deleted(
    make: Callable[..., RaceTable],
) -> None:
    """The table's newest checkpoint cut short: the vacuum raises CorruptLogError naming the
    table and the checkpoint file, and deletes and commits nothing."""
    table, _ = await _compacted(make)
    async with table.store() as store:
        written = await write_checkpoint(store, await load_snapshot(store))
        assert isinstance(written, CheckpointWritten)
        data = await store.get(written.key)
        await store.put(written.key, data[: len(data) // 2])
        keys = {m.key async for m in store.list("")}
        for mode in ("lite", "full"):
            with pytest.raises(CorruptLogError) as info:
                await vacuum_table(
                    store,
                    mode=mode,  # type: ignore[arg-type]
                    retain_ms=0,
                    allow_short_retention=True,
                )
            assert info.value.path == written.key and info.value.table == store.root
            assert written.key in str(info.value) and store.root in str(info.value)
        assert {m.key async for m in store.list("")} == keys
