"""Spark's checkpoints, as rlcd meets them in tables Spark maintains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from rlcd.delta.checkpoint_writer import CheckpointWritten, write_checkpoint
from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore
from tests.spark.support import compact, latest_version, log_actions, rlcd, rows

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


async def _checkpoint_in_sidecars(path: Path) -> None:
    """rlcd's V2 checkpoint of the latest version with its file actions in sidecars of three."""
    async with LocalStore(path) as store:
        snapshot = await load_snapshot(store)
        written = await write_checkpoint(store, snapshot, sidecar_threshold=0, sidecar_actions=3)
    assert isinstance(written, CheckpointWritten) and len(written.sidecars) > 1


@pytest.mark.parametrize(
    ("v2", "sidecars"),
    [(False, False), (True, False), (True, True)],
    ids=["classic", "v2", "v2-sidecars"],
)
def test_spark_reads_from_rlcd_checkpoint(
    spark: Any, tmp_path: Path, v2: bool, sidecars: bool
) -> None:
    """Spark reads a DV, partitioned, column-mapped table from rlcd's checkpoint (V2: inline,
    or in sidecars) with the commits before it deleted: the same rows, COUNT from stats,
    partition pruning; and then writes its own next checkpoint on top."""
    path = tmp_path / "t"
    policy = ", 'delta.checkpointPolicy' = 'v2'" if v2 else ""
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id INT, part STRING) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'name', 'delta.checkpointInterval' = '1000', "
        f"'delta.checkpoint.writeStatsAsStruct' = 'true'{policy})"
    )
    for i in range(4):
        spark.sql(
            f"INSERT INTO delta.`{path}` SELECT id, IF(id % 2 = 0, 'a', 'b') "
            f"FROM range({i * 100}, {(i + 1) * 100})"
        )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
    before = rows(spark, path)
    in_a = f"SELECT COUNT(*) AS n FROM delta.`{path}` WHERE part = 'a'"
    before_a = spark.sql(in_a).collect()[0].n
    version = latest_version(path)
    if sidecars:
        anyio.run(_checkpoint_in_sidecars, path)
    else:
        done = rlcd("checkpoint", str(path))
        assert done.returncode == 0, done.stdout + done.stderr
    log = path / "_delta_log"
    written = [p for p in log.iterdir() if p.name.startswith(f"{version:020d}.checkpoint.")]
    assert len(written) == 1 and (written[0].name.count(".") == 3) == v2
    for commit in log.glob("*.json"):
        if int(commit.name[:20]) < version:  # Spark keeps the checkpoint version's own
            commit.unlink()
    spark.catalog.clearCache()
    assert rows(spark, path) == before
    count = spark.sql(f"SELECT COUNT(*) AS n FROM delta.`{path}`")
    assert count.collect()[0].n == sum(before.values())
    assert spark.sql(in_a).collect()[0].n == before_a
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1000, 'a')")
    assert any(p.name.startswith(f"{version + 2:020d}.checkpoint") for p in log.iterdir())
    assert sum(rows(spark, path).values()) == sum(before.values()) + 1
