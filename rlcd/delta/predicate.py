"""Row predicates (``--where``): parse, bind to a table's schema, evaluate three ways. Pure.

No IO, no clock. ``rlcd compact --where`` binds a predicate to partition columns only;
``rlcd delete --where`` to data and partition columns. Errors in the text or against the schema
are :class:`PredicateError` (a :class:`~rlcd.errors.ConfigError`, exit 2 on the command line),
naming the text, the problem and the character it is at.

Theory of operation
-------------------
*The language* is a small SQL boolean expression::

    predicate  := or
    or         := and ( OR and )*
    and        := not ( AND not )*
    not        := NOT not | ( or ) | test
    test       := column op literal
                | column [NOT] IN ( literal [, literal]* )
                | column IS [NOT] NULL
    op         := = | != | <> | < | <= | > | >=
    column     := part ( . part )*          part: name, or `any text` (`` is one backquote)
    literal    := 'text' ('' is one quote) | 123 | -1.5 | 2e3 | TRUE | FALSE
                | DATE 'YYYY-MM-DD' | TIMESTAMP 'YYYY-MM-DD[ HH:MM:SS[.ffffff]][Z|+HH:MM]'

Keywords are case-insensitive; ``AND OR NOT IN IS NULL TRUE FALSE`` name a column only in
backquotes (``DATE`` and ``TIMESTAMP`` are literals only before a quoted string, so a column
may be called ``date``). Column names are logical names, matched exactly, else ignoring case,
as Delta does. Refused, because each would silently match nothing or everything: an empty
predicate, an unquoted value (``p = eu``, ``d = 2026-11-30``), ``= NULL`` (write ``IS NULL``),
and ``''`` against a partition column (a null partition value, protocol notes §2.11).

*Binding* (:meth:`Predicate.bind`) resolves each column in the table schema (physical names
under column mapping, §5.1) and converts each literal to the column's type once, as a SQL
engine casts a literal to the column it is compared with: ``n = 1.0`` and ``n = '01'`` are
``n = 1`` on an integer column, ``d = '2026-11-31'`` is an error on a date column (no such day).
A string literal must be a valid text of the type (the parser of partition values reads it);
a number is read as an exact decimal. Where the type cannot hold the literal exactly:

* ``=``, ``!=``, ``IN``, ``NOT IN`` are errors (``n = 1.5`` on an integer column would be
  false for every row, ``n != 1.5`` true for every one; SQL engines allow both, silently);
* ``<``, ``<=``, ``>``, ``>=`` keep their exact meaning on the column's values: ``n < 1.5`` is
  ``n <= 1``, ``d >= 1.234`` on ``decimal(10,2)`` is ``d >= 1.24``;
* a value out of the type's range is an error whatever the operator.

Float columns round the literal to the column's precision (``f = 0.1`` finds the float32
``0.1``); a NaN literal is refused. A ``TIMESTAMP`` literal, or a string, without an offset is
UTC (Spark uses its session time zone); a ``DATE`` (or a date string) against a timestamp
column is midnight. Other pairings (a number against a string or date column, a date against
a string column) are errors naming the column's type. Nested fields (``a.b``) are data columns.
Arrays, maps and structs take only ``IS [NOT] NULL``.

The bound predicate is in negation normal form: ``NOT`` is pushed down to the tests
(``NOT a < 1`` is ``a >= 1``, De Morgan for ``AND``/``OR``), which is exact in SQL's
three-valued logic, so each evaluator below handles three kinds of test and two connectives.

*Semantics.* SQL three-valued logic: a test on a null value is unknown, ``AND``/``OR`` are
Kleene's, and a row or file is selected only when the predicate is TRUE. Floats order as Spark
orders them, NaN above every number: ``x > 1`` and ``x != 1`` hold for a NaN, ``x = 1`` and
``x < 1`` do not; ``-0.0`` equals ``0.0``, in ``IN`` lists too. Strings compare by code
point (UTF-8 bytes), as Spark and Arrow do.

*The evaluators*

(a) :meth:`BoundPredicate.matches_partition`: a partition-only predicate on a file's raw
    ``partitionValues`` (parsed by the column's type with ``rlcd.delta.partitions``; JSON null,
    ``""`` and a missing key are null). Exact.
(b) :meth:`BoundPredicate.might_match`: whether some row of a file could satisfy the
    predicate, from its partition values (exact) and its stats (§4), parsed here with exact
    decimals. Conservative: whatever the stats do not say, might match. It only uses facts
    that also hold for wide bounds (``tightBounds=false``) and for files with a DV, whose stats
    may still count deleted rows: ``min <= every live value <= max``; ``nullCount == 0`` means
    no live null; ``nullCount == numRecords`` means every live row is null; ``numRecords == 0``
    means no rows. Writers' imprecision is allowed for: string mins and maxes may be truncated
    (Spark's rule keeps them bounds, §4.4), timestamp maxes are floored to milliseconds (999
    µs are added back, as kernel-rs does), a float column may hold a NaN that its stats leave
    out (so ``>``, ``>=``, ``!=`` never prune it), and decimals of more than 15 digits may have
    gone through a float64 (delta-rs), so their bounds are widened by 2^-50 of their value;
    a double column may have been a float column (type widening) whose bounds were written as
    float32's shortest text (Spark: ``0.234`` for 0.23399999737739563), so its bounds are
    widened by 2^-23 of their value.
    ``!=`` and ``NOT IN`` prune only integer and date columns whose min equals their max.
(c) :meth:`BoundPredicate.row_mask`: a boolean mask over an Arrow batch with the table's
    physical schema, by ``pyarrow.compute`` (no Python loop over rows); unknown is not
    selected. Partition columns missing from the batch take the file's partition values.
"""

