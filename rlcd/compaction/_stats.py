"""Delta ``add.stats`` for a file rlcd writes, accumulated over its Arrow record batches.

Pure: no IO, no clock. Input is the table schema and configuration (once per table) and the
record batches written to one output file; output is the ``add.stats`` JSON text. Errors are
``ValueError`` (a bad table property, a batch that does not have the table's physical schema)
or ``KeyError`` (a partition column that is not in the schema).

Theory of operation (delta-protocol.md §4, §0 items 7, 17, 18)
----------------------------------------------------------------
*Which columns* come from :mod:`rlcd.delta.stats_spec` as a ``StatsSpec``.

*Accumulating* (§4.2, ``StatsAccumulator``). Each batch must have the table's physical Arrow
schema (``rlcd.delta.schema.to_arrow_schema``). Per batch and leaf there is one vectorised
``min_max`` kernel (for null-free floats, two integer passes over their bits instead:
``_observe_fast``) and a null count, nothing per row; state is a running
min/max/null count per leaf. A struct leaf is read with ``struct_field``, which folds the
parents' validity in: a null parent makes the leaf null (it counts in ``nullCount`` and its
hidden child value never reaches min/max). Arrays and maps count whole-column nulls only.

*From the footer* (``StatsAccumulator(spec, footer_schema=...)``). A file rlcd writes itself
already carries exact Parquet statistics for most leaves, so, as delta-rs does, their bounds and
null counts are read from its footer (``add_footer``) instead of being computed again: integers,
decimals, dates, timestamps, strings, and null counts of booleans and binaries, at any struct
depth (Parquet's leaf null count also counts null parents, as above). Floats stay with the
batches, since Parquet bounds skip NaN and cannot say whether one was there; so do arrays and
maps, whose whole-column nulls Parquet does not count. One gap is closed by hand: Arrow's writer
drops a column chunk's bounds when the min or the max is longer than
``PARQUET_MAX_STATISTICS_BYTES``, so ``update_row_group`` computes the bounds of a string leaf
itself for any row group holding such a value. A row group the copy path copies from a source
(``update_copied_row_group``) is read from the output's footer the same way, its float, array
and map leaves from its decoded columns, but for float chunks whose dictionary page proved them
free of NaN (:mod:`rlcd.parquet.dictionary`), whose stats are given; bounds its writer marked
inexact (or kept only in the deprecated fields) are dropped.

*Writing* (§4.1, §4.4, §4.5, ``StatsAccumulator.finish``). Keys are in the order ``numRecords,
minValues, maxValues, nullCount, tightBounds``; nested structs nest. A leaf whose values are all
null gets ``nullCount`` only. Value forms:

* integers and decimals are exact JSON numbers (decimals as plain digits with their scale,
  never through ``float``);
* dates ``YYYY-MM-DD``; timestamps floored to milliseconds (also before 1970) as
  ``YYYY-MM-DDTHH:MM:SS.SSSZ`` in UTC, ``timestamp_ntz`` the same without ``Z``;
* strings: min is the first ``prefix`` code points (Spark SQL ``substring``); max follows
  Spark's ``truncateMaxStringAgg``, which counts UTF-16 code units (see
  ``truncate_max_string``). Bounds therefore hold in code-point order, which is UTF-8 byte
  order, the order Spark and Arrow compare strings in.
* floats as Spark's ``min``/``max`` see them: NaN orders above every number, so a column holding
  a NaN has the max ``"NaN"`` and its min is the least other value (``"NaN"`` when all are NaN);
  infinities are ``"Infinity"``/``"-Infinity"`` (strings: JSON has no such numbers); both zeros
  are ``0.0``, as Spark normalises them.

Where rlcd deliberately differs from what Spark writes (every difference only widens a bound or
drops it, or spells the same value otherwise, so readers never skip a file they need):

* ``float`` values are written as the shortest text of the exact double (``0.23399999737739563``
  where Spark writes ``0.234``); both parse to the same float32, and ours is also exact for a
  reader that compares in double.
* Timestamps are always UTC with ``Z`` (Spark uses its session time zone's offset; same instant).
* A nested struct with no bounds is left out rather than written as ``{}``; a date or timestamp
  outside years 1..9999 gets no bound.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.delta.stats_json import stats_json
from rlcd.delta.stats_spec import StatKind, StatsLeaf, StatsSpec
from rlcd.parquet.dictionary import FloatStats

__all__ = (
    "StatsAccumulator",
    "PARQUET_MAX_STATISTICS_BYTES",
    "truncate_min_string",
    "truncate_max_string",
)
__pure__ = True

PARQUET_MAX_STATISTICS_BYTES: Final = 4096
"""Arrow's Parquet writer leaves out a column chunk's bounds when one is longer than this."""

_ASCII_MAX: Final = "\x7f"
_UNICODE_MAX: Final = "\U0010ffff"  # two UTF-16 code units


# --- string truncation (§4.4) -------------------------------------------------------------------


def truncate_min_string(value: str, prefix_length: int) -> str:
    """A lower bound for ``value``: its first ``prefix_length`` code points (§4.4).

    Spark SQL ``substring`` counts code points, so a surrogate pair is never split.
    """
    return value[:prefix_length]


def truncate_max_string(value: str, prefix_length: int) -> str | None:
    """An upper bound for ``value`` of about ``prefix_length`` characters, or None (§4.4).

    Spark's ``truncateMaxStringAgg``, which counts UTF-16 code units: a value of at most
    ``prefix_length`` units is kept whole. Otherwise take the first ``prefix_length`` units (one
    more rather than split a surrogate pair), extend past any U+10FFFF that follows, and append
    U+007F if the next character is below it, else U+10FFFF. If the prefix would pass
    ``2 * prefix_length`` units, give up: None means "no max".
    """
    if _utf16_length(value) <= prefix_length:
        return value
    if prefix_length <= 0:
        return None
    index, units = _prefix_within(value, prefix_length)
    while units <= 2 * prefix_length:
        if index >= len(value):
            return value
        char = value[index]
        if char == _UNICODE_MAX:
            index, units = index + 1, units + 2
            continue
        return value[:index] + (_ASCII_MAX if char < _ASCII_MAX else _UNICODE_MAX)
    return None


def _utf16_length(value: str) -> int:
    return len(value.encode("utf-16-le")) // 2


def _prefix_within(value: str, units: int) -> tuple[int, int]:
    """Code points and UTF-16 units of the shortest prefix with at least ``units`` units."""
    index = taken = 0
    while taken < units:
        taken += 2 if ord(value[index]) > 0xFFFF else 1
        index += 1
    return index, taken


# --- accumulating (§4.2) ------------------------------------------------------------------------

_MS_FROM_UNIT: Final[Mapping[str, Callable[[int], int]]] = {
    "s": lambda v: v * 1000,
    "ms": lambda v: v,
    "us": lambda v: v // 1000,  # Python's // floors, also below zero
    "ns": lambda v: v // 1_000_000,
}


def _epoch_ms(scalar: Any) -> int:
    """A timestamp scalar as milliseconds since the epoch, floored (§4.5)."""
    return _MS_FROM_UNIT[scalar.type.unit](int(scalar.value))


_VALUE: Final[Mapping[StatKind, Callable[[Any], Any]]] = {
    StatKind.INTEGER: lambda s: int(s.as_py()),
    StatKind.DECIMAL: lambda s: s.as_py(),
    StatKind.STRING: lambda s: s.as_py(),
    StatKind.DATE: lambda s: int(s.value),  # days since the epoch
    StatKind.TIMESTAMP: _epoch_ms,
    StatKind.TIMESTAMP_NTZ: _epoch_ms,
}


def _is_float(t: Any) -> bool:
    return bool(pa.types.is_float32(t) or pa.types.is_float64(t))


def _is_string(t: Any) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


_ARROW_TYPE_OK: Final[Mapping[StatKind, Callable[[Any], bool]]] = {
    StatKind.NULL_COUNT: lambda _t: True,
    StatKind.INTEGER: pa.types.is_integer,
    StatKind.FLOAT: _is_float,
    StatKind.DECIMAL: pa.types.is_decimal,
    StatKind.DATE: pa.types.is_date32,
    StatKind.TIMESTAMP: pa.types.is_timestamp,
    StatKind.TIMESTAMP_NTZ: pa.types.is_timestamp,
    StatKind.STRING: _is_string,
}


class _LeafState:
    """Running stats of one leaf: null count, min and max (None until a value is seen)."""

    __slots__ = ("high", "low", "nan", "null_count", "unbounded")

    def __init__(self) -> None:
        self.null_count = 0
        self.low: Any = None
        self.high: Any = None
        self.nan = False  # a float column held a NaN: its max is NaN (Spark orders it above all)
        self.unbounded = False  # a footer had values but no bounds: write none

    def merge(self, low: Any, high: Any) -> None:
        if self.low is None or low < self.low:
            self.low = low
        if self.high is None or high > self.high:
            self.high = high


class StatsAccumulator:
    """Stats of one output file, fed its record batches in any number of ``update`` calls.

    Memory is a running min, max and null count per stats column; each ``update`` does one
    vectorised ``min_max`` per column. ``finish`` may be called more than once.

    With ``footer_schema`` (the Arrow schema the file is written with), the leaves Parquet keeps
    exact statistics for are read from the written file instead (see the module header): call
    ``update`` for every batch, ``update_row_group`` with the rows of every row group as it is
    written, then ``add_footer`` once with the file's metadata. ``update`` and
    ``update_row_group`` touch different leaves and may run in different threads.
    """

    __slots__ = (
        "_columns",
        "_floats",
        "_footer_bounds",
        "_index_paths",
        "_num_records",
        "_schema",
        "_spec",
        "_states",
    )

    def __init__(self, spec: StatsSpec, *, footer_schema: Any = None) -> None:
        self._spec = spec
        self._num_records = 0
        self._states = tuple(_LeafState() for _ in spec.leaves)
        self._schema: Any = None
        self._index_paths: tuple[tuple[int, ...], ...] = ()
        # per leaf: its Parquet column index when its stats come from the footer, else None
        self._columns: tuple[int | None, ...] = (None,) * len(spec.leaves)
        # per leaf: its Parquet column index when it is a float leaf of the batches, else None
        self._floats: tuple[int | None, ...] = (None,) * len(spec.leaves)
        # per row group written: exact bounds of the string leaves Arrow's writer leaves out;
        # None where a copied row group's bounds are not exact (dropped)
        self._footer_bounds: list[dict[int, tuple[Any, Any] | None]] = []
        if footer_schema is not None:
            paths = self._resolve(footer_schema)
            self._columns = tuple(
                _parquet_column(footer_schema, path)
                if _from_footer(leaf, footer_schema, path)
                else None
                for leaf, path in zip(spec.leaves, paths, strict=True)
            )
            self._floats = tuple(
                _parquet_column(footer_schema, path) if leaf.kind is StatKind.FLOAT else None
                for leaf, path in zip(spec.leaves, paths, strict=True)
            )

    @property
    def num_records(self) -> int:
        """Rows seen so far (the file's ``numRecords``)."""
        return self._num_records

    def update(self, batch: Any) -> None:
        """Add a ``pa.RecordBatch`` (or ``pa.Table``) with the table's physical Arrow schema.

        Raises:
            ValueError: a stats column is missing, ambiguous, or of the wrong Arrow type.
        """
        index_paths = self._resolve(batch.schema)
        if batch.num_rows == 0:
            return
        self._num_records += batch.num_rows
        arrays: dict[tuple[int, ...], Any] = {}
        leaves = zip(self._spec.leaves, self._states, index_paths, self._columns, strict=True)
        for leaf, state, index_path, column in leaves:
            if column is None:
                _observe(leaf.kind, state, _column(batch, index_path, arrays))

    def update_row_group(self, rows: Any) -> None:
        """Footer mode: the next row group's rows (a ``pa.Table``), before it is written. Costs
        one length scan per string leaf, and bounds only where a value is too long for Parquet's
        statistics."""
        exact: dict[int, tuple[Any, Any] | None] = {}
        arrays: dict[tuple[int, ...], Any] = {}
        self._footer_bounds.append(exact)
        if not rows.num_rows:
            return
        for i, (leaf, path) in enumerate(zip(self._spec.leaves, self._index_paths, strict=True)):
            if leaf.kind is not StatKind.STRING or self._columns[i] is None:
                continue
            array = _column(rows, path, arrays)
            longest = pc.max(pc.binary_length(array)).as_py()
            if longest is not None and longest > PARQUET_MAX_STATISTICS_BYTES:
                extremes = pc.min_max(array)
                exact[i] = (extremes["min"].as_py(), extremes["max"].as_py())

    def float_columns(self) -> tuple[int, ...]:
        """Footer mode: the Parquet columns (by index) of the float leaves, whose stats a copied
        row group may give instead of decoding them (:meth:`update_copied_row_group`)."""
        return tuple(dict.fromkeys(c for c in self._floats if c is not None))

    def batch_columns(self, given: Collection[int] = ()) -> tuple[str, ...]:
        """Footer mode: the top-level columns holding the leaves read from batches (floats,
        arrays, maps), which a copied row group must be decoded for
        (:meth:`update_copied_row_group`); but for float leaves whose Parquet column is in
        ``given``."""
        names = (
            leaf.path[0]
            for leaf, c, f in zip(self._spec.leaves, self._columns, self._floats, strict=True)
            if c is None and f not in given
        )
        return tuple(dict.fromkeys(names))

    def update_copied_row_group(
        self,
        columns: Any,
        rows: int,
        inexact: frozenset[int],
        floats: Mapping[int, FloatStats] | None = None,
    ) -> None:
        """Footer mode: the next row group is copied from a source as it is, with ``rows`` rows;
        ``floats`` holds the stats of its NaN-free float chunks by Parquet column, ``columns``
        (a ``pa.Table``) its :meth:`batch_columns` for those, conformed to the table's types.
        The bounds of the Parquet columns in ``inexact`` (statistics a reader may not take as
        exact: truncated, or in the deprecated fields only) are dropped, never guessed; the
        others come from the footer as the written row groups' do.

        Raises:
            ValueError: ``columns`` lacks a stats column, or it is of the wrong Arrow type.
        """
        self._num_records += rows
        floats = floats or {}
        arrays: dict[tuple[int, ...], Any] = {}
        leaves = zip(self._spec.leaves, self._states, self._columns, self._floats, strict=True)
        for leaf, state, column, parquet in leaves:
            if column is not None or not rows:
                continue
            given = floats.get(parquet) if parquet is not None else None
            if given is not None:
                state.null_count += given.null_count
                state.merge(given.low, given.high)
            else:
                _observe(
                    leaf.kind, state, _column(columns, _index_path(columns.schema, leaf), arrays)
                )
        self._footer_bounds.append(
            {i: None for i, column in enumerate(self._columns) if column in inexact}
        )

    def add_footer(self, metadata: Any) -> None:
        """Footer mode: fold in the written file's ``pq.FileMetaData``.

        Raises:
            ValueError: the file's row groups are not the ones passed to ``update_row_group``, or
                a column chunk has no statistics.
        """
        if metadata.num_row_groups != len(self._footer_bounds):
            raise ValueError(
                f"footer has {metadata.num_row_groups} row groups, "
                f"{len(self._footer_bounds)} were announced"
            )
        logical = {
            c: metadata.schema.column(c).logical_type for c in self._columns if c is not None
        }
        for r in range(metadata.num_row_groups):
            row_group, exact = metadata.row_group(r), self._footer_bounds[r]
            for i, (leaf, state, column) in enumerate(
                zip(self._spec.leaves, self._states, self._columns, strict=True)
            ):
                if column is None:
                    continue
                chunk = row_group.column(column)
                stats = chunk.statistics
                if stats is None or not stats.has_null_count:
                    raise ValueError(f"column {chunk.path_in_schema!r} has no statistics")
                state.null_count += stats.null_count
                if leaf.kind is StatKind.NULL_COUNT or stats.null_count == chunk.num_values:
                    continue
                if i in exact:
                    bounds = exact[i]
                    if bounds is None:
                        state.unbounded = True  # inexact bounds: widen to none, never guess
                    else:
                        state.merge(*bounds)
                elif stats.has_min_max:
                    raw, unit = _FROM_RAW[leaf.kind], logical[column]
                    state.merge(raw(stats.min_raw, unit), raw(stats.max_raw, unit))
                else:
                    state.unbounded = True  # values without bounds: widen to none, never guess

    def finish(self, *, tight_bounds: bool | None) -> str:
        """The ``add.stats`` JSON text (§4.1).

        Args:
            tight_bounds: the ``tightBounds`` value, or None to leave the key out (write it only
                when the table supports deletion vectors; §0 item 7).
        """
        doc: dict[str, Any] = {"numRecords": self._num_records}
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        prefix = self._spec.string_prefix_length
        for leaf, state in zip(self._spec.leaves, self._states, strict=True):
            _put(nulls, leaf.path, state.null_count)
            low, high = _bounds(leaf.kind, state, prefix)
            if low is not None:
                _put(mins, leaf.path, low)
            if high is not None:
                _put(maxs, leaf.path, high)
        if self._spec.has_bounds:
            doc["minValues"] = mins
            doc["maxValues"] = maxs
        if self._spec.leaves:
            doc["nullCount"] = nulls
        if tight_bounds is not None:
            doc["tightBounds"] = tight_bounds
        return stats_json(doc, engine_floats=True)

    def _resolve(self, schema: Any) -> tuple[tuple[int, ...], ...]:
        """Field indices of every leaf in ``schema``; cached while the schema stays the same."""
        if self._schema is None or not schema.equals(self._schema):
            self._index_paths = tuple(_index_path(schema, leaf) for leaf in self._spec.leaves)
            self._schema = schema
        return self._index_paths


_FOOTER_KINDS: Final = frozenset(
    {
        StatKind.INTEGER,
        StatKind.DECIMAL,
        StatKind.DATE,
        StatKind.TIMESTAMP,
        StatKind.TIMESTAMP_NTZ,
        StatKind.STRING,
    }
)


def _from_footer(leaf: StatsLeaf, schema: Any, index_path: tuple[int, ...]) -> bool:
    """Whether Parquet's statistics of this leaf are exactly its Delta stats."""
    if leaf.kind is StatKind.NULL_COUNT:
        return not pa.types.is_nested(_field(schema, index_path).type)
    return leaf.kind in _FOOTER_KINDS


def _field(schema: Any, index_path: tuple[int, ...]) -> Any:
    field = schema.field(index_path[0])
    for index in index_path[1:]:
        field = field.type.field(index)
    return field


def _parquet_leaves(arrow_type: Any) -> int:
    """How many Parquet leaf columns a field of this Arrow type becomes."""
    if pa.types.is_struct(arrow_type):
        return sum(_parquet_leaves(f.type) for f in arrow_type)
    if pa.types.is_map(arrow_type):
        return _parquet_leaves(arrow_type.key_type) + _parquet_leaves(arrow_type.item_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _parquet_leaves(arrow_type.value_type)
    return 1


def _parquet_column(schema: Any, index_path: tuple[int, ...]) -> int:
    """The Parquet column index of a leaf reached through structs only (depth first order)."""
    column, fields = 0, list(schema)
    for index in index_path:
        column += sum(_parquet_leaves(f.type) for f in fields[:index])
        fields = list(fields[index].type) if pa.types.is_struct(fields[index].type) else []
    return column


def _timestamp_ms(raw: int, logical_type: Any) -> int:
    unit = json.loads(logical_type.to_json())["timeUnit"]
    return _MS_FROM_UNIT[_PARQUET_UNITS[unit]](int(raw))


_PARQUET_UNITS: Final = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


def _decimal_raw(raw: Any, logical_type: Any) -> Decimal:
    """A Parquet decimal bound (an integer, or big-endian two's complement bytes)."""
    unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, bytes) else int(raw)
    return _decimal(unscaled, json.loads(logical_type.to_json())["scale"])


_FROM_RAW: Final[Mapping[StatKind, Callable[[Any, Any], Any]]] = {
    StatKind.INTEGER: lambda raw, _: int(raw),
    StatKind.DECIMAL: _decimal_raw,
    StatKind.STRING: lambda raw, _: raw.decode() if isinstance(raw, bytes) else str(raw),
    StatKind.DATE: lambda raw, _: int(raw),
    StatKind.TIMESTAMP: _timestamp_ms,
    StatKind.TIMESTAMP_NTZ: _timestamp_ms,
}


def _index_path(schema: Any, leaf: StatsLeaf) -> tuple[int, ...]:
    """Where ``leaf`` is in an Arrow schema, as one field index per level."""
    indices: list[int] = []
    container, arrow_type = schema, None
    for depth, name in enumerate(leaf.path):
        where = ".".join(leaf.path[: depth + 1])
        if depth and not pa.types.is_struct(arrow_type):
            raise ValueError(f"batch column {where!r}: parent is {arrow_type}, not a struct")
        index = container.get_field_index(name)
        if index < 0:
            raise ValueError(f"batch has no single column {where!r}")
        indices.append(index)
        container = arrow_type = container.field(index).type
    if not _ARROW_TYPE_OK[leaf.kind](arrow_type):
        raise ValueError(f"batch column {where!r} is {arrow_type}; stats expect {leaf.kind.value}")
    return tuple(indices)


def _column(batch: Any, index_path: tuple[int, ...], arrays: dict[tuple[int, ...], Any]) -> Any:
    """The leaf array, parents' validity folded in (``struct_field``); memoised per batch."""
    array = arrays.get(index_path)
    if array is None:
        if len(index_path) == 1:
            array = batch.column(index_path[0])
        else:
            array = pc.struct_field(_column(batch, index_path[:-1], arrays), index_path[-1])
        arrays[index_path] = array
    return array


def _observe(kind: StatKind, state: _LeafState, array: Any) -> None:
    """Fold one batch's column into ``state``."""
    nulls = array.null_count
    state.null_count += nulls
    if kind is StatKind.NULL_COUNT or nulls == len(array):
        return
    if not nulls and isinstance(array, pa.Array) and _observe_fast(kind, state, array):
        return
    extremes = pc.min_max(array)
    if kind is StatKind.FLOAT:
        _observe_float(state, array, extremes)
    else:
        value = _VALUE[kind]
        state.merge(value(extremes["min"]), value(extremes["max"]))


def _observe_fast(kind: StatKind, state: _LeafState, array: Any) -> bool:
    """Fold in a null-free float array by its bits, exactly and far cheaper than ``min_max``
    (which compares value by value, skipping NaN). False leaves the array to the general path.

    A float's bits read as a signed integer order the non-negative floats; read as unsigned,
    the negative ones come above all of those, by magnitude. So ``min_max`` of the signed bits
    and ``max`` of the unsigned bits (two vectorised integer passes) find the smallest and the
    largest float of either sign; and a NaN's bits lie above an infinity's in both readings.
    """
    if kind is not StatKind.FLOAT:
        return False
    floats = _FLOAT_BITS[array.type.bit_width]
    signed = pc.min_max(array.view(floats.signed))
    lowest, highest = signed["min"].as_py(), signed["max"].as_py()
    top = pc.max(array.view(floats.unsigned)).as_py()  # the negative float of largest magnitude
    if highest > floats.positive_infinity or top > floats.negative_infinity:
        return False  # a NaN: the general path remembers it and skips it
    if lowest >= 0:  # no negative float
        low, high = lowest, highest
    elif highest < 0:  # negative floats only: the smallest magnitude is the largest float
        low, high = top, lowest
    else:
        low, high = top, highest
    state.merge(floats.value(low), floats.value(high))
    return True


@dataclass(frozen=True, slots=True)
class _FloatBits:
    """How the floats of one width read as integers."""

    signed: Any
    unsigned: Any
    positive_infinity: int  # its bits, read as signed
    negative_infinity: int  # its bits, read as unsigned
    integer: struct.Struct  # the bits, as unsigned
    real: struct.Struct

    def value(self, bits: int) -> float:
        """The float whose bits read as ``bits`` (signed or unsigned)."""
        unsigned = bits % (1 << (8 * self.integer.size))
        return float(self.real.unpack(self.integer.pack(unsigned))[0])


_FLOAT_BITS: Final = {
    64: _FloatBits(
        pa.int64(),
        pa.uint64(),
        0x7FF0_0000_0000_0000,
        0xFFF0_0000_0000_0000,
        struct.Struct("<Q"),
        struct.Struct("<d"),
    ),
    32: _FloatBits(
        pa.int32(),
        pa.uint32(),
        0x7F80_0000,
        0xFF80_0000,
        struct.Struct("<I"),
        struct.Struct("<f"),
    ),
}


def _decimal(unscaled: Any, scale: int) -> Decimal:
    """The value ``unscaled * 10**-scale`` as pyarrow's ``as_py`` gives it (same digits and
    exponent), exactly: built from its digits, never rounded to a context's 28 digits."""
    value = int(unscaled)
    return Decimal((int(value < 0), tuple(map(int, str(abs(value)))), -scale))


def _observe_float(state: _LeafState, array: Any, extremes: Any) -> None:
    """``min_max`` skips NaN unless every value is NaN; remember whether any NaN was seen."""
    if not state.nan:
        state.nan = bool(pc.any(pc.is_nan(array)).as_py())
    low, high = float(extremes["min"].as_py()), float(extremes["max"].as_py())
    if not math.isnan(low):
        state.merge(low, high)


# --- writing (§4.1, §4.5) -----------------------------------------------------------------------

_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_DATE: Final = date(1970, 1, 1)


def _bounds(kind: StatKind, state: _LeafState, prefix: int) -> tuple[Any, Any]:
    """The (min, max) JSON values of a leaf; None where that bound is not written."""
    low, high = state.low, state.high
    if kind is StatKind.NULL_COUNT or state.unbounded:
        return None, None
    if kind is StatKind.FLOAT:
        return _float_bounds(state)
    if low is None:
        return None, None
    match kind:
        case StatKind.STRING:
            return truncate_min_string(low, prefix), truncate_max_string(high, prefix)
        case StatKind.DATE:
            return _format_date(low), _format_date(high)
        case StatKind.TIMESTAMP:
            return _format_timestamp(low, "Z"), _format_timestamp(high, "Z")
        case StatKind.TIMESTAMP_NTZ:
            return _format_timestamp(low, ""), _format_timestamp(high, "")
        case _:
            return low, high


def _float_bounds(state: _LeafState) -> tuple[float | None, float | None]:
    """Spark's float bounds: NaN above every number, ``-0.0`` as ``0.0``, infinities kept."""
    if state.low is None:  # no number seen: all NaN, or all null
        return (math.nan, math.nan) if state.nan else (None, None)
    low = 0.0 if state.low == 0 else state.low
    high = math.nan if state.nan else 0.0 if state.high == 0 else state.high
    return low, high


def _format_date(days: int) -> str | None:
    try:
        day = _EPOCH_DATE + timedelta(days=days)
    except OverflowError:
        return None
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def _format_timestamp(ms: int, suffix: str) -> str | None:
    try:
        t = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return None
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{t.microsecond // 1000:03d}{suffix}"
    )


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for name in path[:-1]:
        node = node.setdefault(name, {})
    node[path[-1]] = value
