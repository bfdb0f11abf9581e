"""The copy planner: which row groups are copied as they are and which re-encoded. Planted
footers check that it never copies a row group it must not (a deletion vector, encryption,
an unknown field, another schema, a layout it cannot move, a small row group)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from functools import cache

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcd.parquet._format import STRUCTS
from rlcd.parquet._thrift import (
    BINARY,
    I32,
    I64,
    LIST,
    STRUCT,
    Drop,
    edit_struct,
    integer,
    list_header,
    read_integer,
    struct_fields,
    struct_list,
)
from rlcd.parquet.copy_plan import (
    Copy,
    CopyPlan,
    OutputSchema,
    Reason,
    Reencode,
    Run,
    Source,
    choose_plan,
    inexact_statistics,
    metadata,
    plan_copy,
)
from tests.unit.parquet.files import footer, row_group_ranges, write

ROWS = 2_000

Path = tuple[tuple[int, int | None], ...]
"""Where a struct lies in a footer: per step, a field id and, in a list, the element's index."""


def _table(rows: int = ROWS, *, id_type: pa.DataType | None = None, name: str = "id") -> pa.Table:
    return pa.table(
        {
            name: pa.array(range(rows), id_type or pa.int64()),
            "word": pa.array([f"w{i % 13}" for i in range(rows)], pa.string()),
            "point": pa.array(
                [{"x": i, "y": [float(i)]} for i in range(rows)],
                pa.struct([("x", pa.int32()), ("y", pa.list_(pa.float64()))]),
            ),
        }
    )


@cache
def _file(row_group_size: int = 500, variant: str = "") -> pa.Buffer:
    """A source file of :func:`_table`'s rows, or of another Parquet schema (``variant``)."""
    table = _table()
    if variant == "int32":
        table = _table(id_type=pa.int32())
    elif variant == "renamed":
        table = _table(name="key")
    elif variant == "required":
        table = table.cast(table.schema.set(0, table.schema.field(0).with_nullable(False)))
    elif variant == "field_id":
        field = table.schema.field(0).with_metadata({"PARQUET:field_id": "7"})
        table = table.cast(table.schema.set(0, field))
    return write(table, row_group_size, compression="zstd")


def _output() -> OutputSchema:
    return OutputSchema.of(footer(write(_table(0), 100, compression="zstd")))


def _steps_cover(plan: CopyPlan) -> list[tuple[int, int]]:
    """The row groups the steps write, in order."""
    covered: list[tuple[int, int]] = []
    for step in plan.steps:
        if isinstance(step, Copy):
            covered.append((step.source, step.row_group))
        else:
            covered += [(r.source, g) for r in step.runs for g in range(r.first, r.stop)]
    return covered


def test_clean_sources_are_copied_row_group_by_row_group() -> None:
    """Sources of the output's schema with no DV: every row group is copied, at the byte
    range pyarrow's reading of the footer gives."""
    files = [_file(), _file(700)]
    plan = plan_copy([Source(footer(f), False) for f in files], _output(), 0)
    assert all(isinstance(step, Copy) for step in plan.steps)
    expected = [(i, *r) for i, f in enumerate(files) for r in row_group_ranges(f)]
    got = [(s.source, s.rows, s.start, s.stop) for s in plan.steps if isinstance(s, Copy)]
    assert got == expected
    assert all(choice.copy for choice in plan.choices)


def test_small_row_groups_are_merged_into_one_reencode_step() -> None:
    """A source's small tail row group and the next source's small row groups become one
    re-encode step, between the copies, in write order."""
    big, small = _file(900), _file(100)
    sizes = [stop - start for _, start, stop in row_group_ranges(big)]
    plan = plan_copy(
        [Source(footer(big), False), Source(footer(small), False), Source(footer(big), False)],
        _output(),
        min_copy_row_group=min(sizes) + 1,
    )
    kinds = ["copy" if isinstance(s, Copy) else "reencode" for s in plan.steps]
    assert kinds == ["copy", "copy", "reencode", "copy", "copy", "reencode"]
    middle = plan.steps[2]
    assert isinstance(middle, Reencode)
    assert middle.runs == (Run(0, 2, 3, 200), Run(1, 0, 20, 2_000))
    assert {c.reason for c in plan.choices if not c.copy} == {Reason.SMALL}


