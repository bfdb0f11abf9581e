"""Outputs of copied and re-encoded row groups: pyarrow reads back exactly the sources' rows in
order, whatever the sources' codecs, page indexes, bloom filters, nested and dictionary
columns; the check of the footer read back fails closed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.errors import InternalError
from rlcd.parquet.assemble import (
    Assembly,
    EncodedRange,
    Patch,
    PatchRange,
    SourceRange,
    assemble,
    check_output,
)
from rlcd.parquet.copy_plan import Copy, CopyPlan, OutputSchema, Reencode, Source, plan_copy
from tests.unit.parquet.files import footer, row_group_ranges, write

OUTPUT = {"compression": "zstd", "write_page_index": True}
"""The output writer's settings (page indexes on, to be dropped like the sources')."""


def _table(start: int, rows: int) -> pa.Table:
    """Flat, dictionary-encoded, struct, list and map columns, with nulls."""
    ids = range(start, start + rows)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "word": pa.array([f"w{i % 7}" if i % 11 else None for i in ids], pa.string()),
            "point": pa.array(
                [{"x": i, "tags": [str(i)] * (i % 3)} for i in ids],
                pa.struct([("x", pa.int32()), ("tags", pa.list_(pa.string()))]),
            ),
            "attrs": pa.array(
                [[("k", i), ("j", -i)] if i % 5 else None for i in ids],
                pa.map_(pa.string(), pa.int64()),
            ),
            "score": pa.array([i / 7 for i in ids], pa.float64()),
        }
    )


SOURCES: list[tuple[pa.Table, int, dict[str, object]]] = [
    (_table(0, 3_000), 1_000, {"compression": "snappy", "write_page_index": True}),
    (_table(3_000, 2_500), 1_000, {"compression": "gzip", "bloom_filter_options": {"id": True}}),
    (_table(5_500, 2_000), 700, {"compression": "zstd", "data_page_version": "2.0"}),
    (_table(7_500, 1_200), 400, {"compression": "snappy", "sorting_columns": None}),
]
"""Sources in write order: several row groups each, three codecs, page indexes, a bloom filter,
data pages v2."""


def _files() -> list[pa.Buffer]:
    return [write(table, size, **settings) for table, size, settings in SOURCES]


def _encode(plan: CopyPlan, files: Sequence[pa.Buffer]) -> pa.Buffer:
    """What the re-encode path does with the plan: each step's rows, in order, through one
    writer, each step ending its row groups (every source here is free of DVs)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, SOURCES[0][0].schema, **OUTPUT) as writer:
        for step in plan.steps:
            if isinstance(step, Reencode):
                parts = [
                    pq.ParquetFile(pa.BufferReader(files[run.source])).read_row_groups(
                        range(run.first, run.stop)
                    )
                    for run in step.runs
                ]
                writer.write_table(pa.concat_tables(parts), row_group_size=1 << 20)
    return sink.getvalue()


def _materialise(assembly: Assembly, files: Sequence[pa.Buffer], encoded: pa.Buffer) -> pa.Buffer:
    """The output file, from its pieces (the IO phase 2 does with ranged copies)."""
    sink = pa.BufferOutputStream()
    for piece in assembly.pieces:
        if isinstance(piece, SourceRange):
            sink.write(files[piece.source].slice(piece.start, piece.stop - piece.start))
        elif isinstance(piece, EncodedRange):
            sink.write(encoded.slice(piece.start, piece.stop - piece.start))
        else:
            sink.write(piece)
    return sink.getvalue()


def _output() -> OutputSchema:
    return OutputSchema.of(footer(write(SOURCES[0][0].slice(0, 0), 1, **OUTPUT)))


def _build(
    dv: Sequence[bool], min_copy: int = 0
) -> tuple[CopyPlan, Assembly, pa.Buffer, list[pa.Buffer]]:
    files = _files()
    plan = plan_copy(
        [Source(footer(f), d) for f, d in zip(files, dv, strict=True)], _output(), min_copy
    )
    encoded = _encode(plan, files)
    assembly = assemble(plan, footer(encoded), encoded.size)
    out = _materialise(assembly, files, encoded)
    check_output(assembly, footer(out), out.size)
    return plan, assembly, out, files


def _expected() -> pa.Table:
    return pa.concat_tables([table for table, _, _ in SOURCES])


@pytest.mark.parametrize(
    "dv",
    [(False,) * 4, (True,) * 4, (False, True, False, True), (True, False, True, False)],
    ids=["all-copied", "all-reencoded", "copy-first", "reencode-first"],
)
def test_a_mixed_output_reads_back_as_the_sources_rows_in_order(dv: tuple[bool, ...]) -> None:
    """Copied and re-encoded row groups, in any mix, read back through pyarrow as every
    source's rows in write order, with the output's schema and key-value metadata."""
    plan, assembly, out, _ = _build(dv)
    read = pq.read_table(pa.BufferReader(out))
    assert read.equals(_expected())
    assert read.schema.metadata == pq.read_schema(pa.BufferReader(out)).metadata
    copies = [s for s in plan.steps if isinstance(s, Copy)]
    assert len(copies) == sum(
        len(row_group_ranges(f)) for f, d in zip(_files(), dv, strict=True) if not d
    )
    assert assembly.num_rows == read.num_rows == pq.read_metadata(pa.BufferReader(out)).num_rows


