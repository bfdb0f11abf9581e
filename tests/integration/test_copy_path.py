"""The copy path (issue 39): outputs of copied and re-encoded row groups, judged by readers rlcd
does not own. Each table is compacted twice, on two copies: with ``rewrite = "auto"`` (row
groups copied wherever the plan allows) and with ``rewrite = "reencode"`` (today's path). The
outputs must hold the same rows in the same order (pyarrow), the tables the same rows
(delta-rs and the kernel), the commits the same stats and composition tags, and ``verify``
must pass."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import BloomFilterProperties, ColumnProperties, WriterProperties

from rlcd.cli.report import print_plan
from rlcd.compaction import rewrite
from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.summary import bin_lines
from rlcd.daemon.metrics import Metrics
from rlcd.delta.load import load_snapshot
from rlcd.delta.names import rlcd_file_uuid
from rlcd.operations._dv_writer import delete_rows
from rlcd.operations.verify import verify_table
from rlcd.storage import S3Client, open_store
from tests.conftest import fixture_table
from tests.contract.faultproxy import Fault, FaultProxy
from tests.contract.support import boto_client, moto_config
from tests.integration.tables import S3Mirror, batch, delta_rs_rows, kernel_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

CODECS: tuple[Literal["SNAPPY", "ZSTD", "GZIP", "UNCOMPRESSED"], ...] = (
    "SNAPPY",
    "ZSTD",
    "GZIP",
    "UNCOMPRESSED",
)


def _write(path: Path, table: pa.Table, i: int, **kw: Any) -> None:
    """One append by delta-rs: row groups of 500 rows, the codec taking turns."""
    props = WriterProperties(max_row_group_size=500, compression=CODECS[i % len(CODECS)])
    deltalake.write_deltalake(str(path), table, mode="append", writer_properties=props, **kw)


def _nested(start: int, n: int) -> pa.Table:
    ids = range(start, start + n)
    return batch(
        start,
        n,
        point=pa.array(
            [{"x": i, "tags": [str(i)] * (i % 3)} if i % 7 else None for i in ids],
            pa.struct([("x", pa.int32()), ("tags", pa.list_(pa.string()))]),
        ),
        attrs=pa.array(
            [[("k", i)] if i % 5 else None for i in ids], pa.map_(pa.string(), pa.int64())
        ),
    )


def plain(path: Path) -> None:
    for i in range(4):
        _write(path, batch(i * 1_500, 1_500), i)


def partitioned(path: Path) -> None:
    for i in range(6):
        part = ["a", "b"][i % 2]
        _write(path, batch(i * 1_000, 1_000, part=[part] * 1_000), i, partition_by=["part"])


def nested(path: Path) -> None:
    for i in range(3):
        _write(path, _nested(i * 1_200, 1_200), i)


def evolved(path: Path) -> None:
    """Older files lack the column newer ones have: they are re-encoded, the newer copied."""
    for i in range(2):
        _write(path, batch(i * 1_000, 1_000), i)
    for i in range(2, 4):
        _write(path, batch(i * 1_000, 1_000, extra=[f"x{i}"] * 1_000), i, schema_mode="merge")


def indexed(path: Path) -> None:
    """Sources with page indexes (column and offset) and a bloom filter on every column."""
    bloom = ColumnProperties(
        statistics_enabled="PAGE", bloom_filter_properties=BloomFilterProperties(True, 0.01)
    )
    for i in range(3):
        props = WriterProperties(
            max_row_group_size=500,
            compression=CODECS[i % len(CODECS)],
            default_column_properties=bloom,
        )
        deltalake.write_deltalake(
            str(path), batch(i * 1_500, 1_500), mode="append", writer_properties=props
        )
    (source, *_) = sorted(path.glob("*.parquet"))
    chunk = pq.read_metadata(source).row_group(0).column(0)
    assert chunk.has_column_index and chunk.has_offset_index and chunk.bloom_filter_offset


async def _delete_some(path: Path) -> None:
    async with open_store(str(path)) as store:
        snap = await load_snapshot(store)
        files = list(snap.files)
        await delete_rows(store, snap, {files[0]: [0, 5, 600], files[2]: list(range(0, 900, 3))})


def with_dvs(path: Path) -> None:
    """Clean sources and DV'd ones, alternating, in one bin."""
    config = {"delta.enableDeletionVectors": "true"}
    for i in range(4):
        _write(path, batch(i * 1_000, 1_000), i, configuration=config if i == 0 else None)