from __future__ import annotations

import enum
import json
import math
import operator
import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, InvalidOperation
from functools import reduce
from typing import Any, Final, NamedTuple, TypeAlias, assert_never

import pyarrow as pa
import pyarrow.compute as pc

from rlcd.delta.actions import AddFile
from rlcd.delta.partitions import PartitionValue, parse_partition_value, partition_array
from rlcd.delta.schema import (
    ColumnMappingMode,
    DataType,
    DecimalType,
    PrimitiveType,
    StructType,
    physical_name,
    to_arrow_type,
)
from rlcd.errors import ConfigError

__all__ = (
    "PredicateError",
    "Op",
    "ColumnRef",
    "LiteralKind",
    "Literal",
    "Compare",
    "InList",
    "IsNull",
    "Not",
    "And",
    "Or",
    "Expr",
    "Predicate",
    "Value",
    "BoundColumn",
    "BoundCompare",
    "BoundIn",
    "BoundIsNull",
    "BoundAnd",
    "BoundOr",
    "BoundExpr",
    "BoundPredicate",
)
__pure__ = True


class PredicateError(ConfigError):
    """A predicate that does not parse or does not fit the table. The message quotes the text
    and says what is wrong at which character (``position`` is 0-based; None: the whole)."""

    def __init__(self, text: str, problem: str, position: int | None) -> None:
        if position is None:
            where = ""
        elif position >= len(text):
            where = " (at the end)"
        else:
            where = f" (at character {position + 1})"
        super().__init__(f"predicate {text!r}: {problem}{where}")
        self.text = text
        self.problem = problem
        self.position = position


# --- the parse tree ------------------------------------------------------------------------------


class Op(enum.StrEnum):
    """A comparison operator (``<>`` parses as ``!=``)."""

    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="

    @property
    def negated(self) -> Op:
        """The operator of ``NOT (a op b)``: exact in three-valued logic (null stays null)."""
        return _NEGATED[self]


_NEGATED: Final = {
    Op.EQ: Op.NE,
    Op.NE: Op.EQ,
    Op.LT: Op.GE,
    Op.LE: Op.GT,
    Op.GT: Op.LE,
    Op.GE: Op.LT,
}
_COMPARE: Final[Mapping[Op, Callable[[Any, Any], bool]]] = {
    Op.EQ: operator.eq,
    Op.NE: operator.ne,
    Op.LT: operator.lt,
    Op.LE: operator.le,
    Op.GT: operator.gt,
    Op.GE: operator.ge,
}


@dataclass(frozen=True, slots=True)
class ColumnRef:
    """A column as written: its logical path (``("a", "b")`` for ``a.b``) and where it is."""

    path: tuple[str, ...]
    position: int

    @property
    def name(self) -> str:
        """The dotted path, for messages."""
        return ".".join(self.path)


class LiteralKind(enum.Enum):
    """How a literal was written (which decides what it may be compared with)."""

    STRING = "string"
    NUMBER = "number"
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal as written. ``value``: the text of a string or timestamp, a ``Decimal`` for a
    number, a ``bool``, a ``date``; ``text`` is its spelling, for messages."""

    kind: LiteralKind
    value: str | Decimal | bool | date
    text: str
    position: int


@dataclass(frozen=True, slots=True)
class Compare:
    """``column op literal``."""

    column: ColumnRef
    op: Op
    literal: Literal


@dataclass(frozen=True, slots=True)
class InList:
    """``column [NOT] IN (literals)``."""

    column: ColumnRef
    literals: tuple[Literal, ...]
    negated: bool


@dataclass(frozen=True, slots=True)
class IsNull:
    """``column IS [NOT] NULL``."""

    column: ColumnRef
    negated: bool


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT operand``."""

    operand: Expr


@dataclass(frozen=True, slots=True)
class And:
    """``operand AND operand ...``."""

    operands: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """``operand OR operand ...``."""

    operands: tuple[Expr, ...]


Expr: TypeAlias = Compare | InList | IsNull | Not | And | Or


@dataclass(frozen=True, slots=True)
class Predicate:
    """A parsed predicate, not yet tied to a table. ``text`` is kept for messages and logs."""

    text: str
    expr: Expr

    @classmethod
    def parse(cls, text: str) -> Predicate:
        """Parse the language of the module header.

        Raises:
            PredicateError: naming the text, the problem and where it is.
        """
        return cls(text, _Parser(text).parse())

    def bind(
        self,
        schema: StructType,
        *,
        partition_columns: Sequence[str],
        mode: ColumnMappingMode,
        partition_only: bool = False,
    ) -> BoundPredicate:
        """Resolve the columns and convert the literals to their types (see the module header).

        Args:
            schema: the table schema.
            partition_columns: ``metaData.partitionColumns`` (logical names).
            mode: the table's column mapping mode (physical names of columns).
            partition_only: refuse any column that is not a partition column.

        Raises:
            PredicateError: a column is unknown (or, with ``partition_only``, not a partition
                column: the message names the partition columns), or a literal does not fit
                its column.
            ValueError, KeyError: the schema is inconsistent (a partition column that is not
                in it, a field without its physical name).
        """
        binder = _Binder(self.text, schema, tuple(partition_columns), mode, partition_only)
        return BoundPredicate(self.text, binder.bind(self.expr, negate=False))


