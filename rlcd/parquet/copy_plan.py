"""Which row groups of a bin's sources are copied byte for byte and which are re-encoded
(pure: footers in, a plan out).

Theory of operation (issue 39, "the copy path"). Re-encoding a well-formed row group costs a
decode and an encode and gives back the same rows; copying its column chunks as they are and
moving the offsets in its footer entry gives a file every reader reads the same. That holds
only for a row group whose bytes mean, inside the output, what they meant in their source, so
a row group is copied only when all of these hold, and is otherwise re-encoded with the first
:class:`Reason` that fails:

- the caller says the source has no deletion vector (its dead rows must go);
- its footer is plaintext Parquet: no encryption algorithm or signing key, no column crypto;
- every footer field is one ``_format.STRUCTS`` knows (a field added to parquet.thrift later
  could hold an offset this code would not move): an unknown field at the file's level takes
  the whole source, inside a row group only that row group;
- the source's Parquet schema equals the output's: every field of every schema element
  (types, logical and converted types, repetition, field ids, names; the root's name and
  repetition aside: pyarrow marks the root REQUIRED, parquet-rs leaves it unset, and no
  reader reads either)
  and the column orders. Copied statistics are read under the output's column orders and
  ``created_by``; a writer that records column orders postdates the statistics bugs readers
  work around by writer version (PARQUET-251, PARQUET-1025), so requiring equal orders also
  keeps those files out;
- its column chunks lie in the file, one after another (``_format.row_group_span``);
- it holds at least ``min_copy_row_group`` compressed bytes: a streaming writer's small row
  groups are merged into full ones by re-encoding instead;
- when the caller asks for one ``codec`` (to recompress), every column chunk has it.
  Otherwise a copied row group keeps its codecs: Parquet's codec is per column chunk.

A schema that differs from the output's only in how some decimal columns are stored (fixed-
length bytes or INT32/INT64: the same logical type, precision, scale, repetition, field id and
name) still lets a row group be copied *with patches* (:attr:`Copy.patched`): the chunks of
those columns are decoded and encoded again (:attr:`Reason.STORAGE`), the others copied. Only
top-level columns the caller names (``patchable``: say, not partition columns, not under
column mapping by id) qualify; anything else in the schema that differs re-encodes the row
group whole, as above.

Row groups to re-encode that follow each other are grouped into one :class:`Reencode` step,
which the writer turns into full row groups; every source's rows stay one run in write order,
since the steps follow the sources' order and each source's row groups in theirs.

The output's writer can write more than one Parquet schema for the same table (decimals as
integers or as fixed-length bytes, partition columns in the file or not): :func:`choose_plan`
plans the bin under each and keeps the one that copies the most bytes, so the output follows
what most of its sources hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Final, TypeAlias

from rlcd.parquet._format import (
    CHUNK_ENCRYPTION,
    CHUNK_META,
    FILE_COLUMN_ORDERS,
    FILE_ENCRYPTION,
    FILE_ROW_GROUPS,
    GROUP_COLUMNS,
    GROUP_COMPRESSED_SIZE,
    GROUP_NUM_ROWS,
    META_CODEC,
    META_STATISTICS,
    SCHEMA_NAME,
    SCHEMA_REPETITION,
    STATS_EXACT,
    STATS_VALUES,
    chunk_spans,
    integer_field,
    row_group_span,
    spans,
    unknown_fields,
)
from rlcd.parquet._thrift import FALSE, read_binary, read_integer, struct_list
from rlcd.parquet.footer import MAGIC

__all__ = (
    "Reason",
    "Source",
    "OutputSchema",
    "Choice",
    "Copy",
    "Run",
    "Reencode",
    "Step",
    "CopyPlan",
    "metadata",
    "plan_copy",
    "choose_plan",
    "inexact_statistics",
)
__pure__ = True


_ROOT_IGNORED = frozenset((SCHEMA_NAME, SCHEMA_REPETITION))
"""The fields of the schema's root that the equality of schemas leaves out."""