MAKERS: dict[str, Callable[[Path], None]] = {
    "plain": plain,
    "partitioned": partitioned,
    "nested": nested,
    "evolved": evolved,
    "with-dvs": with_dvs,
    "indexed": indexed,
}
"""Each table, by name; every one has several row groups per source and mixed codecs."""

COPY_ALL = {"min_copy_row_group": 1}
"""A policy that copies every row group the plan allows, however small."""


async def _compact(uri: str, s3: object = None, **policy: Any) -> CompactionReport:
    async with open_store(uri, s3=s3) as store:  # type: ignore[arg-type]
        report = await compact_table(store, CompactionPolicy(**policy))
        assert report.planned and not report.failed
        assert report.committed_version is not None
        verified = await verify_table(store)
        assert verified.ok, verified
    return report


def _commit(path: Path, version: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The adds and removes of a commit, each in a stable order (outputs by partition)."""
    log = (path / f"_delta_log/{version:020d}.json").read_text()
    actions = [json.loads(line) for line in log.splitlines()]
    adds = sorted(
        (a["add"] for a in actions if "add" in a), key=lambda a: str(a["partitionValues"])
    )
    removes = sorted((a["remove"] for a in actions if "remove" in a), key=lambda r: r["path"])
    return adds, removes


def _tags(remove: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
    """A remove's composition tags, its output named by partition, not by its random name."""
    tags = dict(remove.get("tags") or {})
    if "compactedInto" in tags:
        tags["compactedInto"] = [outputs[p] for p in json.loads(tags["compactedInto"])]
    return tags


def _same_outputs(auto: Path, reencoded: Path, version: int) -> None:
    """Both runs wrote the same rows in the same order, the same stats and the same tags."""
    adds_a, removes_a = _commit(auto, version)
    adds_r, removes_r = _commit(reencoded, version)
    assert len(adds_a) == len(adds_r) and len(removes_a) == len(removes_r)
    for a, r in zip(adds_a, adds_r, strict=True):
        assert a["partitionValues"] == r["partitionValues"]
        read_a = pq.read_table(auto / a["path"])
        read_r = pq.read_table(reencoded / r["path"])
        assert read_a.to_pylist() == read_r.to_pylist()  # the same rows, in the same order
        assert json.loads(a["stats"]) == json.loads(r["stats"])
    names_a = {a["path"]: str(a["partitionValues"]) for a in adds_a}
    names_r = {r["path"]: str(r["partitionValues"]) for r in adds_r}
    for a, r in zip(removes_a, removes_r, strict=True):
        assert a["path"] == r["path"]
        assert _tags(a, names_a) == _tags(r, names_r)
        assert "compactionInfo" in a["tags"]  # the capture guard held: the bin is tagged


async def _pair(tmp_path: Path, make: Callable[[Path], None]) -> tuple[Path, Path]:
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    make(auto)
    if make is with_dvs:
        await _delete_some(auto)
    shutil.copytree(auto, reencoded)
    return auto, reencoded


@pytest.mark.parametrize("kind", list(MAKERS))
async def test_a_copied_output_reads_back_like_a_reencoded_one(tmp_path: Path, kind: str) -> None:
    """Every table shape: row groups copied where the plan allows (and only there), the rest
    re-encoded, and the outputs, stats and tags are those of the re-encode path; delta-rs
    and the kernel read the rows they read before."""
    auto, reencoded = await _pair(tmp_path, MAKERS[kind])
    before = delta_rs_rows(auto)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    other = await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    assert report.committed_version is not None
    assert report.committed_version == other.committed_version
    copied = sum(b.copied_row_groups for b in report.committed)
    assert copied > 0 and all(b.copied_row_groups == 0 for b in other.committed)
    if kind in ("evolved", "with-dvs"):  # something re-encoded beside the copies
        assert any(b.copied_bytes and b.reencoded_bytes > 4_096 for b in report.committed)
    _same_outputs(auto, reencoded, report.committed_version)
    assert delta_rs_rows(auto) == before == kernel_rows(auto)
    assert all("row group" in line for line in bin_lines(report)), bin_lines(report)
    metrics = Metrics()
    metrics.record_compaction("t", report, now_s=0)
    rendered = metrics.render().decode()
    copied_bytes = sum(b.copied_bytes for b in report.committed)
    assert f'rlcd_bytes_copied_total{{table="t",where="local"}} {float(copied_bytes)}' in rendered
    assert "rlcd_bytes_reencoded_total" in rendered


async def test_recompressing_copies_only_row_groups_of_the_codec(tmp_path: Path) -> None:
    """With ``recompress``, row groups of another codec than the output's are re-encoded:
    of the four delta-rs files (snappy, zstd, gzip, none) only the zstd one's are copied."""
    auto, reencoded = await _pair(tmp_path, plain)
    report = await _compact(str(auto), recompress=True, **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode")
    assert [b.copied_row_groups for b in report.committed] == [3]
    _same_outputs(auto, reencoded, report.committed_version or 0)


async def test_the_default_reencodes_small_row_groups(tmp_path: Path) -> None:
    """With the default ``min_copy_row_group``, a streaming writer's small row groups are
    merged into full ones by re-encoding, never copied."""
    auto, _ = await _pair(tmp_path, plain)
    report = await _compact(str(auto))
    assert all(b.copied_row_groups == 0 for b in report.committed)
    adds, _ = _commit(auto, report.committed_version or 0)
    assert pq.read_metadata(auto / adds[0]["path"]).num_row_groups == 1


@pytest.mark.parametrize(
    "fixture", ["table-with-columnmapping-mode-name", "table-with-columnmapping-mode-id"]
)
async def test_column_mapping_tables_compact_alike(tmp_path: Path, fixture: str) -> None:
    """Spark's column-mapped files (physical names, field ids): whatever the plan copies, the
    output reads back as the re-encode path's."""
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    shutil.copytree(fixture_table(fixture), auto)
    shutil.copytree(auto, reencoded)
    before = delta_rs_rows(auto)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    _same_outputs(auto, reencoded, report.committed_version or 0)
    assert delta_rs_rows(auto) == before


async def test_a_copied_output_on_s3(tmp_path: Path, s3_bucket: str, moto_endpoint: str) -> None:
    """On moto's S3: copied ranges fetched and uploaded through the multipart writer, the
    footer read back from the object; the same output as the re-encode path, no upload left."""
    source = tmp_path / "src"
    with_dvs(source)
    await _delete_some(source)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    auto_uri = mirror.upload(source, "tables/auto")
    reencode_uri = mirror.upload(source, "tables/reencode")
    report = await _compact(auto_uri, mirror.config, rewrite="auto", **COPY_ALL)
    await _compact(reencode_uri, mirror.config, rewrite="reencode", **COPY_ALL)
    assert sum(b.copied_row_groups for b in report.committed) > 0
    auto = mirror.download("tables/auto", tmp_path / "auto")
    reencoded = mirror.download("tables/reencode", tmp_path / "reencode")
    _same_outputs(auto, reencoded, report.committed_version or 0)
    assert delta_rs_rows(auto) == delta_rs_rows(source)
    assert mirror.multipart_uploads() == 0


async def test_a_dry_run_says_what_each_bin_would_copy(tmp_path: Path) -> None:
    """``--dry-run`` reads the footers and shows per bin the row groups it would copy and
    re-encode, and writes nothing."""
    evolved(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    async with open_store(str(tmp_path)) as store:
        report = await compact_table(store, CompactionPolicy(**COPY_ALL), dry_run=True)
    out = io.StringIO()
    print_plan(report, out)
    assert "copies 4 row groups" in out.getvalue() and "re-encodes 4 row groups" in out.getvalue()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("least", [3_000, 9_000])
async def test_a_dry_run_reads_a_small_files_footer_only_when_its_bin_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, least: int
) -> None:
    """A source smaller than ``min_copy_row_group`` cannot hold a row group to copy: its footer
    is read only when another source's row group is copied (the plan then needs its row
    groups), and the report says what reading every footer says: with row groups of 3.3-8.4 kB
    and two files under 2 kB, at 3 kB the big files' 12 row groups are copied and the small
    ones' 2 re-encoded; at 9 kB nothing is copied and only the big files' footers are read."""
    for i, rows in enumerate([3_000, 3_000, 20, 20]):
        _write(tmp_path, batch(i * 3_000, rows), i)
    files = {p.name: p for p in tmp_path.glob("*.parquet")}
    small = {name for name, p in files.items() if p.stat().st_size < least}
    assert len(small) == 2
    read: list[str] = []
    original = rewrite.read_footer

    async def recording(store: Any, key: str, size: int) -> bytes:
        read.append(Path(key).name)
        return await original(store, key, size)

    monkeypatch.setattr(rewrite, "read_footer", recording)
    async with open_store(str(tmp_path)) as store:
        policy = CompactionPolicy(min_copy_row_group=least)
        report = await compact_table(store, policy, dry_run=True)
    (copy,) = report.copies
    if least == 9_000:
        assert copy is None
        assert sorted(read) == sorted(set(files) - small)
        return
    assert sorted(read) == sorted(files)
    spans = [
        sum(meta.row_group(0).column(c).total_compressed_size for c in range(meta.num_columns))
        for meta in (pq.read_metadata(files[name]) for name in small)
    ]
    assert copy is not None
    assert (copy.copied_row_groups, copy.reencoded_row_groups) == (12, 2)
    assert copy.reencoded_bytes == sum(spans)


async def test_a_dry_run_reads_the_copy_plans_of_its_first_bins_a_few_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run with a budget of ``copy_plans`` plans the first bins that may copy, in plan
    order (bins of small files cost nothing and are not counted), at most ``bin_concurrency``
    at once; the others keep no copy plan, and the report counts both."""
    for i in range(2):  # six partitions: two of small files, four of files that may copy
        for p in range(6):
            n = 20 if p < 2 else 3_000
            start = i * 20_000 + p * 3_000
            _write(tmp_path, batch(start, n, part=[f"p{p}"] * n), i, partition_by=["part"])
    running, most = 0, 0
    original = rewrite.plan_bin_copy

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            return await original(*args, **kwargs)
        finally:
            running -= 1

    monkeypatch.setattr(rewrite, "plan_bin_copy", counting)
    policy = CompactionPolicy(min_copy_row_group=3_000)
    async with open_store(str(tmp_path)) as store:
        every = await compact_table(store, policy, dry_run=True, bin_concurrency=2)
        assert most == 2
        some = await compact_table(store, policy, dry_run=True, copy_plans=3)
    ids = [b.bin_id for b in every.planned]
    assert len(ids) == 6 and [b.bin_id for b in some.planned] == ids
    may = [c is not None for c in every.copies]
    assert sum(may) == 4 and (every.copy_plans_read, every.copy_plans_unread) == (4, 0)
    first = [i for i, m in enumerate(may) if m][:3]
    assert [i for i, c in enumerate(some.copies) if c is not None] == first
    assert [some.copies[i] for i in first] == [every.copies[i] for i in first]
    assert (some.copy_plans_read, some.copy_plans_unread) == (3, 1)
    out = io.StringIO()
    print_plan(some, out)
    assert out.getvalue().count("; copies ") == 3
    assert "copy plans not read for the other 1 bin that may copy row groups" in out.getvalue()


@pytest.mark.parametrize("fault", [Fault.INTERNAL, Fault.IGNORE_RANGE])
async def test_an_output_that_cannot_be_read_back_fails_its_bin_closed(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, fault: Fault
) -> None:
    """The output's footer is read back before the commit; when that GET fails, or answers
    with what is not the output's tail, the bin fails, nothing commits, and the output and
    its upload are gone."""
    plain(tmp_path / "t")
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(tmp_path / "t", "w/t")
    with FaultProxy(moto_endpoint).running() as proxy:
        # rlcd's outputs carry "rlcd" in hex in their names; the read-back is their only GET
        proxy.inject(fault, times=None, method="GET", contains="726c6364")
        async with (
            S3Client(moto_config(proxy.url, read_timeout_s=2.0)) as client,
            open_store(uri, client=client) as store,
        ):
            report = await compact_table(store, CompactionPolicy(**COPY_ALL))
    assert report.failed and report.committed_version is None
    listing = boto_client(moto_endpoint).list_objects_v2(Bucket=s3_bucket, Prefix="w/t/")
    names = [item["Key"].rpartition("/")[2] for item in listing.get("Contents", [])]
    assert not [name for name in names if rlcd_file_uuid(name)]
    assert mirror.multipart_uploads() == 0
