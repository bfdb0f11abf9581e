"""The printed reports: counts read as English, null partitions as --where writes them, and
one line for the leftovers a run removed."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from rlcd.cli.report import print_compaction, print_plan
from rlcd.compaction.cleanup import CleanupReport
from rlcd.compaction.compact import CompactionReport
from rlcd.compaction.plan import Bin
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.rewrite import CopySummary
from rlcd.delta.actions import AddFile
from rlcd.storage.base import ObjectMeta, PendingUpload


def _bin(part: str | None, *names: str) -> Bin:
    values = {"part": part}
    sources = tuple(AddFile(path=n, partition_values=values, size=1000) for n in names)
    return Bin(values, sources, 2000, purges_dvs=len(names) == 1, needs_footer_counts=False)


def _plan(*bins: Bin, cleanup: CleanupReport | None = None) -> str:
    out = io.StringIO()
    report = CompactionReport("file:///t", 3, CompactionPolicy(), bins, True, cleanup=cleanup)
    print_plan(report, out)
    return out.getvalue()


def test_counts_are_pluralised() -> None:
    """One bin, one file and one output are singular; more are plural."""
    one = _plan(_bin("a", "x.parquet"))
    assert "1 bin, 1 file, 1000 B -> 1 output\n" in one
    assert ": 1 file, " in one
    two = _plan(_bin("a", "x.parquet", "y.parquet"), _bin("b", "z.parquet", "w.parquet"))
    assert "2 bins, 4 files, 3.9 KiB -> 2 outputs\n" in two


def test_null_partitions_read_as_is_null() -> None:
    """A null partition value (JSON null or the empty string) shows as `part IS NULL`, never
    `part=None`."""
    for value in (None, ""):
        text = _plan(_bin(value, "x.parquet", "y.parquet"))
        assert "part IS NULL: 2 files" in text and "None" not in text


@pytest.mark.parametrize(
    ("table", "unfinished"),
    [("file:///t", "2 temp files"), ("s3://bucket/t", "2 unfinished uploads")],
)
def test_removed_leftovers_get_one_line_and_none_get_nothing(table: str, unfinished: str) -> None:
    """The leftovers a run removed (or would remove) are one line, unfinished writes named as
    the store has them; a clean table adds none."""
    cleanup = CleanupReport(
        table,
        3600.0,
        deleted=(ObjectMeta("a.parquet", 2048, 0),),
        aborted=(PendingUpload("b.parquet", "u", 0), PendingUpload("c.parquet", "u", 0)),
    )
    out = io.StringIO()
    print_compaction(CompactionReport(table, 3, CompactionPolicy(), (), cleanup=cleanup), out)
    assert out.getvalue().splitlines()[1:] == [
        "  removed leftovers of earlier runs older than 1h: 1 uncommitted file (2.0 KiB), "
        f"{unfinished}"
    ]


def test_copied_row_groups_with_patched_columns_are_counted_apart() -> None:
    """A copy plan that re-encodes some copied row groups' decimal columns says how many and
    how many bytes, per bin and in the total; one without says nothing of them."""
    bins = (_bin("a", "x.parquet", "y.parquet"), _bin("b", "z.parquet", "w.parquet"))
    out = io.StringIO()
    report = CompactionReport("file:///t", 3, CompactionPolicy(), bins, True)
    patched = CopySummary(6, 6 << 20, 0, 0, patched_row_groups=2, patched_bytes=1 << 20)
    plain = CopySummary(4, 4 << 20, 1, 1 << 10)
    print_plan(replace(report, copies=(patched, plain), copy_plans_read=2), out)
    text = out.getvalue()
    assert "copies 10 row groups (10.0 MiB; 2 with decimal columns re-encoded, 1.0 MiB)" in text
    assert "; copies 6 row groups (6.0 MiB; 2 with decimal columns re-encoded, 1.0 MiB)" in text
    assert "; copies 4 row groups (4.0 MiB), re-encodes 1 row group (1.0 KiB)" in text