class Reason(StrEnum):
    """Why a row group is re-encoded (stable codes, for logs and reports)."""

    DELETION_VECTOR = "deletion_vector"
    ENCRYPTED = "encrypted"
    UNKNOWN_FIELD = "unknown_field"
    SCHEMA = "schema_differs"
    LAYOUT = "layout"
    SMALL = "small_row_group"
    CODEC = "codec_differs"
    STORAGE = "storage_differs"
    """Only some columns' chunks are re-encoded (:attr:`Copy.patched`); the row group is copied."""


@dataclass(frozen=True, slots=True)
class Source:
    """One source file of the bin: its footer as ``footer.footer_span`` measures it (the
    metadata, its length and the magic) and whether a deletion vector applies to it."""

    footer: bytes
    has_deletion_vector: bool


def metadata(footer: bytes) -> bytes:
    """The thrift ``FileMetaData`` of a footer span (its metadata, length and magic).

    Raises:
        ValueError: the span does not end in a length and the magic that fit it.
    """
    if len(footer) < 8 or footer[-4:] != MAGIC:
        raise ValueError("a footer does not end in the Parquet magic PAR1")
    length = int.from_bytes(footer[-8:-4], "little")
    if length != len(footer) - 8:
        raise ValueError(f"a footer of {len(footer) - 8} bytes says it holds {length}")
    return footer[:-8]


_Element: TypeAlias = tuple[tuple[int, int, bytes], ...]


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """A Parquet schema as equality sees it: each schema element's fields (id, compact type,
    value bytes) by id, the root's name and repetition left out, and the column orders' bytes
    (None when absent)."""

    elements: tuple[_Element, ...]
    column_orders: bytes | None

    def leaves(self) -> tuple[_Element, ...]:
        """The schema's leaf elements (its columns), in order."""
        return tuple(e for e in self.elements[1:] if _children(e) is None)

    @classmethod
    def of(cls, footer: bytes) -> OutputSchema:
        """The schema of a footer span, e.g. of an empty file written by the output's writer.

        Raises:
            ValueError: the footer does not parse.
        """
        return cls.of_metadata(metadata(footer))

    @classmethod
    def of_metadata(cls, meta: bytes) -> OutputSchema:
        """The schema of a thrift ``FileMetaData``.

        Raises:
            ValueError: it does not parse or has no schema.
        """
        fields = spans(meta)
        if 2 not in fields:
            raise ValueError("a footer has no schema")
        elements = tuple(
            tuple(
                sorted(
                    (field, kind, element[value:end])
                    for field, kind, _, value, end in spans(element).values()
                    if index or field not in _ROOT_IGNORED
                )
            )
            for index, element in enumerate(struct_list(meta, fields[2][3])[0])
        )
        orders = fields.get(FILE_COLUMN_ORDERS)
        return cls(elements, None if orders is None else meta[orders[3] : orders[4]])


@dataclass(frozen=True, slots=True)
class Choice:
    """The decision for row group ``row_group`` of source ``source``: copied when ``reason``
    is None; ``detail`` says more about the reason (the unknown field, the layout). A copied
    row group's ``patched`` columns (``patched_size`` bytes of its ``size``) are re-encoded
    (:attr:`Reason.STORAGE`)."""

    source: int
    row_group: int
    rows: int
    size: int
    reason: Reason | None
    detail: str = ""
    patched: tuple[int, ...] = ()
    patched_size: int = 0

    @property
    def copy(self) -> bool:
        """Whether the row group is copied as it is."""
        return self.reason is None


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy the bytes ``[start, stop)`` of source ``source``: its row group ``row_group``,
    whose footer entry is the thrift ``RowGroup`` struct ``group``; but for the chunks of the
    leaf columns ``patched`` (by index, in order), which are decoded and encoded again."""

    source: int
    row_group: int
    rows: int
    start: int
    stop: int
    group: bytes
    patched: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Run:
    """Row groups ``[first, stop)`` of source ``source``, holding ``rows`` rows."""

    source: int
    first: int
    stop: int
    rows: int


@dataclass(frozen=True, slots=True)
class Reencode:
    """Re-encode the rows of ``runs``, in order, into full row groups of their own."""

    runs: tuple[Run, ...]

    @property
    def rows(self) -> int:
        """The rows of the step's sources (before any deletion vector applies)."""
        return sum(run.rows for run in self.runs)


