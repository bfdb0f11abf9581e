"""Float bounds rlcd writes, as Spark writes them, and what independent readers make of them."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from deltalake import WriterProperties

from rlcd.compaction import _copy
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


async def test_copied_float_stats_from_dictionaries_equal_reencodings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copied row groups whose float chunks' dictionaries prove them NaN-free take their
    stats from those (no decoding); one holding a NaN is decoded. The output's stats equal
    those of re-encoding every row."""
    given: list[object] = []
    spied = _copy.chunk_float_stats

    def spy(*args: object) -> object:
        given.append(result := spied(*args))  # type: ignore[arg-type]
        return result

    monkeypatch.setattr(_copy, "chunk_float_stats", spy)
    props = WriterProperties(max_row_group_size=500)
    for f in range(3):
        x = [(i % 37) / 4 - 2 if i % 7 else None for i in range(f * 1000, f * 1000 + 1000)]
        x[3] = -0.0
        if f == 1:
            x[600] = NAN  # its second row group only
        table = pa.table({"id": pa.array(range(1000)), "x": pa.array(x, pa.float64())})
        deltalake.write_deltalake(
            str(tmp_path / "t"), table, mode="append", writer_properties=props
        )
    shutil.copytree(tmp_path / "t", tmp_path / "r")
    rows = _spelled(delta_rs_rows(tmp_path / "t"))
    stats = []
    for name, rewrite in (("t", "auto"), ("r", "reencode")):
        async with LocalStore(tmp_path / name) as store:
            policy = CompactionPolicy(min_copy_row_group=1, rewrite=rewrite)
            report = await compact_table(store, policy)
        assert report.committed_version is not None and not report.failed
        log = tmp_path / name / "_delta_log" / f"{report.committed_version:020d}.json"
        (add,) = (a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a)
        stats.append(json.loads(add["stats"], parse_float=str))
        assert _spelled(delta_rs_rows(tmp_path / name)) == rows
    assert report.committed[0].copied_row_groups == 0
    assert len(given) == 6 and sum(g is None for g in given) == 1
    assert stats[0] == stats[1]
    assert stats[0]["maxValues"]["x"] == "NaN" and stats[0]["minValues"]["x"] == "-2.0"
