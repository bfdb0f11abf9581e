"""The rules that turn what storage showed of a live file into problems naming it."""

from __future__ import annotations

import json

from rlcd.delta.actions import AddFile
from rlcd.operations._verify_rules import FileObservation, FileProblem, file_problems

ADD = AddFile(path="p=1/part-0.parquet", size=1000, stats=json.dumps({"numRecords": 10}))


def _what(seen: FileObservation) -> list[str]:
    return [p.what for p in file_problems(seen)]


def test_a_file_as_its_add_says_has_no_problem() -> None:
    """Present, of its add's size, its DV within its rows: nothing to report."""
    assert file_problems(FileObservation(ADD, stored_size=1000, max_deleted=9, rows=10)) == ()


def test_a_missing_file_is_named() -> None:
    """A file storage does not have is reported under its add's path."""
    assert file_problems(FileObservation(ADD)) == (
        FileProblem("p=1/part-0.parquet", "data file is missing"),
    )


def test_a_file_of_another_size_names_both_sizes() -> None:
    """The size on storage and the add's size both appear."""
    assert _what(FileObservation(ADD, stored_size=999)) == [
        "is 999 bytes on storage, its add says 1000"
    ]


def test_a_path_outside_the_table_is_the_only_problem() -> None:
    """Nothing else is said of a file whose path leaves the table (nothing else was read)."""
    assert _what(FileObservation(ADD, outside=True)) == ["lies outside the table"]


def test_the_last_row_is_the_first_position_beyond_reach() -> None:
    """A DV may delete row ``rows - 1``; row ``rows`` is a problem naming both numbers."""
    assert _what(FileObservation(ADD, stored_size=1000, max_deleted=9, rows=10)) == []
    assert _what(FileObservation(ADD, stored_size=1000, max_deleted=10, rows=10)) == [
        "its deletion vector deletes row 10, but the file has 10 rows"
    ]


def test_an_unknown_row_count_judges_no_position() -> None:
    """Without a row count (no stats, no footer read) no position is called out of range."""
    assert _what(FileObservation(ADD, stored_size=1000, max_deleted=10**9)) == []


def test_every_problem_of_one_file_is_reported_in_reading_order() -> None:
    """A missing file with a broken DV and an unreadable footer gets all three, in the order a
    reader meets them: the file, its DV, its row count."""
    seen = FileObservation(
        ADD, dv_error="deletion vector file d.bin is missing", rows_error="not Parquet"
    )
    assert _what(seen) == [
        "data file is missing",
        "deletion vector file d.bin is missing",
        "cannot read its row count from the Parquet footer: not Parquet",
    ]


def test_a_problem_reads_as_path_then_what() -> None:
    """A problem prints as ``path: what``, the form the report lists."""
    assert (
        str(FileProblem("a.parquet", "data file is missing")) == "a.parquet: data file is missing"
    )


def test_data_that_does_not_read_is_the_last_problem() -> None:
    """What a deep read found comes after the size and DV problems of the same file."""
    seen = FileObservation(ADD, stored_size=999, data_error="row group 0 does not decode: x")
    assert _what(seen) == [
        "is 999 bytes on storage, its add says 1000",
        "data does not read: row group 0 does not decode: x",
    ]
