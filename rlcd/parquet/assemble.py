"""One Parquet file of copied and re-encoded row groups: its pieces in order and its footer,
and the check of the footer as pyarrow reads it back (pure: footers in, byte ranges out).

The copied row groups are byte ranges of their sources (``copy_plan.Copy``); the re-encoded
ones were written, in the plan's order, by one Parquet writer into a file of their own (the
*encoded* file), each re-encode step ending a row group. :func:`assemble` lays the output
out: the magic, then each step's bytes (a source's range, or the encoded file's row groups),
then a footer that is the encoded file's (its version, schema, key-value metadata,
``created_by`` and column orders: what rlcd writes today) with its row groups replaced by
every step's, each entry moved to where its chunks now lie (``_format.row_group_edits``) and
its ordinal dropped (pyarrow writes one, parquet-rs none, and parquet-rs refuses a file
where only some row groups have one; only encryption needs it), statistics and all else
kept. Page indexes and bloom filters lie outside a row group's chunks and are not carried,
so their references are dropped. With nothing to re-encode, the encoded file is the
writer's empty file: it still gives the footer.

A row group copied with patches (``Copy.patched``) is laid out a column chunk at a time: each
patched column's chunk comes from the *patches* file, where the caller wrote, in the plan's
order, one row group of those columns per such step (:class:`Patch`, from a file of its own
written with the output's settings, whose schema must be the output's for those columns), each
other chunk from its source; the entry is the source's with those chunks' entries swapped in,
every chunk moved, and its sizes and offset made again.

The IO that copies the pieces is the caller's. Before the output is used, :func:`check_output`
parses the footer read back from it with pyarrow and holds it to the assembly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeAlias

import pyarrow as pa

from rlcd.errors import InternalError
from rlcd.parquet._format import (
    CHUNK_META,
    FILE_NUM_ROWS,
    FILE_ROW_GROUPS,
    GROUP_COLUMNS,
    GROUP_COMPRESSED_SIZE,
    GROUP_FILE_OFFSET,
    GROUP_NUM_ROWS,
    GROUP_ORDINAL,
    GROUP_TOTAL_SIZE,
    META_UNCOMPRESSED_SIZE,
    chunk_edits,
    chunk_spans,
    integer_field,
    row_group_edits,
    row_group_span,
    spans,
    unknown_fields,
)
from rlcd.parquet._thrift import (
    STOP,
    STRUCT,
    Drop,
    edit_struct,
    integer,
    list_header,
    read_integer,
    struct_list,
)
from rlcd.parquet.copy_plan import Copy, CopyPlan, OutputSchema, metadata
from rlcd.parquet.footer import MAGIC, parse_footer

__all__ = (
    "SourceRange",
    "EncodedRange",
    "PatchRange",
    "Piece",
    "Patch",
    "patch_footer",
    "Assembly",
    "assemble",
    "check_output",
)
__pure__ = True

_TEMPLATE_FIELDS: Final = frozenset(range(1, 8))
"""The FileMetaData fields an encoded file's footer may carry into the output's: version,
schema, row count, row groups, key-value metadata, created_by, column orders."""


@dataclass(frozen=True, slots=True)
class SourceRange:
    """The bytes ``[start, stop)`` of source ``source``."""

    source: int
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class EncodedRange:
    """The bytes ``[start, stop)`` of the encoded file."""

    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class PatchRange:
    """The bytes ``[start, stop)`` of the patches file."""

    start: int
    stop: int


Piece: TypeAlias = bytes | SourceRange | EncodedRange | PatchRange
"""A piece of the output: bytes as they are (the magic, the footer), or a range to copy."""
_Range: TypeAlias = SourceRange | EncodedRange | PatchRange


@dataclass(frozen=True, slots=True)
class Patch:
    """The patched columns of one row group: the footer span of the file a writer of the
    output's settings wrote them into (one row group), whose column chunks the caller put at
    ``at`` in the patches file (the bytes between the file's magic and its footer)."""

    footer: bytes
    at: int

    def row_group(self) -> bytes:
        """The file's one ``RowGroup`` entry (its offsets into the file written apart).

        Raises:
            ValueError: the footer does not parse or holds other than one row group.
        """
        meta = metadata(self.footer)
        fields = spans(meta)
        if FILE_ROW_GROUPS not in fields:
            raise ValueError("a patch's footer has no row groups")
        found = struct_list(meta, fields[FILE_ROW_GROUPS][3])[0]
        if len(found) != 1:
            raise ValueError(f"a patch of {len(found)} row groups")
        return found[0]


def patch_footer(template: bytes, group: bytes) -> bytes:
    """The footer span of a patch's file made without its writer (``rlcd.parquet.transcode``):
    ``template``, the footer span of the file that writer writes without a row group, holding
    the ``RowGroup`` entry ``group`` alone.

    Raises:
        ValueError: the template or the entry does not parse.
    """
    rows = integer_field(group, spans(group), GROUP_NUM_ROWS)
    if rows is None:
        raise ValueError("a patch's row group without a row count")
    return _footer(metadata(template), rows, [group])


@dataclass(frozen=True, slots=True)
class Assembly:
    """The output's pieces in order (the magic first, the footer span last), its size, the
    rows of each of its row groups, and the encoded file's footer span, whose schema the
    output's must be."""

    pieces: tuple[Piece, ...]
    size: int
    row_groups: tuple[int, ...]
    template: bytes

    @property
    def footer(self) -> bytes:
        """The output's footer span: metadata, its length, the magic."""
        footer = self.pieces[-1]
        assert isinstance(footer, bytes)
        return footer

    @property
    def num_rows(self) -> int:
        """The rows the output holds."""
        return sum(self.row_groups)


class _Layout:
    """The output as it is laid out: pieces, row group entries, the position reached."""

    def __init__(self) -> None:
        self.pieces: list[Piece] = [MAGIC]
        self.groups: list[bytes] = []
        self.rows: list[int] = []
        self.position = len(MAGIC)

    def add(self, piece: SourceRange | EncodedRange, group: bytes, rows: int) -> None:
        """Append a row group: its bytes, and its footer entry (moved from ``piece.start``)."""
        edits = {
            **row_group_edits(self.position - piece.start, len(self.groups), drop_indexes=True),
            GROUP_ORDINAL: Drop.FIELD,
        }
        self.groups.append(edit_struct(group, 0, edits)[0])
        self.rows.append(rows)
        self._append(piece)

    def add_patched(self, step: Copy, patch: bytes, shift: int) -> None:
        """Append a row group copied with patches: each chunk from its source, or for a
        patched column from the patches file, whose ``RowGroup`` entry ``patch`` holds those
        columns' chunks in order (its offsets into the file written apart, which lies at
        ``shift`` of the patches file)."""
        chunks, found = _chunks(step.group), chunk_spans(step.group)
        patches, patch_spans = _chunks(patch), chunk_spans(patch)
        if len(patches) != len(step.patched):
            raise InternalError(f"a patch of {len(patches)} columns for {len(step.patched)}")
        start, moved, uncompressed = self.position, [], 0
        for column, (chunk, (first, stop)) in enumerate(zip(chunks, found, strict=True)):
            piece: _Range = SourceRange(step.source, first, stop)
            if column in step.patched:
                k = step.patched.index(column)
                uncompressed += _chunk_size(patches[k], META_UNCOMPRESSED_SIZE)
                uncompressed -= _chunk_size(chunk, META_UNCOMPRESSED_SIZE)
                chunk, (first, stop) = patches[k], patch_spans[k]
                piece = PatchRange(first + shift, stop + shift)
            edits = chunk_edits(self.position - first, drop_indexes=True)
            moved.append(edit_struct(chunk, 0, edits)[0])
            self._append(piece)
        group = _with_chunks(step.group, moved, uncompressed, self.position - start)
        edits = {GROUP_FILE_OFFSET: lambda _: start, GROUP_ORDINAL: Drop.FIELD}
        self.groups.append(edit_struct(group, 0, edits)[0])
        self.rows.append(step.rows)

    def _append(self, piece: _Range) -> None:
        self.position += piece.stop - piece.start
        joined = _joined(self.pieces[-1], piece)
        if joined is None:
            self.pieces.append(piece)
        else:
            self.pieces[-1] = joined


def _joined(last: Piece, piece: _Range) -> Piece | None:
    """``last`` and ``piece`` as one range, when ``piece`` continues ``last`` in its file."""
    if type(last) is not type(piece) or isinstance(last, bytes) or last.stop != piece.start:
        return None
    if isinstance(last, SourceRange) and isinstance(piece, SourceRange):
        return replace(last, stop=piece.stop) if last.source == piece.source else None
    return replace(last, stop=piece.stop)


def _chunks(group: bytes) -> list[bytes]:
    return struct_list(group, spans(group)[GROUP_COLUMNS][3])[0]


def _chunk_size(chunk: bytes, field: int) -> int:
    """A size field of a column chunk's metadata (0 when absent)."""
    meta = spans(chunk)[CHUNK_META]
    return integer_field(chunk, spans(chunk, meta[3]), field) or 0


def _with_chunks(group: bytes, chunks: list[bytes], uncompressed: int, size: int) -> bytes:
    """The ``RowGroup`` ``group`` with ``chunks`` for its column chunks: its total byte size
    grown by ``uncompressed`` and its compressed size ``size``, where it has them."""
    out: list[bytes] = []
    for field, _, start, value, end in spans(group).values():
        if field == GROUP_COLUMNS:
            out += (group[start:value], list_header(STRUCT, len(chunks)), *chunks)
        elif field == GROUP_TOTAL_SIZE:
            out += (group[start:value], integer(read_integer(group, value)[0] + uncompressed))
        elif field == GROUP_COMPRESSED_SIZE:
            out += (group[start:value], integer(size))
        else:
            out.append(group[start:end])
    return b"".join((*out, bytes((STOP,))))


def _patch_groups(
    patches: Sequence[Patch], plan: CopyPlan, template: bytes
) -> list[tuple[bytes, int]]:
    """Each patch's ``RowGroup`` entry and how far its chunks moved into the patches file,
    once its schema is held to the output's for the step's columns, its rows to the step's,
    and its chunks' layout found one this package moves.

    Raises:
        InternalError: a patch does not fit its step.
    """
    steps = [s for s in plan.steps if isinstance(s, Copy) and s.patched]
    if len(steps) != len(patches):
        raise InternalError(f"{len(patches)} patches for {len(steps)} patched row groups")
    leaves = OutputSchema.of(template).leaves()
    groups = []
    for step, patch in zip(steps, patches, strict=True):
        try:
            group = patch.row_group()
            schema = OutputSchema.of(patch.footer).leaves()
            rows = integer_field(group, spans(group), GROUP_NUM_ROWS)
            chunk_spans(group)
        except ValueError as exc:
            raise InternalError(f"a patch's footer: {exc}") from exc
        if schema != tuple(leaves[column] for column in step.patched):
            raise InternalError("a patch's columns are not stored as the output's")
        if rows != step.rows:
            raise InternalError(f"a patch of {rows} rows for a row group of {step.rows}")
        groups.append((group, patch.at - len(MAGIC)))
    return groups


def _encoded_groups(encoded_footer: bytes, encoded_size: int) -> list[tuple[bytes, int, int, int]]:
    """The encoded file's row groups: each entry, its rows, and where its chunks lie.

    Raises:
        InternalError: its footer is not one rlcd's writer writes.
    """
    try:
        meta = metadata(encoded_footer)
        unknown = unknown_fields(meta, "FileMetaData")
        fields = spans(meta)
        if unknown or not fields.keys() <= _TEMPLATE_FIELDS:
            raise ValueError(f"fields rlcd does not write: {unknown or sorted(fields)}")
        groups = []
        for group in struct_list(meta, fields[FILE_ROW_GROUPS][3])[0]:
            start, stop = row_group_span(group)
            rows = integer_field(group, spans(group), GROUP_NUM_ROWS)
            if rows is None or start < len(MAGIC) or stop > encoded_size - len(encoded_footer):
                raise ValueError(f"a row group at {start}:{stop} of {rows} rows")
            groups.append((group, rows, start, stop))
    except (ValueError, KeyError) as exc:
        raise InternalError(f"the encoded file's footer: {exc}") from exc
    return groups


def _footer(template: bytes, rows: int, groups: list[bytes]) -> bytes:
    """The footer span of ``template``'s metadata with ``rows`` rows in ``groups``."""
    out: list[bytes] = []
    for field, _, start, value, end in spans(template).values():
        if field == FILE_NUM_ROWS:
            out += (template[start:value], integer(rows))
        elif field == FILE_ROW_GROUPS:
            out += (template[start:value], list_header(STRUCT, len(groups)), *groups)
        else:
            out.append(template[start:end])
    meta = b"".join((*out, bytes((STOP,))))
    return meta + len(meta).to_bytes(4, "little") + MAGIC


def assemble(
    plan: CopyPlan, encoded_footer: bytes, encoded_size: int, patches: Sequence[Patch] = ()
) -> Assembly:
    """Lay out the output of ``plan`` (see the module docstring).

    Args:
        plan: the bin's plan.
        encoded_footer: the encoded file's footer span (metadata, length, magic).
        encoded_size: the encoded file's size in bytes.
        patches: the patched columns of each row group the plan copies with patches, in order.

    Raises:
        InternalError: the encoded file does not hold the re-encode steps' rows in row groups
            that end where each step ends, or a patch does not fit its row group.
    """
    encoded = _encoded_groups(encoded_footer, encoded_size)
    patched = iter(_patch_groups(patches, plan, encoded_footer))
    layout, taken = _Layout(), 0
    for step in plan.steps:
        if isinstance(step, Copy) and step.patched:
            layout.add_patched(step, *next(patched))
            continue
        if isinstance(step, Copy):
            layout.add(SourceRange(step.source, step.start, step.stop), step.group, step.rows)
            continue
        rows = 0
        while rows < step.rows and taken < len(encoded):
            group, group_rows, start, stop = encoded[taken]
            layout.add(EncodedRange(start, stop), group, group_rows)
            rows, taken = rows + group_rows, taken + 1
        if rows != step.rows:
            raise InternalError(f"a re-encode step of {step.rows} rows was encoded as {rows}")
    if taken != len(encoded):
        raise InternalError(f"the encoded file holds {len(encoded) - taken} row groups more")
    footer = _footer(metadata(encoded_footer), sum(layout.rows), layout.groups)
    return Assembly(
        pieces=(*layout.pieces, footer),
        size=layout.position + len(footer),
        row_groups=tuple(layout.rows),
        template=encoded_footer,
    )


def check_output(assembly: Assembly, footer: bytes, size: int) -> None:
    """Hold an output, as pyarrow reads the footer span read back from its end and its size
    as stored, to its assembly: the encoded file's schema (and Arrow schema), the rows of
    every row group and in all, and column chunks that lie one after another from the magic
    to the footer.

    Raises:
        InternalError: pyarrow cannot parse it, or it differs from the assembly in any of
            these.
    """
    try:
        read, expected = parse_footer(footer), parse_footer(assembly.template)
    except (pa.ArrowException, OSError) as exc:  # thrift's errors come as OSError
        raise InternalError(f"an output's footer does not parse: {exc}") from exc
    if not read.schema.equals(expected.schema) or not read.schema.to_arrow_schema().equals(
        expected.schema.to_arrow_schema(), check_metadata=True
    ):
        raise InternalError("an output's schema is not the one it was written with")
    rows = tuple(read.row_group(i).num_rows for i in range(read.num_row_groups))
    if rows != assembly.row_groups or read.num_rows != assembly.num_rows:
        raise InternalError(
            f"an output holds row groups of {rows} rows ({read.num_rows} in all),"
            f" the plan {assembly.row_groups} ({assembly.num_rows})"
        )
    position = len(MAGIC)
    for i in range(read.num_row_groups):
        group = read.row_group(i)
        for j in range(group.num_columns):
            chunk = group.column(j)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            start = chunk.data_page_offset if start is None else start
            if start != position:
                raise InternalError(f"row group {i} column {j} starts at {start}, not {position}")
            position += chunk.total_compressed_size
    if size != assembly.size or position != size - len(footer):
        raise InternalError(
            f"an output of {size} bytes (planned {assembly.size}) has its chunks end at"
            f" {position} and a footer of {len(footer)} bytes"
        )
