"""rlcd's checkpoints and expired log cleanup, judged by Spark and delta-rs.

A Spark-written table (deletion vectors, partitions, column mapping, a one-day
``delta.logRetentionDuration``) gets more commits than one checkpoint interval, an rlcd
compaction and an rlcd checkpoint. Its log is then aged by two days (the cleanup counts from
file modification times, as Spark's does), Spark commits twice more, and ``rlcd checkpoint``
writes the newest checkpoint and deletes the log before rlcd's older one. Spark reads the same
rows at the latest version and at every version inside the window, refuses a version outside
it as it does after its own cleanup, and commits and checkpoints on top.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.tables import delta_rs_rows
from tests.spark.support import compact, latest_version, rlcd, rows

pytestmark = pytest.mark.spark

TWO_DAYS = 2 * 86_400
# Spark refuses time travel to a version older than delta.deletedFileRetentionDuration; the
# test ages the log, not the data, so that check would refuse every version inside the window.
TIME_TRAVEL_CHECK = (
    "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"
)


@pytest.fixture(autouse=True)
def old_versions_readable(spark: Any) -> Iterator[None]:
    spark.conf.set(TIME_TRAVEL_CHECK, "false")
    yield
    spark.conf.unset(TIME_TRAVEL_CHECK)


def _age_log(log: Path, seconds: int) -> None:
    """Every file of the log (Hadoop's checksums too) written ``seconds`` earlier."""
    then = time.time() - seconds
    for f in log.rglob("*"):
        if f.is_file():
            os.utime(f, (then, then))


@pytest.mark.parametrize("v2", [False, True], ids=["classic", "v2"])
def test_spark_time_travels_after_rlcd_cleans_the_log(spark: Any, tmp_path: Path, v2: bool) -> None:
    """After rlcd's cleanup, the versions from rlcd's kept checkpoint on read as before, the
    older ones fail in Spark as after Spark's own cleanup, and Spark checkpoints on top."""
    path = tmp_path / "t"
    table = f"delta.`{path}`"
    policy = ", 'delta.checkpointPolicy' = 'v2'" if v2 else ""
    spark.sql(
        f"CREATE TABLE {table} (id INT, part STRING) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'name', 'delta.checkpointInterval' = '10', "
        "'delta.logRetentionDuration' = 'interval 1 days', "  # Spark: not below the next
        f"'delta.deletedFileRetentionDuration' = 'interval 1 days'{policy})"
    )
    for i in range(10):  # versions 1-10: Spark checkpoints 10
        spark.sql(
            f"INSERT INTO {table} SELECT id, IF(id % 2 = 0, 'a', 'b') "
            f"FROM range({i * 50}, {(i + 1) * 50})"
        )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")  # 11: DVs
    compact(path)  # 12: tombstones with composition tags
    log = path / "_delta_log"
    kept = latest_version(path)
    assert kept == 12 and any(log.glob(f"{10:020d}.checkpoint.*"))
    done = rlcd("checkpoint", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    _age_log(log, TWO_DAYS)
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")  # 13
    spark.sql(f"INSERT INTO {table} VALUES (1000, 'a'), (1001, 'c')")  # 14
    latest = latest_version(path)
    before = {v: rows(spark, path, v) for v in range(kept - 1, latest + 1)}
    delta_rs_before = delta_rs_rows(path)

    done = rlcd("checkpoint", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"before the checkpoint of version {kept}" in done.stdout, done.stdout
    names = [p.name.removeprefix(".") for p in log.iterdir()]  # Hadoop's checksums too
    assert min(int(n[:20]) for n in names if n[:1].isdigit()) == kept
    assert not any((log / "_sidecars").glob("*.parquet"))  # Spark's of checkpoint 10 (v2)
    assert any(log.glob(f"{latest:020d}.checkpoint.*"))

    spark.catalog.clearCache()
    for version in range(kept, latest + 1):
        assert rows(spark, path, version) == before[version], version
    assert rows(spark, path) == before[latest]
    with pytest.raises(Exception, match=r"(?i)cannot time travel|VersionNotFound") as refused:
        rows(spark, path, kept - 1)
    assert f"version {kept - 1}" in str(refused.value)
    assert delta_rs_rows(path) == delta_rs_before

    for i in range(20 - latest):  # Spark's own next checkpoint, at 20
        spark.sql(f"INSERT INTO {table} VALUES ({2000 + i}, 'b')")
    assert any(log.glob(f"{20:020d}.checkpoint.*"))
    spark.catalog.clearCache()
    assert sum(rows(spark, path).values()) == sum(before[latest].values()) + 20 - latest
    assert rows(spark, path, kept) == before[kept]
