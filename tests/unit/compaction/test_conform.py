"""Conforming source batches to the table's physical schema, at every depth."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from rlcd.compaction.source import (
    DecodedSource,
    FetchedSource,
    ReadOptions,
    _conformed_columns,
    conform_batch,
    footer_without_arrow_schema,
)
from rlcd.delta.actions import AddFile
from rlcd.errors import CorruptDataError


def fid(i: int) -> dict[bytes, bytes]:
    return {b"PARQUET:field_id": str(i).encode()}


def test_id_mode_matches_nested_fields_by_id_through_lists_and_maps() -> None:
    """Renamed fields inside list<struct> and map<_, struct> keep their values in id mode."""
    element = pa.struct([pa.field("old-v", pa.int64(), metadata=fid(3))])
    source = pa.record_batch(
        {
            "old-arr": pa.array(
                [[{"old-v": 10}], [{"old-v": 20}, None], None],
                pa.list_(pa.field("element", element)),
            ),
            "old-m": pa.array([[("a", {"old-v": 1})], None, []], pa.map_(pa.string(), element)),
        }
    )
    source = source.rename_columns(["old-arr", "old-m"])
    schema = pa.schema(
        [f.with_metadata(fid(i)) for i, f in zip((2, 4), source.schema, strict=True)]
    )
    source = pa.RecordBatch.from_arrays(source.columns, schema=schema)
    v = pa.field("col-v", pa.int64(), metadata=fid(3))
    extra = pa.field("added", pa.int32())
    target = pa.schema(
        [
            pa.field(
                "col-arr", pa.list_(pa.field("element", pa.struct([v, extra]))), metadata=fid(2)
            ),
            pa.field("col-m", pa.map_(pa.string(), pa.struct([extra, v])), metadata=fid(4)),
        ]
    )
    out = conform_batch(source.slice(1), target, by_field_id=True)
    assert out.schema == target
    assert out.column(0).to_pylist() == [[{"col-v": 20, "added": None}, None], None]
    assert out.column(1).to_pylist() == [None, []]
    full = conform_batch(source, target, by_field_id=True)
    assert full.column(1).to_pylist()[0] == [("a", {"added": None, "col-v": 1})]


def test_missing_struct_with_required_children_writes() -> None:
    """A struct column older files lack is null, and its required children hold no null."""
    target = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field(
                "s",
                pa.struct(
                    [
                        pa.field("a", pa.int64(), nullable=False),
                        pa.field("b", pa.string(), nullable=False),
                    ]
                ),
            ),
        ]
    )
    out = conform_batch(pa.record_batch({"id": [1, 2]}), target, by_field_id=False)
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_batches([out]), sink)
    back = pq.read_table(pa.BufferReader(sink.getvalue()))
    assert back.to_pylist() == [{"id": 1, "s": None}, {"id": 2, "s": None}]


def test_id_mode_refuses_files_without_field_ids() -> None:
    """In id mode a file without field ids cannot be matched: refuse, naming the file."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2]}), sink)
    fetched = FetchedSource(
        AddFile(path="f.parquet", size=1), "f.parquet", BitMap64(), data=sink.getvalue()
    )
    target = pa.schema([pa.field("col-1", pa.int64(), metadata=fid(1))])
    with pytest.raises(CorruptDataError, match="no Parquet field ids") as info:
        DecodedSource(fetched, ReadOptions(target=target, by_field_id=True), table="t", version=3)
    assert info.value.path == "f.parquet"


def _decode(table: pa.Table, target: pa.Schema) -> pa.Table:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    fetched = FetchedSource(
        AddFile(path="f.parquet", size=1), "f.parquet", BitMap64(), data=sink.getvalue()
    )
    decoded = DecodedSource(fetched, ReadOptions(target=target), table="t", version=3)
    return pa.Table.from_batches(list(decoded.batches()), schema=target)


