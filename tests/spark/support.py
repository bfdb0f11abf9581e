"""What the Spark tier's tests share: running rlcd as a user does, and reading through Spark.

Rows are collected through ``DataFrame.toArrow()`` (PySpark's ``collect()`` cannot return years
before 1 or after 9999 of Python's datetime range) and compared as multisets of their ``repr``,
so NaN equals NaN and ``-0.0`` differs from ``0.0``.
"""

from __future__ import annotations

import collections
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.e2e import cli
from tests.integration.tables import _hashable

SparkRows = collections.Counter[str]


def rlcd(*args: str) -> subprocess.CompletedProcess[str]:
    """The rlcd CLI in a subprocess, with room for Spark-sized tables."""
    return cli.rlcd(*args, timeout=300)


def compact(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``rlcd compact`` that must succeed (the assertion shows rlcd's output when it does not)."""
    done = rlcd("compact", str(path), *args)
    assert done.returncode == 0, (
        f"rlcd compact exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )
    return done


def verify(path: Path) -> None:
    """``rlcd verify`` must pass."""
    done = rlcd("verify", str(path))
    assert done.returncode == 0, (
        f"rlcd verify exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )


def read(spark: Any, path: Path | str, version: int | None = None) -> Any:
    """The table (at ``version``, else the latest) as a Spark DataFrame."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(path))


def rows(spark: Any, path: Path | str, version: int | None = None) -> SparkRows:
    """The multiset of rows Spark reads."""
    return frame_rows(read(spark, path, version))


def rows_both_readers(spark: Any, path: Path | str, version: int | None = None) -> SparkRows:
    """The rows Spark's vectorized Parquet reader reads, once asserted equal to parquet-mr's."""
    vectorized = rows(spark, path, version)
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", "false")
    try:
        assert rows(spark, path, version) == vectorized, "parquet-mr reads other rows"
    finally:
        spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
    return vectorized


def frame_rows(frame: Any) -> SparkRows:
    """The multiset of a DataFrame's rows."""
    return collections.Counter(repr(_hashable(r)) for r in frame.toArrow().to_pylist())


def sql(spark: Any, text: str) -> list[Any]:
    """Run a statement and collect its (small) result."""
    return list(spark.sql(text).collect())


def log_actions(path: Path, version: int) -> list[dict[str, Any]]:
    """The actions of one JSON commit."""
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def latest_version(path: Path) -> int:
    """The newest commit version in the log."""
    return max(int(p.name[:20]) for p in (path / "_delta_log").glob("*.json"))


def num_files(spark: Any, path: Path) -> int:
    """Live data files by Spark's own log replay (``DESCRIBE DETAIL``)."""
    return int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].numFiles)


def plan_leaves(frame: Any) -> list[Any]:
    """The leaf nodes (JVM objects) of a collected DataFrame's executed physical plan."""
    leaves = frame._jdf.queryExecution().executedPlan().collectLeaves()
    return [leaves.apply(i) for i in range(leaves.size())]


def files_read(spark: Any, text: str) -> tuple[list[Any], int]:
    """A query's result and the data files its scans read after data skipping (the scans'
    ``number of files read``). Adaptive execution is off for it, so the executed plan holds
    the scans themselves rather than query stages."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        frame = spark.sql(text)
        result = list(frame.collect())
        metrics = [leaf.metrics() for leaf in plan_leaves(frame)]
        return result, sum(
            int(m.apply("numFiles").value()) for m in metrics if m.contains("numFiles")
        )
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
