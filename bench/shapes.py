"""The tables ``bench/compact.py`` compacts: four data shapes, each written as a streaming
writer leaves a table (one delta-rs append per small file), or in one commit for the large
tables of ``--bin-gib``.

- ``bench``: the synthetic table (arithmetic sequences of mixed types: sorted ids and
  timestamps, amounts, a 100k-value customer key);
- ``skewed``: what real event tables look like: random ids, low-cardinality strings with a
  Zipf skew, 10-30% nulls, wide free-text strings, log-normal amounts, timestamps arriving
  nearly in order;
- ``fixture``: the real fixture table ``parquet-all-types`` (every Delta type, nested structs,
  arrays and maps, as Spark wrote them) tiled up to the size asked for, its long column shifted
  per tile so that keys stay distinct;
- ``medium``: the ``bench`` rows in files of tens of MiB with several row groups each, written
  by delta-rs and by pyarrow with their defaults (what the copy path copies);
- ``medium-pyarrow``: the same, every file written by pyarrow (decimals as fixed-length
  bytes, which the output then follows);
- ``random``: five columns of uniform random values (integers, doubles, hex strings,
  timestamps): nothing for an encoding to find, so a compactor's cost is all decode and encode.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SHAPES = ("bench", "skewed", "fixture", "medium", "medium-pyarrow", "random")
FIXTURES = Path(
    os.environ.get("RLCD_FIXTURES", Path(__file__).resolve().parents[2] / "shared/fixtures/delta")
)
FIXTURE = "parquet-all-types"


def bench_batch(f: int, rows: int) -> Any:
    """File ``f`` of the synthetic table."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    epoch = np.datetime64("2026-01-01T00:00:00", "us")
    i = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
    customer = pc.binary_join_element_wise(
        "customer-", pc.cast(pa.array((i * 7919) % 100_000), pa.string()), ""
    )
    return pa.table(
        {
            "id": pa.array(i),
            "customer": customer,
            "amount": pa.array(((i * 37) % 100_000) / 100),
            "quantity": pa.array(((i * 13) % 1000).astype(np.int32)),
            "price": pc.cast(pa.array(((i * 31) % 1_000_000) / 100), pa.decimal128(12, 2)),
            "at": pa.array(epoch + i.astype("timedelta64[s]"), pa.timestamp("us", tz="UTC")),
            "flag": pa.array(i % 5 == 0),
        }
    )


_WORDS = (
    "order",
    "shipped",
    "delayed",
    "customer",
    "returned",
    "refund",
    "payment",
    "card",
    "declined",
    "address",
    "warehouse",
    "parcel",
    "courier",
    "signature",
    "damaged",
    "replacement",
    "invoice",
    "discount",
    "premium",
    "standard",
    "express",
    "weekend",
    "holiday",
    "support",
    "ticket",
    "escalated",
    "resolved",
    "pending",
    "review",
    "rating",
)
_COUNTRIES = ("US", "DE", "FR", "GB", "IN", "BR", "JP", "CA", "ES", "IT", "NL", "SE", "PL", "MX")
_STATUS = ("ok", "retry", "failed", "cancelled", "timeout")


def _comments(_pool: list[Any] = []) -> Any:  # noqa: B006 (a cache)
    """Free text: 50k distinct comments of 8 to 60 words (made once per process)."""
    import random

    import pyarrow as pa

    if not _pool:
        rng = random.Random(2**31)
        pool = [" ".join(rng.choices(_WORDS, k=rng.randint(8, 60))) for _ in range(50_000)]
        _pool.append(pa.array(pool))
    return _pool[0]


