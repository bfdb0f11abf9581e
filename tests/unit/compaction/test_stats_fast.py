"""The accumulator's fast path (null-free floats, by their bits) gives exactly what the general
``min_max`` path gives: same JSON, byte for byte, over random batches, slices and batch splits
(decimals ride along, on the general path either way)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcd.compaction import _stats as stats_module
from rlcd.compaction._stats import StatsAccumulator
from rlcd.delta.stats_spec import StatKind, StatsLeaf, StatsSpec

SPEC = StatsSpec((StatsLeaf(("x",), StatKind.FLOAT), StatsLeaf(("d",), StatKind.DECIMAL)), 32)


def _json(batches: list[pa.RecordBatch], *, fast: bool) -> str:
    with pytest.MonkeyPatch.context() as m:
        if not fast:
            m.setattr(stats_module, "_observe_fast", lambda *_args: False)
        acc = StatsAccumulator(SPEC)
        for batch in batches:
            acc.update(batch)
        return acc.finish(tight_bounds=True)


floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -1.5]),
)


@st.composite
def batches(draw: Any) -> tuple[list[pa.RecordBatch], pa.DataType, pa.DataType]:
    float_type = draw(st.sampled_from([pa.float64(), pa.float32()]))
    precision = draw(st.sampled_from([1, 9, 12, 18, 19, 38]))
    scale = draw(st.integers(0, precision))
    decimal_type = pa.decimal128(precision, scale)
    bound = 10 ** min(precision, 30) - 1  # the widest unscaled value the type holds
    n = draw(st.integers(1, 40))
    xs = draw(
        st.lists(
            st.one_of(floats, st.none()) if draw(st.booleans()) else floats, min_size=n, max_size=n
        )
    )
    unscaled = draw(
        st.lists(
            st.one_of(st.integers(-bound, bound), st.just(bound), st.just(-bound)),
            min_size=n,
            max_size=n,
        )
    )
    ds = [Decimal(u).scaleb(-scale) for u in unscaled]
    if draw(st.booleans()):
        ds[draw(st.integers(0, n - 1))] = None
    if float_type == pa.float32():
        xs = [
            None
            if x is None
            else float(pa.scalar(x, pa.float32()).as_py())
            if math.isfinite(x)
            else x
            for x in xs
        ]
    batch = pa.record_batch(
        [pa.array(xs, float_type), pa.array(ds, decimal_type)], names=["x", "d"]
    )
    # sliced batches (non-zero offsets) and a split into several batches
    start = draw(st.integers(0, n - 1))
    batch = batch.slice(start)
    cuts = sorted(draw(st.lists(st.integers(0, batch.num_rows), max_size=3)))
    edges = [0, *cuts, batch.num_rows]
    return [batch.slice(a, b - a) for a, b in itertools.pairwise(edges)], float_type, decimal_type


@settings(max_examples=300, deadline=None)
@given(batches())
def test_the_fast_path_equals_the_general_path(
    drawn: tuple[list[pa.RecordBatch], pa.DataType, pa.DataType],
) -> None:
    parts, _, _ = drawn
    assert _json(parts, fast=True) == _json(parts, fast=False)


def test_the_fast_path_is_taken() -> None:
    """The path the test above compares really runs for null-free floats, of both widths."""
    seen: list[bool] = []
    real = stats_module._observe_fast

    def spy(*args: Any) -> bool:
        seen.append(real(*args))
        return seen[-1]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(stats_module, "_observe_fast", spy)
        acc = StatsAccumulator(SPEC)
        for x in (pa.array([1.5, -2.0]), pa.array([1.5, -2.0], pa.float32())):
            d = pa.array([Decimal("1.25"), Decimal("-3.50")], pa.decimal128(12, 2))
            acc.update(pa.record_batch([x, d], names=["x", "d"]))
    assert seen == [True, False, True, False]
    assert '"minValues":{"x":-2.0,"d":-3.50},"maxValues":{"x":1.5,"d":1.25}' in acc.finish(
        tight_bounds=None
    )


def test_decimal_outside_64_bits_is_compared_whole() -> None:
    """A 19-digit decimal is compared in 128 bits."""
    big = Decimal("9999999999999999999")
    acc = StatsAccumulator(StatsSpec((StatsLeaf(("d",), StatKind.DECIMAL),), 32))
    acc.update(pa.record_batch([pa.array([big, -big], pa.decimal128(19, 0))], names=["d"]))
    assert '"minValues":{"d":-9999999999999999999}' in acc.finish(tight_bounds=None)
