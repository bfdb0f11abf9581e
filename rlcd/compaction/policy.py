"""What to compact: sizes, ratios, the output format and a partition filter. Pure: no IO.

Theory of operation
-------------------
A :class:`CompactionPolicy` is the configured policy (defaults, then TOML or the command line);
:func:`effective_policy` applies a table's own ``delta.targetFileSize``, which wins over the
configuration as it does in Spark and Databricks. The planner (``plan.py``, design §7) reads:

* ``target_file_size`` (default 128 MiB): bins are packed up to this many estimated live bytes.
* ``min_file_size``: files smaller than this are compaction candidates. Unset, it is half the
  target (:attr:`CompactionPolicy.small_file_threshold`), and follows the target when a table
  property changes it. It may never exceed half the target: the planner (``plan.py``) closes
  a next-fit bin only when the next file does not fit, which leaves it more than
  ``target - min`` bytes; with ``2 * min <= target`` that is not a small file again, so a run
  right after a compaction plans nothing, and every small file fits in a bin with another.
  Spark and delta-rs use ``min = target`` (Spark: ``optimize.minFileSize`` =
  ``optimize.maxFileSize`` = 1 GiB; delta-rs: files under ``targetSize``) and so can rewrite
  their own outputs on the next run. A file over half the target is big enough that
  rewriting it buys little.
* ``max_deleted_rows_ratio`` (default 0.05, Spark's ``optimize.maxDeletedRowsRatio``): a file
  whose DV deletes more than this fraction of its rows is rewritten to purge the DV, even alone.
* ``max_bins``: at most this many bins per plan (None: no limit).
* ``partition_filter``: only files whose partition values satisfy it (``--where``).
* ``codec`` and ``row_group_rows``: how the rewrite encodes its outputs.
* ``encodings``: ``conservative`` (a dictionary on every column while it stays small) or
  ``adaptive`` (per-column encodings chosen from the data, ``encodings.py``).

*Partition filters* are a deliberately small language over the raw ``partitionValues`` strings
(protocol notes §2.11), a conjunction of clauses::

    filter := clause ( AND clause )*
    clause := column = value | column IN ( value [, value]* ) | column IS [NOT] NULL
    column := name | `quoted name`          (`` inside backquotes is one backquote)
    value  := 'quoted text' | bare-word     ('' inside quotes is one quote)

Keywords are case-insensitive; a bare word is letters, digits and ``_ . : + -``
(``date = 2024-01-01``). Columns are *logical* names, matched ignoring case as Delta does;
:meth:`PartitionFilter.bind` maps them to the physical ``partitionValues`` keys (column
mapping, §5.1). Values compare to the raw string exactly as the log wrote it: ``n = 1`` does
not match ``"01"``, and a timestamp must be written in the form the table uses. A null
partition value is JSON ``null`` or ``""`` (§2.11); only ``IS NULL`` matches it, so ``''`` and a
bare ``NULL`` as values are errors rather than filters that silently match nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Final, NamedTuple

from rlcd.delta.protocol import TableConfig
from rlcd.errors import ConfigError, TableError

__all__ = (
    "MIB",
    "DEFAULT_TARGET_FILE_SIZE",
    "DEFAULT_MAX_DELETED_ROWS_RATIO",
    "DEFAULT_ROW_GROUP_ROWS",
    "CODECS",
    "ENCODINGS",
    "TARGET_FILE_SIZE_PROPERTY",
    "PartitionClause",
    "PartitionFilter",
    "CompactionPolicy",
    "parse_byte_size",
    "parse_duration",
    "effective_policy",
)

MIB: Final = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE: Final = 128 * MIB
DEFAULT_MAX_DELETED_ROWS_RATIO: Final = 0.05
DEFAULT_ROW_GROUP_ROWS: Final = 1024 * 1024  # pyarrow's default row group length
MAX_ROW_GROUP_ROWS: Final = 64 * 1024 * 1024  # pyarrow splits longer row groups silently
CODECS: Final = frozenset({"zstd", "snappy", "gzip", "none"})
"""Parquet codecs every Delta reader handles, spelled as pyarrow's ``compression`` takes them
(``none``: uncompressed). LZ4 (Hadoop framing vs LZ4_RAW) and Brotli are not universal."""

ENCODINGS: Final = ("conservative", "adaptive")
"""How outputs choose their column encodings (the first is the default)."""

TARGET_FILE_SIZE_PROPERTY: Final = "delta.targetFileSize"

_MAX_LONG: Final = 2**63 - 1

# --- sizes ---------------------------------------------------------------------------------------

_SIZE_RE: Final = re.compile(r"([0-9]+)([a-z]*)")
_UNITS: Final[Mapping[str, int]] = {
    "": 1,
    "b": 1,
    **{u: 1024**p for p, us in enumerate(("k", "m", "g", "t", "p"), 1) for u in (us, us + "b")},
    **{u + "ib": 1024**p for p, u in enumerate(("k", "m", "g", "t", "p"), 1)},
}


def parse_byte_size(text: str) -> int:
    """Bytes from ``"134217728"`` or a number with a binary unit (``"128mb"``, ``"1g"``).

    Accepts what Spark accepts for ``delta.targetFileSize`` (``JavaUtils.byteStringAsBytes``:
    trimmed, case-insensitive, ``b k kb m mb g gb t tb p pb``, all powers of 1024), plus the
    IEC spellings ``kib mib gib tib pib``. No fractions, signs or inner spaces.

    Raises:
        ValueError: not such a size, zero, or above a Delta long.
    """
    match = _SIZE_RE.fullmatch(text.strip().lower())
    if match is None or match[2] not in _UNITS:
        raise ValueError(f"{text!r} is not a byte size (an integer, or one with a unit: 128mb)")
    size = int(match[1]) * _UNITS[match[2]]
    if not 0 < size <= _MAX_LONG:
        raise ValueError(f"{text!r} is out of range (1 byte to 2^63-1 bytes)")
    return size


_DURATION_RE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``"90"`` (seconds), or a number with a unit: ``250ms 30s 5m 1.5h 7d``.

    Raises:
        ValueError: not such a duration (negative, no number, an unknown unit).
    """
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration (a number of seconds, or with a unit: 5m)")
    return float(match[1]) * _DURATION_UNITS[match[2]]