Step: TypeAlias = Copy | Reencode


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """Every row group's :class:`Choice`, in write order, and the steps that write the output
    in that order; no two :class:`Reencode` steps follow each other (they would be one)."""

    choices: tuple[Choice, ...]
    steps: tuple[Step, ...]

    @property
    def copied_bytes(self) -> int:
        """The compressed bytes of the row groups copied as they are (patched chunks aside)."""
        return sum(c.size - c.patched_size for c in self.choices if c.copy)

    def __post_init__(self) -> None:
        for before, after in zip(self.steps, self.steps[1:], strict=False):
            if isinstance(before, Reencode) and isinstance(after, Reencode):
                raise ValueError("two re-encode steps follow each other")


def _file_reason(
    source: Source, meta: bytes, output: OutputSchema, patchable: frozenset[str]
) -> tuple[tuple[Reason, str] | None, tuple[int, ...]]:
    """Why none of the source's row groups may be copied, if so, and the leaf columns their
    copies re-encode (none when the schemas are equal)."""
    if source.has_deletion_vector:
        return (Reason.DELETION_VECTOR, ""), ()
    fields = spans(meta)
    if fields.keys() & set(FILE_ENCRYPTION):
        return (Reason.ENCRYPTED, "FileMetaData"), ()
    unknown = unknown_fields(meta, "FileMetaData", unwalked=frozenset((FILE_ROW_GROUPS,)))
    if unknown:
        return (Reason.UNKNOWN_FIELD, ", ".join(unknown)), ()
    schema = OutputSchema.of_metadata(meta)
    if schema == output:
        return None, ()
    patched = _storage_differs(schema, output, patchable)
    return ((Reason.SCHEMA, ""), ()) if patched is None else (None, patched)


_TYPE: Final = 1
_TYPE_LENGTH: Final = 2
_NUM_CHILDREN: Final = 5
_LOGICAL_TYPE: Final = 10
_DECIMAL: Final = 5  # LogicalType's member
_DECIMAL_STORAGE: Final = frozenset((1, 2, 7))  # INT32, INT64, FIXED_LEN_BYTE_ARRAY
_REPEATED: Final = 2


def _storage_differs(
    schema: OutputSchema, output: OutputSchema, patchable: frozenset[str]
) -> tuple[int, ...] | None:
    """The leaf columns, by index, in which ``schema`` differs from ``output``, when it differs
    only in the storage of top-level decimal columns named in ``patchable``; else None."""
    if schema.column_orders != output.column_orders or len(schema.elements) != len(output.elements):
        return None
    patched: list[int] = []
    leaf = 0
    remaining = [_children(output.elements[0]) or 0]  # children left to see, per open group
    for index in range(1, len(output.elements)):
        ours, theirs = schema.elements[index], output.elements[index]
        top = len(remaining) == 1
        remaining[-1] -= 1
        children = _children(theirs)
        if ours != theirs:
            if not (top and children is None and _decimal_storage(ours, theirs, patchable)):
                return None
            patched.append(leaf)
        if children is None:
            leaf += 1
        else:
            remaining.append(children)
        while len(remaining) > 1 and remaining[-1] <= 0:
            remaining.pop()
    return tuple(patched)


def _children(element: _Element) -> int | None:
    """A schema element's number of children, None for a leaf."""
    for field, _, value in element:
        if field == _NUM_CHILDREN:
            return read_integer(value, 0)[0]
    return None