# --- parsing -------------------------------------------------------------------------------------

_QUOTED: Final = r"`(?:[^`]|``)+`"
_PART: Final = rf"(?:{_QUOTED}|[A-Za-z_][A-Za-z0-9_]*)"
_WORD: Final = r"[A-Za-z0-9_.:+\-]"  # what a user may run together into one unquoted value
_TOKEN_RE: Final = re.compile(
    r"\s*(?:"
    r"(?P<string>'(?:[^']|'')*')"
    rf"|(?P<column>{_PART}(?:\.{_PART})*)(?!{_WORD}|`)"
    rf"|(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(?!{_WORD}|`)"
    r"|(?P<op><>|!=|<=|>=|[=<>])"
    r"|(?P<punct>[(),])"
    rf"|(?P<bare>{_WORD}+)"
    r"|(?P<end>\Z)"
    r")"
)
_PART_RE: Final = re.compile(_PART)
_KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"})
_TYPED_LITERALS: Final = frozenset({"DATE", "TIMESTAMP"})
_MAX_DEPTH: Final = 64


class _Token(NamedTuple):
    """``kind``: string, column, keyword, number, op, punct, bare or end. ``text``: unquoted
    for a string, upper case for a keyword, as written otherwise; ``path``: a column's parts."""

    kind: str
    text: str
    position: int
    path: tuple[str, ...] = ()


class _Parser:
    """Recursive descent over one predicate text (grammar in the module header)."""

    def __init__(self, text: str) -> None:
        self.text = text
        if not text.strip():
            raise PredicateError(text, "the predicate is empty", None)
        self.tokens = list(self._tokenize())
        self.index = 0
        self.depth = 0

    def _tokenize(self) -> Iterator[_Token]:
        position = 0
        while True:
            match = _TOKEN_RE.match(self.text, position)
            if match is None:
                at = len(self.text) - len(self.text[position:].lstrip())
                raise self._error(_unexpected(self.text[at]), at)
            kind = match.lastgroup or "end"
            raw, start = match[kind], match.start(kind)
            if kind == "end":
                yield _Token("end", "", start)
                return
            if kind == "string":
                yield _Token(kind, raw[1:-1].replace("''", "'"), start)
            elif kind == "column":
                parts = tuple(_unquote(p) for p in _PART_RE.findall(raw))
                is_keyword = len(parts) == 1 and raw.upper() in _KEYWORDS
                yield (
                    _Token("keyword", raw.upper(), start)
                    if is_keyword
                    else _Token(kind, raw, start, parts)
                )
            else:
                yield _Token(kind, "!=" if raw == "<>" else raw, start)
            position = match.end()

    def _error(self, problem: str, position: int) -> PredicateError:
        return PredicateError(self.text, problem, position)

    @property
    def _next(self) -> _Token:
        return self.tokens[self.index]

    def _take(self) -> _Token:
        token = self._next
        if token.kind != "end":
            self.index += 1
        return token

    def _accept(self, kind: str, text: str) -> bool:
        if self._next.kind == kind and self._next.text == text:
            self.index += 1
            return True
        return False

    def _expect(self, kind: str, text: str) -> None:
        if not self._accept(kind, text):
            raise self._error(
                f"expected {text}, found {_describe(self._next)}", self._next.position
            )

    def parse(self) -> Expr:
        expr = self._or()
        if self._next.kind != "end":
            token = self._next
            raise self._error(
                f"expected AND, OR or the end, found {_describe(token)}", token.position
            )
        return expr

    def _or(self) -> Expr:
        operands = [self._and()]
        while self._accept("keyword", "OR"):
            operands.append(self._and())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def _and(self) -> Expr:
        operands = [self._not()]
        while self._accept("keyword", "AND"):
            operands.append(self._not())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def _not(self) -> Expr:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self._error(f"nested more than {_MAX_DEPTH} deep", self._next.position)
        try:
            if self._accept("keyword", "NOT"):
                return Not(self._not())
            if self._accept("punct", "("):
                expr = self._or()
                self._expect("punct", ")")
                return expr
            return self._test()
        finally:
            self.depth -= 1

    def _test(self) -> Expr:
        token = self._take()
        if token.kind != "column":
            raise self._error(f"expected a column name, found {_describe(token)}", token.position)
        column = ColumnRef(token.path, token.position)
        if self._next.kind == "op":
            op = Op(self._take().text)
            return Compare(column, op, self._literal())
        negated = self._accept("keyword", "NOT")
        if self._accept("keyword", "IN"):
            self._expect("punct", "(")
            literals = [self._literal()]
            while self._accept("punct", ","):
                literals.append(self._literal())
            self._expect("punct", ")")
            return InList(column, tuple(literals), negated)
        if negated:
            raise self._error(f"expected IN, found {_describe(self._next)}", self._next.position)
        if self._accept("keyword", "IS"):
            negated = self._accept("keyword", "NOT")
            self._expect("keyword", "NULL")
            return IsNull(column, negated)
        raise self._error(
            f"expected a comparison, [NOT] IN or IS [NOT] NULL after {column.name!r}, "
            f"found {_describe(self._next)}",
            self._next.position,
        )

    def _literal(self) -> Literal:
        token = self._take()
        at = token.position
        if token.kind == "string":
            return Literal(LiteralKind.STRING, token.text, _quote(token.text), at)
        if token.kind == "number":
            return Literal(LiteralKind.NUMBER, Decimal(token.text), token.text, at)
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            return Literal(LiteralKind.BOOLEAN, token.text == "TRUE", token.text, at)
        if token.kind == "keyword" and token.text == "NULL":
            raise self._error("NULL is not a value: write IS NULL or IS NOT NULL", at)
        typed = token.text.upper()
        if token.kind == "column" and typed in _TYPED_LITERALS and self._next.kind == "string":
            return self._typed(typed, self._take(), at)
        if token.kind in ("column", "bare", "keyword"):
            raise self._error(
                f"{token.text} is not a value: put a string in single quotes "
                f"({_quote(token.text)})",
                at,
            )
        raise self._error(f"expected a value, found {_describe(token)}", at)

    def _typed(self, kind: str, string: _Token, at: int) -> Literal:
        spelled = f"{kind} {_quote(string.text)}"
        try:
            if kind == "DATE":
                value = parse_partition_value(string.text, PrimitiveType("date"))
                assert isinstance(value, date)
                return Literal(LiteralKind.DATE, value, spelled, at)
            text = _midnight(string.text)
            parse_partition_value(text, PrimitiveType("timestamp"))  # validate once, here
            return Literal(LiteralKind.TIMESTAMP, text, spelled, at)
        except ValueError as exc:
            raise self._error(
                f"{spelled} is not a valid {kind.lower()}: {_reason(exc)}", at
            ) from None