# --- partition filters ---------------------------------------------------------------------------

_TOKEN_RE: Final = re.compile(
    r"\s*(?:"
    r"(?P<name>`(?:[^`]|``)+`)"
    r"|(?P<string>'(?:[^']|'')*')"
    r"|(?P<punct>[(),=])"
    r"|(?P<word>[A-Za-z0-9_.:+\-]+)"
    r"|(?P<end>\Z)"
    r")"
)
_KEYWORDS: Final = frozenset({"AND", "IN", "IS", "NOT", "NULL"})


@dataclass(frozen=True, slots=True)
class PartitionClause:
    """One clause: the value of ``column`` (logical name) is in ``values``, or not if negated.

    ``None`` in ``values`` stands for a null partition value; it only comes from ``IS NULL``.
    """

    column: str
    values: frozenset[str | None]
    negated: bool = False

    def __post_init__(self) -> None:
        if not self.column:
            raise ValueError("a partition clause needs a column")
        if not self.values:
            raise ValueError(f"partition clause on {self.column!r} has no values")
        if "" in self.values:
            raise ValueError("'' is a null partition value (protocol notes §2.11): use IS NULL")

    def matches(self, raw: str | None) -> bool:
        """Whether a raw ``partitionValues`` entry satisfies the clause (``""`` is null)."""
        return ((raw or None) in self.values) != self.negated


