"""``rlcd status`` in process on local tables: its exit code when a table cannot be read, a
discover prefix that holds nothing, and the last errors it takes from a running daemon's
``/healthz``."""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
import pytest

from rlcd.cli.status import print_status
from rlcd.daemon.config import load_settings
from rlcd.daemon.metrics import (
    Health,
    Metrics,
    QuarantinedFile,
    RunRecord,
    TableHealth,
    VacuumRecord,
    serve_metrics,
)
from rlcd.delta.checkpoint_writer import write_checkpoint
from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def _config(tmp_path: Path, listen: str, *names: str) -> Path:
    """A config naming the tables ``names`` (two small files each) beside it."""
    for name in names:
        for i in range(2):
            append(tmp_path / name, batch(i * 10, 10))
    tables = "".join(f'[[table]]\nuri = "{name}"\n' for name in names)
    path = tmp_path / "rlcd.toml"
    path.write_text(f'[metrics]\nlisten = "{listen}"\n{tables}')
    return path


async def _status(config: Path) -> int:
    return await print_status(argparse.Namespace(config=str(config), instance=None))


LAST_RUN = (
    "committed version 3: 3 files removed -> 1 file added; 2 bins: 1 reconciled by mask, "
    "1 superseded",
    "bin 1a  region=eu: reconciled by mask: 1 source masked (20 positions): 3 of 4 files -> 1 file",
    "bin 2b  region=us: superseded (another compaction did its work): source_compacted: version 2 "
    "removed b",
)


def _blocks(out: str) -> dict[str, list[str]]:
    """Each table's lines of the status output, by its first line (the table's URI)."""
    blocks: dict[str, list[str]] = {}
    for line in out.splitlines():
        if not line.startswith("  "):
            blocks[line] = current = []
        else:
            current.append(line.strip())
    return blocks


async def test_a_table_that_cannot_be_read_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A corrupt log makes status exit 3 (the CLI's "table cannot be read"), after it has
    still shown every table, the readable one too."""
    config = _config(tmp_path, "", "good", "broken")
    (tmp_path / "broken" / "_delta_log" / f"{1:020d}.json").write_text("{not json\n")
    assert await _status(config) == 3
    blocks = _blocks(capsys.readouterr().out)
    good, broken = (str(t.uri) for t in load_settings(config).tables)
    assert blocks[good][0].startswith("version 1, 2 files")
    assert (
        blocks[broken][0].startswith("cannot read: ")
        and "00000000000000000001.json" in (blocks[broken][0])
    )


async def test_every_table_read_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With every table read, status exits 0, even with the daemon not reachable."""
    assert await _status(_config(tmp_path, "", "good")) == 0
    assert "daemon: not reachable" in capsys.readouterr().out


async def test_the_newest_checkpoint_and_its_lag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each table's newest checkpoint and how far its version is past it (none: said so)."""
    config = _config(tmp_path, "", "bare", "checkpointed")
    async with LocalStore(tmp_path / "checkpointed") as store:
        await write_checkpoint(store, await load_snapshot(store))
    append(tmp_path / "checkpointed", batch(20, 10))
    assert await _status(config) == 0
    blocks = {k.rsplit("/", 1)[-1]: v for k, v in _blocks(capsys.readouterr().out).items()}
    assert "newest checkpoint: none (readers replay every commit)" in blocks["bare"]
    assert "newest checkpoint: version 1 (1 version behind)" in blocks["checkpointed"]


async def test_a_discover_prefix_that_holds_nothing_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A [[discover]] prefix with nothing under it gets a line naming it (a typo finds no
    table, silently otherwise); it is no error."""
    config = _config(tmp_path, "", "good")
    config.write_text(config.read_text() + '[[discover]]\nprefix = "tabels"\n')
    assert await _status(config) == 0
    prefix = load_settings(config).discover[0].prefix
    assert f"discover[0] {prefix}: nothing is there: the prefix does not exist" in (
        capsys.readouterr().out
    )


async def test_the_last_error_comes_from_the_running_daemon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each table's line shows the last error, the last run (its bins one a line), the recent
    runs, the quarantined files (since and until when, or a reload), the last vacuum (or
    its error) and the snapshot held (or released) the daemon's /healthz reports for it
    ("none" for a table without them)."""
    async with anyio.create_task_group() as tg:
        health = Health("ok", {})
        _, port = await tg.start(serve_metrics, Metrics(), lambda: health, ("127.0.0.1", 0))
        config = _config(tmp_path, f"127.0.0.1:{port}", "failing", "fine")
        failing, fine = (str(t.uri) for t in load_settings(config).tables)
        health = Health(
            "ok",
            {
                failing: TableHealth(
                    version=2,
                    last_error="access denied",
                    last_error_time=5,
                    last_vacuum=VacuumRecord(90.0, "full", error="access denied (DeleteObjects)"),
                    snapshot_released=True,
                ),
                fine: TableHealth(
                    version=2,
                    last_run=LAST_RUN,
                    history=(
                        RunRecord(0.0, "failed", error="access denied"),
                        RunRecord(60.0, "committed", 2, 2, 7, 2, 1),
                    ),
                    quarantined=(
                        QuarantinedFile("p=a/bad.parquet", "u1", 3, "truncated", 30.0, 90.0),
                        QuarantinedFile("p=b/bad.parquet", None, 2, "missing", 40.0),
                    ),
                    last_vacuum=VacuumRecord(120.0, "lite", version=4, files=6, bytes=6144),
                    snapshot_bytes=3 * 2**20 // 2,
                ),
            },
        )
        assert await _status(config) == 0
        tg.cancel_scope.cancel()
    blocks = _blocks(capsys.readouterr().out)
    assert blocks[failing][-5:] == [
        "last error: access denied",
        "daemon's last run: none since the daemon started",
        "quarantined files: none",
        "daemon's last vacuum: 1970-01-01T00:01:30+00:00 full: access denied (DeleteObjects)",
        "daemon's snapshot: released while idle (loaded again when the table changes)",
    ]
    assert blocks[fine][-14:] == [
        "last error: none",
        f"daemon's last run: {LAST_RUN[0]}",
        *LAST_RUN[1:],
        "daemon's last 2 runs, newest first:",
        "1970-01-01T00:01:00+00:00 committed: 2 of 2 bins, 7 files -> 2, 1 reconciled",
        "1970-01-01T00:00:00+00:00 failed: access denied",
        "quarantined files: 2",
        "p=a/bad.parquet (DV u1): 3 failed reads, quarantined since 1970-01-01T00:00:30+00:00 "
        "until 1970-01-01T00:01:30+00:00",
        "truncated",
        "p=b/bad.parquet: 2 failed reads, quarantined since 1970-01-01T00:00:40+00:00 "
        "until a reload",
        "missing",
        "daemon's last vacuum: 1970-01-01T00:02:00+00:00 lite: 6 files, 6144 bytes deleted "
        "(version 4)",
        "daemon's snapshot: 1.5 MiB held",
    ]
    assert set(blocks) == {failing, fine}