def _unquote(part: str) -> str:
    return part[1:-1].replace("``", "`") if part.startswith("`") else part


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _unexpected(char: str) -> str:
    if char == "'":
        return "a string is not closed (a quote inside one is written '')"
    if char == "`":
        return "a backquoted name is empty or not closed"
    return f"unexpected {char!r}"


def _describe(token: _Token) -> str:
    return "nothing" if token.kind == "end" else repr(token.text)


_DATE_ONLY_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _midnight(text: str) -> str:
    """A timestamp text; a bare date is its midnight."""
    return f"{text} 00:00:00" if _DATE_ONLY_RE.fullmatch(text) else text


def _reason(exc: ValueError) -> str:
    """The innermost reason of a partition-value parse error (its text after the last ': ')."""
    return str(exc).rsplit(": ", 1)[-1]


# --- binding -------------------------------------------------------------------------------------

Value: TypeAlias = bool | int | float | Decimal | str | bytes | date | datetime


@dataclass(frozen=True, slots=True)
class BoundColumn:
    """A resolved column: logical ``name`` (dotted, for messages), ``physical`` path in files,
    stats and ``partitionValues``, its type, and whether it is a partition column."""

    name: str
    physical: tuple[str, ...]
    dtype: DataType
    partition: bool

    @property
    def is_float(self) -> bool:
        """Float or double: NaN is a value (module header, *Semantics*)."""
        return isinstance(self.dtype, PrimitiveType) and self.dtype.name in ("float", "double")


@dataclass(frozen=True, slots=True)
class BoundCompare:
    """``column op value``; ``value`` has the column's Python type (as partition values parse)."""

    column: BoundColumn
    op: Op
    value: Value


@dataclass(frozen=True, slots=True)
class BoundIn:
    """``column [NOT] IN values``."""

    column: BoundColumn
    values: frozenset[Value]
    negated: bool


@dataclass(frozen=True, slots=True)
class BoundIsNull:
    """``column IS [NOT] NULL``."""

    column: BoundColumn
    negated: bool


@dataclass(frozen=True, slots=True)
class BoundAnd:
    """Kleene's AND of its operands."""

    operands: tuple[BoundExpr, ...]


@dataclass(frozen=True, slots=True)
class BoundOr:
    """Kleene's OR of its operands."""

    operands: tuple[BoundExpr, ...]


BoundExpr: TypeAlias = BoundCompare | BoundIn | BoundIsNull | BoundAnd | BoundOr
_Leaf: TypeAlias = BoundCompare | BoundIn | BoundIsNull

_INT_BITS: Final = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_RANGE_OPS: Final = frozenset({Op.LT, Op.LE, Op.GT, Op.GE})
_CONTEXT: Final = Context(prec=200)
_MAX_DIGITS: Final = 38
_NUMBER_TYPES: Final = frozenset({*_INT_BITS, "float", "double"})
_COMPARABLE: Final = frozenset(
    {*_NUMBER_TYPES, "boolean", "string", "binary", "date", "timestamp", "timestamp_ntz"}
)


def _type_name(dtype: DataType) -> str:
    if isinstance(dtype, PrimitiveType):
        return dtype.name
    if isinstance(dtype, DecimalType):
        return f"decimal({dtype.precision},{dtype.scale})"
    return {"ArrayType": "array", "MapType": "map", "StructType": "struct"}[type(dtype).__name__]


