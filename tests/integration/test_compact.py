"""``rlcd compact`` end to end on local and moto-S3 tables, judged by delta-rs and the kernel.

After a compaction both readers return the same multiset of rows as before, the file count
drops as planned, ``verify`` passes, and a second run plans nothing.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio
import pyarrow.parquet as pq
import pytest

from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot
from rlcd.errors import UnsupportedFeatureError
from rlcd.operations._dv_writer import delete_rows
from rlcd.operations.verify import verify_table
from rlcd.parquet._splice import SplicedFile
from rlcd.storage import LocalStore, open_store
from tests.conftest import fixture_table
from tests.integration.tables import (
    MAKERS,
    S3Mirror,
    append,
    batch,
    delta_rs_rows,
    kernel_rows,
    live_files,
    partitioned,
    rows_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)
FIXTURE_KINDS = [
    "dv-with-columnmapping",
    "table-with-columnmapping-mode-name",
    "table-with-columnmapping-mode-id",
    "basic-dv-no-checkpoint",
    "basic-dv-with-checkpoint",
    "krs-with-short-dv",
    "time-travel-schema-changes-a",
    "type-widening",
]


async def _delete_some(uri: str, s3: object) -> None:
    """Delete a few rows of the first two files through rlcd's DV writer."""
    async with open_store(uri, s3=s3) as store:  # type: ignore[arg-type]
        snap = await load_snapshot(store)
        first, second = list(snap.files)[:2]
        await delete_rows(store, snap, {first: [0, 5, 6], second: list(range(0, 30, 2))})


async def _compact_and_check(
    uri: str, s3: object, local: Callable[[], Path], policy: CompactionPolicy = POLICY
) -> CompactionReport:
    before_files = live_files(local())
    before = delta_rs_rows(local())
    assert kernel_rows(local()) == before
    async with open_store(uri, s3=s3) as store:  # type: ignore[arg-type]
        report = await compact_table(store, policy)
        assert report.planned, "the table has small files to compact"
        assert not report.failed
        assert report.committed_version is not None
        assert report.untagged == 0
        verification = await verify_table(store)
        assert verification.ok, verification
        assert sum(c.sources_checked for c in verification.commits) >= report.files_removed
        again = await compact_table(store, policy)
        assert again.planned == ()
    path = local()
    assert delta_rs_rows(path) == before
    assert kernel_rows(path) == before
    assert live_files(path) == before_files - report.files_removed + report.files_added
    return report


@pytest.mark.parametrize("kind", sorted(MAKERS))
async def test_compact_local(tmp_path: Path, kind: str) -> None:
    """Tables written by delta-rs (and DVs by rlcd) compact without changing a row."""
    MAKERS[kind](tmp_path)
    if kind == "deletion-vectors":
        await _delete_some(str(tmp_path), None)
    await _compact_and_check(str(tmp_path), None, lambda: tmp_path)


@pytest.mark.parametrize("deletes", [False, True], ids=["plain", "dvs"])
async def test_a_lone_bin_of_many_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deletes: bool
) -> None:
    """A bin alone on the machine encodes each row group in two threads, in parts of its
    fields (``rlcd.parquet.split_writer``): the readers read its many row groups whole."""
    parted = []
    add_columns = SplicedFile.add_columns
    monkeypatch.setattr(
        SplicedFile, "add_columns", lambda self, parts: parted.append(1) or add_columns(self, parts)
    )
    dvs = {"delta.enableDeletionVectors": "true"}
    for i in range(6):
        tags = [[str(j)] * (j % 3) for j in range(200)]
        append(tmp_path, batch(i * 200, 200, tags=tags), configuration=dvs if i == 0 else None)
    if deletes:
        await _delete_some(str(tmp_path), None)
    policy = dataclasses.replace(POLICY, row_group_rows=150)
    report = await _compact_and_check(str(tmp_path), None, lambda: tmp_path, policy)
    (out,) = report.committed
    assert pq.read_metadata(tmp_path / out.key).num_row_groups == 6
    assert len(parted) == 5  # the first row group comes whole


@pytest.mark.parametrize("name", FIXTURE_KINDS)
async def test_compact_fixture_copies(copy_fixture: Callable[[str], Path], name: str) -> None:
    """Spark-written tables (DVs, column mapping, checkpoints, widening, evolution) compact."""
    path = copy_fixture(name)
    await _compact_and_check(str(path), None, lambda: path)


@pytest.mark.parametrize("kind", ["partitioned", "deletion-vectors", "schema-evolution"])
async def test_compact_on_s3(tmp_path: Path, s3_bucket: str, moto_endpoint: str, kind: str) -> None:
    """The same on moto's S3: no incomplete multipart upload is left behind."""
    source = tmp_path / "src"
    MAKERS[kind](source)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(source, "tables/t1")
    if kind == "deletion-vectors":
        await _delete_some(uri, mirror.config)
    await _compact_and_check(
        uri, mirror.config, lambda: mirror.download("tables/t1", tmp_path / "copy")
    )
    assert mirror.multipart_uploads() == 0


async def test_dv_fixture_on_s3(tmp_path: Path, s3_bucket: str, moto_endpoint: str) -> None:
    """A Spark DV table with checkpoints compacts on S3."""
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(fixture_table("dv-with-columnmapping"), "spark/dv")
    await _compact_and_check(
        uri, mirror.config, lambda: mirror.download("spark/dv", tmp_path / "c")
    )


