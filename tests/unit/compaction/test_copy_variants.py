"""The copy path's choice of the output's writer variant per bin: decimals as integers or as
fixed-length bytes, partition columns left out of the output or written into it (after the
data columns, in ``metaData.partitionColumns`` order, as Delta 4.4 writes its files), the one
that copies the most source bytes; a tie, or nothing to copy, keeps today's (integers, left
out). Sources are pyarrow's files in memory; their footers are all the plan reads."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

import pyarrow as pa
import pytest

from rlcd.compaction.plan import Bin
from rlcd.compaction.rewrite import (
    PartitionColumn,
    RewriteSettings,
    _plan,
    _Planned,
    _variants,
)
from rlcd.compaction.source import ReadOptions
from rlcd.delta.actions import AddFile
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.schema import PrimitiveType
from rlcd.delta.stats_spec import StatsSpec
from rlcd.parquet.copy_plan import Reason
from tests.unit.parquet.files import footer, write

ROWS = 3_000
DATA = pa.schema([("id", pa.int64()), ("price", pa.decimal128(12, 2))])
PARTITIONS = (
    PartitionColumn(pa.field("part", pa.string()), PrimitiveType("string")),
    PartitionColumn(pa.field("n", pa.int32()), PrimitiveType("integer")),
)
VALUES = {"n": "7", "part": "x"}
SETTINGS = RewriteSettings(
    "t",
    0,
    ReadOptions(DATA),
    StatsSpec(()),
    ("part", "n"),
    partition_fields=PARTITIONS,
    min_copy_row_group=1,
)
DV = DeletionVectorDescriptor(
    storage_type="i", path_or_inline_dv="dv", size_in_bytes=1, cardinality=1
)


def _file(rows: int, *, partitions: bool, integers: bool = True) -> bytes:
    """The footer of a file of ``rows`` rows (row groups of 1,000) holding the data columns,
    then, with ``partitions``, the partition columns with the bin's values."""
    table = pa.table(
        [pa.array(range(rows), pa.int64()), [Decimal(i).scaleb(-2) for i in range(rows)]],
        schema=DATA,
    )
    if partitions:
        table = table.append_column(PARTITIONS[0].field, pa.repeat(pa.scalar("x"), rows))
        table = table.append_column(PARTITIONS[1].field, pa.repeat(pa.scalar(7, pa.int32()), rows))
    return footer(write(table, 1_000, store_decimal_as_integer=integers))


def _plan_of(
    *files: bytes, dv: int | None = None, values: Mapping[str, str | None] = VALUES
) -> _Planned | None:
    """The bin's plan (None when it copies nothing); source ``dv`` has a deletion vector."""
    adds = tuple(
        AddFile(f"f{i}", values, 10**9, deletion_vector=DV if i == dv else None)
        for i in range(len(files))
    )
    bin_ = Bin(values, adds, 10**9, purges_dvs=dv is not None, needs_footer_counts=False)
    return _plan(bin_, SETTINGS, tuple(f"f{i}" for i in range(len(files))), list(files))


def test_the_partition_columns_are_written_in_when_that_copies_more() -> None:
    """Two files holding their partition columns outweigh one without: the output holds
    them, typed per the table and in the files' order; the other file is re-encoded."""
    planned = _plan_of(
        _file(ROWS, partitions=True), _file(ROWS, partitions=False), _file(ROWS, partitions=True)
    )
    assert planned is not None
    chosen = planned.settings
    assert chosen.written_partitions == (pa.scalar("x"), pa.scalar(7, pa.int32()))
    assert chosen.decimals_as_integers
    choices = planned.plan.choices
    assert [c.source for c in choices if c.copy] == [0] * 3 + [2] * 3
    assert {c.reason for c in choices if c.source == 1} == {Reason.SCHEMA}


def test_the_partition_columns_stay_out_when_that_copies_more() -> None:
    planned = _plan_of(
        _file(ROWS, partitions=False), _file(ROWS, partitions=True), _file(ROWS, partitions=False)
    )
    assert planned is not None
    assert planned.settings.written_partitions == ()
    assert [c.source for c in planned.plan.choices if c.copy] == [0] * 3 + [2] * 3


def test_both_dimensions_are_chosen_together() -> None:
    """Files with their partition columns and fixed-length decimals (pyarrow's default): the
    fourth variant, the only one under which they are copied."""
    planned = _plan_of(_file(ROWS, partitions=True, integers=False), _file(1_000, partitions=False))
    assert planned is not None
    chosen = planned.settings
    assert chosen.written_partitions and not chosen.decimals_as_integers
    assert [c.source for c in planned.plan.choices if c.copy] == [0] * 3


def test_nothing_to_copy_keeps_todays_output() -> None:
    """A bin whose only file holding its partition columns has a deletion vector copies
    nothing under any variant: no plan, the re-encode path (partition columns left out)."""
    assert _plan_of(_file(ROWS, partitions=True), dv=0) is None


def test_the_variants_in_order_of_preference() -> None:
    """Today's first (integers, left out), a tie going to the earlier; a null partition
    value is a typed null."""
    values = {"n": None, "part": "x"}
    variants = _variants(Bin(values, (AddFile("f", values, 1),), 1, True, False), SETTINGS)
    written = [v.written_partitions for v in variants]
    assert [v.decimals_as_integers for v in variants] == [True, False, True, False]
    assert written[:2] == [(), ()] and written[2] == written[3]
    assert written[2] == (pa.scalar("x"), pa.scalar(None, pa.int32()))
    assert not written[2][1].is_valid


def test_an_unpartitioned_table_has_two_variants() -> None:
    unpartitioned = RewriteSettings("t", 0, ReadOptions(DATA), StatsSpec(()), ())
    variants = _variants(Bin({}, (AddFile("f", {}, 1),), 1, True, False), unpartitioned)
    assert [(v.decimals_as_integers, v.written_partitions) for v in variants] == [
        (True, ()),
        (False, ()),
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [({"n": "seven", "part": "x"}, "not a valid integer"), ({"part": "x"}, "no entry")],
)
def test_a_partition_value_that_does_not_parse_plans_nothing(
    values: dict[str, str | None], message: str
) -> None:
    """Refused with ValueError, which the caller turns into the re-encode path."""
    with pytest.raises(ValueError, match=message):
        _plan_of(_file(ROWS, partitions=True), _file(ROWS, partitions=True), values=values)