class _Binder:
    """Binds one predicate's parse tree to one schema (module header, *Binding*)."""

    def __init__(
        self,
        text: str,
        schema: StructType,
        partition_columns: tuple[str, ...],
        mode: ColumnMappingMode,
        partition_only: bool,
    ) -> None:
        self.text = text
        self.schema = schema
        self.partition_columns = partition_columns
        self.mode = mode
        self.partition_only = partition_only

    def _error(self, problem: str, position: int) -> PredicateError:
        return PredicateError(self.text, problem, position)

    def bind(self, expr: Expr, *, negate: bool) -> BoundExpr:
        """``expr`` (or ``NOT expr``), bound and in negation normal form."""
        match expr:
            case Not(operand=operand):
                return self.bind(operand, negate=not negate)
            case And(operands=operands) | Or(operands=operands):
                bound = tuple(self.bind(o, negate=negate) for o in operands)
                return BoundAnd(bound) if isinstance(expr, And) != negate else BoundOr(bound)
            case IsNull(column=ref, negated=negated):
                return BoundIsNull(self.column(ref), negated != negate)
            case InList(column=ref, literals=literals, negated=negated):
                column = self.column(ref)
                values = frozenset(self.value(lit, column, Op.EQ)[1] for lit in literals)
                return BoundIn(column, values, negated != negate)
            case Compare(column=ref, op=op, literal=lit):
                column = self.column(ref)
                op, value = self.value(lit, column, op.negated if negate else op)
                return BoundCompare(column, op, value)

    def column(self, ref: ColumnRef) -> BoundColumn:
        partition = self._partition_column(ref)
        if partition is not None:
            f = self.schema.field(partition)
            return BoundColumn(f.name, (physical_name(f, self.mode),), f.type, True)
        if self.partition_only:
            columns = ", ".join(self.partition_columns)
            known = f"partition columns: {columns}" if columns else "the table has none"
            raise self._error(f"{ref.name!r} is not a partition column ({known})", ref.position)
        struct: DataType = self.schema
        names: list[str] = []
        physical: list[str] = []
        for name in ref.path:
            if not isinstance(struct, StructType):
                raise self._error(
                    f"column {'.'.join(names)!r} is {_type_name(struct)}, not a struct: it "
                    f"has no field {name!r}",
                    ref.position,
                )
            try:
                f = struct.field(name)
            except KeyError:
                where = f"{'.'.join(names)!r} has no field" if names else "no column"
                raise self._error(
                    f"{where} {name!r} (there are: {', '.join(struct.names)})", ref.position
                ) from None
            names.append(f.name)
            physical.append(physical_name(f, self.mode))
            struct = f.type
        return BoundColumn(".".join(names), tuple(physical), struct, False)

    def _partition_column(self, ref: ColumnRef) -> str | None:
        if len(ref.path) != 1:
            return None
        name = ref.path[0]
        if name in self.partition_columns:
            return name
        folded = [c for c in self.partition_columns if c.casefold() == name.casefold()]
        return folded[0] if folded else None

    def value(self, lit: Literal, column: BoundColumn, op: Op) -> tuple[Op, Value]:
        """The literal in ``column``'s type, and the operator that keeps the test's meaning."""
        dtype, kind = column.dtype, _type_name(column.dtype)
        if not (isinstance(dtype, DecimalType) or kind in _COMPARABLE):
            raise self._error(
                f"column {column.name!r} has type {kind}: it can only be tested with IS [NOT] NULL",
                lit.position,
            )
        if lit.kind is LiteralKind.NUMBER and (isinstance(dtype, DecimalType) or kind in _INT_BITS):
            assert isinstance(lit.value, Decimal)
            return self._exact_number(lit, lit.value, column, op)
        if lit.kind is LiteralKind.STRING and lit.value == "":
            if column.partition:
                raise self._error(
                    f"'' is how a null partition value is written: use {column.name} IS NULL",
                    lit.position,
                )
            if kind not in ("string", "binary"):
                raise self._error(
                    f"'' is not a valid {kind} (column {column.name!r})", lit.position
                )
        value = self._converted(lit, column)
        if isinstance(value, float) and math.isnan(value):
            raise self._error("NaN cannot be compared with (no row equals it in SQL)", lit.position)
        return op, value

    def _converted(self, lit: Literal, column: BoundColumn) -> Value:
        dtype, kind = column.dtype, _type_name(column.dtype)

        def parsed(text: str) -> Value:
            try:
                value = parse_partition_value(text, dtype)
            except ValueError as exc:
                raise self._error(
                    f"{lit.text} is not a valid {kind}: {_reason(exc)} (column {column.name!r})",
                    lit.position,
                ) from None
            assert value is not None  # only '' parses to null, and the caller refused it
            return value

        match lit.kind, kind:
            case LiteralKind.STRING, "string":
                return lit.value
            case LiteralKind.STRING, "binary":
                assert isinstance(lit.value, str)
                return lit.value.encode("utf-8")
            case LiteralKind.STRING, "timestamp" | "timestamp_ntz":
                assert isinstance(lit.value, str)
                return parsed(_midnight(lit.value))
            case LiteralKind.STRING, _:
                assert isinstance(lit.value, str)
                return parsed(lit.value)
            case LiteralKind.NUMBER, "float" | "double":
                return self._float(lit, column)
            case LiteralKind.BOOLEAN, "boolean":
                return lit.value
            case LiteralKind.DATE, "date":
                return lit.value
            case LiteralKind.DATE, "timestamp" | "timestamp_ntz":
                assert isinstance(lit.value, date)
                return parsed(f"{lit.value.isoformat()} 00:00:00")
            case LiteralKind.TIMESTAMP, "timestamp" | "timestamp_ntz":
                assert isinstance(lit.value, str)
                return parsed(lit.value)
        hint = f": put a string in single quotes ('{lit.text}')" if kind == "string" else ""
        raise self._error(
            f"{lit.text} is a {lit.kind.value}, and column {column.name!r} is {kind}{hint}",
            lit.position,
        )

    def _float(self, lit: Literal, column: BoundColumn) -> float:
        value = float(lit.value)  # type: ignore[arg-type]
        single = _type_name(column.dtype) == "float"
        try:
            rounded = _float32(value) if single else value
        except OverflowError:
            rounded = math.inf
        if math.isinf(rounded):
            raise self._error(
                f"{lit.text} is out of range for column {column.name!r} "
                f"({_type_name(column.dtype)})",
                lit.position,
            )
        return rounded

    def _exact_number(
        self, lit: Literal, number: Decimal, column: BoundColumn, op: Op
    ) -> tuple[Op, Value]:
        """An integer or decimal column: the number on the type's grid, or the equivalent bound
        for a range comparison (module header)."""
        dtype = column.dtype
        kind = _type_name(dtype)
        if number.adjusted() > _MAX_DIGITS:  # beyond any long or decimal(38)
            raise self._error(
                f"{lit.text} is out of range for column {column.name!r} ({kind})", lit.position
            )
        scale = dtype.scale if isinstance(dtype, DecimalType) else 0
        quantum = Decimal(1).scaleb(-scale)
        try:
            on_grid = number.quantize(quantum, context=_CONTEXT)
        except InvalidOperation:
            on_grid = None
        if on_grid is None or on_grid != number:
            if op not in _RANGE_OPS:
                grid = "an integer" if not scale else f"a number with at most {scale} decimals"
                raise self._error(
                    f"{lit.text} is not {grid}, so {column.name} {op} {lit.text} would be "
                    f"{'true' if op is Op.NE else 'false'} for every row "
                    f"(column {column.name!r} is {kind})",
                    lit.position,
                )
            rounding = ROUND_FLOOR if op in (Op.LT, Op.LE) else ROUND_CEILING
            on_grid = number.quantize(quantum, rounding=rounding, context=_CONTEXT)
            op = Op.LE if op in (Op.LT, Op.LE) else Op.GE
        if isinstance(dtype, DecimalType):
            fits = on_grid == 0 or on_grid.adjusted() < dtype.precision - dtype.scale
            value: Value = on_grid
        else:
            bits = _INT_BITS[kind]
            value = int(on_grid)
            fits = -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
        if not fits:
            raise self._error(
                f"{lit.text} is out of range for column {column.name!r} ({kind})", lit.position
            )
        return op, value


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (OverflowError past its range)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