@pytest.mark.parametrize("variant", ["int32", "renamed", "required", "field_id"])
def test_another_parquet_schema_is_reencoded(variant: str) -> None:
    """A source whose Parquet schema differs in a type, a name, the repetition or a field id
    is re-encoded whole."""
    plan = plan_copy([Source(footer(_file(variant=variant)), False)], _output(), 0)
    assert {c.reason for c in plan.choices} == {Reason.SCHEMA}
    assert plan.steps == (Reencode((Run(0, 0, 4, ROWS),)),)


def test_a_source_with_a_deletion_vector_is_reencoded() -> None:
    """The caller's deletion-vector flag sends every row group of the source to re-encoding."""
    plan = plan_copy([Source(footer(_file()), True), Source(footer(_file()), False)], _output(), 0)
    assert [c.reason for c in plan.choices] == [Reason.DELETION_VECTOR] * 4 + [None] * 4
    assert isinstance(plan.steps[0], Reencode) and len(plan.steps) == 5


def test_a_corrupt_footer_raises() -> None:
    """A footer that does not parse stops the plan: the bin cannot go on."""
    broken = footer(_file())
    with pytest.raises(ValueError, match="magic"):
        plan_copy([Source(broken[:-1], False)], _output(), 0)
    with pytest.raises(ValueError, match="says it holds"):
        plan_copy([Source(broken[:20] + broken[-8:], False)], _output(), 0)
    with pytest.raises(ValueError, match="past the end"):
        plan_copy([Source(_with_footer(broken[:20]), False)], _output(), 0)


# Planted footers -----------------------------------------------------------------------------