def skewed_batch(f: int, rows: int) -> Any:
    """File ``f`` of the skewed table (seeded by ``f``: the same table every run)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(f)

    def nulls(share: float) -> Any:
        return rng.random(rows) < share

    zipf = np.minimum(rng.zipf(1.6, rows) - 1, len(_COUNTRIES) - 1)
    pool = _comments()
    text = pool.take(pa.array(rng.integers(0, len(pool), rows)))
    session = pc.binary_join_element_wise(
        "s-", pc.cast(pa.array(rng.integers(0, 2**63, rows)), pa.string()), ""
    )
    start = np.datetime64("2026-01-01T00:00:00", "us") + np.timedelta64(f * rows, "s")
    jitter = rng.integers(-120, 120, rows).astype("timedelta64[s]")
    at = start + np.arange(rows).astype("timedelta64[s]") + jitter
    return pa.table(
        {
            "event_id": pa.array(rng.integers(0, 2**62, rows)),
            "user_id": pa.array(rng.integers(0, 5_000_000, rows)),
            "country": pa.array(np.array(_COUNTRIES)[zipf], mask=nulls(0.1)),
            "status": pa.array(np.array(_STATUS)[rng.integers(0, 5, rows)]),
            "amount": pa.array(np.round(rng.lognormal(3, 1.2, rows), 2), mask=nulls(0.3)),
            "score": pa.array(rng.random(rows).astype(np.float32), mask=nulls(0.2)),
            "at": pa.array(at, pa.timestamp("us", tz="UTC")),
            "comment": pc.if_else(pa.array(nulls(0.25)), pa.nulls(rows, pa.string()), text),
            "session": session,
        }
    )


def random_batch(f: int, rows: int) -> Any:
    """File ``f`` of the random table (seeded by ``f``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(10_000 + f)
    return pa.table(
        {
            "id": pa.array(rng.integers(0, 2**63, rows)),
            "value": pa.array(rng.random(rows)),
            "key": pc.utf8_slice_codeunits(
                pc.cast(pa.array(rng.integers(2**60, 2**63, rows)), pa.string()), 0, 16
            ),
            "at": pa.array(rng.integers(0, 2**50, rows), pa.timestamp("us", tz="UTC")),
            "count": pa.array(rng.integers(-(2**31), 2**31, rows, dtype=np.int32)),
        }
    )


def _fixture_rows() -> Any:
    import deltalake
    import pyarrow as pa

    return pa.table(deltalake.DeltaTable(str(FIXTURES / FIXTURE)).scan().read_all())


def fixture_batch(f: int, rows: int, _base: list[Any] = []) -> Any:  # noqa: B006 (a cache)
    """File ``f``: the fixture's rows tiled to ``rows`` rows, the long column offset per tile."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not _base:
        _base.append(_fixture_rows())
    base = _base[0]
    tiles = -(-rows // base.num_rows)
    table = pa.concat_tables([base] * tiles).slice(0, rows)
    tile = np.repeat(np.arange(f * tiles, (f + 1) * tiles, dtype=np.int64), base.num_rows)[:rows]
    shifted = pc.add(table["LongType"], pa.array(tile * 1_000_003))
    return table.set_column(table.schema.get_field_index("LongType"), "LongType", shifted)


BATCHES: dict[str, Callable[[int, int], Any]] = {
    "bench": bench_batch,
    "skewed": skewed_batch,
    "fixture": fixture_batch,
    "medium": bench_batch,
    "medium-pyarrow": bench_batch,
    "random": random_batch,
}


def generate_medium(path: Path, files: int, rows: int, *, pyarrow_only: bool = False) -> None:
    """The medium shape: ``files`` appends of the bench shape's rows, written in turn by
    delta-rs with its defaults (uncompressed) in files of two thirds of ``rows`` rows, row
    groups of a quarter of the file, and by pyarrow with its defaults (snappy, row groups of
    1Mi rows, decimals as fixed-length bytes) in files of ``rows`` rows: with ``--rows
    1500000`` files of 47 and 35 MiB (small for a 128 MiB target), several row groups each,
    the well-formed files of batch writers. ``pyarrow_only``: every file is pyarrow's."""
    import deltalake
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    for f in range(files):
        if f % 2 == 0 and not pyarrow_only:
            table = bench_batch(f, rows * 2 // 3)
            props = deltalake.WriterProperties(max_row_group_size=max(1, table.num_rows // 4))
            deltalake.write_deltalake(str(path), table, mode="append", writer_properties=props)
            continue
        table = bench_batch(f, rows)
        if f == 0:
            deltalake.DeltaTable.create(str(path), table.schema)
        name = f"part-{f:05d}-pyarrow.snappy.parquet"
        pq.write_table(table, path / name)
        add = AddAction(
            name,
            (path / name).stat().st_size,
            {},
            int(time.time() * 1000),
            True,
            json.dumps({"numRecords": table.num_rows}),
        )
        delta = deltalake.DeltaTable(str(path))
        delta.create_write_transaction([add], mode="append", schema=table.schema)


def generate(path: Path, files: int, rows: int, shape: str = "bench") -> None:
    """``files`` appends of ``rows`` rows each (a streaming writer's log; the medium shape's
    are batch writers', see :func:`generate_medium`)."""
    import deltalake

    if shape.startswith("medium"):
        generate_medium(path, files, rows, pyarrow_only=shape == "medium-pyarrow")
        return
    make = BATCHES[shape]
    for f in range(files):
        deltalake.write_deltalake(str(path), make(f, rows), mode="append")


def generate_one_commit(
    path: Path, files: int, rows: int, shape: str = "bench", file_bytes: int = 2 << 20
) -> None:
    """About as many files of about ``file_bytes`` in a single commit: quick to write for
    tables of gigabytes."""
    import deltalake
    import pyarrow as pa

    make = BATCHES[shape]
    schema = make(0, 1).schema

    def batches() -> Iterator[pa.RecordBatch]:
        for f in range(files):
            yield from make(f, rows).to_batches()

    reader = pa.RecordBatchReader.from_batches(schema, batches())
    deltalake.write_deltalake(str(path), reader, mode="append", target_file_size=file_bytes)
