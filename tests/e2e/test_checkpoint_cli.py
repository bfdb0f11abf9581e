"""``rlcd checkpoint`` as a user runs it: it writes the latest version's checkpoint once, and
delta-rs reads the table from it with the earlier commits gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcd.cli.report import human_bytes
from tests.conftest import fixture_table
from tests.e2e.cli import rlcd
from tests.integration.tables import append, batch, delta_rs_rows, partitioned

pytestmark = pytest.mark.e2e


def test_checkpoint_command(tmp_path: Path) -> None:
    partitioned(tmp_path)
    log = tmp_path / "_delta_log"
    rows = delta_rs_rows(tmp_path)
    done = rlcd("checkpoint", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "wrote _delta_log/00000000000000000007.checkpoint.parquet for version 7" in done.stdout
    assert "8 live files" in done.stdout
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 7
    again = rlcd("checkpoint", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "version 7 has a checkpoint already" in again.stdout
    for commit in log.glob("*.json"):
        commit.unlink()
    assert delta_rs_rows(tmp_path) == rows


def test_checkpoint_of_a_missing_table(tmp_path: Path) -> None:
    missing = rlcd("checkpoint", str(tmp_path / "nothing"))
    assert missing.returncode == 3, missing.stderr


def test_checkpoint_command_cleans_the_expired_log(tmp_path: Path) -> None:
    """A checkpoint of 4 written 40 days ago (and the commits up to it) has expired: after the
    next checkpoint, the command deletes the files before it and says so."""
    for i in range(5):
        append(tmp_path, batch(i * 10, 10))
    log = tmp_path / "_delta_log"
    assert rlcd("checkpoint", str(tmp_path)).returncode == 0
    append(tmp_path, batch(50, 10))  # before the ageing: delta-rs cleans the log up as well
    for name in [f"{v:020d}.json" for v in range(4)] + [f"{4:020d}.checkpoint.parquet"]:
        then = time.time() - 40 * 86_400
        os.utime(log / name, (then, then))
    rows = delta_rs_rows(tmp_path)
    done = rlcd("checkpoint", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "deleted 4 expired log files (" in done.stdout
    assert "before the checkpoint of version 4" in done.stdout
    assert sorted(p.name for p in log.glob("0*")) == [
        f"{4:020d}.checkpoint.parquet",
        f"{4:020d}.json",
        f"{5:020d}.checkpoint.parquet",
        f"{5:020d}.json",
    ]
    assert delta_rs_rows(tmp_path) == rows


SMALL_SIDECARS = """
import functools, sys
import rlcd.delta.checkpoint_writer as writer
from rlcd.cli.main import run
writer.write_checkpoint = functools.partial(
    writer.write_checkpoint, sidecar_threshold=0, sidecar_actions=3
)
sys.argv = ["rlcd", "checkpoint", sys.argv[1]]
run()
"""


def test_the_report_of_a_v2_checkpoint_names_its_sidecars(tmp_path: Path) -> None:
    """A V2 checkpoint in sidecars (the threshold lowered in the command's process, so that
    Spark's four-file V2 table needs two) is reported with how many sidecars and their bytes;
    delta-rs reads the table from it with the commits gone."""
    table = tmp_path / "t"
    shutil.copytree(fixture_table("v2-checkpoint-parquet"), table)
    log = table / "_delta_log"
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "NOOP"}}
    (log / f"{3:020d}.json").write_text(json.dumps(info) + "\n")
    rows = delta_rs_rows(table)
    theirs = set((log / "_sidecars").iterdir())
    done = subprocess.run(
        [sys.executable, "-c", SMALL_SIDECARS, str(table)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    sidecars = set((log / "_sidecars").iterdir()) - theirs
    size = human_bytes(sum(p.stat().st_size for p in sidecars))
    assert len(sidecars) == 2 and "for version 3 (9 actions, 4 live files, " in done.stdout
    assert f"with 2 sidecars of {size} in _delta_log/_sidecars" in done.stdout, done.stdout
    for old in [*log.glob("*.json"), *log.glob(f"{2:020d}.checkpoint.*")]:
        old.unlink()
    assert delta_rs_rows(table) == rows