def _occurrences(data: bytes, struct: str, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """Every struct in ``data`` (a ``struct``) that the footer table describes, with its path."""
    yield path, struct
    for field_id, kind, _, value, _ in struct_fields(data):
        field = STRUCTS[struct].get(field_id)
        if field is None or not isinstance(field.of, str):
            continue
        if kind == STRUCT:
            end = next(e for f, _, _, v, e in struct_fields(data) if f == field_id)
            yield from _occurrences(data[value:end], field.of, (*path, (field_id, None)))
        elif kind == LIST:
            for index, element in enumerate(struct_list(data, value)[0]):
                yield from _occurrences(element, field.of, (*path, (field_id, index)))


def _plant(data: bytes, path: Path, extra: bytes) -> bytes:
    """``data`` (one struct) with the field bytes ``extra`` added at the end of the struct at
    ``path`` (a long field header names its id whatever came before)."""
    if not path:
        return data[:-1] + extra + data[-1:]
    (field_id, index), rest = path[0], path[1:]
    for found, _, _, value, end in struct_fields(data):
        if found != field_id:
            continue
        if index is None:
            return data[:value] + _plant(data[value:end], rest, extra) + data[end:]
        elements, _ = struct_list(data, value)
        at = end - sum(map(len, elements))
        elements[index] = _plant(elements[index], rest, extra)
        return data[:at] + b"".join(elements) + data[end:]
    raise AssertionError(f"no field {field_id}")


def _field(field_id: int, kind: int, value: bytes) -> bytes:
    return bytes((kind,)) + integer(field_id) + value


_VALUES = {
    I32: integer(5),
    I64: integer(1 << 40),
    BINARY: b"\x03abc",  # a binary length is a plain varint
    STRUCT: b"\x00",
    LIST: list_header(I32, 2) + integer(1) + integer(2),
}
_EMPTY_STRUCT = bytes((STRUCT,))


def _with_footer(meta: bytes) -> bytes:
    return meta + len(meta).to_bytes(4, "little") + b"PAR1"


@st.composite
def _plain_source(draw: st.DrawFn) -> tuple[bytes, int, set[int]]:
    """A footer of :func:`_file`, its row group count, and the row groups its schema bans."""
    size = draw(st.sampled_from([250, 500, 1_000]))
    variant = draw(st.sampled_from(["", "", "", "int32", "renamed", "required", "field_id"]))
    groups = len(row_group_ranges(_file(size, variant)))
    return footer(_file(size, variant)), groups, set(range(groups)) if variant else set()


@st.composite
def _planted_source(
    draw: st.DrawFn, base: st.SearchStrategy[tuple[bytes, int, set[int]]]
) -> tuple[Source, int, set[int]]:
    """A source drawn from ``base``, its row group count, and the row groups the planter made
    uncopyable."""
    span, groups, banned = draw(base)
    meta = span[:-8]
    dv = draw(st.booleans())
    if dv:
        banned = set(range(groups))
    planted: set[tuple[Path, int]] = set()
    for _ in range(draw(st.integers(0, 2))):
        places = list(_occurrences(meta, "FileMetaData"))
        path, struct = draw(st.sampled_from(places))
        kind = draw(st.sampled_from(sorted(_VALUES)))
        plant = draw(st.sampled_from(["unknown", "wrong_kind", "encryption", "layout"]))
        if plant == "unknown":
            field_id = draw(st.integers(1, 300).filter(lambda f, s=struct: f not in STRUCTS[s]))
            extra = _field(field_id, kind, _VALUES[kind])
        elif plant == "wrong_kind" and struct == "ColumnMetaData":
            extra = _field(17, I64, _VALUES[I64])  # known as a struct
        elif plant == "encryption" and struct in ("FileMetaData", "ColumnChunk"):
            extra = _field(8, STRUCT, bytes((0x10 | STRUCT,)) + b"\x00\x00")  # {1: {}}
        elif plant == "layout" and struct == "ColumnChunk":
            extra = _field(1, BINARY, _VALUES[BINARY])  # the chunk lies in another file
        elif plant == "layout" and struct == "ColumnMetaData":
            extra = _field(10, I64, _VALUES[I64])  # an index page
        else:
            continue
        field_id = read_integer(extra, 1)[0]
        if (path, field_id) in planted:  # a field twice in one struct is no thrift
            continue
        planted.add((path, field_id))
        meta = _plant(meta, path, extra)
        in_group = path[:1] and path[0][0] == 4
        banned |= {path[0][1]} if in_group and path[0][1] is not None else set(range(groups))
    return Source(_with_footer(meta), dv), groups, banned


@settings(max_examples=150, deadline=None)
@given(
    planted=st.lists(_planted_source(_plain_source()), min_size=1, max_size=4),
    min_copy=st.integers(0, 60_000),
)
def test_the_planner_never_copies_what_it_must_not(
    planted: Sequence[tuple[Source, int, set[int]]], min_copy: int
) -> None:
    """Whatever is planted, a row group is copied only if nothing banned it and it is large
    enough; every row group is written exactly once, in write order; a copy's byte range is
    the one pyarrow reads in the (unplanted) footer."""
    plan = plan_copy([p[0] for p in planted], _output(), min_copy)
    expected = [(s, g) for s, (_, groups, _) in enumerate(planted) for g in range(groups)]
    assert [(c.source, c.row_group) for c in plan.choices] == expected
    assert _steps_cover(plan) == expected
    for choice in plan.choices:
        if choice.copy:
            assert choice.row_group not in planted[choice.source][2]
            assert choice.size >= min_copy
    for step in plan.steps:
        if isinstance(step, Copy):
            assert step.stop - step.start >= min_copy


_CHUNK_META = ((4, 1), (1, 2), (3, None))  # row group 1, its third column chunk's metadata


@pytest.mark.parametrize(
    ("path", "extra", "reason", "banned"),
    [
        ((), _field(99, I32, _VALUES[I32]), Reason.UNKNOWN_FIELD, {0, 1, 2, 3}),
        (((2, 1),), _field(11, I32, _VALUES[I32]), Reason.UNKNOWN_FIELD, {0, 1, 2, 3}),
        ((), _field(8, STRUCT, b"\x1c\x00\x00"), Reason.ENCRYPTED, {0, 1, 2, 3}),
        (_CHUNK_META, _field(18, I64, _VALUES[I64]), Reason.UNKNOWN_FIELD, {1}),
        (_CHUNK_META, _field(17, I64, _VALUES[I64]), Reason.UNKNOWN_FIELD, {1}),
        ((*_CHUNK_META, (12, None)), _field(9, I32, _VALUES[I32]), Reason.UNKNOWN_FIELD, {1}),
        (_CHUNK_META[:2], _field(8, STRUCT, b"\x1c\x00\x00"), Reason.ENCRYPTED, {1}),
        (_CHUNK_META[:2], _field(1, BINARY, _VALUES[BINARY]), Reason.LAYOUT, {1}),
        (_CHUNK_META, _field(10, I64, _VALUES[I64]), Reason.LAYOUT, {1}),
    ],
    ids=[
        "file-field",
        "schema-element-field",
        "file-encryption",
        "column-metadata-field",
        "known-field-of-another-type",
        "statistics-field",
        "column-crypto",
        "chunk-in-another-file",
        "index-page",
    ],
)
def test_each_planted_field_keeps_its_scope_from_being_copied(
    path: Path, extra: bytes, reason: Reason, banned: set[int]
) -> None:
    """A field planted at the file's level bans the whole source, inside a row group only that
    row group, with the reason that names it."""
    meta = _plant(footer(_file())[:-8], path, extra)
    plan = plan_copy([Source(_with_footer(meta), False)], _output(), 0)
    assert {c.row_group for c in plan.choices if not c.copy} == banned
    assert {c.reason for c in plan.choices if not c.copy} == {reason}


def _groups(file: pa.Buffer) -> list[bytes]:
    meta = metadata(footer(file))
    return struct_list(meta, {f[0]: f for f in struct_fields(meta)}[4][3])[0]


def test_statistics_only_in_exact_fields_count_as_exact() -> None:
    """pyarrow's statistics (min_value and max_value) are exact; a column whose bounds are
    held only in the deprecated fields, or not at all, is named, its bounds to be dropped."""
    (group, *_) = _groups(_file())
    assert inexact_statistics(group) == frozenset()
    without = {1: {3: {12: {5: Drop.FIELD}}}}  # columns, meta_data, statistics, max_value
    assert inexact_statistics(edit_struct(group, 0, without)[0]) == frozenset(range(4))


def _root_edited(span: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    """The footer ``span`` with ``edit`` applied to its schema's root element only."""
    meta = metadata(span)
    for field_id, _, _, value, end in struct_fields(meta):
        if field_id == 2:
            elements, _ = struct_list(meta, value)
            at = end - sum(map(len, elements))
            elements[0] = edit(elements[0])
            return _with_footer(meta[:at] + b"".join(elements) + meta[end:])
    raise AssertionError("no schema")


def test_the_roots_repetition_is_not_part_of_the_schema() -> None:
    """parquet-rs leaves the root's repetition unset where pyarrow writes REQUIRED; no reader
    reads it, so the schemas are equal and the row groups copied. A leaf's repetition counts."""
    span = footer(_file())
    bare = _root_edited(span, lambda root: edit_struct(root, 0, {3: Drop.FIELD})[0])
    assert bare != span and OutputSchema.of(bare) == _output()
    plan = plan_copy([Source(bare, False)], _output(), 0)
    assert all(choice.copy for choice in plan.choices)
    assert OutputSchema.of(footer(_file(variant="required"))) != _output()


def test_recompressing_reencodes_row_groups_of_another_codec() -> None:
    """Asked for one codec, the plan re-encodes row groups of any other; unasked, it copies
    them with their own."""
    zstd, snappy = _file(), write(_table(), 500, compression="snappy")
    sources = [Source(footer(zstd), False), Source(footer(snappy), False)]
    assert all(c.copy for c in plan_copy(sources, _output(), 0).choices)
    plan = plan_copy(sources, _output(), 0, codec=6)  # ZSTD in parquet.thrift
    assert {c.source for c in plan.choices if c.copy} == {0}
    assert {c.reason for c in plan.choices if c.source == 1} == {Reason.CODEC}


def _decimals(rows: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + rows), pa.int64()),
            "price": pa.array(
                [Decimal(i) / 100 for i in range(start, start + rows)], pa.decimal128(12, 2)
            ),
        }
    )