# --- the bound predicate and its evaluators -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BoundPredicate:
    """A predicate bound to one table's schema, in negation normal form (module header)."""

    text: str
    expr: BoundExpr

    @property
    def columns(self) -> tuple[BoundColumn, ...]:
        """Every distinct column the predicate tests, in text order."""
        return tuple(dict.fromkeys(leaf.column for leaf in _leaves(self.expr)))

    @property
    def partition_only(self) -> bool:
        """Whether only partition columns are tested: then a file matches as a whole or not
        at all, and ``matches_partition`` decides it."""
        return all(c.partition for c in self.columns)

    # (a) partition values

    def partition_truth(self, partition_values: Mapping[str, str | None]) -> bool | None:
        """The predicate's SQL value (None: unknown) for a file's raw ``partitionValues``.

        Raises:
            ValueError: the predicate tests a data column, or a partition value is not a
                valid value of its column's type (the message names both).
        """
        return _truth(self.expr, lambda leaf: _leaf_truth(leaf, partition_values))

    def matches_partition(self, partition_values: Mapping[str, str | None]) -> bool:
        """Whether a file's partition values make the predicate TRUE (see ``partition_truth``)."""
        return self.partition_truth(partition_values) is True

    # (b) stats

    def might_match(self, add: AddFile) -> bool:
        """False only when no row of ``add`` can make the predicate TRUE: by its partition
        values, or its stats (module header; missing or unreadable stats say nothing).

        Raises:
            ValueError: a partition value is not a valid value of its column's type.
        """
        stats = _FileStats.parse(add.stats)

        def leaf_might(leaf: _Leaf) -> bool:
            if leaf.column.partition:
                return _leaf_truth(leaf, add.partition_values) is True
            return stats.might(leaf)

        return _might(self.expr, leaf_might)

    # (c) rows

    def row_mask(self, batch: Any, partition_values: Mapping[str, str | None] | None = None) -> Any:
        """Which rows of ``batch`` make the predicate TRUE, as a null-free boolean array.

        Args:
            batch: a ``pa.RecordBatch`` or ``pa.Table`` with the table's physical schema (data
                files' column names); gives a ``pa.BooleanArray`` or a ``pa.ChunkedArray``.
            partition_values: the file's raw ``partitionValues``, for partition columns that
                are not columns of ``batch``.

        Raises:
            ValueError: a column the predicate tests is neither in ``batch`` nor a partition
                column with ``partition_values`` given, or a partition value is not valid.
        """
        arrays: dict[tuple[str, ...], Any] = {}

        def column(c: BoundColumn) -> Any:
            if c.physical not in arrays:
                arrays[c.physical] = _batch_column(batch, c, partition_values)
            return arrays[c.physical]

        return pc.fill_null(_mask(self.expr, column), False)


