"""The command's scratch folder: its temp files in a folder of its own, removed when it ends,
and the folders of killed rlcd processes removed by the next command."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rlcd.cli.process import scratch_dir


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_temp_files_live_in_the_folder_and_go_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with scratch_dir() as folder:
        assert folder.parent == tmp_path and folder.name.startswith(f"rlcd-{os.getpid()}-")
        fd, path = tempfile.mkstemp(prefix="rlcd-encoded-")
        os.close(fd)
        assert Path(path).parent == folder
    assert not folder.exists()
    assert tempfile.tempdir is None


def test_a_killed_process_folder_is_removed_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = tmp_path / f"rlcd-{_dead_pid()}-abc123"
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "rlcd-encoded-x.parquet").write_bytes(b"rows")
    alive = tmp_path / f"rlcd-{os.getppid()}-def456"  # the test runner's parent runs
    alive.mkdir()
    others = [tmp_path / "rlcd-check-xyz", tmp_path / f"rlcd-{_dead_pid()}"]
    for other in others:
        other.mkdir()
    loose = tmp_path / f"rlcd-{_dead_pid()}-file"
    loose.write_bytes(b"not a folder")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with scratch_dir():
        assert not dead.exists()
        assert alive.is_dir() and all(other.is_dir() for other in others) and loose.is_file()
