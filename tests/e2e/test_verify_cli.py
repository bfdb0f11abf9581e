"""``rlcd verify`` as a user runs it: a damaged table exits 1 naming the file, and each of
``--files-only`` / ``--tags-only`` runs its half alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_cli import rlcd
from tests.integration.tables import flip_page_byte, partitioned

pytestmark = pytest.mark.e2e


def test_verify_exits_1_naming_a_deleted_file_and_runs_each_half_alone(tmp_path: Path) -> None:
    """A deleted live file fails verify and --files-only (exit 1, the file named); --tags-only
    does not look at live files and passes; both flags at once are a usage error."""
    partitioned(tmp_path)
    victim = next(tmp_path.glob("part=b/*.parquet"))
    victim.unlink()
    name = str(victim.relative_to(tmp_path))
    both = rlcd("verify", str(tmp_path))
    assert both.returncode == 1, both.stderr
    assert f"  problem: {name}: data file is missing" in both.stdout
    assert both.stdout.endswith("verification FAILED: 1 problem (exit 1)\n")
    files_only = rlcd("verify", str(tmp_path), "--files-only")
    assert files_only.returncode == 1 and "tags: not checked" in files_only.stdout
    tags_only = rlcd("verify", str(tmp_path), "--tags-only")
    assert tags_only.returncode == 0, tags_only.stdout
    assert "files: not checked" in tags_only.stdout and name not in tags_only.stdout
    assert rlcd("verify", str(tmp_path), "--tags-only", "--files-only").returncode == 2


def test_deep_finds_a_flipped_byte_in_an_rlcd_output_that_the_plain_verify_passes(
    tmp_path: Path,
) -> None:
    """rlcd's outputs carry page checksums: a byte flipped inside one passes ``rlcd verify``
    (the size holds) and fails ``rlcd verify --deep`` with exit 1, naming the file, the row
    group and the column; ``--concurrency 0`` and ``--deep`` with ``--tags-only`` are usage
    errors."""
    partitioned(tmp_path)
    before = set(tmp_path.rglob("*.parquet"))
    assert rlcd("compact", str(tmp_path)).returncode == 0
    output = next(p for p in tmp_path.glob("part=a/*.parquet") if p not in before)
    column = flip_page_byte(output)
    assert rlcd("verify", str(tmp_path), "--files-only").returncode == 0
    deep = rlcd("verify", str(tmp_path), "--files-only", "--deep")
    assert deep.returncode == 1, deep.stderr
    name = output.relative_to(tmp_path).as_posix()
    assert (
        f"  problem: {name}: data does not read: row group 0, column {column} "
        "does not decode: could not verify page integrity, CRC checksum verification failed"
    ) in deep.stdout
    assert "read in full" in deep.stdout and deep.stderr == ""
    for usage in (("--concurrency", "0"), ("--deep", "--tags-only")):
        assert rlcd("verify", str(tmp_path), *usage).returncode == 2