def _decimal_storage(ours: _Element, theirs: _Element, patchable: frozenset[str]) -> bool:
    """Whether two leaves differ only in their decimal storage (type and type length), and
    the leaf is named in ``patchable`` and not repeated."""
    a, b = {f[0]: f for f in ours}, {f[0]: f for f in theirs}
    storage = {_TYPE, _TYPE_LENGTH}
    if {k: v for k, v in a.items() if k not in storage} != {
        k: v for k, v in b.items() if k not in storage
    }:
        return False
    name, logical = a.get(SCHEMA_NAME), a.get(_LOGICAL_TYPE)
    repetition = a.get(SCHEMA_REPETITION)
    return (
        name is not None
        and read_binary(name[2], 0)[0].decode("utf-8", "replace") in patchable
        and logical is not None
        and spans(logical[2]).keys() == {_DECIMAL}
        and (repetition is None or read_integer(repetition[2], 0)[0] != _REPEATED)
        and all(_TYPE in f and read_integer(f[_TYPE][2], 0)[0] in _DECIMAL_STORAGE for f in (a, b))
    )


def _codecs(chunks: Sequence[bytes]) -> set[int | None]:
    """The codecs (Parquet's enum) of column chunks, None for one without metadata."""
    found: set[int | None] = set()
    for chunk in chunks:
        meta = spans(chunk).get(CHUNK_META)
        fields = None if meta is None else spans(chunk, meta[3])
        found.add(None if fields is None else integer_field(chunk, fields, META_CODEC))
    return found


def _group_reason(
    group: bytes, min_copy_row_group: int, codec: int | None, patched: tuple[int, ...]
) -> tuple[int, tuple[int, int] | None, Reason | None, str]:
    """A row group's compressed size, where its chunks lie if it may be copied (with its
    ``patched`` columns re-encoded), and else why not."""
    fields = spans(group)
    chunks = struct_list(group, fields[GROUP_COLUMNS][3])[0] if GROUP_COLUMNS in fields else []
    size = integer_field(group, fields, GROUP_COMPRESSED_SIZE) or 0
    if any(spans(chunk).keys() & set(CHUNK_ENCRYPTION) for chunk in chunks):
        return size, None, Reason.ENCRYPTED, "ColumnChunk"
    unknown = unknown_fields(group, "RowGroup")
    if unknown:
        return size, None, Reason.UNKNOWN_FIELD, ", ".join(unknown)
    try:
        start, stop = row_group_span(group)
    except ValueError as exc:
        return size, None, Reason.LAYOUT, str(exc)
    if patched and patched[-1] >= len(chunks):
        return size, None, Reason.LAYOUT, f"{len(chunks)} column chunks, column {patched[-1]}"
    if stop - start < min_copy_row_group:
        return stop - start, None, Reason.SMALL, f"{stop - start} < {min_copy_row_group} bytes"
    kept = [chunk for i, chunk in enumerate(chunks) if i not in patched]
    if codec is not None and _codecs(kept) != {codec}:
        return stop - start, None, Reason.CODEC, f"not all codec {codec}"
    return stop - start, (start, stop), None, ""


def _patched_size(group: bytes, patched: tuple[int, ...]) -> int:
    """The compressed bytes of the ``patched`` columns' chunks of a row group to copy."""
    found = chunk_spans(group)
    return sum(found[i][1] - found[i][0] for i in patched)


def plan_copy(
    sources: Sequence[Source],
    output: OutputSchema,
    min_copy_row_group: int,
    *,
    codec: int | None = None,
    patchable: frozenset[str] = frozenset(),
) -> CopyPlan:
    """Decide, per row group of ``sources`` (in write order), copy or re-encode, and the
    steps that write the output (see the module docstring).

    Args:
        sources: the bin's sources in write order.
        output: the Parquet schema the output is written with.
        min_copy_row_group: the least compressed bytes of a row group worth copying (the
            policy's, ``rlcd.compaction.policy.DEFAULT_MIN_COPY_ROW_GROUP`` by default).
        codec: the one codec (Parquet's enum) a copied row group's column chunks may have;
            None: any (a copied row group keeps its codecs).
        patchable: the top-level columns whose decimal storage a copy may re-encode.

    Raises:
        ValueError: a footer does not parse (a corrupt file: the bin cannot proceed).
    """
    choices: list[Choice] = []
    steps: list[Step] = []
    for index, source in enumerate(sources):
        meta = metadata(source.footer)
        fields = spans(meta)
        if FILE_ROW_GROUPS not in fields:
            raise ValueError(f"source {index}'s footer has no row groups")
        groups = struct_list(meta, fields[FILE_ROW_GROUPS][3])[0]
        whole, patched = _file_reason(source, meta, output, patchable)
        for number, group in enumerate(groups):
            rows = integer_field(group, spans(group), GROUP_NUM_ROWS)
            if rows is None:
                raise ValueError(f"source {index}'s row group {number} has no row count")
            size, span, reason, detail = _group_reason(group, min_copy_row_group, codec, patched)
            if whole is not None:
                span, (reason, detail) = None, whole
            elif span is not None and patched and not rows:  # no writer writes 0 rows
                span, reason, detail = None, Reason.SCHEMA, "no rows to patch"
            if span is None:
                choices.append(Choice(index, number, rows, size, reason, detail))
                steps.append(Reencode((Run(index, number, number + 1, rows),)))
                continue
            detail = f"{Reason.STORAGE}: columns {list(patched)}" if patched else ""
            patched_size = _patched_size(group, patched)
            choices.append(Choice(index, number, rows, size, None, detail, patched, patched_size))
            steps.append(Copy(index, number, rows, *span, group, patched))
    return CopyPlan(tuple(choices), _merged(steps))


