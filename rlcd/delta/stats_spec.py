"""Which columns of a Delta table get file statistics, read from its schema and properties.

Pure: no IO. The domain is the data schema (partition columns left out), walked depth first; a
struct is never a leaf. ``delta.dataSkippingStatsColumns`` (comma list; dotted, backtick-quoted,
case-insensitive logical names; a struct means all of its leaves; names that match nothing are
ignored, as Spark's writer does) takes precedence over ``delta.dataSkippingNumIndexedCols`` (the
first N leaves, default 32, -1 means all). Arrays, maps, binary, boolean and variant take a slot
but only get ``nullCount`` (delta-protocol.md §4.3). The result is a ``StatsSpec``: the chosen
leaves by *physical* path, each with a ``StatKind``.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from rlcd.delta.schema import (
    ColumnMappingMode,
    DataType,
    DecimalType,
    PrimitiveType,
    StructField,
    StructType,
    physical_name,
)

__all__ = (
    "STATS_COLUMNS_KEY",
    "NUM_INDEXED_COLS_KEY",
    "STRING_PREFIX_LENGTH_KEY",
    "DEFAULT_NUM_INDEXED_COLS",
    "DEFAULT_STRING_PREFIX_LENGTH",
    "StatKind",
    "StatsLeaf",
    "StatsSpec",
    "stats_spec",
    "parse_stats_columns",
)
__pure__ = True

STATS_COLUMNS_KEY: Final = "delta.dataSkippingStatsColumns"
NUM_INDEXED_COLS_KEY: Final = "delta.dataSkippingNumIndexedCols"
STRING_PREFIX_LENGTH_KEY: Final = "delta.dataSkippingStringPrefixLength"
DEFAULT_NUM_INDEXED_COLS: Final = 32
DEFAULT_STRING_PREFIX_LENGTH: Final = 32


class StatKind(enum.Enum):
    """What a leaf gets: ``NULL_COUNT`` only, or also min/max in the form its type needs."""

    NULL_COUNT = "null_count"  # boolean, binary, array, map, variant
    INTEGER = "integer"  # byte, short, integer, long
    FLOAT = "float"  # float, double
    DECIMAL = "decimal"
    DATE = "date"
    TIMESTAMP = "timestamp"
    TIMESTAMP_NTZ = "timestamp_ntz"
    STRING = "string"


_KIND_BY_TYPE: Final[Mapping[str, StatKind]] = {
    "byte": StatKind.INTEGER,
    "short": StatKind.INTEGER,
    "integer": StatKind.INTEGER,
    "long": StatKind.INTEGER,
    "float": StatKind.FLOAT,
    "double": StatKind.FLOAT,
    "date": StatKind.DATE,
    "timestamp": StatKind.TIMESTAMP,
    "timestamp_ntz": StatKind.TIMESTAMP_NTZ,
    "string": StatKind.STRING,
}


@dataclass(frozen=True, slots=True)
class StatsLeaf:
    """One column that gets stats: its physical path (outermost name first) and its kind."""

    path: tuple[str, ...]
    kind: StatKind

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", tuple(self.path))
        if not self.path:
            raise ValueError("a stats column path is a non-empty sequence of names")


@dataclass(frozen=True, slots=True)
class StatsSpec:
    """The columns that get stats, in schema order, and the string prefix length (§4.3, §4.4).

    Invariant: no path repeats or is a prefix of another; ``string_prefix_length >= 0``.
    """

    leaves: tuple[StatsLeaf, ...]
    string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH

    def __post_init__(self) -> None:
        object.__setattr__(self, "leaves", tuple(self.leaves))
        if self.string_prefix_length < 0:
            raise ValueError(f"string prefix length {self.string_prefix_length} is negative")
        paths = {leaf.path for leaf in self.leaves}
        if len(paths) != len(self.leaves):
            raise ValueError("a stats column appears twice")
        inner = {leaf.path[:depth] for leaf in self.leaves for depth in range(1, len(leaf.path))}
        if paths & inner:
            raise ValueError(f"stats columns {sorted(paths & inner)} are also structs")

    @property
    def has_bounds(self) -> bool:
        """Whether any leaf gets min/max (else ``minValues``/``maxValues`` are not written)."""
        return any(leaf.kind is not StatKind.NULL_COUNT for leaf in self.leaves)


def stats_spec(
    schema: StructType,
    *,
    mode: ColumnMappingMode,
    partition_columns: Sequence[str] = (),
    configuration: Mapping[str, str] | None = None,
) -> StatsSpec:
    """The stats columns of a table (§4.3): named columns, else the first N leaves.

    Args:
        schema: the table schema (``metaData.schemaString``, parsed).
        mode: the table's column mapping mode; paths in the result are physical.
        partition_columns: ``metaData.partitionColumns`` (logical names); never get stats.
        configuration: ``metaData.configuration``; reads ``delta.dataSkippingStatsColumns``,
            ``delta.dataSkippingNumIndexedCols`` and ``delta.dataSkippingStringPrefixLength``.

    Raises:
        KeyError: a partition column is not a top-level column.
        TypeError: ``partition_columns`` is a string, not a sequence of names.
        ValueError: a property above is malformed, or a field lacks its physical name.
    """
    config = configuration or {}
    if isinstance(partition_columns, str):
        raise TypeError(f"expected a sequence of column names, got {partition_columns!r}")
    excluded = {schema.field(c).name for c in partition_columns}
    leaves = _leaves([f for f in schema.fields if f.name not in excluded], mode, (), ())
    named = config.get(STATS_COLUMNS_KEY)
    if named is not None:
        chosen = _named_leaves(leaves, parse_stats_columns(named))
    else:
        count = _int_property(config, NUM_INDEXED_COLS_KEY, DEFAULT_NUM_INDEXED_COLS, -1)
        chosen = tuple(leaves) if count < 0 else tuple(itertools.islice(leaves, count))
    prefix = _int_property(config, STRING_PREFIX_LENGTH_KEY, DEFAULT_STRING_PREFIX_LENGTH, 0)
    return StatsSpec(tuple(leaf for _, leaf in chosen), prefix)


_LogicalLeaf = tuple[tuple[str, ...], StatsLeaf]  # (lower-cased logical path, leaf)


def _leaves(
    fields: Sequence[StructField],
    mode: ColumnMappingMode,
    logical: tuple[str, ...],
    physical: tuple[str, ...],
) -> Iterator[_LogicalLeaf]:
    """Every leaf below ``fields``, depth first: structs are walked, anything else is a leaf."""
    for f in fields:
        lpath, ppath = (*logical, f.name.lower()), (*physical, physical_name(f, mode))
        if isinstance(f.type, StructType):
            yield from _leaves(f.type.fields, mode, lpath, ppath)
        else:
            yield lpath, StatsLeaf(ppath, _kind(f.type))


def _kind(dtype: DataType) -> StatKind:
    if isinstance(dtype, DecimalType):
        return StatKind.DECIMAL
    if isinstance(dtype, PrimitiveType):
        return _KIND_BY_TYPE.get(dtype.name, StatKind.NULL_COUNT)
    return StatKind.NULL_COUNT  # arrays and maps: whole-column nullCount only


def _named_leaves(
    leaves: Iterator[_LogicalLeaf], names: Sequence[tuple[str, ...]]
) -> tuple[_LogicalLeaf, ...]:
    """The leaves named in ``delta.dataSkippingStatsColumns``, or below a named struct."""
    wanted = {tuple(part.lower() for part in name) for name in names}
    return tuple(
        (lpath, leaf)
        for lpath, leaf in leaves
        if any(lpath[:depth] in wanted for depth in range(1, len(lpath) + 1))
    )


def _int_property(config: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = config.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key} is {raw!r}; expected an integer") from None
    if value < minimum:
        raise ValueError(f"{key} is {value}; expected an integer >= {minimum}")
    return value


_IDENTIFIER: Final = re.compile(r"\s*(?:`((?:[^`]|``)*)`|([^\s`.,]+))\s*")


def parse_stats_columns(text: str) -> tuple[tuple[str, ...], ...]:
    """Parse ``delta.dataSkippingStatsColumns``: ``a, b.c, `d.e`.f`` into name paths.

    Spark's ``multipartIdentifierList``: commas between columns, dots between nesting levels,
    backticks quote a name (a doubled backtick is a literal one). Blank text means no columns.

    Raises:
        ValueError: the text does not parse (the message gives the offset).
    """
    if not text.strip():
        return ()
    columns: list[tuple[str, ...]] = []
    parts: list[str] = []
    pos = 0
    while True:
        match = _IDENTIFIER.match(text, pos)
        if match is None:
            raise ValueError(f"{STATS_COLUMNS_KEY}: expected a column name at offset {pos}")
        quoted, bare = match.group(1, 2)
        parts.append(quoted.replace("``", "`") if quoted is not None else bare)
        pos = match.end()
        separator = text[pos : pos + 1]
        if separator == ".":
            pos += 1
            continue
        columns.append(tuple(parts))
        parts = []
        if not separator:
            return tuple(columns)
        if separator != ",":
            raise ValueError(f"{STATS_COLUMNS_KEY}: unexpected {separator!r} at offset {pos}")
        pos += 1
