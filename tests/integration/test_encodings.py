"""Outputs written with each encoding rlcd may choose, read back by delta-rs and the kernel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.compaction import rewrite
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.parquet.encodings import DELTA_BINARY_PACKED, DICTIONARY
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


def repeating_text_file(f: int, rows: int = 2_000, pool: int = 3_000) -> pa.Table:
    """One append of 300-byte strings drawn from ``pool`` distinct ones (with nulls), beside
    an id."""
    rng = np.random.default_rng(100 + f)
    values = pa.array([f"{v:06d}".ljust(300, "x") for v in range(pool)])
    return pa.table(
        {
            "id": pa.array(np.arange(f * rows, (f + 1) * rows, dtype=np.int64)),
            "text": values.take(pa.array(rng.integers(0, pool, rows), mask=rng.random(rows) < 0.1)),
        }
    )


async def test_a_wide_repeating_column_grows_row_groups_and_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strings that repeat too seldom in a row group of ``ROW_GROUP_BYTES`` to pay for a
    dictionary make the output's row groups grow (here the two sizes are scaled down to 1 and
    8 MiB), dictionary-encoded; delta-rs and the kernel read exactly the rows they read
    before."""
    monkeypatch.setattr(rewrite, "ROW_GROUP_BYTES", 1 << 20)
    monkeypatch.setattr(rewrite, "GROWN_ROW_GROUP_BYTES", 8 << 20)
    for f in range(20):
        append(tmp_path, repeating_text_file(f))
    before = delta_rs_rows(tmp_path)
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, CompactionPolicy(encodings="adaptive"))
    assert report.committed_version is not None and not report.failed
    assert DICTIONARY in output_encodings(tmp_path, report.committed_version)["text"]
    log = tmp_path / "_delta_log" / f"{report.committed_version:020d}.json"
    (add,) = (a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a)
    meta = pq.read_metadata(tmp_path / add["path"])
    assert meta.num_row_groups == 2  # 40,000 rows (~11 MiB): one grown row group and the rest
    assert meta.row_group(0).num_rows > 6 * (1 << 20) // 300
    assert delta_rs_rows(tmp_path) == before
    assert kernel_rows(tmp_path) == before
