"""Spark's DML racing rlcd's compaction, with real interleavings, in both directions.

- Spark wins: rlcd's commit put is held (:class:`~tests.integration.races.HoldingStore`) until a
  Spark ``DELETE`` or ``UPDATE`` on a source of the bin has committed; the put then meets
  Spark's commit and rlcd reconciles or aborts the bin as the conflict matrix says.
- rlcd wins: Spark's ``DELETE`` is held mid-scan (after it read its snapshot, before its
  commit) by a Python UDF in its predicate (:class:`Gate`) while rlcd commits; it then fails as
  it fails against Spark's own ``OPTIMIZE`` in the same interleaving, and its retry succeeds.

Spark is the judge (vectorized and parquet-mr readers), with ``rlcd verify``. Every table is a
copy of one Spark-built template: ids 0-39 in four files of ten, DVs on.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from rlcd.compaction.commit import BinAborted
from rlcd.compaction.compact import CompactionReport
from rlcd.delta.actions import AddFile
from rlcd.delta.load import load_snapshot
from rlcd.delta.names import rlcd_file_uuid
from rlcd.storage import LocalStore
from tests.integration import races
from tests.spark.support import (
    SparkRows,
    compact,
    frame_rows,
    latest_version,
    rows,
    rows_both_readers,
    verify,
)

pytestmark = pytest.mark.spark

FILES, PER_FILE = 4, 10
ALL = frozenset(range(FILES * PER_FILE))
HANG_GUARD_S = 300  # only so that a broken interleaving fails instead of hanging the run


@pytest.fixture(scope="module")
def template(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """File k holds ids 10k..10k+9 (one Spark write each), DVs enabled."""
    path = tmp_path_factory.mktemp("races") / "template"
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    for k in range(FILES):
        start = k * PER_FILE
        spark.sql(f"INSERT INTO delta.`{path}` SELECT id FROM range({start}, {start + 10}, 1, 1)")
    return path


def _copy(template: Path, to: Path) -> Path:
    shutil.copytree(template, to)
    return to


def _id_rows(spark: Any, ids: frozenset[int]) -> SparkRows:
    """The rows of a table holding exactly ``ids``, as :func:`rows` gives them."""
    return frame_rows(spark.createDataFrame([(i,) for i in sorted(ids)], "id BIGINT"))


async def _live(path: Path) -> list[AddFile]:
    async with LocalStore(path) as store:
        return list((await load_snapshot(store)).files.values())


# --- Spark's DML wins against rlcd's held commit ---------------------------------------------


@dataclass(frozen=True)
class Winner:
    """A Spark statement that commits while rlcd's commit put is held, and what follows."""

    dml: str
    expected: frozenset[int]
    decision: str  # the bin's decision (rlcd.compaction.commit.BinResult.decision)
    before: str | None = None  # a statement run before the compaction reads the table
    reason: str | None = None  # the abort reason, for an aborted bin


WINNERS = {
    "dv-delete": Winner(
        "DELETE FROM {t} WHERE id IN (12, 15)", ALL - {12, 15}, "reconciled_by_remap"
    ),
    "dv-update": Winner(
        "UPDATE {t} SET id = id + 1000 WHERE id IN (12, 15)",
        ALL - {12, 15} | {1012, 1015},
        "reconciled_by_remap",
    ),
    "whole-file-delete": Winner(
        "DELETE FROM {t} WHERE id BETWEEN 10 AND 19",
        ALL - set(range(10, 20)),
        "reconciled_by_mask",
    ),
    "copy-on-write-delete": Winner(
        "DELETE FROM {t} WHERE id = 15",
        ALL - {15},
        "aborted",
        before="ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')",
        reason="dvs_not_enabled",
    ),
}


