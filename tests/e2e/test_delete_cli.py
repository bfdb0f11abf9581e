"""``rlcd delete --where`` as a user runs it: the matching rows are gone for an independent
reader, every other row stays, and bad input is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from tests.e2e.cli import rlcd
from tests.integration.tables import append, batch

pytestmark = pytest.mark.e2e


def ids(path: Path) -> list[int]:
    """The live ids as delta-rs scans the table, sorted."""
    table = pa.table(deltalake.DeltaTable(str(path)).scan().read_all())
    return sorted(table.column("id").to_pylist())


def dv_table(path: Path, *, partitioned: bool = False) -> None:
    """Four files of 25 rows (ids 0..99), DVs enabled; partitioned: part a, b, a, b."""
    for i in range(4):
        extra = {"part": [["a", "b"][i % 2]] * 25} if partitioned else {}
        append(
            path,
            batch(i * 25, 25, **extra),
            partition_by=["part"] if partitioned else None,
            configuration={"delta.enableDeletionVectors": "true"} if i == 0 else None,
        )


def test_delete_removes_exactly_the_matching_rows(tmp_path: Path) -> None:
    """--where on a data column deletes the matching rows of every file, in one commit."""
    dv_table(tmp_path)
    done = rlcd("delete", str(tmp_path), "--where", "flag = true AND id >= 30")
    assert done.returncode == 0, done.stderr
    deleted = {i for i in range(30, 100) if i % 3 == 0}
    assert "deleted 24 rows in 3 files in version 4" in done.stdout, done.stdout
    assert ids(tmp_path) == sorted(set(range(100)) - deleted)
    again = rlcd("delete", str(tmp_path), "--where", "flag = true AND id >= 30")
    assert again.returncode == 0, again.stderr
    assert "deleted 0 rows in 0 files" in again.stdout
    assert deltalake.DeltaTable(str(tmp_path)).version() == 4


def test_delete_by_partition_and_data_columns(tmp_path: Path) -> None:
    """On a partitioned table a mixed predicate deletes only within its partition."""
    dv_table(tmp_path, partitioned=True)
    done = rlcd("delete", str(tmp_path), "--where", "part = 'b' AND (id < 30 OR id >= 90)")
    assert done.returncode == 0, done.stderr
    assert ids(tmp_path) == sorted(set(range(100)) - set(range(25, 30)) - set(range(90, 100)))
    done = rlcd("delete", str(tmp_path), "--where", "part = 'a'")
    assert done.returncode == 0, done.stderr
    assert "0 data files read" in done.stdout
    assert ids(tmp_path) == [i for i in range(25, 50) if i >= 30] + list(range(75, 90))


def test_dry_run_lists_files_and_writes_nothing(tmp_path: Path) -> None:
    """--dry-run prints each file with its row count and commits nothing."""
    dv_table(tmp_path)
    done = rlcd("delete", str(tmp_path), "--where", "id IN (1, 2, 60)", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would delete 3 rows in 2 files" in done.stdout
    assert ": 2 rows" in done.stdout and ": 1 row\n" in done.stdout
    assert deltalake.DeltaTable(str(tmp_path)).version() == 3
    assert ids(tmp_path) == list(range(100))


def test_unknown_column_exits_2(tmp_path: Path) -> None:
    """A predicate naming a column the table lacks is a usage error naming it; nothing changes."""
    dv_table(tmp_path)
    done = rlcd("delete", str(tmp_path), "--where", "nope = 1")
    assert done.returncode == 2
    assert "nope" in done.stderr
    assert deltalake.DeltaTable(str(tmp_path)).version() == 3


def test_table_without_dvs_is_refused_pointing_at_enable_dv(tmp_path: Path) -> None:
    """A table that does not allow DVs (deltalake's default) exits 3 with the command that
    upgrades it, ``--yes`` included."""
    append(tmp_path, batch(0, 10))
    done = rlcd("delete", str(tmp_path), "--where", "id = 1")
    assert done.returncode == 3
    assert "rlcd enable-dv TABLE --yes" in done.stderr
    assert ids(tmp_path) == list(range(10))


def test_dry_run_on_a_table_without_dvs_reports_and_names_the_upgrade(tmp_path: Path) -> None:
    """A dry run on a table without DVs says what it would delete and that the real run needs
    ``rlcd enable-dv --yes`` first; it exits 0 and changes nothing."""
    append(tmp_path, batch(0, 10))
    append(tmp_path, batch(10, 10))
    done = rlcd("delete", str(tmp_path), "--where", "id IN (1, 2, 15)", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would delete 3 rows in 2 files" in done.stdout
    assert "the real run needs `rlcd enable-dv TABLE --yes` first" in done.stdout
    assert deltalake.DeltaTable(str(tmp_path)).version() == 1
    assert ids(tmp_path) == list(range(20))
