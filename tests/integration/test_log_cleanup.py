"""Expired log cleanup on local tables, judged by delta-rs and the Delta kernel: after it, they
read the latest version, and time travel to a version inside the retention window still works.
File ages are set with ``os.utime``: the rule reads modification times."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from rlcd.delta._log_cleanup import clean_expired_log
from rlcd.delta.actions import CommitInfo
from rlcd.delta.checkpoint_writer import CheckpointWritten, checkpoint_and_clean, write_checkpoint
from rlcd.delta.load import load_snapshot
from rlcd.delta.log_path import LogPath
from rlcd.delta.write import write_commit
from rlcd.storage import LocalStore
from tests.conftest import fixture_table
from tests.integration.tables import Rows, append, batch, delta_rs_rows, kernel_rows, rows_of

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

DAY_S = 86_400


def _age(log: Path, versions: range, days: int) -> None:
    """Date every versioned file of ``versions`` ``days`` back."""
    then = time.time() - days * DAY_S
    for file in log.iterdir():
        parsed = LogPath.parse(file.name)
        if parsed is not None and parsed.version in versions:
            os.utime(file, (then, then))


def _at(path: Path, version: int) -> Rows:
    return rows_of(pa.table(deltalake.DeltaTable(str(path), version=version).scan().read_all()))


async def test_cleanup_keeps_every_version_inside_the_window(tmp_path: Path) -> None:
    for i in range(16):  # versions 0..15; delta-rs checkpoints every 100 commits
        append(tmp_path, batch(i * 10, 10))
    log = tmp_path / "_delta_log"
    async with LocalStore(tmp_path) as store:
        for v in (5, 10):
            assert isinstance(
                await write_checkpoint(store, await load_snapshot(store, version=v)),
                CheckpointWritten,
            )
    for file in list(log.glob("0*")):  # Hadoop's checksums, as Spark leaves on local paths
        (log / f".{file.name}.crc").write_bytes(b"crc")
    _age(log, range(12), days=40)  # commits 0..11 and checkpoints 5, 10 past 30 days
    at_12, at_10 = _at(tmp_path, 12), _at(tmp_path, 10)
    latest = delta_rs_rows(tmp_path)
    async with LocalStore(tmp_path) as store:
        run = await checkpoint_and_clean(store, await load_snapshot(store))
    assert isinstance(run.checkpoint, CheckpointWritten) and run.checkpoint.version == 15
    assert run.cleaned is not None and run.cleaned.kept == 10
    left = sorted(p.name for p in log.iterdir())
    kept = [*(f"{v:020d}.json" for v in range(10, 16)), f"{10:020d}.checkpoint.parquet"]
    assert left == sorted(
        [
            *kept,
            *(f".{name}.crc" for name in kept),  # those of the deleted files went with them
            f"{15:020d}.checkpoint.parquet",
            "_last_checkpoint",
        ]
    )
    assert run.cleaned.files == 11  # commits 0..9 and checkpoint 5
    assert delta_rs_rows(tmp_path) == latest
    assert kernel_rows(tmp_path) == latest
    assert _at(tmp_path, 12) == at_12
    assert _at(tmp_path, 10) == at_10
    async with LocalStore(tmp_path) as store:
        assert (await load_snapshot(store, version=11)).version == 11


async def test_disabled_or_young_deletes_nothing(tmp_path: Path) -> None:
    for i in range(6):
        append(tmp_path, batch(i * 10, 10))
    async with LocalStore(tmp_path) as store:
        await write_checkpoint(store, await load_snapshot(store, version=3))
        before = sorted(p.name for p in (tmp_path / "_delta_log").iterdir())
        run = await checkpoint_and_clean(store, await load_snapshot(store))  # all young
        assert run.cleaned is None
        snap = await load_snapshot(store)
    _age(tmp_path / "_delta_log", range(6), days=40)
    config = {**snap.metadata.configuration, "delta.enableExpiredLogCleanup": "false"}
    disabled = replace(snap, metadata=replace(snap.metadata, configuration=config))
    async with LocalStore(tmp_path) as store:
        assert await clean_expired_log(store, disabled, now_ms=int(time.time() * 1000)) is None
    after = sorted(p.name for p in (tmp_path / "_delta_log").iterdir())
    assert after == sorted([*before, f"{5:020d}.checkpoint.parquet"])


async def test_v2_sidecars_stay_while_named_then_go(tmp_path: Path) -> None:
    """The fixture's V2 checkpoint at 2 keeps its sidecar while it is the kept checkpoint;
    once a newer (inline) checkpoint is kept, the sidecar goes with it."""
    shutil.copytree(fixture_table("v2-checkpoint-parquet"), tmp_path, dirs_exist_ok=True)
    log = tmp_path / "_delta_log"
    async with LocalStore(tmp_path) as store:
        for v in (3, 4, 5):
            info = CommitInfo(timestamp=1, operation="WRITE", txn_id=str(uuid.uuid4()))
            await write_commit(store, v, [info])
    rows = kernel_rows(tmp_path)
    sidecars = len(list((log / "_sidecars").glob("[!.]*")))
    old = time.time() - 40 * DAY_S
    for file in [*log.iterdir(), *(log / "_sidecars").iterdir()]:
        parsed = LogPath.parse(file.name)
        if file.name.startswith("_") or (parsed is not None and parsed.version > 3):
            continue
        os.utime(file, (old, old))
    async with LocalStore(tmp_path) as store:
        run = await checkpoint_and_clean(store, await load_snapshot(store))
        assert run.cleaned is not None and run.cleaned.kept == 2 and run.cleaned.sidecars == 0
        assert len(list((log / "_sidecars").glob("[!.]*"))) == sidecars
        assert kernel_rows(tmp_path) == rows
        later = int((time.time() + 40 * DAY_S) * 1000)
        cleaned = await clean_expired_log(store, await load_snapshot(store), now_ms=later)
    assert cleaned is not None and cleaned.kept == 5 and cleaned.sidecars == sidecars
    assert list((log / "_sidecars").iterdir()) == []
    assert not list(log.glob(f"{2:020d}.*"))
    assert kernel_rows(tmp_path) == rows