def _leaves(expr: BoundExpr) -> Iterator[_Leaf]:
    match expr:
        case BoundAnd(operands=operands) | BoundOr(operands=operands):
            for operand in operands:
                yield from _leaves(operand)
        case _:
            yield expr


def _truth(expr: BoundExpr, leaf_truth: Callable[[_Leaf], bool | None]) -> bool | None:
    """Kleene's AND and OR over the leaves' values."""
    match expr:
        case BoundAnd(operands=operands):
            values = [_truth(o, leaf_truth) for o in operands]
            return False if False in values else None if None in values else True
        case BoundOr(operands=operands):
            values = [_truth(o, leaf_truth) for o in operands]
            return True if True in values else None if None in values else False
        case _:
            return leaf_truth(expr)


def _might(expr: BoundExpr, leaf_might: Callable[[_Leaf], bool]) -> bool:
    """Whether a row might make ``expr`` TRUE: every operand of an AND must, one of an OR."""
    match expr:
        case BoundAnd(operands=operands):
            return all(_might(o, leaf_might) for o in operands)
        case BoundOr(operands=operands):
            return any(_might(o, leaf_might) for o in operands)
        case _:
            return leaf_might(expr)


def _partition_value(column: BoundColumn, partition_values: Mapping[str, str | None]) -> Any:
    if not column.partition:
        raise ValueError(f"column {column.name!r} is not a partition column")
    raw = partition_values.get(column.physical[0])
    try:
        return parse_partition_value(raw, column.dtype)
    except ValueError as exc:
        raise ValueError(f"partition column {column.name!r}: {exc}") from exc


def _leaf_truth(leaf: _Leaf, partition_values: Mapping[str, str | None]) -> bool | None:
    value: PartitionValue = _partition_value(leaf.column, partition_values)
    if isinstance(leaf, BoundIsNull):
        return (value is None) != leaf.negated
    if value is None:
        return None
    if isinstance(leaf, BoundIn):
        return (value in leaf.values) != leaf.negated  # NaN is in no list
    if isinstance(value, float) and math.isnan(value):
        return leaf.op in (Op.NE, Op.GT, Op.GE)  # Spark: NaN is above every number
    return _COMPARE[leaf.op](value, leaf.value)


# (c): Arrow

_ARROW_COMPARE: Final[Mapping[Op, Callable[[Any, Any], Any]]] = {
    Op.EQ: pc.equal,
    Op.NE: pc.not_equal,
    Op.LT: pc.less,
    Op.LE: pc.less_equal,
    Op.GT: pc.greater,
    Op.GE: pc.greater_equal,
}


def _batch_column(
    batch: Any, column: BoundColumn, partition_values: Mapping[str, str | None] | None
) -> Any:
    top = batch.schema.get_field_index(column.physical[0])
    if top < 0:
        if column.partition and partition_values is not None:
            raw = partition_values.get(column.physical[0])
            try:
                return partition_array(raw, column.dtype, batch.num_rows)
            except ValueError as exc:
                raise ValueError(f"partition column {column.name!r}: {exc}") from exc
        given = " and no partition values were given" if column.partition else ""
        raise ValueError(f"batch has no column {column.physical[0]!r}{given}")
    array = batch.column(top)
    for depth, name in enumerate(column.physical[1:], 1):
        index = array.type.get_field_index(name) if pa.types.is_struct(array.type) else -1
        if index < 0:
            raise ValueError(f"batch has no column {'.'.join(column.physical[: depth + 1])!r}")
        array = pc.struct_field(array, [index])  # a null parent makes the field null
    return array


def _mask(expr: BoundExpr, column: Callable[[BoundColumn], Any]) -> Any:
    match expr:
        case BoundAnd(operands=operands):
            return reduce(pc.and_kleene, (_mask(o, column) for o in operands))
        case BoundOr(operands=operands):
            return reduce(pc.or_kleene, (_mask(o, column) for o in operands))
        case BoundIsNull(column=c, negated=negated):
            return pc.is_valid(column(c)) if negated else pc.is_null(column(c))
        case BoundIn(column=c, values=values, negated=negated):
            array = column(c)
            value_set = pa.array(list(values), to_arrow_type(c.dtype))
            if c.is_float:  # is_in tells -0.0 from 0.0 by their bits; x + 0.0 makes both 0.0
                array, value_set = pc.add(array, 0.0), pc.add(value_set, 0.0)
            found = pc.is_in(array, value_set=value_set)
            found = pc.invert(found) if negated else found
            return pc.if_else(pc.is_valid(array), found, pa.scalar(None, pa.bool_()))
        case BoundCompare(column=c, op=op, value=value):
            array = column(c)
            result = _ARROW_COMPARE[op](array, pa.scalar(value, to_arrow_type(c.dtype)))
            if c.is_float and op in (Op.GT, Op.GE):
                result = pc.or_kleene(result, pc.is_nan(array))  # NaN is above every number
            return result
        case _:
            assert_never(expr)