@dataclass(frozen=True, slots=True)
class PartitionFilter:
    """A parsed ``--where``: all ``clauses`` must hold. ``text`` is kept for messages and logs."""

    text: str
    clauses: tuple[PartitionClause, ...]

    def __post_init__(self) -> None:
        if not self.clauses:
            raise ValueError("a partition filter needs at least one clause")

    @classmethod
    def parse(cls, text: str) -> PartitionFilter:
        """Parse the filter language of the module header.

        Raises:
            ConfigError: naming ``text``, the problem and where it is.
        """
        return cls(text, _Parser(text).parse())

    def bind(
        self, logical_to_physical: Mapping[str, str]
    ) -> Callable[[Mapping[str, str | None]], bool]:
        """A predicate over a file's raw ``partitionValues``, for one table.

        Args:
            logical_to_physical: each partition column's logical name (``partitionColumns``)
                to its ``partitionValues`` key; the identity without column mapping (§5.1).
                Filter columns match these names exactly, else ignoring case.

        Raises:
            ConfigError: a column in the filter is not a partition column.
        """
        folded = {name.casefold(): physical for name, physical in logical_to_physical.items()}
        bound: list[tuple[str, PartitionClause]] = []
        for clause in self.clauses:
            physical = logical_to_physical.get(clause.column, folded.get(clause.column.casefold()))
            if physical is None:
                columns = ", ".join(logical_to_physical) or "none"
                raise ConfigError(
                    f"partition filter {self.text!r} names {clause.column!r}, which is not a "
                    f"partition column (partition columns: {columns})"
                )
            bound.append((physical, clause))

        def matches(partition_values: Mapping[str, str | None]) -> bool:
            # A missing key reads as null, like a null value.
            return all(c.matches(partition_values.get(key)) for key, c in bound)

        return matches


class _Token(NamedTuple):
    """``kind`` is name (a column in backquotes), string, punct, keyword, word or end."""

    kind: str
    text: str  # unquoted for name and string, upper case for keyword
    position: int


