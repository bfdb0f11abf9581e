"""Float bounds rlcd writes, as Spark writes them, and what independent readers make of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.storage import LocalStore
from tests.integration.tables import Rows, append, delta_rs_rows, kernel_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

NAN, INF = math.nan, math.inf
FILES = [[1.5, NAN], [-INF, 2.0], [-0.0, 0.25], [INF, None]]


def _spelled(rows: Rows) -> list[str]:
    """Rows as sorted text: NaN equals NaN, -0.0 differs from 0.0."""
    return sorted(repr(row) for row in rows.elements())


def _count(path: Path, where: str) -> int:
    table = deltalake.DeltaTable(str(path))
    query = deltalake.QueryBuilder().register("t", table)
    return int(query.execute(f"SELECT count(*) AS n FROM t {where}").read_all()["n"][0].as_py())


async def test_nan_infinities_and_zero_bounds_are_sparks(tmp_path: Path) -> None:
    """A compacted float column holding NaN, ±Infinity and -0.0 gets Spark's bounds
    (``"-Infinity"`` .. ``"NaN"``), and delta-rs's data skipping over them, like the kernel's
    and delta-rs's scans, still finds every row."""
    for values in FILES:
        append(tmp_path, pa.table({"x": pa.array(values, pa.float64()), "z": [-0.0] * 2}))
    predicates = ["", "WHERE x > 1", "WHERE x < 0", "WHERE x = 0", "WHERE isnan(x)", "WHERE z = 0"]
    counts = {p: _count(tmp_path, p) for p in predicates}
    rows = _spelled(delta_rs_rows(tmp_path))
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, CompactionPolicy(target_file_size=1 << 20))
    assert report.committed_version is not None
    log = tmp_path / "_delta_log" / f"{report.committed_version:020d}.json"
    (add,) = (a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a)
    stats = json.loads(add["stats"], parse_float=str)
    assert stats["minValues"] == {"x": "-Infinity", "z": "0.0"}
    assert stats["maxValues"] == {"x": "NaN", "z": "0.0"}
    assert {p: _count(tmp_path, p) for p in predicates} == counts
    assert counts["WHERE isnan(x)"] == 1 and counts["WHERE x = 0"] == 1
    assert _spelled(delta_rs_rows(tmp_path)) == rows
    assert _spelled(kernel_rows(tmp_path)) == rows