def _decimal_file(rows: int, *, as_integers: bool) -> bytes:
    """A file of :func:`_decimals` whose decimals are INT64 or fixed-length bytes."""
    written = write(_decimals(rows), 500, store_decimal_as_integer=as_integers)
    return footer(written)


def _decimal_outputs() -> list[OutputSchema]:
    """The output's schemas, today's (integers) first, as the rewrite offers them."""
    return [
        OutputSchema.of(footer(write(_decimals(0), 100, store_decimal_as_integer=flag)))
        for flag in (True, False)
    ]


def test_the_schema_that_copies_the_most_bytes_is_chosen() -> None:
    """Of the schemas the writer can write, the plan copies under the one that most of the
    sources' bytes are stored in: the fixed-length file of 3,000 rows outweighs the integer
    one of 1,000, which is then re-encoded (into the fixed-length output)."""
    integers = Source(_decimal_file(1_000, as_integers=True), False)
    fixed = Source(_decimal_file(3_000, as_integers=False), False)
    chosen, plan = choose_plan([integers, fixed], _decimal_outputs(), 0)
    assert chosen == 1
    assert [c.source for c in plan.choices if c.copy] == [1] * 6
    assert {c.reason for c in plan.choices if c.source == 0} == {Reason.SCHEMA}
    assert plan == plan_copy([integers, fixed], _decimal_outputs()[1], 0)
    chosen, plan = choose_plan(
        [Source(_decimal_file(3_000, as_integers=True), False), fixed], _decimal_outputs(), 0
    )
    assert chosen == 0  # now the integers weigh more
    assert [c.source for c in plan.choices if c.copy] == [0] * 6