@pytest.mark.parametrize("winner", WINNERS.values(), ids=WINNERS.keys())
def test_rlcd_reconciles_sparks_dml(
    spark: Any, template: Path, tmp_path: Path, winner: Winner
) -> None:
    """rlcd's compaction commit is held until Spark's DML on a source of the bin commits: a DV
    DELETE or UPDATE is remapped onto rlcd's output, a DELETE that empties a source is masked,
    and a copy-on-write DELETE (DVs off) aborts the bin with nothing of rlcd's left; Spark then
    reads exactly the rows its DML left, and rlcd verify passes."""
    path = _copy(template, tmp_path / "t")
    table = f"delta.`{path}`"
    if winner.before is not None:
        spark.sql(winner.before.format(t=table))
    race = races.RaceTable(str(path), None, None, lambda: path)
    committed: list[SparkRows] = []

    async def spark_dml() -> None:
        await anyio.to_thread.run_sync(spark.sql, winner.dml.format(t=table))
        committed.append(rows(spark, path))

    report: CompactionReport = anyio.run(races.compact, race, [spark_dml])
    (result,) = report.bin_results
    assert result.decision == winner.decision
    assert committed == [_id_rows(spark, winner.expected)]
    assert rows_both_readers(spark, path) == committed[0]
    if isinstance(result, BinAborted):
        assert result.abort.reason == winner.reason
        assert report.committed_version is None
        assert not anyio.run(races.rlcd_files, race)
    else:
        assert report.committed_version == latest_version(path)
        (output,) = (a for a in anyio.run(_live, path) if rlcd_file_uuid(a.path.rsplit("/")[-1]))
        assert output.deletion_vector is not None
    verify(path)


# --- rlcd's compaction wins against Spark's held DELETE --------------------------------------


@dataclass(frozen=True)
class Gate:
    """The Python UDF ``gate(x)``, always true, deterministic: the Spark task evaluating it
    creates ``reached`` and then waits until ``release`` exists. A DML whose predicate calls it
    has read its snapshot and chosen its files, and cannot commit until the test releases it."""

    reached: Path
    release: Path

    def register(self, spark: Any) -> None:
        from pyspark.sql.types import BooleanType

        reached, release = str(self.reached), str(self.release)

        def gate(_: int) -> bool:
            open(reached, "a").close()
            _wait(lambda: os.path.exists(release), "the test to release the gate")
            return True

        spark.udf.register("gate", gate, BooleanType())

    def hold(self, start: Callable[[], Any], winner: Callable[[], object]) -> BaseException | None:
        """Run ``start`` in a thread until it reaches the gate, commit ``winner``, release the
        gate; what ``start`` raised."""
        self.reached.unlink(missing_ok=True)
        self.release.unlink(missing_ok=True)
        with ThreadPoolExecutor(1) as pool:
            held: Future[Any] = pool.submit(start)
            _wait(lambda: self.reached.exists() or held.done(), "Spark to reach the gate")
            assert not held.done(), f"Spark passed no gate: {held.exception()}"
            winner()
            self.release.touch()
            return held.exception()


def _wait(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def gate(spark: Any, tmp_path: Path) -> Iterator[Gate]:
    registered = Gate(tmp_path / "reached", tmp_path / "release")
    registered.register(spark)
    yield registered
    registered.release.touch()  # never leave a Spark task waiting


def _java_class(error: BaseException | None) -> str:
    """The JVM exception class behind a failed PySpark call."""
    from py4j.protocol import Py4JJavaError

    assert isinstance(error, Py4JJavaError), repr(error)
    return str(error.java_exception.getClass().getName())


def test_spark_delete_losing_to_rlcd_fails_as_against_sparks_optimize(
    spark: Any, template: Path, tmp_path: Path, gate: Gate
) -> None:
    """A Spark DELETE that read the table before rlcd's compaction committed fails with the
    exception it raises when Spark's own OPTIMIZE commits at that point
    (ConcurrentAppendException), commits nothing, and its retry succeeds on rlcd's output."""
    theirs, ours = _copy(template, tmp_path / "spark"), _copy(template, tmp_path / "rlcd")

    def held_delete(path: Path) -> Callable[[], Any]:
        return lambda: spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 15 AND gate(id)")

    optimize = f"OPTIMIZE delta.`{theirs}`"
    against_spark = gate.hold(held_delete(theirs), lambda: spark.sql(optimize))
    against_rlcd = gate.hold(held_delete(ours), lambda: compact(ours))
    assert _java_class(against_spark) == "io.delta.exceptions.ConcurrentAppendException"
    assert _java_class(against_rlcd) == _java_class(against_spark)
    compacted = latest_version(ours)
    assert rows(spark, ours) == _id_rows(spark, ALL)
    spark.sql(f"DELETE FROM delta.`{ours}` WHERE id = 15")
    assert latest_version(ours) == compacted + 1
    assert rows_both_readers(spark, ours) == _id_rows(spark, ALL - {15})
    (live,) = anyio.run(_live, ours)
    assert rlcd_file_uuid(live.path.rsplit("/")[-1]) and live.deletion_vector is not None
    verify(ours)