# (b): stats

_TIMESTAMP_FLOOR: Final = timedelta(microseconds=999)  # §4.5: bounds are floored to ms
_F64_EXACT_DIGITS: Final = 15  # decimals of up to 15 digits survive a float64 exactly
_F64_SLACK: Final = Decimal(2) ** -50  # > one float64 ulp, relative
_F32_SLACK: Final = 2.0**-23  # > half a float32 ulp, relative: its shortest text's error
_F32_TINIEST: Final = 2.0**-149  # ... and a float32 subnormal's
_EXACT_BOUNDS: Final = frozenset({*_INT_BITS, "date"})
_LONG_DIGITS: Final = 19


@dataclass(frozen=True, slots=True)
class _FileStats:
    """One file's stats document (§4.1), numbers exact; empty when absent or unreadable."""

    num_records: int | None
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]
    null_count: Mapping[str, Any]

    @classmethod
    def parse(cls, text: str | None) -> _FileStats:
        doc: Any = None
        if text:
            try:
                doc = json.loads(text, parse_float=Decimal, parse_constant=lambda _: None)
            except ValueError:
                doc = None
        if not isinstance(doc, dict):
            doc = {}

        def tree(key: str) -> Mapping[str, Any]:
            value = doc.get(key)
            return value if isinstance(value, dict) else {}

        n = doc.get("numRecords")
        count = n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
        return cls(count, tree("minValues"), tree("maxValues"), tree("nullCount"))

    def might(self, leaf: _Leaf) -> bool:
        """Whether some row of the file might make ``leaf`` TRUE (module header, (b))."""
        if self.num_records == 0:
            return False
        column = leaf.column
        nulls = _count(_lookup(self.null_count, column.physical))
        all_null = nulls is not None and nulls == self.num_records
        if isinstance(leaf, BoundIsNull):
            return not all_null if leaf.negated else nulls != 0
        if all_null:
            return False  # a comparison with null is never TRUE
        low = _bound(_lookup(self.min_values, column.physical), column, upper=False)
        high = _bound(_lookup(self.max_values, column.physical), column, upper=True)
        exact = _type_name(column.dtype) in _EXACT_BOUNDS and low is not None and low == high
        if isinstance(leaf, BoundIn):
            if leaf.negated:
                return not (exact and low in leaf.values)
            return any(_in_range(v, low, high) for v in leaf.values)
        op, value = leaf.op, leaf.value
        if column.is_float and op in (Op.NE, Op.GT, Op.GE):
            return True  # a NaN the stats leave out makes these TRUE
        if op is Op.NE:
            return not (exact and low == value)
        if op is Op.EQ:
            return _in_range(value, low, high)
        if op in (Op.LT, Op.LE):
            return low is None or _COMPARE[op](low, value)
        return high is None or _COMPARE[op](high, value)


def _in_range(value: Any, low: Any, high: Any) -> bool:
    return (low is None or low <= value) and (high is None or value <= high)


def _lookup(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = tree
    for name in path:
        if not isinstance(node, dict):
            return None
        node = node.get(name)
    return node


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bound(raw: Any, column: BoundColumn, *, upper: bool) -> Any:
    """A stats min (or max, ``upper``) as a value comparable with the column's literals, widened
    where writers are imprecise; None when it is absent or not understood."""
    dtype, kind = column.dtype, _type_name(column.dtype)
    number = raw if isinstance(raw, int | Decimal) and not isinstance(raw, bool) else None
    if isinstance(dtype, DecimalType):
        if number is None:
            return None
        value = Decimal(number)
        if dtype.precision > _F64_EXACT_DIGITS:
            slack = _CONTEXT.multiply(abs(value), _F64_SLACK)
            value = _CONTEXT.add(value, slack) if upper else _CONTEXT.subtract(value, slack)
        return value
    if kind in _INT_BITS:
        if isinstance(number, Decimal) and (
            number.adjusted() > _LONG_DIGITS or number != number.to_integral_value()
        ):
            return None  # not a long; and int() of 1e999999 would build a million digits
        return None if number is None else int(number)
    if kind in ("float", "double"):
        if number is None:
            return None
        try:
            value_f = _float32(float(number)) if kind == "float" else float(number)
        except OverflowError:
            return None
        if kind == "double":  # it may have been a float column: float32's shortest text
            widening = max(abs(value_f) * _F32_SLACK, _F32_TINIEST)
            value_f = value_f + widening if upper else value_f - widening
        return value_f if math.isfinite(value_f) else None
    if kind in ("string", "date", "timestamp", "timestamp_ntz") and isinstance(raw, str):
        if kind == "string":
            return raw
        try:
            parsed = parse_partition_value(raw, dtype)
        except ValueError:
            return None
        if upper and isinstance(parsed, datetime):
            try:
                return parsed + _TIMESTAMP_FLOOR
            except OverflowError:
                return None
        return parsed
    return None
