"""The copy path's output follows its sources (issue 39): a bin whose bytes are mostly
pyarrow's files (decimals as fixed-length bytes) is written with fixed-length decimals, its
pyarrow row groups copied and the rest (a delta-rs file's INT64 decimals, a file with a
deletion vector) re-encoded into them; a bin of mostly delta-rs files stays as today. Judged
against the re-encode path and by delta-rs (``scan()``, deletion vectors applied) and the
kernel; the decimal stats must be the live rows' exact bounds."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import WriterProperties
from deltalake.transaction import AddAction

from rlcd.compaction._patches import PatchFile
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot
from rlcd.operations._dv_writer import delete_rows
from rlcd.parquet.assemble import Patch
from rlcd.storage import open_store
from rlcd.storage.metered import MeteredStore
from tests.integration.tables import S3Mirror, batch, delta_rs_rows, kernel_rows
from tests.integration.test_copy_path import COPY_ALL, _commit, _compact, _same_outputs

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROW_GROUP = 1_000


def _rows(start: int, n: int) -> pa.Table:
    """:func:`batch` with a decimal of 12 digits (negative ones too, so the bounds' signs
    matter) and one of 20 (fixed-length bytes in every writer)."""
    cents = [(i * 7919) % 2_000_001 - 1_000_000 for i in range(start, start + n)]
    return batch(
        start,
        n,
        price=pa.array([Decimal(c).scaleb(-2) for c in cents], pa.decimal128(12, 2)),
        wide=pa.array([Decimal(c).scaleb(-4) * 10**9 for c in cents], pa.decimal128(20, 4)),
    )


def _delta_rs(path: Path, table: pa.Table) -> None:
    """An append by delta-rs: decimals of up to 18 digits as INT64."""
    deltalake.write_deltalake(
        str(path),
        table,
        mode="append",
        writer_properties=WriterProperties(max_row_group_size=ROW_GROUP),
        configuration={"delta.enableDeletionVectors": "true"},
    )


def _pyarrow(path: Path, table: pa.Table, name: str, **options: Any) -> None:
    """A file pyarrow writes with its defaults (fixed-length decimals) but ``options``, added
    to the log."""
    pq.write_table(table, path / name, row_group_size=ROW_GROUP, **options)
    add = AddAction(
        name,
        (path / name).stat().st_size,
        {},
        int(time.time() * 1000),
        True,
        json.dumps({"numRecords": table.num_rows}),
    )
    deltalake.DeltaTable(str(path)).create_write_transaction(
        [add], mode="append", schema=table.schema
    )


async def _delete_from(path: Path, name: str, positions: list[int]) -> None:
    async with open_store(str(path)) as store:
        snap = await load_snapshot(store)
        assert name in snap.files
        await delete_rows(store, snap, {name: positions})


async def _mostly_pyarrow(path: Path) -> None:
    """A small delta-rs file with a DV, then three pyarrow files of three row groups, one with
    a DV: the files with DVs have nothing to copy, so the bin stays one (the layout of most of
    its copied bytes)."""
    _delta_rs(path, _rows(0, 600))
    (small,) = deltalake.DeltaTable(str(path)).file_uris()
    for i in range(3):
        _pyarrow(path, _rows(600 + i * 3 * ROW_GROUP, 3 * ROW_GROUP), f"part-{i}-pyarrow.parquet")
    await _delete_from(path, Path(small).name, [5, 599])
    await _delete_from(path, "part-1-pyarrow.parquet", [0, 7, 1_500, 2_999])


async def _mostly_delta_rs(path: Path) -> None:
    """Three delta-rs files of three row groups, then a pyarrow file with a DV."""
    for i in range(3):
        _delta_rs(path, _rows(i * 3 * ROW_GROUP, 3 * ROW_GROUP))
    _pyarrow(path, _rows(9 * ROW_GROUP, 2 * ROW_GROUP), "part-9-pyarrow.parquet")
    await _delete_from(path, "part-9-pyarrow.parquet", [3, 1_999])


@pytest.mark.parametrize(
    ("make", "physical", "copied"),
    [
        (_mostly_pyarrow, "FIXED_LEN_BYTE_ARRAY", 6),
        (_mostly_delta_rs, "INT64", 9),
    ],
    ids=["mostly-pyarrow", "mostly-delta-rs"],
)
async def test_the_output_is_written_as_most_of_its_copied_bytes_are(
    tmp_path: Path, make: object, physical: str, copied: int
) -> None:
    """One bin mixing copied row groups with re-encoded ones of the other decimal storage and
    a DV'd source: its output stores decimals as the copied majority does, holds the live
    rows in the re-encode path's order, and its decimal stats are their exact bounds."""
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    auto.mkdir()
    await make(auto)  # type: ignore[operator]
    shutil.copytree(auto, reencoded)
    before = delta_rs_rows(auto)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    (written,) = report.committed
    assert written.copied_row_groups == copied and written.reencoded_bytes > 4_096
    version = report.committed_version or 0
    _same_outputs(auto, reencoded, version)
    assert delta_rs_rows(auto) == before == kernel_rows(auto)
    (add,), _ = _commit(auto, version)
    output = auto / add["path"]
    schema = pq.read_metadata(output).schema
    types = {schema.column(i).name: schema.column(i).physical_type for i in range(len(schema))}
    assert (types["price"], types["wide"]) == (physical, "FIXED_LEN_BYTE_ARRAY")
    live = pq.read_table(output)
    stats = json.loads(add["stats"])
    for column in ("price", "wide"):
        bounds = pc.min_max(live[column]).as_py()
        assert Decimal(str(stats["minValues"][column])) == bounds["min"]
        assert Decimal(str(stats["maxValues"][column])) == bounds["max"]
    assert stats["numRecords"] == live.num_rows == len(before)