async def test_dry_run_writes_nothing(copy_fixture: Callable[[str], Path]) -> None:
    """A dry run plans bins and leaves every file as it was."""
    path = copy_fixture("dv-with-columnmapping")
    before = {p: p.stat().st_mtime_ns for p in path.rglob("*")}
    async with open_store(str(path)) as store:
        report = await compact_table(store, POLICY, dry_run=True)
    assert report.planned and report.committed_version is None
    assert {p: p.stat().st_mtime_ns for p in path.rglob("*")} == before
    shutil.rmtree(path)


async def test_outputs_that_compress_better_are_not_compacted_again(tmp_path: Path) -> None:
    """Snappy sources rewritten as zstd come out smaller than their bins were estimated, even
    under the small-file threshold; tagged with the target they were made for, the next run
    leaves them alone, and folds them in once new small files arrive."""
    for i in range(12):
        append(tmp_path, batch(i * 5000, 5000))
    size = max(p.stat().st_size for p in tmp_path.glob("*.parquet"))
    policy = CompactionPolicy(target_file_size=4 * size + 1)
    before = delta_rs_rows(tmp_path)
    async with open_store(str(tmp_path)) as store:
        first = await compact_table(store, policy)
        assert len(first.committed) == 3
        assert all(b.size < policy.small_file_threshold for b in first.committed)
        assert (await compact_table(store, policy)).planned == ()
        new = [batch(100_000 + i * 10, 10) for i in range(2)]
        for rows in new:
            append(tmp_path, rows)
        third = await compact_table(store, policy)
    assert [len(b.sources) for b in third.planned] == [5]
    assert live_files(tmp_path) == 1
    assert delta_rs_rows(tmp_path) == before + rows_of(new[0]) + rows_of(new[1])


@pytest.mark.parametrize(
    "temp", ["_delta_log/.tmp/00000000000000000005.json.1b2c", "_delta_log/_commit_9f1e.json.tmp"]
)
async def test_s3_table_with_dynamodb_writers_is_refused(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, temp: str
) -> None:
    """A temporary commit file of a writer coordinating through DynamoDB (Spark's
    S3DynamoDBLogStore, or delta-rs 1.6.0 and older) means commits rlcd cannot see: the table
    is refused, the file named, before anything is planned or written."""
    source = tmp_path / "src"
    MAKERS["unpartitioned"](source)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(source, "tables/t")
    mirror._client.put_object(Bucket=s3_bucket, Key=f"tables/t/{temp}", Body=b"{}")
    async with open_store(uri, s3=mirror.config) as store:
        with pytest.raises(UnsupportedFeatureError, match="DynamoDB") as info:
            await compact_table(store, POLICY, dry_run=True)
        with pytest.raises(UnsupportedFeatureError):
            await compact_table(store, POLICY)
    assert temp in str(info.value) and info.value.features == ("externalCommitCoordination",)
    copy = mirror.download("tables/t", tmp_path / "after")
    assert not [p for p in copy.rglob("*.parquet") if p.name.endswith(".zstd.parquet")]


async def test_the_callers_memory_pool_is_kept(tmp_path: Path) -> None:
    """A program calling the compaction as a library keeps the Arrow memory pool it chose: the
    compaction sets no process-wide pool (the command chooses one at start, rlcd.cli.process)."""
    import pyarrow as pa

    partitioned(tmp_path)
    chosen = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        async with LocalStore(tmp_path) as store:
            report = await compact_table(store, POLICY)
        assert report.committed and not report.failed
        assert pa.default_memory_pool().backend_name == "system"
    finally:
        pa.set_memory_pool(chosen)


async def test_more_bins_at_once_than_anyio_has_threads(tmp_path: Path) -> None:
    """45 bins rewritten 44 at a time (a 43-core machine): the stages do not compete with the
    store's IO for anyio's 40 shared threads, so the run cannot deadlock."""
    import pyarrow as pa

    from tests.integration.tables import append

    for _ in range(2):
        parts = [f"p{i:02d}" for i in range(45)]
        append(tmp_path, pa.table({"id": list(range(45)), "part": parts}), partition_by=["part"])
    async with LocalStore(tmp_path) as store:
        with anyio.fail_after(60):
            report = await compact_table(store, POLICY, bin_concurrency=44)
    assert len(report.committed) == 45 and not report.failed


async def test_a_cancelled_run_leaves_no_output_behind(tmp_path: Path) -> None:
    """Cancelled after its first bin was written (a daemon stopping, Ctrl-C): nothing is
    committed and that bin's output is deleted, not left for VACUUM."""
    import pyarrow as pa

    from tests.integration.tables import append

    for _ in range(2):
        parts = [f"p{i}" for i in range(4)]
        append(tmp_path, pa.table({"id": list(range(4)), "part": parts}), partition_by=["part"])
    before = set(tmp_path.rglob("*.parquet"))
    async with LocalStore(tmp_path) as store:
        with anyio.CancelScope() as scope:
            await compact_table(
                store, POLICY, bin_concurrency=1, on_bin_done=lambda _bin: scope.cancel()
            )
        assert scope.cancelled_caught
        assert (await load_snapshot(store)).version == 1
    assert set(tmp_path.rglob("*.parquet")) == before
