"""One round trip through S3 (moto's server) with s3a: Spark writes, rlcd compacts the table as
``s3://``, Spark reads back exactly what it read before."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spark.support import rlcd, rows, rows_both_readers, sql

pytestmark = pytest.mark.spark


def _point_s3a_at(spark: Any, bucket: str, endpoint: str) -> None:
    """s3a settings for this bucket only (per-bucket keys): moto's endpoint, path-style, http."""
    settings = {
        "endpoint": endpoint,
        "endpoint.region": "us-east-1",
        "path.style.access": "true",
        "connection.ssl.enabled": "false",
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "access.key": "testing",
        "secret.key": "testing",
    }
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in settings.items():
        hadoop.set(f"fs.s3a.bucket.{bucket}.{key}", value)


def _rlcd_ok(*args: str) -> str:
    done = rlcd(*args)
    assert done.returncode == 0, (
        f"rlcd {args[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )
    return done.stdout


def test_s3a_round_trip(
    spark: Any, moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table Spark wrote through s3a (small files, a DV from DELETE) is compacted by rlcd
    over s3:// into one file; Spark reads exactly its rows back (both readers), sees rlcd's
    commit as OPTIMIZE, and rlcd verify passes."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    _point_s3a_at(spark, s3_bucket, moto_endpoint)
    uri = f"s3a://{s3_bucket}/t"
    table = f"delta.`{uri}`"
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, name STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    for k in range(3):
        ids = f"range({10 * k}, {10 * k + 10}, 1, 1)"  # one file each
        spark.sql(f"INSERT INTO {table} SELECT id, concat('n ', id) FROM {ids}")
    spark.sql(f"DELETE FROM {table} WHERE id IN (5, 25)")
    before = rows(spark, uri)
    assert sum(before.values()) == 28
    s3 = (f"s3://{s3_bucket}/t", "--endpoint-url", moto_endpoint)
    assert "3 files" in _rlcd_ok("compact", *s3)
    assert rows_both_readers(spark, uri) == before
    (detail,) = sql(spark, f"DESCRIBE DETAIL {table}")
    assert detail.numFiles == 1
    (last,) = sql(spark, f"DESCRIBE HISTORY {table} LIMIT 1")
    assert (last.version, last.operation) == (5, "OPTIMIZE")
    _rlcd_ok("verify", *s3)
