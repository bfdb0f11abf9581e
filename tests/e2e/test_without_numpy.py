"""The command's process has no numpy (``rlcd.cli.process``), so pyarrow runs without it there:
rlcd's vectorised row-position, encoding and stats code gives there exactly what it gives in
a process where pyarrow has numpy (this one: the tests use it)."""

from __future__ import annotations

import contextlib
import io
import sys

import pytest

from tests.e2e.cli import in_command

pytestmark = pytest.mark.e2e

PROBE = """
import random
from decimal import Decimal
import pyarrow as pa
from pyroaring import BitMap64
from rlcd.parquet.encodings import choose_encodings
from rlcd.reconcile.positions import DeletedRows
from rlcd.reconcile.remap import forward_remap, reverse_rebase
from rlcd.compaction._stats import StatsAccumulator
from rlcd.delta.stats_spec import StatKind, StatsLeaf, StatsSpec

def show(name, positions):
    positions = list(positions)
    print(name, len(positions), sum(positions), sum(p * p for p in positions))

rng = random.Random(7)
read = BitMap64(rng.sample(range(200_000), 9_000))
winner = read | BitMap64(rng.sample(range(200_000), 20_000))
show("forward", forward_remap(read, 17, 200_000 - len(read), winner))
fresh = BitMap64(rng.sample(range(5_000_000_000, 5_000_400_000), 30_000)) - read
show("rebase", reverse_rebase(read, 2**33, 5_000_400_000, fresh))
deleted = DeletedRows(BitMap64(rng.sample(range(300_000), 40_000)))
for start, n in ((0, 65_536), (65_536, 65_536), (299_000, 1_000), (300_000, 10)):
    mask = deleted.keep_mask(start, n)
    kept = [] if mask is None else mask.to_pylist()
    show(f"mask {start}", [i for i, keep in enumerate(kept) if not keep])

rows = 40_000
table = pa.table({
    "id": pa.array(range(rows), pa.int64()),
    "noise": pa.array([rng.randrange(-2**31, 2**31) for _ in range(rows)], pa.int32()),
    "cents": pa.array([Decimal(i * 3).scaleb(-2) for i in range(rows)], pa.decimal128(12, 2)),
    "day": pa.array([i // 400 for i in range(rows)], pa.int32()).cast(pa.date32()),
    "at": pa.array([i * 1_000 + rng.randrange(50) for i in range(rows)], pa.timestamp("us")),
    "kind": pa.array([f"k{i % 7}" for i in range(rows)]),
    "x": pa.array([rng.random() for _ in range(rows)]),
})
chosen = choose_encodings(table, [], dictionary_limit=1 << 20)
print([(c.column, c.encoding) for c in chosen.choices])

spec = StatsSpec((StatsLeaf(("x",), StatKind.FLOAT), StatsLeaf(("y",), StatKind.FLOAT)), 32)
stats = StatsAccumulator(spec)
batches = (([1.5, -2.0, 0.0], [-0.0, 3.5, 7.0]), ([float("inf"), -7.25], [float("nan"), 1.0]))
for xs, ys in batches:
    stats.update(pa.record_batch([pa.array(xs), pa.array(ys, pa.float32())], names=["x", "y"]))
print(stats.finish(tight_bounds=None))
"""


def test_positions_encodings_and_stats_are_the_same_without_numpy() -> None:
    """Remapped DVs (32- and 64-bit positions), keep-masks, chosen encodings and float stats
    printed by the command's process, which cannot import numpy, equal this process's."""
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        exec(PROBE, {})
    assert "numpy" in sys.modules
    done = in_command(PROBE + "import sys\nassert sys.modules.get('numpy') is None")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == here.getvalue()
    assert "DELTA_BINARY_PACKED" in done.stdout and '"y":"NaN"' in done.stdout
