"""``rlcd compact --encodings``: the user's choice of column encodings."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.e2e.test_cli import rlcd
from tests.integration.tables import delta_rs_rows, unpartitioned

pytestmark = pytest.mark.e2e


def test_adaptive_encodings_from_the_command_line(tmp_path: Path) -> None:
    """``--encodings adaptive`` delta-packs the sorted ids; delta-rs reads the same rows."""
    unpartitioned(tmp_path)
    rows = delta_rs_rows(tmp_path)
    done = rlcd("compact", str(tmp_path), "--encodings", "adaptive")
    assert done.returncode == 0, done.stderr
    log = sorted((tmp_path / "_delta_log").glob("*.json"))[-1]
    (add,) = (a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a)
    meta = pq.read_metadata(tmp_path / add["path"])
    assert "DELTA_BINARY_PACKED" in meta.row_group(0).column(0).encodings
    assert delta_rs_rows(tmp_path) == rows


def test_unknown_encodings_is_a_usage_error(tmp_path: Path) -> None:
    """An unknown ``--encodings`` value exits 2 naming the choices; nothing is written."""
    unpartitioned(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    done = rlcd("compact", str(tmp_path), "--encodings", "fast")
    assert done.returncode == 2
    assert "invalid choice: 'fast' (choose from 'adaptive', 'conservative')" in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
