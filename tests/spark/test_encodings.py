"""Spark reads the column encodings rlcd's adaptive writer chooses, with its vectorized
reader (the default) and without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rlcd.compaction import rewrite
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.storage import LocalStore
from tests.integration.tables import append
from tests.integration.test_encodings import (
    DELTA_PACKED,
    FILES,
    mixed_file,
    output_encodings,
    repeating_text_file,
)
from tests.spark.support import compact, latest_version, rows, rows_both_readers

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


def test_spark_reads_a_dictionary_grown_row_group(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose wide repeating column made its row groups grow (the sizes scaled down to 1
    and 8 MiB, in process) reads the same through Spark's vectorized reader and its other
    one."""
    monkeypatch.setattr(rewrite, "ROW_GROUP_BYTES", 1 << 20)
    monkeypatch.setattr(rewrite, "GROWN_ROW_GROUP_BYTES", 8 << 20)
    for f in range(20):
        append(tmp_path, repeating_text_file(f))
    before = rows_both_readers(spark, tmp_path)

    async def run() -> int | None:
        async with LocalStore(tmp_path) as store:
            return (await compact_table(store, CompactionPolicy())).committed_version

    version = anyio.run(run)
    assert version is not None
    assert "RLE_DICTIONARY" in output_encodings(tmp_path, version)["text"]
    assert rows_both_readers(spark, tmp_path) == before
