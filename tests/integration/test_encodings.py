"""Outputs written with each encoding rlcd may choose, read back by delta-rs and the kernel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.encodings import DELTA_BINARY_PACKED, DICTIONARY
from rlcd.compaction.policy import CompactionPolicy
from rlcd.storage import LocalStore
from tests.integration.tables import append, delta_rs_rows, kernel_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FILES, ROWS = 4, 5_000  # 20,000 rows: more than one sample (16 blocks of 1024 rows) holds


def mixed_file(f: int) -> pa.Table:
    """One append: every kind of column the adaptive choice treats, with nulls in each."""
    rng = np.random.default_rng(f)
    i = np.arange(f * ROWS, (f + 1) * ROWS, dtype=np.int64)
    nulls = rng.random(ROWS) < 0.1
    epoch = np.datetime64("2026-01-01T00:00:00", "us")
    return pa.table(
        {
            "id": pa.array(i, mask=nulls),
            "seq": pa.array((i * 3).astype(np.int32), mask=nulls),
            "day": pa.array(i.astype(np.int32), pa.date32(), mask=nulls),
            "at": pa.array(epoch + i.astype("timedelta64[s]"), pa.timestamp("us", tz="UTC")),
            "random": pa.array(rng.integers(-(2**62), 2**62, ROWS), mask=nulls),
            "amount": pa.array(rng.random(ROWS) * 1000, mask=nulls),
            "kind": pa.array([["a", "b", "c"][k] for k in rng.integers(0, 3, ROWS)], mask=nulls),
            "note": pa.array([f"note-{k}" for k in rng.integers(0, 10**9, ROWS)], mask=nulls),
            "price": pa.array(rng.integers(0, 10**6, ROWS) / 100).cast(pa.decimal128(18, 2)),
            "total": pa.array(i * 7 / 100 - 500, mask=nulls).cast(pa.decimal128(18, 2)),
            "fee": pa.array(i / 100, mask=nulls).cast(pa.decimal128(9, 2)),
            "flag": pa.array(i % 5 == 0, mask=nulls),
            "tags": pa.array([{"k": int(v) % 4} for v in i]),
        }
    )


DELTA_PACKED = ("id", "seq", "day", "at", "total", "fee", "price")
"""The columns of :func:`mixed_file` that delta packing at least halves: sorted ones, and the
prices (random, but within 20 bits)."""


def output_encodings(path: Path, version: int) -> dict[str, set[str]]:
    log = path / "_delta_log" / f"{version:020d}.json"
    (add,) = (a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a)
    meta = pq.read_metadata(path / add["path"])
    return {
        meta.schema.column(c).path: set(meta.row_group(0).column(c).encodings)
        for c in range(meta.num_columns)
    }


async def test_every_adaptive_encoding_reads_back_identically(tmp_path: Path) -> None:
    """An adaptive compaction writes delta-packed integers, dates, timestamps and decimals (as
    INT64 and INT32), dictionary and plain columns, and delta-rs's scan and the kernel read
    exactly the rows they read before."""
    for f in range(FILES):
        append(tmp_path, mixed_file(f))
    before = delta_rs_rows(tmp_path)
    assert kernel_rows(tmp_path) == before
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, CompactionPolicy(encodings="adaptive"))
    assert report.committed_version is not None and not report.failed
    used = output_encodings(tmp_path, report.committed_version)
    for column in DELTA_PACKED:
        assert DELTA_BINARY_PACKED in used[column], column
    for column in ("kind", "tags.k"):
        assert DICTIONARY in used[column], column
    for column in ("random", "amount", "note"):
        assert DICTIONARY not in used[column] and "PLAIN" in used[column], column
    assert delta_rs_rows(tmp_path) == before
    assert kernel_rows(tmp_path) == before


async def test_conservative_encodings_are_the_old_writer(tmp_path: Path) -> None:
    """``encodings = "conservative"`` keeps the writer rlcd always had: dictionaries tried
    everywhere, no delta packing."""
    for f in range(2):
        append(tmp_path, mixed_file(f))
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, CompactionPolicy(encodings="conservative"))
    assert report.committed_version is not None
    used = output_encodings(tmp_path, report.committed_version)
    assert all(DELTA_BINARY_PACKED not in e for e in used.values())
    assert DICTIONARY in used["id"] and DICTIONARY in used["note"]


async def test_the_default_policy_chooses_encodings_from_the_data(tmp_path: Path) -> None:
    """Without an ``encodings`` setting the outputs are written adaptively: the sorted ids are
    delta-packed."""
    for f in range(2):
        append(tmp_path, mixed_file(f))
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, CompactionPolicy())
    assert report.committed_version is not None
    used = output_encodings(tmp_path, report.committed_version)
    assert DELTA_BINARY_PACKED in used["id"]