def test_a_tie_keeps_the_first_schema() -> None:
    """Nothing copied either way (a deletion vector, a schema neither has) keeps the
    preferred, first schema; a schema listed twice is planned once and never chosen over its
    first listing."""
    fixed = Source(_decimal_file(1_000, as_integers=False), False)
    assert choose_plan([Source(fixed.footer, True)], _decimal_outputs(), 0)[0] == 0
    assert choose_plan([Source(footer(_file()), False)], _decimal_outputs(), 0)[0] == 0
    outputs = _decimal_outputs()
    assert choose_plan([fixed], [outputs[1], outputs[1]], 0)[0] == 0
    with pytest.raises(ValueError, match="no output schema"):
        choose_plan([fixed], [], 0)


def test_only_the_decimal_storage_differing_patches_those_columns() -> None:
    """A source whose schema differs from the output's only in a decimal column's storage is
    copied with that column patched, when the caller lets that column be; the bytes it copies
    leave the patched chunks out, so the choice between the schemas weighs them."""
    integers = Source(_decimal_file(1_000, as_integers=True), False)
    fixed = Source(_decimal_file(3_000, as_integers=False), False)
    output = _decimal_outputs()[1]
    plan = plan_copy([integers, fixed], output, 0, patchable=frozenset({"price"}))
    assert all(isinstance(step, Copy) for step in plan.steps)
    assert [s.patched for s in plan.steps if isinstance(s, Copy)] == [(1,)] * 2 + [()] * 6
    patched = [c for c in plan.choices if c.patched]
    assert [c.source for c in patched] == [0, 0] and all(c.copy for c in patched)
    assert all(0 < c.patched_size < c.size for c in patched)
    assert all(str(Reason.STORAGE) in c.detail for c in patched)
    chosen, chosen_plan = choose_plan(
        [integers, fixed], _decimal_outputs(), 0, patchable=frozenset({"price"})
    )
    assert (chosen, chosen_plan) == (1, plan)


