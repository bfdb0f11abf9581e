"""Spark's checkpoints, as rlcd meets them in tables Spark maintains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import compact, latest_version, log_actions, rows

pytestmark = pytest.mark.spark

END_OF_TIME = "TIMESTAMP'9999-12-31 23:59:59'"


def test_end_of_time_timestamps_in_stats_parsed(spark: Any, tmp_path: Path) -> None:
    """A checkpoint whose ``stats_parsed`` holds 9999-12-31 (Spark writes INT96) compacts, and
    the output's stats hold that timestamp exactly."""
    path = tmp_path / "scd"
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id INT, valid_to TIMESTAMP) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval' = '2')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i}, {END_OF_TIME})")
    assert (path / "_delta_log" / f"{2:020d}.checkpoint.parquet").exists()
    before = rows(spark, path)
    compact(path)
    version = latest_version(path)
    assert version == 4
    assert rows(spark, path) == before
    (add,) = (a["add"] for a in log_actions(path, version) if "add" in a)
    stats = json.loads(add["stats"])
    assert stats["minValues"]["valid_to"] == stats["maxValues"]["valid_to"]
    assert stats["maxValues"]["valid_to"] == "9999-12-31T23:59:59.000Z"
    assert stats["numRecords"] == 3
