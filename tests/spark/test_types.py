"""Every data type, with its extremes, in a column-mapping table with V2 checkpoints: rlcd's
compaction reads back through Spark exactly, and its stats equal those of Spark's OPTIMIZE.

One table is built (Spark is slow) and copied: Spark's OPTIMIZE compacts one copy, rlcd the
other; the tests below judge rlcd's copy.
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.spark.support import (
    SparkRows,
    compact,
    latest_version,
    log_actions,
    rows,
    rows_both_readers,
    verify,
)

pytestmark = pytest.mark.spark

COLUMNS = (
    "id BIGINT, b TINYINT, s SMALLINT, i INT, l BIGINT, f FLOAT, d DOUBLE, "
    "big DECIMAL(38, 0), small DECIMAL(38, 18), txt STRING, bin BINARY, flag BOOLEAN, "
    "day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, "
    "st STRUCT<a: INT, inner: STRUCT<c: STRING, x: DOUBLE>>, arr ARRAY<INT>, "
    "m MAP<STRING, DOUBLE>, gone STRING"
)
NINES = "9" * 38
EXTREMES = [
    # id, b, s, i, l, f, d, big, small, txt, bin, flag, day, ts, ntz
    (
        "-128",
        "-32768",
        "-2147483648",
        "-9223372036854775808",
        "CAST('-Infinity' AS FLOAT)",
        "CAST('NaN' AS DOUBLE)",
        f"-{NINES}",
        f"-{NINES[:20]}.{NINES[:18]}",
        "'a b'",
        "X'00'",
        "true",
        "DATE'0001-01-01'",
        "TIMESTAMP'0001-01-01 00:00:00'",
        "TIMESTAMP_NTZ'0001-01-01 00:00:00'",
    ),
    (
        "127",
        "32767",
        "2147483647",
        "9223372036854775807",
        "CAST('Infinity' AS FLOAT)",
        "CAST('-Infinity' AS DOUBLE)",
        NINES,
        f"{NINES[:20]}.{NINES[:18]}",
        "'zé 😀 end'",
        "X'FF00'",
        "false",
        "DATE'9999-12-31'",
        "TIMESTAMP'9999-12-31 23:59:59.999999'",
        "TIMESTAMP_NTZ'9999-12-31 23:59:59.999999'",
    ),
    (
        "0",
        "0",
        "0",
        "0",
        "CAST(-0.0 AS FLOAT)",
        "CAST(-0.0 AS DOUBLE)",
        "0",
        "0.000000000000000001",
        "''",
        "X''",
        "NULL",
        "DATE'1970-01-01'",
        "TIMESTAMP'1969-12-31 23:59:59.999'",
        "TIMESTAMP_NTZ'2262-04-11 23:47:16.854776'",
    ),
    (
        "1",
        "2",
        "3",
        "4",
        "CAST(0.234 AS FLOAT)",
        "1.5",
        "NULL",
        "-0.5",
        "NULL",
        "NULL",
        "true",
        "NULL",
        "TIMESTAMP'2026-12-01 09:00:00.123456'",
        "NULL",
    ),
]


def _row(n: int, values: tuple[str, ...]) -> str:
    nested = (
        f"named_struct('a', {n}, 'inner', named_struct('c', 'c{n}', 'x', {n}.5D))"
        if n % 3
        else "NULL"
    )
    array = f"array({n}, NULL, -{n})" if n % 2 else "NULL"
    mapping = f"map('k{n}', {n}.25D)" if n % 2 else "map()"
    return f"({n}, {', '.join(values)}, {nested}, {array}, {mapping}, 'drop me')"


@dataclass(frozen=True)
class Compacted:
    """The table before and after: rlcd's copy, Spark's copy, and what Spark read before."""

    rlcd: Path
    spark: Path
    rows: SparkRows
    version: int  # the last version before compaction


@pytest.fixture(scope="module")
def compacted(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Compacted:
    root = tmp_path_factory.mktemp("types")
    path = root / "rlcd"
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta TBLPROPERTIES ("
        "'delta.columnMapping.mode' = 'name', 'delta.checkpointPolicy' = 'v2', "
        "'delta.checkpointInterval' = '3', 'delta.enableDeletionVectors' = 'true')"
    )
    for n in range(6):
        values = EXTREMES[n % len(EXTREMES)]
        spark.sql(
            f"INSERT INTO delta.`{path}` VALUES {_row(2 * n, values)}, {_row(2 * n + 1, values)}"
        )
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN i TO renamed")
    spark.sql(f"ALTER TABLE delta.`{path}` DROP COLUMN gone")
    spark.sql(f"INSERT INTO delta.`{path}` (id, renamed) VALUES (100, 100)")
    version = latest_version(path)
    assert list((path / "_delta_log").glob("*.checkpoint.*.json"))  # a V2 checkpoint
    shutil.copytree(path, root / "spark")
    before = rows(spark, path)
    verify(path)
    compact(path)
    spark.sql(f"OPTIMIZE delta.`{root / 'spark'}`")
    return Compacted(path, root / "spark", before, version)


def _stats(path: Path) -> dict[str, Any]:
    (add,) = (a["add"] for a in log_actions(path, latest_version(path)) if "add" in a)
    return json.loads(add["stats"], parse_float=Decimal)


def _flat(tree: dict[str, Any], path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for key, value in tree.items():
        out |= _flat(value, (*path, key)) if isinstance(value, dict) else {(*path, key): value}
    return out


def _same(ours: Any, theirs: Any) -> bool:
    """Equal as Delta values. The documented differences: a float32 bound is the exact double
    (Spark writes the shortest float32 text) and timestamps are UTC with ``Z``."""
    if isinstance(ours, Decimal) and isinstance(theirs, Decimal):
        f32 = struct.Struct("f")
        if ours != theirs:
            return bool(f32.unpack(f32.pack(float(ours))) == f32.unpack(f32.pack(float(theirs))))
        return True
    if isinstance(ours, str) and isinstance(theirs, str) and ours[:1].isdigit() and "T" in ours:
        return datetime.fromisoformat(ours) == datetime.fromisoformat(theirs)
    return bool(ours == theirs)


def test_stats_equal_sparks_optimize(compacted: Compacted) -> None:
    """rlcd's output stats equal those of Spark's OPTIMIZE of the same data, field by field
    (NaN, ±Infinity and zero bounds of floats, decimal(38) extremes, dates and timestamps from
    year 1 to 9999, nested structs; physical column names)."""
    ours, theirs = _stats(compacted.rlcd), _stats(compacted.spark)
    assert ours["numRecords"] == theirs["numRecords"]
    assert ours["nullCount"] == theirs["nullCount"]
    assert ours.get("tightBounds") == theirs.get("tightBounds")
    for key in ("minValues", "maxValues"):
        mine, spark = _flat(ours[key]), _flat(theirs[key])
        assert mine.keys() == spark.keys(), key
        different = {p: (mine[p], v) for p, v in spark.items() if not _same(mine[p], v)}
        assert not different, key


def test_spark_reads_the_same_rows(spark: Any, compacted: Compacted) -> None:
    """Spark reads exactly the rows it read before, with the vectorized and the parquet-mr
    reader, and time travel to the version before rlcd's commit still works."""
    assert rows_both_readers(spark, compacted.rlcd) == compacted.rows
    assert rows(spark, compacted.rlcd, compacted.version) == compacted.rows
