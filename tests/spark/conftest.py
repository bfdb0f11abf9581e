"""The Spark tier: one local Spark session with Delta Lake for the whole test run.

Spark is the reference engine: these tests build tables the way Spark users do and judge what
rlcd wrote by what Spark reads. The Delta jar and s3a's jars (with their dependencies) are
resolved from Maven Central into ``.cache/ivy`` inside the project on the first run; later runs
resolve from that cache offline. When they cannot be resolved, or Java is missing, session start
fails and every test of the tier errors: the tier never skips. Each module marks itself
``spark``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IVY_CACHE = ROOT / ".cache" / "ivy"
DELTA_JAR = "io.delta:delta-spark_4.2_2.13:4.4.0"  # pinned with pyspark 4.2.0, delta-spark 4.4.0
# s3a for the moto round trip: hadoop-aws matching pyspark 4.2.0's Hadoop 3.5.0, without the
# 686 MB AWS SDK bundle it depends on; instead the SDK v2 modules s3a uses, at the bundle's
# version (52 jars, 19 MB). Netty comes from Spark's own jars.
S3A_JARS = (
    "org.apache.hadoop:hadoop-aws:3.5.0",
    "software.amazon.awssdk:s3:2.35.4",
    "software.amazon.awssdk:s3-transfer-manager:2.35.4",
    "software.amazon.awssdk:sts:2.35.4",
)

SETTINGS = {
    "spark.jars.packages": ",".join((DELTA_JAR, *S3A_JARS)),
    "spark.jars.excludes": "software.amazon.awssdk:bundle,io.netty:*",
    "spark.jars.ivy": str(IVY_CACHE),
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # two cores: Spark's defaults (200 shuffle partitions, 50 snapshot partitions) crawl here
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # tables are addressed by path: no Hive metastore, no derby files in the working directory
    "spark.sql.catalogImplementation": "in-memory",
    # the tests VACUUM with RETAIN 0 HOURS to remove what they just replaced
    "spark.databricks.delta.retentionDurationCheck.enabled": "false",
    # COUNT(*), MIN and MAX from the log's stats (Delta's default, relied on by the tests)
    "spark.databricks.delta.optimizeMetadataQuery.enabled": "true",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's SparkSession (local[2], Delta extensions, the pinned jar)."""
    from pyspark.sql import SparkSession

    # Python UDFs run in this interpreter (the project's venv), not whatever python3 PATH finds:
    # pyspark's SparkContext reads only this variable (not spark.pyspark.python) for its workers.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    scratch = tmp_path_factory.mktemp("spark")
    builder = SparkSession.builder.master("local[2]").appName("rlcd-spark-tier")
    settings = {
        **SETTINGS,
        "spark.local.dir": str(scratch / "local"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={scratch}",
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
