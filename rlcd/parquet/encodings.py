"""Per-column Parquet encodings for a bin's output, chosen from what the bin's data shows. Pure.

pyarrow's writer tries a dictionary on every column and abandons it once it outgrows the
dictionary page limit: on high-cardinality columns (ids, amounts, timestamps) it builds a
dictionary only to throw it away, and it never uses the encodings that suit sorted integers.
From the first row group to be written (its values, sampled) and the footers of the sources
read so far (their dictionary page sizes), :func:`choose_encodings` estimates, per top-level
column of a primitive type, the bytes of each encoding it considers:

- a dictionary, unless a source's own dictionary page already exceeds the dictionary page
  limit: its page (the distinct values, estimated for the whole row group by
  :func:`distinct_estimate`) and its indices at their bit width;
- ``DELTA_BINARY_PACKED`` for integers, dates, timestamps and decimals of up to 18 digits
  where the file stores them as INT32 or INT64 (``decimals_as_integers``; stored as
  fixed-length bytes, which the encoding does not apply to, they are not considered): the
  size the encoder would need, estimated as it packs (the bit width of the deltas in each
  miniblock of 32);
- plain.

Of the encodings estimated no larger than plain, it chooses the smallest that pays: a
dictionary whose page fits the limit and whose values repeat (at least twice on average),
delta packing that at least halves the plain size; plain where neither does. So sorted or
nearly sorted integers that repeat are delta-packed rather than given a dictionary. Nested
columns and booleans keep the conservative choice (a dictionary while it stays small).

An estimate cannot tell how well the codec compresses each encoding: where plain values repeat
in long sequences (tiled or periodic data) the codec compresses them smaller than a
dictionary's indices, and a dictionary's indices and delta-packed deltas compress unlike their
bit widths say. So :func:`plan_file` encodes each column whose estimates leave more than one
encoding in contention (any estimated smaller than plain), from the first row group, each such
way with the file's codec, and keeps the smallest (:func:`trial_encoded_bytes`).

:func:`plan_file` also sizes the file's row groups: larger where that makes a dictionary pay on
the column holding most of the bytes (values of a few hundred bytes drawn from tens of
thousands repeat too seldom in a small row group), but only where the file goes on past its
first row group: a bin that ends within it is planned on its own rows.

Only encodings every reader of Delta tables reads: Spark 3.3+ (its vectorized reader, the
default), delta-rs, the Delta kernel, polars, DuckDB, Trino. ``BYTE_STREAM_SPLIT`` is therefore
never chosen, although it shrinks many float columns: Spark's vectorized reader (4.2 included)
fails with "Unsupported encoding: BYTE_STREAM_SPLIT".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = (
    "DICTIONARY",
    "PLAIN",
    "DELTA_BINARY_PACKED",
    "EncodingChoice",
    "ColumnEncodings",
    "choose_encodings",
    "FilePlan",
    "plan_file",
    "distinct_estimate",
    "leaf_paths",
    "trial_encoded_bytes",
)
__pure__ = True

DICTIONARY: Final = "RLE_DICTIONARY"
PLAIN: Final = "PLAIN"
DELTA_BINARY_PACKED: Final = "DELTA_BINARY_PACKED"

SMALL_DICTIONARY: Final = 64 * 1024
"""pyarrow's dictionary page limit where no dictionary was chosen from the data: with its
1 MiB default, high-cardinality columns build a dictionary only to abandon it."""
SAMPLE_BLOCKS: Final = 16
"""The sample is this many runs of consecutive rows, spread evenly over the row group..."""
BLOCK_ROWS: Final = 1024
"""...of this many rows each: consecutive, so that the deltas between neighbours are real."""
_MINIBLOCK: Final = 32  # values per bit width in DELTA_BINARY_PACKED (the encoder's default)
_BLOCK_HEADER_BYTES: Final = 7  # per 128 values: the min delta (varint) and 4 bit widths


@dataclass(frozen=True, slots=True)
class EncodingChoice:
    """The encoding of one Parquet column (its dotted path), and why, for the debug log."""

    column: str
    encoding: str
    reason: str
    dictionary_bytes: int = 0
    """The estimated page size of a dictionary chosen, or left in contention."""
    contenders: tuple[str, ...] = ()
    """The encodings a trial on the data is to choose between (the chosen one among them);
    none where the estimates settle it."""


@dataclass(frozen=True, slots=True)
class ColumnEncodings:
    """The writer settings for a file: which columns get a dictionary, which an encoding, and
    how large a dictionary page may grow before the writer abandons it."""

    choices: tuple[EncodingChoice, ...]
    small_dictionary: int = SMALL_DICTIONARY
    """The limit for a dictionary not chosen from the data (nested columns, booleans)..."""
    dictionary_limit: int = SMALL_DICTIONARY
    """...and the most any chosen one may take."""

    @property
    def dictionary_page_limit(self) -> int:
        """pyarrow's ``dictionary_pagesize_limit`` for the chosen dictionaries."""
        return self.page_limit(c.dictionary_bytes for c in self.choices if c.encoding == DICTIONARY)

    def page_limit(self, estimates: Iterable[int]) -> int:
        """The dictionary page limit for dictionaries of these estimated page sizes: twice the
        largest (room for a sample that saw too few values), within the limits above."""
        largest = max(estimates, default=0)
        return max(self.small_dictionary, min(2 * largest, self.dictionary_limit))

    @property
    def use_dictionary(self) -> list[str]:
        """The columns to dictionary-encode (pyarrow's ``use_dictionary``)."""
        return [c.column for c in self.choices if c.encoding == DICTIONARY]

    @property
    def column_encoding(self) -> dict[str, str]:
        """The columns with an encoding of their own (pyarrow's ``column_encoding``)."""
        return {c.column: c.encoding for c in self.choices if c.encoding != DICTIONARY}