@st.composite
def _decimal_source(draw: st.DrawFn, as_integers: bool) -> tuple[bytes, int, set[int]]:
    """A footer of :func:`_decimals` (row groups of 500 rows), decimals stored as integers or
    as fixed-length bytes; its schema bans no row group of the fixed-length output."""
    rows = draw(st.sampled_from([700, 1_000, 2_000]))
    return _decimal_file(rows, as_integers=as_integers), -(-rows // 500), set()


@settings(max_examples=100, deadline=None)
@given(
    planted=st.lists(
        st.booleans().flatmap(
            lambda ints: st.tuples(st.just(ints), _planted_source(_decimal_source(ints)))
        ),
        min_size=1,
        max_size=4,
    ),
    patchable=st.sampled_from([frozenset(), frozenset({"price"})]),
    min_copy=st.integers(0, 6_000),
)
def test_a_patching_planner_never_copies_what_it_must_not(
    planted: Sequence[tuple[bool, tuple[Source, int, set[int]]]],
    patchable: frozenset[str],
    min_copy: int,
) -> None:
    """The planted footers again, into the fixed-length output, their decimals stored as
    integers or not: a row group is copied only if nothing banned it and it is large enough,
    an integer-stored one only when the caller lets ``price`` be patched, and then with
    exactly that column patched; every row group is written exactly once, in write order."""
    plan = plan_copy(
        [p[1][0] for p in planted], _decimal_outputs()[1], min_copy, patchable=patchable
    )
    expected = [(s, g) for s, (_, (_, groups, _)) in enumerate(planted) for g in range(groups)]
    assert [(c.source, c.row_group) for c in plan.choices] == expected
    assert _steps_cover(plan) == expected
    for choice in plan.choices:
        as_integers, (_, _, banned) = planted[choice.source]
        if choice.copy:
            assert choice.row_group not in banned and choice.size >= min_copy
            assert choice.patched == ((1,) if as_integers else ())
            assert patchable or not as_integers
            assert (choice.patched_size > 0) == as_integers
    patched = {(c.source, c.row_group): c.patched for c in plan.choices}
    for step in plan.steps:
        if isinstance(step, Copy):
            assert step.patched == patched[step.source, step.row_group]


def _nested(rows: int) -> pa.Table:
    price = _decimals(rows)["price"].combine_chunks()
    return pa.table({"s": pa.StructArray.from_arrays([price], ["p"])})


@pytest.mark.parametrize(
    ("source", "output", "patchable"),
    [
        (_decimals, _decimals, frozenset()),  # the caller lets no column be patched
        (_decimals, _decimals, frozenset({"id"})),  # nor this one
        (_nested, _nested, frozenset({"s", "p"})),  # not a top-level column
        (  # another precision: another logical type
            _decimals,
            lambda rows: _decimals(rows).cast(
                pa.schema([("id", pa.int64()), ("price", pa.decimal128(13, 2))])
            ),
            frozenset({"price"}),
        ),
        (  # the decimal stored otherwise, and another column renamed
            lambda rows: _decimals(rows).rename_columns(["key", "price"]),
            _decimals,
            frozenset({"price", "key", "id"}),
        ),
    ],
    ids=["not-patchable", "other-column-patchable", "nested", "precision", "and-renamed"],
)
def test_a_schema_that_differs_otherwise_is_reencoded_whole(
    source: Callable[[int], pa.Table],
    output: Callable[[int], pa.Table],
    patchable: frozenset[str],
) -> None:
    """Anything beyond a top-level decimal's storage, in a column the caller lets be patched,
    re-encodes the row group whole, as before."""
    written = footer(write(source(700), 500, store_decimal_as_integer=True))
    schema = OutputSchema.of(footer(write(output(0), 100, store_decimal_as_integer=False)))
    plan = plan_copy([Source(written, False)], schema, 0, patchable=patchable)
    assert {c.reason for c in plan.choices} == {Reason.SCHEMA}
    assert not any(c.patched for c in plan.choices)
