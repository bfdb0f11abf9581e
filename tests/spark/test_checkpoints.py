"""Checkpoints between rlcd and Spark: Spark's, as rlcd meets them in tables Spark maintains;
rlcd's, as Spark, delta-rs and the kernel read a table from them with the commits before them
deleted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from rlcd.delta.checkpoint_writer import CheckpointWritten, write_checkpoint
from rlcd.delta.load import load_snapshot
from rlcd.storage import LocalStore
from tests.integration.tables import delta_rs_rows, kernel_rows
from tests.spark.support import (
    compact,
    files_read,
    latest_version,
    log_actions,
    read,
    rlcd,
    rows,
)

pytestmark = pytest.mark.spark

END_OF_TIME = "TIMESTAMP'9999-12-31 23:59:59'"
METADATA_QUERY = "spark.databricks.delta.optimizeMetadataQuery.enabled"


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


def _min_max(spark: Any, path: Path) -> tuple[Any, ...]:
    """``MIN(id)`` and ``MAX(id)`` per partition."""
    query = f"SELECT part, MIN(id), MAX(id) FROM delta.`{path}` GROUP BY part ORDER BY part"
    return tuple(tuple(r) for r in spark.sql(query).collect())


def _partition_files(spark: Any, path: Path) -> dict[str, set[str]]:
    """The files a scan of each partition lists, after partition pruning."""
    table = read(spark, path)
    return {p: set(table.where(f"part = '{p}'").inputFiles()) for p in ("a", "b")}


@pytest.mark.parametrize(
    ("v2", "sidecars"),
    [(False, False), (True, False), (True, True)],
    ids=["classic", "v2", "v2-sidecars"],
)
def test_spark_reads_from_rlcd_checkpoint(
    spark: Any, tmp_path: Path, v2: bool, sidecars: bool
) -> None:
    """Spark reads a DV, partitioned, column-mapped table from rlcd's checkpoint (V2: inline,
    or in sidecars) with the commits before it deleted: the same rows, COUNT, MIN and MAX, and
    each partition's scan lists the same files as before, none of the other's; delta-rs and
    the kernel read the same rows too; and then Spark writes its own next checkpoint on top."""
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
    before_min_max = _min_max(spark, path)
    before_files = _partition_files(spark, path)
    before_delta_rs, before_kernel = delta_rs_rows(path), kernel_rows(path)
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
    assert _min_max(spark, path) == before_min_max
    files = _partition_files(spark, path)
    assert files == before_files and files["a"] and files["b"] and not files["a"] & files["b"]
    assert files["a"] | files["b"] == set(read(spark, path).inputFiles())
    assert delta_rs_rows(path) == before_delta_rs
    assert kernel_rows(path) == before_kernel
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1000, 'a')")
    assert any(p.name.startswith(f"{version + 2:020d}.checkpoint") for p in log.iterdir())
    assert sum(rows(spark, path).values()) == sum(before.values()) + 1


def test_spark_answers_from_rlcd_checkpoint_stats(spark: Any, tmp_path: Path) -> None:
    """Spark answers COUNT, MIN and MAX from the stats in rlcd's checkpoint alone (the commits
    before it deleted; no data file read) with a full scan's values. Delta answers MIN/MAX from
    stats only when no file has a DV, hence a table without."""
    path = tmp_path / "t"
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id INT, name STRING, part STRING) USING delta "
        "PARTITIONED BY (part)"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{path}` SELECT id, CONCAT('n', id), IF(id % 2 = 0, 'a', 'b') "
            f"FROM range({i * 100 - 50}, {i * 100 + 50})"
        )
    version = latest_version(path)
    done = rlcd("checkpoint", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    for commit in (path / "_delta_log").glob("*.json"):
        if int(commit.name[:20]) < version:
            commit.unlink()
    spark.catalog.clearCache()
    query = f"SELECT COUNT(*), MIN(id), MAX(id) FROM delta.`{path}`"
    answer, files = files_read(spark, query)
    assert files == 0
    spark.conf.set(METADATA_QUERY, "false")
    try:
        scanned, files = files_read(spark, query)
    finally:
        spark.conf.unset(METADATA_QUERY)
    assert files > 0 and answer == scanned
    assert tuple(answer[0]) == (300, -50, 249)