def test_copied_row_groups_keep_codecs_and_statistics_and_drop_page_indexes() -> None:
    """A copied row group keeps its source's codec and statistics; its page index and bloom
    filter references are dropped (their bytes are not carried), so no reader looks for them."""
    _, _, out, files = _build((False,) * 4)
    meta = pq.read_metadata(pa.BufferReader(out))
    groups = [
        pq.read_metadata(pa.BufferReader(f)).row_group(i)
        for f in files
        for i in range(len(row_group_ranges(f)))
    ]
    assert meta.num_row_groups == len(groups)
    indexed = bloomed = False
    for i, source in enumerate(groups):
        group = meta.row_group(i)
        assert group.num_rows == source.num_rows
        for j in range(group.num_columns):
            chunk, original = group.column(j), source.column(j)
            assert chunk.compression == original.compression
            assert chunk.statistics.equals(original.statistics)
            indexed |= original.has_offset_index and original.has_column_index
            bloomed |= original.bloom_filter_offset is not None
            assert not chunk.has_offset_index and not chunk.has_column_index
            assert chunk.bloom_filter_offset is None
    assert indexed and bloomed
    assert {meta.row_group(0).column(0).compression, meta.row_group(3).column(0).compression} == {
        "SNAPPY",
        "GZIP",
    }


def test_small_row_groups_are_reencoded_into_full_ones_between_copies() -> None:
    """Row groups under the threshold are merged across sources into one re-encoded row group
    per step; the copies around it stay as they were."""
    sizes = [stop - start for f in _files() for _, start, stop in row_group_ranges(f)]
    plan, assembly, out, _ = _build((False,) * 4, min_copy=sorted(sizes)[len(sizes) // 2])
    assert pq.read_table(pa.BufferReader(out)).equals(_expected())
    steps = [type(step).__name__ for step in plan.steps]
    assert "Copy" in steps and "Reencode" in steps
    reencoded = sum(s.rows for s in plan.steps if isinstance(s, Reencode))
    assert len(assembly.row_groups) == len(
        [s for s in plan.steps if isinstance(s, Copy)]
    ) + steps.count("Reencode")
    assert sum(assembly.row_groups) == _expected().num_rows and reencoded > 0


def test_an_encoded_file_that_does_not_end_a_row_group_at_each_step_is_refused() -> None:
    """Two re-encode steps written as one row group cannot be laid out between copies."""
    files = _files()
    plan = plan_copy(
        [Source(footer(f), d) for f, d in zip(files, (True, False, True, False), strict=True)],
        _output(),
        0,
    )
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, SOURCES[0][0].schema, **OUTPUT) as writer:
        writer.write_table(pa.concat_tables([SOURCES[0][0], SOURCES[2][0]]), row_group_size=1 << 20)
    with pytest.raises(InternalError, match="re-encode step"):
        assemble(plan, footer(sink.getvalue()), sink.getvalue().size)


def test_the_check_fails_closed_on_a_footer_that_does_not_fit() -> None:
    """The check refuses a footer whose row groups, offsets or size differ from the plan's."""
    _, assembly, out, files = _build((False, True, False, True))
    check_output(assembly, footer(out), out.size)
    with pytest.raises(InternalError, match="row groups"):
        check_output(assembly, footer(files[0]), out.size)
    with pytest.raises(InternalError, match="bytes"):
        check_output(assembly, footer(out), out.size + 1)
    with pytest.raises(InternalError, match="does not parse"):
        check_output(
            assembly, b"\x00" * 8 + len(b"\x00" * 8).to_bytes(4, "little") + b"PAR1", out.size
        )
    other = write(SOURCES[0][0].rename_columns(["a", "b", "c", "d", "e"]), 1_000)
    with pytest.raises(InternalError, match="schema"):
        check_output(assembly, footer(other), out.size)


def test_a_sources_copied_row_groups_are_one_range() -> None:
    """Row groups copied one after another from one source are one range to copy (one ranged
    copy, one UploadPartCopy): the pieces are the magic, a range per source, the footer."""
    _, assembly, _, files = _build((False,) * 4)
    expected = [
        SourceRange(i, row_group_ranges(f)[0][1], row_group_ranges(f)[-1][2])
        for i, f in enumerate(files)
    ]
    assert assembly.pieces[0] == b"PAR1" and assembly.pieces[-1] == assembly.footer
    assert list(assembly.pieces[1:-1]) == expected


def _priced(start: int, rows: int) -> pa.Table:
    """Decimals between other columns (a patched chunk lies between copied ones), two of
    them side by side, with nulls, and a dictionary-encoded string."""
    ids = range(start, start + rows)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "price": pa.array(
                [Decimal(i * 7919 % 100_003 - 50_000).scaleb(-2) if i % 9 else None for i in ids],
                pa.decimal128(12, 2),
            ),
            "small": pa.array([Decimal(i % 1000).scaleb(-1) for i in ids], pa.decimal128(5, 1)),
            "word": pa.array([f"w{i % 7}" for i in ids], pa.string()),
        }
    )


