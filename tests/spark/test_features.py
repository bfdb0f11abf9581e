"""Table features Spark users turn on: the ones rlcd compacts under, and the ones it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import compact, frame_rows, latest_version, num_files, rlcd, rows, sql

pytestmark = pytest.mark.spark


def test_cdf_append_only_widening_identity_generated_check(spark: Any, tmp_path: Path) -> None:
    """A table with change data feed, append-only, type widening, an identity, a generated and
    a CHECK column compacts: the rows and the change feed are what they were, and afterwards
    the identity goes on, the CHECK and append-only still hold."""
    path = tmp_path / "features"
    table = f"delta.`{path}`"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT GENERATED ALWAYS AS IDENTITY, n INT, "
        "doubled INT GENERATED ALWAYS AS (n * 2), w SMALLINT) USING delta TBLPROPERTIES ("
        "'delta.enableChangeDataFeed' = 'true', 'delta.appendOnly' = 'true', "
        "'delta.enableTypeWidening' = 'true')"
    )
    spark.sql(f"ALTER TABLE {table} ADD CONSTRAINT non_negative CHECK (n >= 0)")
    for i in range(3):
        spark.sql(f"INSERT INTO {table} (n, w) VALUES ({i}, {i}), ({i + 10}, -{i})")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN w TYPE INT")
    widened = latest_version(path)
    for n in (7, 9):
        spark.sql(f"INSERT INTO {table} (n, w) VALUES ({n}, 100000)")
    before, changes_before = rows(spark, path), _changes(spark, path, widened + 1)
    assert sum(changes_before.values()) == 2
    compact(path)
    assert num_files(spark, path) == 1
    assert rows(spark, path) == before
    assert _changes(spark, path, widened + 1) == changes_before
    spark.sql(f"INSERT INTO {table} (n, w) VALUES (8, 8)")
    ids = [r.id for r in sql(spark, f"SELECT id FROM {table}")]
    assert len(set(ids)) == len(ids) == 9
    with pytest.raises(Exception, match=r"(?i)check"):
        spark.sql(f"INSERT INTO {table} (n, w) VALUES (-1, 0)")
    with pytest.raises(Exception, match=r"(?i)append"):
        spark.sql(f"DELETE FROM {table} WHERE n = 1")


def _changes(spark: Any, path: Path, start: int) -> Any:
    """The change feed from ``start`` on (rlcd's commit, dataChange=false, adds none to it;
    a feed cannot span the type change)."""
    feed = spark.read.format("delta").option("readChangeFeed", "true")
    return frame_rows(feed.option("startingVersion", start).load(str(path)))


@pytest.mark.parametrize(
    "ddl",
    [
        "(id INT) USING delta TBLPROPERTIES ('delta.enableRowTracking' = 'true')",
        "(id INT) USING delta CLUSTER BY (id)",
    ],
    ids=["row-tracking", "clustering"],
)
def test_row_tracking_and_clustering_are_refused(spark: Any, tmp_path: Path, ddl: str) -> None:
    """rlcd refuses row-tracking and clustered tables (exit 3, naming the feature) and leaves
    every file of the table as it was."""
    path = tmp_path / "refused"
    spark.sql(f"CREATE TABLE delta.`{path}` {ddl}")
    for i in range(2):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i})")
    tree = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    done = rlcd("compact", str(path))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "rowTracking" in done.stderr or "clustering" in done.stderr.lower(), done.stderr
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == tree
    assert latest_version(path) == 2
