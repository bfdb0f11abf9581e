"""Encoding each row group in two threads (rlcd's SplitWriter) against one pyarrow writer.

    .venv/bin/python bench/parallel_encode.py [--shape fixture] [--files 40] [--rows 50000]

pyarrow encodes a file's row groups, and a row group's columns, one after another in one
thread, so a bin alone on the machine is bound by its encoding thread. rlcd's
``SplitWriter`` (what a lone bin writes with) encodes each row group's fields in two parts at
once and joins the parts. This encodes the same row groups (``--files`` appends of the shape,
cut into 100k-row groups) with both, checks that the files are byte for byte the same, and
prints wall and CPU ratios. The encode stage alone: end to end, ``bench/compact.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shapes import SHAPES, generate

ROWS_PER_GROUP = 100_000
WRITER = {
    "compression": "zstd",
    "dictionary_pagesize_limit": 64 * 1024,
    "use_compliant_nested_type": True,
    "store_decimal_as_integer": True,
}


def _plain(ty: Any) -> Any:
    """delta-rs' view types as the table's (pyarrow cannot slice a string view)."""
    import pyarrow as pa

    if ty == pa.string_view():
        return pa.string()
    if ty == pa.binary_view():
        return pa.binary()
    if pa.types.is_list(ty) or pa.types.is_large_list(ty) or pa.types.is_list_view(ty):
        return pa.list_(ty.value_field.with_type(_plain(ty.value_type)))
    if pa.types.is_struct(ty):
        return pa.struct([f.with_type(_plain(f.type)) for f in ty])
    if pa.types.is_map(ty):
        return pa.map_(_plain(ty.key_type), ty.item_field.with_type(_plain(ty.item_type)))
    return ty


def _row_groups(table_dir: Path) -> list[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(pq.read_table(f) for f in sorted(table_dir.glob("*.parquet")))
    table = table.cast(pa.schema([f.with_type(_plain(f.type)) for f in table.schema]))
    return [
        table.slice(at, ROWS_PER_GROUP).combine_chunks()
        for at in range(0, table.num_rows, ROWS_PER_GROUP)
    ]


def _split_writer(row_groups: list[Any]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlcd.parquet.split_writer import SplitWriter

    stream = pa.BufferOutputStream()
    writer = SplitWriter(
        stream, lambda out, schema: pq.ParquetWriter(out, schema, **WRITER), chunk_bytes=1 << 20
    )
    for row_group in row_groups:
        writer.write_table(row_group)
    writer.close()
    return stream.getvalue().to_pybytes()


def _one_writer(row_groups: list[Any]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    stream = pa.BufferOutputStream()
    writer = pq.ParquetWriter(stream, row_groups[0].schema, **WRITER)
    for row_group in row_groups:
        writer.write_table(row_group, row_group_size=row_group.num_rows)
    writer.close()
    return stream.getvalue().to_pybytes()


def _timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="fixture")
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlcd-bench-") as tmp:
        generate(Path(tmp), args.files, args.rows, args.shape)
        row_groups = _row_groups(Path(tmp))
    print(f"{args.shape}: {len(row_groups)} row groups of {ROWS_PER_GROUP} rows")
    walls, cpus = [], []
    for rep in range(args.repeat):
        one, one_wall, one_cpu = _timed(lambda: _one_writer(row_groups))
        split, split_wall, split_cpu = _timed(lambda: _split_writer(row_groups))
        if split != one:
            raise SystemExit("the split writer's file differs from the one writer's")
        walls.append(one_wall / split_wall)
        cpus.append(one_cpu / split_cpu)
        print(
            f"rep {rep + 1}: one writer {one_wall:.2f} s ({one_cpu:.2f} CPU), split writer "
            f"{split_wall:.2f} s ({split_cpu:.2f} CPU); identical bytes"
        )
    print(
        f"split vs one writer (medians; > 1 is better): wall {statistics.median(walls):.2f}x, "
        f"CPU {statistics.median(cpus):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
