"""Bins by layout (issue 39): delta-rs files (decimals as INT64) and pyarrow files (decimals
as fixed-length bytes) written in turn are packed each kind apart, so every row group is
copied into an output of its own schema and no decimal chunk is transcoded; a kind's file
that no bin of its own took is still compacted with the other kind's. Judged by pyarrow
(each output holds its sources' rows in write order), delta-rs (``scan()``) and the kernel,
by a second run that finds nothing to do, and by the dry run."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.cli.report import print_plan
from rlcd.compaction import rewrite
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.storage import open_store
from tests.integration.tables import S3Mirror, delta_rs_rows, kernel_rows
from tests.integration.test_copy_path import COPY_ALL, _commit, _compact
from tests.integration.test_copy_schema import (
    ROW_GROUP,
    _decoded_patches,
    _delta_rs,
    _nullable,
    _pyarrow,
)
from tests.unit.compaction.test_plan import paths

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def _alternate(path: Path, files: int) -> list[tuple[str, pa.Table]]:
    """``files`` files of three row groups, delta-rs' and pyarrow's in turn (the kind and
    the rows of each)."""
    written = []
    for i in range(files):
        table = _nullable(i * 3 * ROW_GROUP, 3 * ROW_GROUP)
        if i % 2:
            _pyarrow(path, table, f"part-{i}-pyarrow.parquet")
            written.append(("FIXED_LEN_BYTE_ARRAY", table))
        else:
            _delta_rs(path, table)
            written.append(("INT64", table))
    return written


def _price_storage(path: Path) -> str:
    schema = pq.read_metadata(path).schema
    index = schema.to_arrow_schema().get_field_index("price")
    return str(schema.column(index).physical_type)


@pytest.mark.parametrize(
    ("files", "copied"),
    [(4, [6, 6]), (5, [6, 9])],
    ids=["two-of-each", "a-third-delta-rs"],
)
async def test_each_kind_of_file_is_copied_into_an_output_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int, copied: list[int]
) -> None:
    """Files of both kinds in turn, small enough for one bin: two outputs, one per decimal
    storage, every row group copied and none patched; each output holds its kind's rows in
    write order; the table reads as before; a second run plans nothing."""
    patches = _decoded_patches(monkeypatch)
    written = _alternate(tmp_path, files)
    before = delta_rs_rows(tmp_path)
    async with open_store(str(tmp_path)) as store:
        dry = await compact_table(store, CompactionPolicy(**COPY_ALL), dry_run=True)
    plans = [c for c in dry.copies if c is not None]
    assert sorted(c.copied_row_groups for c in plans) == copied
    assert [c.patched_row_groups for c in plans] == [0, 0]
    report = await _compact(str(tmp_path), **COPY_ALL)
    assert sorted(b.copied_row_groups for b in report.committed) == copied
    assert not patches  # no decimal chunk decoded and encoded again
    assert delta_rs_rows(tmp_path) == before == kernel_rows(tmp_path)
    adds, removes = _commit(tmp_path, report.committed_version or 0)
    assert len(adds) == 2 and len(removes) == files
    for add in adds:
        output = tmp_path / add["path"]
        storage = _price_storage(output)
        expected = pa.concat_tables(t for kind, t in written if kind == storage)
        assert pq.read_table(output).to_pylist() == expected.to_pylist()
        assert json.loads(add["stats"])["numRecords"] == len(expected)
    async with open_store(str(tmp_path)) as store:
        again = await compact_table(store, CompactionPolicy(**COPY_ALL))
    assert not again.planned and again.committed_version is None


async def test_a_lone_file_of_a_kind_is_compacted_with_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two delta-rs files and one pyarrow file: the delta-rs files make a bin of their own,
    and the pyarrow file, alone of its kind, is left as it is (one small file a partition may
    keep); with a second pyarrow file they would pair. One delta-rs file and one pyarrow
    file: no kind makes a bin alone, so they are compacted together, one patched."""
    patches = _decoded_patches(monkeypatch)
    _alternate(tmp_path / "three", 3)
    report = await _compact(str(tmp_path / "three"), **COPY_ALL)
    ((done,),) = [report.committed]
    assert done.copied_row_groups == 6 and len(done.bin.sources) == 2 and not patches
    assert all(not s.path.endswith("pyarrow.parquet") for s in done.bin.sources)
    _alternate(tmp_path / "two", 2)
    before = delta_rs_rows(tmp_path / "two")
    report = await _compact(str(tmp_path / "two"), **COPY_ALL)
    ((done,),) = [report.committed]
    assert done.copied_row_groups == 6 and len(done.bin.sources) == 2
    assert delta_rs_rows(tmp_path / "two") == before == kernel_rows(tmp_path / "two")


async def test_a_dry_run_shows_the_bins_a_run_commits(tmp_path: Path) -> None:
    """Eight files of both kinds in turn, four to a bin: the dry run packs them by layout as
    the run does; with a budget of copy plans it reads the layouts of the first bins only and
    says the others may be packed otherwise (found by review: it showed mixed bins)."""
    _alternate(tmp_path, 8)
    largest = max(p.stat().st_size for p in tmp_path.glob("*.parquet"))
    policy = CompactionPolicy(target_file_size=4 * largest + 1, min_copy_row_group=1)
    async with open_store(str(tmp_path)) as store:
        every = await compact_table(store, policy, dry_run=True)
        some = await compact_table(store, policy, dry_run=True, copy_plans=1)
        done = await compact_table(store, policy)
    assert paths(every.planned) == paths(done.planned) and len(done.committed) == 2
    assert every.layouts_unread == 0 and some.layouts_unread == 1
    out = io.StringIO()
    print_plan(some, out)
    assert "layouts not read for 1 bin that may copy row groups" in out.getvalue()


async def test_bins_by_layout_on_s3_read_each_footer_once(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On moto's S3 the same two outputs, nothing patched, the table's rows read back through
    delta-rs and the kernel, and each source's footer fetched once: read for the layouts,
    kept for the rewrite (each output's is read back once too)."""
    patches = _decoded_patches(monkeypatch)
    source = tmp_path / "source"
    source.mkdir()
    _alternate(source, 4)
    before = delta_rs_rows(source)
    read: list[str] = []
    original = rewrite.read_footer

    async def recording(store: Any, key: str, size: int) -> bytes:
        read.append(key)
        return await original(store, key, size)

    monkeypatch.setattr(rewrite, "read_footer", recording)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(source, "tables/layouts")
    async with open_store(uri, s3=mirror.config) as store:
        report = await compact_table(store, CompactionPolicy(**COPY_ALL))
    assert sorted(b.copied_row_groups for b in report.committed) == [6, 6] and not patches
    assert len(read) == len(set(read)) == 4 + 2  # and each output's, read back before the commit
    remote = mirror.download("tables/layouts", tmp_path / "remote")
    assert delta_rs_rows(remote) == before == kernel_rows(remote)