@pytest.mark.parametrize(
    ("stored", "table_type", "values"),
    [
        (pa.int32(), pa.int64(), [1, None]),  # Delta type widening
        (pa.float32(), pa.float64(), [1.5, None]),
        (pa.date32(), pa.timestamp("us"), [0, 1]),
        (pa.decimal128(5, 2), pa.decimal128(10, 4), [None, Decimal("1.25")]),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), ["a", "b"]),  # encodings
        (pa.large_string(), pa.string(), ["a", None]),
        (pa.timestamp("ns", "UTC"), pa.timestamp("us", "UTC"), [1000, None]),
        (pa.timestamp("us"), pa.timestamp("us", "UTC"), [1, 2]),  # INT96 reads zone-less
        (pa.uint8(), pa.int16(), [255, 0]),
        (pa.int32(), pa.int8(), [127, None]),  # Hive-converted TINYINT stored as INT32
        (pa.decimal128(10, 4), pa.decimal128(8, 2), [Decimal("1.2300"), None]),
        (pa.binary(), pa.string(), [b"a", None]),
        (pa.null(), pa.int64(), [None, None]),
    ],
)
def test_types_other_engines_read_are_cast(
    stored: pa.DataType, table_type: pa.DataType, values: list[object]
) -> None:
    """What Delta widens, and what readers take as the same Delta type, is cast value for
    value."""
    if pa.types.is_dictionary(stored):
        array = pa.array(values).dictionary_encode()
    else:
        array = pa.array(values, stored)
    target = pa.schema([pa.field("c", table_type)])
    assert _decode(pa.table({"c": array}), target).column("c").to_pylist() == (
        array.cast(table_type).to_pylist()
    )


@pytest.mark.parametrize(
    ("stored", "table_type", "values"),
    [
        (pa.float64(), pa.float32(), [1e300]),  # would read as inf
        (pa.string(), pa.int64(), ["12"]),  # would parse
        (pa.timestamp("us", "UTC"), pa.timestamp("us"), [1]),  # drops the zone
        (pa.float64(), pa.int64(), [1.0]),  # would truncate
        (pa.struct([("x", pa.int32())]), pa.int32(), [{"x": 1}]),
    ],
)
def test_types_the_table_cannot_hold_are_refused(
    stored: pa.DataType, table_type: pa.DataType, values: list[object]
) -> None:
    """A stored type Delta does not widen to the table's is refused, naming file and column,
    rather than cast into other values."""
    target = pa.schema([pa.field("c", table_type)])
    with pytest.raises(CorruptDataError, match=r"column 'c' is .* which the table") as info:
        _decode(pa.table({"c": pa.array(values, stored)}), target)
    assert info.value.path == "f.parquet"


@pytest.mark.parametrize(
    ("stored", "table_type", "value"),
    [
        (pa.uint16(), pa.int16(), 65535),  # would wrap
        (pa.int64(), pa.int32(), 2**40),  # would overflow
        (pa.decimal128(10, 4), pa.decimal128(10, 2), Decimal("1.2345")),  # would lose digits
    ],
)
def test_a_value_the_table_type_cannot_hold_is_refused(
    stored: pa.DataType, table_type: pa.DataType, value: object
) -> None:
    """Where a narrower type is read value by value, a value that does not fit fails the safe
    cast: refused, naming the file, never wrapped or rounded."""
    target = pa.schema([pa.field("c", table_type)])
    with pytest.raises(CorruptDataError, match="unreadable") as info:
        _decode(pa.table({"c": pa.array([value], stored)}), target)
    assert info.value.path == "f.parquet"


def test_nulls_in_a_not_null_column_are_refused_naming_the_file() -> None:
    """A null where the table says NOT NULL is caught while decoding, naming file and column,
    not later by the writer with neither."""
    target = pa.schema([pa.field("c", pa.int64(), nullable=False)])
    with pytest.raises(CorruptDataError, match="'c' is NOT NULL in the table") as info:
        _decode(pa.table({"c": pa.array([1, None], pa.int64())}), target)
    assert info.value.path == "f.parquet"