def _nullable(start: int, n: int, part: str | None = None) -> pa.Table:
    """:func:`_rows` with every seventh price null, and a partition column when ``part``."""
    table = _rows(start, n)
    prices = table["price"].to_pylist()
    price = pa.array(
        [None if i % 7 == 0 else p for i, p in enumerate(prices)], pa.decimal128(12, 2)
    )
    table = table.set_column(table.schema.get_field_index("price"), "price", price)
    return table if part is None else table.append_column("part", pa.array([part] * n))


def _pyarrow_in(path: Path, table: pa.Table, name: str, part: str) -> None:
    """A file pyarrow writes with its defaults into partition ``part``, added to the log."""
    (path / f"part={part}").mkdir(exist_ok=True)
    file = f"part={part}/{name}"
    pq.write_table(table.drop_columns(["part"]), path / file, row_group_size=ROW_GROUP)
    add = AddAction(
        file,
        (path / file).stat().st_size,
        {"part": part},
        int(time.time() * 1000),
        True,
        json.dumps({"numRecords": table.num_rows}),
    )
    deltalake.DeltaTable(str(path)).create_write_transaction(
        [add], mode="append", schema=table.schema, partition_by=["part"]
    )


async def alternating_decimals(path: Path) -> list[pa.Table]:
    """A delta-rs file, then a pyarrow file, of six row groups each: every row group copied,
    the pyarrow ones with their price (fixed-length) patched into INT64. (With two files of
    each kind, each kind would make a bin of its own: see ``test_copy_layouts``.)"""
    tables = [_nullable(i * 6 * ROW_GROUP, 6 * ROW_GROUP) for i in range(2)]
    _delta_rs(path, tables[0])
    _pyarrow(path, tables[1], "part-1-pyarrow.parquet")
    return tables


async def _alternating_split(path: Path) -> list[pa.Table]:
    """:func:`alternating_decimals` with the pyarrow file's decimals in BYTE_STREAM_SPLIT
    pages, which ``rlcd.parquet.transcode`` does not know: decoded and encoded instead."""
    tables = [_nullable(i * 6 * ROW_GROUP, 6 * ROW_GROUP) for i in range(2)]
    _delta_rs(path, tables[0])
    split = {"price": "BYTE_STREAM_SPLIT"}
    name = "part-1-pyarrow.parquet"
    _pyarrow(path, tables[1], name, use_dictionary=["id"], column_encoding=split)
    return tables


