"""``--min-file-age`` on a Spark table: files Spark just wrote are left to Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import compact, latest_version, num_files, rows

pytestmark = pytest.mark.spark


def test_fresh_spark_files_are_left_alone(spark: Any, tmp_path: Path) -> None:
    """Files Spark has just written are younger than an hour: rlcd compacts none of them with
    --min-file-age 1h, and all of them without it."""
    path = tmp_path / "fresh"
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT) USING delta")
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i})")
    before, files = rows(spark, path), num_files(spark, path)
    young = compact(path, "--min-file-age", "1h")
    assert "nothing to compact" in young.stdout
    assert latest_version(path) == 3 and num_files(spark, path) == files == 3
    compact(path)
    assert num_files(spark, path) == 1
    assert rows(spark, path) == before
