"""Encoding a bin's row groups two at a time: what it would buy, side by side in one run.

    .venv/bin/python bench/parallel_encode.py [--shape fixture] [--files 40] [--rows 50000]

pyarrow encodes one file's row groups one after another (its buffered row groups are not
exposed), so a bin alone on the machine is bound by one encoding thread. This encodes the same
row groups (``--files`` appends of the shape, cut into 100k-row groups) three ways: one writer,
one-row-group files in one thread, and the same files in two threads; it joins the files with
``bench/splice.py`` and checks that the joined file is byte for byte the one writer's. It prints
wall and CPU ratios and the join's Python cost per row group. Not wired into rlcd: see issue 12.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
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


def _encode(row_group: Any) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    stream = pa.BufferOutputStream()
    writer = pq.ParquetWriter(stream, row_group.schema, **WRITER)
    writer.write_table(row_group, row_group_size=row_group.num_rows)
    writer.close()
    return stream.getvalue()


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
    from splice import SplicedFile

    from rlcd.compaction.footer import MAGIC

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
    ratios = []
    for rep in range(args.repeat):
        one, one_wall, one_cpu = _timed(lambda: _one_writer(row_groups))
        _, serial_wall, serial_cpu = _timed(lambda: [_encode(g) for g in row_groups])
        with ThreadPoolExecutor(2) as pool:
            files, par_wall, par_cpu = _timed(lambda: list(pool.map(_encode, row_groups)))
        spliced = SplicedFile()
        start = time.perf_counter()
        joined = b"".join([MAGIC, *(spliced.add(f).to_pybytes() for f in files), spliced.footer()])
        join_ms = (time.perf_counter() - start) / len(files) * 1e3
        if joined != one:
            raise SystemExit("the joined file differs from the one writer's")
        ratios.append(one_wall / par_wall)
        print(
            f"rep {rep + 1}: one writer {one_wall:.2f} s ({one_cpu:.2f} CPU), separate files "
            f"{serial_wall:.2f} s ({serial_cpu:.2f} CPU), two threads {par_wall:.2f} s "
            f"({par_cpu:.2f} CPU); join {join_ms:.2f} ms per row group; identical bytes"
        )
    print(f"two threads vs one writer, wall: {statistics.median(ratios):.2f}x (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