PATCHED_OUTPUT = {**OUTPUT, "store_decimal_as_integer": True}
"""The output writer's settings: decimals as INT32/INT64, as delta-rs and Spark store them."""


def _patch(
    plan: CopyPlan, files: Sequence[pa.Buffer], **settings: object
) -> tuple[list[Patch], pa.Buffer]:
    """What the rewrite does for each row group copied with patches: its patched columns,
    decoded, written with the output's settings as a file of their own, whose chunks are
    appended to the patches file."""
    patches, body = [], pa.BufferOutputStream()
    for step in plan.steps:
        if isinstance(step, Copy) and step.patched:
            source = pq.ParquetFile(pa.BufferReader(files[step.source]))
            names = [source.schema_arrow.names[c] for c in step.patched]
            file = write(source.read_row_group(step.row_group, columns=names), 1 << 20, **settings)
            span = len(footer(file))
            patches.append(Patch(footer(file), body.tell()))
            body.write(file.slice(4, file.size - span - 4))
    return patches, body.getvalue()


def _empty() -> pa.Buffer:
    """The file the output's writer writes with no row group: the footer's template."""
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, _priced(0, 0).schema, **PATCHED_OUTPUT).close()
    return sink.getvalue()


def _patched_files() -> list[pa.Buffer]:
    return [
        write(_priced(0, 3_000), 1_000, compression="snappy"),  # fixed-length decimals
        write(_priced(3_000, 2_000), 700, **PATCHED_OUTPUT),  # as the output's
        write(_priced(5_000, 1_500), 1_500, compression="gzip", write_page_index=True),
    ]


def _materialised(
    assembly: Assembly, files: Sequence[pa.Buffer], encoded: pa.Buffer, patches: pa.Buffer
) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    for piece in assembly.pieces:
        if isinstance(piece, PatchRange):
            sink.write(patches.slice(piece.start, piece.stop - piece.start))
        else:
            sink.write(_materialise(replace(assembly, pieces=(piece,)), files, encoded))
    return sink.getvalue()


def test_row_groups_copied_with_patches_read_back_as_the_sources_rows() -> None:
    """Sources whose decimals are fixed-length bytes, in an output of integer decimals: their
    row groups are copied but for the decimal columns' chunks, spliced in from the patches;
    the output reads back as the sources' rows in order, with the output's storage, the
    patched chunks' statistics and codec, and row group sizes that add up."""
    files = _patched_files()
    output = OutputSchema.of(footer(_empty()))
    plan = plan_copy(
        [Source(footer(f), False) for f in files],
        output,
        0,
        patchable=frozenset({"price", "small"}),
    )
    assert [s.patched for s in plan.steps if isinstance(s, Copy)] == [(1, 2)] * 3 + [()] * 3 + [
        (1, 2)
    ]
    empty = _empty()
    patches, body = _patch(plan, files, **PATCHED_OUTPUT)
    assembly = assemble(plan, footer(empty), empty.size, patches)
    out = _materialised(assembly, files, empty, body)
    check_output(assembly, footer(out), out.size)
    read = pq.read_table(pa.BufferReader(out))
    assert read.equals(
        pa.concat_tables([_priced(0, 3_000), _priced(3_000, 2_000), _priced(5_000, 1_500)])
    )
    meta = pq.read_metadata(pa.BufferReader(out))
    assert meta.schema.column(1).physical_type == "INT64"
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        price = group.column(1)
        assert price.physical_type == "INT64" and price.compression == "ZSTD"
        assert price.statistics.has_min_max and price.statistics.null_count > 0
        assert not group.column(0).has_column_index  # page indexes are dropped, as before
        assert group.total_byte_size == sum(
            group.column(j).total_uncompressed_size for j in range(group.num_columns)
        )


def test_a_patch_that_does_not_fit_its_row_group_is_refused() -> None:
    """A patch stored otherwise than the output, or of other rows, fails the assembly."""
    files = _patched_files()[:1]
    output = OutputSchema.of(footer(_empty()))
    plan = plan_copy(
        [Source(footer(files[0]), False)], output, 0, patchable=frozenset({"price", "small"})
    )
    empty = _empty()
    fixed, _ = _patch(plan, files, **OUTPUT)
    with pytest.raises(InternalError, match="not stored as the output's"):
        assemble(plan, footer(empty), empty.size, fixed)
    patches, _ = _patch(plan, files, **PATCHED_OUTPUT)
    with pytest.raises(InternalError, match="patches for"):
        assemble(plan, footer(empty), empty.size, patches[:-1])
    short = write(_priced(0, 10).select(["price", "small"]), 10, **PATCHED_OUTPUT)
    with pytest.raises(InternalError, match="rows for a row group"):
        assemble(plan, footer(empty), empty.size, [Patch(footer(short), 0), *patches[1:]])