def _view_table() -> pa.Table:
    """What delta-rs leaves: string and binary columns stored as views, also nested."""
    sv, bv = pa.string_view(), pa.binary_view()
    return pa.table(
        {
            "s": pa.array(["a", None, "a much longer string than twelve bytes"], sv),
            "b": pa.array([b"x", b"y" * 40, None], bv),
            "st": pa.array(
                [{"x": "p", "n": 1}, None, {"x": None, "n": 3}],
                pa.struct([("x", sv), ("n", pa.int32())]),
            ),
            "l": pa.array([[{"v": b"q"}], [], None], pa.list_(pa.struct([("v", bv)]))),
            "m": pa.array(
                [[("k", ["v1", None])], None, [("k2", [])]],
                pa.map_(sv, pa.list_(sv)),
            ),
        }
    )


_VIEW_TARGET = pa.schema(
    [
        pa.field("s", pa.string(), metadata=fid(1)),
        pa.field("b", pa.binary(), metadata=fid(2)),
        pa.field(
            "st",
            pa.struct([pa.field("x", pa.string(), metadata=fid(4)), ("n", pa.int64())]),
            metadata=fid(3),
        ),
        pa.field("l", pa.list_(pa.struct([("v", pa.binary())])), metadata=fid(5)),
        pa.field("m", pa.map_(pa.string(), pa.list_(pa.string())), metadata=fid(6)),
    ]
)


def test_view_typed_files_are_cast_in_one_call_to_the_same_values() -> None:
    """A file with the table's columns in order and only other encodings (views) or widenings
    at the leaves takes Arrow's one-call cast: exactly what the column-by-column way gives,
    field metadata included."""
    batch = _view_table().to_batches()[0]
    fast = conform_batch(batch, _VIEW_TARGET, by_field_id=False)
    slow = pa.RecordBatch.from_arrays(
        _conformed_columns(batch, _VIEW_TARGET, False), schema=_VIEW_TARGET
    )
    assert fast.schema.equals(_VIEW_TARGET, check_metadata=True)
    assert fast.equals(slow)
    assert fast.to_pylist() == _view_table().to_pylist()


def test_a_batch_in_the_tables_schema_passes_as_it_is() -> None:
    """A file written in exactly the table's schema (field metadata included) is not cast: the
    batch itself comes back. One that differs only in field metadata gets the table's."""
    batch = _view_table().cast(_VIEW_TARGET).to_batches()[0]
    assert conform_batch(batch, _VIEW_TARGET, by_field_id=False) is batch
    bare = pa.RecordBatch.from_arrays(batch.columns, names=_VIEW_TARGET.names)
    out = conform_batch(bare, _VIEW_TARGET, by_field_id=False)
    assert out.schema.equals(_VIEW_TARGET, check_metadata=True) and out.equals(batch)
    # the same columns, no copy (no cast either: one that differs only in metadata)
    tagged = batch.replace_schema_metadata({"ARROW:schem_": "hidden"})
    out = conform_batch(tagged, _VIEW_TARGET, by_field_id=False)
    assert out.schema.equals(_VIEW_TARGET, check_metadata=True)
    for mine, theirs in zip(out, tagged, strict=True):
        assert [b and b.address for b in mine.buffers()] == [
            b and b.address for b in theirs.buffers()
        ]


def _parquet(table: pa.Table, **options: object) -> pa.BufferReader:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return pa.BufferReader(sink.getvalue())


def test_a_stored_arrow_schema_is_hidden_so_views_decode_as_the_tables_types() -> None:
    """delta-rs stores string and binary columns as views in its files' Arrow schema; with the
    schema hidden they decode straight into the table's types, to the same values, the other
    metadata and the statistics unchanged."""
    views = _view_table().select(["s", "b", "st"])  # pyarrow writes no views inside lists
    handle = _parquet(views)
    stored = pq.ParquetFile(handle)
    bare = footer_without_arrow_schema(handle)
    assert bare is not None
    direct = pq.ParquetFile(handle, metadata=bare).read()
    assert direct.schema.types == [
        pa.string(),
        pa.binary(),
        pa.struct([("x", pa.string()), ("n", pa.int32())]),
    ]
    assert direct.to_pylist() == views.to_pylist()
    assert bare.metadata == {b"ARROW:schem_": stored.metadata.metadata[b"ARROW:schema"]}
    assert bare.row_group(0).to_dict() == stored.metadata.row_group(0).to_dict()


