"""``rlcd vacuum`` as a user runs it: the dry run's listing, the retention guard, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import rlcd
from tests.integration.tables import delta_rs_rows, partitioned

pytestmark = pytest.mark.e2e


def _data_files(table: Path) -> set[str]:
    return {
        p.relative_to(table).as_posix()
        for p in table.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def test_vacuum_after_compact(tmp_path: Path) -> None:
    """After a compaction the table's retention keeps the sources (nothing to do); a shorter
    --retain is refused (exit 2) unless forced; the dry run lists the sources and deletes
    nothing; the forced run deletes them, warns, and the rows stay."""
    partitioned(tmp_path)
    assert rlcd("compact", str(tmp_path)).returncode == 0
    sources = _data_files(tmp_path)
    rows = delta_rs_rows(tmp_path)
    kept = rlcd("vacuum", str(tmp_path))
    assert kept.returncode == 0, kept.stderr
    assert "lite vacuum deleted 0 files, 0 B" in kept.stdout
    refused = rlcd("vacuum", str(tmp_path), "--retain", "0h", "--full")
    assert refused.returncode == 2
    assert "--force-short-retention" in refused.stderr
    dry = rlcd("vacuum", str(tmp_path), "--retain", "0h", "--force-short-retention", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = {line.strip() for line in dry.stdout.splitlines() if line.startswith("  ")}
    assert len(listed) == 8 and listed < sources
    assert "lite vacuum would delete 8 files" in dry.stdout
    assert _data_files(tmp_path) == sources
    done = rlcd("vacuum", str(tmp_path), "--retain=0h", "--force-short-retention", "--full")
    assert done.returncode == 0, done.stderr
    assert "full vacuum deleted 8 files" in done.stdout and "(versions 9-10)" in done.stdout
    assert "warning: retention 0h below the table's 168h" in done.stderr
    assert _data_files(tmp_path) == sources - listed
    assert delta_rs_rows(tmp_path) == rows
    assert rlcd("verify", str(tmp_path)).returncode == 0


def test_a_bad_retain_is_a_usage_error(tmp_path: Path) -> None:
    """--retain in months (no fixed length) or nonsense exits 2 naming the flag."""
    partitioned(tmp_path)
    for value in ("1 month", "soon"):
        result = rlcd("vacuum", str(tmp_path), "--retain", value)
        assert result.returncode == 2 and "bad --retain" in result.stderr, result.stderr


def test_a_path_outside_the_table_is_named_and_kept(tmp_path: Path) -> None:
    """An expired tombstone of ``../other/x.parquet``: the vacuum keeps that file and says so on
    stderr, naming the table and the path; it still deletes the table's own expired files."""
    table, other = tmp_path / "t", tmp_path / "other" / "x.parquet"
    partitioned(table)
    assert rlcd("compact", str(table)).returncode == 0
    other.parent.mkdir()
    other.write_bytes(b"not the table's")
    log = sorted((table / "_delta_log").glob("*.json"))
    remove = {"remove": {"path": "../other/x.parquet", "deletionTimestamp": 0, "dataChange": True}}
    (log[-1].parent / f"{len(log):020d}.json").write_text(json.dumps(remove) + "\n")
    done = rlcd("vacuum", str(table), "--retain", "0h", "--force-short-retention", "--full")
    assert done.returncode == 0, done.stderr
    assert f"{table}: not deleted: ../other/x.parquet: " in done.stderr, done.stderr
    assert other.read_bytes() == b"not the table's"
    assert "full vacuum deleted 8 files" in done.stdout
