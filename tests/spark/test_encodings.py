"""Spark reads the column encodings rlcd's adaptive writer chooses, with its vectorized
reader (the default) and without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.tables import append
from tests.integration.test_encodings import DELTA_PACKED, FILES, mixed_file, output_encodings
from tests.spark.support import compact, latest_version, rows

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_spark_reads_every_adaptive_encoding(spark: Any, tmp_path: Path, vectorized: str) -> None:
    """After ``rlcd compact --encodings adaptive`` (delta-packed integers, dates, timestamps and
    decimals, dictionary and plain columns, nulls in each) Spark reads the rows it read
    before."""
    for f in range(FILES):
        append(tmp_path, mixed_file(f))
    spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
    try:
        before = rows(spark, tmp_path)
        compact(tmp_path, "--encodings", "adaptive")
        used = output_encodings(tmp_path, latest_version(tmp_path))
        assert all("DELTA_BINARY_PACKED" in used[c] for c in DELTA_PACKED)
        assert all("BYTE_STREAM_SPLIT" not in e for e in used.values())
        assert rows(spark, tmp_path) == before
    finally:
        spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