def leaf_paths(field: pa.Field, prefix: str = "") -> Iterator[str]:
    """The dotted Parquet paths of the field's leaf columns, as pyarrow names them with
    compliant nested types (``s.x``, ``l.list.element``, ``m.key_value.key``)."""
    path = f"{prefix}{field.name}"
    t = field.type
    if pa.types.is_struct(t):
        for child in t:
            yield from leaf_paths(child, f"{path}.")
    elif pa.types.is_map(t):
        yield from leaf_paths(t.key_field, f"{path}.key_value.")
        yield from leaf_paths(t.item_field, f"{path}.key_value.")
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from leaf_paths(t.value_field.with_name("element"), f"{path}.list.")
    else:
        yield path


@dataclass(frozen=True, slots=True)
class FilePlan:
    """How a file is written: its columns' encodings, and the Arrow bytes of its row groups."""

    encodings: ColumnEncodings
    row_group_bytes: int


def plan_file(
    first_row_group: pa.Table,
    footers: Sequence[pq.FileMetaData],
    *,
    row_group_bytes: int,
    grown_bytes: int,
    max_rows: int,
    codec: str,
    small_dictionary: int = SMALL_DICTIONARY,
    decimals_as_integers: bool = True,
) -> FilePlan:
    """The plan of a file whose first ``row_group_bytes`` of rows are ``first_row_group``: row
    groups of that size, or of ``grown_bytes`` (at most ``max_rows`` rows) where a column
    holding at least half the bytes takes a dictionary only in the larger row group (its
    values repeat, too few times in the smaller one to pay). Such a column is what the file's
    encoding time goes into, and a dictionary spares it most of the compression. A
    ``grown_bytes`` no larger than ``row_group_bytes`` says the file ends within its first row
    group: its estimates are then made for its own rows, never for a row group it will not
    fill. A chosen dictionary may take a quarter of the row group's bytes. A column whose
    estimates leave encodings in contention gets, of those, the one that encodes its first row
    group smallest with ``codec`` (see the module header). ``decimals_as_integers`` says how
    the file's writer stores decimals of up to 18 digits (``store_decimal_as_integer``)."""
    here = choose_encodings(
        first_row_group,
        footers,
        dictionary_limit=row_group_bytes // 4,
        small_dictionary=small_dictionary,
        decimals_as_integers=decimals_as_integers,
    )
    plan = FilePlan(here, row_group_bytes)
    rows = min(max_rows, first_row_group.num_rows * grown_bytes // max(1, first_row_group.nbytes))
    if grown_bytes > row_group_bytes and rows > first_row_group.num_rows:
        grown = choose_encodings(
            first_row_group,
            footers,
            dictionary_limit=grown_bytes // 4,
            small_dictionary=small_dictionary,
            rows=rows,
            decimals_as_integers=decimals_as_integers,
        )
        names = set(first_row_group.column_names)
        if any(
            small.encoding != DICTIONARY
            and large.encoding == DICTIONARY
            and small.column in names
            and 2 * first_row_group.column(small.column).nbytes >= first_row_group.nbytes
            for small, large in zip(here.choices, grown.choices, strict=True)
        ):
            plan = FilePlan(grown, grown_bytes)
    return _tried(plan, here, first_row_group, codec, max_rows, decimals_as_integers)


def _tried(
    plan: FilePlan,
    here: ColumnEncodings,
    first_row_group: pa.Table,
    codec: str,
    page_rows: int,
    decimals_as_integers: bool,
) -> FilePlan:
    """``plan`` with, for each column that has contenders, the one that encodes the first row
    group smallest; within :data:`_TIE` of it, the cheaper to write (plain, then delta packing,
    then a dictionary, which hashes every value). Only where the plan's choice is the first
    row group's own: where only a grown row group makes a dictionary pay, the first one cannot
    tell."""
    trial = {
        c.column: (c, small)
        for c, small in zip(plan.encodings.choices, here.choices, strict=True)
        if c.encoding == small.encoding and len(small.contenders) > 1
    }
    encodings = plan.encodings
    chosen = [c.dictionary_bytes for c in encodings.choices if c.encoding == DICTIONARY]
    tried: dict[str, EncodingChoice] = {}
    for field, column in zip(first_row_group.schema, first_row_group.columns, strict=True):
        leaves = [trial[leaf][1] for leaf in leaf_paths(field) if leaf in trial]
        if not leaves:
            continue
        ways = [e for e in _CHEAPEST_FIRST if any(e in c.contenders for c in leaves)]
        limit = encodings.page_limit([*chosen, *(c.dictionary_bytes for c in leaves)])
        sizes = trial_encoded_bytes(
            field,
            column,
            codec,
            limit,
            page_rows,
            ways,
            decimals_as_integers=decimals_as_integers,
        )
        by_leaf = dict(zip(leaf_paths(field), sizes, strict=True))
        for leaf in leaves:
            weighed = [
                (size, e)
                for e, size in zip(ways, by_leaf[leaf.column], strict=True)
                if e in leaf.contenders
            ]
            smallest = min(size for size, _ in weighed)
            best = next(e for size, e in weighed if size <= smallest * (1 + _TIE))
            measured = ", ".join(f"{e} {size} B" for size, e in weighed)
            tried[leaf.column] = EncodingChoice(
                leaf.column,
                best,
                f"{leaf.reason}; tried with {codec}: {measured}",
                max(leaf.dictionary_bytes, trial[leaf.column][0].dictionary_bytes)
                if best == DICTIONARY
                else 0,
            )
    choices = tuple(tried.get(c.column, c) for c in encodings.choices)
    tried_encodings = ColumnEncodings(
        choices, encodings.small_dictionary, encodings.dictionary_limit
    )
    return FilePlan(tried_encodings, plan.row_group_bytes)


def trial_encoded_bytes(
    field: pa.Field,
    column: pa.ChunkedArray,
    codec: str,
    dictionary_limit: int,
    page_rows: int,
    encodings: Sequence[str] = (DICTIONARY, PLAIN),
    *,
    decimals_as_integers: bool = True,
) -> list[tuple[int, ...]]:
    """The bytes of each leaf column chunk of ``field`` (its values ``column``) compressed with
    ``codec``, in :func:`leaf_paths` order: one size per encoding of ``encodings``, in their
    order (a dictionary of at most ``dictionary_limit`` bytes, as the file's writer builds it;
    ``DELTA_BINARY_PACKED`` applies to every leaf), decimals stored as the file's writer
    stores them. Statistics are left out: they would weigh the same."""
    table = pa.Table.from_arrays([column], schema=pa.schema([field]))
    chunks = []
    for encoding in encodings:
        writer = pq.ParquetWriter(
            pa.BufferOutputStream(),
            table.schema,
            compression=codec,
            use_dictionary=encoding == DICTIONARY,
            column_encoding=None
            if encoding == DICTIONARY
            else dict.fromkeys(leaf_paths(field), encoding),
            dictionary_pagesize_limit=dictionary_limit,
            write_statistics=False,
            use_compliant_nested_type=True,
            store_decimal_as_integer=decimals_as_integers,
            max_rows_per_page=page_rows,
        )
        writer.write_table(table, row_group_size=max(1, table.num_rows))
        writer.close()
        row_group = writer.writer.metadata.row_group(0)
        chunks.append(
            [row_group.column(i).total_compressed_size for i in range(row_group.num_columns)]
        )
    return list(zip(*chunks, strict=True))


def choose_encodings(
    first_row_group: pa.Table,
    footers: Sequence[pq.FileMetaData],
    *,
    dictionary_limit: int,
    small_dictionary: int = SMALL_DICTIONARY,
    rows: int | None = None,
    decimals_as_integers: bool = True,
) -> ColumnEncodings:
    """The encodings of a file whose first row group is ``first_row_group``, given the footers
    of the sources read so far (see the module header), for row groups of ``rows`` (those of
    ``first_row_group`` unless given). A dictionary chosen from the data may take up to
    ``dictionary_limit`` bytes; one kept without looking, ``small_dictionary``. Decimals of up
    to 18 digits are stored as integers, or with ``decimals_as_integers`` false as fixed-length
    bytes."""
    if rows is None:
        rows = first_row_group.num_rows
    choices: list[EncodingChoice] = []
    for field, column in zip(first_row_group.schema, first_row_group.columns, strict=True):
        t = field.type
        if pa.types.is_nested(t) or pa.types.is_boolean(t) or rows == 0:
            choices.extend(
                EncodingChoice(
                    path,
                    DICTIONARY,
                    "kept: dictionary while it stays small",
                    contenders=(PLAIN, DICTIONARY),
                )
                for path in leaf_paths(field)
            )
            continue
        choices.append(
            _choose(
                field.name,
                t,
                _sample(column),
                rows,
                footers,
                dictionary_limit,
                decimals_as_integers,
            )
        )
    return ColumnEncodings(tuple(choices), small_dictionary, dictionary_limit)


def _choose(
    name: str,
    t: pa.DataType,
    blocks: list[pa.Array],
    rows: int,
    footers: Sequence[pq.FileMetaData],
    dictionary_limit: int,
    decimals_as_integers: bool,
) -> EncodingChoice:
    """The choice for a flat column (see the module header), and its contenders: plain and the
    encodings estimated no larger."""
    sample = pa.chunked_array(blocks, t)
    live = len(sample) - sample.null_count
    if live == 0:
        return EncodingChoice(name, PLAIN, "no values in the sample")
    whole = rows * live // len(sample)
    width = _value_bytes(t, sample, live, decimals_as_integers)
    plain = int(whole * width)
    estimated = {PLAIN: plain}  # the bytes of each encoding still in contention
    pays: list[str] = []
    largest = _largest_source_dictionary(name, footers)
    if largest > dictionary_limit:
        reason = f"a source's dictionary page is {largest} bytes"
        dictionary_bytes = 0
    else:
        estimate = distinct_estimate(blocks, whole)
        dictionary_bytes = int(estimate * width)
        # one over the limit is abandoned part way, yet may still encode smaller than plain
        estimated[DICTIONARY] = dictionary_bytes + whole * _index_bits(estimate) // 8
        if dictionary_bytes > dictionary_limit:
            reason = f"~{estimate} distinct values of {width:.0f} B"
        else:
            reason = f"~{estimate} distinct of {whole} values, {width:.0f} B each"
            if estimate * 2 <= whole:
                pays.append(DICTIONARY)
    if _delta_packable(t, decimals_as_integers):
        packed = _delta_bytes(sample) * whole // live
        estimated[DELTA_BINARY_PACKED] = packed
        reason += f"; deltas pack {plain} B into ~{packed} B"
        if packed * 2 <= plain:
            pays.append(DELTA_BINARY_PACKED)
    contenders = tuple(e for e in _CHEAPEST_FIRST if e in estimated and estimated[e] <= plain)
    encoding = min((e for e in pays if e in contenders), key=estimated.__getitem__, default=PLAIN)
    return EncodingChoice(
        name,
        encoding,
        reason,
        dictionary_bytes if DICTIONARY in contenders else 0,
        contenders,
    )


_CHEAPEST_FIRST: Final = (PLAIN, DELTA_BINARY_PACKED, DICTIONARY)
"""The encodings in the order a trial prefers them on a tie: the cheaper to write first."""
_TIE: Final = 0.02
"""Sizes this close (relatively) are a tie: a dictionary barely smaller is not worth its CPU."""


def _index_bits(distinct: int) -> int:
    """The bit width of a dictionary's indices (their RLE runs left out)."""
    return max(1, (distinct - 1).bit_length())


def distinct_estimate(blocks: Sequence[pa.Array], whole: int) -> int:
    """The distinct non-null values of a column of ``whole`` values, from sample ``blocks``
    of consecutive rows spread over it: the smaller of two estimates, each right where the
    other overshoots.

    - Growth in proportion to the values (``whole`` over the sample's), right where each block
      holds values of its own (sorted data, runs of neighbours).
    - Chao's incidence estimator (Chao2), right where blocks draw from one set of values: it
      adds to the values seen those the sample missed, judged from how many were seen in one
      block only (Q1) and in two (Q2).
    """
    seen = [u for u in (pc.unique(pc.drop_null(b)) for b in blocks) if len(u)]
    if not seen:
        return 0
    live = sum(len(b) - int(b.null_count) for b in blocks)
    incidence = pc.value_counts(pa.chunked_array(seen)).field("counts")
    distinct, m = len(incidence), len(seen)
    proportional = distinct * whole // live
    if m == 1:  # no second block to tell what the sample missed
        return min(whole, proportional)
    once = int(pc.sum(pc.equal(incidence, _int64(1))).as_py() or 0)
    twice = int(pc.sum(pc.equal(incidence, _int64(2))).as_py() or 0)
    chao2 = distinct + int((m - 1) / m * once * (once - 1) / (2 * (twice + 1)))
    return max(distinct, min(whole, proportional, chao2))


def _sample(column: pa.ChunkedArray) -> list[pa.Array]:
    """Runs of consecutive rows spread over the column (all of it, in runs, when it is
    short)."""
    rows = len(column)
    step = max(BLOCK_ROWS, rows // SAMPLE_BLOCKS)
    return [_whole(column.slice(at, BLOCK_ROWS)) for at in range(0, rows, step)][:SAMPLE_BLOCKS]


def _whole(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)


def _largest_source_dictionary(name: str, footers: Sequence[pq.FileMetaData]) -> int:
    """The largest dictionary page (compressed, with its header) of column ``name`` in the
    sources' row groups; 0 when none has one. A source dictionary larger than the limit means
    the output's, which holds at least its values, would outgrow it too."""
    largest = 0
    for footer in footers:
        index = _column_index(footer, name)
        if index is None:
            continue
        for g in range(footer.num_row_groups):
            chunk = footer.row_group(g).column(index)
            start, data = chunk.dictionary_page_offset, chunk.data_page_offset
            if chunk.has_dictionary_page and start and data > start:
                largest = max(largest, data - start)
    return largest


def _column_index(footer: pq.FileMetaData, name: str) -> int | None:
    schema = footer.schema
    return next((i for i in range(len(schema)) if schema.column(i).path == name), None)


def _value_bytes(
    t: pa.DataType, sample: pa.ChunkedArray, live: int, decimals_as_integers: bool
) -> float:
    """A value's size in a dictionary page: its physical width, or for strings and binaries
    their mean length plus the 4-byte length prefix."""
    if pa.types.is_decimal(t):
        if decimals_as_integers and t.precision <= 18:  # INT32 or INT64, as Spark stores them
            return 4 if t.precision <= 9 else 8
        return _decimal_bytes(t.precision)
    if _variable_width(t):
        lengths = pc.sum(pc.binary_length(sample)).as_py() or 0
        return float(lengths) / live + 4
    return max(4, int(t.bit_width) // 8)  # Parquet stores int8 and int16 as INT32


def _variable_width(t: pa.DataType) -> bool:
    return any(
        check(t)
        for check in (
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_large_binary,
        )
    )


def _decimal_bytes(precision: int) -> int:
    """The width of a fixed-length decimal: the fewest bytes whose two's complement holds
    every value of ``precision`` digits (as Parquet writers size it)."""
    return (int("9" * precision).bit_length() + 8) // 8


def _delta_packable(t: pa.DataType, decimals_as_integers: bool) -> bool:
    """Integers, dates, timestamps and, stored as integers, decimals of up to 18 digits: INT32
    and INT64 columns that Delta readers decode in ``DELTA_BINARY_PACKED`` (a fixed-length
    column cannot take it)."""
    if pa.types.is_decimal128(t):
        return decimals_as_integers and bool(t.precision <= 18)
    return bool(
        pa.types.is_signed_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t)
    ) and t.bit_width in (32, 64)


def _integers(live: pa.Array) -> pa.Int64Array:
    """The Parquet integers of non-null values: a decimal's unscaled value (the low half of its
    128 bits, which holds it whole up to 18 digits), the others' own bits."""
    if pa.types.is_decimal128(live.type):
        if not len(live):  # its data buffer may be absent
            return pa.array([], pa.int64())
        halves = 2 * len(live)
        words = pa.Array.from_buffers(
            pa.int64(), halves, [None, live.buffers()[1]], offset=2 * live.offset
        )
        return pc.take(words, pa.arange(0, halves, 2))
    physical = pa.int64() if live.type.bit_width == 64 else pa.int32()
    return pc.cast(live.view(physical), pa.int64())


def _delta_bytes(sample: pa.ChunkedArray) -> int:
    """The bytes ``DELTA_BINARY_PACKED`` would need for the sample's values: per miniblock of
    32 deltas (between consecutive non-null values, wrapping as the encoder does) the bit width
    of their range."""
    total, miniblocks = 0, []
    for chunk in sample.chunks:
        values = _integers(pc.drop_null(chunk))
        if len(values) < 2:
            total += 8 * len(values)
            continue
        deltas = pc.pairwise_diff(values).slice(1)  # wraps on overflow, as the encoder does
        # a last, partial miniblock is padded with its own last delta: same range
        miniblocks += [deltas, pa.repeat(deltas[-1], -len(deltas) % _MINIBLOCK)]
        total += _BLOCK_HEADER_BYTES * (len(deltas) // (4 * _MINIBLOCK) + 1)
    if miniblocks:
        low, high = _miniblock_extremes(pa.concat_arrays(miniblocks))
        # the range of each miniblock, exactly (wrapping in unsigned arithmetic)
        spread = pc.subtract(high.view(pa.uint64()), low.view(pa.uint64()))
        widths = pc.ceil(
            pc.log2(pc.add(pc.cast(spread, pa.float64(), safe=False), _ONE)),
        )
        total += int(pc.sum(widths).as_py()) * _MINIBLOCK // 8
    return total


_ONE: Final = pa.scalar(1.0, pa.float64())


def _int64(value: int) -> pa.Scalar:
    """A typed scalar operand: for a bare Python number pyarrow infers a type, and the first
    inference in a process imports pandas' and dateutil's shims (~7 ms)."""
    return pa.scalar(value, pa.int64())


def _miniblock_extremes(deltas: pa.Int64Array) -> tuple[pa.Int64Array, pa.Int64Array]:
    """The min and max of each miniblock (``deltas`` holds whole ones): one take lays the
    miniblocks out column by column, so their 32 columns are 32 slices compared element-wise."""
    blocks = len(deltas) // _MINIBLOCK
    i, width = pa.arange(0, len(deltas)), _int64(blocks)
    by_column = pc.add(
        pc.multiply(pc.remainder(i, width), _int64(_MINIBLOCK)),
        pc.divide(i, width),
    )
    columns = pc.take(deltas, by_column)
    parts = [columns.slice(j * blocks, blocks) for j in range(_MINIBLOCK)]
    return pc.min_element_wise(*parts), pc.max_element_wise(*parts)