async def _alternating_partitioned(path: Path) -> list[pa.Table]:
    """The same in two partitions, a bin each."""
    tables = []
    for i in range(4):
        part = "ab"[i // 2]
        table = _nullable(i * 2 * ROW_GROUP, 2 * ROW_GROUP, part)
        if i % 2:
            _pyarrow_in(path, table, f"part-{i}-pyarrow.parquet", part)
        else:
            deltalake.write_deltalake(
                str(path),
                table,
                mode="append",
                partition_by=["part"],
                writer_properties=WriterProperties(max_row_group_size=ROW_GROUP),
            )
        tables.append(table)
    return tables


def _decoded_patches(monkeypatch: pytest.MonkeyPatch) -> list[pa.Table]:
    """The patches decoded and encoded from now on (those the transcoder did not take)."""
    patches: list[pa.Table] = []
    original = PatchFile.add

    def counted(self: PatchFile, table: pa.Table) -> Patch:
        patches.append(table)
        return original(self, table)

    monkeypatch.setattr(PatchFile, "add", counted)
    return patches


@pytest.mark.parametrize(
    ("make", "copied", "decoded"),
    [
        (alternating_decimals, [12], 0),
        (_alternating_partitioned, [4, 4], 0),
        (_alternating_split, [12], 6),
    ],
    ids=["one-bin", "partitioned", "split-decoded"],
)
async def test_decimals_stored_otherwise_are_patched_into_copied_row_groups(
    tmp_path: Path, make: object, copied: list[int], decoded: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bins mixing delta-rs files (INT64 decimals) with pyarrow files (fixed-length ones, with
    nulls): every row group is copied, the pyarrow ones but for their price chunks, which are
    transcoded into INT64 (or where the transcoder does not know their pages, ``decoded`` of
    them, decoded and encoded again). Each output reads back through pyarrow as its sources'
    rows in write order, like the re-encode path's, through delta-rs and the kernel as the
    table's rows, and its decimal stats are the live rows' exact bounds."""
    patches = _decoded_patches(monkeypatch)
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    auto.mkdir()
    tables = await make(auto)  # type: ignore[operator]
    shutil.copytree(auto, reencoded)
    before = delta_rs_rows(auto)
    async with open_store(str(auto)) as store:
        dry = await compact_table(store, CompactionPolicy(**COPY_ALL), dry_run=True)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    assert sorted(w.copied_row_groups for w in report.committed) == copied
    # the dry run said so: every row group copied, the pyarrow ones' decimals re-encoded
    plans = [c for c in dry.copies if c is not None]
    assert sorted(c.copied_row_groups for c in plans) == copied
    assert all(0 < c.patched_row_groups < c.copied_row_groups for c in plans)
    assert all(0 < c.patched_bytes < c.copied_bytes for c in plans)
    version = report.committed_version or 0
    assert len(patches) == decoded
    _same_outputs(auto, reencoded, version)
    assert delta_rs_rows(auto) == before == kernel_rows(auto)
    adds, _ = _commit(auto, version)
    for add in adds:
        output = auto / add["path"]
        meta = pq.read_metadata(output)
        assert (
            meta.schema.column(meta.schema.to_arrow_schema().get_field_index("price")).physical_type
            == "INT64"
        )
        live = pq.read_table(output)
        part = add["partitionValues"].get("part")
        sources = [t for t in tables if part is None or t["part"][0].as_py() == part]
        expected = pa.concat_tables(sources)
        if part is not None:
            expected = expected.drop_columns(["part"])
        assert live.to_pylist() == expected.to_pylist()  # the sources' rows, in write order
        stats = json.loads(add["stats"])
        for column in ("price", "wide"):
            bounds = pc.min_max(live[column]).as_py()
            assert Decimal(str(stats["minValues"][column])) == bounds["min"]
            assert Decimal(str(stats["maxValues"][column])) == bounds["max"]
        assert stats["nullCount"]["price"] == live["price"].null_count > 0


_BOUNDARIES = ((1, 0), (4, 4), (9, 2), (10, 0), (18, 6), (18, 18))
"""Decimal types at the storage boundaries: INT32 to 9 digits, INT64 from 10 (delta-rs),
fixed-length bytes of 1 to 8 (pyarrow)."""


def _boundaries(start: int, n: int) -> pa.Table:
    """Rows of each of :data:`_BOUNDARIES` (its largest and smallest values first, every
    ninth null), a decimal that is always null, and one null in the first half of the rows."""
    columns: dict[str, pa.Array] = {"id": pa.array(range(start, start + n), pa.int64())}
    for precision, scale in _BOUNDARIES:
        top = 10**precision - 1
        units = [top, -top] + [(i * 7919) % (2 * top + 1) - top for i in range(start, start + n)]
        values = [None if i % 9 == 4 else Decimal(u).scaleb(-scale) for i, u in enumerate(units)]
        columns[f"d{precision}_{scale}"] = pa.array(values[:n], pa.decimal128(precision, scale))
    columns["empty"] = pa.array([None] * n, pa.decimal128(9, 2))
    halves = [None if i < n // 2 else Decimal(start - i).scaleb(-3) for i in range(n)]
    columns["half"] = pa.array(halves, pa.decimal128(12, 3))
    return pa.table(columns)


async def test_integers_are_transcoded_into_fixed_length_bytes_at_each_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delta-rs file's INT32 and INT64 decimals patched into a bin with a larger pyarrow
    file (fixed-length bytes of 1 to 8), every chunk transcoded: the output is the re-encode
    path's (rows, stats), delta-rs and the kernel read the table's rows, and every chunk's
    bounds and null count are its rows'."""
    patches = _decoded_patches(monkeypatch)
    auto, reencoded = tmp_path / "auto", tmp_path / "reencode"
    auto.mkdir()
    _delta_rs(auto, _boundaries(0, 2 * ROW_GROUP))
    (written,) = auto.glob("*.parquet")
    schema = pq.read_metadata(written).schema
    assert {schema.column(i).physical_type for i in range(1, len(schema))} == {"INT32", "INT64"}
    _pyarrow(auto, _boundaries(2 * ROW_GROUP, 4 * ROW_GROUP), "part-0.parquet")
    shutil.copytree(auto, reencoded)
    before = delta_rs_rows(auto)
    report = await _compact(str(auto), rewrite="auto", **COPY_ALL)
    await _compact(str(reencoded), rewrite="reencode", **COPY_ALL)
    assert [b.copied_row_groups for b in report.committed] == [6] and not patches
    version = report.committed_version or 0
    _same_outputs(auto, reencoded, version)
    assert delta_rs_rows(auto) == before == kernel_rows(auto)
    (add,), _ = _commit(auto, version)
    output = pq.ParquetFile(auto / add["path"])
    meta = output.metadata
    assert {meta.schema.column(i).physical_type for i in range(1, meta.num_columns)} == {
        "FIXED_LEN_BYTE_ARRAY"
    }
    for g in range(meta.num_row_groups):
        rows = output.read_row_group(g)
        for c in range(1, meta.num_columns):
            column, stats = rows.column(c), meta.row_group(g).column(c).statistics
            assert stats.null_count == column.null_count
            bounds = pc.min_max(column).as_py()
            assert (stats.min, stats.max) == (
                (bounds["min"], bounds["max"]) if stats.has_min_max else (None, None)
            )
            assert stats.has_min_max == (bounds["min"] is not None)


async def test_recompress_transcodes_no_chunk_of_another_codec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``recompress`` (zstd), a pyarrow file whose price chunks alone are snappy: its row
    groups are copied, but their price chunks decoded and encoded (the transcoder keeps a
    chunk's codec), so every chunk of the output is zstd and its rows are the table's."""
    patches = _decoded_patches(monkeypatch)
    for i in range(2):
        deltalake.write_deltalake(
            str(tmp_path),
            _nullable(i * 3 * ROW_GROUP, 3 * ROW_GROUP),
            mode="append",
            writer_properties=WriterProperties(max_row_group_size=ROW_GROUP, compression="ZSTD"),
        )
    table = _nullable(6 * ROW_GROUP, 2 * ROW_GROUP)
    codecs = {name: "snappy" if name == "price" else "zstd" for name in table.column_names}
    _pyarrow(tmp_path, table, "part-6-pyarrow.parquet", compression=codecs)
    before = delta_rs_rows(tmp_path)
    report = await _compact(str(tmp_path), recompress=True, **COPY_ALL)
    assert [b.copied_row_groups for b in report.committed] == [8] and len(patches) == 2
    assert delta_rs_rows(tmp_path) == before == kernel_rows(tmp_path)
    (add,), _ = _commit(tmp_path, report.committed_version or 0)
    meta = pq.read_metadata(tmp_path / add["path"])
    codecs_written = {
        meta.row_group(g).column(c).compression
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    }
    assert codecs_written == {"ZSTD"}


async def test_patched_row_groups_on_s3_fetch_only_the_columns_they_need(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On moto's S3 a source copied with patches is fetched only for the chunks of its
    patched and stats columns, not whole; the output is the local store's byte for byte, and
    no temporary file (encoded, patches) is left."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    source, local = tmp_path / "source", tmp_path / "local"
    source.mkdir()
    rng = random.Random(5)
    for i in range(2):  # 1 KiB random blobs: 6 MiB a file, the chunks not needed
        table = _nullable(i * 6 * ROW_GROUP, 6 * ROW_GROUP)
        table = table.append_column(
            "blob", pa.array([rng.randbytes(1024) for _ in range(len(table))])
        )
        if i % 2:
            _pyarrow(source, table, f"part-{i}-pyarrow.parquet")
        else:
            _delta_rs(source, table)
    shutil.copytree(source, local)
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(source, "tables/t")
    async with open_store(uri, s3=mirror.config) as inner:
        store = MeteredStore(inner)
        report = await compact_table(store, CompactionPolicy(**COPY_ALL))
        fetched = store.bytes["get"]
    (done,) = report.committed
    (done_local,) = (await _compact(str(local), **COPY_ALL)).committed
    assert done.copied_row_groups == 12 and not list(temp.iterdir())
    remote = mirror.download("tables/t", tmp_path / "remote")
    assert done.path is not None and done_local.path is not None
    assert (remote / done.path).read_bytes() == (local / done_local.path).read_bytes()
    patched = sum(p.stat().st_size for p in source.glob("*-pyarrow.parquet"))
    assert fetched - (done.copied_bytes - done.server_copied_bytes) < patched / 2
