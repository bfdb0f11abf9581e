"""The copy path on moto's S3 fetches of a copied source only what its stats need (issue 39):
the chunks of the columns decoded for them (floats, lists, maps) and nothing at all of a table
without such columns. The output is the local path's byte for byte, its stats the re-encode
path's, and no temporary file is left, also when a fetch fails."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from deltalake import WriterProperties

from rlcd.compaction._copy import FOOTER_GUESS
from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.rewrite import RewrittenBin
from rlcd.compaction.source import fetch_projected
from rlcd.delta.actions import AddFile
from rlcd.errors import CorruptDataError, MissingDataFileError
from rlcd.operations.verify import verify_table
from rlcd.storage import open_store
from rlcd.storage.metered import MeteredStore
from tests.integration.tables import Rows, S3Mirror, delta_rs_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROWS = 6_000
SPECIAL = [float("nan"), None, -0.0, 0.0, float("inf"), float("-inf")]


def _table(path: Path, *, decoded_columns: bool) -> None:
    """Three delta-rs appends of 6 MiB (1 KiB random blobs) in row groups of 2 MiB, with or
    without the columns whose stats are decoded: a float with NaN, nulls, ±0.0 and
    infinities, a list and a map. delta-rs names the list's and the map's inner fields
    ``item`` and ``entries`` in the file that creates the table, and ``element`` and
    ``key_value`` in the next ones, as rlcd's writer does: the first file's row groups are
    re-encoded (``schema_differs``), the others' copied."""
    rng = random.Random(11)
    for f in range(3):
        ids = range(f * ROWS, (f + 1) * ROWS)
        columns: dict[str, Any] = {
            "id": pa.array(ids, pa.int64()),
            "blob": [rng.randbytes(1024) for _ in ids],
        }
        if decoded_columns:
            columns["x"] = pa.array([SPECIAL[i % 6] if i % 5 else i / 4 for i in ids])
            columns["tags"] = pa.array(
                [[i % 7, None] if i % 3 else None for i in ids], pa.list_(pa.int32())
            )
            columns["attrs"] = pa.array(
                [[("k", i / 2)] for i in ids], pa.map_(pa.string(), pa.float64())
            )
        props = WriterProperties(max_row_group_size=2_000, compression="ZSTD")
        deltalake.write_deltalake(
            str(path), pa.table(columns), mode="append", writer_properties=props
        )


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where rlcd's temporary files go during the test."""
    where = tmp_path / "temp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


async def _compact(store: Any, **policy: Any) -> tuple[RewrittenBin, int]:
    """The compaction's one bin, and the bytes it fetched when ``store`` is metered."""
    report: CompactionReport = await compact_table(
        store, CompactionPolicy(min_copy_row_group=1, **policy)
    )
    fetched = store.bytes["get"] if isinstance(store, MeteredStore) else 0
    assert report.committed_version is not None and not report.failed
    assert (await verify_table(store)).ok
    [done] = report.committed
    return done, fetched


def _spelled(rows: Rows) -> list[str]:
    """Rows as sorted text: NaN equals NaN, -0.0 differs from 0.0."""
    return sorted(repr(row) for row in rows.elements())


def _stats(path: Path, done: RewrittenBin) -> dict[str, Any]:
    log = sorted((path / "_delta_log").glob("*.json"))[-1].read_text().splitlines()
    [add] = [a["add"] for a in map(json.loads, log) if "add" in a and a["add"]["path"] == done.path]
    stats: dict[str, Any] = json.loads(add["stats"], parse_float=str)
    return stats


@pytest.mark.parametrize("decoded_columns", [True, False])
async def test_a_copied_source_is_fetched_only_for_its_stats(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, temp_dir: Path, decoded_columns: bool
) -> None:
    source = tmp_path / "source"
    _table(source, decoded_columns=decoded_columns)
    sources = sum(p.stat().st_size for p in source.glob("*.parquet"))
    before = _spelled(delta_rs_rows(source))
    local, reencoded = tmp_path / "local", tmp_path / "reencoded"
    shutil.copytree(source, local)
    shutil.copytree(source, reencoded)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(source, "tables/t")
    async with open_store(uri, s3=mirror.config) as inner:
        done, fetched = await _compact(MeteredStore(inner))
    first = (
        source
        / json.loads((source / "_delta_log" / f"{0:020d}.json").read_text().splitlines()[-1])[
            "add"
        ]["path"]
    )
    reencoded_source = first.stat().st_size if decoded_columns else 0
    assert done.copied_row_groups == (6 if decoded_columns else 9)
    assert done.reencoded_bytes - reencoded_source < 64 * 1024  # the rest is the footer
    async with open_store(str(local)) as local_store:
        done_local, _ = await _compact(local_store)
    async with open_store(str(reencoded)) as reencoded_store:
        done_reencoded, _ = await _compact(reencoded_store, rewrite="reencode")
    assert not list(temp_dir.iterdir())

    remote = mirror.download("tables/t", tmp_path / "remote")
    assert done.path is not None and done_local.path is not None
    assert (remote / done.path).read_bytes() == (local / done_local.path).read_bytes()
    assert _stats(remote, done) == _stats(reencoded, done_reencoded)
    assert _spelled(delta_rs_rows(remote)) == before

    # fetched: the copied bytes S3 did not copy itself, the sources' footers (a tail GET
    # each), the log, the output's footer read back, the re-encoded source whole and, when
    # stats need them, the copied sources' decoded columns' chunks: a few percent of them
    unserved = done.copied_bytes - done.server_copied_bytes
    read = fetched - unserved - reencoded_source
    footers_and_log = 4 * FOOTER_GUESS + 64 * 1024
    if decoded_columns:
        assert read < (sources - reencoded_source) / 20
    else:
        assert read < footers_and_log


def _add(key: str, size: int) -> AddFile:
    return AddFile(path=key, size=size)


async def test_a_failed_projected_fetch_leaves_no_file(
    s3_bucket: str, moto_endpoint: str, temp_dir: Path
) -> None:
    """A missing object and one shorter than its add action says fail, named, and leave no
    temporary file."""
    async with open_store(f"s3://{s3_bucket}/t", s3=S3Mirror(moto_endpoint, s3_bucket).config) as s:
        await s.put("short.parquet", b"x" * 1_000)
        with pytest.raises(MissingDataFileError, match="missing"):
            await fetch_projected(s, _add("gone.parquet", 100), b"PAR1", [(0, 10)], version=3)
        with pytest.raises(CorruptDataError, match="holds 500 bytes at 500") as exc:
            await fetch_projected(
                s, _add("short.parquet", 2_000), b"PAR1", [(0, 10), (500, 1_500)], version=3
            )
        assert exc.value.path == "short.parquet"
        fetched = await fetch_projected(
            s, _add("short.parquet", 1_000), b"PAR1", [(10, 20)], version=3
        )
        try:
            assert fetched.file is not None and fetched.file.size() == 1_000
            assert fetched.file.read_at(30, 0) == b"\0" * 10 + b"x" * 10 + b"\0" * 10
        finally:
            fetched.close()
    assert not list(temp_dir.iterdir())
