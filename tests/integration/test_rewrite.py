"""The streaming rewrite of one bin at its edges: batches emptied by a DV, sources with no
live row, tiny row groups and batches, and large sources spilled to disk."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rlcd.compaction.compact import compact_table, rewrite_settings
from rlcd.compaction.plan import Bin, plan_bins
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.rewrite import RewriteSettings, rewrite_bin
from rlcd.delta.load import load_snapshot, table_config
from rlcd.operations._dv_writer import delete_rows
from rlcd.operations.verify import verify_table
from rlcd.storage import LocalStore
from tests.integration.tables import append, batch, delta_rs_rows, kernel_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)


def _table(path: Path) -> None:
    """Three DV-enabled files of 30 rows in row groups of 10."""
    from deltalake import WriterProperties

    props = WriterProperties(max_row_group_size=10)
    for i in range(3):
        append(
            path,
            batch(i * 30, 30),
            writer_properties=props,
            configuration={"delta.enableDeletionVectors": "true"} if i == 0 else None,
        )


async def _one_bin(store: LocalStore) -> tuple[Bin, RewriteSettings]:
    """The table's single planned bin and the settings a compaction would rewrite it with."""
    snap = await load_snapshot(store)
    config = table_config(snap)
    (bin_,) = plan_bins(snap, config, POLICY)
    return bin_, rewrite_settings(snap, config, POLICY)


def _reading(settings: RewriteSettings, **read: int) -> RewriteSettings:
    return dataclasses.replace(settings, read=dataclasses.replace(settings.read, **read))


async def test_empty_batches_and_fully_deleted_sources(tmp_path: Path) -> None:
    """A batch emptied by the DV does not end its source; a source with no live row still gets
    its zero-length run; every other row lands once, in order, and verify proves it."""
    _table(tmp_path)
    async with LocalStore(tmp_path) as store:
        snap = await load_snapshot(store)
        first, second, third = list(snap.files)
        assert pq.ParquetFile(tmp_path / first).metadata.num_row_groups == 3
        await delete_rows(store, snap, {first: range(10), second: [0, 29], third: range(29)})
        expected = delta_rs_rows(tmp_path)
        bin_, settings = await _one_bin(store)
        done = await rewrite_bin(store, bin_, _reading(settings, batch_size=10))
    assert done.physical_rows == (30, 30, 30)
    assert done.offsets == (0, 20, 48)
    assert done.rows == 20 + 28 + 1
    assert [r.rows for r in done.runs] == [20, 28, 1]
    out = pq.read_table(tmp_path / done.key)
    assert out.column("id").to_pylist() == [*range(10, 30), *range(31, 59), 89]
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, POLICY)
        assert report.committed_version is not None and report.untagged == 0
        assert (await verify_table(store)).ok
    assert delta_rs_rows(tmp_path) == expected == kernel_rows(tmp_path)


async def test_large_sources_spill_to_disk(tmp_path: Path) -> None:
    """Sources above the spill threshold are streamed through a temp file, with the same result."""
    _table(tmp_path)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _one_bin(store)
        spilled = await rewrite_bin(store, bin_, _reading(settings, spill_threshold=1))
        in_memory = await rewrite_bin(store, bin_, settings)
    assert pq.read_table(tmp_path / spilled.key).equals(pq.read_table(tmp_path / in_memory.key))
    assert not list(Path(tempfile.gettempdir()).glob("rlcd-source-*"))