class _Parser:
    """Recursive descent over one filter text (grammar in the module header)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(self._tokenize())
        self.index = 0

    def _tokenize(self) -> Iterator[_Token]:
        position = 0
        while True:
            match = _TOKEN_RE.match(self.text, position)
            if match is None:
                at = len(self.text) - len(self.text[position:].lstrip())
                raise self._error(f"unexpected {self.text[at]!r}", at)
            kind = match.lastgroup or "end"
            raw, start = match[kind], match.start(kind)
            if kind == "end":
                yield _Token("end", "", start)
                return
            if kind == "name":
                yield _Token(kind, raw[1:-1].replace("``", "`"), start)
            elif kind == "string":
                yield _Token(kind, raw[1:-1].replace("''", "'"), start)
            elif kind == "word" and raw.upper() in _KEYWORDS:
                yield _Token("keyword", raw.upper(), start)
            else:
                yield _Token(kind, raw, start)
            position = match.end()

    def _error(self, problem: str, position: int) -> ConfigError:
        where = "at the end" if position >= len(self.text) else f"at character {position + 1}"
        return ConfigError(f"partition filter {self.text!r}: {problem} {where}")

    def _take(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def _accept(self, kind: str, text: str) -> bool:
        """Consume the next token if it is ``text`` of ``kind``."""
        token = self.tokens[self.index]
        if token.kind == kind and token.text == text:
            self.index += 1
            return True
        return False

    def _expect(self, kind: str, text: str) -> None:
        if not self._accept(kind, text):
            token = self.tokens[self.index]
            raise self._error(f"expected {text}, found {_describe(token)}", token.position)

    def parse(self) -> tuple[PartitionClause, ...]:
        clauses = [self._clause()]
        while self.tokens[self.index].kind != "end":
            self._expect("keyword", "AND")
            clauses.append(self._clause())
        return tuple(clauses)

    def _clause(self) -> PartitionClause:
        column = self._take()
        if column.kind not in ("name", "word"):
            raise self._error(f"expected a column name, found {_describe(column)}", column.position)
        if self._accept("punct", "="):
            return PartitionClause(column.text, frozenset({self._value()}))
        if self._accept("keyword", "IN"):
            self._expect("punct", "(")
            values = {self._value()}
            while self._accept("punct", ","):
                values.add(self._value())
            self._expect("punct", ")")
            return PartitionClause(column.text, frozenset(values))
        if self._accept("keyword", "IS"):
            negated = self._accept("keyword", "NOT")
            self._expect("keyword", "NULL")
            return PartitionClause(column.text, frozenset({None}), negated=negated)
        token = self.tokens[self.index]
        raise self._error(
            f"expected =, IN or IS after {column.text!r}, found {_describe(token)}",
            token.position,
        )

    def _value(self) -> str:
        token = self._take()
        if token.kind == "string" and not token.text:
            raise self._error("'' is a null partition value (§2.11); use IS NULL", token.position)
        if token.kind == "keyword" and token.text == "NULL":
            raise self._error("NULL is not a value; use IS NULL", token.position)
        if token.kind not in ("string", "word"):
            raise self._error(f"expected a value, found {_describe(token)}", token.position)
        return token.text


def _describe(token: _Token) -> str:
    return "nothing" if token.kind == "end" else repr(token.text)


# --- the policy ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """The compaction settings of one table (see the module header for each field's meaning).

    Invariants (checked on construction, raising :class:`ConfigError` that names the field):
    sizes are positive integers (``min_file_size`` may be 0: purge DVs only);
    ``2 * min_file_size <= target_file_size``; ``0 <= max_deleted_rows_ratio <= 1``;
    ``max_bins`` is None or at least 1; ``codec`` is one of :data:`CODECS`; ``encodings`` one
    of :data:`ENCODINGS`;
    ``1 <= row_group_rows <= MAX_ROW_GROUP_ROWS``.
    """

    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_file_size: int | None = None
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO
    max_bins: int | None = None
    partition_filter: PartitionFilter | None = None
    codec: str = "zstd"
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    encodings: str = ENCODINGS[0]

    def __post_init__(self) -> None:
        _check_count("target_file_size", self.target_file_size, minimum=1)
        if self.min_file_size is not None:
            _check_count("min_file_size", self.min_file_size, minimum=0)
            if 2 * self.min_file_size > self.target_file_size:
                raise ConfigError(
                    f"min_file_size ({self.min_file_size} bytes) must be at most half of "
                    f"target_file_size ({self.target_file_size} bytes), so that a full bin "
                    "is never a small file again"
                )
        ratio = self.max_deleted_rows_ratio
        if (
            isinstance(ratio, bool)
            or not isinstance(ratio, int | float)
            or not (math.isfinite(ratio) and 0 <= ratio <= 1)
        ):
            raise ConfigError(f"max_deleted_rows_ratio must be a number in [0, 1], got {ratio!r}")
        if self.max_bins is not None:
            _check_count("max_bins", self.max_bins, minimum=1)
        if self.codec not in CODECS:
            raise ConfigError(
                f"codec must be one of {', '.join(sorted(CODECS))}, got {self.codec!r}"
            )
        _check_count("row_group_rows", self.row_group_rows, minimum=1)
        if self.encodings not in ENCODINGS:
            raise ConfigError(
                f"encodings must be one of {', '.join(ENCODINGS)}, got {self.encodings!r}"
            )
        if self.row_group_rows > MAX_ROW_GROUP_ROWS:
            raise ConfigError(
                f"row_group_rows must be at most {MAX_ROW_GROUP_ROWS} (pyarrow's longest row "
                f"group), got {self.row_group_rows}"
            )

    @property
    def small_file_threshold(self) -> int:
        """Files smaller than this are candidates: ``min_file_size``, else half the target."""
        if self.min_file_size is not None:
            return self.min_file_size
        return self.target_file_size // 2


def _check_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def effective_policy(base: CompactionPolicy, config: TableConfig) -> CompactionPolicy:
    """``base`` with the table's ``delta.targetFileSize`` as the target, when it sets one.

    An unset ``min_file_size`` follows the new target (half of it); an explicit one stays.
    Idempotent, so applying it to an already effective policy changes nothing.

    Raises:
        TableError: the property is not a byte size (it is table content, not configuration).
        ConfigError: an explicit ``min_file_size`` is more than half of the table's target.
    """
    raw = config.properties.get(TARGET_FILE_SIZE_PROPERTY)
    if raw is None:
        return base
    try:
        target = parse_byte_size(str(raw))
    except ValueError as exc:
        raise TableError(
            f"table property {TARGET_FILE_SIZE_PROPERTY}: {exc}", table=config.table
        ) from exc
    if target == base.target_file_size:
        return base
    try:
        return replace(base, target_file_size=target)
    except ConfigError as exc:
        raise ConfigError(
            f"table {config.table}: with its {TARGET_FILE_SIZE_PROPERTY} = {raw!r}: {exc}"
        ) from exc
