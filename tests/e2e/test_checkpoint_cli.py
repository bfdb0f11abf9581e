"""``rlcd checkpoint`` as a user runs it: it writes the latest version's checkpoint once, and
delta-rs reads the table from it with the earlier commits gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import rlcd
from tests.integration.tables import delta_rs_rows, partitioned

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