def choose_plan(
    sources: Sequence[Source],
    outputs: Sequence[OutputSchema],
    min_copy_row_group: int,
    *,
    codec: int | None = None,
    patchable: frozenset[str] = frozenset(),
) -> tuple[int, CopyPlan]:
    """Of the schemas the output's writer can write (``outputs``, the preferred first), the
    index of the one under which :func:`plan_copy` copies the most compressed bytes of
    ``sources``, and its plan; on a tie, the earliest (so with nothing to copy, the first).

    Raises:
        ValueError: ``outputs`` is empty, or a footer does not parse.
    """
    if not outputs:
        raise ValueError("no output schema to plan for")
    plan_for = partial(
        plan_copy, sources, min_copy_row_group=min_copy_row_group, codec=codec, patchable=patchable
    )
    chosen, best = 0, plan_for(outputs[0])
    for index in range(1, len(outputs)):
        if outputs[index] in outputs[:index]:  # the same schema plans the same
            continue
        plan = plan_for(outputs[index])
        if plan.copied_bytes > best.copied_bytes:
            chosen, best = index, plan
    return chosen, best


def _merged(steps: list[Step]) -> tuple[Step, ...]:
    """``steps`` with re-encode steps that follow each other joined, and a source's row
    groups that follow each other within one step joined into one run."""
    out: list[Step] = []
    for step in steps:
        last = out[-1] if out else None
        if not (isinstance(step, Reencode) and isinstance(last, Reencode)):
            out.append(step)
            continue
        runs = list(last.runs)
        for run in step.runs:
            tail = runs[-1]
            if tail.source == run.source and tail.stop == run.first:
                runs[-1] = Run(tail.source, tail.first, run.stop, tail.rows + run.rows)
            else:
                runs.append(run)
        out[-1] = Reencode(tuple(runs))
    return tuple(out)


def inexact_statistics(group: bytes) -> frozenset[int]:
    """The columns, by index, of the thrift ``RowGroup`` ``group`` whose min and max a reader
    may not take as the exact bounds of their values: marked inexact (truncated by their
    writer), or held only in the deprecated ``min``/``max`` fields, whose order depends on the
    writer's version. A column without statistics is not listed (it has no bounds at all).

    Raises:
        ValueError: the struct does not parse.
    """
    fields = spans(group)
    chunks = struct_list(group, fields[GROUP_COLUMNS][3])[0] if GROUP_COLUMNS in fields else []
    inexact = set()
    for index, chunk in enumerate(chunks):
        meta = spans(chunk).get(CHUNK_META)
        stats = None if meta is None else spans(chunk, meta[3]).get(META_STATISTICS)
        if stats is None:
            continue
        found = spans(chunk, stats[3])
        if not set(STATS_VALUES) <= found.keys() or any(
            found[field][1] == FALSE for field in STATS_EXACT if field in found
        ):
            inexact.add(index)
    return frozenset(inexact)