def test_statistics_holding_the_keys_bytes_are_left_alone() -> None:
    """A string value holding the key's very bytes ends up in the statistics, before the
    key-value list: the key is still the one renamed. A file with no stored schema, or one
    whose footer already holds the new name, is read as it is."""
    tricky = "\x18\x0cARROW:schema"
    table = pa.table({"s": [tricky, tricky + "!"]})
    handle = _parquet(table)
    bare = footer_without_arrow_schema(handle)
    assert bare is not None and b"ARROW:schema" not in (bare.metadata or {})
    stats = bare.row_group(0).column(0).statistics
    assert (stats.min, stats.max) == (tricky, tricky + "!")
    assert pq.ParquetFile(handle, metadata=bare).read().equals(table)
    plain = _parquet(table, store_schema=False)
    assert footer_without_arrow_schema(plain) is None
    taken = _parquet(table.replace_schema_metadata({"ARROW:schem_": "a key of its own"}))
    assert footer_without_arrow_schema(taken) is None  # the new name must be ours alone


@pytest.mark.parametrize(
    "change",
    ["reordered", "extra column", "missing column", "narrowing", "struct field renamed"],
)
def test_files_of_another_shape_are_conformed_column_by_column(change: str) -> None:
    """Any other shape goes the column-by-column way: reordered, extra or missing columns,
    a type Delta does not widen to the table's, a struct field by another name."""
    table = _view_table()
    target = _VIEW_TARGET
    if change == "reordered":
        table = table.select(["b", "s", "st", "l", "m"])
    elif change == "extra column":
        table = table.append_column("_change_type", pa.array(["x", "y", "z"]))
    elif change == "missing column":
        table = table.drop_columns(["m"])
    elif change == "narrowing":
        table = table.set_column(1, "b", pa.array([1, 2, None], pa.int64()))
        target = target.set(1, pa.field("b", pa.int32()))
    else:
        renamed = pa.struct([("y", pa.string_view()), ("n", pa.int32())])
        table = table.set_column(2, "st", table.column("st").cast(renamed))
    batch = table.to_batches()[0]
    out = conform_batch(batch, target, by_field_id=False)
    assert out.schema.equals(target, check_metadata=True)
    expected = {
        "reordered": _view_table().to_pylist(),
        "extra column": _view_table().to_pylist(),
    }.get(change)
    if expected is not None:
        assert out.to_pylist() == expected
    elif change == "missing column":
        assert out.column("m").null_count == 3
    elif change == "narrowing":
        assert out.column("b").to_pylist() == [1, 2, None]
    else:
        assert out.column("st").to_pylist() == [{"x": None, "n": 1}, None, {"x": None, "n": 3}]


def test_a_fetched_source_reads_its_bytes_however_it_holds_them(tmp_path: Path) -> None:
    """In memory, spilled to a file or opened in place: the same bytes, fewer past the end."""
    data = bytes(range(100))
    (tmp_path / "spill").write_bytes(data)
    add = AddFile(path="f.parquet", size=100)
    held = [
        FetchedSource(add, "f.parquet", BitMap64(), data=bytearray(data)),
        FetchedSource(add, "f.parquet", BitMap64(), spill_path=str(tmp_path / "spill")),
        FetchedSource(add, "f.parquet", BitMap64(), file=pa.OSFile(str(tmp_path / "spill"))),
    ]
    for fetched in held:
        assert fetched.read(10, 20) == data[10:20]
        assert fetched.read(95, 110) == data[95:]
        fetched.close()
