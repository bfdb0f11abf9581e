"""The byte ranges a projected read fetches (:mod:`rlcd.parquet.ranges`): pyarrow reads
the chosen columns of the chosen row groups from a file that holds only those ranges and the
footer, with junk everywhere else, exactly as it reads them from the whole file."""

from __future__ import annotations

import random
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.parquet.footer import footer_span
from rlcd.parquet.ranges import MERGE_GAP, chunk_ranges

ROWS = 3_000


def _table() -> pa.Table:
    rng = random.Random(5)
    floats = [
        rng.choice([1.5, -0.0, float("nan"), None, float("-inf"), i / 7]) for i in range(ROWS)
    ]
    return pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "score": pa.array(floats, pa.float64()),
            "blob": [rng.randbytes(2_000) for _ in range(ROWS)],
            "tags": pa.array(
                [[i, None] if i % 3 else None for i in range(ROWS)], pa.list_(pa.int32())
            ),
            "point": pa.array(
                [{"x": i / 3, "labels": [str(i % 5)]} for i in range(ROWS)],
                pa.struct([("x", pa.float32()), ("labels", pa.list_(pa.string()))]),
            ),
            "attrs": pa.array(
                [[("k", float(i))] for i in range(ROWS)], pa.map_(pa.string(), pa.float64())
            ),
            "a.b": pa.array([i % 11 / 2 for i in range(ROWS)], pa.float64()),
            "kind": [["x", "y", "z"][i % 3] for i in range(ROWS)],
        }
    )


def _pyarrow_file(tmp_path: Path, compression: str) -> Path:
    path = tmp_path / f"pyarrow-{compression}.parquet"
    pq.write_table(_table(), path, row_group_size=700, compression=compression)
    return path


def _delta_rs_file(tmp_path: Path) -> Path:
    table = _table().drop_columns(["a.b"])  # delta-rs refuses a dotted name
    props = deltalake.WriterProperties(max_row_group_size=800, compression="ZSTD")
    deltalake.write_deltalake(str(tmp_path / "delta"), table, writer_properties=props)
    [path] = (tmp_path / "delta").glob("*.parquet")
    return path


def _sparse(original: bytes, ranges: list[tuple[int, int]], path: Path) -> None:
    """The file with only ``ranges`` and its footer kept, random junk in every other byte."""
    data = bytearray(random.Random(1).randbytes(len(original)))
    span = footer_span(original[-8:], len(original))
    data[-span:] = original[-span:]
    for start, stop in ranges:
        data[start:stop] = original[start:stop]
    path.write_bytes(bytes(data))


def _spelled(table: pa.Table) -> str:
    """The rows as text: NaN equals NaN, -0.0 differs from 0.0."""
    return repr(table.to_pylist())


COLUMN_SETS = [("score",), ("tags",), ("point",), ("attrs",), ("score", "tags", "attrs", "point")]


@pytest.mark.parametrize("writer", ["pyarrow-snappy", "pyarrow-none", "pyarrow-zstd", "delta-rs"])
@pytest.mark.parametrize("columns", COLUMN_SETS)
def test_the_chosen_chunks_read_as_from_the_whole_file(
    tmp_path: Path, writer: str, columns: tuple[str, ...]
) -> None:
    if writer == "delta-rs":
        path = _delta_rs_file(tmp_path)
    else:
        path = _pyarrow_file(tmp_path, writer.split("-")[1])
    original = path.read_bytes()
    whole = pq.ParquetFile(path)
    footer = whole.metadata
    groups = [1, 3] if footer.num_row_groups > 3 else [1]
    ranges = chunk_ranges(footer, groups, columns, len(original))
    assert sum(stop - start for start, stop in ranges) < len(original) / 2
    sparse = tmp_path / "sparse.parquet"
    _sparse(original, ranges, sparse)
    with pa.OSFile(str(sparse)) as file:
        projected = pq.ParquetFile(file)
        for r in groups:
            got = projected.read_row_group(r, columns=list(columns))
            assert _spelled(got) == _spelled(whole.read_row_group(r, columns=list(columns)))


def test_a_dotted_name_is_read_like_pyarrow_reads_it(tmp_path: Path) -> None:
    path = _pyarrow_file(tmp_path, "snappy")
    original = path.read_bytes()
    footer = pq.read_metadata(path)
    ranges = chunk_ranges(footer, [2], ["a.b"], len(original))
    sparse = tmp_path / "sparse.parquet"
    _sparse(original, ranges, sparse)
    expected = pq.ParquetFile(path).read_row_group(2, columns=["a.b"])
    assert _spelled(pq.ParquetFile(str(sparse)).read_row_group(2, columns=["a.b"])) == _spelled(
        expected
    )


def test_ranges_are_sorted_and_close_ones_merged(tmp_path: Path) -> None:
    """Chunks a few KiB apart are one range; the ranges cover each chunk from its dictionary
    page, never overlap, and lie in the file."""
    path = tmp_path / "small.parquet"
    pq.write_table(_table().drop_columns(["blob"]), path, row_group_size=700)
    size = path.stat().st_size
    footer = pq.read_metadata(path)
    every = range(footer.num_row_groups)
    merged = chunk_ranges(footer, every, ["score", "kind"], size)
    assert len(merged) == 1  # the file is far smaller than MERGE_GAP
    paths = [footer.schema.column(j).path for j in range(footer.num_columns)]
    chunks = [footer.row_group(r).column(paths.index(c)) for r in every for c in ("score", "kind")]
    assert [c.path_in_schema for c in chunks[:2]] == ["score", "kind"]
    assert merged[0][0] == min(c.dictionary_page_offset for c in chunks)
    ends = [c.data_page_offset + c.total_compressed_size for c in chunks]
    assert max(ends) <= merged[0][1] <= size
    assert chunk_ranges(footer, [], ["score"], size) == []
    assert chunk_ranges(footer, every, ["nothing"], size) == []


def test_far_chunks_are_fetched_apart(tmp_path: Path) -> None:
    """Row groups over a MiB apart: one range per row group, with the slack Arrow reads."""
    rng = random.Random(3)
    table = pa.table(
        {
            "x": pa.array(range(4_000), pa.float64()),
            "blob": [rng.randbytes(600) for _ in range(4_000)],
        }
    )
    path = tmp_path / "far.parquet"
    pq.write_table(table, path, row_group_size=2_000, compression="none")
    size = path.stat().st_size
    footer = pq.read_metadata(path)
    ranges = chunk_ranges(footer, [0, 1], ["x"], size)
    chunks = [footer.row_group(r).column(0) for r in (0, 1)]
    starts = [c.dictionary_page_offset or c.data_page_offset for c in chunks]
    assert ranges == [
        (s, s + c.total_compressed_size + 100) for s, c in zip(starts, chunks, strict=True)
    ]
    assert ranges[1][0] - ranges[0][1] >= MERGE_GAP


def test_a_chunk_outside_the_file_is_refused(tmp_path: Path) -> None:
    path = _pyarrow_file(tmp_path, "snappy")
    footer = pq.read_metadata(path)
    with pytest.raises(ValueError, match="outside the file"):
        chunk_ranges(footer, [footer.num_row_groups - 1], ["kind"], 1_000)
