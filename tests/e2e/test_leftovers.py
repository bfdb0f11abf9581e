"""What a killed ``rlcd compact`` leaves behind, and how the next runs deal with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pytest

from rlcd.delta.names import rlcd_file_uuid
from rlcd.storage.local import is_temp_name
from tests.e2e.test_cli import rlcd
from tests.integration.tables import append

pytestmark = pytest.mark.e2e


def big_table(path: Path, files: int = 20, rows: int = 50_000) -> None:
    """Files of random numbers and strings: slow enough to rewrite that a run can be caught
    mid-write."""
    rng = np.random.default_rng(7)
    for i in range(files):
        ids = np.arange(i * rows, (i + 1) * rows)
        strings = pa.array(rng.integers(0, 1 << 40, rows)).cast(pa.string())
        append(path, pa.table({"id": ids, "x": rng.random(rows), "s": strings}))


def content(table: Path) -> pa.Table:
    """The rows through delta-rs, in id order (ids are unique)."""
    read = pa.table(deltalake.DeltaTable(str(table)).scan().read_all())
    return pa.table({"id": read["id"], "x": read["x"], "s": read["s"].cast(pa.string())}).sort_by(
        "id"
    )


def temp_files(table: Path) -> list[Path]:
    return [p for p in table.rglob("*") if is_temp_name(p.name)]


def start_compact(table: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rlcd", "compact", str(table), "--target-size", "8MiB", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def when_writing(process: subprocess.Popen[str], table: Path) -> list[Path]:
    """Wait until the run has an output half written (a temp file exists); fails if the run
    ends first."""
    while not (found := temp_files(table)):
        assert process.poll() is None, "the run finished before writing was seen"
        time.sleep(0.005)
    return found


def _age(table: Path, hours: float) -> None:
    when = time.time() - hours * 3600
    for path in table.rglob("*"):
        os.utime(path, (when, when))


def unreferenced_rlcd_files(table: Path) -> list[str]:
    log_text = "".join(p.read_text() for p in (table / "_delta_log").glob("*.json"))
    return [
        p.name
        for p in table.rglob("*")
        if rlcd_file_uuid(p.name) is not None and p.name not in log_text
    ]


def test_kill_9_leftovers_are_removed_by_a_later_run_past_the_grace(tmp_path: Path) -> None:
    """`kill -9` mid-compaction leaves partial outputs; the next run keeps them while they are
    younger than the grace period (they may be another run's), a run after the grace removes
    them and says so, and the table reads the same rows throughout."""
    table = tmp_path / "t"
    big_table(table)
    rows = content(table)
    process = start_compact(table)
    when_writing(process, table)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    left = temp_files(table) + [table / n for n in unreferenced_rlcd_files(table)]
    assert left, "the kill left nothing: the reproduction did not reproduce"
    assert content(table).equals(rows)

    young = rlcd("compact", str(table), "--dry-run")
    assert young.returncode == 0, young.stderr
    assert all(p.exists() for p in left) and "leftovers of" not in young.stdout

    _age(table, 2)
    done = rlcd("compact", str(table), "--target-size", "8MiB")
    assert done.returncode == 0, done.stderr
    assert "removed leftovers of earlier runs older than 1h" in done.stdout, done.stdout
    assert not any(p.exists() for p in left)
    assert temp_files(table) == [] and unreferenced_rlcd_files(table) == []
    assert content(table).equals(rows)


def test_orphan_grace_is_a_duration(tmp_path: Path) -> None:
    """--orphan-grace takes a duration; anything else is a usage error (exit 2)."""
    table = tmp_path / "t"
    big_table(table, files=2, rows=10)
    bad = rlcd("compact", str(table), "--orphan-grace", "soon")
    assert bad.returncode == 2 and "--orphan-grace" in bad.stderr
    ok = rlcd("compact", str(table), "--orphan-grace", "90s", "--dry-run")
    assert ok.returncode == 0, ok.stderr
