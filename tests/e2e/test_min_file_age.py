"""``rlcd compact --min-file-age``: files younger than the age (by their add's
``modificationTime``) are left to the writers that just made them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.e2e.cli import rlcd as _rlcd
from tests.integration.tables import delta_rs_rows, partitioned

pytestmark = pytest.mark.e2e


def _age(commit: Path, seconds: int) -> None:
    """Make the files a commit adds look ``seconds`` old."""
    then = int((time.time() - seconds) * 1000)
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            action["add"]["modificationTime"] = then
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")


def test_young_files_are_left_alone(tmp_path: Path) -> None:
    """With --min-file-age 1h only the files older than an hour are compacted; a bad duration
    is a usage error that writes nothing; the default (0) compacts the rest."""
    partitioned(tmp_path)
    log = tmp_path / "_delta_log"
    for version in range(4):
        _age(log / f"{version:020d}.json", 2 * 3600)
    rows = delta_rs_rows(tmp_path)
    bad = _rlcd("compact", str(tmp_path), "--min-file-age", "soon")
    assert bad.returncode == 2 and "bad --min-file-age" in bad.stderr
    assert not (log / f"{8:020d}.json").exists()
    aged = _rlcd("compact", str(tmp_path), "--min-file-age", "1h")
    assert aged.returncode == 0, aged.stderr
    assert (
        "committed version 8: 4 files (" in aged.stdout and "; 2 bins: 2 committed" in aged.stdout
    )
    removed = {
        json.loads(line)["remove"]["path"]
        for line in (log / f"{8:020d}.json").read_text().splitlines()
        if "remove" in line
    }
    old = {
        json.loads(line)["add"]["path"]
        for version in range(4)
        for line in (log / f"{version:020d}.json").read_text().splitlines()
        if '"add"' in line
    }
    assert removed == old
    assert delta_rs_rows(tmp_path) == rows
    rest = _rlcd("compact", str(tmp_path))
    assert rest.returncode == 0 and "committed version 9" in rest.stdout, rest.stderr
    assert delta_rs_rows(tmp_path) == rows
